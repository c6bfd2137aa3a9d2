//! Arrays of storage buffers in one binding (issue 23): a binding declared
//! `buffer B { float d[]; } ins[4];` takes `KernelArg::array` of four
//! buffers, each element checked as a single argument is; a dynamic index
//! into the array is clamped into range (an index past the end reaches the
//! last element); a non-uniform index (`nonuniformEXT`) runs where the
//! device offers `shaderStorageBufferArrayNonUniformIndexing` and is refused
//! by name where not; a runtime-sized array (`ins[]`) binds as many
//! buffers as a dispatch gives where the device offers
//! `runtimeDescriptorArray`; an array larger than `maxPushDescriptors`
//! binds through descriptor sets; graphs capture and substitute array
//! elements.
//! On both descriptor paths and both memory paths, under validation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]
#![cfg(feature = "glsl")]

mod common;

use common::on_each_context;
use vkcompute::ash::vk;
use vkcompute::{DeviceBuffer, DeviceContext, Error, GraphParams, Kernel, KernelArg};

/// `o[i] = sum of ins[k].d[i] for k < count, + 1000 * ins[pick].d[i]`:
/// `k` and `pick` are dynamically uniform indices into the array (`pick`
/// may be out of range).
const SUM: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In { float d[]; } ins[4];
layout(std430, binding = 1) buffer Out { float o[]; };
layout(push_constant) uniform P { uint n; uint count; uint pick; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= p.n) return;
    float s = 0.0;
    for (uint k = 0u; k < p.count; k++) s += ins[k].d[i];
    o[i] = s + 1000.0 * ins[p.pick].d[i];
}
"#;

/// Writes `value + i` to element `i` of `outs[which]`: a written array,
/// indexed by a push constant that may be out of range.
const SCATTER: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Out { uint o[]; } outs[3];
layout(push_constant) uniform P { uint n; uint which; uint value; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) outs[p.which].o[i] = p.value + i;
}
"#;

/// Each invocation reads the array element its own index picks: a
/// non-uniform index.
const NON_UNIFORM: &str = r#"#version 450
#extension GL_EXT_nonuniform_qualifier : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In { uint d[]; } ins[4];
layout(std430, binding = 1) buffer Out { uint o[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) o[i] = ins[nonuniformEXT(i % 4u)].d[i];
}
"#;

/// `o[i] = sum of ins[k].d[i] for k < count, + 1000 * ins[pick].d[i]`
/// over a runtime-sized array: as many buffers as the dispatch binds.
const RUNTIME_SUM: &str = r#"#version 450
#extension GL_EXT_nonuniform_qualifier : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In { uint d[]; } ins[];
layout(std430, binding = 1) buffer Out { uint o[]; };
layout(push_constant) uniform P { uint n; uint count; uint pick; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i >= p.n) return;
    uint s = 0u;
    for (uint k = 0u; k < p.count; k++) s += ins[k].d[i];
    o[i] = s + 1000u * ins[p.pick].d[i];
}
"#;

/// `o[i] = sum of ins[k].d[i]` over an array of `n` buffers.
fn wide_sum(n: usize) -> String {
    format!(
        r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer In {{ uint d[]; }} ins[{n}];
layout(std430, binding = 1) buffer Out {{ uint o[]; }};
layout(push_constant) uniform P {{ uint len; }} p;
void main() {{
    uint i = gl_GlobalInvocationID.x;
    if (i >= p.len) return;
    uint s = 0u;
    for (uint k = 0u; k < {n}u; k++) s += ins[k].d[i];
    o[i] = s;
}}
"#
    )
}

fn inputs(ctx: &DeviceContext, n: usize) -> Vec<DeviceBuffer<f32>> {
    (0..4)
        .map(|k| {
            let values: Vec<f32> = (0..n).map(|i| (k * 10 + i % 7) as f32).collect();
            upload(ctx, &values)
        })
        .collect()
}

/// A device buffer holding `values`.
fn upload<T: vkcompute::bytemuck::Pod>(ctx: &DeviceContext, values: &[T]) -> DeviceBuffer<T> {
    let b = ctx.enqueue_create_buffer::<T>(values.len()).unwrap();
    b.enqueue_copy_from(values).unwrap();
    b
}

