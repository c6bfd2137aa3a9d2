//! Regressions found reviewing the internal restructuring (issue 15).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;

use common::{assert_clean, context_with, options, Path};

/// However many threads share a stream, no more batches are in flight than
/// one over the stream's limit (16): the trace's timestamp slots (two per
/// allowed batch) and the staging memory held by batches both rely on it.
#[test]
fn threads_sharing_a_stream_keep_batches_in_flight_bounded() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.validation_log();
    let threads = 40;
    let buffers: Vec<_> = (0..threads)
        .map(|_| ctx.enqueue_create_buffer::<u32>(4 << 20).unwrap())
        .collect();
    ctx.synchronize().unwrap();
    let done = Arc::new(AtomicBool::new(false));
    let max = Arc::new(AtomicUsize::new(0));
    let monitor = {
        let (ctx, done, max) = (ctx.clone(), done.clone(), max.clone());
        thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                let n = ctx.live_objects().batches_in_flight;
                max.fetch_max(n, Ordering::Relaxed);
                thread::yield_now();
            }
        })
    };
    thread::scope(|s| {
        for buffer in &buffers {
            let ctx = ctx.clone();
            s.spawn(move || {
                for i in 0..30 {
                    buffer.enqueue_fill(i).unwrap();
                    ctx.flush().unwrap();
                }
            });
        }
    });
    done.store(true, Ordering::Relaxed);
    monitor.join().unwrap();
    ctx.synchronize().unwrap();
    let max = max.load(Ordering::Relaxed);
    eprintln!("most batches in flight: {max}");
    assert!(max <= 17, "{max} batches in flight at once");
    drop(buffers);
    drop(ctx);
    assert_clean(&log, "threads flushing one stream");
}
