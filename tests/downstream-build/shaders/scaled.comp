#version 450
// data[i] = data[i] * factor + shift.z, its parameters in a uniform block
// (std140: `shift` at byte 16).
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { float data[]; };
layout(std140, binding = 1) uniform Scale { float factor; vec3 shift; uint n; } scale;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < scale.n) data[i] = data[i] * scale.factor + scale.shift.z;
}