/// What `SUM` computes on the CPU.
fn sum(inputs: &[Vec<f32>], count: usize, pick: usize) -> Vec<f32> {
    let pick = pick.min(inputs.len() - 1);
    (0..inputs[0].len())
        .map(|i| {
            let s: f32 = inputs[..count].iter().map(|v| v[i]).sum();
            s + 1000.0 * inputs[pick][i]
        })
        .collect()
}

#[test]
fn an_array_binding_reads_every_element_and_clamps_its_index() {
    on_each_context(|ctx, what| {
        let kernel = Kernel::from_glsl(ctx, SUM, "main").unwrap();
        assert_eq!(kernel.bindings()[0].array_len, Some(4), "{what}");
        assert_eq!(kernel.bindings()[1].array_len, None, "{what}");
        let n = 1000;
        let ins = inputs(ctx, n);
        let host: Vec<Vec<f32>> = ins.iter().map(|b| b.to_vec().unwrap()).collect();
        let out = ctx.enqueue_create_buffer::<f32>(n).unwrap();
        let parts: Vec<KernelArg<'_>> = ins.iter().map(|b| b.arg()).collect();
        for (count, pick) in [(4u32, 0u32), (2, 3), (4, 4), (1, 1_000_000), (0, u32::MAX)] {
            ctx.enqueue_function(
                &kernel,
                n.div_ceil(64) as u32,
                &[KernelArg::array(&parts), out.arg()],
                &[n as u32, count, pick],
            )
            .unwrap();
            assert_eq!(
                out.to_vec().unwrap(),
                sum(&host, count as usize, pick as usize),
                "{what}: count {count}, pick {pick}"
            );
        }
        // Views at aligned offsets, and one buffer in two read-only elements.
        let align = ctx.info().limits.min_storage_buffer_offset_alignment as usize;
        let big = upload(ctx, &(0..n + align).map(|i| i as f32).collect::<Vec<_>>());
        let view = big.create_sub_buffer::<f32>(align / 4, n).unwrap();
        let parts = [ins[0].arg(), view.arg(), view.arg(), ins[3].arg()];
        ctx.enqueue_function(
            &kernel,
            n.div_ceil(64) as u32,
            &[KernelArg::array(&parts), out.arg()],
            &[n as u32, 4u32, 1u32],
        )
        .unwrap();
        let v: Vec<f32> = view.to_vec().unwrap();
        let host = [host[0].clone(), v.clone(), v, host[3].clone()];
        assert_eq!(out.to_vec().unwrap(), sum(&host, 4, 1), "{what}: views");
    });
}

#[test]
fn a_written_array_takes_writes_at_clamped_indices() {
    on_each_context(|ctx, what| {
        let kernel = Kernel::from_glsl(ctx, SCATTER, "main").unwrap();
        let n = 100;
        let outs: Vec<DeviceBuffer<u32>> = (0..3)
            .map(|_| ctx.enqueue_create_buffer::<u32>(n).unwrap())
            .collect();
        for o in &outs {
            o.enqueue_fill(7).unwrap();
        }
        let parts: Vec<KernelArg<'_>> = outs.iter().map(|b| b.arg()).collect();
        let arg = [KernelArg::array(&parts)];
        for (which, value) in [(0u32, 100u32), (1, 200), (7, 300), (u32::MAX, 400)] {
            ctx.enqueue_function(&kernel, 2, &arg, &[n as u32, which, value])
                .unwrap();
        }
        let want = |v: u32| (0..n as u32).map(|i| v + i).collect::<Vec<_>>();
        assert_eq!(outs[0].to_vec().unwrap(), want(100), "{what}");
        assert_eq!(outs[1].to_vec().unwrap(), want(200), "{what}");
        // Indices 7 and u32::MAX reach the last element; 400 came last.
        assert_eq!(outs[2].to_vec().unwrap(), want(400), "{what}");
    });
}

