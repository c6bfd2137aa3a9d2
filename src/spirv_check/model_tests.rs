//! The kernel model (`vkcompute_spirv`) on the shipped kernels and on GLSL
//! compiled here: what it reads of modules real compilers make.

use vkcompute_spirv::uses::module_use;

#[test]
fn the_shipped_kernels_address_no_memory_through_pointers() {
    for (name, words) in [
        ("saxpy", crate::shaders::SAXPY),
        ("vector_add", crate::shaders::VECTOR_ADD),
        ("reduce_sum", crate::shaders::REDUCE_SUM),
        ("store", crate::shaders::STORE),
        ("fill", crate::shaders::FILL),
        ("clamp_groups", crate::shaders::CLAMP_GROUPS),
    ] {
        assert_eq!(module_use(words).pointers, None, "{name}");
    }
}

#[cfg(feature = "glsl")]
#[test]
fn sixty_four_bit_atomics_are_told_apart_by_the_memory_they_use() {
    let kernel = |body: &str| {
        let source = format!(
            "#version 450\n#extension GL_EXT_shader_atomic_int64 : require\n\
             #extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n\
             layout(local_size_x = 8) in;\n\
             layout(std430, binding = 0) buffer B {{ uint64_t b[8]; uint c[8]; }};\n\
             shared uint64_t s[8];\nshared uint t[8];\n\
             void main() {{ uint i = gl_LocalInvocationID.x; {body} }}\n"
        );
        let words = crate::shader_build::compile_glsl(&source, "atomics.comp", "main").unwrap();
        let found = module_use(&words);
        (found.int64_atomics_buffer, found.int64_atomics_shared)
    };
    assert_eq!(kernel("atomicAdd(b[i], 1ul);"), (true, false));
    assert_eq!(
        kernel("s[i] = 0ul; barrier(); atomicAdd(s[i], 1ul); b[i] = s[i];"),
        (false, true)
    );
    assert_eq!(
        kernel("t[i] = 0u; barrier(); atomicAdd(t[i], 1u); c[i] = atomicAdd(c[i], t[i]);"),
        (false, false)
    );
}
