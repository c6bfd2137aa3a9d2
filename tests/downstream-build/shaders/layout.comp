#version 450
// Layouts with gaps: a struct element, a vec3 array (stride 16), a push
// block with padding, a specialization constant whose default build.rs
// sets (3), and a function from an included file.
#include "common.glsl"
layout(local_size_x = 1) in;
layout(constant_id = 0) const uint SCALE = 1u;
struct Particle { vec3 pos; float mass; };
layout(std430, binding = 0) buffer Particles { Particle particles[]; };
layout(std430, binding = 1) readonly buffer Dirs { vec3 dirs[]; };
layout(push_constant) uniform Step { uint n; vec4 offset; } step;
void main() {
    for (uint i = 0u; i < step.n; i++) {
        particles[i].pos += dirs[i] * float(SCALE) + step.offset.xyz;
        particles[i].mass = float(twice(i)) * FACTOR;
    }
}
