//! GLSL at run time as real shader trees use it (issue 12): one source,
//! variants by macro definitions, a shared header found through include
//! directories or an include callback, 8/16-bit push constants, atomics
//! under the Vulkan memory model, zero-initialized shared memory,
//! specialized workgroup sizes, target environments and optimization
//! levels; each checked against the CPU on both descriptor paths under
//! validation. Compile errors keep file and line.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]
#![cfg(feature = "glsl")]

mod common;

use common::{on_each_descriptor_path, run_with, Path, TempDir};
use vkcompute::half::f16;
use vkcompute::{DeviceContext, Error, GlslOptimization, GlslTarget, Kernel};

/// The shared header: the operation a variant applies, chosen by `MODE`,
/// and a nested include of the element type, chosen by `WIDE`.
const HEADER: &str = r#"#ifndef COMMON_GLSL
#define COMMON_GLSL
#include "types.glsl"
#if MODE == 0
#define COMBINE(a, b) ((a) + (b))
#elif MODE == 1
#define COMBINE(a, b) ((a) * (b))
#else
#define COMBINE(a, b) max((a), (b))
#endif
#endif
"#;

const TYPES: &str = r#"#ifdef WIDE
#define ELEM uvec2
#else
#define ELEM uint
#endif
"#;

/// One source, many variants: `MODE` picks the operation, `WIDE` the element.
const VARIANTS: &str = r#"#version 450
#include "common.glsl"
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { ELEM a[]; };
layout(std430, binding = 1) readonly buffer B { ELEM b[]; };
layout(std430, binding = 2) writeonly buffer C { ELEM c[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) c[i] = COMBINE(a[i], b[i]) + ELEM(BIAS);
}
"#;

fn combine(mode: u32, a: u32, b: u32, bias: u32) -> u32 {
    let v = match mode {
        0 => a.wrapping_add(b),
        1 => a.wrapping_mul(b),
        _ => a.max(b),
    };
    v.wrapping_add(bias)
}

