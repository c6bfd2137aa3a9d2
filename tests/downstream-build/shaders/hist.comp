#version 450
// A histogram of `values` into 16 bins: counts in shared memory with
// atomics, then added to a fixed-size storage block (a typed
// `DeviceBuffer<hist::Counters>` on the host, std430).
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Values { uint values[]; };
layout(std430, binding = 1) buffer Counters { uint total; uint bins[16]; } counters;
layout(push_constant) uniform Push { uint n; } push;
shared uint local_bins[16];
void main() {
    uint l = gl_LocalInvocationID.x;
    if (l < 16u) local_bins[l] = 0u;
    barrier();
    uint i = gl_GlobalInvocationID.x;
    if (i < push.n) {
        atomicAdd(local_bins[values[i] % 16u], 1u);
        atomicAdd(counters.total, 1u);
    }
    barrier();
    if (l < 16u) atomicAdd(counters.bins[l], local_bins[l]);
}
