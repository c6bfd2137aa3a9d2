//! Misuse of events, futures and the waiter thread (a hostile review of
//! issue 21's events): repolling, panicking wakers, dropped contexts and
//! streams, many threads, allocation failures,
//! and `MemoryInfo` with exportable memory.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};
use std::time::{Duration, Instant};

use common::{assert_clean, block_on, context_with, options, Path};

const N: usize = 1 << 22;

/// Live wakers made by `counting_waker`, so that a test sees how many the
/// library keeps.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn counting_waker() -> Waker {
    unsafe fn clone(p: *const ()) -> RawWaker {
        LIVE.fetch_add(1, Ordering::SeqCst);
        RawWaker::new(p, &VTABLE)
    }
    unsafe fn noop(_: *const ()) {}
    unsafe fn drop(_: *const ()) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
    unsafe fn wake(_: *const ()) {
        LIVE.fetch_sub(1, Ordering::SeqCst);
    }
    static VTABLE: RawWakerVTable = RawWakerVTable::new(clone, wake, noop, drop);
    // A distinct data pointer each time, so `will_wake` says they differ.
    let p = Box::into_raw(Box::new(0u8)) as *const ();
    LIVE.fetch_add(1, Ordering::SeqCst);
    unsafe { Waker::from_raw(RawWaker::new(p, &VTABLE)) }
}

/// A future polled many times while pending (as `select!` in a loop, or an
/// executor that makes a new waker per poll, does) should keep the latest
/// waker, not one per poll: std's contract is that only the last waker
/// passed to `poll` needs waking.
#[test]
fn repolling_a_pending_event_keeps_one_waker_not_one_per_poll() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let data = ctx.enqueue_create_buffer::<u32>(N * 4).unwrap();
    for _ in 0..16 {
        data.enqueue_fill(1).unwrap();
    }
    let event = ctx.enqueue_record_event().unwrap();
    let mut f = std::pin::pin!(event.clone());
    let before = LIVE.load(Ordering::SeqCst);
    let mut polls = 0;
    let mut pending_polls = 0;
    while polls < 2000 {
        polls += 1;
        let w = counting_waker();
        let r = f.as_mut().poll(&mut Context::from_waker(&w));
        drop(w);
        if r.is_ready() {
            break;
        }
        pending_polls += 1;
    }
    let kept = LIVE.load(Ordering::SeqCst) - before;
    println!("{pending_polls} pending polls, {kept} wakers kept");
    event.wait().unwrap();
    // Let the waiter thread wake what it held.
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        pending_polls < 10 || kept <= 2,
        "{kept} wakers kept by the waiter after {pending_polls} pending polls"
    );
    drop(data);
    drop(ctx);
    assert_clean(&log, "the context");
}

