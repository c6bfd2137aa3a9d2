//! The futures (`Event`, `to_vec_async`, `map_to_host_async`) under tokio,
//! a multi-threaded runtime whose workers are woken by the waker the
//! library registers (no polling loop of the test's own): awaited on
//! several tasks at once, on both memory paths, and dropped before they
//! complete (by a timeout) without leaking or freeing early. Validation
//! on: a message fails the test.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::time::Duration;

use common::{assert_clean, context_with, options, Path};

const N: usize = 1 << 22;

#[test]
fn events_reads_and_mappings_awaited_under_tokio() {
    for path in [Path::Direct, Path::Staging] {
        let ctx = context_with(options(path));
        let log = ctx.diagnostics().validation_log();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        runtime.block_on(async {
            // Four tasks, each with its own buffer and stream work.
            let mut tasks = Vec::new();
            for t in 0..4u32 {
                let ctx = ctx.clone();
                tasks.push(tokio::spawn(async move {
                    let data = ctx.enqueue_create_buffer::<u32>(N).unwrap();
                    for _ in 0..4 {
                        data.enqueue_fill(t).unwrap();
                    }
                    ctx.enqueue_record_event().unwrap().await.unwrap();
                    data.enqueue_fill(t + 10).unwrap();
                    let read = data.to_vec_async().await.unwrap();
                    assert!(read.iter().all(|&v| v == t + 10), "task {t}");
                    {
                        // (A mapping is not `Send`: it is not held across
                        // an await of a spawned task.)
                        let mut mapped = data.map_to_host_async().await.unwrap();
                        mapped[7] = 99;
                    }
                    let v = data.to_vec_async().await.unwrap();
                    assert_eq!((v[6], v[7]), (t + 10, 99), "task {t}");
                }));
            }
            for task in tasks {
                task.await.unwrap();
            }
            // Futures dropped before they complete: a timeout far shorter
            // than the work. The buffer and the stream stay usable, and the
            // data is what was enqueued. A round whose work was already
            // done when first polled (a thread descheduled that long, on a
            // loaded machine) drops nothing pending: the next does more.
            let data = ctx.enqueue_create_buffer::<u32>(N).unwrap();
            let mut dropped_pending = 0;
            for round in 0..4u32 {
                for _ in 0..(16 << round) {
                    data.enqueue_fill(round).unwrap();
                }
                let event = ctx.enqueue_record_event().unwrap();
                let timed_out = tokio::time::timeout(Duration::from_micros(1), event).await;
                let read =
                    tokio::time::timeout(Duration::from_micros(1), data.to_vec_async()).await;
                let map =
                    tokio::time::timeout(Duration::from_micros(1), data.map_to_host_async()).await;
                dropped_pending += u32::from(timed_out.is_err());
                drop((timed_out, read, map));
                let v = data.to_vec_async().await.unwrap();
                assert!(v.iter().all(|&x| x == round), "{path:?} round {round}");
            }
            assert!(dropped_pending > 0, "no event was pending when dropped");
        });
        drop(runtime);
        ctx.synchronize().unwrap();
        let live = ctx.diagnostics().live_objects();
        assert_eq!(live.batches_in_flight, 0, "{path:?}: {live:?}");
        drop(ctx);
        assert_clean(&log, "futures under tokio");
    }
}
