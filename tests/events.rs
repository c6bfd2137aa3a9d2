//! Events (issue 21): points on a stream that another stream waits for on
//! the device, the host waits for or polls, and that time the device work
//! between two of them; misuse gives clear errors. Under validation, on
//! both memory paths.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::future::Future;
use std::time::{Duration, Instant};

use common::{assert_clean, block_on, context_with, on_each_path, options, Path};
use vkcompute::{DeviceContext, Error, Event};

const N: usize = 1 << 22;

#[test]
fn another_stream_waits_for_an_event_on_the_device() {
    on_each_path(|ctx, path| {
        let other = ctx.new_stream().unwrap();
        let src = ctx.enqueue_create_buffer::<u32>(N).unwrap();
        let dst = other.enqueue_create_buffer::<u32>(N).unwrap();
        dst.enqueue_fill(0).unwrap();
        other.synchronize().unwrap();
        for round in 1..=3u32 {
            src.enqueue_fill(round).unwrap();
            let filled = ctx.enqueue_record_event().unwrap();
            // Recorded after the event: not waited for by `other`.
            other.enqueue_wait_event(&filled).unwrap();
            dst.enqueue_copy_from(&src).unwrap();
            let copied = other.enqueue_record_event().unwrap();
            copied.wait().unwrap();
            assert!(copied.is_complete().unwrap());
            assert!(filled.is_complete().unwrap(), "{path:?}");
            let back = dst.to_vec().unwrap();
            assert!(back.iter().all(|&v| v == round), "{path:?} round {round}");
        }
        // Work on an unrelated buffer waits too: the event, not a buffer
        // hazard, orders it. The fill it waits for is large (64 MiB), so
        // without the wait the small fill would be done long before.
        let big = ctx.enqueue_create_buffer::<u32>(N * 4).unwrap();
        let unrelated = other.enqueue_create_buffer::<u32>(4).unwrap();
        other.synchronize().unwrap();
        big.enqueue_fill(1).unwrap();
        let filled = ctx.enqueue_record_event().unwrap();
        other.enqueue_wait_event(&filled).unwrap();
        unrelated.enqueue_fill(2).unwrap();
        let after = other.enqueue_record_event().unwrap();
        after.wait().unwrap();
        assert!(filled.is_complete().unwrap(), "{path:?}: reached in order");
        // An event of the stream itself is reached in stream order.
        let own = ctx.enqueue_record_event().unwrap();
        ctx.enqueue_wait_event(&own).unwrap();
        ctx.synchronize().unwrap();
        assert!(own.is_complete().unwrap());
    });
}

#[test]
fn polling_an_event_terminates_without_a_flush() {
    on_each_path(|ctx, _| {
        let data = ctx.enqueue_create_buffer::<u32>(N).unwrap();
        data.enqueue_fill(1).unwrap();
        let event = ctx.enqueue_record_event().unwrap();
        // Nothing flushed the stream: is_complete submits it.
        let deadline = Instant::now() + Duration::from_secs(60);
        while !event.is_complete().unwrap() {
            assert!(Instant::now() < deadline, "the event was never reached");
            std::thread::yield_now();
        }
        // A clone is the same point.
        assert!(event.clone().is_complete().unwrap());
        assert!(format!("{event:?}").contains("Event"));
    });
}

#[test]
fn elapsed_device_time_between_two_events() {
    on_each_path(|ctx, path| {
        let data = ctx.enqueue_create_buffer::<u32>(N * 4).unwrap();
        let start = ctx.enqueue_record_event().unwrap();
        data.enqueue_fill(3).unwrap();
        let end = ctx.enqueue_record_event().unwrap();
        if !end.is_timed() {
            let e = end.elapsed_since(&start).unwrap_err();
            assert!(matches!(e, Error::Unsupported { .. }), "{e}");
            println!("skipped: event timing (the queue writes no timestamps)");
            return;
        }
        let t = end.elapsed_since(&start).unwrap();
        assert!(
            t > Duration::ZERO,
            "{path:?}: a 64 MiB fill takes time: {t:?}"
        );
        // The total stream time bounds it (the host saw the whole span).
        let before = Instant::now();
        let again_start = ctx.enqueue_record_event().unwrap();
        data.enqueue_fill(4).unwrap();
        let again_end = ctx.enqueue_record_event().unwrap();
        again_end.wait().unwrap();
        let host = before.elapsed();
        let device = again_end.elapsed_since(&again_start).unwrap();
        assert!(
            device <= host,
            "{path:?}: device {device:?} within host {host:?}"
        );
        // The other way round is refused; the events stay usable.
        let e = start.elapsed_since(&end).unwrap_err();
        assert!(matches!(e, Error::EventMismatch { .. }), "{e}");
        assert_eq!(end.elapsed_since(&start).unwrap(), t);
        assert_eq!(end.elapsed_since(&end).unwrap(), Duration::ZERO);
    });
}