/// The waiter thread keeps the device; once the context is dropped with a
/// future pending, the device is destroyed on the waiter thread. Any
/// message at destruction must still reach the log, and the future resolves.
#[test]
fn a_future_pending_when_its_context_is_dropped_resolves() {
    let ctx = context_with(options(Path::Staging));
    let log = ctx.diagnostics().validation_log();
    let data = ctx.enqueue_create_buffer::<u32>(N * 4).unwrap();
    data.enqueue_fill(1).unwrap();
    let read = data.to_vec_async();
    let event = ctx.enqueue_record_event().unwrap();
    let mut f = Box::pin(event);
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    struct Flag(Arc<std::sync::atomic::AtomicBool>);
    impl std::task::Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let waker = Waker::from(Arc::new(Flag(done.clone())));
    let mut cx = Context::from_waker(&waker);
    let first = f.as_mut().poll(&mut cx);
    drop(data);
    drop(ctx);
    if first.is_pending() {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !done.load(Ordering::SeqCst) {
            assert!(Instant::now() < deadline, "never woken");
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(f.as_mut().poll(&mut cx).is_ready());
    }
    // The read future outlives the context and the buffer too.
    let mut read = Box::pin(read);
    let deadline = Instant::now() + Duration::from_secs(60);
    let v = loop {
        if let Poll::Ready(v) = read.as_mut().poll(&mut Context::from_waker(Waker::noop())) {
            break v;
        }
        assert!(Instant::now() < deadline, "read never resolved");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(v.unwrap().len(), N * 4);
    drop(f);
    drop(read);
    std::thread::sleep(Duration::from_millis(300));
    assert_clean(&log, "the context");
}

/// MemoryInfo's `free` is a part of `total` ("bytes of device-local memory
/// that are about free").
#[test]
fn memory_info_free_is_at_most_total() {
    let ctx = context_with(options(Path::Direct));
    let m = ctx.memory_info();
    println!("{m:?}");
    assert!(
        m.free <= m.total,
        "free {} > total {} ({:?})",
        m.free,
        m.total,
        m.source
    );
}

/// A waker that panics when woken (a buggy executor, on one task) must
/// not stop the stream's waiter from waking the other futures waiting on
/// that stream, of any executor: the waiter thread dies with its entries
/// and `running` still set, so no thread is ever started again.
#[test]
fn a_panicking_waker_does_not_stop_other_futures_being_woken() {
    let ctx = context_with(options(Path::Direct));
    let data = ctx.enqueue_create_buffer::<u32>(N * 4).unwrap();
    for _ in 0..4 {
        data.enqueue_fill(1).unwrap();
    }
    let first = ctx.enqueue_record_event().unwrap();
    first.is_complete().unwrap(); // submits the first batch
    for _ in 0..4 {
        data.enqueue_fill(2).unwrap();
    }
    let second = ctx.enqueue_record_event().unwrap();
    struct Panics;
    impl std::task::Wake for Panics {
        fn wake(self: Arc<Self>) {
            panic!("a buggy executor's waker");
        }
    }
    struct Flag(Arc<std::sync::atomic::AtomicBool>);
    impl std::task::Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, Ordering::SeqCst);
        }
    }
    let bad = Waker::from(Arc::new(Panics));
    let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let good = Waker::from(Arc::new(Flag(woken.clone())));
    let mut f = Box::pin(first.clone());
    let mut g = Box::pin(second.clone());
    let p1 = f.as_mut().poll(&mut Context::from_waker(&bad)).is_pending();
    let p2 = g
        .as_mut()
        .poll(&mut Context::from_waker(&good))
        .is_pending();
    if !(p1 && p2) {
        println!("skipped: an event was reached at once ({p1} {p2})");
        return;
    }
    second.wait().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !woken.load(Ordering::SeqCst) {
        assert!(
            Instant::now() < deadline,
            "the second future was never woken (10 s after its event was reached)"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    // And a later future of the stream.
    data.enqueue_fill(3).unwrap();
    let third = ctx.enqueue_record_event().unwrap();
    let (r, _) = block_on(third);
    r.unwrap();
}

/// Clones of one event awaited on many threads at once, round after round,
/// with a producer on another stream: every future resolves (no lost
/// wakeup), checked by a deadline.
#[test]
fn clones_of_events_awaited_on_eight_threads() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let data = ctx.enqueue_create_buffer::<u32>(1 << 18).unwrap();
    let start = Instant::now();
    for round in 0..30u32 {
        data.enqueue_fill(round).unwrap();
        let e = ctx.enqueue_record_event().unwrap();
        std::thread::scope(|s| {
            for _ in 0..8 {
                let e = e.clone();
                s.spawn(move || {
                    let woken = Arc::new(std::sync::atomic::AtomicBool::new(false));
                    struct Unpark(std::thread::Thread, Arc<std::sync::atomic::AtomicBool>);
                    impl std::task::Wake for Unpark {
                        fn wake(self: Arc<Self>) {
                            self.1.store(true, Ordering::SeqCst);
                            self.0.unpark();
                        }
                    }
                    let w = Waker::from(Arc::new(Unpark(std::thread::current(), woken)));
                    let mut f = std::pin::pin!(e);
                    let deadline = Instant::now() + Duration::from_secs(30);
                    loop {
                        if let Poll::Ready(r) = f.as_mut().poll(&mut Context::from_waker(&w)) {
                            r.unwrap();
                            break;
                        }
                        std::thread::park_timeout(Duration::from_secs(5));
                        assert!(Instant::now() < deadline, "lost wakeup");
                    }
                });
            }
        });
    }
    println!("30 rounds in {:?}", start.elapsed());
    drop(data);
    drop(ctx);
    assert_clean(&log, "the context");
}

/// An event of a stream dropped before another stream waits for it.
#[test]
fn waiting_for_an_event_of_a_dropped_stream() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let other = ctx.new_stream().unwrap();
    let big = other.enqueue_create_buffer::<u32>(N * 4).unwrap();
    big.enqueue_fill(3).unwrap();
    let e = other.enqueue_record_event().unwrap();
    drop(other);
    let small = ctx.enqueue_create_buffer::<u32>(4).unwrap();
    ctx.enqueue_wait_event(&e).unwrap();
    small
        .enqueue_copy_from(&big.create_sub_buffer::<u32>(0, 4).unwrap())
        .unwrap();
    assert_eq!(small.to_vec().unwrap(), [3; 4]);
    // And as a future, after the stream is gone.
    let (r, _) = block_on(e.clone());
    r.unwrap();
    drop((big, small));
    drop(ctx);
    drop(e);
    assert_clean(&log, "the context");
}

