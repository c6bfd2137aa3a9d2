//! Kernel soundness (issue 10): kernels without buffers on both
//! descriptor paths, and written arguments that alias.
#![cfg(all(feature = "glsl", feature = "build"))]

mod common;

use common::{run_with, Path};
use vkcompute::{DeviceContext, Error, Kernel};

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
    let align = ctx.limits().min_storage_buffer_offset_alignment as usize;
    (align / 4).max(1).next_multiple_of(64)
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
        let pools = ctx.live_objects().descriptor_pools;
        for _ in 0..3 {
            ctx.enqueue_function(&kernel, 4, &[], &()).unwrap();
        }
        ctx.synchronize().unwrap();
        // The pooled path allocates no (empty) descriptor set for it.
        assert_eq!(
            ctx.live_objects().descriptor_pools,
            pools,
            "push descriptors {push}: a kernel without buffers took a descriptor pool"
        );
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
        let recorded = ctx.live_objects().commands_recorded;

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
            ctx.live_objects().commands_recorded,
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
