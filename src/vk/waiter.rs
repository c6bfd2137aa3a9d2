//! What wakes futures waiting for a timeline: a thread per timeline with
//! futures waiting, started by the first registration and gone once none
//! is left. It sleeps in `vkWaitSemaphores` for the timeline's next value
//! (one semaphore, so no `WAIT_ANY`: Debian 12's validation layer 1.3.239
//! reports a false timeout on `WAIT_ANY` waits where one semaphore is not
//! reached), wakes the futures whose values were reached, and waits for
//! the next. A timeline's values complete in order, so waking at each
//! value is exact. No polling loop: each wait ends when the value is
//! reached, or after [`LOOK_AGAIN_NS`] to see whether the futures it waits
//! for are still there (a dropped future's entry goes then, and the thread
//! with the last one, so that no thread stays inside the driver for a
//! future nobody awaits).
//!
//! Each future has one slot, whose waker a new poll replaces (so repolling
//! with new wakers does not grow the list). A waker that panics is caught:
//! it cannot stop the thread. The thread holds its timeline (so the
//! semaphore lives through every wait) and drops it when it leaves. The
//! stream that signals the timeline joins its threads when it is dropped
//! ([`Waiters::join`]), so that the device (which the timeline holds) is
//! not destroyed on one of them while the process exits: a device, and
//! with it the instance, destroyed on a thread while `main` returns races
//! the validation layer's and the driver's exit handlers. A thread whose
//! futures are still pending when the process exits (the context leaked,
//! kept in a static, or `std::process::exit` called) stops at the exit
//! gate (`exit.rs`) before its next call into the driver, and is never
//! inside one while those handlers run.

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::thread::JoinHandle;

use super::Timeline;
use crate::error::{Error, Result};

/// How long one wait lasts at most before the thread looks whether the
/// futures it waits for were dropped.
pub(crate) const LOOK_AGAIN_NS: u64 = 20_000_000;

/// One future's place in a timeline's list: the waker of its last poll.
#[derive(Default)]
pub(crate) struct WakerSlot {
    waker: Mutex<Option<Waker>>,
    /// Whether the slot is in a timeline's list.
    listed: AtomicBool,
    /// Set when the future is dropped.
    dropped: AtomicBool,
}

impl WakerSlot {
    fn waker(&self) -> MutexGuard<'_, Option<Waker>> {
        self.waker.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The future is gone: its entry goes at the thread's next look.
    pub(crate) fn drop_future(&self) {
        self.dropped.store(true, Ordering::Release);
        self.waker().take();
    }

    fn wake(&self) {
        let waker = self.waker().take();
        if let Some(waker) = waker {
            // A waker that panics must not stop the thread (and with it
            // every other future of the stream).
            let _ = catch_unwind(AssertUnwindSafe(|| waker.wake()));
        }
    }
}

/// The futures waiting for one timeline (a field of [`Timeline`]).
#[derive(Default)]
pub(crate) struct Waiters {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Values waited for, and by whom.
    entries: Vec<(u64, Arc<WakerSlot>)>,
    /// Whether the thread runs.
    running: bool,
    /// Why the thread's last wait failed (a lost device), for every later
    /// registration.
    failed: Option<Error>,
    /// The threads started and not yet joined (one running at most; those
    /// before it finishing or finished).
    threads: Vec<JoinHandle<()>>,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes `waker` (replacing the slot's waker of an earlier poll) once
    /// `timeline` reaches `value`, which has been submitted. An error where
    /// no thread can wait: one could not be started, or a wait failed (the
    /// device is lost).
    pub(crate) fn register(
        timeline: &Arc<Timeline>,
        value: u64,
        slot: &Arc<WakerSlot>,
        waker: &Waker,
    ) -> Result<()> {
        {
            let mut held = slot.waker();
            if !held.as_ref().is_some_and(|w| w.will_wake(waker)) {
                *held = Some(waker.clone());
            }
        }
        let mut state = timeline.waiters.lock();
        if let Some(e) = &state.failed {
            return Err(Error::Deferred(Box::new(e.clone())));
        }
        if !slot.listed.swap(true, Ordering::AcqRel) {
            state.entries.push((value, slot.clone()));
        }
        if !state.running {
            let runner = timeline.clone();
            let thread = std::thread::Builder::new()
                .name("vkcompute-waiter".into())
                .spawn(move || Self::run(runner))
                .map_err(|e| Error::Unsupported {
                    what: format!("waiting without blocking (no thread: {e})"),
                    device: timeline.device().name().to_string(),
                })?;
            state.threads.retain(|t| !t.is_finished());
            state.threads.push(thread);
            state.running = true;
        }
        Ok(())
    }

    /// Waits until every thread this timeline started has ended (each ends
    /// once the values it waits for are reached, or their futures dropped):
    /// called by the stream that signals the timeline, when it is dropped,
    /// after submitting all its work. Not from a waiter thread itself (a
    /// waker that drops a context there): that one is left to end alone.
    pub(crate) fn join(timeline: &Timeline) {
        let threads = std::mem::take(&mut timeline.waiters.lock().threads);
        let me = std::thread::current().id();
        for thread in threads {
            if thread.thread().id() != me {
                // A waiter thread does not panic (a waker's panic is caught).
                let _ = thread.join();
            }
        }
    }

    /// Ends the thread's run: every entry woken (after a failure) or none
    /// left.
    fn leave(timeline: &Timeline, failed: Option<Error>) {
        let all = {
            let mut state = timeline.waiters.lock();
            if failed.is_some() {
                state.failed = failed;
            }
            state.running = false;
            std::mem::take(&mut state.entries)
        };
        for (_, slot) in all {
            slot.wake();
        }
    }

    fn run(timeline: Arc<Timeline>) {
        loop {
            let (ready, next) = {
                let mut state = timeline.waiters.lock();
                let reached = match timeline.query() {
                    Ok(value) => value,
                    Err(e) => {
                        drop(state);
                        return Self::leave(&timeline, Some(e));
                    }
                };
                let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut state.entries)
                    .into_iter()
                    .filter(|(_, slot)| !slot.dropped.load(Ordering::Acquire))
                    .partition(|(v, _)| *v <= reached);
                state.entries = waiting;
                if state.entries.is_empty() {
                    // Decided under the lock a registration takes: the
                    // next one starts a thread again.
                    state.running = false;
                }
                // Every value left is above `reached` and submitted, so
                // `reached + 1` is too.
                (ready, (!state.entries.is_empty()).then_some(reached + 1))
            };
            for (_, slot) in ready {
                slot.wake();
            }
            let Some(next) = next else {
                return;
            };
            if let Err(e) = timeline.wait_submitted_for(next, LOOK_AGAIN_NS) {
                return Self::leave(&timeline, Some(e));
            }
        }
    }
}
