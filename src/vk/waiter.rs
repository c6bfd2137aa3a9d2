//! What wakes futures waiting for a timeline: a thread per timeline with
//! futures waiting, started by the first registration and gone once none
//! is left. It sleeps in `vkWaitSemaphores` for the timeline's next value
//! (one semaphore, so no `WAIT_ANY`: Debian 12's validation layer 1.3.239
//! reports a false timeout on `WAIT_ANY` waits where one semaphore is not
//! reached), wakes the futures whose values were reached, and waits for
//! the next. A timeline's values complete in order, so waking at each
//! value is exact. No polling loop.
//!
//! The thread holds its timeline (so the semaphore lives through every
//! wait) and drops it when it leaves; that may drop the device, on the
//! thread, which nothing joins.

use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;

use super::Timeline;
use crate::error::{Error, Result};

/// The futures waiting for one timeline (a field of [`Timeline`]).
#[derive(Default)]
pub(crate) struct Waiters {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Values waited for, and by whom.
    entries: Vec<(u64, Waker)>,
    /// Whether the thread runs.
    running: bool,
    /// Why the thread's last wait failed (a lost device), for every later
    /// registration.
    failed: Option<Error>,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Wakes `waker` once `timeline` reaches `value`, which has been
    /// submitted. An error where no thread can wait: one could not be
    /// started, or a wait failed (the device is lost).
    pub(crate) fn register(timeline: &Arc<Timeline>, value: u64, waker: &Waker) -> Result<()> {
        let mut state = timeline.waiters.lock();
        if let Some(e) = &state.failed {
            return Err(Error::Deferred(Box::new(e.clone())));
        }
        if !state
            .entries
            .iter()
            .any(|(v, w)| *v == value && w.will_wake(waker))
        {
            state.entries.push((value, waker.clone()));
        }
        if !state.running {
            let runner = timeline.clone();
            std::thread::Builder::new()
                .name("vkcompute-waiter".into())
                .spawn(move || Self::run(runner))
                .map_err(|e| Error::Unsupported {
                    what: format!("waiting without blocking (no thread: {e})"),
                    device: timeline.device().name().to_string(),
                })?;
            state.running = true;
        }
        Ok(())
    }

    fn run(timeline: Arc<Timeline>) {
        loop {
            let (ready, next) = {
                let mut state = timeline.waiters.lock();
                let reached = match timeline.query() {
                    Ok(value) => value,
                    Err(e) => {
                        state.failed = Some(e);
                        state.running = false;
                        let all = std::mem::take(&mut state.entries);
                        drop(state);
                        all.into_iter().for_each(|(_, w)| w.wake());
                        return;
                    }
                };
                let (ready, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut state.entries)
                    .into_iter()
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
            ready.into_iter().for_each(|(_, w)| w.wake());
            let Some(next) = next else {
                return;
            };
            if let Err(e) = timeline.wait_submitted(next) {
                let all = {
                    let mut state = timeline.waiters.lock();
                    state.failed = Some(e);
                    state.running = false;
                    std::mem::take(&mut state.entries)
                };
                all.into_iter().for_each(|(_, w)| w.wake());
                return;
            }
        }
    }
}
