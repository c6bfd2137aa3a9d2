#version 450
// One step of gradient descent (vkcompute-mpi's examples/train.rs): for
// j < d, w[j] -= scale * (g[j] + g[d + j] + ... ), the sum over the
// `blocks` rows of partial gradients in order, where scale is the
// learning rate over the number of samples of every rank together.

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) buffer Weights { float w[]; };
layout(std430, set = 0, binding = 1) readonly buffer Gradient { float g[]; };

layout(push_constant) uniform Params {
    uint d;
    uint blocks;
    float scale;
} p;

void main() {
    uint j = gl_GlobalInvocationID.x;
    if (j < p.d) {
        float sum = 0.0;
        for (uint b = 0u; b < p.blocks; b++) {
            sum += g[b * p.d + j];
        }
        w[j] -= p.scale * sum;
    }
}
