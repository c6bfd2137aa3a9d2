#version 450
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
// The bulk of vkcompute-mpi's reductions for int64_t (i64), in groups
// of four elements: acc[i] = acc[i] OP incoming[i] for i < n, where acc
// and incoming are bound as i64vec4 (n counts i64vec4s) and OP
// (specialization constant 0) is 0 sum, 1 product, 2 minimum, 3 maximum,
// element by element. Each invocation does UNROLL consecutive vectors:
// on lavapipe the cost is per invocation more than per byte (32 MiB of
// f32, one process on the 2-core VM: scalar kernel 52-63 ms, one vec4 per
// invocation 20-35 ms, two or four 14.5-16.5 ms). reduce_i64 does the
// last one to three elements of a length that is not a multiple of four.
// Integer sums and products wrap. Grid-stride: any number of workgroups
// covers any n. (One file per element type; they differ only in the types
// and, for the 64-bit integers, the extension.)

layout(local_size_x = 256) in;
layout(constant_id = 0) const uint OP = 0u;
const uint UNROLL = 4u;

layout(std430, set = 0, binding = 0) buffer Accumulator { i64vec4 acc[]; };
layout(std430, set = 0, binding = 1) readonly buffer Incoming { i64vec4 incoming[]; };

layout(push_constant) uniform Params {
    uint n;
} p;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x * UNROLL;
    for (uint first = gl_GlobalInvocationID.x * UNROLL; first < p.n; first += stride) {
        for (uint k = 0u; k < UNROLL; k++) {
            uint i = first + k;
            if (i < p.n) {
                i64vec4 a = acc[i];
                i64vec4 b = incoming[i];
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
    }
}
