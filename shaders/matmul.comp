#version 450
// C = A * B for row-major n x n matrices of f32, n a multiple of 16: each
// 16 x 16 workgroup computes one 16 x 16 tile of C, stepping through tiles
// of A and B held in shared memory. Dispatch (n / 16, n / 16) workgroups.

layout(local_size_x = 16, local_size_y = 16) in;

layout(std430, set = 0, binding = 0) readonly buffer A { float a[]; };
layout(std430, set = 0, binding = 1) readonly buffer B { float b[]; };
layout(std430, set = 0, binding = 2) writeonly buffer C { float c[]; };

layout(push_constant) uniform Params {
    uint n;
} p;

shared float tile_a[16][16];
shared float tile_b[16][16];

void main() {
    uint tx = gl_LocalInvocationID.x;
    uint ty = gl_LocalInvocationID.y;
    uint row = gl_WorkGroupID.y * 16u + ty;
    uint col = gl_WorkGroupID.x * 16u + tx;
    float sum = 0.0;
    for (uint t = 0u; t < p.n; t += 16u) {
        tile_a[ty][tx] = a[row * p.n + t + tx];
        tile_b[ty][tx] = b[(t + ty) * p.n + col];
        barrier();
        for (uint k = 0u; k < 16u; k++) {
            sum += tile_a[ty][k] * tile_b[k][tx];
        }
        barrier();
    }
    c[row * p.n + col] = sum;
}
