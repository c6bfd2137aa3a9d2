//! Kernels as other projects write them (issue 12): one buffer loaded at
//! several widths through aliased bindings, compiled from GLSL at run time
//! and loaded from SPIR-V words, each checked against the CPU on both
//! descriptor paths under validation.
#![cfg(all(feature = "glsl", feature = "build"))]

mod common;

use common::{run_with, Path};
use vkcompute::half::f16;
use vkcompute::{DeviceContext, Error, Kernel};

/// Both descriptor paths (push descriptors and pooled sets), validated.
fn on_each_descriptor_path(test: impl Fn(&DeviceContext)) {
    for push in [true, false] {
        let options = common::options(Path::Direct).push_descriptors(push);
        run_with(options, &format!("push descriptors {push}"), &test);
    }
}

/// SPIR-V of `source`, compiled once (what a project ships).
fn spirv(source: &str) -> Vec<u32> {
    vkcompute::build::compile_glsl(source, "aliased.comp", "main").unwrap()
}

/// Loads the kernel both ways: compiled at run time, and from words.
fn both_ways(ctx: &DeviceContext, source: &str) -> [Kernel; 2] {
    [
        Kernel::from_glsl(ctx, source, "main").unwrap(),
        Kernel::new(ctx, &spirv(source), "main").unwrap(),
    ]
}

/// One read-only buffer at binding 0, read as `float[]` and as `vec4[]`.
const FLOAT_AND_VEC4: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In1 { float x1[]; };
layout(std430, binding = 0) readonly buffer In4 { vec4 x4[]; };
layout(std430, binding = 1) writeonly buffer Out { float y[]; };
layout(push_constant) uniform P { uint quads; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= p.quads) return;
    vec4 v = x4[i];
    y[i] = v.x + 2.0 * v.y + 3.0 * v.z + 4.0 * v.w + 10.0 * x1[4u * i + 3u];
}
"#;

fn float_and_vec4_cpu(x: &[f32]) -> Vec<f32> {
    x.chunks(4)
        .map(|v| v[0] + 2.0 * v[1] + 3.0 * v[2] + 4.0 * v[3] + 10.0 * v[3])
        .collect()
}

#[test]
fn one_buffer_read_as_float_and_vec4_is_one_argument() {
    on_each_descriptor_path(|ctx| {
        let quads = 1000usize;
        let x: Vec<f32> = (0..4 * quads)
            .map(|i| (i % 97) as f32 * 0.5 + 1.0)
            .collect();
        let expected = float_and_vec4_cpu(&x);
        for kernel in both_ways(ctx, FLOAT_AND_VEC4) {
            let bindings = kernel.bindings();
            assert_eq!(bindings.len(), 2, "{bindings:?}");
            let b0 = &bindings[0];
            assert_eq!(b0.binding, 0);
            assert!(b0.read_only);
            assert_eq!(b0.aliases.len(), 2, "{b0:?}");
            let mut strides: Vec<_> = b0.aliases.iter().map(|a| a.element_stride).collect();
            strides.sort();
            assert_eq!(strides, [Some(4), Some(16)]);
            assert_eq!(b0.element_stride, None);
            assert!(!bindings[1].read_only);
            assert_eq!(bindings[1].element_stride, Some(4));

            let input = ctx.enqueue_create_buffer::<f32>(x.len()).unwrap();
            input.enqueue_copy_from(&x[..]).unwrap();
            let out = ctx.enqueue_create_buffer::<f32>(quads).unwrap();
            out.enqueue_fill(-1.0).unwrap();
            let groups = quads.div_ceil(64) as u32;
            ctx.enqueue_function(&kernel, groups, &[input.arg(), out.arg()], &(quads as u32))
                .unwrap();
            assert_eq!(out.to_vec().unwrap(), expected);

            // The same bytes as `[f32; 4]` elements: the vec4 alias's stride.
            let as_quads = input.create_sub_buffer::<[f32; 4]>(0, quads).unwrap();
            out.enqueue_fill(-1.0).unwrap();
            ctx.enqueue_function(
                &kernel,
                groups,
                &[as_quads.arg(), out.arg()],
                &(quads as u32),
            )
            .unwrap();
            assert_eq!(out.to_vec().unwrap(), expected);

            // Bytes whose length fits both aliases (a multiple of 16).
            let bytes = input.create_sub_buffer::<u8>(0, 16 * quads).unwrap();
            ctx.enqueue_function(&kernel, groups, &[bytes.arg(), out.arg()], &(quads as u32))
                .unwrap();
            // Neither stride, and 3 bytes short of a whole vec4: refused.
            let odd = input.create_sub_buffer::<u8>(0, 16 * quads - 3).unwrap();
            match ctx.enqueue_function(&kernel, groups, &[odd.arg(), out.arg()], &(quads as u32)) {
                Err(Error::Argument {
                    index: 0, reason, ..
                }) => {
                    assert!(
                        reason.contains("[4, 16]") || reason.contains("[16, 4]"),
                        "{reason}"
                    )
                }
                other => panic!("expected Argument, got {other:?}"),
            }
            // An 8-byte element type matches neither alias: refused.
            let pairs = input
                .create_sub_buffer::<[f32; 2]>(0, 2 * quads - 1)
                .unwrap();
            assert!(matches!(
                ctx.enqueue_function(&kernel, groups, &[pairs.arg(), out.arg()], &(quads as u32)),
                Err(Error::Argument { index: 0, .. })
            ));
        }
    });
}

