//! A lost device (feature `fault-injection`: `testing::lose_device` makes
//! the device count as lost, as after `VK_ERROR_DEVICE_LOST`): every later
//! call that needs the device returns `Error::DeviceLost`, nothing panics,
//! and every handle drops cleanly (the validation layer reports nothing,
//! leaked objects at device destruction included).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{assert_clean, context_with, options, Path};
use vkcompute::{shaders, testing, Error, Kernel};

fn lost<T: std::fmt::Debug>(result: vkcompute::Result<T>, what: &str) {
    match result {
        Err(Error::DeviceLost { .. }) => {}
        other => panic!("{what}: expected DeviceLost, got {other:?}"),
    }
}

#[test]
fn every_call_after_the_device_is_lost_says_so_and_drops_are_clean() {
    for path in [Path::Direct, Path::Staging] {
        let ctx = context_with(options(path));
        let log = ctx.diagnostics().validation_log();
        let store = Kernel::new(&ctx, shaders::STORE, "main").unwrap();
        let a = ctx.enqueue_create_buffer::<u32>(1024).unwrap();
        let b = ctx.enqueue_create_buffer::<u32>(1024).unwrap();
        let host = ctx.enqueue_create_host_buffer::<u32>(1024).unwrap();
        a.enqueue_fill(3).unwrap();
        let mut g = ctx.capture_graph();
        g.enqueue_copy_to(&a, &b).unwrap();
        let graph = g.finish().unwrap();
        let second = ctx.new_stream().unwrap();
        // Work in flight when the device goes.
        for _ in 0..8 {
            b.enqueue_copy_from(&a).unwrap();
        }
        testing::lose_device(&ctx);

        lost(
            ctx.enqueue_create_buffer::<u32>(16),
            "enqueue_create_buffer",
        );
        lost(
            ctx.enqueue_create_host_buffer::<u32>(16),
            "enqueue_create_host_buffer",
        );
        lost(a.enqueue_fill(1), "enqueue_fill");
        lost(
            a.enqueue_copy_from(&[1u32; 1024][..]),
            "enqueue_copy_from slice",
        );
        lost(b.enqueue_copy_from(&a), "enqueue_copy_from buffer");
        lost(a.enqueue_copy_to(&host), "enqueue_copy_to host buffer");
        lost(a.to_vec(), "to_vec");
        lost(a.map_to_host().map(drop), "map_to_host");
        lost(host.as_slice().map(drop), "HostBuffer::as_slice");
        lost(host.to_vec(), "HostBuffer::to_vec");
        lost(
            ctx.enqueue_function(&store, 1, &[a.arg()], &[0u32, 1u32]),
            "enqueue_function",
        );
        lost(Kernel::new(&ctx, shaders::SAXPY, "main"), "Kernel::new");
        lost(ctx.enqueue_graph(&graph), "enqueue_graph");
        lost(ctx.capture_graph().finish(), "GraphCapture::finish");
        lost(ctx.enqueue_record_event(), "enqueue_record_event");
        lost(ctx.new_stream(), "new_stream");
        lost(second.synchronize(), "synchronize of another stream");
        lost(ctx.flush(), "flush");
        lost(ctx.synchronize(), "synchronize");
        lost(
            ctx.synchronize_timeout(std::time::Duration::from_secs(1)),
            "synchronize_timeout",
        );
        // Asked twice, still lost.
        lost(ctx.synchronize(), "synchronize again");
        drop((store, a, b, host, graph, second));
        drop(ctx);
        assert_clean(&log, &format!("a lost device ({path:?})"));
    }
}
