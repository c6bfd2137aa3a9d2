//! The process may exit while threads wait on the device. When `main`
//! returns or `std::process::exit` is called, the C runtime runs the exit
//! handlers on the exiting thread while every other thread goes on, and
//! the validation layer's and the driver's handlers free their state: a
//! thread that is inside `vkWaitSemaphores` or `vkGetSemaphoreCounterValue`
//! then, or calls one after, touches freed memory. A waiter thread of a
//! pending future did so in 4-27% of exits under the layer on both
//! lavapipes (a core dump: the thread in lavapipe's
//! `vkGetSemaphoreCounterValue`, called through the layer, while the main
//! thread ran the exit handlers), and a thread blocked in `Event::wait` in
//! a few percent.
//!
//! So the calls a thread may sit in when the process exits (timeline
//! queries and waits, the device's idle wait) go through [`gate`], and a
//! handler of vkcompute's own ([`close_gate`]), registered with `atexit`
//! each time a device is made, closes the gate at exit and waits until no
//! thread is inside. `exit` runs handlers in the reverse order of their
//! registration, and by the time a device exists the layer and the driver
//! have registered theirs (the loader loads them for the instance, and
//! loads the layer again for an instance made after one was destroyed:
//! hence a registration per device, a few dozen bytes each), so the gate
//! closes before any of their state goes. Host waits are cut into slices
//! of at most [`WAIT_SLICE_NS`] (`Timeline::wait_submitted_for`), so the
//! handler waits that long at most for a waiting thread to come out
//! ([`EXIT_WAIT`] bounds it for a call that overruns). A thread that
//! comes to the closed gate never calls the driver again: it sleeps until
//! the process is gone, holding what it holds (a waiter thread may hold
//! the last reference to a device, which must not be destroyed then).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// The longest a host wait stays inside the driver in one call.
pub(crate) const WAIT_SLICE_NS: u64 = 20_000_000;
/// The longest the exit handler waits for the threads inside the gate.
const EXIT_WAIT: Duration = Duration::from_secs(2);

/// Set by the exit handler: no thread enters the driver through the gate
/// any more.
static CLOSED: AtomicBool = AtomicBool::new(false);
/// Threads inside a gated call.
static INSIDE: AtomicUsize = AtomicUsize::new(0);

/// Counts a thread inside the gate until it drops (also on unwinding).
struct Inside;

impl Drop for Inside {
    fn drop(&mut self) {
        INSIDE.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Runs `call` (a driver call that may last while the process exits)
/// unless the process is exiting; then never returns. The counter goes up
/// before the flag is read and the handler sets the flag before it reads
/// the counter (both sequentially consistent), so either the thread sees
/// the gate closed or the handler sees the thread inside and waits for it.
pub(crate) fn gate<R>(call: impl FnOnce() -> R) -> R {
    INSIDE.fetch_add(1, Ordering::SeqCst);
    let inside = Inside;
    if CLOSED.load(Ordering::SeqCst) {
        drop(inside);
        loop {
            std::thread::park();
        }
    }
    let result = call();
    drop(inside);
    result
}

/// The exit handler: closes the gate and waits (at most [`EXIT_WAIT`])
/// until no thread is inside it. Touches no thread-local state (the
/// exiting thread's is gone by now) and cannot panic.
extern "C" fn close_gate() {
    CLOSED.store(true, Ordering::SeqCst);
    let start = Instant::now();
    while INSIDE.load(Ordering::SeqCst) > 0 && start.elapsed() < EXIT_WAIT {
        std::thread::sleep(Duration::from_micros(200));
    }
}

extern "C" {
    /// The C runtime's exit-handler registration (C99; glibc, musl, the
    /// Windows CRT and macOS's libSystem all have it).
    fn atexit(handler: extern "C" fn()) -> std::ffi::c_int;
}

/// Registers the exit handler again after a device's submissions 1, 2,
/// 4, 8, ... (`count` counts them): the layer registers handlers for
/// tables it builds at first use (sync validation: six at the first
/// `vkCmdPipelineBarrier2`, one at the first `vkQueueSubmit`, seen with
/// gdb), which would otherwise run before vkcompute's. So the handler is
/// behind those of every command submitted before the last power of two,
/// at the cost of one registration per doubling.
pub(crate) fn after_submission(count: &AtomicU64) {
    if (count.fetch_add(1, Ordering::Relaxed) + 1).is_power_of_two() {
        register();
    }
}

/// Registers the exit handler once more: called after a device is made
/// (and after some of its submissions), so that it runs before the
/// handlers the layer and the driver registered so far. Where the runtime
/// refuses (out of memory), an exit may find a thread inside the driver,
/// as before.
pub(crate) fn register() {
    // SAFETY: `close_gate` is a plain function with the C ABI that takes
    // no argument, cannot unwind and stays valid for the whole process.
    let refused = unsafe { atexit(close_gate) } != 0;
    if refused {
        log::warn!("atexit refused vkcompute's exit handler");
    }
}
