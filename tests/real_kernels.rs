//! Kernels as other projects write them (issue 12): one buffer loaded at
//! several widths through aliased bindings, compiled from GLSL at run time
//! and loaded from SPIR-V words, each checked against the CPU on both
//! descriptor paths under validation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]
#![cfg(all(feature = "glsl", feature = "build"))]

mod common;

use common::on_each_descriptor_path;
use vkcompute::ash::vk;
use vkcompute::half::f16;
use vkcompute::{DeviceContext, Error, Kernel};

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

            // Bytes whose length fits both aliases (a multiple of 16), bound
            // as bytes (`u8` is not the kernel's element type: reinterpret).
            let bytes = input.create_sub_buffer::<u8>(0, 16 * quads).unwrap();
            assert!(ctx
                .enqueue_function(&kernel, groups, &[bytes.arg(), out.arg()], &(quads as u32))
                .is_err());
            ctx.enqueue_function(
                &kernel,
                groups,
                &[bytes.arg_reinterpret(), out.arg()],
                &(quads as u32),
            )
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

/// 8- and 16-bit push-constant members (`StoragePushConstant8/16`), which
/// the device enables where it has them.
const SMALL_PUSH_CONSTANTS: &str = r#"#version 450
#extension GL_EXT_shader_explicit_arithmetic_types : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_shader_8bit_storage : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { uint data[]; };
layout(std430, binding = 1) writeonly buffer Scaled { float scaled[]; };
layout(push_constant) uniform P { uint16_t n; int8_t add; uint8_t shift; float16_t scale; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= uint(p.n)) return;
    scaled[i] = float(data[i]) * float(p.scale);
    data[i] = (data[i] << uint(p.shift)) + uint(int(p.add));
}
"#;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SmallPush {
    n: u16,
    add: i8,
    shift: u8,
    scale: f16,
}

#[test]
fn eight_and_sixteen_bit_push_constants_run() {
    on_each_descriptor_path(|ctx| {
        let n = 1000u16;
        let x: Vec<u32> = (0..n as u32).map(|i| i * 3 + 1).collect();
        let push = SmallPush {
            n,
            add: -5,
            shift: 3,
            scale: f16::from_f32(0.5),
        };
        let enabled = ctx.info().enabled.unwrap();
        assert!(enabled.storage_push_constant_8 && enabled.storage_push_constant_16);
        for kernel in both_ways(ctx, SMALL_PUSH_CONSTANTS) {
            assert_eq!(kernel.push_constant_size(), 6);
            let data = ctx.enqueue_create_buffer::<u32>(x.len()).unwrap();
            data.enqueue_copy_from(&x[..]).unwrap();
            let scaled = ctx.enqueue_create_buffer::<f32>(x.len()).unwrap();
            ctx.enqueue_function(&kernel, 16, &[data.arg(), scaled.arg()], &push)
                .unwrap();
            let expected: Vec<u32> = x.iter().map(|v| (v << 3).wrapping_sub(5)).collect();
            assert_eq!(data.to_vec().unwrap(), expected);
            let halves: Vec<f32> = x.iter().map(|&v| v as f32 * 0.5).collect();
            assert_eq!(scaled.to_vec().unwrap(), halves);
        }
    });
}

/// 64-bit buffer atomics (`Int64Atomics`) and a workgroup histogram in
/// zero-initialized shared memory (`shaderZeroInitializeWorkgroupMemory`).
const ATOMICS_AND_SHARED: &str = r#"#version 450
#extension GL_EXT_shader_atomic_int64 : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#extension GL_EXT_null_initializer : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) buffer Sums { uint64_t sums[]; };
layout(std430, binding = 2) buffer Hist { uint hist[]; };
layout(std430, binding = 3) buffer SharedSums { uint64_t shared_sums[]; };
layout(push_constant) uniform P { uint n; } p;
shared uint local_hist[16] = {};
shared uint64_t local_sums[4] = {};
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) {
        atomicAdd(sums[x[i] % 4u], uint64_t(x[i]) << 24);
        atomicAdd(local_hist[x[i] % 16u], 1u);
        atomicAdd(local_sums[x[i] % 4u], uint64_t(x[i]) << 24);
    }
    barrier();
    uint l = gl_LocalInvocationID.x;
    if (l < 16u) atomicAdd(hist[l], local_hist[l]);
    if (l < 4u) atomicAdd(shared_sums[l], local_sums[l]);
}
"#;