/// Every allocation failure during a to_vec_async and a enqueue_record_event +
/// await: an error or the right data, never a hang, a panic, a wrong
/// `Ok`, or a validation message; the stream stays usable.
#[cfg(feature = "fault-injection")]
#[test]
fn allocation_failures_during_async_reads_and_events() {
    use vkcompute::testing::{fail_allocation, fail_allocations_from, fault_injected};
    for sticky in [false, true] {
        let ctx = context_with(options(Path::Staging));
        let log = ctx.diagnostics().validation_log();
        let data = ctx.enqueue_create_buffer::<u32>(1000).unwrap();
        data.enqueue_fill(0).unwrap();
        ctx.synchronize().unwrap();
        for n in 1..40u64 {
            if sticky {
                fail_allocations_from(&ctx, n);
            } else {
                fail_allocation(&ctx, n);
            }
            let value = n as u32;
            let filled = data.enqueue_fill(value);
            let read = block_on(data.to_vec_async()).0;
            let event = ctx.enqueue_record_event().map(|e| block_on(e).0);
            let fired = fault_injected(&ctx);
            fail_allocation(&ctx, 0);
            match (&filled, &read) {
                (Ok(()), Ok(v)) => assert!(
                    v.iter().all(|&x| x == value),
                    "n {n} sticky {sticky}: Ok with wrong data ({} not {value})",
                    v[0]
                ),
                _ => assert!(
                    fired,
                    "n {n}: an error without a fault: {filled:?} {read:?}"
                ),
            }
            let _ = event;
            let _ = ctx.synchronize();
            // Usable afterwards.
            data.enqueue_fill(7).unwrap();
            assert!(
                block_on(data.to_vec_async())
                    .0
                    .unwrap()
                    .iter()
                    .all(|&x| x == 7),
                "n {n}"
            );
            if !fired {
                break;
            }
        }
        drop(data);
        let _ = ctx.synchronize();
        drop(ctx);
        assert_clean(&log, "the context");
    }
}

/// MemoryInfo counts the device memory this device holds: an exportable
/// buffer's own allocation (and a large buffer's) is device memory too,
/// and `free` (where it is vkcompute's own count) should drop by it.
#[test]
fn memory_info_counts_exportable_and_large_buffers() {
    let ctx = context_with(options(Path::Direct));
    let mib = 1usize << 20;
    let before = ctx.memory_info();
    let big = ctx.enqueue_create_buffer::<u8>(256 * mib).unwrap();
    big.enqueue_fill(1).unwrap();
    ctx.synchronize().unwrap();
    let after_big = ctx.memory_info();
    let x = ctx
        .enqueue_create_exportable_buffer::<u8>(256 * mib)
        .unwrap();
    x.enqueue_fill(1).unwrap();
    ctx.synchronize().unwrap();
    let after_export = ctx.memory_info();
    println!("{before:?}\n{after_big:?}\n{after_export:?}");
    assert!(
        after_big.allocated >= before.allocated + 256 * mib as u64,
        "a 256 MiB buffer: allocated {} -> {}",
        before.allocated,
        after_big.allocated
    );
    assert!(
        after_export.allocated >= after_big.allocated + 256 * mib as u64,
        "a 256 MiB exportable buffer is not counted: allocated {} -> {}",
        after_big.allocated,
        after_export.allocated
    );
}