/// The device's Vulkan 1.2 features, read from the driver itself.
fn vulkan12_features(ctx: &DeviceContext) -> vk::PhysicalDeviceVulkan12Features<'static> {
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut v12);
    // SAFETY: a valid chain (Vulkan 1.2 structs, which every vkcompute
    // device has) on the context's own physical device.
    unsafe {
        ctx.raw()
            .instance()
            .get_physical_device_features2(ctx.raw().physical_device(), &mut features)
    };
    v12.p_next = std::ptr::null_mut();
    v12
}

/// Whether the device offers `runtimeDescriptorArray`.
fn offers_runtime_arrays(ctx: &DeviceContext) -> bool {
    vulkan12_features(ctx).runtime_descriptor_array == vk::TRUE
}

/// Whether the device offers `shaderStorageBufferArrayNonUniformIndexing`.
fn offers_non_uniform(ctx: &DeviceContext) -> bool {
    vulkan12_features(ctx).shader_storage_buffer_array_non_uniform_indexing == vk::TRUE
}

/// What `RUNTIME_SUM` computes on the CPU: every index clamped to the
/// last buffer bound.
fn runtime_sum(inputs: &[Vec<u32>], count: u32, pick: u32) -> Vec<u32> {
    let last = inputs.len() - 1;
    (0..inputs[0].len())
        .map(|i| {
            let s: u32 = (0..count as usize).map(|k| inputs[k.min(last)][i]).sum();
            s + 1000 * inputs[(pick as usize).min(last)][i]
        })
        .collect()
}

#[test]
fn a_runtime_sized_array_binds_as_many_buffers_as_given_where_offered() {
    on_each_context(|ctx, what| {
        let loaded = Kernel::from_glsl(ctx, RUNTIME_SUM, "main");
        if !offers_runtime_arrays(ctx) {
            let e = loaded.expect_err("refused without the feature");
            assert!(matches!(e, Error::UnsupportedKernel { .. }), "{what}: {e}");
            assert!(
                e.to_string().contains("runtimeDescriptorArray"),
                "{what}: {e}"
            );
            eprintln!("{what}: runtime-sized arrays of buffers skipped: the device lacks runtimeDescriptorArray");
            return;
        }
        let kernel = loaded.unwrap();
        let b = &kernel.bindings()[0];
        assert!(b.runtime_sized && b.array_len.is_none(), "{what}: {b:?}");
        let n = 150;
        let ins: Vec<DeviceBuffer<u32>> = (0..6u32)
            .map(|k| upload(ctx, &(0..n as u32).map(|i| k * 100 + i).collect::<Vec<_>>()))
            .collect();
        let host: Vec<Vec<u32>> = ins.iter().map(|b| b.to_vec().unwrap()).collect();
        let out = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let parts: Vec<KernelArg<'_>> = ins.iter().map(|b| b.arg()).collect();
        let groups = n.div_ceil(64) as u32;
        // Lengths 3, 6, 1 and 3 again (its pipeline kept); counts and picks
        // past the end clamp to the last buffer bound.
        for (len, count, pick) in [
            (3, 3, 10),
            (6, 6, u32::MAX),
            (1, 4, 0),
            (3, 10, 1),
            (6, 2, 5),
        ] {
            ctx.enqueue_function(
                &kernel,
                groups,
                &[KernelArg::array(&parts[..len]), out.arg()],
                &[n as u32, count, pick],
            )
            .unwrap();
            assert_eq!(
                out.to_vec().unwrap(),
                runtime_sum(&host[..len], count, pick),
                "{what}: {len} buffers, count {count}, pick {pick}"
            );
        }
        // One buffer given as itself is an array of one.
        ctx.enqueue_function(
            &kernel,
            groups,
            &[ins[4].arg(), out.arg()],
            &[n as u32, 2u32, 0u32],
        )
        .unwrap();
        assert_eq!(
            out.to_vec().unwrap(),
            runtime_sum(&host[4..5], 2, 0),
            "{what}"
        );
        // An empty array is refused; so is a written buffer among the read.
        let e = ctx
            .enqueue_function(
                &kernel,
                groups,
                &[KernelArg::array(&[]), out.arg()],
                &[n as u32, 1u32, 0u32],
            )
            .unwrap_err();
        assert!(
            matches!(&e, Error::Argument { index: 0, reason, .. } if reason.contains("empty")),
            "{what}: {e}"
        );
        let with_out = [parts[0], out.arg()];
        let e = ctx
            .enqueue_function(
                &kernel,
                groups,
                &[KernelArg::array(&with_out), out.arg()],
                &[n as u32, 1u32, 0u32],
            )
            .unwrap_err();
        assert!(matches!(e, Error::AliasedArguments { .. }), "{what}: {e}");
        // More buffers than a kernel may bind is refused before any
        // per-element work.
        let many = vec![parts[0]; 5000];
        let e = ctx
            .enqueue_function(
                &kernel,
                groups,
                &[KernelArg::array(&many), out.arg()],
                &[n as u32, 1u32, 0u32],
            )
            .unwrap_err();
        assert!(matches!(e, Error::Argument { index: 0, .. }), "{what}: {e}");
        // In a graph, with an element substituted.
        let mut builder = ctx.capture_graph();
        builder
            .enqueue_function(
                &kernel,
                groups,
                &[KernelArg::array(&parts[..4]), out.arg()],
                &[n as u32, 4u32, 3u32],
            )
            .unwrap();
        let graph = builder.finish().unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        assert_eq!(
            out.to_vec().unwrap(),
            runtime_sum(&host[..4], 4, 3),
            "{what}: graph"
        );
        let params = GraphParams::new().buffer(&ins[3], &ins[5]).unwrap();
        ctx.enqueue_graph_with(&graph, &params).unwrap();
        let substituted = [
            host[0].clone(),
            host[1].clone(),
            host[2].clone(),
            host[5].clone(),
        ];
        assert_eq!(
            out.to_vec().unwrap(),
            runtime_sum(&substituted, 4, 3),
            "{what}: substituted"
        );
    });
}

