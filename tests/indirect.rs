//! Indirect dispatch: workgroup counts written by an earlier kernel, at an
//! element offset no binding alignment allows, on both descriptor paths
//! and both memory paths; counts beyond `maxComputeWorkGroupCount` clamped
//! on the device, and zero counts; the same in graphs, with the counts
//! changed between replays and the counts buffer substituted; a kernel
//! that writes its own counts, counts beside what the dispatch writes,
//! other devices' buffers; bad input.
//! Under synchronization validation: the guard, the dispatch and the work
//! around them are ordered by the recorder.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{assert_clean, context_with, on_each_context, options, store, Path};
use vkcompute::{shaders, DeviceBuffer, Error, GraphParams, Kernel};

/// How many elements of `data` are `want`.
fn count(data: &DeviceBuffer<u32>, want: u32) -> usize {
    data.to_vec()
        .unwrap()
        .iter()
        .filter(|&&v| v == want)
        .count()
}

#[test]
fn counts_written_by_an_earlier_kernel_size_the_dispatch() {
    on_each_context(|ctx, what| {
        let store_kernel = Kernel::new(ctx, shaders::STORE, "main").unwrap();
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap(); // 64 per group
        let n = 64 * 8;
        let data = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        data.enqueue_fill(0).unwrap();
        // The counts at element 5: byte 20, on no storage-buffer alignment.
        let counts = ctx.enqueue_create_buffer::<u32>(9).unwrap();
        counts.enqueue_fill(7).unwrap();
        store(ctx, &store_kernel, &counts, 5, [3, 1, 1]);
        ctx.enqueue_function_indirect(&add_one, &counts, 5, &[data.arg()], &(n as u32))
            .unwrap();
        assert_eq!(count(&data, 1), 3 * 64, "{what}");
        // The kernel's next round of counts, again written on the device,
        // and read through a view that starts at an odd element.
        store(ctx, &store_kernel, &counts, 5, [5, 1, 1]);
        let view = counts.create_sub_buffer(1, 8).unwrap();
        ctx.enqueue_function_indirect(&add_one, &view, 4, &[data.arg()], &(n as u32))
            .unwrap();
        let out = data.to_vec().unwrap();
        assert_eq!(out[..3 * 64], vec![2; 3 * 64][..], "{what}");
        assert_eq!(out[3 * 64..5 * 64], vec![1; 2 * 64][..], "{what}");
        assert_eq!(out[5 * 64..], vec![0; 3 * 64][..], "{what}");
        // The counts are left as they were; the elements around them too.
        assert_eq!(
            counts.to_vec().unwrap(),
            [7, 7, 7, 7, 7, 5, 1, 1, 7],
            "{what}"
        );
    });
}

#[cfg(feature = "glsl")]
#[test]
fn counts_beyond_the_device_limit_are_clamped_and_zero_runs_nothing() {
    // Counts every invocation: x * y * z workgroups of one.
    const COUNTER: &str = "#version 450\nlayout(local_size_x = 1) in;\n\
        layout(std430, binding = 0) buffer C { uint invocations; };\n\
        void main() { atomicAdd(invocations, 1u); }\n";
    on_each_context(|ctx, what| {
        let counter = Kernel::from_glsl(ctx, COUNTER, "main").unwrap();
        let max = ctx.info().limits.max_workgroup_count;
        let hits = ctx.enqueue_create_buffer::<u32>(1).unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        for (given, runs) in [
            ([1, u32::MAX, 1], u64::from(max[1])),
            ([u32::MAX, 1, 1], u64::from(max[0])),
            ([2, 3, max[2].saturating_add(9)], 6 * u64::from(max[2])),
            ([0, 5, 5], 0),
            ([4, 0, 0], 0),
            ([2, 3, 4], 24),
        ] {
            hits.enqueue_fill(0).unwrap();
            counts.enqueue_copy_from(&given[..]).unwrap();
            ctx.enqueue_function_indirect(&counter, &counts, 0, &[hits.arg()], &())
                .unwrap();
            let got = u64::from(hits.to_vec().unwrap()[0]);
            assert_eq!(got, runs, "{what}: counts {given:?}, limit {max:?}");
        }
    });
}