#[test]
fn sixty_four_bit_atomics_and_zero_initialized_shared_memory_match_the_cpu() {
    on_each_descriptor_path(|ctx| {
        let n = 5000u32;
        let x: Vec<u32> = (0..n).map(|i| (i * 7919) % 1013 + 1).collect();
        let mut sums = [0u64; 4];
        let mut hist = [0u32; 16];
        for &v in &x {
            sums[(v % 4) as usize] += u64::from(v) << 24;
            hist[(v % 16) as usize] += 1;
        }
        assert!(common::has_initialized_workgroup_variable(&spirv(
            ATOMICS_AND_SHARED
        )));
        let enabled = ctx.info().enabled.unwrap();
        assert!(enabled.shader_buffer_int64_atomics && enabled.shader_shared_int64_atomics);
        assert!(enabled.zero_initialize_workgroup_memory);
        for kernel in both_ways(ctx, ATOMICS_AND_SHARED) {
            let input = ctx.enqueue_create_buffer::<u32>(x.len()).unwrap();
            input.enqueue_copy_from(&x[..]).unwrap();
            let s = ctx.enqueue_create_buffer::<u64>(4).unwrap();
            s.enqueue_fill(0).unwrap();
            let h = ctx.enqueue_create_buffer::<u32>(16).unwrap();
            h.enqueue_fill(0).unwrap();
            let s2 = ctx.enqueue_create_buffer::<u64>(4).unwrap();
            s2.enqueue_fill(0).unwrap();
            ctx.enqueue_function(
                &kernel,
                n.div_ceil(64),
                &[input.arg(), s.arg(), h.arg(), s2.arg()],
                &n,
            )
            .unwrap();
            assert_eq!(s.to_vec().unwrap(), sums);
            assert_eq!(s2.to_vec().unwrap(), sums);
            assert_eq!(h.to_vec().unwrap(), hist);
        }
    });
}

