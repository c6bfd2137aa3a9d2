//! Several contexts: streams of one device ordered by semaphores, and
//! copies between devices through the host; many commands from two
//! threads while the device is behind (batches that grow), and a storm of
//! operations on two streams.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use common::{assert_clean, context_with, options, run_with, Path};
use vkcompute::{shaders, ContextOptions, DeviceBuffer, DeviceContext, Error, GraphParams, Kernel};

#[test]
fn work_on_two_streams_is_ordered_by_the_buffers_it_touches() {
    for path in common::PATHS {
        run_with(common::options(path), "two streams", |a| {
            let b = a.new_stream().unwrap();
            let n = 1 << 18;
            let x = a.enqueue_create_buffer::<u32>(n).unwrap();
            let y = b.enqueue_create_buffer::<u32>(n).unwrap();
            let z = a.enqueue_create_buffer::<u32>(n).unwrap();
            for round in 1..=5u32 {
                x.enqueue_fill(round).unwrap(); // stream a
                y.enqueue_copy_from(&x).unwrap(); // stream b: waits for a's fill
                x.enqueue_fill(100 + round).unwrap(); // stream a: waits for b's read
                z.enqueue_copy_from(&y).unwrap(); // stream a: waits for b's copy
            }
            assert_eq!(z.to_vec().unwrap(), vec![5; n]);
            assert_eq!(y.to_vec().unwrap(), vec![5; n]);
            assert_eq!(x.to_vec().unwrap(), vec![105; n]);
            b.synchronize().unwrap();
        });
    }
}

#[test]
fn enqueue_wait_for_orders_one_stream_after_another() {
    run_with(common::options(Path::Direct), "explicit wait", |a| {
        let b = a.new_stream().unwrap();
        let x = a.enqueue_create_buffer::<u32>(1 << 16).unwrap();
        x.enqueue_fill(9).unwrap();
        b.enqueue_wait_for(a).unwrap();
        b.enqueue_wait_for(&b).unwrap(); // waiting for itself changes nothing
        let y = b.enqueue_create_buffer::<u32>(1 << 16).unwrap();
        y.enqueue_copy_from(&x).unwrap();
        assert_eq!(y.to_vec().unwrap(), vec![9; 1 << 16]);
        let other_device = common::context_with(common::options(Path::Direct));
        let log = other_device.diagnostics().validation_log();
        assert!(matches!(
            b.enqueue_wait_for(&other_device),
            Err(Error::DifferentDevice { .. })
        ));
        drop(other_device);
        common::assert_clean(&log, "the other device");
    });
}

#[test]
fn copies_between_devices_go_through_the_host() {
    run_with(common::options(Path::Direct), "cross-device", |a| {
        let b = common::context_with(common::options(Path::Staging));
        let log = b.diagnostics().validation_log();
        for n in [0usize, 1, 4097, 1 << 20] {
            let data: Vec<u32> = (0..n as u32).map(|i| i ^ 0x5555).collect();
            let on_a = a.enqueue_create_buffer::<u32>(n).unwrap();
            let on_b = b.enqueue_create_buffer::<u32>(n).unwrap();
            on_a.enqueue_copy_from(&data).unwrap();
            on_b.enqueue_copy_from(&on_a).unwrap();
            assert_eq!(on_b.to_vec().unwrap(), data, "a -> b, {n}");
            on_b.enqueue_fill(7).unwrap();
            on_b.enqueue_copy_to(&on_a).unwrap();
            assert_eq!(on_a.to_vec().unwrap(), vec![7; n], "b -> a, {n}");
            let host_b = b.enqueue_create_host_buffer::<u32>(n).unwrap();
            on_a.enqueue_copy_to(&host_b).unwrap();
            assert_eq!(
                host_b.to_vec().unwrap(),
                vec![7; n],
                "a -> host buffer of b, {n}"
            );
        }
        drop(b);
        common::assert_clean(&log, "the second device");
    });
}

#[test]
fn contexts_are_independent_devices_on_lavapipe() {
    // Default options, but no pipeline cache on disk (tests leave the
    // user's cache directory alone).
    let options = || ContextOptions::new().pipeline_cache_dir(None);
    let a = DeviceContext::with_options(options()).unwrap();
    let b = DeviceContext::with_options(options()).unwrap();
    assert_eq!(a.name(), b.name());
    assert_ne!(a.raw().device().handle(), b.raw().device().handle());
}

