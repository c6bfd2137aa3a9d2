//! The preparation of modules for the driver (`vkcompute_spirv::bounds`)
//! checked by the validator, on the shipped kernels and on GLSL.

use vkcompute_spirv::bounds::*;
use vkcompute_spirv::words::OP_EXT_INST_IMPORT;
use vkcompute_spirv::WorkgroupVariable;

/// `words` prepared for entry point `main`, clamped or not.
fn prep(words: &[u32], clamp: bool) -> Prepared {
    let model = vkcompute_spirv::Module::read(words).unwrap();
    prepare(words, &model, "main", clamp, &[]).unwrap()
}

/// Validates `words` for both Vulkan versions the runtime supports.
#[cfg(feature = "validate")]
fn assert_valid(words: &[u32], what: &str) {
    assert_valid_for(words, what, &[false, true]);
}

/// Validates `words` for Vulkan 1.3 (`true`) or 1.2 (`false`).
#[cfg(feature = "validate")]
fn assert_valid_for(words: &[u32], what: &str, versions: &[bool]) {
    for &vulkan_1_3 in versions {
        if let Err(e) = vkcompute_spirv::validate::validate(words, vulkan_1_3) {
            panic!("{what} (Vulkan 1.{}): {e}", if vulkan_1_3 { 3 } else { 2 });
        }
    }
}

#[cfg(feature = "validate")]
#[test]
fn every_shipped_kernel_instruments_to_a_valid_module() {
    let mut clamped = 0;
    for words in crate::shaders::SHIPPED {
        let prepared = prep(words, true);
        assert_valid(&prepared.words, "a shipped kernel");
        clamped += prepared.clamped;
    }
    // REDUCE_SUM indexes its shared array with the invocation's lane.
    assert!(clamped >= 2, "{clamped}");
}

#[test]
fn a_module_with_nothing_to_bound_is_handed_on_unchanged() {
    let prepared = prep(crate::shaders::STORE, true);
    assert_eq!(prepared.clamped, 0);
    assert_eq!(prepared.words, crate::shaders::STORE);
    assert!(prepared.interface.workgroup.is_empty());
    let reduce = prep(crate::shaders::REDUCE_SUM, false);
    assert_eq!(reduce.words, crate::shaders::REDUCE_SUM);
    // The shipped SPIR-V is optimized, without names.
    assert_eq!(
        reduce.interface.workgroup,
        [WorkgroupVariable {
            name: "%61".into(),
            ty: "float32_t[256]".into(),
            bytes: Some(1024)
        }]
    );
}

#[cfg(all(feature = "build", feature = "validate"))]
mod glsl {
    use super::*;
    use vkcompute_spirv::words::OP_EXECUTION_MODE_ID;

    fn compile(source: &str) -> Vec<u32> {
        compile_for(source, shaderc::EnvVersion::Vulkan1_2)
    }

    fn compile_for(source: &str, env: shaderc::EnvVersion) -> Vec<u32> {
        // Unoptimized, so that the module keeps its names.
        let compiler = shaderc::Compiler::new().unwrap();
        let mut options = shaderc::CompileOptions::new().unwrap();
        options.set_target_env(shaderc::TargetEnv::Vulkan, env as u32);
        compiler
            .compile_into_spirv(
                source,
                shaderc::ShaderKind::Compute,
                "test.comp",
                "main",
                Some(&options),
            )
            .unwrap()
            .as_binary()
            .to_vec()
    }

    #[test]
    fn every_kind_of_dynamic_index_is_clamped_and_the_result_is_valid() {
        let words = compile(
            r#"#version 450
            layout(local_size_x = 8) in;
            layout(std430, binding = 0) buffer Out { uint o[]; };
            layout(std430, binding = 1) buffer Fixed { uvec4 v[3]; uint rest[]; } fixed_;
            layout(push_constant) uniform P { uint i; uint pc[4]; } p;
            shared uint s[16][3];
            uint priv[4];
            void main() {
                uint f[4] = uint[4](1u, 2u, 3u, 4u);
                uvec4 v = uvec4(p.i);
                mat3 m = mat3(float(p.i));
                s[p.i][p.pc[1]] = f[p.i] + priv[p.i] + v[p.i] + uint(m[p.i][p.i]);
                barrier();
                o[p.i] = s[gl_LocalInvocationID.x][2] + fixed_.v[p.i][p.i] + fixed_.rest[p.i];
            }"#,
        );
        let prepared = prep(&words, true);
        assert_valid(&prepared.words, "the instrumented module");
        // s (two), pc, f, priv, v, m (two), s's first index, fixed_.v (two):
        // the optimizer may merge a few, but each kind stays.
        assert!(prepared.clamped >= 9, "{}", prepared.clamped);
        // Storage-buffer runtime arrays are left to robust buffer access.
        let again = prep(&prepared.words, true);
        assert!(again.clamped <= prepared.clamped);
        assert_valid(&again.words, "instrumented twice");
    }