#[test]
fn graphs_read_the_counts_on_every_replay() {
    on_each_context(|ctx, what| {
        let store_kernel = Kernel::new(ctx, shaders::STORE, "main").unwrap();
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let n = 64 * 6;
        let data = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        data.enqueue_fill(0).unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        let other = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        other.enqueue_copy_from(&[6u32, 1, 1][..]).unwrap();
        let mut g = ctx.capture_graph();
        g.enqueue_function_indirect(&add_one, &counts, 0, &[data.arg()], &(n as u32))
            .unwrap();
        let graph = g.finish().unwrap();
        let mut want = vec![0u32; n];
        for groups in [1u32, 4, 0, 2] {
            store(ctx, &store_kernel, &counts, 0, [groups, 1, 1]);
            ctx.enqueue_graph(&graph).unwrap();
            for v in &mut want[..64 * groups as usize] {
                *v += 1;
            }
        }
        // The counts buffer substituted: the replay reads the other one.
        let params = GraphParams::new().buffer(&counts, &other).unwrap();
        ctx.enqueue_graph_with(&graph, &params).unwrap();
        for v in &mut want {
            *v += 1;
        }
        assert_eq!(data.to_vec().unwrap(), want, "{what}");
    });
}

#[test]
fn bad_indirect_arguments_are_clear_errors_and_the_context_stays_usable() {
    on_each_context(|ctx, what| {
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let data = ctx.enqueue_create_buffer::<u32>(64).unwrap();
        data.enqueue_fill(0).unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        counts.enqueue_copy_from(&[1u32, 1, 1, 1][..]).unwrap();
        let recorded = ctx.diagnostics().live_objects().commands_recorded;
        for offset in [2, 4, usize::MAX] {
            let e = ctx
                .enqueue_function_indirect(&add_one, &counts, offset, &[data.arg()], &64u32)
                .unwrap_err();
            assert!(matches!(e, Error::OutOfRange { len: 3, .. }), "{what}: {e}");
            let e = ctx
                .capture_graph()
                .enqueue_function_indirect(&add_one, &counts, offset, &[data.arg()], &64u32)
                .unwrap_err();
            assert!(matches!(e, Error::OutOfRange { .. }), "{what}: {e}");
        }
        // The kernel's own checks apply as to a direct dispatch.
        let e = ctx
            .enqueue_function_indirect(&add_one, &counts, 1, &[], &64u32)
            .unwrap_err();
        assert!(matches!(e, Error::ArgumentCount { .. }), "{what}: {e}");
        let e = ctx
            .enqueue_function_indirect(&add_one, &counts, 1, &[data.arg()], &1u8)
            .unwrap_err();
        assert!(matches!(e, Error::PushConstantSize { .. }), "{what}: {e}");
        assert_eq!(
            ctx.diagnostics().live_objects().commands_recorded,
            recorded,
            "{what}"
        );
        // A mapped buffer the kernel writes is refused as for any dispatch.
        {
            let _map = data.map_to_host().unwrap();
            let e = ctx
                .enqueue_function_indirect(&add_one, &counts, 0, &[data.arg()], &64u32)
                .unwrap_err();
            assert!(matches!(e, Error::BufferMapped { .. }), "{what}: {e}");
        }
        ctx.enqueue_function_indirect(&add_one, &counts, 1, &[data.arg()], &64u32)
            .unwrap();
        assert_eq!(data.to_vec().unwrap(), vec![1; 64], "{what}");
    });
}