#[test]
fn a_non_uniform_index_runs_where_offered_and_is_refused_by_name_elsewhere() {
    on_each_context(|ctx, what| {
        let loaded = Kernel::from_glsl(ctx, NON_UNIFORM, "main");
        if !offers_non_uniform(ctx) {
            let e = loaded.expect_err("refused without the feature");
            assert!(matches!(e, Error::UnsupportedKernel { .. }), "{what}: {e}");
            assert!(
                e.to_string()
                    .contains("shaderStorageBufferArrayNonUniformIndexing"),
                "{what}: {e}"
            );
            eprintln!("{what}: non-uniform indexing skipped: the device lacks it");
            return;
        }
        let kernel = loaded.unwrap();
        let n = 256;
        let ins: Vec<DeviceBuffer<u32>> = (0..4u32)
            .map(|k| {
                let v: Vec<u32> = (0..n as u32).map(|i| k * 1000 + i).collect();
                upload(ctx, &v)
            })
            .collect();
        let out = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let parts: Vec<KernelArg<'_>> = ins.iter().map(|b| b.arg()).collect();
        ctx.enqueue_function(
            &kernel,
            (n / 64) as u32,
            &[KernelArg::array(&parts), out.arg()],
            &(n as u32),
        )
        .unwrap();
        let want: Vec<u32> = (0..n as u32).map(|i| (i % 4) * 1000 + i).collect();
        assert_eq!(out.to_vec().unwrap(), want, "{what}");
    });
}

/// `maxPushDescriptors`, read from the driver (0 without the extension).
fn max_push_descriptors(ctx: &DeviceContext) -> u32 {
    let mut push = vk::PhysicalDevicePushDescriptorPropertiesKHR::default();
    let mut properties = vk::PhysicalDeviceProperties2::default().push_next(&mut push);
    // SAFETY: a valid chain on the context's own physical device (a driver
    // without the extension leaves the struct as it is).
    unsafe {
        ctx.raw()
            .instance()
            .get_physical_device_properties2(ctx.raw().physical_device(), &mut properties)
    };
    push.max_push_descriptors
}

