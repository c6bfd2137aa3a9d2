#version 450
// data[index] = value: one invocation writes one element. The smallest
// useful dispatch, used to measure launch overhead and to test ordering.

layout(local_size_x = 1) in;

layout(std430, set = 0, binding = 0) writeonly buffer Data { uint data[]; };

layout(push_constant) uniform Params {
    uint index;
    uint value;
} p;

void main() {
    data[p.index] = p.value;
}