/// The kernel writes its own counts buffer (documented as allowed), on a
/// stream and in a graph replayed several times.
#[test]
fn an_indirect_kernel_that_writes_its_own_counts() {
    // The counts at elements 63..66 of the buffer the kernel adds one to
    // (n = 64): x grows by one per dispatch, y and z (64, 65) stay 1, so
    // no two workgroups write one element.
    on_each_context(|ctx, what| {
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(66).unwrap();
        counts.enqueue_fill(1).unwrap();
        let mut want = vec![1u32; 66];
        let sim = |want: &mut Vec<u32>, n: usize| {
            for v in want.iter_mut().take(n) {
                *v += 1;
            }
        };
        ctx.enqueue_function_indirect(&add_one, &counts, 63, &[counts.arg()], &64u32)
            .unwrap();
        sim(&mut want, 64);
        assert_eq!(counts.to_vec().unwrap(), want, "{what}: stream");
        let mut g = ctx.capture_graph();
        let id = g
            .enqueue_function_indirect(&add_one, &counts, 63, &[counts.arg()], &64u32)
            .unwrap();
        let graph = g.finish().unwrap();
        for _ in 0..3 {
            ctx.enqueue_graph(&graph).unwrap();
            ctx.enqueue_function_indirect(&add_one, &counts, 63, &[counts.arg()], &64u32)
                .unwrap();
            sim(&mut want, 64);
            sim(&mut want, 64);
        }
        assert_eq!(counts.to_vec().unwrap(), want, "{what}: graph");
        // Through the live path too (push changed: only 32 elements).
        for _ in 0..3 {
            ctx.enqueue_graph_with(&graph, &GraphParams::new().push(id, &32u32))
                .unwrap();
            sim(&mut want, 32);
        }
        assert_eq!(counts.to_vec().unwrap(), want, "{what}: live");
    });
}

/// Counts read through a view whose aligned-down binding covers bytes the
/// same dispatch writes through another view of the same memory.
#[test]
fn indirect_counts_next_to_what_the_dispatch_writes() {
    on_each_context(|ctx, what| {
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let st = Kernel::new(ctx, shaders::STORE, "main").unwrap();
        let align = ctx.info().limits.min_storage_buffer_offset_alignment.max(4) as usize / 4;
        let mem = ctx.enqueue_create_buffer::<u32>(align * 4 + 64).unwrap();
        mem.enqueue_fill(0).unwrap();
        // The data the kernel writes: the first `align` elements.
        let data = mem.create_sub_buffer::<u32>(0, align).unwrap();
        // The counts right after it, at odd element offset align + 1.
        store(ctx, &st, &mem, align + 1, [1, 1, 1]);
        let counts = mem.create_sub_buffer::<u32>(align + 1, 3).unwrap();
        for _ in 0..3 {
            ctx.enqueue_function_indirect(&add_one, &counts, 0, &[data.arg()], &(align as u32))
                .unwrap();
        }
        let out = mem.to_vec().unwrap();
        assert_eq!(out[..align], vec![3; align][..], "{what}");
        assert_eq!(out[align + 1..align + 4], [1, 1, 1], "{what}");
    });
}

/// A kernel without bindings or push constants, dispatched indirectly
/// (the guard's bound state in front of it), and an empty graph.
#[cfg(feature = "glsl")]
#[test]
fn an_indirect_kernel_without_bindings_and_an_empty_graph() {
    const NOTHING: &str = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {}\n";
    const COUNTER: &str = "#version 450\nlayout(local_size_x = 1) in;\n\
        layout(std430, binding = 0) buffer C { uint invocations; };\n\
        void main() { atomicAdd(invocations, 1u); }\n";
    on_each_context(|ctx, what| {
        let nothing = Kernel::from_glsl(ctx, NOTHING, "main").unwrap();
        let counter = Kernel::from_glsl(ctx, COUNTER, "main").unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        counts.enqueue_copy_from(&[3u32, 2, 1][..]).unwrap();
        let hits = ctx.enqueue_create_buffer::<u32>(1).unwrap();
        hits.enqueue_fill(0).unwrap();
        for _ in 0..3 {
            ctx.enqueue_function_indirect(&nothing, &counts, 0, &[], &())
                .unwrap();
            ctx.enqueue_function_indirect(&counter, &counts, 0, &[hits.arg()], &())
                .unwrap();
            ctx.enqueue_function(&nothing, 1, &[], &()).unwrap();
        }
        let mut g = ctx.capture_graph();
        let id = g
            .enqueue_function_indirect(&nothing, &counts, 0, &[], &())
            .unwrap();
        g.enqueue_function_indirect(&counter, &counts, 0, &[hits.arg()], &())
            .unwrap();
        g.enqueue_function_indirect(&nothing, &counts, 0, &[], &())
            .unwrap();
        let graph = g.finish().unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        ctx.enqueue_graph_with(&graph, &GraphParams::new().push(id, &()))
            .unwrap();
        assert_eq!(hits.to_vec().unwrap(), [6 * 5], "{what}");
        let empty = ctx.capture_graph().finish().unwrap();
        for _ in 0..3 {
            ctx.enqueue_graph(&empty).unwrap();
        }
        let e = ctx
            .enqueue_graph_with(&empty, &GraphParams::new().push(id, &()))
            .unwrap_err();
        assert!(matches!(e, Error::GraphParameter { .. }), "{what}: {e}");
        let e = ctx
            .enqueue_graph_with(&empty, &GraphParams::new().buffer(&hits, &hits).unwrap())
            .unwrap_err();
        assert!(matches!(e, Error::GraphParameter { .. }), "{what}: {e}");
    });
}