#[test]
fn an_array_up_to_the_stage_limit_binds_even_past_max_push_descriptors() {
    on_each_context(|ctx, what| {
        // Every storage buffer a stage may bind: the array and the output.
        let per_stage = ctx.raw().limits().max_per_stage_descriptor_storage_buffers;
        let count = per_stage.min(1024) as usize - 1;
        let kernel = Kernel::from_glsl(ctx, &wide_sum(count), "main").unwrap();
        let max_push = max_push_descriptors(ctx) as usize;
        if count < max_push {
            eprintln!(
                "{what}: {} descriptors fit in maxPushDescriptors {max_push}: the descriptor-set \
                 fallback of push-descriptor devices is not reached on this device",
                count + 1
            );
        }
        let n = 130;
        let ins: Vec<DeviceBuffer<u32>> = (0..count as u32)
            .map(|k| {
                let v: Vec<u32> = (0..n as u32).map(|i| k + i).collect();
                upload(ctx, &v)
            })
            .collect();
        let out = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let parts: Vec<KernelArg<'_>> = ins.iter().map(|b| b.arg()).collect();
        // Twice, so that a run of dispatches rebinds nothing it need not.
        for _ in 0..2 {
            ctx.enqueue_function(
                &kernel,
                n.div_ceil(64) as u32,
                &[KernelArg::array(&parts), out.arg()],
                &(n as u32),
            )
            .unwrap();
        }
        let k_sum: u32 = (0..count as u32).sum();
        let want: Vec<u32> = (0..n as u32).map(|i| k_sum + count as u32 * i).collect();
        assert_eq!(out.to_vec().unwrap(), want, "{what}");
        // One more buffer than the stage binds is refused at load.
        if count + 1 == per_stage as usize {
            let e = Kernel::from_glsl(ctx, &wide_sum(count + 1), "main").expect_err("refused");
            assert!(
                e.to_string()
                    .contains(&format!("{} storage buffers", count + 2)),
                "{what}: {e}"
            );
        }
    });
}

#[test]
fn an_array_of_more_buffers_than_the_device_binds_is_refused_at_load() {
    on_each_context(|ctx, what| {
        let e = Kernel::from_glsl(ctx, &wide_sum(5000), "main").expect_err("refused");
        assert!(matches!(e, Error::UnsupportedKernel { .. }), "{what}: {e}");
        assert!(
            e.to_string().contains("5001 storage buffers"),
            "{what}: {e}"
        );
    });
}

