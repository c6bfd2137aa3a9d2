//! Kernel soundness (issue 10): robust buffer access, the refusal of
//! pointer-addressing modules by the safe API and their unsafe entry point,
//! capabilities checked against the enabled features, kernels without
//! buffers on both descriptor paths, buffer atomics under the memory model,
//! and written arguments that alias.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]
#![cfg(all(feature = "glsl", feature = "build"))]

mod common;

use bytemuck::{Pod, Zeroable};
use common::{run_with, Path};
use vkcompute::ash::vk;
use vkcompute::{DeviceBuffer, DeviceContext, Error, Kernel};

/// Both descriptor paths (push descriptors and pooled sets), validated.
fn on_each_descriptor_path(test: impl Fn(&DeviceContext, bool)) {
    for push in [true, false] {
        let options = common::options(Path::Direct).push_descriptors(push);
        run_with(options, &format!("push descriptors {push}"), |ctx| {
            test(ctx, push)
        });
    }
}

/// Elements of `u32` in one aligned segment: a multiple of
/// `minStorageBufferOffsetAlignment` and of the 64-wide workgroup.
fn segment(ctx: &DeviceContext) -> usize {
    let align = ctx.info().limits.min_storage_buffer_offset_alignment as usize;
    (align / 4).max(1).next_multiple_of(64)
}

/// Stores `p.n + i` and `p.far + i` for every invocation `i`: all out of
/// range of a binding of `p.n` elements.
const WRITE_OUT_OF_RANGE: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { uint data[]; };
layout(push_constant) uniform P { uint n; uint far; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    data[p.n + i] = 7u;
    data[p.far + i] = 9u;
}
"#;

/// Reads `data[p.n + i]` (out of range) into `seen[i]`.
const READ_OUT_OF_RANGE: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Data { uint data[]; };
layout(std430, binding = 1) writeonly buffer Seen { uint seen[]; };
layout(push_constant) uniform P { uint n; uint far; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    seen[i] = data[p.n + i] + data[p.far + i];
}
"#;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Range {
    n: u32,
    far: u32,
}

/// Whether the physical device offers `robustBufferAccess2`, asked of the
/// driver directly rather than of vkcompute.
fn device_offers_robust_buffer_access2(ctx: &DeviceContext) -> bool {
    let instance = ctx.raw().instance();
    // SAFETY: the physical device belongs to the context's live instance.
    let extensions =
        unsafe { instance.enumerate_device_extension_properties(ctx.raw().physical_device()) }
            .expect("device extensions");
    let has_extension = extensions
        .iter()
        .any(|e| e.extension_name_as_c_str() == Ok(vk::EXT_ROBUSTNESS2_NAME));
    if !has_extension {
        return false;
    }
    let mut robustness2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default();
    let mut features = vk::PhysicalDeviceFeatures2::default().push_next(&mut robustness2);
    // SAFETY: the device offers the extension whose struct is chained.
    unsafe { instance.get_physical_device_features2(ctx.raw().physical_device(), &mut features) };
    robustness2.robust_buffer_access2 == vk::TRUE
}