/// A written binding with a read-only alias: written, since one alias is.
const WRITTEN_ALIAS: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In1 { float x1[]; };
layout(std430, binding = 0) buffer InOut4 { vec4 x4[]; };
layout(push_constant) uniform P { uint quads; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= p.quads) return;
    float last = x1[4u * i + 3u];
    x4[i] = x4[i] * 2.0 + vec4(last);
}
"#;

#[test]
fn a_binding_is_read_only_only_if_every_alias_is() {
    on_each_descriptor_path(|ctx| {
        let quads = 300usize;
        let x: Vec<f32> = (0..4 * quads).map(|i| i as f32 * 0.25 + 1.0).collect();
        let expected: Vec<f32> = x
            .chunks(4)
            .flat_map(|v| v.iter().map(|e| e * 2.0 + v[3]).collect::<Vec<_>>())
            .collect();
        for kernel in both_ways(ctx, WRITTEN_ALIAS) {
            let b0 = &kernel.bindings()[0];
            assert_eq!(b0.aliases.len(), 2);
            assert!(b0.aliases.iter().any(|a| a.read_only));
            assert!(!b0.read_only);
            let data = ctx.enqueue_create_buffer::<f32>(x.len()).unwrap();
            data.enqueue_copy_from(&x[..]).unwrap();
            ctx.enqueue_function(
                &kernel,
                quads.div_ceil(64) as u32,
                &[data.arg()],
                &(quads as u32),
            )
            .unwrap();
            assert_eq!(data.to_vec().unwrap(), expected);
        }
    });
}

/// One buffer of halves read as `float16_t[]`, `f16vec2[]` and `f16vec4[]`,
/// as an LLM engine's matrix-vector kernels do.
const HALF_WIDTHS: &str = r#"#version 450
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
layout(local_size_x = 32) in;
layout(std430, binding = 0) readonly buffer A1 { float16_t a1[]; };
layout(std430, binding = 0) readonly buffer A2 { f16vec2 a2[]; };
layout(std430, binding = 0) readonly buffer A4 { f16vec4 a4[]; };
layout(std430, binding = 1) writeonly buffer Out { float y[]; };
layout(push_constant) uniform P { uint quads; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= p.quads) return;
    vec4 v = vec4(a4[i]);
    vec2 hi = vec2(a2[2u * i + 1u]);
    y[i] = v.x + 2.0 * v.y + 3.0 * v.z + 4.0 * v.w + 10.0 * hi.y + 100.0 * float(a1[4u * i]);
}
"#;

#[test]
fn one_buffer_of_halves_read_at_three_widths() {
    on_each_descriptor_path(|ctx| {
        let quads = 500usize;
        let x: Vec<f16> = (0..4 * quads)
            .map(|i| f16::from_f32((i % 31) as f32 * 0.5 - 3.0))
            .collect();
        let expected: Vec<f32> = x
            .chunks(4)
            .map(|v| {
                let v: Vec<f32> = v.iter().map(|h| h.to_f32()).collect();
                v[0] + 2.0 * v[1] + 3.0 * v[2] + 4.0 * v[3] + 10.0 * v[3] + 100.0 * v[0]
            })
            .collect();
        for kernel in both_ways(ctx, HALF_WIDTHS) {
            let b0 = &kernel.bindings()[0];
            let mut strides: Vec<_> = b0.aliases.iter().map(|a| a.element_stride).collect();
            strides.sort();
            assert_eq!(strides, [Some(2), Some(4), Some(8)]);
            let input = ctx.enqueue_create_buffer::<f16>(x.len()).unwrap();
            input.enqueue_copy_from(&x[..]).unwrap();
            let out = ctx.enqueue_create_buffer::<f32>(quads).unwrap();
            out.enqueue_fill(-1.0).unwrap();
            ctx.enqueue_function(
                &kernel,
                quads.div_ceil(32) as u32,
                &[input.arg(), out.arg()],
                &(quads as u32),
            )
            .unwrap();
            // Small integers and halves: exact in f32 either way.
            assert_eq!(out.to_vec().unwrap(), expected);
        }
    });
}