/// Runs every variant of [`VARIANTS`] that `load` makes and checks it.
fn check_variants(
    ctx: &DeviceContext,
    load: impl Fn(vkcompute::GlslSource<'static>) -> vkcompute::GlslSource<'static>,
) {
    let n = 700usize;
    for wide in [false, true] {
        let width = if wide { 2 } else { 1 };
        let a: Vec<u32> = (0..n * width).map(|i| (i as u32 * 37) % 1000 + 1).collect();
        let b: Vec<u32> = (0..n * width).map(|i| (i as u32 * 91) % 777 + 3).collect();
        for mode in 0..3u32 {
            let mut builder = Kernel::glsl(VARIANTS)
                .define("MODE", mode.to_string())
                .define("BIAS", "5u");
            if wide {
                builder = builder.define_flag("WIDE");
            }
            let kernel = load(builder).compile().build(ctx).unwrap();
            let (x, y, out) = (
                ctx.enqueue_create_buffer::<u32>(a.len()).unwrap(),
                ctx.enqueue_create_buffer::<u32>(b.len()).unwrap(),
                ctx.enqueue_create_buffer::<u32>(a.len()).unwrap(),
            );
            x.enqueue_copy_from(&a[..]).unwrap();
            y.enqueue_copy_from(&b[..]).unwrap();
            // The wide variant binds `[u32; 2]` views of the same buffers.
            let (xw, yw, ow);
            let args = if wide {
                xw = x.create_sub_buffer::<[u32; 2]>(0, n).unwrap();
                yw = y.create_sub_buffer::<[u32; 2]>(0, n).unwrap();
                ow = out.create_sub_buffer::<[u32; 2]>(0, n).unwrap();
                [xw.arg(), yw.arg(), ow.arg()]
            } else {
                [x.arg(), y.arg(), out.arg()]
            };
            ctx.enqueue_function(&kernel, (n as u32).div_ceil(64), &args, &(n as u32))
                .unwrap();
            let expected: Vec<u32> = a
                .iter()
                .zip(&b)
                .map(|(&p, &q)| combine(mode, p, q, 5))
                .collect();
            assert_eq!(out.to_vec().unwrap(), expected, "MODE={mode} WIDE={wide}");
        }
    }
}

#[test]
fn define_driven_variants_share_a_header_found_in_include_dirs() {
    let dir = TempDir::new("include-dirs");
    let nested = TempDir::new("include-dirs-nested");
    std::fs::write(dir.0.join("common.glsl"), HEADER).unwrap();
    // The nested header sits in a second directory.
    std::fs::write(nested.0.join("types.glsl"), TYPES).unwrap();
    let (d, e) = (dir.0.clone(), nested.0.clone());
    on_each_descriptor_path(|ctx| {
        check_variants(ctx, |b| b.include_dir(d.clone()).include_dir(e.clone()))
    });
}

#[test]
fn define_driven_variants_share_an_embedded_header_through_the_callback() {
    on_each_descriptor_path(|ctx| {
        check_variants(ctx, |b| {
            b.include_callback(|name, _from| match name {
                "common.glsl" => Some(HEADER.to_string()),
                "types.glsl" => Some(TYPES.to_string()),
                _ => None,
            })
        })
    });
}

#[test]
fn compile_errors_keep_file_and_line_and_missing_includes_are_named() {
    run_with(common::options(Path::Direct), "GLSL errors", |ctx| {
        // In the main file, under the name given.
        let broken =
            "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {\n    nope = 1;\n}\n";
        match vkcompute::Kernel::glsl(broken)
            .file_name("shaders/broken.comp")
            .compile()
            .build(ctx)
        {
            Err(Error::ShaderCompilation { message }) => {
                assert!(message.contains("shaders/broken.comp:4"), "{message}")
            }
            other => panic!("expected ShaderCompilation, got {other:?}"),
        }
        // In an included header: its name and its line.
        let header = "// line 1\n// line 2\nfloat broken() { return undefined_value; }\n";
        let source =
            "#version 450\n#include \"bad.glsl\"\nlayout(local_size_x = 1) in;\nvoid main() {}\n";
        match Kernel::glsl(source)
            .include_callback(|name, _| (name == "bad.glsl").then(|| header.to_string()))
            .compile()
            .build(ctx)
        {
            Err(Error::ShaderCompilation { message }) => {
                assert!(message.contains("bad.glsl:3"), "{message}");
                assert!(message.contains("undefined_value"), "{message}");
            }
            other => panic!("expected ShaderCompilation, got {other:?}"),
        }
        // A missing include is named, with where it was looked for.
        let dir = TempDir::new("missing");
        match Kernel::glsl(VARIANTS)
            .define("MODE", "0")
            .define("BIAS", "0u")
            .include_dir(dir.0.clone())
            .compile()
            .build(ctx)
        {
            Err(Error::ShaderCompilation { message }) => {
                assert!(message.contains("common.glsl"), "{message}");
                assert!(message.contains(&dir.0.display().to_string()), "{message}");
            }
            other => panic!("expected ShaderCompilation, got {other:?}"),
        }
        // A macro that is not defined is an error too, and the context works.
        match Kernel::glsl(VARIANTS)
            .include_callback(|name, _| match name {
                "common.glsl" => Some(HEADER.to_string()),
                "types.glsl" => Some(TYPES.to_string()),
                _ => None,
            })
            .compile()
            .build(ctx)
        {
            Err(Error::ShaderCompilation { .. }) => {}
            other => panic!("expected ShaderCompilation, got {other:?}"),
        }
        let buf = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        buf.enqueue_fill(7).unwrap();
        assert_eq!(buf.to_vec().unwrap(), [7; 4]);
    });
}

/// 8- and 16-bit push-constant members chosen by a define.
const SMALL_PUSH: &str = r#"#version 450
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { float data[]; };
layout(push_constant) uniform P { uint16_t n; uint8_t step; int8_t offset; float16_t scale; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(p.n) || i % uint(p.step) != 0u) return;
    data[i] = data[i] * float(p.scale) + float(p.offset) * FACTOR;
}
"#;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SmallPush {
    n: u16,
    step: u8,
    offset: i8,
    scale: f16,
}

#[test]
fn eight_and_sixteen_bit_push_constants_in_run_time_glsl() {
    on_each_descriptor_path(|ctx| {
        let n = 1000usize;
        let x: Vec<f32> = (0..n).map(|i| (i % 50) as f32 * 0.5 + 1.0).collect();
        let push = SmallPush {
            n: n as u16,
            step: 3,
            offset: -7,
            scale: f16::from_f32(1.5),
        };
        for factor in [1.0f32, 0.25] {
            let kernel = Kernel::glsl(SMALL_PUSH)
                .define("FACTOR", format!("{factor:?}"))
                .compile()
                .build(ctx)
                .unwrap();
            assert_eq!(kernel.push_constant_size(), 6);
            let data = ctx.enqueue_create_buffer::<f32>(n).unwrap();
            data.enqueue_copy_from(&x[..]).unwrap();
            ctx.enqueue_function(&kernel, 16, &[data.arg()], &push)
                .unwrap();
            let expected: Vec<f32> = x
                .iter()
                .enumerate()
                .map(|(i, &v)| {
                    if i % 3 == 0 {
                        v * 1.5 - 7.0 * factor
                    } else {
                        v
                    }
                })
                .collect();
            assert_eq!(data.to_vec().unwrap(), expected, "FACTOR={factor}");
        }
    });
}