#[test]
fn robust_buffer_access_is_enabled_and_out_of_range_indices_leave_neighbours_intact() {
    on_each_descriptor_path(|ctx, _| {
        let enabled = ctx
            .info()
            .enabled
            .expect("an opened device reports what it enabled");
        assert!(
            enabled.robust_buffer_access,
            "robustBufferAccess is not enabled on {}",
            ctx.name()
        );
        assert_eq!(
            enabled.robust_buffer_access2,
            device_offers_robust_buffer_access2(ctx),
            "robustBufferAccess2 must be enabled exactly where the device offers it"
        );
        let seg = segment(ctx);
        let guard = 0xAAAA_AAAAu32;
        let parent = ctx.enqueue_create_buffer::<u32>(3 * seg).unwrap();
        parent.enqueue_fill(guard).unwrap();
        let other = ctx.enqueue_create_buffer::<u32>(seg).unwrap();
        other.enqueue_fill(guard).unwrap();
        let middle = parent.create_sub_buffer::<u32>(seg, seg).unwrap();
        middle.enqueue_fill(5).unwrap();
        let range = Range {
            n: seg as u32,
            far: 1 << 24,
        };
        let groups = (seg / 64) as u32;

        let read = Kernel::from_glsl(ctx, READ_OUT_OF_RANGE, "main").unwrap();
        let seen = ctx.enqueue_create_buffer::<u32>(seg).unwrap();
        ctx.enqueue_function(&read, groups, &[middle.arg(), seen.arg()], &range)
            .unwrap();
        for (i, v) in seen.to_vec().unwrap().into_iter().enumerate() {
            if enabled.robust_buffer_access2 {
                assert_eq!(v, 0, "out-of-range reads return zero (read {i})");
            } else {
                // Each read returns zero or data of the bound range (all 5).
                assert!([0, 5, 10].contains(&v), "read {i} returned {v:#x}");
            }
        }

        let write = Kernel::from_glsl(ctx, WRITE_OUT_OF_RANGE, "main").unwrap();
        ctx.enqueue_function(&write, groups, &[middle.arg()], &range)
            .unwrap();
        assert!(
            other.to_vec().unwrap().iter().all(|&v| v == guard),
            "another buffer changed"
        );
        let all = parent.to_vec().unwrap();
        if enabled.robust_buffer_access2 {
            // With robustBufferAccess alone, an out-of-range write may land
            // anywhere in the view's buffer; with robustBufferAccess2 it is
            // dropped.
            assert!(
                all[..seg].iter().all(|&v| v == guard),
                "the range before the binding changed"
            );
            assert!(
                all[2 * seg..].iter().all(|&v| v == guard),
                "the range after the binding changed"
            );
            assert!(
                all[seg..2 * seg].iter().all(|&v| v == 5),
                "out-of-range writes are dropped"
            );
        }
    });
}

/// The issue's exploit: a kernel that writes through an address passed in
/// push constants (on lavapipe a device address is a host pointer).
const WRITE_THROUGH_ADDRESS: &str = r#"#version 450
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
layout(local_size_x = 64) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Words { uint v[]; };
layout(push_constant) uniform P { uint64_t addr; uint n; uint pad; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) Words(p.addr).v[i] = i * 3u + 1u;
}
"#;

/// The same with the reference itself in the push constants (no
/// integer-to-pointer conversion in the module).
const WRITE_THROUGH_REFERENCE: &str = r#"#version 450
#extension GL_EXT_buffer_reference : require
layout(local_size_x = 1) in;
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Word { uint v; };
layout(push_constant) uniform P { Word target; } p;
void main() {
    p.target.v = 0xdeadbeefu;
}
"#;

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Address {
    addr: u64,
    n: u32,
    pad: u32,
}

fn assert_refused_for_pointers(result: vkcompute::Result<Kernel>, what: &str) {
    match result {
        Err(Error::PointerAddressing { kernel, found }) => {
            assert_eq!(kernel, "main");
            assert!(
                found.contains("PhysicalStorageBuffer"),
                "{what}: the error should name what was found, got {found:?}"
            );
        }
        other => panic!("{what}: expected PointerAddressing, got {other:?}"),
    }
}

