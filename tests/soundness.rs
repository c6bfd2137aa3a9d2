//! Regression tests for issue 10's host and stream cases: lost writes under
//! a mapping's write-back, torn multi-piece transfers, raw buffers outliving
//! their context, memory of one stream freed by another, zero-sized
//! elements and size overflows. Each failed before its fix. (Errors kept
//! from `Drop` and `execution_time`'s queries: unit tests in context.rs.)
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::sync::{Arc, Barrier};
use std::thread;

use common::{context_with, on_each_path, options, run_with, Path};
use vkcompute::Error;

/// A fill that another thread enqueues once a staged mapping has ended is
/// ordered after the mapping's write-back, never overwritten by it.
#[test]
fn a_fill_after_a_staged_mapping_is_not_overwritten_by_its_write_back() {
    run_with(options(Path::Staging), "mapping then fill", |ctx| {
        let buf = ctx.enqueue_create_buffer::<u32>(4096).unwrap();
        for round in 0..40u32 {
            buf.enqueue_fill(0).unwrap();
            let mut mapped = buf.map_to_host().unwrap();
            assert!(!mapped.is_direct());
            let started = Arc::new(Barrier::new(2));
            let filler = {
                let buf = buf.clone();
                let started = started.clone();
                thread::spawn(move || {
                    started.wait();
                    // Refused while the mapping lives; the first fill that
                    // succeeds comes after the mapping ended.
                    loop {
                        match buf.enqueue_fill(1000 + round) {
                            Ok(()) => return,
                            Err(Error::BufferMapped { .. }) => thread::yield_now(),
                            Err(e) => panic!("round {round}: {e}"),
                        }
                    }
                })
            };
            started.wait();
            mapped.iter_mut().for_each(|v| *v = round);
            drop(mapped);
            filler.join().unwrap();
            let got = buf.to_vec().unwrap();
            assert!(
                got.iter().all(|&v| v == 1000 + round),
                "round {round}: the fill was lost under the write-back ({} of {} elements)",
                got.iter().filter(|&&v| v != 1000 + round).count(),
                got.len()
            );
        }
    });
}

/// Two threads that map one buffer in turn and add to it lose no addition,
/// and neither sees an error that belongs to the other's mapping.
#[test]
fn two_threads_mapping_one_buffer_in_turn_lose_nothing() {
    on_each_path(|ctx, path| {
        let buf = ctx.enqueue_create_buffer::<u64>(512).unwrap();
        buf.enqueue_fill(0).unwrap();
        let rounds = 150u64;
        let workers: Vec<_> = (0..2u64)
            .map(|t| {
                let buf = buf.clone();
                thread::spawn(move || {
                    let mut done = 0;
                    while done < rounds {
                        match buf.map_to_host() {
                            Ok(mut m) => {
                                for (i, v) in m.iter_mut().enumerate() {
                                    *v += 1 + (i as u64 % 2) * t;
                                }
                                m.finish().unwrap();
                                done += 1;
                            }
                            Err(Error::BufferMapped { .. }) => thread::yield_now(),
                            Err(e) => panic!("thread {t} ({path:?}): {e}"),
                        }
                    }
                })
            })
            .collect();
        for w in workers {
            w.join().unwrap();
        }
        let got = buf.to_vec().unwrap();
        for (i, v) in got.iter().enumerate() {
            let want = rounds * 2 + if i % 2 == 1 { rounds } else { 0 };
            assert_eq!(*v, want, "{path:?}: element {i}");
        }
    });
}

/// An upload or a read of several staging pieces is one operation: another
/// thread never sees it half done.
#[test]
fn multi_piece_transfers_are_never_seen_half_done() {
    on_each_path(|ctx, path| {
        // 24 MiB: three pieces of 8 MiB on the staging path.
        let n = 6 << 20;
        let buf = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        buf.enqueue_fill(0).unwrap();
        let writer = {
            let buf = buf.clone();
            thread::spawn(move || {
                for round in 1..=12u32 {
                    buf.enqueue_copy_from(&vec![round; n][..]).unwrap();
                }
            })
        };
        let mut seen = 0;
        while seen < 12 {
            let got = buf.to_vec().unwrap();
            let first = got[0];
            if let Some(i) = got.iter().position(|&v| v != first) {
                panic!(
                    "{path:?}: torn read: element 0 holds {first}, element {i} holds {}",
                    got[i]
                );
            }
            seen += 1;
        }
        writer.join().unwrap();
        assert_eq!(buf.to_vec().unwrap(), vec![12; n]);
    });
}