/// However many threads share a stream, no more batches are in flight than
/// one over the stream's limit (16): the trace's timestamp slots (two per
/// allowed batch) and the staging memory held by batches both rely on it.
#[test]
fn threads_sharing_a_stream_keep_batches_in_flight_bounded() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
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
                let n = ctx.diagnostics().live_objects().batches_in_flight;
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

#[test]
fn dropped_streams_timelines_stay_bounded_without_trim() {
    // Each dropped stream leaves its timeline semaphore to be destroyed
    // once that is safe (lavapipe's submit thread may still hold it right
    // after its last batch signals); without `trim`, their number stays
    // bounded however many streams come and go.
    common::on_each_path(|ctx, path| {
        let buf = ctx.enqueue_create_buffer::<u32>(256).unwrap();
        let mut most = 0;
        for i in 0..400u32 {
            let stream = ctx.new_stream().unwrap();
            let mine = stream.enqueue_create_buffer::<u32>(256).unwrap();
            mine.enqueue_fill(i).unwrap();
            // Another stream's work waits for this one's timeline.
            buf.enqueue_copy_from(&mine).unwrap();
            drop((mine, stream));
            ctx.synchronize().unwrap();
            most = most.max(ctx.diagnostics().retired_timelines());
            assert!(
                ctx.diagnostics().retired_timelines() <= 64,
                "{path:?}: {} timelines of dropped streams kept after {i} streams",
                ctx.diagnostics().retired_timelines()
            );
        }
        assert_eq!(buf.to_vec().unwrap(), vec![399; 256]);
        assert!(most > 0, "{path:?}: no stream's timeline was ever retired");
        ctx.trim().unwrap();
        assert_eq!(ctx.diagnostics().retired_timelines(), 0);
    });
}

#[test]
fn many_commands_from_two_threads_while_the_device_is_behind() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let st = Kernel::new(&ctx, shaders::STORE, "main").unwrap();
    let bufs: Vec<DeviceBuffer<u32>> = (0..2)
        .map(|_| ctx.enqueue_create_buffer::<u32>(64).unwrap())
        .collect();
    let per = 9000u32;
    std::thread::scope(|s| {
        for (t, b) in bufs.iter().enumerate() {
            let ctx = ctx.clone();
            let st = &st;
            s.spawn(move || {
                for i in 0..per {
                    ctx.enqueue_function(st, 1, &[b.arg()], &[i % 64, i + t as u32])
                        .unwrap();
                    if i == per / 2 {
                        let v = b.to_vec().unwrap();
                        assert_eq!(v[(i % 64) as usize], i + t as u32);
                    }
                }
            });
        }
    });
    for (t, b) in bufs.iter().enumerate() {
        let v = b.to_vec().unwrap();
        for (j, got) in v.iter().enumerate() {
            let last = (0..per).rev().find(|i| (i % 64) as usize == j).unwrap();
            assert_eq!(*got, last + t as u32, "t {t} j {j}");
        }
    }
    drop(bufs);
    ctx.synchronize().unwrap();
    drop(ctx);
    assert_clean(&log, "two threads");
}