#[test]
fn the_safe_api_refuses_kernels_that_address_memory_through_pointers() {
    run_with(common::options(Path::Direct), "pointer kernels", |ctx| {
        let target = Box::new(0x1234_5678u32);
        assert_refused_for_pointers(
            Kernel::from_glsl(ctx, WRITE_THROUGH_ADDRESS, "main"),
            "Kernel::from_glsl, address in push constants",
        );
        assert_refused_for_pointers(
            Kernel::from_glsl(ctx, WRITE_THROUGH_REFERENCE, "main"),
            "Kernel::from_glsl, reference in push constants",
        );
        for source in [WRITE_THROUGH_ADDRESS, WRITE_THROUGH_REFERENCE] {
            let words = vkcompute::build::compile_glsl(source, "pointer.comp", "main").unwrap();
            assert_refused_for_pointers(Kernel::new(ctx, &words, "main"), "Kernel::new");
            assert_refused_for_pointers(Kernel::builder(&words).build(ctx), "KernelBuilder::build");
            // Loaded for pointers first, the module is still refused by the
            // safe path (the kernel cache keeps the two apart).
            let pointer_kernel = Kernel::builder(&words)
                .allow_pointer_addressing()
                .build(ctx)
                .unwrap();
            assert_refused_for_pointers(Kernel::new(ctx, &words, "main"), "Kernel::new again");
            // And the safe dispatch refuses the kernel loaded for pointers.
            let push = Address {
                addr: &*target as *const u32 as u64,
                n: 1,
                pad: 0,
            };
            let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
            let recorded = ctx.diagnostics().live_objects().commands_recorded;
            let refused = if source == WRITE_THROUGH_ADDRESS {
                ctx.enqueue_function(&pointer_kernel, 1, &[], &push)
            } else {
                ctx.enqueue_function(&pointer_kernel, 1, &[], &push.addr)
            };
            match refused {
                Err(Error::PointerAddressing { found, .. }) => {
                    assert!(found.contains("allow_pointer_addressing"), "{found}")
                }
                other => panic!("expected PointerAddressing, got {other:?}"),
            }
            // So do a graph's dispatches and the indirect dispatch.
            let mut g = ctx.capture_graph();
            let refusals = if source == WRITE_THROUGH_ADDRESS {
                [
                    g.enqueue_function(&pointer_kernel, 1, &[], &push).err(),
                    g.enqueue_function_indirect(&pointer_kernel, &counts, 0, &[], &push)
                        .err(),
                    ctx.enqueue_function_indirect(&pointer_kernel, &counts, 0, &[], &push)
                        .err(),
                ]
            } else {
                [
                    g.enqueue_function(&pointer_kernel, 1, &[], &push.addr)
                        .err(),
                    g.enqueue_function_indirect(&pointer_kernel, &counts, 0, &[], &push.addr)
                        .err(),
                    ctx.enqueue_function_indirect(&pointer_kernel, &counts, 0, &[], &push.addr)
                        .err(),
                ]
            };
            for e in refusals {
                assert!(matches!(e, Some(Error::PointerAddressing { .. })), "{e:?}");
            }
            assert_eq!(ctx.diagnostics().live_objects().commands_recorded, recorded);
        }
        ctx.synchronize().unwrap();
        assert_eq!(*target, 0x1234_5678, "the host value was overwritten");
        still_works(ctx);
    });
}

/// A normal dispatch after an error: the context is intact.
fn still_works(ctx: &DeviceContext) {
    let store = Kernel::new(ctx, vkcompute::shaders::STORE, "main").unwrap();
    let data = ctx.enqueue_create_buffer::<u32>(4).unwrap();
    data.enqueue_fill(0).unwrap();
    ctx.enqueue_function(&store, 1, &[data.arg()], &[1u32, 99u32])
        .unwrap();
    assert_eq!(data.to_vec().unwrap(), [0, 99, 0, 0]);
}

/// Dispatches `kernel` (from [`WRITE_THROUGH_ADDRESS`]) to write elements
/// `0..n` of `buffer` through its device address, `buffer` listed.
fn write_through_address(
    ctx: &DeviceContext,
    kernel: &Kernel,
    buffer: &DeviceBuffer<u32>,
    n: usize,
) {
    assert!(n <= buffer.len());
    let push = Address {
        addr: buffer.device_address().expect("a device address"),
        n: n as u32,
        pad: 0,
    };
    // SAFETY: the kernel writes elements 0..n of `buffer` (checked to have
    // at least n), whose address it gets from `push`, and `buffer` is listed;
    // the dispatch is ordered against other work on it like an argument.
    unsafe {
        ctx.enqueue_function_with_addresses(
            kernel,
            (n as u32).div_ceil(64),
            &[],
            &[buffer.arg()],
            &push,
        )
    }
    .unwrap();
}

