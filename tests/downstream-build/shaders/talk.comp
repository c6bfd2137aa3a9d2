#version 450
// Prints each element it doubles, and asserts it is below a limit first:
// vkcompute-build finds <vkcompute.glsl> with no file of this crate's.
#include <vkcompute.glsl>
layout(local_size_x = 4) in;
layout(std430, binding = 0) buffer Data { uint data[]; };
layout(push_constant) uniform Params { uint limit; } params;
void main() {
    uint i = gl_GlobalInvocationID.x;
    VK_ASSERT2(data[i] < params.limit, "data[%u] = %u is at the limit", i, data[i]);
    data[i] *= 2u;
    debugPrintfEXT("data[%u] doubled to %u", i, data[i]);
}
