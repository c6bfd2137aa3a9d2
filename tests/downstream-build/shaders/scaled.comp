#version 450
// data[i] = data[i] * factor + shift.z + weights[i % 3], its parameters in
// a uniform block (std140: `shift` at byte 16, and each of `weights` in a
// 16-byte slot: a `ScaleWeightsElement { value, _pad0 }` on the host).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { float data[]; };
layout(std140, binding = 1) uniform Scale { float factor; vec3 shift; uint n; float weights[3]; } scale;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < scale.n) data[i] = data[i] * scale.factor + scale.shift.z + scale.weights[i % 3u];
}
