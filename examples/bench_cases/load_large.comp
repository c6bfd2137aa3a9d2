#version 450
// The "large" kernel of the bench's `load` case: a few stages of a real
// sorting pipeline in one module, with several functions, shared memory,
// atomics and loops (3.2 KB of SPIR-V, five times `VECTOR_ADD`). Each workgroup of 256
// invocations sorts 1024 keys (each XORed with specialization constant
// SALT) in shared memory with a bitonic network, writes them back, builds
// a 256-bin histogram of their low bytes, and writes the histogram's
// exclusive prefix sum. The `load` case loads it with a different SALT
// each time (no cache can answer), so only the load is timed.
//
// Its SPIR-V, load_large.spv beside it, is what shaderc makes of it for
// Vulkan 1.2 at optimization level Performance (vkcompute's
// `build::compile_glsl`); recompile it with that when this file changes.

layout(local_size_x = 256) in;
layout(constant_id = 1) const uint SALT = 0u;

layout(std430, binding = 0) buffer Keys { uint keys[]; };
layout(std430, binding = 1) buffer Offsets { uint offsets[]; };

shared uint tile[1024];
shared uint bins[256];

void compare_exchange(uint a, uint b, bool up) {
    uint x = tile[a];
    uint y = tile[b];
    if ((x > y) == up) {
        tile[a] = y;
        tile[b] = x;
    }
}

void bitonic_sort(uint lane) {
    for (uint size = 2u; size <= 1024u; size <<= 1u) {
        for (uint stride = size >> 1u; stride > 0u; stride >>= 1u) {
            for (uint k = lane; k < 512u; k += 256u) {
                uint low = 2u * k - (k & (stride - 1u));
                uint high = low + stride;
                bool up = ((low & size) == 0u);
                compare_exchange(low, high, up);
            }
            barrier();
        }
    }
}

void histogram(uint lane, uint base) {
    bins[lane] = 0u;
    barrier();
    for (uint k = lane; k < 1024u; k += 256u) {
        atomicAdd(bins[tile[k] & 255u], 1u);
    }
    barrier();
}

void exclusive_scan(uint lane) {
    uint own = bins[lane];
    for (uint step = 1u; step < 256u; step <<= 1u) {
        uint add = lane >= step ? bins[lane - step] : 0u;
        barrier();
        bins[lane] += add;
        barrier();
    }
    bins[lane] -= own;
    barrier();
}

void main() {
    uint lane = gl_LocalInvocationID.x;
    uint base = gl_WorkGroupID.x * 1024u;
    for (uint k = lane; k < 1024u; k += 256u) {
        tile[k] = keys[base + k] ^ SALT;
    }
    barrier();
    bitonic_sort(lane);
    for (uint k = lane; k < 1024u; k += 256u) {
        keys[base + k] = tile[k];
    }
    histogram(lane, base);
    exclusive_scan(lane);
    offsets[gl_WorkGroupID.x * 256u + lane] = bins[lane];
}