#[test]
fn a_pointer_kernel_runs_through_the_unsafe_entry_and_keeps_listed_buffers_alive() {
    on_each_descriptor_path(|ctx, _| {
        let enabled = ctx.info().enabled.unwrap();
        assert!(
            enabled.buffer_device_address,
            "lavapipe has bufferDeviceAddress"
        );
        let kernel = Kernel::builder(
            &vkcompute::build::compile_glsl(WRITE_THROUGH_ADDRESS, "pointer.comp", "main").unwrap(),
        )
        .allow_pointer_addressing()
        .build(ctx)
        .unwrap();
        assert!(kernel.bindings().is_empty());

        // The result: half the buffer written through its address, the rest
        // left as the fill before (ordered before the dispatch) made it.
        let n = 1000usize;
        let out = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        out.enqueue_fill(0xFFFF).unwrap();
        write_through_address(ctx, &kernel, &out, n / 2);
        let expected: Vec<u32> = (0..n as u32)
            .map(|i| {
                if (i as usize) < n / 2 {
                    i * 3 + 1
                } else {
                    0xFFFF
                }
            })
            .collect();
        assert_eq!(out.to_vec().unwrap(), expected);

        // A listed buffer dropped right after the enqueue is freed only
        // once the dispatch completes.
        ctx.synchronize().unwrap();
        assert_eq!(ctx.diagnostics().live_objects().pending_frees, 0);
        let doomed = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        write_through_address(ctx, &kernel, &doomed, n);
        drop(doomed);
        assert_eq!(
            ctx.diagnostics().live_objects().pending_frees,
            1,
            "the listed buffer must wait for the dispatch before it is freed"
        );
        ctx.synchronize().unwrap();
        assert_eq!(ctx.diagnostics().live_objects().pending_frees, 0);
        still_works(ctx);
    });
}

/// No storage buffers (and no push constants): shared memory only.
const NO_BUFFERS: &str = r#"#version 450
layout(local_size_x = 64) in;
shared uint scratch[64];
void main() {
    scratch[gl_LocalInvocationID.x] = gl_LocalInvocationID.x;
    barrier();
}
"#;

#[test]
fn kernels_without_buffers_dispatch_on_both_descriptor_paths() {
    on_each_descriptor_path(|ctx, push| {
        let kernel = Kernel::from_glsl(ctx, NO_BUFFERS, "main").unwrap();
        assert!(kernel.bindings().is_empty());
        let pools = ctx.diagnostics().live_objects().descriptor_pools;
        for _ in 0..3 {
            ctx.enqueue_function(&kernel, 4, &[], &()).unwrap();
        }
        ctx.synchronize().unwrap();
        // The pooled path allocates no (empty) descriptor set for it.
        assert_eq!(
            ctx.diagnostics().live_objects().descriptor_pools,
            pools,
            "push descriptors {push}: a kernel without buffers took a descriptor pool"
        );
        still_works(ctx);
    });
}

/// A histogram with buffer atomics: `extensions` go after `#version`, and
/// `add` is the atomic add of 1 to `counts[bin]`.
fn histogram(extensions: &str, add: &str) -> String {
    format!(
        r#"#version 450
{extensions}
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Data {{ uint data[]; }};
layout(std430, binding = 1) buffer Counts {{ uint counts[]; }};
layout(push_constant) uniform P {{ uint n; }} p;
void main() {{
    uint i = gl_GlobalInvocationID.x;
    uint bin = data[i % p.n] % 16u;
    if (i < p.n) {add};
}}
"#
    )
}

fn check_histogram(ctx: &DeviceContext, kernel: &Kernel) {
    let mut rng = common::Rng::new(11);
    let n = 5000usize;
    let values: Vec<u32> = (0..n).map(|_| rng.below(1000) as u32).collect();
    let mut expected = vec![0u32; 16];
    for v in &values {
        expected[(v % 16) as usize] += 1;
    }
    let data = ctx.enqueue_create_buffer::<u32>(n).unwrap();
    data.enqueue_copy_from(&values).unwrap();
    let counts = ctx.enqueue_create_buffer::<u32>(16).unwrap();
    counts.enqueue_fill(0).unwrap();
    ctx.enqueue_function(
        kernel,
        (n as u32).div_ceil(64),
        &[data.arg(), counts.arg()],
        &(n as u32),
    )
    .unwrap();
    assert_eq!(counts.to_vec().unwrap(), expected);
}

