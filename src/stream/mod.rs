//! The submission layer's top: one stream behind its lock with its
//! timeline, the device's garbage and the trace, shared by a
//! `DeviceContext`, its clones and the buffers it owns. It decides when to
//! flush, wait and reclaim; nothing below it calls back up. The state
//! behind the lock, the batches and their submission, is [`batches`].

pub(crate) mod batches;
pub(crate) mod printf;

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use std::time::Duration;

use crate::error::{Error, Result};
use crate::garbage::{Garbage, GarbageList, FLUSH_GARBAGE_BYTES};
use crate::stream::batches::{Stream, MAX_BATCH_COMMANDS, MAX_IN_FLIGHT};
use crate::trace::{StreamTrace, Tracer};
use crate::vk::{Device, Timeline, Waiters};

/// What a `DeviceContext` handle shares with its clones and its buffers:
/// one stream and what it submits with.
pub(crate) struct StreamHandle {
    pub(crate) device: Arc<Device>,
    pub(crate) timeline: Arc<Timeline>,
    stream: Mutex<Stream>,
    pub(crate) force_staging: bool,
    /// The device's garbage, shared by all its streams.
    pub(crate) garbage: Arc<GarbageList>,
    /// The trace the device's streams write, where one was asked for.
    pub(crate) tracer: Option<Arc<Tracer>>,
    /// This stream handle, for the [`Point`]s it hands out.
    this: Weak<StreamHandle>,
    /// The user's label for the stream (`DeviceContext::with_label`).
    pub(crate) label: Mutex<Option<Arc<str>>>,
    /// Where kernels' printf lines go.
    pub(crate) printf: Arc<crate::stream::printf::Output>,
}

/// A stream seen from elsewhere (a buffer's use state): its timeline, and
/// the way to submit its work.
#[derive(Clone)]
pub(crate) struct StreamRef {
    pub(crate) timeline: Arc<Timeline>,
    /// The stream that signals the timeline (gone once it was dropped,
    /// which submitted everything it had).
    stream: Weak<StreamHandle>,
}

impl StreamRef {
    /// `value` on the stream's timeline.
    pub(crate) fn at(&self, value: u64) -> Point {
        Point {
            stream: self.clone(),
            value,
        }
    }
}

/// A value on one stream's timeline, with the way to submit it: what a
/// buffer's last use, or a command on another stream, waits for.
pub(crate) struct Point {
    pub(crate) stream: StreamRef,
    pub(crate) value: u64,
}

impl Point {
    /// Makes sure the value has been submitted, flushing its stream if it
    /// has not. Must not be called with that stream's lock held. It never
    /// waits on the host (its caller may hold buffers' operation locks): the
    /// flush submits the one open batch even where the stream has more
    /// than its limit in flight, and leaves the wait for room to that
    /// stream's next command.
    pub(crate) fn ensure_submitted(&self) -> Result<()> {
        if self.stream.timeline.submitted() >= self.value {
            return Ok(());
        }
        match self.stream.stream.upgrade() {
            Some(stream) => stream.lock().flush(),
            // The stream is gone, and it submitted everything as it went.
            None => Ok(()),
        }
    }

    /// Waits on the host until the value is reached, submitting it first if
    /// needed, then lets its stream reclaim what completed. Must not be
    /// called with that stream's lock held.
    pub(crate) fn wait(&self) -> Result<()> {
        self.wait_at_most("vkWaitSemaphores", None)
    }

    /// Waits as [`wait`](Self::wait) does, but at most `timeout` where one
    /// is given: [`Error::Timeout`] naming `op` then, with nothing changed.
    pub(crate) fn wait_at_most(&self, op: &'static str, timeout: Option<Duration>) -> Result<()> {
        self.stream.timeline.device().check_alive(op)?;
        self.ensure_submitted()?;
        let nanos = timeout.map_or(u64::MAX, |t| {
            u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)
        });
        if !self.stream.timeline.wait_submitted_for(self.value, nanos)? {
            return Err(Error::Timeout {
                op,
                waited: timeout.unwrap_or_default(),
            });
        }
        self.reached()
    }

    /// What a host wait returns once this point is reached: what
    /// completed batches held is given back (their completions run: printf
    /// lines are emitted), and a kernel's failed assertion that the
    /// completed work left is returned, once.
    pub(crate) fn reached(&self) -> Result<()> {
        match self.stream.stream.upgrade() {
            Some(stream) => stream.reclaim_and_assertions(),
            None => Ok(()),
        }
    }
}

impl StreamHandle {
    /// A new stream on `device`, with its own timeline and command pool.
    pub(crate) fn new(
        device: Arc<Device>,
        force_staging: bool,
        garbage: Arc<GarbageList>,
        tracer: Option<Arc<Tracer>>,
        printf: Arc<crate::stream::printf::Output>,
    ) -> Result<Arc<Self>> {
        let trace = match &tracer {
            Some(t) => Some(StreamTrace::new(
                &device,
                t.clone(),
                MAX_IN_FLIGHT,
                MAX_BATCH_COMMANDS,
            )?),
            None => None,
        };
        // Dropped streams' semaphores stay bounded without `trim`.
        device.bound_retired_semaphores()?;
        let semaphore = Timeline::create_semaphore(&device)?;
        // Owned from here: dropped on the error path below, it retires its
        // semaphore.
        let timeline = Arc::new(Timeline::new(device.clone(), semaphore));
        let stream = Stream::new(device.clone(), timeline.clone(), garbage.clone(), trace)?;
        // Counted down in `drop`.
        device.streams.fetch_add(1, Ordering::Relaxed);
        Ok(Arc::new_cyclic(|this| StreamHandle {
            stream: Mutex::new(stream),
            garbage,
            tracer,
            device,
            timeline,
            force_staging,
            this: this.clone(),
            label: Mutex::new(None),
            printf,
        }))
    }

