//! One model of the kernel: what loading checks is what the driver runs.
//! Every fact a check rests on (bindings with their sets, the entry
//! point's push-constant block, the workgroup size and memory, array
//! lengths) is read from the module handed to the driver, by one reader
//! that knows SPIR-V's every way of saying it: decoration groups,
//! specialization expressions evaluated as SPIR-V defines them, several
//! entry points, specialization constants without a `SpecId`, bindings in
//! several descriptor sets. Each module here is valid
//! (`spirv-val --target-env vulkan1.2`); the `.spvasm` beside each `.spv`
//! in tests/spirv/ is its source (`spirv-as --target-env vulkan1.2`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{on_each_descriptor_path, run_with, Path};
use vkcompute::{DeviceContext, Error, Kernel, KernelArg};

/// The words of `tests/spirv/<name>.spv`.
fn module(name: &str) -> Vec<u32> {
    let path = format!("{}/tests/spirv/{name}.spv", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

fn refused(result: vkcompute::Result<Kernel>, mentions: &str, what: &str) {
    match result {
        Err(e @ (Error::UnsupportedKernel { .. } | Error::InvalidSpirv { .. })) => {
            assert!(e.to_string().contains(mentions), "{what}: {e}")
        }
        other => panic!("{what}: expected a refusal mentioning {mentions:?}, got {other:?}"),
    }
}

/// A context still computes after a refusal.
fn still_works(ctx: &DeviceContext) {
    let store = Kernel::new(ctx, vkcompute::shaders::STORE, "main").unwrap();
    let probe = ctx.enqueue_create_buffer::<u32>(2).unwrap();
    probe.enqueue_fill(0).unwrap();
    ctx.enqueue_function(&store, 1, &[probe.arg()], &[1u32, 9u32])
        .unwrap();
    assert_eq!(probe.to_vec().unwrap(), [0, 9]);
}

#[test]
fn bindings_given_through_decoration_groups_are_read_and_bound() {
    on_each_descriptor_path(|ctx| {
        let words = module("group_set1");
        let kernel = Kernel::new(ctx, &words, "main").unwrap();
        let b = &kernel.bindings()[0];
        assert_eq!((b.set, b.binding), (1, 0), "{b:?}");
        let data = ctx.enqueue_create_buffer::<u32>(64).unwrap();
        ctx.enqueue_function(&kernel, 1, &[data.arg()], &())
            .unwrap();
        let want: Vec<u32> = (0..64).map(|i| 3 * i + 1).collect();
        assert_eq!(data.to_vec().unwrap(), want);
        // Binding 100000 through the group is refused by name, before the
        // driver sizes a descriptor set layout by it.
        refused(
            Kernel::new(ctx, &module("group_binding_100000"), "main"),
            "binding number 100000",
            "binding 100000 through a group",
        );
        still_works(ctx);
    });
}

#[test]
fn specialization_expressions_are_evaluated_as_spirv_defines_them() {
    run_with(common::options(Path::Direct), "SMod", |ctx| {
        // A push block of 4 + 4 * SMod(-4539, 5539) = 4004 bytes.
        let limit = ctx.info().limits.max_push_constants_bytes;
        match Kernel::new(ctx, &module("smod_push"), "main") {
            Ok(kernel) => {
                assert!(limit >= 4004, "loaded over a limit of {limit}");
                assert_eq!(kernel.push_constant_size(), 4004);
            }
            Err(e) => {
                assert!(limit < 4004, "{e}");
                assert!(
                    e.to_string().contains("4004 bytes of push constants"),
                    "{e}"
                );
            }
        }
        // An array of SMod(-7, 3) = 2 buffers.
        let kernel = Kernel::new(ctx, &module("smod_buffers"), "main").unwrap();
        assert_eq!(kernel.bindings()[0].array_len, Some(2));
        let a = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        let b = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        a.enqueue_fill(0).unwrap();
        b.enqueue_fill(0).unwrap();
        let parts = [a.arg(), b.arg()];
        ctx.enqueue_function(&kernel, 1, &[KernelArg::array(&parts)], &())
            .unwrap();
        assert_eq!(a.to_vec().unwrap(), [1, 0, 0, 0]);
        assert_eq!(b.to_vec().unwrap(), [2, 0, 0, 0]);
    });
}

#[test]
fn sets_and_specialization_expressions_together() {
    on_each_descriptor_path(|ctx| {
        let words = module("sets_and_spec_ops");
        for (big, n, length) in [(false, 4u32, 5u32), (true, 3, 6), (false, 9, 10)] {
            let kernel = Kernel::builder(&words)
                .specialize(0, big)
                .specialize(1, n)
                .build(ctx)
                .unwrap();
            let places: Vec<(u32, u32)> = kernel
                .bindings()
                .iter()
                .map(|b| (b.set, b.binding))
                .collect();
            assert_eq!(places, [(0, 1), (2, 0)]);
            let input = ctx.enqueue_create_buffer::<u32>(4).unwrap();
            input.enqueue_copy_from(&[10u32, 20, 30, 40][..]).unwrap();
            let out = ctx.enqueue_create_buffer::<u32>(4).unwrap();
            ctx.enqueue_function(&kernel, 1, &[input.arg(), out.arg()], &())
                .unwrap();
            let want: Vec<u32> = [10u32, 20, 30, 40].iter().map(|x| x + length).collect();
            assert_eq!(out.to_vec().unwrap(), want, "BIG {big}, N {n}");
        }
    });
}

#[test]
fn each_entry_point_has_its_own_push_constant_block() {
    run_with(common::options(Path::Direct), "two entry points", |ctx| {
        let words = module("two_entries");
        let small = Kernel::builder(&words).entry("small").build(ctx).unwrap();
        assert_eq!(small.push_constant_size(), 8);
        let data = ctx.enqueue_create_buffer::<u32>(1).unwrap();
        ctx.enqueue_function(&small, 1, &[data.arg()], &[40u32, 2u32])
            .unwrap();
        assert_eq!(data.to_vec().unwrap(), [42]);
        let limit = ctx.info().limits.max_push_constants_bytes;
        match Kernel::builder(&words).entry("big").build(ctx) {
            Ok(big) => {
                assert!(limit >= 4004);
                assert_eq!(big.push_constant_size(), 4004);
            }
            Err(e) => {
                assert!(limit < 4004, "{e}");
                assert!(e.to_string().contains("4004 bytes"), "{e}");
            }
        }
        still_works(ctx);
    });
}

#[test]
fn a_workgroup_size_declared_twice_is_refused() {
    run_with(common::options(Path::Direct), "two LocalSize", |ctx| {
        refused(
            Kernel::new(ctx, &module("two_local_sizes"), "main"),
            "workgroup size 2 times",
            "two LocalSize modes",
        );
        still_works(ctx);
    });
}

#[test]
fn a_specialization_constant_without_a_spec_id_keeps_its_default() {
    run_with(common::options(Path::Direct), "no SpecId", |ctx| {
        let kernel = Kernel::new(ctx, &module("spec_without_id"), "main").unwrap();
        assert!(kernel.spec_constants().is_empty());
        let data = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        ctx.enqueue_function(&kernel, 1, &[data.arg()], &())
            .unwrap();
        assert_eq!(data.to_vec().unwrap(), [7, 8, 9, 10]);
        // Nothing can set it.
        match Kernel::builder(&module("spec_without_id"))
            .specialize(0, 1u32)
            .build(ctx)
        {
            Err(Error::Specialization { id: 0, .. }) => {}
            other => panic!("{other:?}"),
        }
    });
}

/// A valid module whose private variable's type is `depth` one-element
/// arrays nested in one another.
fn nested_arrays(depth: u32) -> Vec<u32> {
    let mut words = vec![0x0723_0203, 0x0001_0000, 0, 0, 0];
    let mut inst = |op: u32, operands: &[u32]| {
        words.push(((operands.len() as u32 + 1) << 16) | op);
        words.extend_from_slice(operands);
    };
    let (void, func, uint, one, main, label) = (1, 2, 3, 4, 5, 6);
    inst(17, &[1]); // OpCapability Shader
    inst(14, &[0, 1]); // OpMemoryModel Logical GLSL450
    inst(15, &[5, main, 0x6e69_616d, 0]); // OpEntryPoint GLCompute %main "main"
    inst(16, &[main, 17, 1, 1, 1]); // OpExecutionMode LocalSize 1 1 1
    inst(19, &[void]);
    inst(33, &[func, void]);
    inst(21, &[uint, 32, 0]);
    inst(43, &[uint, one, 1]);
    let mut ty = uint;
    let mut next = 7;
    for _ in 0..depth {
        inst(28, &[next, ty, one]); // OpTypeArray
        ty = next;
        next += 1;
    }
    let (pointer, var) = (next, next + 1);
    inst(32, &[pointer, 6, ty]); // OpTypePointer Private
    inst(59, &[pointer, var, 6]); // OpVariable Private
    inst(54, &[void, main, 0, func]); // OpFunction
    inst(248, &[label]); // OpLabel
    inst(253, &[]); // OpReturn
    inst(56, &[]); // OpFunctionEnd
    words[3] = var + 1;
    words
}

#[test]
fn types_nested_past_the_limit_are_refused_before_the_validator() {
    run_with(common::options(Path::Direct), "nested types", |ctx| {
        // 12,000 levels made SPIRV-Tools' validator throw std::bad_alloc
        // through the FFI, which aborted the process.
        refused(
            Kernel::new(ctx, &nested_arrays(12_000), "main"),
            "levels deep",
            "12,000 nested arrays",
        );
        Kernel::new(ctx, &nested_arrays(200), "main").unwrap();
        still_works(ctx);
    });
}

/// GLSL compiled at run time: programs other projects test with, or a
/// user writes.
#[cfg(feature = "glsl")]
mod glsl {
    use super::*;
    use vkcompute::GlslOptimization;

    #[test]
    fn ternaries_and_comparisons_of_specialization_constants_load_and_specialize() {
        run_with(common::options(Path::Direct), "spec ternary", |ctx| {
            let source = r#"#version 450
                layout(local_size_x = 4) in;
                layout(constant_id = 0) const bool USE_GAIN = false;
                layout(constant_id = 1) const float GAIN = 2.5;
                layout(constant_id = 2) const uint N = 4u;
                const bool BIG = N > 4u;
                shared uint s[BIG ? 8 : 4];
                layout(std430, binding = 0) buffer D { float data[]; };
                layout(std430, binding = 1) buffer L { uint len[]; };
                void main() {
                    uint i = gl_LocalInvocationID.x;
                    s[i] = i;
                    barrier();
                    data[i] *= USE_GAIN ? GAIN : 1.0;
                    if (i == 0u) len[0] = uint(s.length()) + s[3];
                }"#;
            for (use_gain, n, gain_applied, length) in
                [(false, 4u32, 1.0f32, 4u32), (true, 9, 2.5, 8)]
            {
                let kernel = Kernel::glsl(source)
                    .compile()
                    .specialize(0, use_gain)
                    .specialize(2, n)
                    .build(ctx)
                    .unwrap();
                let data = ctx.enqueue_create_buffer::<f32>(4).unwrap();
                data.enqueue_copy_from(&[1.0f32, 2.0, 3.0, 4.0][..])
                    .unwrap();
                let len = ctx.enqueue_create_buffer::<u32>(1).unwrap();
                ctx.enqueue_function(&kernel, 1, &[data.arg(), len.arg()], &())
                    .unwrap();
                let want: Vec<f32> = [1.0f32, 2.0, 3.0, 4.0]
                    .iter()
                    .map(|x| x * gain_applied)
                    .collect();
                assert_eq!(data.to_vec().unwrap(), want, "USE_GAIN {use_gain}");
                assert_eq!(len.to_vec().unwrap(), [length + 3], "N {n}");
            }
            // A double constant takes an f64, and says so when given another.
            let double = r#"#version 450
                layout(local_size_x = 1) in;
                layout(constant_id = 5) const double SCALE = 1.0;
                layout(std430, binding = 0) buffer D { double data[]; };
                void main() { data[0] *= SCALE; }"#;
            let kernel = Kernel::glsl(double)
                .compile()
                .specialize(5, 2.5f64)
                .build(ctx)
                .unwrap();
            let data = ctx.enqueue_create_buffer::<f64>(1).unwrap();
            data.enqueue_copy_from(&[4.0f64][..]).unwrap();
            ctx.enqueue_function(&kernel, 1, &[data.arg()], &())
                .unwrap();
            assert_eq!(data.to_vec().unwrap(), [10.0]);
            match Kernel::glsl(double)
                .compile()
                .specialize(5, 2.5f32)
                .build(ctx)
            {
                Err(e @ Error::Specialization { id: 5, .. }) => {
                    assert!(e.to_string().contains("64-bit float"), "{e}")
                }
                other => panic!("{other:?}"),
            }
        });
    }

    #[test]
    fn bindings_in_several_sets_bind_in_order_or_where_each_argument_says() {
        on_each_descriptor_path(|ctx| {
            let source = r#"#version 450
                layout(local_size_x = 4) in;
                layout(std430, set = 2, binding = 0) buffer Out { uint o[]; };
                layout(std430, set = 0, binding = 3) readonly buffer A { uint a[]; };
                layout(std140, set = 1, binding = 1) uniform U { uint scale; };
                void main() { uint i = gl_LocalInvocationID.x; o[i] = a[i] * scale; }"#;
            let kernel = Kernel::from_glsl(ctx, source, "main").unwrap();
            let places: Vec<(u32, u32)> = kernel
                .bindings()
                .iter()
                .map(|b| (b.set, b.binding))
                .collect();
            assert_eq!(places, [(0, 3), (1, 1), (2, 0)]);
            let a = ctx.enqueue_create_buffer::<u32>(4).unwrap();
            a.enqueue_copy_from(&[1u32, 2, 3, 4][..]).unwrap();
            let scale = ctx.enqueue_create_buffer::<u32>(4).unwrap();
            scale.enqueue_fill(10).unwrap();
            let out = ctx.enqueue_create_buffer::<u32>(4).unwrap();
            // In (set, binding) order.
            ctx.enqueue_function(&kernel, 1, &[a.arg(), scale.arg(), out.arg()], &())
                .unwrap();
            assert_eq!(out.to_vec().unwrap(), [10, 20, 30, 40]);
            // Each saying where it goes, in any order.
            scale.enqueue_fill(3).unwrap();
            let args = [out.arg().at(2, 0), a.arg().at(0, 3), scale.arg().at(1, 1)];
            ctx.enqueue_function(&kernel, 1, &args, &()).unwrap();
            assert_eq!(out.to_vec().unwrap(), [3, 6, 9, 12]);
            // Half placed, a place the kernel lacks, a place given twice.
            for (args, mentions) in [
                (
                    vec![out.arg().at(2, 0), a.arg(), scale.arg()],
                    "does not say where it goes",
                ),
                (
                    vec![out.arg().at(2, 0), a.arg().at(0, 3), scale.arg().at(1, 2)],
                    "no binding 2 in set 1",
                ),
                (
                    vec![out.arg().at(2, 0), a.arg().at(0, 3), scale.arg().at(0, 3)],
                    "given twice",
                ),
            ] {
                match ctx.enqueue_function(&kernel, 1, &args, &()) {
                    Err(e @ Error::Argument { .. }) => {
                        assert!(e.to_string().contains(mentions), "{e}")
                    }
                    other => panic!("{mentions}: {other:?}"),
                }
            }
            assert_eq!(out.to_vec().unwrap(), [3, 6, 9, 12]);
        });
    }

    #[test]
    fn a_uniform_buffer_needs_the_bytes_its_members_occupy_not_the_padding() {
        run_with(common::options(Path::Direct), "uniform extent", |ctx| {
            // std140: a vec3 at 0 and a float at 12 occupy 16 bytes; a
            // mat2x3 (two vec3 columns 16 apart) at 16 occupies 28 more,
            // to byte 44; the block's padded size is 48.
            let source = r#"#version 450
                layout(local_size_x = 1) in;
                layout(std140, binding = 0) uniform U { vec3 v; float f; mat2x3 m; };
                layout(std430, binding = 1) buffer O { float o[]; };
                void main() { o[0] = v.x + f + m[1][2]; }"#;
            let kernel = Kernel::from_glsl(ctx, source, "main").unwrap();
            assert_eq!(kernel.bindings()[0].uniform_size, Some(44));
            let mut bytes = [0f32; 11];
            bytes[0] = 1.0; // v.x
            bytes[3] = 2.0; // f
            bytes[10] = 4.0; // m[1][2], at 16 + 16 + 8
            let u = ctx.enqueue_create_buffer::<f32>(11).unwrap();
            u.enqueue_copy_from(&bytes[..]).unwrap();
            let o = ctx.enqueue_create_buffer::<f32>(1).unwrap();
            ctx.enqueue_function(&kernel, 1, &[u.arg(), o.arg()], &())
                .unwrap();
            assert_eq!(o.to_vec().unwrap(), [7.0]);
            // One float short is refused, naming the bytes.
            let short = ctx.enqueue_create_buffer::<f32>(10).unwrap();
            match ctx.enqueue_function(&kernel, 1, &[short.arg(), o.arg()], &()) {
                Err(e @ Error::Argument { .. }) => assert!(e.to_string().contains("44"), "{e}"),
                other => panic!("{other:?}"),
            }
        });
    }

    #[test]
    fn the_most_negative_integer_divided_by_minus_one_compiles_and_runs() {
        run_with(common::options(Path::Direct), "INT_MIN / -1", |ctx| {
            // SPIRV-Tools' optimizer folded this with the host's trapping
            // division: SIGFPE. SPIR-V leaves the result undefined; the
            // kernel must load and run, whatever it computes.
            for body in [
                "int a = -2147483647 - 1; d[0] = a / -1; d[1] = a % -1;",
                "int a = d[2]; int b = -1; d[0] = a / b; d[1] = a % b;",
            ] {
                let source = format!(
                    "#version 450\nlayout(local_size_x = 1) in;\n\
                     layout(std430, binding = 0) buffer D {{ int d[]; }};\n\
                     void main() {{ {body} }}\n"
                );
                let kernel = Kernel::from_glsl(ctx, &source, "main").unwrap();
                let d = ctx.enqueue_create_buffer::<i32>(3).unwrap();
                d.enqueue_copy_from(&[0, 0, i32::MIN][..]).unwrap();
                ctx.enqueue_function(&kernel, 1, &[d.arg()], &()).unwrap();
                assert_eq!(d.to_vec().unwrap()[2], i32::MIN, "{body}");
            }
            // A kernel without signed division is optimized as before.
            let plain = "#version 450\nlayout(local_size_x = 1) in;\n\
                layout(std430, binding = 0) buffer D { uint d[]; };\n\
                void main() { uint x = 6u; uint unused = x * 9u; d[0] = d[1] / 3u; }\n";
            let optimized = Kernel::glsl(plain).compile().into_words().unwrap();
            let unoptimized = Kernel::glsl(plain)
                .optimization(GlslOptimization::None)
                .compile()
                .into_words()
                .unwrap();
            assert!(optimized.len() < unoptimized.len());
        });
    }

    #[test]
    fn a_very_long_expression_compiles_on_any_caller_stack_or_is_refused() {
        run_with(common::options(Path::Direct), "long expressions", |ctx| {
            let source = |terms: usize| {
                let sum: Vec<String> = (0..terms).map(|i| format!("d[{}]", i % 4)).collect();
                format!(
                    "#version 450\nlayout(local_size_x = 1) in;\n\
                     layout(std430, binding = 0) buffer D {{ uint d[]; }};\n\
                     void main() {{ d[4] = {}; }}\n",
                    sum.join(" + ")
                )
            };
            // 50,000 terms overflowed the caller's 8 MiB stack inside
            // glslang; here the caller has 1 MiB.
            let (long, too_long) = (source(50_000), source(60_000));
            let compiled = std::thread::scope(|scope| {
                std::thread::Builder::new()
                    .stack_size(1 << 20)
                    .spawn_scoped(scope, || {
                        (
                            Kernel::glsl(&long).compile().into_words().map(|w| w.len()),
                            Kernel::glsl(&too_long)
                                .compile()
                                .into_words()
                                .map(|w| w.len()),
                        )
                    })
                    .unwrap()
                    .join()
                    .unwrap()
            });
            assert!(compiled.0.is_ok(), "{:?}", compiled.0);
            match compiled.1 {
                Err(e @ Error::ShaderCompilation { .. }) => {
                    assert!(e.to_string().contains("more than 50000 operators"), "{e}")
                }
                other => panic!("{other:?}"),
            }
            still_works(ctx);
        });
    }

    #[test]
    fn deep_call_chains_and_large_local_arrays_are_refused_before_the_driver() {
        run_with(common::options(Path::Direct), "driver limits", |ctx| {
            // A chain of 100 calls (unoptimized, so nothing is inlined):
            // 20,000 took lavapipe 53 s to compile.
            let mut source = String::from(
                "#version 450\nlayout(local_size_x = 1) in;\n\
                 layout(std430, binding = 0) buffer D { uint d[]; };\n\
                 uint f0(uint x) { return x + 1u; }\n",
            );
            for i in 1..100 {
                source.push_str(&format!(
                    "uint f{i}(uint x) {{ return f{}(x) + 1u; }}\n",
                    i - 1
                ));
            }
            source.push_str("void main() { d[0] = f99(d[0]); }\n");
            let deep = Kernel::glsl(&source).optimization(GlslOptimization::None);
            refused(
                deep.compile().build(ctx),
                "calls nest 101 deep",
                "100 nested calls",
            );
            // Optimized, the calls are inlined and the kernel runs.
            let kernel = Kernel::glsl(&source).compile().build(ctx).unwrap();
            let d = ctx.enqueue_create_buffer::<u32>(1).unwrap();
            d.enqueue_fill(5).unwrap();
            ctx.enqueue_function(&kernel, 1, &[d.arg()], &()).unwrap();
            assert_eq!(d.to_vec().unwrap(), [105]);
            // A function-local array of 2^16 words indexed dynamically:
            // lavapipe compiled it for 36 s (2^20: minutes, gigabytes).
            let local = "#version 450\nlayout(local_size_x = 1) in;\n\
                layout(std430, binding = 0) buffer D { uint d[]; };\n\
                void main() { uint a[65536]; a[d[0]] = 1u; d[1] = a[d[2]]; }\n";
            refused(
                Kernel::from_glsl(ctx, local, "main"),
                "private and function-local variables take 262144 bytes",
                "a 256 KiB local array",
            );
            still_works(ctx);
        });
    }

    #[test]
    fn a_push_constant_block_no_function_reads_is_still_the_kernels() {
        run_with(common::options(Path::Direct), "unused push", |ctx| {
            // Unoptimized, the block stays in the module; the caller passes
            // push constants for it as the shader declares them.
            let source = r#"#version 450
                layout(local_size_x = 1) in;
                layout(push_constant) uniform P { uint n; uint m; } p;
                layout(std430, binding = 0) buffer D { uint d[]; };
                void main() { d[0] = 9u; }"#;
            let kernel = Kernel::glsl(source)
                .optimization(GlslOptimization::None)
                .compile()
                .build(ctx)
                .unwrap();
            assert_eq!(kernel.push_constant_size(), 8);
            let d = ctx.enqueue_create_buffer::<u32>(1).unwrap();
            ctx.enqueue_function(&kernel, 1, &[d.arg()], &[1u32, 2u32])
                .unwrap();
            assert_eq!(d.to_vec().unwrap(), [9]);
        });
    }

    #[test]
    fn an_unused_workgroup_array_never_reaches_the_driver() {
        run_with(common::options(Path::Direct), "unused shared", |ctx| {
            let source = r#"#version 450
                layout(local_size_x = 1) in;
                shared uint big[1 << 20];
                shared uint used[4];
                layout(std430, binding = 0) buffer D { uint d[]; };
                void main() { used[0] = 5u; barrier(); d[0] = used[0]; }"#;
            // Unoptimized, the array stays in the module glslang makes; the
            // module the driver gets holds what the kernel uses (the layer
            // would report VUID-RuntimeSpirv-Workgroup-06530 otherwise).
            let kernel = Kernel::glsl(source)
                .optimization(GlslOptimization::None)
                .compile()
                .build(ctx)
                .unwrap();
            let d = ctx.enqueue_create_buffer::<u32>(1).unwrap();
            ctx.enqueue_function(&kernel, 1, &[d.arg()], &()).unwrap();
            assert_eq!(d.to_vec().unwrap(), [5]);
            // Used, it is refused against the device's limit.
            let used = source.replace("used[0] = 5u;", "used[0] = 5u; big[d[1]] = 1u;");
            refused(
                Kernel::glsl(&used)
                    .optimization(GlslOptimization::None)
                    .compile()
                    .build(ctx),
                "maxComputeSharedMemorySize",
                "a 4 MiB workgroup array in use",
            );
        });
    }
}
