//! Mapping and readback futures and their waiter threads: futures dropped
//! or raced with writes, after work on two streams, on views from two
//! threads, the last context dropped by a waker on the waiter thread,
//! faults in a staged mapping's write-back, and operations on a buffer the
//! same thread maps. Every test runs under validation.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use common::{assert_clean, context_with, on_each_context, options, Path};
use vkcompute::{shaders, DeviceBuffer, DeviceContext, Error, Kernel};

fn host_dummy(ctx: &DeviceContext) -> DeviceBuffer<u32> {
    let b = ctx.enqueue_create_buffer::<u32>(64).unwrap();
    b.enqueue_fill(0).unwrap();
    b
}

/// A mapping future polled once then dropped, another thread writing the
/// buffer meanwhile, then a future raced with writes from another thread.
#[test]
fn mapping_futures_dropped_and_raced_with_writes() {
    on_each_context(|ctx, what| {
        let n = 1 << 18;
        let buf = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        buf.enqueue_fill(1).unwrap();
        {
            let mut f = std::pin::pin!(buf.map_to_host_async());
            let mut cx = Context::from_waker(Waker::noop());
            let _ = f.as_mut().poll(&mut cx); // maybe pending, maybe mapped
        }
        std::thread::scope(|s| {
            s.spawn(|| buf.enqueue_fill(9).unwrap());
        });
        assert_eq!(buf.map_to_host().unwrap()[n - 1], 9, "{what}");
        // The future made, then other threads enqueue writes before it is
        // polled: the mapping must see them all (it waits for later work).
        for round in 0..5u32 {
            let fut = buf.map_to_host_async();
            std::thread::scope(|s| {
                s.spawn(|| {
                    let ctx2 = buf.context();
                    buf.enqueue_fill(100 + round).unwrap();
                    ctx2.flush().unwrap();
                });
            });
            let m = common::resolve(fut).unwrap();
            assert!(m.iter().all(|&v| v == 100 + round), "{what}: round {round}");
        }
        // A write from another thread while a mapping from the future is
        // held is refused, and the context stays usable.
        let m = common::resolve(buf.map_to_host_async()).unwrap();
        std::thread::scope(|s| {
            s.spawn(|| {
                let e = buf.enqueue_fill(3).unwrap_err();
                assert!(matches!(e, Error::BufferMapped { .. }), "{e}");
            });
        });
        drop(m);
        buf.enqueue_fill(4).unwrap();
        assert_eq!(buf.to_vec().unwrap()[0], 4, "{what}");
    });
}

/// Futures of work on two streams: the buffer written on one stream, the
/// mapping future's pending point is on the other.
#[test]
fn mapping_future_after_work_on_two_streams() {
    on_each_context(|ctx, what| {
        let other = ctx.new_stream().unwrap();
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let n = 64 * 64;
        let buf = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        buf.enqueue_fill(0).unwrap();
        for _ in 0..20 {
            ctx.enqueue_function(&add_one, 64, &[buf.arg()], &(n as u32))
                .unwrap();
            other
                .enqueue_function(&add_one, 64, &[buf.arg()], &(n as u32))
                .unwrap();
        }
        let fut = buf.map_to_host_async();
        drop(other);
        let m = common::resolve(fut).unwrap();
        assert!(m.iter().all(|&v| v == 40), "{what}: {}", m[0]);
    });
}

struct DropsContext {
    held: std::sync::Mutex<Option<DeviceContext>>,
    woke: AtomicBool,
}

impl Wake for DropsContext {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        // The last context is dropped on the waiter thread.
        let ctx = self.held.lock().unwrap().take();
        drop(ctx);
        self.woke.store(true, Ordering::SeqCst);
    }
}

/// A waker that owns the last handle of the context: the context is
/// dropped on its own waiter thread (which cannot join itself).
#[test]
fn the_last_context_dropped_by_a_waker_on_the_waiter_thread() {
    for path in [Path::Direct, Path::Staging] {
        let ctx = context_with(options(path));
        let log = ctx.diagnostics().validation_log();
        let buf = ctx.enqueue_create_buffer::<u32>(1 << 20).unwrap();
        let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
        for _ in 0..10 {
            ctx.enqueue_function(&add_one, (1 << 20) / 64, &[buf.arg()], &(1u32 << 20))
                .unwrap();
        }
        let event = ctx.enqueue_record_event().unwrap();
        let w = Arc::new(DropsContext {
            held: std::sync::Mutex::new(Some(ctx.clone())),
            woke: AtomicBool::new(false),
        });
        let waker = Waker::from(w.clone());
        let mut event = std::pin::pin!(event);
        let pending = event
            .as_mut()
            .poll(&mut Context::from_waker(&waker))
            .is_pending();
        drop(waker);
        drop(buf);
        drop(add_one);
        drop(ctx);
        if pending {
            let deadline = Instant::now() + Duration::from_secs(60);
            while !w.woke.load(Ordering::SeqCst) {
                assert!(Instant::now() < deadline, "{path:?}: never woken");
                std::thread::sleep(Duration::from_millis(10));
            }
        } else {
            w.held.lock().unwrap().take();
        }
        // The event outlives the context.
        assert!(event.is_complete().unwrap(), "{path:?}");
        std::thread::sleep(Duration::from_millis(200));
        assert_clean(&log, &format!("{path:?}"));
    }
}