#[test]
fn buffer_atomics_match_the_cpu_on_both_descriptor_paths() {
    on_each_descriptor_path(|ctx, _| {
        let enabled = ctx.info().enabled.unwrap();
        assert_eq!(
            enabled.vulkan_memory_model, enabled.vulkan_memory_model_device_scope,
            "the memory model is enabled only with its Device scope"
        );
        // Plain GLSL atomics: glslang gives them Device scope.
        let plain = histogram("", "atomicAdd(counts[bin], 1u)");
        let kernel = Kernel::from_glsl(ctx, &plain, "main").unwrap();
        check_histogram(ctx, &kernel);
        // Under the Vulkan memory model, whose Device scope needs
        // `vulkanMemoryModelDeviceScope`.
        let vulkan_model = histogram(
            "#pragma use_vulkan_memory_model\n#extension GL_KHR_memory_scope_semantics : require",
            "atomicAdd(counts[bin], 1u, gl_ScopeDevice, gl_StorageSemanticsBuffer, gl_SemanticsRelaxed)",
        );
        match Kernel::from_glsl(ctx, &vulkan_model, "main") {
            Ok(kernel) => {
                assert!(enabled.vulkan_memory_model_device_scope);
                check_histogram(ctx, &kernel);
            }
            Err(Error::UnsupportedKernel { reason, .. }) => {
                assert!(!enabled.vulkan_memory_model_device_scope);
                assert!(reason.contains("VulkanMemoryModel"), "{reason}");
            }
            Err(e) => panic!("unexpected error: {e}"),
        }
        still_works(ctx);
    });
}

/// `dst[i] = src[i] + 1`.
const INCREMENT: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer Src { uint src[]; };
layout(std430, binding = 1) writeonly buffer Dst { uint dst[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < src.length()) dst[i] = src[i] + 1u;
}
"#;

/// `dst[i] = a[i] + b[i]`, both inputs read-only.
const ADD: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) readonly buffer A { uint a[]; };
layout(std430, binding = 1) readonly buffer B { uint b[]; };
layout(std430, binding = 2) writeonly buffer Dst { uint dst[]; };
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < dst.length()) dst[i] = a[i] + b[i];
}
"#;

fn assert_aliased(result: vkcompute::Result<()>, first: usize, second: usize) {
    match result {
        Err(Error::AliasedArguments {
            first: f,
            second: s,
            ..
        }) => assert_eq!((f, s), (first, second)),
        other => panic!("expected AliasedArguments, got {other:?}"),
    }
}

#[test]
fn written_arguments_that_overlap_are_refused_and_read_only_aliases_run() {
    run_with(common::options(Path::Direct), "aliasing", |ctx| {
        let seg = segment(ctx);
        let increment = Kernel::from_glsl(ctx, INCREMENT, "main").unwrap();
        let buffer = ctx.enqueue_create_buffer::<u32>(3 * seg).unwrap();
        let initial: Vec<u32> = (0..3 * seg as u32).collect();
        buffer.enqueue_copy_from(&initial).unwrap();
        let groups = (seg / 64) as u32;
        let recorded = ctx.diagnostics().live_objects().commands_recorded;

        // The same buffer read and written.
        assert_aliased(
            ctx.enqueue_function(&increment, groups * 3, &[buffer.arg(), buffer.arg()], &()),
            0,
            1,
        );
        // Overlapping views of one buffer, the written one second or first.
        let first_two = buffer.create_sub_buffer::<u32>(0, 2 * seg).unwrap();
        let last_two = buffer.create_sub_buffer::<u32>(seg, 2 * seg).unwrap();
        assert_aliased(
            ctx.enqueue_function(
                &increment,
                groups * 2,
                &[first_two.arg(), last_two.arg()],
                &(),
            ),
            0,
            1,
        );
        assert_aliased(
            ctx.enqueue_function(
                &increment,
                groups * 2,
                &[last_two.arg(), first_two.arg()],
                &(),
            ),
            0,
            1,
        );
        // A view and the whole buffer.
        assert_aliased(
            ctx.enqueue_function(&increment, groups, &[buffer.arg(), last_two.arg()], &()),
            0,
            1,
        );
        let add = Kernel::from_glsl(ctx, ADD, "main").unwrap();
        // The output aliasing a read-only input of a three-binding kernel.
        let out = ctx.enqueue_create_buffer::<u32>(seg).unwrap();
        let middle = buffer.create_sub_buffer::<u32>(seg, seg).unwrap();
        assert_aliased(
            ctx.enqueue_function(&add, groups, &[out.arg(), middle.arg(), out.arg()], &()),
            0,
            2,
        );
        assert_eq!(
            ctx.diagnostics().live_objects().commands_recorded,
            recorded,
            "a refused dispatch records nothing"
        );
        assert_eq!(buffer.to_vec().unwrap(), initial);

        // Disjoint views of one buffer are fine.
        let first = buffer.create_sub_buffer::<u32>(0, seg).unwrap();
        let last = buffer.create_sub_buffer::<u32>(2 * seg, seg).unwrap();
        ctx.enqueue_function(&increment, groups, &[first.arg(), last.arg()], &())
            .unwrap();
        let mut expected = initial.clone();
        for i in 0..seg {
            expected[2 * seg + i] = initial[i] + 1;
        }
        assert_eq!(buffer.to_vec().unwrap(), expected);

        // Read-only aliases are fine: one range as both inputs.
        ctx.enqueue_function(&add, groups, &[middle.arg(), middle.arg(), out.arg()], &())
            .unwrap();
        let doubled: Vec<u32> = expected[seg..2 * seg].iter().map(|v| v * 2).collect();
        assert_eq!(out.to_vec().unwrap(), doubled);
        still_works(ctx);
    });
}