#[test]
fn bad_array_arguments_are_refused_and_the_context_goes_on() {
    on_each_context(|ctx, what| {
        let sum_kernel = Kernel::from_glsl(ctx, SUM, "main").unwrap();
        let scatter = Kernel::from_glsl(ctx, SCATTER, "main").unwrap();
        let n = 64;
        let ins = inputs(ctx, n);
        let out = ctx.enqueue_create_buffer::<f32>(n).unwrap();
        let push = [n as u32, 4, 0];
        let parts: Vec<KernelArg<'_>> = ins.iter().map(|b| b.arg()).collect();
        let dispatch = |args: &[KernelArg<'_>]| ctx.enqueue_function(&sum_kernel, 1, args, &push);
        let argument = |e: Error, index: usize, text: &str| match e {
            Error::Argument {
                index: i, reason, ..
            } if i == index && reason.contains(text) => {}
            e => panic!("{what}: expected argument {index} refused with `{text}`, got {e}"),
        };
        // One buffer where the binding is an array, and the reverse.
        argument(
            dispatch(&[ins[0].arg(), out.arg()]).unwrap_err(),
            0,
            "array of 4",
        );
        argument(
            dispatch(&[KernelArg::array(&parts), KernelArg::array(&parts)]).unwrap_err(),
            1,
            "one buffer",
        );
        // Too few and too many elements.
        argument(
            dispatch(&[KernelArg::array(&parts[..3]), out.arg()]).unwrap_err(),
            0,
            "array of 3",
        );
        let five = [parts[0], parts[1], parts[2], parts[3], parts[0]];
        argument(
            dispatch(&[KernelArg::array(&five), out.arg()]).unwrap_err(),
            0,
            "array of 5",
        );
        // An array inside an array.
        let nested = [parts[0], parts[1], parts[2], KernelArg::array(&parts)];
        argument(
            dispatch(&[KernelArg::array(&nested), out.arg()]).unwrap_err(),
            0,
            "element 3 is itself an array",
        );
        // An element of the wrong type, named by its position.
        let ints = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let typed = [parts[0], parts[1], ints.arg(), parts[3]];
        argument(
            dispatch(&[KernelArg::array(&typed), out.arg()]).unwrap_err(),
            0,
            "element 2:",
        );
        let reinterpreted = [parts[0], parts[1], ints.arg_reinterpret(), parts[3]];
        dispatch(&[KernelArg::array(&reinterpreted), out.arg()]).unwrap();
        // An empty element, and one at an offset no binding may start at.
        let empty = ins[1].create_sub_buffer::<f32>(0, 0).unwrap();
        let with_empty = [parts[0], empty.arg(), parts[2], parts[3]];
        argument(
            dispatch(&[KernelArg::array(&with_empty), out.arg()]).unwrap_err(),
            0,
            "element 1:",
        );
        let align = ctx.info().limits.min_storage_buffer_offset_alignment;
        if align > 4 {
            let odd = ins[1].create_sub_buffer::<f32>(1, n - 1).unwrap();
            let misaligned = [parts[0], odd.arg(), parts[2], parts[3]];
            let e = dispatch(&[KernelArg::array(&misaligned), out.arg()]).unwrap_err();
            assert!(matches!(e, Error::Misaligned { .. }), "{what}: {e}");
        }
        // The output inside the read array: it is written.
        let out_in = [parts[0], parts[1], out.arg(), parts[3]];
        let e = dispatch(&[KernelArg::array(&out_in), out.arg()]).unwrap_err();
        assert!(
            matches!(
                e,
                Error::AliasedArguments {
                    first: 0,
                    second: 1,
                    ..
                }
            ) && e.to_string().contains("element 2 of argument 0"),
            "{what}: {e}"
        );
        // Two elements of a written array on one buffer.
        let a = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let b = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let twice = [a.arg(), b.arg(), a.arg()];
        let e = ctx
            .enqueue_function(&scatter, 1, &[KernelArg::array(&twice)], &[n as u32, 0, 0])
            .unwrap_err();
        assert!(
            matches!(
                e,
                Error::AliasedArguments {
                    first: 0,
                    second: 0,
                    ..
                }
            ),
            "{what}: {e}"
        );
        // An array for a kernel without arrays.
        let store = Kernel::new(ctx, vkcompute::shaders::STORE, "main").unwrap();
        let one = [a.arg()];
        ctx.enqueue_function(&store, 1, &[KernelArg::array(&one)], &[0u32, 5u32])
            .unwrap();
        assert_eq!(
            a.to_vec().unwrap()[0],
            5,
            "{what}: an array of one is one buffer"
        );
        // And the context goes on.
        dispatch(&[KernelArg::array(&parts), out.arg()]).unwrap();
        let host: Vec<Vec<f32>> = ins.iter().map(|b| b.to_vec().unwrap()).collect();
        assert_eq!(out.to_vec().unwrap(), sum(&host, 4, 0), "{what}");
    });
}

#[test]
fn graphs_capture_array_arguments_and_substitute_their_elements() {
    on_each_context(|ctx, what| {
        let kernel = Kernel::from_glsl(ctx, SUM, "main").unwrap();
        let n = 200;
        let ins = inputs(ctx, n);
        let host: Vec<Vec<f32>> = ins.iter().map(|b| b.to_vec().unwrap()).collect();
        let out = ctx.enqueue_create_buffer::<f32>(n).unwrap();
        let parts: Vec<KernelArg<'_>> = ins.iter().map(|b| b.arg()).collect();
        let mut builder = ctx.capture_graph();
        builder
            .enqueue_function(
                &kernel,
                n.div_ceil(64) as u32,
                &[KernelArg::array(&parts), out.arg()],
                &[n as u32, 4u32, 2u32],
            )
            .unwrap();
        let graph = builder.finish().unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        assert_eq!(out.to_vec().unwrap(), sum(&host, 4, 2), "{what}");
        // Element 2 substituted by a buffer of other values.
        let other: Vec<f32> = (0..n).map(|i| -(i as f32)).collect();
        let with = upload(ctx, &other);
        let params = GraphParams::new().buffer(&ins[2], &with).unwrap();
        ctx.enqueue_graph_with(&graph, &params).unwrap();
        let substituted = [host[0].clone(), host[1].clone(), other, host[3].clone()];
        assert_eq!(out.to_vec().unwrap(), sum(&substituted, 4, 2), "{what}");
        // A substitute that would alias the written output is refused.
        let params = GraphParams::new().buffer(&ins[1], &out).unwrap();
        assert!(
            ctx.enqueue_graph_with(&graph, &params).is_err(),
            "{what}: an element substituted by the output"
        );
        ctx.enqueue_graph(&graph).unwrap();
        assert_eq!(out.to_vec().unwrap(), sum(&host, 4, 2), "{what}");
    });
}

/// `o[i] = sum of ins[k].d[i]` over an array whose length is a
/// specialization constant.
const SPECIALIZED: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(constant_id = 0) const uint N = 2u;
layout(std430, binding = 0) readonly buffer In { uint d[]; } ins[N];
layout(std430, binding = 1) buffer Out { uint o[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    uint s = 0u;
    for (uint k = 0u; k < N; k++) s += ins[k].d[i];
    o[i] = s;
}
"#;

#[test]
fn an_array_length_set_by_a_specialization_constant_binds_that_many() {
    on_each_context(|ctx, what| {
        let ins: Vec<DeviceBuffer<u32>> = (0..5u32).map(|k| upload(ctx, &[k + 1; 64])).collect();
        let out = ctx.enqueue_create_buffer::<u32>(64).unwrap();
        let parts: Vec<KernelArg<'_>> = ins.iter().map(|b| b.arg()).collect();
        for n in [2usize, 5] {
            let kernel = Kernel::glsl(SPECIALIZED)
                .compile()
                .specialize(0, n as u32)
                .build(ctx)
                .unwrap();
            assert_eq!(kernel.bindings()[0].array_len, Some(n as u32), "{what}");
            ctx.enqueue_function(&kernel, 1, &[KernelArg::array(&parts[..n]), out.arg()], &())
                .unwrap();
            let want: u32 = (1..=n as u32).sum();
            assert_eq!(out.to_vec().unwrap(), vec![want; 64], "{what}: N = {n}");
            let e = ctx
                .enqueue_function(
                    &kernel,
                    1,
                    &[KernelArg::array(&parts[..n - 1]), out.arg()],
                    &(),
                )
                .unwrap_err();
            assert!(matches!(e, Error::Argument { index: 0, .. }), "{what}: {e}");
        }
    });
}

#[test]
fn two_threads_dispatch_one_runtime_sized_kernel_at_different_lengths() {
    on_each_context(|ctx, what| {
        let Ok(kernel) = Kernel::from_glsl(ctx, RUNTIME_SUM, "main") else {
            assert!(
                !offers_runtime_arrays(ctx),
                "{what}: refused although offered"
            );
            eprintln!("{what}: skipped: the device lacks runtimeDescriptorArray");
            return;
        };
        let n = 64;
        let ins: Vec<DeviceBuffer<u32>> = (0..8u32).map(|k| upload(ctx, &[k; 64])).collect();
        std::thread::scope(|s| {
            for t in 0..2usize {
                let (kernel, ins) = (&kernel, &ins);
                s.spawn(move || {
                    let out = ctx.enqueue_create_buffer::<u32>(n).unwrap();
                    let parts: Vec<KernelArg<'_>> = ins.iter().map(|b| b.arg()).collect();
                    for round in 0..12usize {
                        // The threads walk the lengths in opposite orders.
                        let len = if t == 0 { 1 + round % 8 } else { 8 - round % 8 };
                        ctx.enqueue_function(
                            kernel,
                            1,
                            &[KernelArg::array(&parts[..len]), out.arg()],
                            &[n as u32, len as u32, 0u32],
                        )
                        .unwrap();
                        let want: u32 = (0..len as u32).sum();
                        assert_eq!(
                            out.to_vec().unwrap(),
                            vec![want; n],
                            "{what}: thread {t}, {len}"
                        );
                    }
                });
            }
        });
    });
}
