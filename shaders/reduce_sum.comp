#version 450
// One pass of a parallel sum: workgroup g adds up elements g, g + G, g + 2G...
// of `values` (grid-stride, G = workgroups * 256) in shared memory and writes
// its total to partial[g]. Run it once over the input with many workgroups,
// then once over the partial sums with one workgroup.

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer Values { float values[]; };
layout(std430, set = 0, binding = 1) writeonly buffer Partial { float partial[]; };

layout(push_constant) uniform Params {
    uint n;
} p;

shared float sums[256];

void main() {
    uint stride = gl_NumWorkGroups.x * 256u;
    float sum = 0.0;
    for (uint i = gl_GlobalInvocationID.x; i < p.n; i += stride) {
        sum += values[i];
    }
    uint lane = gl_LocalInvocationID.x;
    sums[lane] = sum;
    barrier();
    for (uint width = 128u; width > 0u; width >>= 1u) {
        if (lane < width) {
            sums[lane] += sums[lane + width];
        }
        barrier();
    }
    if (lane == 0u) {
        partial[gl_WorkGroupID.x] = sums[0];
    }
}
