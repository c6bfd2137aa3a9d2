#version 450
// The same-node reductions of vkcompute-mpi for int (i32): acc[i] =
// acc[i] OP p0[i] OP p1[i] ... for i < n, with the first COUNT
// (specialization constant 1: 1, 2 or 3) of the operands p0, p1, p2, each
// in a binding of its own (other ranks' memories, which are separate
// buffers: reduce4_i32 takes its operands from one binding at a stride).
// acc and the operands are bound as ivec4 (n counts ivec4s); a binding
// past COUNT is bound all the same and never read. OP (specialization
// constant 0) is 0 sum, 1 product, 2 minimum, 3 maximum, element by
// element, applied from the left; integer sums and products wrap. One pass
// reads and writes acc once for up to three operands, where a pass per
// operand would read and write it once each. Four storage buffers: the
// least maxPerStageDescriptorStorageBuffers any device has. Each
// invocation does UNROLL consecutive vectors, grid-stride, as reduce4_i32;
// reduce_i32 does the last one to three elements of a length that is not
// a multiple of four. (One file per element type; they differ only in the
// types and, for the 64-bit integers, the extension.)

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;
layout(constant_id = 1) const uint COUNT = 1u;
const uint UNROLL = 4u;

layout(std430, set = 0, binding = 0) buffer Accumulator { ivec4 acc[]; };
layout(std430, set = 0, binding = 1) readonly buffer Operand0 { ivec4 p0[]; };
layout(std430, set = 0, binding = 2) readonly buffer Operand1 { ivec4 p1[]; };
layout(std430, set = 0, binding = 3) readonly buffer Operand2 { ivec4 p2[]; };

layout(push_constant) uniform Params {
    uint n;
} p;

ivec4 apply(ivec4 a, ivec4 b) {
    if (OP == 0u) {
        return a + b;
    } else if (OP == 1u) {
        return a * b;
    } else if (OP == 2u) {
        return min(a, b);
    }
    return max(a, b);
}

void main() {
    uint step = gl_NumWorkGroups.x * gl_WorkGroupSize.x * UNROLL;
    for (uint first = gl_GlobalInvocationID.x * UNROLL; first < p.n; first += step) {
        for (uint k = 0u; k < UNROLL; k++) {
            uint i = first + k;
            if (i < p.n) {
                ivec4 a = apply(acc[i], p0[i]);
                if (COUNT > 1u) {
                    a = apply(a, p1[i]);
                }
                if (COUNT > 2u) {
                    a = apply(a, p2[i]);
                }
                acc[i] = a;
            }
        }
    }
}