/// Subgroup arithmetic: each invocation writes the sum over its subgroup,
/// the subgroup it is in and the subgroup size.
const SUBGROUP_SUM: &str = r#"#version 450
#extension GL_KHR_shader_subgroup_arithmetic : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer X { uint x[]; };
layout(std430, binding = 1) writeonly buffer S { uint sums[]; };
layout(std430, binding = 2) writeonly buffer G { uint groups[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    sums[i] = subgroupAdd(x[i]);
    groups[2u * i] = gl_WorkGroupID.x * 1024u + gl_SubgroupID;
    groups[2u * i + 1u] = gl_SubgroupSize;
}
"#;

/// Runs [`SUBGROUP_SUM`] and checks it against the CPU; returns the
/// subgroup size the kernel saw.
fn check_subgroup_sum(ctx: &DeviceContext, kernel: &Kernel) -> u32 {
    let n = 64 * 20;
    let x: Vec<u32> = (0..n as u32).map(|i| i * 5 % 77 + 1).collect();
    let input = ctx.enqueue_create_buffer::<u32>(n).unwrap();
    input.enqueue_copy_from(&x[..]).unwrap();
    let sums = ctx.enqueue_create_buffer::<u32>(n).unwrap();
    let groups = ctx.enqueue_create_buffer::<u32>(2 * n).unwrap();
    ctx.enqueue_function(kernel, 20, &[input.arg(), sums.arg(), groups.arg()], &())
        .unwrap();
    let sums = sums.to_vec().unwrap();
    let groups = groups.to_vec().unwrap();
    let size = groups[1];
    let mut members: std::collections::HashMap<u32, Vec<usize>> = Default::default();
    for i in 0..n {
        assert_eq!(groups[2 * i + 1], size);
        members.entry(groups[2 * i]).or_default().push(i);
    }
    for (id, list) in &members {
        assert_eq!(list.len(), size as usize, "subgroup {id}: {list:?}");
        let total: u32 = list.iter().map(|&i| x[i]).sum();
        assert!(list.iter().all(|&i| sums[i] == total), "subgroup {id}");
    }
    size
}

#[test]
fn subgroup_operations_run_and_device_info_reports_subgroups_and_limits() {
    on_each_descriptor_path(|ctx| {
        let info = ctx.info();
        let sub = info.subgroup;
        assert!(sub.size.is_power_of_two(), "{sub:?}");
        assert!(
            sub.min_size <= sub.size && sub.size <= sub.max_size,
            "{sub:?}"
        );
        assert!(sub.supported_stages.contains(vk::ShaderStageFlags::COMPUTE));
        assert!(sub
            .supported_operations
            .contains(vk::SubgroupFeatureFlags::BASIC | vk::SubgroupFeatureFlags::ARITHMETIC));
        let limits = ctx.raw().limits();
        let reported = info.limits;
        assert_eq!(
            reported.max_workgroup_size,
            limits.max_compute_work_group_size
        );
        assert_eq!(
            reported.max_workgroup_count,
            limits.max_compute_work_group_count
        );
        assert_eq!(
            reported.max_workgroup_invocations,
            limits.max_compute_work_group_invocations
        );
        assert_eq!(
            reported.max_shared_memory_bytes,
            limits.max_compute_shared_memory_size
        );
        assert_eq!(
            reported.max_push_constants_bytes,
            limits.max_push_constants_size
        );
        assert_eq!(
            reported.max_storage_buffer_range,
            limits.max_storage_buffer_range
        );
        assert_eq!(
            reported.min_storage_buffer_offset_alignment,
            limits.min_storage_buffer_offset_alignment
        );
        // `devices()` lists the same, without opening a device.
        let listed = DeviceContext::devices().unwrap();
        let same = listed.iter().find(|d| d.index == info.index).unwrap();
        assert_eq!(same.subgroup, sub);
        assert_eq!(same.limits, reported);

        for kernel in both_ways(ctx, SUBGROUP_SUM) {
            assert_eq!(check_subgroup_sum(ctx, &kernel), sub.size);
        }
    });
}

#[test]
fn a_required_subgroup_size_is_given_or_refused_clearly() {
    on_each_descriptor_path(|ctx| {
        let sub = ctx.info().subgroup;
        let words = spirv(SUBGROUP_SUM);
        let enabled = ctx.info().enabled.unwrap();
        assert!(!sub.size_control || enabled.subgroup_size_control);
        if sub.size_control {
            // Every size the device offers (lavapipe: exactly 8).
            let mut size = sub.min_size;
            while size <= sub.max_size {
                let kernel = Kernel::builder(&words)
                    .subgroup_size(size)
                    .build(ctx)
                    .unwrap();
                assert_eq!(check_subgroup_sum(ctx, &kernel), size);
                size *= 2;
            }
        }
        for bad in [sub.max_size * 2, 3, 0] {
            match Kernel::builder(&words).subgroup_size(bad).build(ctx) {
                Err(Error::UnsupportedKernel { reason, .. }) => {
                    assert!(reason.contains(&format!("subgroup size {bad}")), "{reason}");
                    if sub.size_control {
                        let range = format!("from {} to {}", sub.min_size, sub.max_size);
                        assert!(reason.contains(&range), "{reason}");
                    }
                }
                other => panic!("subgroup size {bad}: expected UnsupportedKernel, got {other:?}"),
            }
        }
        // The context still works.
        let kernel = Kernel::new(ctx, &words, "main").unwrap();
        assert_eq!(check_subgroup_sum(ctx, &kernel), sub.size);
    });
}

/// A float-controls execution mode, as an LLM engine's kernels declare
/// rounding: `RTE` (4462, capability 4467) or `RTZ` (4463, capability
/// 4468) for 32-bit floats.
fn rounding_kernel(mode: u32, capability: u32) -> String {
    format!(
        r#"#version 450
#extension GL_EXT_spirv_intrinsics : require
spirv_execution_mode(capabilities = [{capability}], {mode}, 32);
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer D {{ float d[]; }};
void main() {{
    uint i = gl_GlobalInvocationID.x;
    d[i] = d[i] * 0.5 + 1.0;
}}
"#
    )
}

#[test]
fn float_rounding_modes_load_where_the_device_supports_them() {
    on_each_descriptor_path(|ctx| {
        let lavapipe = ctx.name().contains("llvmpipe");
        for (name, mode, capability) in [("RTE", 4462, 4467), ("RTZ", 4463, 4468)] {
            let source = rounding_kernel(mode, capability);
            match Kernel::from_glsl(ctx, &source, "main") {
                // Loaded: the device has the property, and the validation
                // layer (checked after the test) agrees.
                Ok(kernel) => {
                    assert!(!(lavapipe && name == "RTZ"), "lavapipe has no RTZ");
                    let data = ctx.enqueue_create_buffer::<f32>(128).unwrap();
                    let x: Vec<f32> = (0..128).map(|i| i as f32).collect();
                    data.enqueue_copy_from(&x[..]).unwrap();
                    ctx.enqueue_function(&kernel, 2, &[data.arg()], &())
                        .unwrap();
                    let expected: Vec<f32> = x.iter().map(|v| v * 0.5 + 1.0).collect();
                    assert_eq!(data.to_vec().unwrap(), expected);
                }
                Err(Error::UnsupportedKernel { reason, .. }) => {
                    assert!(!(lavapipe && name == "RTE"), "lavapipe has RTE: {reason}");
                    let property = format!("shaderRoundingMode{name}Float32");
                    assert!(reason.contains(&property), "{reason}");
                    assert!(reason.contains(&format!("RoundingMode{name}")), "{reason}");
                }
                Err(other) => panic!("{name}: {other}"),
            }
        }
    });
}

/// `c[i] = dot(a[i], b[i])` over four packed signed bytes (`OpSDot`,
/// `DotProductInput4x8BitPacked`: `VK_KHR_shader_integer_dot_product`,
/// core in Vulkan 1.3), as quantized matrix kernels use it. The glslang
/// behind shaderc here has no `GL_EXT_integer_dot_product`, so the module
/// is assembled (`spirv-as --target-env vulkan1.2`) from:
///
//     OpCapability Shader
//     OpCapability DotProduct
//     OpCapability DotProductInput4x8BitPacked
//     OpExtension "SPV_KHR_integer_dot_product"
//     OpMemoryModel Logical GLSL450
//     OpEntryPoint GLCompute %main "main" %gid %a %b %c
//     OpExecutionMode %main LocalSize 64 1 1
//     OpDecorate %gid BuiltIn GlobalInvocationId
//     OpDecorate %rta ArrayStride 4
//     OpMemberDecorate %blk 0 Offset 0
//     OpDecorate %blk Block
//     OpDecorate %a DescriptorSet 0
//     OpDecorate %a Binding 0
//     OpDecorate %a NonWritable
//     OpDecorate %b DescriptorSet 0
//     OpDecorate %b Binding 1
//     OpDecorate %b NonWritable
//     OpDecorate %c DescriptorSet 0
//     OpDecorate %c Binding 2
//     %void = OpTypeVoid
//     %fn = OpTypeFunction %void
//     %uint = OpTypeInt 32 0
//     %int = OpTypeInt 32 1
//     %v3 = OpTypeVector %uint 3
//     %pin = OpTypePointer Input %v3
//     %gid = OpVariable %pin Input
//     %rta = OpTypeRuntimeArray %uint
//     %blk = OpTypeStruct %rta
//     %pblk = OpTypePointer StorageBuffer %blk
//     %a = OpVariable %pblk StorageBuffer
//     %b = OpVariable %pblk StorageBuffer
//     %c = OpVariable %pblk StorageBuffer
//     %pu = OpTypePointer StorageBuffer %uint
//     %c0 = OpConstant %int 0
//     %main = OpFunction %void None %fn
//     %l = OpLabel
//     %g = OpLoad %v3 %gid
//     %i = OpCompositeExtract %uint %g 0
//     %pa = OpAccessChain %pu %a %c0 %i
//     %pb = OpAccessChain %pu %b %c0 %i
//     %pc = OpAccessChain %pu %c %c0 %i
//     %va = OpLoad %uint %pa
//     %vb = OpLoad %uint %pb
//     %d = OpSDot %int %va %vb PackedVectorFormat4x8Bit
//     %du = OpBitcast %uint %d
//     OpStore %pc %du
//     OpReturn
//     OpFunctionEnd
const PACKED_DOT: &[u32] = &[
    0x07230203, 0x00010500, 0x00070000, 0x0000001b, 0x00000000, 0x00020011, 0x00000001, 0x00020011,
    0x00001783, 0x00020011, 0x00001782, 0x0008000a, 0x5f565053, 0x5f52484b, 0x65746e69, 0x5f726567,
    0x5f746f64, 0x646f7270, 0x00746375, 0x0003000e, 0x00000000, 0x00000001, 0x0009000f, 0x00000005,
    0x00000001, 0x6e69616d, 0x00000000, 0x00000002, 0x00000003, 0x00000004, 0x00000005, 0x00060010,
    0x00000001, 0x00000011, 0x00000040, 0x00000001, 0x00000001, 0x00040047, 0x00000002, 0x0000000b,
    0x0000001c, 0x00040047, 0x00000006, 0x00000006, 0x00000004, 0x00050048, 0x00000007, 0x00000000,
    0x00000023, 0x00000000, 0x00030047, 0x00000007, 0x00000002, 0x00040047, 0x00000003, 0x00000022,
    0x00000000, 0x00040047, 0x00000003, 0x00000021, 0x00000000, 0x00030047, 0x00000003, 0x00000018,
    0x00040047, 0x00000004, 0x00000022, 0x00000000, 0x00040047, 0x00000004, 0x00000021, 0x00000001,
    0x00030047, 0x00000004, 0x00000018, 0x00040047, 0x00000005, 0x00000022, 0x00000000, 0x00040047,
    0x00000005, 0x00000021, 0x00000002, 0x00020013, 0x00000008, 0x00030021, 0x00000009, 0x00000008,
    0x00040015, 0x0000000a, 0x00000020, 0x00000000, 0x00040015, 0x0000000b, 0x00000020, 0x00000001,
    0x00040017, 0x0000000c, 0x0000000a, 0x00000003, 0x00040020, 0x0000000d, 0x00000001, 0x0000000c,
    0x0004003b, 0x0000000d, 0x00000002, 0x00000001, 0x0003001d, 0x00000006, 0x0000000a, 0x0003001e,
    0x00000007, 0x00000006, 0x00040020, 0x0000000e, 0x0000000c, 0x00000007, 0x0004003b, 0x0000000e,
    0x00000003, 0x0000000c, 0x0004003b, 0x0000000e, 0x00000004, 0x0000000c, 0x0004003b, 0x0000000e,
    0x00000005, 0x0000000c, 0x00040020, 0x0000000f, 0x0000000c, 0x0000000a, 0x0004002b, 0x0000000b,
    0x00000010, 0x00000000, 0x00050036, 0x00000008, 0x00000001, 0x00000000, 0x00000009, 0x000200f8,
    0x00000011, 0x0004003d, 0x0000000c, 0x00000012, 0x00000002, 0x00050051, 0x0000000a, 0x00000013,
    0x00000012, 0x00000000, 0x00060041, 0x0000000f, 0x00000014, 0x00000003, 0x00000010, 0x00000013,
    0x00060041, 0x0000000f, 0x00000015, 0x00000004, 0x00000010, 0x00000013, 0x00060041, 0x0000000f,
    0x00000016, 0x00000005, 0x00000010, 0x00000013, 0x0004003d, 0x0000000a, 0x00000017, 0x00000014,
    0x0004003d, 0x0000000a, 0x00000018, 0x00000015, 0x00061162, 0x0000000b, 0x00000019, 0x00000017,
    0x00000018, 0x00000000, 0x0004007c, 0x0000000a, 0x0000001a, 0x00000019, 0x0003003e, 0x00000016,
    0x0000001a, 0x000100fd, 0x00010038,
];

#[test]
fn integer_dot_product_from_spirv_matches_the_cpu() {
    on_each_descriptor_path(|ctx| {
        let n = 640usize;
        let a: Vec<u32> = (0..n as u32).map(|i| i.wrapping_mul(0x9e37_79b9)).collect();
        let b: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(0x85eb_ca6b) ^ 0x8080_1234)
            .collect();
        let expected: Vec<u32> = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| {
                let (x, y) = (x.to_le_bytes(), y.to_le_bytes());
                (0..4)
                    .map(|k| i32::from(x[k] as i8) * i32::from(y[k] as i8))
                    .sum::<i32>() as u32
            })
            .collect();
        assert!(ctx.info().enabled.unwrap().shader_integer_dot_product);
        let kernel = Kernel::new(ctx, PACKED_DOT, "main").unwrap();
        let (x, y, out) = (
            ctx.enqueue_create_buffer::<u32>(n).unwrap(),
            ctx.enqueue_create_buffer::<u32>(n).unwrap(),
            ctx.enqueue_create_buffer::<u32>(n).unwrap(),
        );
        x.enqueue_copy_from(&a[..]).unwrap();
        y.enqueue_copy_from(&b[..]).unwrap();
        ctx.enqueue_function(
            &kernel,
            (n / 64) as u32,
            &[x.arg(), y.arg(), out.arg()],
            &(),
        )
        .unwrap();
        assert_eq!(out.to_vec().unwrap(), expected);
    });
}