#[test]
fn events_of_another_device_are_refused_and_leave_both_usable() {
    let a = context_with(options(Path::Direct));
    let b = context_with(options(Path::Direct));
    let (log_a, log_b) = (
        a.diagnostics().validation_log(),
        b.diagnostics().validation_log(),
    );
    let x = a.enqueue_create_buffer::<u32>(16).unwrap();
    x.enqueue_fill(9).unwrap();
    let ea = a.enqueue_record_event().unwrap();
    let eb = b.enqueue_record_event().unwrap();
    let e = b.enqueue_wait_event(&ea).unwrap_err();
    assert!(matches!(e, Error::DifferentDevice { .. }), "{e}");
    let e = eb.elapsed_since(&ea).unwrap_err();
    assert!(matches!(e, Error::DifferentDevice { .. }), "{e}");
    // The host may wait for either.
    ea.wait().unwrap();
    eb.wait().unwrap();
    assert_eq!(x.to_vec().unwrap(), vec![9; 16]);
    let y = b.enqueue_create_buffer::<u32>(4).unwrap();
    y.enqueue_fill(2).unwrap();
    assert_eq!(y.to_vec().unwrap(), [2; 4]);
    drop((x, y));
    drop((a, b));
    assert_clean(&log_a, "context a");
    assert_clean(&log_b, "context b");
}

#[test]
fn an_event_outlives_its_context() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let data = ctx.enqueue_create_buffer::<u32>(N).unwrap();
    data.enqueue_fill(5).unwrap();
    let event = ctx.enqueue_record_event().unwrap();
    drop(data);
    drop(ctx);
    event.wait().unwrap();
    assert!(event.is_complete().unwrap());
    drop(event);
    assert_clean(&log, "the context");
}

/// Two threads, each with its own stream, hand events to each other and
/// wait for them on the device, round after round: no hang, every copy
/// sees the fill it waited for.
#[test]
fn two_threads_wait_for_each_others_events() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let rounds = 40u32;
    let (to_b, from_a) = std::sync::mpsc::channel::<(Event, u32)>();
    let (to_a, from_b) = std::sync::mpsc::channel::<Event>();
    let src = ctx.enqueue_create_buffer::<u32>(1 << 16).unwrap();
    let dst = ctx.enqueue_create_buffer::<u32>(1 << 16).unwrap();
    ctx.synchronize().unwrap();
    std::thread::scope(|s| {
        let a = ctx.new_stream().unwrap();
        let b = ctx.new_stream().unwrap();
        let (src_a, src_b, dst_b) = (&src, &src, &dst);
        s.spawn(move || {
            for round in 0..rounds {
                if round > 0 {
                    // The other thread's copy of the previous round is
                    // done before this fill overwrites the source.
                    let copied = from_b.recv().unwrap();
                    a.enqueue_wait_event(&copied).unwrap();
                }
                src_a.enqueue_fill(round).unwrap();
                to_b.send((a.enqueue_record_event().unwrap(), round))
                    .unwrap();
            }
            a.synchronize().unwrap();
        });
        s.spawn(move || {
            let check = |dst: &vkcompute::DeviceBuffer<u32>, round: u32| {
                let v = dst.to_vec().unwrap();
                assert!(v.iter().all(|&x| x == round), "round {round}");
            };
            for _ in 0..rounds {
                let (filled, round) = from_a.recv().unwrap();
                b.enqueue_wait_event(&filled).unwrap();
                dst_b.enqueue_copy_from(src_b).unwrap();
                let copied = b.enqueue_record_event().unwrap();
                copied.wait().unwrap();
                check(dst_b, round);
                // The channel closes once the other thread is done.
                let _ = to_a.send(copied);
            }
            b.synchronize().unwrap();
        });
    });
    drop((src, dst));
    drop(ctx);
    assert_clean(&log, "the context");
}

/// An event where no work was enqueued is reached at once.
#[test]
fn an_event_of_an_idle_stream_is_reached() {
    let ctx: DeviceContext = context_with(options(Path::Staging));
    let event = ctx.enqueue_record_event().unwrap();
    event.wait().unwrap();
    assert!(event.is_complete().unwrap());
}

#[test]
fn an_event_is_a_future_woken_by_the_device_not_by_polling() {
    on_each_path(|ctx, path| {
        let data = ctx.enqueue_create_buffer::<u32>(N * 4).unwrap();
        for round in 0..3u32 {
            data.enqueue_fill(round).unwrap();
            let event = ctx.enqueue_record_event().unwrap();
            let (done, polls) = block_on(event.clone());
            done.unwrap();
            assert!(event.is_complete().unwrap(), "{path:?}");
            // First poll, then the waiter's wake (spurious unparks aside).
            assert!(polls <= 4, "{path:?}: {polls} polls");
        }
        // Many futures at once, on several streams, joined by one task.
        let streams: Vec<DeviceContext> = (0..3).map(|_| ctx.new_stream().unwrap()).collect();
        let buffers: Vec<_> = streams
            .iter()
            .map(|s| s.enqueue_create_buffer::<u32>(N).unwrap())
            .collect();
        let mut events = Vec::new();
        for (i, (s, b)) in streams.iter().zip(&buffers).enumerate() {
            for k in 0..10u32 {
                b.enqueue_fill(i as u32 * 100 + k).unwrap();
                events.push(s.enqueue_record_event().unwrap());
            }
        }
        let all = async {
            for e in events {
                e.await?;
            }
            Ok::<(), Error>(())
        };
        let (done, polls) = block_on(all);
        done.unwrap();
        assert!(polls <= 3 * 30 + 1, "{path:?}: {polls} polls for 30 events");
        for (i, b) in buffers.iter().enumerate() {
            assert_eq!(b.to_vec().unwrap()[0], i as u32 * 100 + 9);
        }
    });
}