/// A raw buffer keeps its device: it can be freed after its context is
/// gone, and one dropped unfreed is freed with the device.
#[test]
fn raw_buffers_outlive_their_context() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let buf = ctx.enqueue_create_buffer::<u32>(64).unwrap();
    buf.enqueue_fill(9).unwrap();
    let owned = buf.take_raw().unwrap();
    let dropped = {
        let b = ctx.enqueue_create_buffer::<u32>(64).unwrap();
        b.take_raw().unwrap()
    };
    drop(ctx);
    // The device is still alive: nothing reported it destroyed with live objects.
    common::assert_clean(&log, "dropping the context under raw buffers");
    let other = context_with(options(Path::Direct));
    // SAFETY: the buffer is idle (take_raw waited) and not used again.
    let refused = unsafe { other.raw().free_buffer(owned) };
    assert!(
        matches!(refused, Err(Error::DifferentDevice { .. })),
        "{refused:?}"
    );
    drop(dropped);
    drop(other);
    // Both buffers were freed with their device: no leak reported.
    common::assert_clean(&log, "destroying the device of raw buffers");
}

/// `OwnedRawBuffer::free` frees at once, with or without a context.
#[test]
fn raw_buffers_free_themselves() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let owned = ctx
        .enqueue_create_buffer::<u8>(100)
        .unwrap()
        .take_raw()
        .unwrap();
    assert_eq!(owned.size(), 100);
    drop(ctx);
    // SAFETY: the buffer is idle and not used again.
    unsafe { owned.free() };
    common::assert_clean(&log, "freeing a raw buffer after its context");
}

/// Memory owned by one stream but last used by another is freed once that
/// other stream has passed its use, even while the owner stays idle.
#[test]
fn memory_used_on_another_stream_is_freed_by_that_stream() {
    run_with(options(Path::Direct), "cross-stream frees", |ctx| {
        let second = ctx.new_stream().unwrap();
        let dst = second.enqueue_create_buffer::<u32>(1 << 20).unwrap();
        let baseline = ctx.diagnostics().live_objects().pending_frees;
        for _ in 0..4 {
            let src = ctx.enqueue_create_buffer::<u32>(1 << 20).unwrap();
            // Written before on its own (idle afterwards) stream...
            src.enqueue_fill(5).unwrap();
            ctx.synchronize().unwrap();
            // ...then read on the second stream, and dropped at once.
            dst.enqueue_copy_from(&src).unwrap();
            drop(src);
        }
        second.synchronize().unwrap();
        assert_eq!(
            ctx.diagnostics().live_objects().pending_frees,
            baseline,
            "memory waits for the idle owner stream"
        );
        assert_eq!(dst.to_vec().unwrap(), vec![5; 1 << 20]);
    });
}

/// Zero-sized element types are refused: such a buffer could hold nothing.
#[test]
fn zero_sized_elements_are_refused() {
    run_with(options(Path::Direct), "zero-sized elements", |ctx| {
        let e = ctx.enqueue_create_buffer::<()>(5).unwrap_err();
        assert!(matches!(e, Error::ZeroSizedElement { .. }), "{e}");
        let e = ctx.enqueue_create_host_buffer::<()>(5).unwrap_err();
        assert!(matches!(e, Error::ZeroSizedElement { .. }), "{e}");
        let buf = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        let e = buf.create_sub_buffer::<()>(0, 3).unwrap_err();
        assert!(e.to_string().contains("no size"), "{e}");
        buf.enqueue_fill(1).unwrap();
        assert_eq!(buf.to_vec().unwrap(), [1; 4]);
    });
}

/// An impossible length is reported as asked, whichever check catches it.
#[test]
fn size_overflow_reports_the_length_asked_for() {
    run_with(options(Path::Direct), "size overflow", |ctx| {
        for len in [usize::MAX, usize::MAX - 1, usize::MAX - 2] {
            match ctx.enqueue_create_buffer::<u8>(len) {
                Err(Error::SizeOverflow {
                    len: got,
                    elem_size,
                    ..
                }) => assert_eq!((got, elem_size), (len, 1)),
                other => panic!("{len}: expected SizeOverflow, got {other:?}"),
            }
        }
        let len = usize::MAX / 3;
        match ctx.enqueue_create_buffer::<[u8; 3]>(len) {
            Err(Error::SizeOverflow {
                len: got,
                elem_size,
                ..
            }) => assert_eq!((got, elem_size), (len, 3)),
            other => panic!("expected SizeOverflow, got {other:?}"),
        }
    });
}

