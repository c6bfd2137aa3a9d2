#version 450
// The bench's `printf` case: shaders/saxpy.comp with a debugPrintfEXT
// call no invocation reaches (a must be 12345 and i past the end), and,
// with PRINTF_REACHED defined, one that invocation 0 reaches. Compiled by
// shaderc for Vulkan 1.2 at optimization level Performance, warnings as
// errors, into printf_saxpy_plain.spv (PRINTF undefined),
// printf_saxpy_unreached.spv (PRINTF defined) and
// printf_saxpy_reached.spv (PRINTF and PRINTF_REACHED defined) and
// printf_saxpy_floor.spv (PRINTF_FLOOR defined: no printf, and in its
// place the least any append does, an atomic add and one word's store,
// no invocation reaching it);
// recompile them when this file changes.

#extension GL_EXT_debug_printf : enable

layout(local_size_x = 256) in;

layout(std430, set = 0, binding = 0) readonly buffer X { float x[]; };
layout(std430, set = 0, binding = 1) buffer Y { float y[]; };

#ifdef PRINTF_FLOOR
layout(std430, set = 0, binding = 2) buffer Records { uint cursor; uint words[]; };
#endif

layout(push_constant) uniform Params {
    float a;
    uint n;
} p;

void main() {
    uint row_length = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint i = gl_GlobalInvocationID.y * row_length + gl_GlobalInvocationID.x;
    if (i < p.n) {
        y[i] = p.a * x[i] + y[i];
    }
#ifdef PRINTF
    if (p.a == 12345.0 && i >= p.n) {
        debugPrintfEXT("saxpy: a=%f n=%u at %u", p.a, p.n, i);
    }
#endif
#ifdef PRINTF_FLOOR
    if (p.a == 12345.0 && i >= p.n) {
        words[atomicAdd(cursor, 1u) % 64u] = 1u;
    }
#endif
#ifdef PRINTF_REACHED
    if (i == 0u) {
        debugPrintfEXT("saxpy: y[0]=%f", y[0]);
    }
#endif
}