#[test]
fn futures_on_other_threads_and_dropped_futures() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let data = ctx.enqueue_create_buffer::<u32>(N).unwrap();
    data.enqueue_fill(1).unwrap();
    // A future dropped before it resolved leaves nothing waiting wrongly.
    {
        let event = ctx.enqueue_record_event().unwrap();
        let mut f = std::pin::pin!(event);
        let waker = std::task::Waker::noop();
        let _ = f.as_mut().poll(&mut std::task::Context::from_waker(waker));
    }
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let stream = ctx.new_stream().unwrap();
            s.spawn(move || {
                let b = stream.enqueue_create_buffer::<u32>(1 << 16).unwrap();
                for k in 0..20 {
                    b.enqueue_fill(t * 1000 + k).unwrap();
                    let (v, _) = block_on(b.to_vec_async());
                    assert!(v.unwrap().iter().all(|&x| x == t * 1000 + k));
                }
            });
        }
    });
    drop(data);
    drop(ctx);
    assert_clean(&log, "the context");
}

#[test]
fn reads_as_futures_see_what_was_enqueued_before_them() {
    on_each_path(|ctx, path| {
        let data = ctx.enqueue_create_buffer::<u32>(N).unwrap();
        data.enqueue_fill(3).unwrap();
        let read = data.to_vec_async();
        // Later work, and the buffer's drop, do not change the read.
        data.enqueue_fill(4).unwrap();
        let view = data.create_sub_buffer::<u32>(10, 5).unwrap();
        let read_view = view.to_vec_async();
        drop(data);
        let (v, _) = block_on(read);
        assert_eq!(v.unwrap(), vec![3; N], "{path:?}");
        let (v, _) = block_on(read_view);
        assert_eq!(v.unwrap(), vec![4; 5], "{path:?}");
        // A mapped buffer: what the blocking read does, from the future.
        let other = ctx.enqueue_create_buffer::<u32>(8).unwrap();
        other.enqueue_fill(6).unwrap();
        let mapped = other.map_to_host().unwrap();
        let (v, _) = block_on(other.to_vec_async());
        match other.to_vec() {
            Ok(blocking) => assert_eq!(v.unwrap(), blocking),
            Err(e) => assert_eq!(
                std::mem::discriminant(&v.unwrap_err()),
                std::mem::discriminant(&e)
            ),
        }
        drop(mapped);
        let empty = ctx.enqueue_create_buffer::<u32>(0).unwrap();
        assert_eq!(block_on(empty.to_vec_async()).0.unwrap(), Vec::<u32>::new());
    });
}

/// The mapping future waits (woken by the device, not by polling) for the
/// work enqueued on the buffer before it on every stream, then maps; the
/// mapping's writes reach the device as a blocking mapping's do; a buffer
/// already mapped gives the blocking call's error.
#[test]
fn a_mapping_as_a_future_follows_the_work_before_it() {
    on_each_path(|ctx, path| {
        let data = ctx.enqueue_create_buffer::<u32>(N).unwrap();
        for _ in 0..8 {
            data.enqueue_fill(3).unwrap();
        }
        // A copy whose source another stream fills.
        let other = ctx.new_stream().unwrap();
        let first = data.create_sub_buffer::<u32>(0, 16).unwrap();
        other.enqueue_wait_for(ctx).unwrap();
        let sixteen = other.enqueue_create_buffer::<u32>(16).unwrap();
        sixteen.enqueue_fill(9).unwrap();
        first.enqueue_copy_from(&sixteen).unwrap();
        let (mapped, polls) = block_on(data.map_to_host_async());
        let mut mapped = mapped.unwrap();
        assert!(polls <= 8, "{path:?}: polled {polls} times");
        assert!(mapped[..16].iter().all(|&v| v == 9), "{path:?}");
        assert!(mapped[16..].iter().all(|&v| v == 3), "{path:?}");
        mapped[20] = 11;
        // Mapped: the future gives the blocking call's error.
        let (again, _) = block_on(data.map_to_host_async());
        match again {
            Err(Error::BufferMapped { .. }) => {}
            Err(e) => panic!("{path:?}: {e}"),
            Ok(_) => panic!("{path:?}: mapped twice"),
        }
        drop(mapped);
        let v = data.to_vec().unwrap();
        assert_eq!((v[0], v[20], v[21]), (9, 11, 3), "{path:?}");
        // A dropped mapping future leaves the buffer usable.
        data.enqueue_fill(1).unwrap();
        drop(data.map_to_host_async());
        data.enqueue_fill(2).unwrap();
        assert_eq!(data.to_vec().unwrap(), vec![2; N], "{path:?}");
    });
}