/// Four threads on two streams sharing buffers, each doing random
/// operations: indirect dispatches, parameterized replays of one graph,
/// mapping futures, readback futures, cross-stream waits and events,
/// copies between the shared buffers. Looks for hangs (a watchdog),
/// panics and synchronization-validation messages.
#[test]
fn a_storm_of_operations_on_two_streams() {
    for push in [true, false] {
        for path in [Path::Direct, Path::Staging] {
            let ctx = context_with(options(path).push_descriptors(push));
            let log = ctx.diagnostics().validation_log();
            let other = ctx.new_stream().unwrap();
            let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
            let n = 256usize;
            let shared: Vec<DeviceBuffer<u32>> = (0..4)
                .map(|_| {
                    let b = ctx.enqueue_create_buffer::<u32>(n).unwrap();
                    b.enqueue_fill(0).unwrap();
                    b
                })
                .collect();
            let counts = ctx.enqueue_create_buffer::<u32>(6).unwrap();
            counts
                .enqueue_copy_from(&[2u32, 1, 1, 4, 1, 1][..])
                .unwrap();
            let c2 = counts.create_sub_buffer::<u32>(3, 3).unwrap();
            let mut g = ctx.capture_graph();
            let id = g
                .enqueue_function_indirect(&add_one, &counts, 0, &[shared[0].arg()], &(n as u32))
                .unwrap();
            g.enqueue_copy_to(&shared[0], &shared[1]).unwrap();
            g.enqueue_wait_for(&other).unwrap();
            let graph = g.finish().unwrap();
            let done = AtomicBool::new(false);
            std::thread::scope(|s| {
                let done = &done;
                s.spawn(move || {
                    let start = Instant::now();
                    while !done.load(Ordering::SeqCst) {
                        assert!(
                            start.elapsed() < Duration::from_secs(120),
                            "the storm hangs"
                        );
                        std::thread::sleep(Duration::from_millis(50));
                    }
                });
                let mut workers = Vec::new();
                for t in 0..4u64 {
                    let stream = if t % 2 == 0 {
                        ctx.clone()
                    } else {
                        other.clone()
                    };
                    let peer = if t % 2 == 0 {
                        other.clone()
                    } else {
                        ctx.clone()
                    };
                    let (shared, counts, c2, graph, add_one) =
                        (&shared, &counts, &c2, &graph, &add_one);
                    workers.push(s.spawn(move || {
                        let mut rng = common::Rng::new(t + 1234);
                        let mut futures = Vec::new();
                        for _ in 0..150 {
                            let b = &shared[rng.below(4) as usize];
                            let r = match rng.below(9) {
                                0 => stream.enqueue_function_indirect(
                                    add_one,
                                    if rng.below(2) == 0 { counts } else { c2 },
                                    0,
                                    &[b.arg()],
                                    &(n as u32),
                                ),
                                1 => {
                                    let k = 1 + rng.below(n as u64) as u32;
                                    let with = &shared[2 + rng.below(2) as usize];
                                    let p = GraphParams::new().push(id, &k);
                                    let p = if rng.below(2) == 0 {
                                        p.buffer(&shared[0], with).unwrap()
                                    } else {
                                        p
                                    };
                                    let p = if rng.below(3) == 0 {
                                        p.buffer(counts, counts).unwrap()
                                    } else {
                                        p
                                    };
                                    stream.enqueue_graph_with(graph, &p)
                                }
                                2 => stream.enqueue_graph(graph),
                                3 => {
                                    futures.push(b.to_vec_async());
                                    Ok(())
                                }
                                4 => match common::resolve(b.map_to_host_async()) {
                                    Ok(mut m) => {
                                        m[1] = m[1].wrapping_add(1);
                                        Ok(())
                                    }
                                    Err(e) => Err(e),
                                },
                                5 => stream.enqueue_wait_for(&peer),
                                6 => peer
                                    .enqueue_record_event()
                                    .and_then(|e| stream.enqueue_wait_event(&e)),
                                7 => {
                                    let d = &shared[rng.below(4) as usize];
                                    if std::ptr::eq(b, d) {
                                        Ok(())
                                    } else {
                                        d.enqueue_copy_from(b)
                                    }
                                }
                                _ => stream.enqueue_function(add_one, 4, &[b.arg()], &(n as u32)),
                            };
                            match r {
                                Ok(()) | Err(Error::BufferMapped { .. }) => {}
                                Err(Error::GraphParameter { .. }) => {}
                                Err(e) => panic!("t {t}: {e}"),
                            }
                            if futures.len() > 4 {
                                for f in futures.drain(..) {
                                    match common::resolve(f) {
                                        Ok(v) => assert_eq!(v.len(), n),
                                        Err(Error::BufferMapped { .. }) => {}
                                        Err(e) => panic!("t {t}: {e}"),
                                    }
                                }
                            }
                        }
                        drop(futures); // some never awaited
                        stream.synchronize().unwrap();
                    }));
                }
                for w in workers {
                    let r = w.join();
                    if let Err(panic) = r {
                        done.store(true, Ordering::SeqCst);
                        std::panic::resume_unwind(panic);
                    }
                }
                done.store(true, Ordering::SeqCst);
            });
            drop((graph, shared, counts, c2, other));
            ctx.synchronize().unwrap();
            drop(ctx);
            assert_clean(&log, &format!("storm push {push} {path:?}"));
        }
    }
}
