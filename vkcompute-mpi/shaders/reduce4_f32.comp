#version 450
// The bulk of vkcompute-mpi's reductions for float (f32), in groups
// of four elements: acc[i] = acc[i] OP in_0[i] OP in_1[i] ... OP
// in_(count-1)[i] for i < n, where acc and incoming are bound as vec4
// (n counts vec4s), operand j lies at incoming[j * stride + i], and OP
// (specialization constant 0) is 0 sum, 1 product, 2 minimum, 3 maximum,
// element by element, applied from the left. Each invocation does UNROLL
// consecutive vectors: on lavapipe the cost is per invocation more than
// per byte (32 MiB of f32, one process on the 2-core VM: scalar kernel
// 52-63 ms, one vec4 per invocation 20-35 ms, two or four 14.5-16.5 ms),
// which is also why several operands go in one pass (count) rather than
// one pass each. reduce_f32 does the last one to three elements of a
// length that is not a multiple of four. Integer sums and products wrap.
// Grid-stride: any number of workgroups covers any n. (One file per
// element type; they differ only in the types and, for the 64-bit
// integers, the extension.)

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;
const uint UNROLL = 4u;

layout(std430, set = 0, binding = 0) buffer Accumulator { vec4 acc[]; };
layout(std430, set = 0, binding = 1) readonly buffer Incoming { vec4 incoming[]; };

layout(push_constant) uniform Params {
    uint n;
    uint count;
    uint stride;
} p;

void main() {
    uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x * UNROLL;
    for (uint first = gl_GlobalInvocationID.x * UNROLL; first < p.n; first += step) {
        for (uint k = 0u; k < UNROLL; k++) {
            uint i = first + k;
            if (i < p.n) {
                vec4 a = acc[i];
                for (uint j = 0u; j < p.count; j++) {
                    vec4 b = incoming[j * p.stride + i];
                    if (OP == 0u) {
                        a = a + b;
                    } else if (OP == 1u) {
                        a = a * b;
                    } else if (OP == 2u) {
                        a = min(a, b);
                    } else {
                        a = max(a, b);
                    }
                }
                acc[i] = a;
            }
        }
    }
}
