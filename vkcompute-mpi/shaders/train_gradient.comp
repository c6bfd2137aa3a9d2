#version 450
// The gradient of logistic regression's loss over the samples one rank
// holds (vkcompute-mpi's examples/train.rs), as partial sums over blocks
// of samples: for block b and feature j < d,
// g[b * d + j] = sum over samples i of block b (i < n) of
// (sigmoid(x_i . w) - y_i) * x_i[j],
// where x is n rows of d features (row-major; the example makes the last
// feature 1, the bias), y holds 0 or 1, and block b holds samples
// b * block to (b + 1) * block. One invocation a block and feature, the
// samples summed in order, so a shard's gradient has the same bits on
// every run. (Blocks keep every loop short: with one invocation walking
// 6000 samples, lavapipe dropped every sample after the 5958th, which
// looks like llvmpipe's limit of 65535 loop iterations in all.)

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) readonly buffer Samples { float x[]; };
layout(std430, set = 0, binding = 1) readonly buffer Labels { float y[]; };
layout(std430, set = 0, binding = 2) readonly buffer Weights { float w[]; };
layout(std430, set = 0, binding = 3) writeonly buffer Gradient { float g[]; };

layout(push_constant) uniform Params {
    uint n;
    uint d;
    uint block;
    uint blocks;
} p;

void main() {
    uint id = gl_GlobalInvocationID.x;
    if (id >= p.blocks * p.d) {
        return;
    }
    uint b = id / p.d;
    uint j = id % p.d;
    uint end = min(p.n, (b + 1u) * p.block);
    float sum = 0.0;
    for (uint i = b * p.block; i < end; i++) {
        float z = 0.0;
        for (uint k = 0u; k < p.d; k++) {
            z += x[i * p.d + k] * w[k];
        }
        float residual = 1.0 / (1.0 + exp(-z)) - y[i];
        sum += residual * x[i * p.d + j];
    }
    g[id] = sum;
}
