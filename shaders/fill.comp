#version 450
// Fills a byte range of a storage buffer with a pattern whose period divides
// 16 bytes (elements of 1, 2, 4, 8 or 16 bytes), at any byte offset.
//
// The buffer is seen as 32-bit words. The host rotates the pattern so that
// word `w` of the binding takes `pattern[w % 4]`, and masks the first and
// last word so that bytes outside the range keep their value. One invocation
// owns each word, so the read-modify-write of an edge word does not race.

layout(local_size_x = 64) in;

layout(std430, set = 0, binding = 0) buffer Destination {
    uint words[];
};

layout(push_constant) uniform Fill {
    uint pattern[4];  // the 16-byte pattern as little-endian words
    uint first_word;  // the first word touched, counted from the binding
    uint word_count;  // how many words are touched
    uint head_mask;   // the bits of the first word that are written
    uint tail_mask;   // the bits of the last word that are written
} fill;

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    for (uint i = gl_GlobalInvocationID.x; i < fill.word_count; i += stride) {
        uint w = fill.first_word + i;
        uint value = fill.pattern[w & 3u];
        uint mask = 0xffffffffu;
        if (i == 0u) {
            mask &= fill.head_mask;
        }
        if (i == fill.word_count - 1u) {
            mask &= fill.tail_mask;
        }
        if (mask != 0xffffffffu) {
            value = (words[w] & ~mask) | (value & mask);
        }
        words[w] = value;
    }
}