/// `take_raw` checks that no clone is alive before it waits for the
/// buffer's work: a clone that enqueues a fill and drops while take_raw
/// waits either makes it refuse (`Error::Shared`) or is waited for, so
/// the raw buffer it returns is idle and freeing it is sound.
#[test]
fn take_raw_never_returns_a_buffer_a_dropped_clone_still_uses() {
    on_each_path(|ctx, path| {
        let n = 1 << 20;
        let (mut taken, mut refused) = (0, 0);
        for round in 0..60u32 {
            let buf = ctx.enqueue_create_buffer::<u32>(n).unwrap();
            // Pending work for take_raw to wait for.
            buf.enqueue_fill(round).unwrap();
            let started = Arc::new(Barrier::new(2));
            let clone = buf.clone();
            let filler = {
                let started = started.clone();
                thread::spawn(move || {
                    started.wait();
                    clone.enqueue_fill(round + 1).unwrap();
                    drop(clone);
                })
            };
            started.wait();
            match buf.take_raw() {
                Ok(owned) => {
                    taken += 1;
                    filler.join().unwrap();
                    // SAFETY: take_raw returned it, so no work uses it, and
                    // nothing uses it afterwards.
                    unsafe { owned.free() };
                }
                Err((back, e)) => {
                    refused += 1;
                    assert!(matches!(e, Error::Shared { .. }), "{path:?}: {e}");
                    filler.join().unwrap();
                    drop(back);
                }
            }
            ctx.synchronize().unwrap();
        }
        assert_eq!(taken + refused, 60);
    });
}

/// A long buffer prints its first three and last three elements from one
/// snapshot: with another thread filling it over and over, all six are
/// the value of one fill.
#[test]
fn a_long_buffer_prints_one_snapshot_of_both_ends() {
    on_each_path(|ctx, path| {
        let n = 1 << 16;
        let buf = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        buf.enqueue_fill(0).unwrap();
        let done = std::sync::atomic::AtomicBool::new(false);
        thread::scope(|s| {
            let (buf, done) = (&buf, &done);
            s.spawn(move || {
                let mut value = 1;
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    buf.enqueue_fill(value).unwrap();
                    // One fill in flight at a time, so that the reads that
                    // wait for the buffer to be idle get their turn.
                    ctx.synchronize().unwrap();
                    value += 1;
                }
            });
            // Stops the writer however the reads end (a failed assertion
            // included, which would otherwise wait for it for ever).
            struct Stop<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Stop<'_> {
                fn drop(&mut self) {
                    self.0.store(true, std::sync::atomic::Ordering::Relaxed);
                }
            }
            let _stop = Stop(done);
            for _ in 0..300 {
                let text = buf.to_string();
                let inner = text
                    .strip_prefix("DeviceBuffer([")
                    .and_then(|t| t.strip_suffix("])"))
                    .unwrap_or_else(|| panic!("{path:?}: {text}"));
                let values: Vec<&str> = inner.split(", ").filter(|v| *v != "...").collect();
                assert_eq!(values.len(), 6, "{path:?}: {text}");
                assert!(
                    values.iter().all(|v| *v == values[0]),
                    "{path:?}: a torn print: {text}"
                );
            }
        });
    });
}

/// A writer that never pauses does not keep a reader or a mapping waiting
/// for ever: on the direct path a read or borrow that must wait for the
/// device takes the buffer's operation lock exclusively, so that the work it
/// waits for stops growing. (Before, `to_vec` waited, found the writer's
/// newer fill pending, and waited again, without end.)
#[test]
fn reads_and_mappings_finish_beside_a_writer_that_never_pauses() {
    common::on_each_path(|ctx, path| {
        let buffer = ctx.enqueue_create_buffer::<u32>(1 << 18).unwrap();
        buffer.enqueue_fill(0).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (buffer, stop) = (buffer.clone(), stop.clone());
                std::thread::spawn(move || {
                    let mut v = 0u32;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        v += 1;
                        match buffer.enqueue_fill(v) {
                            Ok(()) | Err(vkcompute::Error::BufferMapped { .. }) => {}
                            Err(e) => panic!("fill: {e}"),
                        }
                    }
                })
            })
            .collect();
        let (done, finished) = std::sync::mpsc::channel();
        let reader = {
            let buffer = buffer.clone();
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let seen = buffer.to_vec().unwrap();
                    assert!(seen.iter().all(|&x| x == seen[0]), "a torn read");
                }
                for _ in 0..5 {
                    let mapped = buffer.map_to_host().unwrap();
                    assert!(mapped.iter().all(|&x| x == mapped[0]), "a torn mapping");
                    drop(mapped);
                }
                let _ = done.send(());
            })
        };
        let result = finished.recv_timeout(std::time::Duration::from_secs(120));
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        assert!(
            result.is_ok(),
            "{path:?}: reads beside a busy writer did not finish in 120 s"
        );
        reader.join().unwrap();
        writers.into_iter().for_each(|w| w.join().unwrap());
    });
}
