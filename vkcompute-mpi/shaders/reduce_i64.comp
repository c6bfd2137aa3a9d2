#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// The arithmetic of vkcompute-mpi's reductions for int64_t (i64):
// acc[i] = acc[i] OP incoming[i] for first <= i < n, where OP (specialization
// constant 0) is 0 sum, 1 product, 2 minimum, 3 maximum. Integer sums and
// products wrap. Grid-stride: any number of workgroups covers any n.
// (One file per element type; they differ only in the type and, for the
// 64-bit integers, the extension line.)

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;

layout(std430, set = 0, binding = 0) buffer Accumulator { int64_t acc[]; };
layout(std430, set = 0, binding = 1) readonly buffer Incoming { int64_t incoming[]; };

layout(push_constant) uniform Params {
    uint first;
    uint n;
} p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = p.first + gl_GlobalInvocationID.x; i < p.n; i += stride) {
        int64_t a = acc[i];
        int64_t b = incoming[i];
        if (OP == 0u) {
            acc[i] = a + b;
        } else if (OP == 1u) {
            acc[i] = a * b;
        } else if (OP == 2u) {
            acc[i] = min(a, b);
        } else {
            acc[i] = max(a, b);
        }
    }
}
