#version 450
// C = alpha * A * B for row-major matrices: A is m x k, B is k x n, C is
// m x n. Each TILE x TILE workgroup computes one tile of C from tiles of A
// and B staged in shared memory; edges are padded with zeros, so any m, n,
// k work. Dispatch (ceil(n / TILE), ceil(m / TILE)) workgroups.

layout(local_size_x = TILE, local_size_y = TILE) in;

layout(std430, binding = 0) readonly buffer A { float a[]; };
layout(std430, binding = 1) readonly buffer B { float b[]; };
layout(std430, binding = 2) writeonly buffer C { float c[]; };

layout(push_constant) uniform Dims {
    uint m;
    uint n;
    uint k;
    float alpha;
} dims;

shared float tile_a[TILE][TILE];
shared float tile_b[TILE][TILE];

void main() {
    uint tx = gl_LocalInvocationID.x;
    uint ty = gl_LocalInvocationID.y;
    uint row = gl_WorkGroupID.y * TILE + ty;
    uint col = gl_WorkGroupID.x * TILE + tx;
    float sum = 0.0;
    for (uint t = 0u; t < dims.k; t += TILE) {
        uint ak = t + tx;
        uint bk = t + ty;
        tile_a[ty][tx] = (row < dims.m && ak < dims.k) ? a[row * dims.k + ak] : 0.0;
        tile_b[ty][tx] = (bk < dims.k && col < dims.n) ? b[bk * dims.n + col] : 0.0;
        barrier();
        for (uint i = 0u; i < TILE; i++) {
            sum += tile_a[ty][i] * tile_b[i][tx];
        }
        barrier();
    }
    if (row < dims.m && col < dims.n) {
        c[row * dims.n + col] = dims.alpha * sum;
    }
}
