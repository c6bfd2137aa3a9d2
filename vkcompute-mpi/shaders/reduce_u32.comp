#version 450
// The arithmetic of vkcompute-mpi's reductions for uint (u32):
// acc[i] = acc[i] OP incoming[i] for first <= i < n, where OP (specialization
// constant 0) is 0 sum, 1 product, 2 minimum, 3 maximum. Integer sums and
// products wrap. Grid-stride: any number of workgroups covers any n.
// (One file per element type; they differ only in the type and, for the
// 64-bit integers, the extension line.)

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;

layout(std430, set = 0, binding = 0) buffer Accumulator { uint acc[]; };
layout(std430, set = 0, binding = 1) readonly buffer Incoming { uint incoming[]; };

layout(push_constant) uniform Params {
    uint first;
    uint n;
} p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = p.first + gl_GlobalInvocationID.x; i < p.n; i += stride) {
        uint a = acc[i];
        uint b = incoming[i];
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
