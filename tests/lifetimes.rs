//! Buffer lifetimes: clones share memory; a buffer dropped with work in
//! flight is freed only after the stream passes it; dropped buffers are
//! reclaimed as the stream moves on, without `synchronize`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::on_each_path;

#[test]
fn a_clone_refers_to_the_same_memory() {
    on_each_path(|ctx, _| {
        let a = ctx.enqueue_create_buffer::<i32>(16).unwrap();
        let b = a.clone();
        a.enqueue_fill(-4).unwrap();
        assert_eq!(b.to_vec().unwrap(), vec![-4; 16]);
        assert_eq!(a.raw(), b.raw());
        drop(a);
        b.enqueue_fill(5).unwrap();
        assert_eq!(b.to_vec().unwrap(), vec![5; 16]);
    });
}

#[test]
fn dropping_a_source_right_after_enqueueing_its_copy_keeps_the_result() {
    on_each_path(|ctx, _| {
        let n = 1 << 20;
        let dst = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        {
            let src = ctx.enqueue_create_buffer::<u32>(n).unwrap();
            src.enqueue_copy_from(&(0..n as u32).collect::<Vec<_>>())
                .unwrap();
            src.enqueue_copy_to(&dst).unwrap();
            // `src` is dropped here with its copy still recorded, not submitted.
        }
        assert!(
            ctx.diagnostics().live_objects().pending_frees >= 1,
            "{:?}",
            ctx.diagnostics().live_objects()
        );
        assert_eq!(dst.to_vec().unwrap(), (0..n as u32).collect::<Vec<_>>());
        ctx.synchronize().unwrap();
        assert_eq!(ctx.diagnostics().live_objects().pending_frees, 0);
    });
}

#[test]
fn dropped_buffers_are_reclaimed_as_the_stream_moves_without_synchronize() {
    on_each_path(|ctx, _| {
        let keep = ctx.enqueue_create_buffer::<u32>(256).unwrap();
        // Warm the staging pools, which keep their blocks for reuse.
        let warm = ctx.enqueue_create_buffer::<u32>(256).unwrap();
        warm.enqueue_fill(1).unwrap();
        keep.enqueue_copy_from(&warm).unwrap();
        keep.to_vec().unwrap();
        drop(warm);
        ctx.trim().unwrap();
        let baseline = ctx.diagnostics().allocated_bytes();
        for i in 0..200u32 {
            let tmp = ctx.enqueue_create_buffer::<u32>(256).unwrap();
            tmp.enqueue_fill(i).unwrap();
            keep.enqueue_copy_from(&tmp).unwrap();
        }
        // A blocking read waits for the stream, which reclaims on the way.
        assert_eq!(keep.to_vec().unwrap(), vec![199; 256]);
        ctx.flush().unwrap();
        let live = ctx.diagnostics().live_objects();
        assert_eq!(live.pending_frees, 0, "{live:?}");
        // Retired buffers wait in the device's cache for reuse until trimmed.
        ctx.trim().unwrap();
        assert_eq!(ctx.diagnostics().allocated_bytes(), baseline);
    });
}

#[test]
fn buffers_outlive_the_context_handle_that_made_them() {
    on_each_path(|ctx, _| {
        let ctx2 = ctx.clone();
        let buf = ctx2.enqueue_create_buffer::<f32>(100).unwrap();
        drop(ctx2);
        buf.enqueue_fill(0.5).unwrap();
        let owner = buf.context();
        assert_eq!(owner.name(), ctx.name());
        assert_eq!(buf.to_vec().unwrap(), vec![0.5; 100]);
    });
}

#[test]
fn a_context_dropped_with_work_in_flight_finishes_it() {
    let ctx = common::context_with(common::options(common::Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let big = ctx.enqueue_create_buffer::<u32>(4 << 20).unwrap();
    for i in 0..10 {
        big.enqueue_fill(i).unwrap();
    }
    ctx.flush().unwrap();
    drop(big);
    drop(ctx); // must wait for the fills before freeing anything
    common::assert_clean(&log, "dropping a busy context");
}

#[test]
fn a_graph_replayed_on_its_buffers_own_stream_frees_everything_once_dropped() {
    // The stream's batch holds the replay, the replay's buffers name the
    // stream as their owner: nothing the batch keeps may hold the stream,
    // or stream, batch, buffer and device keep each other alive.
    on_each_path(|ctx, _| {
        ctx.trim().unwrap();
        let baseline = ctx.diagnostics().allocated_bytes();
        assert_eq!(ctx.diagnostics().live_streams(), 1);
        for with_params in [false, true] {
            let stream = ctx.new_stream().unwrap();
            assert_eq!(ctx.diagnostics().live_streams(), 2);
            let buf = stream.enqueue_create_buffer::<u8>(64 << 20).unwrap();
            let other = stream.enqueue_create_buffer::<u8>(64 << 20).unwrap();
            let mut g = stream.capture_graph();
            g.enqueue_fill(&buf, 0xab).unwrap();
            let graph = g.finish().unwrap();
            if with_params {
                let params = vkcompute::GraphParams::new().buffer(&buf, &other).unwrap();
                stream.enqueue_graph_with(&graph, &params).unwrap();
            } else {
                stream.enqueue_graph(&graph).unwrap();
            }
            drop((graph, buf, other, stream));
            ctx.synchronize().unwrap();
            ctx.trim().unwrap();
            assert_eq!(
                ctx.diagnostics().live_streams(),
                1,
                "params {with_params}: the stream is gone"
            );
            assert_eq!(
                ctx.diagnostics().allocated_bytes(),
                baseline,
                "params {with_params}: the buffers are freed"
            );
        }
    });
}
