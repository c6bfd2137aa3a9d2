#version 450
// The guard in front of every indirect dispatch: copies the three workgroup
// counts the user's argument buffer holds into vkcompute's own indirect
// buffer, each clamped to the device's maxComputeWorkGroupCount, so that no
// count beyond the limit reaches the device. One invocation.

layout(local_size_x = 1) in;

layout(std430, set = 0, binding = 0) readonly buffer Arguments {
    uint words[];
} args;

layout(std430, set = 0, binding = 1) writeonly buffer Groups {
    uint counts[3];
} groups;

layout(push_constant) uniform Clamp {
    uint first;  // the word of `args` where the three counts start
    uint max_x;  // maxComputeWorkGroupCount
    uint max_y;
    uint max_z;
} c;

void main() {
    groups.counts[0] = min(args.words[c.first], c.max_x);
    groups.counts[1] = min(args.words[c.first + 1u], c.max_y);
    groups.counts[2] = min(args.words[c.first + 2u], c.max_z);
}