/// Lost-wakeup hunt: 4 threads x 2 streams each, short work, 150 awaits
/// each; a future found ready after a park that no wake ended (the 1 s
/// timeout did) is a lost wakeup.
#[test]
fn no_lost_wakeups_under_many_short_awaits() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let lost = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for t in 0..4u32 {
            let streams = [ctx.new_stream().unwrap(), ctx.new_stream().unwrap()];
            let lost = &lost;
            s.spawn(move || {
                let bufs: Vec<_> = streams
                    .iter()
                    .map(|s| s.enqueue_create_buffer::<u32>(256).unwrap())
                    .collect();
                struct W(std::thread::Thread, std::sync::atomic::AtomicBool);
                impl std::task::Wake for W {
                    fn wake(self: Arc<Self>) {
                        self.1.store(true, Ordering::SeqCst);
                        self.0.unpark();
                    }
                }
                for k in 0..150u32 {
                    let i = (k % 2) as usize;
                    bufs[i].enqueue_fill(t * 1000 + k).unwrap();
                    let e = streams[i].enqueue_record_event().unwrap();
                    let w = Arc::new(W(std::thread::current(), false.into()));
                    let waker = Waker::from(w.clone());
                    let mut f = std::pin::pin!(e);
                    let mut parks = 0;
                    loop {
                        w.1.store(false, Ordering::SeqCst);
                        if let Poll::Ready(r) = f.as_mut().poll(&mut Context::from_waker(&waker)) {
                            r.unwrap();
                            break;
                        }
                        let t0 = Instant::now();
                        while !w.1.load(Ordering::SeqCst) && t0.elapsed() < Duration::from_secs(1) {
                            std::thread::park_timeout(Duration::from_secs(1));
                        }
                        if !w.1.load(Ordering::SeqCst) {
                            lost.fetch_add(1, Ordering::SeqCst);
                        }
                        parks += 1;
                        assert!(parks < 30, "never resolved");
                    }
                }
            });
        }
    });
    drop(ctx);
    assert_clean(&log, "the context");
    assert_eq!(lost.load(Ordering::SeqCst), 0, "lost wakeups");
}

/// A stream dropped on one thread while another awaits (or waits for) its
/// newest event: the event's stream is mid-drop, its batch maybe not yet
/// submitted. No hang, no validation message.
#[test]
fn awaiting_an_event_while_its_stream_is_dropped_on_another_thread() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let (tx, rx) = std::sync::mpsc::sync_channel::<(vkcompute::Event, bool)>(0);
    std::thread::scope(|s| {
        let ctx = &ctx;
        s.spawn(move || {
            for k in 0..200u32 {
                let stream = ctx.new_stream().unwrap();
                let b = stream.enqueue_create_buffer::<u32>(1 << 12).unwrap();
                b.enqueue_fill(k).unwrap();
                let e = stream.enqueue_record_event().unwrap();
                tx.send((e, k % 2 == 0)).unwrap();
                drop(b);
                drop(stream);
            }
        });
        s.spawn(move || {
            for (e, as_future) in rx {
                if as_future {
                    block_on(e).0.unwrap();
                } else {
                    e.wait().unwrap();
                }
            }
        });
    });
    drop(ctx);
    assert_clean(&log, "the context");
}

/// The threads named `vkcompute-waiter` alive in this process.
fn waiter_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|task| std::fs::read_to_string(task.ok()?.path().join("comm")).ok())
        .filter(|comm| comm.starts_with("vkcompute-wait"))
        .count()
}

/// A waker whose `wake` takes 200 ms: the waiter thread that calls it is
/// still alive for that long.
struct SlowWaker {
    woken: std::sync::atomic::AtomicBool,
}

impl std::task::Wake for SlowWaker {
    fn wake(self: Arc<Self>) {
        self.woken.store(true, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// Dropping a context joins the threads that wake its futures: none is
/// left holding the timeline, and through it the device, once the drop
/// returns. (One that was destroyed the device, and the instance with it,
/// on that thread while `main` returned, racing the validation layer's
/// exit handlers: the guide's async example crashed with SIGSEGV in about
/// 1 of 20 runs.) The waker keeps the thread busy while the context is
/// dropped, so a drop that did not join would return with it still alive.
#[test]
fn dropping_a_context_leaves_no_waiter_thread() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let data = ctx.enqueue_create_buffer::<u32>(N * 4).unwrap();
    for _ in 0..32 {
        data.enqueue_fill(1).unwrap();
    }
    let e = ctx.enqueue_record_event().unwrap();
    let slow = Arc::new(SlowWaker {
        woken: false.into(),
    });
    let waker = Waker::from(slow.clone());
    let mut f = Box::pin(e.clone());
    let mut cx = Context::from_waker(&waker);
    assert!(
        f.as_mut().poll(&mut cx).is_pending(),
        "the fills take longer"
    );
    e.wait().unwrap();
    let started = Instant::now();
    while !slow.woken.load(Ordering::SeqCst) && started.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(
        slow.woken.load(Ordering::SeqCst),
        "the waiter woke the future"
    );
    // The waiter thread is inside the waker's 200 ms now.
    assert_eq!(waiter_threads(), 1);
    drop((f, e, data, ctx));
    assert_eq!(waiter_threads(), 0, "the context's drop joined its waiter");
    assert_clean(&log, "waiter threads");
}
