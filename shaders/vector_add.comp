#version 450
// c[i] = a[i] + b[i] for i < n. The workgroup size is specialization
// constant 0 (default 64): set it when the kernel is loaded.

layout(local_size_x = 64, local_size_x_id = 0) in;

layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer C { float c[]; };

layout(push_constant) uniform Params {
    uint n;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) {
        c[i] = a[i] + b[i];
    }
}