/// A histogram with buffer atomics under the Vulkan memory model (Device
/// scope: `VulkanMemoryModelDeviceScope`) in zero-initialized shared
/// memory (`shaderZeroInitializeWorkgroupMemory`), with a workgroup size
/// set by specialization.
const HISTOGRAM: &str = r#"#version 450
#pragma use_vulkan_memory_model
#extension GL_KHR_memory_scope_semantics : require
#extension GL_EXT_null_initializer : require
layout(local_size_x_id = 0) in;
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) buffer H { uint hist[]; };
layout(std430, binding = 2) buffer T { uint total; };
layout(push_constant) uniform P { uint n; } p;
shared uint local_hist[BINS] = {};
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) {
        atomicAdd(local_hist[x[i] % BINS], 1u, gl_ScopeWorkgroup, gl_StorageSemanticsShared,
                  gl_SemanticsRelaxed);
        atomicAdd(total, x[i], gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelaxed);
    }
    controlBarrier(gl_ScopeWorkgroup, gl_ScopeWorkgroup, gl_StorageSemanticsShared,
                   gl_SemanticsAcquireRelease);
    for (uint b = gl_LocalInvocationID.x; b < BINS; b += gl_WorkGroupSize.x) {
        atomicAdd(hist[b], local_hist[b], gl_ScopeDevice, gl_StorageSemanticsBuffer,
                  gl_SemanticsRelaxed);
    }
}
"#;

#[test]
fn atomics_and_initialized_shared_memory_with_specialized_workgroup_sizes() {
    on_each_descriptor_path(|ctx| {
        let n = 3000u32;
        let x: Vec<u32> = (0..n).map(|i| i.wrapping_mul(2654435761) >> 20).collect();
        for (bins, size) in [(16u32, 32u32), (64, 64), (100, 128)] {
            let words = Kernel::glsl(HISTOGRAM)
                .define("BINS", format!("{bins}u"))
                .compile()
                .into_words()
                .unwrap();
            assert!(common::has_initialized_workgroup_variable(&words));
            let kernel = Kernel::builder(&words)
                .specialize(0, size)
                .build(ctx)
                .unwrap();
            assert_eq!(kernel.local_size(), [size, 1, 1]);
            let mut hist = vec![0u32; bins as usize];
            for &v in &x {
                hist[(v % bins) as usize] += 1;
            }
            let total = x.iter().fold(0u32, |s, &v| s.wrapping_add(v));
            let input = ctx.enqueue_create_buffer::<u32>(x.len()).unwrap();
            input.enqueue_copy_from(&x[..]).unwrap();
            let h = ctx.enqueue_create_buffer::<u32>(bins as usize).unwrap();
            h.enqueue_fill(0).unwrap();
            let t = ctx.enqueue_create_buffer::<u32>(1).unwrap();
            t.enqueue_fill(0).unwrap();
            ctx.enqueue_function(
                &kernel,
                n.div_ceil(size),
                &[input.arg(), h.arg(), t.arg()],
                &n,
            )
            .unwrap();
            assert_eq!(h.to_vec().unwrap(), hist, "BINS={bins} size={size}");
            assert_eq!(t.to_vec().unwrap(), [total]);
        }
    });
}

#[test]
fn target_environments_and_optimization_levels() {
    on_each_descriptor_path(|ctx| {
        let vulkan13 =
            ctx.info().api_version.starts_with("1.3") || ctx.info().api_version.starts_with("1.4");
        let source = "#version 450\nlayout(local_size_x = 64) in;\nlayout(std430, binding = 0) buffer D { uint d[]; };\nvoid main() { uint i = gl_GlobalInvocationID.x; d[i] = d[i] * 3u + i; }\n";
        let targets = [
            (GlslTarget::Vulkan1_1, 0x0001_0300),
            (GlslTarget::Vulkan1_2, 0x0001_0500),
            (GlslTarget::Vulkan1_3, 0x0001_0600),
        ];
        for (target, version) in targets {
            for level in [
                GlslOptimization::None,
                GlslOptimization::Size,
                GlslOptimization::Performance,
            ] {
                let builder = Kernel::glsl(source).target(target).optimization(level);
                let words = builder.compile().into_words().unwrap();
                assert_eq!(words[1], version, "{target:?}");
                if target == GlslTarget::Vulkan1_3 && !vulkan13 {
                    continue;
                }
                let kernel = Kernel::builder(&words).build(ctx).unwrap();
                let data = ctx.enqueue_create_buffer::<u32>(128).unwrap();
                data.enqueue_copy_from(&(0..128).collect::<Vec<u32>>())
                    .unwrap();
                ctx.enqueue_function(&kernel, 2, &[data.arg()], &())
                    .unwrap();
                let expected: Vec<u32> = (0..128).map(|i| i * 3 + i).collect();
                assert_eq!(data.to_vec().unwrap(), expected, "{target:?} {level:?}");
            }
        }
    });
}