/// 32-bit float adds on a buffer: 4 workgroups of 64 add 0.5 each.
const FLOAT_ADD_BUFFER: &str = r#"#version 450
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { float data[]; };
void main() {
    atomicAdd(data[0], 0.5);
}
"#;

/// 32-bit float adds on shared memory: each workgroup counts its 64
/// invocations in a shared float.
const FLOAT_ADD_SHARED: &str = r#"#version 450
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { float data[]; };
shared float count;
void main() {
    if (gl_LocalInvocationIndex == 0u) count = 0.0;
    barrier();
    atomicAdd(count, 1.0);
    barrier();
    if (gl_LocalInvocationIndex == 0u) data[gl_WorkGroupID.x] = count;
}
"#;

/// 32-bit float min and max on a buffer: the largest of gid / 4 into
/// `data[0]`, the smallest of -gid into `data[1]` (4 workgroups of 64).
const FLOAT_MINMAX_BUFFER: &str = r#"#version 450
#extension GL_EXT_shader_atomic_float2 : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { float data[]; };
void main() {
    float g = float(gl_GlobalInvocationID.x);
    atomicMax(data[0], g * 0.25);
    atomicMin(data[1], -g);
}
"#;

/// 32-bit float max on shared memory: each workgroup's largest
/// local index + 100 * workgroup index.
const FLOAT_MINMAX_SHARED: &str = r#"#version 450
#extension GL_EXT_shader_atomic_float2 : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { float data[]; };
shared float top;
void main() {
    if (gl_LocalInvocationIndex == 0u) top = -1.0e30;
    barrier();
    atomicMax(top, float(gl_LocalInvocationIndex) + 100.0 * float(gl_WorkGroupID.x));
    barrier();
    if (gl_LocalInvocationIndex == 0u) data[gl_WorkGroupID.x] = top;
}
"#;

/// 64-bit float adds on a buffer: 4 workgroups of 64 add 0.5 each into
/// the first double (the first two floats of the buffer).
const FLOAT64_ADD_BUFFER: &str = r#"#version 450
#extension GL_EXT_shader_atomic_float : require
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { double data[]; };
void main() {
    atomicAdd(data[0], 0.5lf);
}
"#;