    #[test]
    fn specialization_expressions_size_workgroup_memory() {
        let words = compile(
            r#"#version 450
            layout(local_size_x = 1) in;
            layout(constant_id = 0) const uint N = 4u;
            layout(constant_id = 1) const bool WIDE = false;
            layout(constant_id = 2) const int M = -3;
            layout(std430, binding = 0) buffer Out { uint o[]; };
            shared uint a[N * 2u + 1u];
            shared float b[(N << 2u) / 3u];
            shared uint c[WIDE ? N : 2u];
            shared uint d[uint(-M) % 5u + N - (N & 1u)];
            shared uvec2 e[N ^ 1u];
            void main() {
                a[0] = 1u; b[0] = 1.0; c[0] = 1u; d[0] = 1u; e[0] = uvec2(1u);
                barrier();
                o[0] = a[0] + uint(b[0]) + c[0] + d[0] + e[0].x;
            }"#,
        );
        for (n, wide, m) in [(4u32, false, -3i32), (6, true, 7), (13, false, -20)] {
            let spec = [
                (0, n.to_le_bytes().to_vec()),
                (1, u32::from(wide).to_le_bytes().to_vec()),
                (2, m.to_le_bytes().to_vec()),
            ];
            let model = vkcompute_spirv::Module::read(&words).unwrap();
            let frozen = vkcompute_spirv::rules::freeze(&words, &model, &spec);
            let prepared = prep(&frozen, true);
            assert_valid(&prepared.words, "specialized");
            let sizes: Vec<(String, Option<u64>)> = prepared
                .interface
                .workgroup
                .iter()
                .map(|v| (v.name.clone(), v.bytes))
                .collect();
            let n = u64::from(n);
            let want = [
                ("a", 4 * (n * 2 + 1)),
                ("b", 4 * ((n << 2) / 3)),
                ("c", 4 * if wide { n } else { 2 }),
                (
                    "d",
                    4 * (u64::from(m.wrapping_neg() as u32 % 5) + n - (n & 1)),
                ),
                ("e", 8 * (n ^ 1)),
            ];
            let want: Vec<(String, Option<u64>)> = want
                .iter()
                .map(|(s, b)| (s.to_string(), Some(*b)))
                .collect();
            assert_eq!(sizes, want, "N {n}, WIDE {wide}, M {m}");
        }
    }

    #[test]
    fn execution_modes_by_id_survive_instrumentation() {
        // SPIR-V 1.6 (Vulkan 1.3) declares the workgroup size with
        // OpExecutionModeId, which rspirv's loader does not place.
        let words = compile_for(
            r#"#version 450
            layout(local_size_x_id = 0) in;
            layout(std430, binding = 0) buffer Out { uint o[]; };
            shared uint s[8];
            void main() { s[gl_LocalInvocationID.x] = 1u; barrier(); o[0] = s[o[1]]; }"#,
            shaderc::EnvVersion::Vulkan1_3,
        );
        let modes = |w: &[u32]| {
            vkcompute_spirv::words::instructions(w)
                .filter(|(op, _)| *op == OP_EXECUTION_MODE_ID)
                .count()
        };
        assert_eq!(modes(&words), 1);
        let prepared = prep(&words, true);
        assert!(prepared.clamped >= 2);
        assert_eq!(modes(&prepared.words), 1);
        assert_valid_for(&prepared.words, "with LocalSizeId", &[true]);
    }

    #[test]
    fn workgroup_variables_of_other_entry_points_do_not_count() {
        // Two functions; only the one the entry point calls counts.
        let words = compile(
            r#"#version 450
            layout(local_size_x = 1) in;
            layout(std430, binding = 0) buffer Out { uint o[]; };
            shared uint used[8];
            shared uint unused[4096];
            uint helper(uint i) { used[i] = i; return used[0]; }
            void never(uint i) { unused[i] = i; }
            void main() { o[0] = helper(gl_LocalInvocationID.x); }"#,
        );
        let prepared = prep(&words, true);
        let names: Vec<&str> = prepared
            .interface
            .workgroup
            .iter()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(names, ["used"]);
    }
}

#[test]
fn non_semantic_instructions_are_stripped_and_the_rest_kept() {
    // OpExtInstImport %1 "NonSemantic.Test"; OpExtInst %void %2 %1 1 in the
    // globals would be a detached instruction to rspirv.
    let mut words = crate::shaders::STORE.to_vec();
    let import: Vec<u32> = {
        let name = b"NonSemantic.Test\0\0\0\0";
        let mut w = vec![0, words[3]];
        w.extend(
            name.chunks(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
        );
        w[0] = ((w.len() as u32) << 16) | OP_EXT_INST_IMPORT;
        w
    };
    // After the header's capabilities: before the first OpExtInstImport
    // or OpMemoryModel (opcode 14).
    let at = {
        let mut at = 5;
        while words[at] & 0xffff != 11 && words[at] & 0xffff != 14 {
            at += (words[at] >> 16) as usize;
        }
        at
    };
    words.splice(at..at, import);
    words[3] += 1;
    let (stripped, changed) = strip_non_semantic(&words);
    assert!(changed);
    let mut want = crate::shaders::STORE.to_vec();
    want[3] += 1;
    assert_eq!(stripped, want);
}