/// Dropping the context while another thread awaits an event on it and a
/// third enqueues on a clone.
#[test]
fn dropping_a_context_while_futures_wait_on_other_threads() {
    for path in [Path::Direct, Path::Staging] {
        let ctx = context_with(options(path));
        let log = ctx.diagnostics().validation_log();
        let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
        let buf = ctx.enqueue_create_buffer::<u32>(1 << 18).unwrap();
        buf.enqueue_fill(0).unwrap();
        for _ in 0..8 {
            ctx.enqueue_function(&add_one, (1 << 18) / 64, &[buf.arg()], &(1u32 << 18))
                .unwrap();
        }
        let ev = ctx.enqueue_record_event().unwrap();
        let read = buf.to_vec_async();
        let t1 = std::thread::spawn(move || common::resolve(ev));
        let t2 = std::thread::spawn(move || common::resolve(read));
        let clone = ctx.new_stream().unwrap();
        drop(ctx);
        let t3 = {
            let buf = buf.clone();
            std::thread::spawn(move || {
                for _ in 0..4 {
                    clone
                        .enqueue_function(&add_one, (1 << 18) / 64, &[buf.arg()], &(1u32 << 18))
                        .unwrap();
                }
                drop(clone);
            })
        };
        t1.join().unwrap().unwrap();
        let v = t2.join().unwrap().unwrap();
        assert_eq!(v[0], 8, "{path:?}");
        t3.join().unwrap();
        assert_eq!(buf.to_vec().unwrap()[5], 12, "{path:?}");
        drop(buf);
        assert_clean(&log, &format!("{path:?}"));
    }
}

/// map_to_host_async on views of one memory from two threads, each
/// writing through its mapping while the other's dispatches run.
#[test]
fn mapping_futures_on_views_from_two_threads() {
    on_each_context(|ctx, what| {
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let align = ctx.info().limits.min_storage_buffer_offset_alignment.max(4) as usize / 4;
        let half = 64 * align.max(1);
        let mem = ctx.enqueue_create_buffer::<u32>(2 * half).unwrap();
        mem.enqueue_fill(0).unwrap();
        let views = [
            mem.create_sub_buffer::<u32>(0, half).unwrap(),
            mem.create_sub_buffer::<u32>(half, half).unwrap(),
        ];
        let errors = std::sync::atomic::AtomicUsize::new(0);
        std::thread::scope(|sc| {
            for (t, v) in views.iter().enumerate() {
                let (add_one, errors) = (&add_one, &errors);
                sc.spawn(move || {
                    for r in 0..20u32 {
                        match ctx.enqueue_function(
                            add_one,
                            (half / 64) as u32,
                            &[v.arg()],
                            &(half as u32),
                        ) {
                            Ok(()) => {}
                            Err(Error::BufferMapped { .. }) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("{e}"),
                        }
                        match common::resolve(v.map_to_host_async()) {
                            Ok(mut m) => {
                                m[0] += 1000;
                                let _ = (t, r);
                            }
                            Err(Error::BufferMapped { .. }) => {
                                errors.fetch_add(1, Ordering::Relaxed);
                            }
                            Err(e) => panic!("{e}"),
                        }
                    }
                });
            }
        });
        eprintln!(
            "{what}: {} refusals (the borrow is per memory)",
            errors.load(Ordering::Relaxed)
        );
        let got = mem.to_vec().unwrap();
        // Not asserting exact values where refusals happened; check sanity.
        assert!(
            got[0] >= 20 * 1000 || errors.load(Ordering::Relaxed) > 0,
            "{what}: {}",
            got[0]
        );
    });
}