/// What the physical device offers of float atomics, asked of the driver
/// directly (`VK_EXT_shader_atomic_float` and `_float2`): each feature by
/// its Vulkan name, false without its extension.
fn device_float_atomics(ctx: &DeviceContext) -> Vec<(&'static str, bool)> {
    let instance = ctx.raw().instance();
    // SAFETY: the physical device belongs to the context's live instance.
    let extensions =
        unsafe { instance.enumerate_device_extension_properties(ctx.raw().physical_device()) }
            .expect("device extensions");
    let has = |name: &std::ffi::CStr| {
        extensions
            .iter()
            .any(|e| e.extension_name_as_c_str() == Ok(name))
    };
    let mut atomic = vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT::default();
    let mut atomic2 = vk::PhysicalDeviceShaderAtomicFloat2FeaturesEXT::default();
    let mut features = vk::PhysicalDeviceFeatures2::default();
    if has(vk::EXT_SHADER_ATOMIC_FLOAT_NAME) {
        features = features.push_next(&mut atomic);
    }
    if has(vk::EXT_SHADER_ATOMIC_FLOAT2_NAME) {
        features = features.push_next(&mut atomic2);
    }
    // SAFETY: a valid chain (of the device's own extensions) on the
    // context's physical device.
    unsafe { instance.get_physical_device_features2(ctx.raw().physical_device(), &mut features) };
    let on = |b: vk::Bool32| b == vk::TRUE;
    let f64_offered = ctx.info().enabled.is_some_and(|f| f.shader_float64);
    vec![
        (
            "shaderBufferFloat32AtomicAdd",
            on(atomic.shader_buffer_float32_atomic_add),
        ),
        (
            "shaderSharedFloat32AtomicAdd",
            on(atomic.shader_shared_float32_atomic_add),
        ),
        (
            "shaderBufferFloat32AtomicMinMax",
            on(atomic2.shader_buffer_float32_atomic_min_max),
        ),
        (
            "shaderSharedFloat32AtomicMinMax",
            on(atomic2.shader_shared_float32_atomic_min_max),
        ),
        (
            "shaderBufferFloat64AtomicAdd",
            f64_offered && on(atomic.shader_buffer_float64_atomic_add),
        ),
    ]
}

#[test]
fn float_atomics_run_where_the_device_offers_them_and_are_refused_by_name_elsewhere() {
    run_with(common::options(Path::Direct), "float atomics", |ctx| {
        let offered = device_float_atomics(ctx);
        let data = ctx.enqueue_create_buffer::<f32>(4).unwrap();
        let cases = [
            (
                FLOAT_ADD_BUFFER,
                "shaderBufferFloat32AtomicAdd",
                [128.0, 0.0, 0.0, 0.0],
            ),
            (FLOAT_ADD_SHARED, "shaderSharedFloat32AtomicAdd", [64.0; 4]),
            (
                FLOAT_MINMAX_BUFFER,
                "shaderBufferFloat32AtomicMinMax",
                [63.75, -255.0, 0.0, 0.0],
            ),
            (
                FLOAT_MINMAX_SHARED,
                "shaderSharedFloat32AtomicMinMax",
                [63.0, 163.0, 263.0, 363.0],
            ),
        ];
        // The kernel where the device offers its feature, else the refusal
        // that names the feature.
        let load = |source: &str, feature: &str| {
            let is_offered = offered.iter().any(|&(f, on)| f == feature && on);
            let loaded = Kernel::from_glsl(ctx, source, "main");
            if is_offered {
                return Some(loaded.unwrap());
            }
            match loaded {
                Err(Error::UnsupportedKernel { reason, .. }) => {
                    assert!(reason.contains(feature), "{reason}")
                }
                other => panic!("{feature} is not offered, yet: {other:?}"),
            }
            println!("skipped: {feature} (not offered by this device): refusal checked");
            None
        };
        for (source, feature, expected) in cases {
            let Some(kernel) = load(source, feature) else {
                continue;
            };
            data.enqueue_fill(0.0).unwrap();
            ctx.enqueue_function(&kernel, 4, &[data.arg()], &())
                .unwrap();
            assert_eq!(data.to_vec().unwrap(), expected, "{feature}");
        }
        if let Some(kernel) = load(FLOAT64_ADD_BUFFER, "shaderBufferFloat64AtomicAdd") {
            let doubles = ctx.enqueue_create_buffer::<f64>(2).unwrap();
            doubles.enqueue_fill(0.0).unwrap();
            ctx.enqueue_function(&kernel, 4, &[doubles.arg()], &())
                .unwrap();
            assert_eq!(doubles.to_vec().unwrap(), [128.0, 0.0]);
        }
        still_works(ctx);
    });
}
