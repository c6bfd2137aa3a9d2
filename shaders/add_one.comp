#version 450
// data[i] += 1 for i < n: the smallest kernel whose dispatches depend on
// each other, used to measure the launch rate of dependent kernels.

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) buffer Data { uint data[]; };

layout(push_constant) uniform Params {
    uint n;
} p;

void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) {
        data[i] += 1u;
    }
}