/// Allocation failures at every point of a staged mapping future, its
/// write-back in Drop included: errors are reported (at once or kept for
/// the buffer's next operation), nothing hangs, and the buffer and the
/// context stay usable.
///
/// Was a FINDING, fixed (a piece after the first that finds no memory is
/// tried once more once the device is idle, `transfer::upload_held`).
/// It failed on the Staging path (the failing nth varies with timing,
/// hence three passes): a write-back of more than
/// one TRANSFER_CHUNK (8 MiB) that fails after its first piece (here
/// vkBeginCommandBuffer of the batch after the flush between pieces in
/// `StreamHandle::upload_held`, src/transfer.rs) leaves the buffer torn:
/// 2,097,152 of 3,000,000 elements hold the mapping's new values, the rest
/// the old ones; the error only surfaces as a kept (Deferred) error on the
/// buffer's next operation, which cannot tell the caller what was written.
#[cfg(feature = "fault-injection")]
#[test]
fn faults_in_staged_mapping_futures_and_their_write_back() {
    for path in [Path::Staging, Path::Direct] {
        let ctx = context_with(options(path));
        let log = ctx.diagnostics().validation_log();
        let n = 3_000_000; // several transfer pieces
        let buf = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        buf.enqueue_fill(1).unwrap();
        let mut kept_errors = 0;
        let mut now_errors = 0;
        for nth in (1..40u64).chain(1..40).chain(1..40) {
            // timing moves the points: three passes
            ctx.synchronize().unwrap();
            buf.enqueue_fill(nth as u32).unwrap();
            vkcompute::testing::fail_allocation(&ctx, nth);
            let r = common::resolve(buf.map_to_host_async());
            match r {
                Ok(mut m) => {
                    assert!(m.iter().all(|&v| v == nth as u32), "{path:?} nth {nth}");
                    m.iter_mut().for_each(|v| *v = 777);
                    drop(m); // the write-back may fail here: kept
                }
                Err(e) => {
                    now_errors += 1;
                    eprintln!("{path:?} nth {nth}: {e}");
                }
            }
            vkcompute::testing::fail_allocation(&ctx, 0);
            match buf.to_vec() {
                Ok(v) => {
                    let new = v.iter().filter(|&&x| x == 777).count();
                    assert!(
                        new == 0 || new == n,
                        "{path:?} nth {nth}: torn: {new} of {n} written back"
                    );
                }
                Err(e) => {
                    kept_errors += 1;
                    eprintln!("{path:?} nth {nth}: kept {e}");
                    let v = buf.to_vec().unwrap();
                    let new = v.iter().filter(|&&x| x == 777).count();
                    let old = v.iter().filter(|&&x| x == nth as u32).count();
                    eprintln!(
                        "  after the kept error: {new} elements written back, {old} old, of {n}"
                    );
                    assert!(new == 0 || new == n, "FINDING {path:?} nth {nth}: a failed write-back left the buffer torn: {new} of {n} elements new, {old} old");
                }
            }
        }
        eprintln!("{path:?}: {now_errors} errors from the future, {kept_errors} kept");
        drop(buf);
        ctx.synchronize().unwrap();
        drop(ctx);
        assert_clean(&log, &format!("{path:?}"));
    }
}

/// Same-thread reentrancy while a mapping (from the future) is alive:
/// every operation on the buffer returns (an error or the contents),
/// none waits for the mapping to end. A watchdog aborts on a hang.
#[test]
fn operations_on_a_buffer_mapped_by_the_same_thread_never_hang() {
    let stop = Arc::new(AtomicBool::new(false));
    let watchdog = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let start = Instant::now();
            while !stop.load(Ordering::SeqCst) {
                if start.elapsed() > Duration::from_secs(90) {
                    eprintln!("FINDING: a same-thread operation on a mapped buffer hangs");
                    std::process::abort();
                }
                std::thread::sleep(Duration::from_millis(50));
            }
        })
    };
    on_each_context(|ctx, what| {
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let buf = ctx.enqueue_create_buffer::<u32>(1024).unwrap();
        buf.enqueue_fill(2).unwrap();
        let host = ctx.enqueue_create_host_buffer::<u32>(1024).unwrap();
        let mut m = common::resolve(buf.map_to_host_async()).unwrap();
        m[0] = 5;
        let r1 = buf.to_vec().map(|v| v[0]);
        let r2 = buf.enqueue_copy_to(&host);
        let r3 = common::resolve(buf.map_to_host_async()).map(|_| ());
        let r4 = buf.map_to_host().map(|_| ());
        let r5 = ctx.enqueue_function_indirect(&add_one, &buf, 0, &[host_dummy(ctx).arg()], &1u32);
        let sub = buf.create_sub_buffer::<u32>(512, 512).unwrap();
        let r6 = common::resolve(sub.to_vec_async()).map(|v| v[0]);
        let r7 = ctx.synchronize();
        eprintln!("{what}: to_vec {r1:?}; copy_to {r2:?}; map async {r3:?}; map {r4:?}; indirect {r5:?}; sub to_vec_async {r6:?}; sync {r7:?}");
        drop(m);
        assert_eq!(buf.to_vec().unwrap()[0], 5, "{what}");
    });
    stop.store(true, Ordering::SeqCst);
    watchdog.join().unwrap();
}
