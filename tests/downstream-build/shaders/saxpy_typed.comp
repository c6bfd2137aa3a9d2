#version 450
// y = FACTOR * a * x + y (FACTOR is 2.0 for this shader, by build.rs).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { float x[]; };
layout(std430, binding = 1) buffer Y { float y[]; };
layout(push_constant) uniform Params { float a; uint n; } params;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < params.n) y[i] = FACTOR * params.a * x[i] + y[i];
}