    /// The stream, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Stream> {
        self.stream.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The stream, locked, with at most `MAX_IN_FLIGHT` batches in flight,
    /// so that the one flush its holder may make leaves at most one more.
    /// Where more are in flight, it first waits for enough of them with the
    /// stream unlocked, so that however many threads share the stream the
    /// bound holds (the trace's timestamp slots assume it).
    pub(crate) fn lock_with_room(&self) -> Result<MutexGuard<'_, Stream>> {
        loop {
            match self.lock_if_room()? {
                Ok(stream) => return Ok(stream),
                Err(value) => self.timeline.wait_submitted(value)?,
            }
        }
    }

    /// The stream, locked, where it has room for one more batch (see
    /// [`lock_with_room`](Self::lock_with_room)); else, unlocked, the
    /// timeline value to wait for before trying again. A caller that holds
    /// other locks lets them go before it waits.
    pub(crate) fn lock_if_room(&self) -> Result<std::result::Result<MutexGuard<'_, Stream>, u64>> {
        let mut stream = self.lock();
        Ok(match stream.over_limit()? {
            None => Ok(stream),
            Some(value) => Err(value),
        })
    }

    /// This stream, seen from elsewhere.
    pub(crate) fn stream_ref(&self) -> StreamRef {
        StreamRef {
            timeline: self.timeline.clone(),
            stream: self.this.clone(),
        }
    }

    /// `value` on this stream's timeline.
    pub(crate) fn point(&self, value: u64) -> Point {
        self.stream_ref().at(value)
    }

    /// Submits the recorded work.
    pub(crate) fn flush(&self) -> Result<()> {
        self.lock_with_room()?.flush()
    }

    /// Gives back what completed batches held, then returns a kernel's
    /// failed assertion that the completed work left (once): what every
    /// host wait returns.
    pub(crate) fn reclaim_and_assertions(&self) -> Result<()> {
        let mut stream = self.lock();
        stream.reclaim()?;
        stream.take_assert().map_or(Ok(()), Err)
    }

    /// Submits the recorded work and waits until all of it is done, even
    /// where the submission (or one before it) failed: whatever was
    /// submitted has completed when this returns. Returns the first error:
    /// this submission's, the wait's, or one kept from a submission that a
    /// `Drop` made.
    pub(crate) fn synchronize(&self) -> Result<()> {
        self.synchronize_at_most("DeviceContext::synchronize", None)
    }

    /// [`synchronize`](Self::synchronize), waiting at most `timeout` where
    /// one is given ([`Error::Timeout`] naming `op` then).
    pub(crate) fn synchronize_at_most(
        &self,
        op: &'static str,
        timeout: Option<Duration>,
    ) -> Result<()> {
        self.device.check_alive(op)?;
        let (flushed, value) = {
            let mut stream = self.lock();
            (stream.flush(), self.timeline.submitted())
        };
        let waited = self.point(value).wait_at_most(op, timeout);
        if let Err(e @ Error::Timeout { .. }) = waited {
            // Nothing is done yet: an earlier failure stays for the wait
            // that sees the work end.
            return flushed.and(Err(e));
        }
        let (kept, asserted) = {
            let mut stream = self.lock();
            (stream.take_failed(), stream.take_assert())
        };
        let kept = kept.or(asserted);
        flushed.and(waited).and(kept.map_or(Ok(()), Err))
    }

    /// Makes the work recorded on this stream from now on wait (on the
    /// device) for everything recorded on `other`, a stream of the same
    /// device, so far.
    pub(crate) fn wait_for(&self, other: &StreamHandle) -> Result<()> {
        if std::ptr::eq(self, other) {
            return Ok(()); // a stream is always ordered after itself
        }
        other.flush()?;
        let value = other.timeline.submitted();
        if value == 0 || other.timeline.is_complete(value) {
            return Ok(());
        }
        self.lock()
            .wait_command(vec![(other.timeline.clone(), value)])
    }

    /// Frees `garbage` once its last uses complete. Called from `Drop`: an
    /// error (of a submission it triggered, whose work then did not run) is
    /// kept for the stream's next `flush` or `synchronize`.
    ///
    /// It takes no stream lock to keep the garbage: a buffer's last handle
    /// may go while a stream retires a batch (under its lock) that held
    /// it. Only where much memory waits does it try to submit the open
    /// batch, if the stream is free at that moment.
    pub(crate) fn defer_free(&self, garbage: Garbage) {
        let Some(waiting) = self.garbage.keep(garbage) else {
            return;
        };
        if waiting >= FLUSH_GARBAGE_BYTES {
            if let Ok(mut stream) = self.stream.try_lock() {
                if let Err(e) = stream.flush_if_open() {
                    stream.set_failed(e);
                }
            }
        }
    }
}

impl Drop for StreamHandle {
    fn drop(&mut self) {
        // Dropping a context synchronizes it: submit what was recorded; the
        // stream's own drop then waits for it and frees what it held.
        let mut stream = self.lock();
        if let Err(e) = stream.flush() {
            log::error!("a context's final submission failed: {e}");
        }
        drop(stream);
        // The threads that wake futures of this stream's values end once
        // the work just submitted is done: none of them is left holding the
        // timeline (and through it the device) after the context is gone.
        Waiters::join(&self.timeline);
        self.device.streams.fetch_sub(1, Ordering::Relaxed);
    }
}