/// Buffers, counts and graphs of another device (a second context made
/// with `with_options`, so another VkDevice): clear errors, both contexts
/// stay usable.
#[test]
fn another_devices_buffers_in_indirect_dispatches_and_replays() {
    let a = context_with(options(Path::Direct));
    let b = context_with(options(Path::Staging));
    let (la, lb) = (
        a.diagnostics().validation_log(),
        b.diagnostics().validation_log(),
    );
    let ka = Kernel::new(&a, shaders::ADD_ONE, "main").unwrap();
    let xa = a.enqueue_create_buffer::<u32>(64).unwrap();
    xa.enqueue_fill(0).unwrap();
    let ca = a.enqueue_create_buffer::<u32>(3).unwrap();
    ca.enqueue_copy_from(&[1u32, 1, 1][..]).unwrap();
    let xb = b.enqueue_create_buffer::<u32>(64).unwrap();
    let cb = b.enqueue_create_buffer::<u32>(3).unwrap();
    cb.enqueue_copy_from(&[1u32, 1, 1][..]).unwrap();
    let e = a
        .enqueue_function_indirect(&ka, &cb, 0, &[xa.arg()], &64u32)
        .unwrap_err();
    assert!(matches!(e, Error::DifferentDevice { .. }), "{e}");
    let e = a
        .enqueue_function_indirect(&ka, &ca, 0, &[xb.arg()], &64u32)
        .unwrap_err();
    assert!(matches!(e, Error::DifferentDevice { .. }), "{e}");
    let e = b
        .enqueue_function_indirect(&ka, &cb, 0, &[xb.arg()], &64u32)
        .unwrap_err();
    eprintln!("kernel of another device: {e}");
    let mut g = a.capture_graph();
    assert!(g
        .enqueue_function_indirect(&ka, &cb, 0, &[xa.arg()], &64u32)
        .is_err());
    let id = g
        .enqueue_function_indirect(&ka, &ca, 0, &[xa.arg()], &64u32)
        .unwrap();
    let graph = g.finish().unwrap();
    let e = b.enqueue_graph(&graph).unwrap_err();
    assert!(matches!(e, Error::DifferentDevice { .. }), "{e}");
    let e = b
        .enqueue_graph_with(&graph, &GraphParams::new().push(id, &1u32))
        .unwrap_err();
    assert!(matches!(e, Error::DifferentDevice { .. }), "{e}");
    let e = a
        .enqueue_graph_with(&graph, &GraphParams::new().buffer(&ca, &cb).unwrap())
        .unwrap_err();
    assert!(matches!(e, Error::DifferentDevice { .. }), "{e}");
    let e = a
        .enqueue_graph_with(&graph, &GraphParams::new().buffer(&xa, &xb).unwrap())
        .unwrap_err();
    assert!(matches!(e, Error::DifferentDevice { .. }), "{e}");
    a.enqueue_graph_with(&graph, &GraphParams::new().push(id, &64u32))
        .unwrap();
    assert_eq!(xa.to_vec().unwrap(), vec![1; 64]);
    let fut = xa.to_vec_async();
    drop((graph, ka, ca, cb, xb));
    drop(b);
    assert_clean(&lb, "b");
    let kept = xa.clone();
    drop(xa);
    drop(a);
    assert_eq!(common::resolve(fut).unwrap(), vec![1; 64]);
    drop(kept);
    assert_clean(&la, "a");
}
