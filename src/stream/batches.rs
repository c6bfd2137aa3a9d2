//! The stream: commands recorded into batches, barriers between dependent
//! commands, submission signalling the timeline, and the reclaiming of
//! whatever a completed batch held.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::Arc;

use crate::batch_pool::DescriptorPools;
use crate::error::{Error, Result};
use crate::garbage::GarbageList;
use crate::hazard::Access;
use crate::recorder::{Command, Recorder};
use crate::staging::{StagingBlock, StagingPool, StagingSlice};
use crate::trace::StreamTrace;
use crate::vk::command::{self, Cmd, CommandPool};
use crate::vk::pipeline::DescriptorPool;
use crate::vk::{Device, MemoryUsage, Timeline};

/// A batch is submitted once it holds this many commands, times one more
/// than the batches in flight (up to `MAX_BATCH_GROWTH` times): while the
/// device is behind, submitting sooner gains nothing, and larger batches
/// let the host record far ahead (`scale_inflight`: 110,000 commands since
/// the last wait go in 7 batches, within `MAX_IN_FLIGHT`, so no enqueue
/// waits for the device) with a bounded number of command buffers.
pub(crate) const MAX_BATCH_COMMANDS: usize = 4096;
/// The most a batch's command limit grows.
const MAX_BATCH_GROWTH: usize = 8;
/// ... or once it has staged this many bytes.
const MAX_BATCH_STAGED: u64 = 256 << 20;
/// The host waits for old batches when more than this many are in flight,
/// before it records or submits more (after unlocking the stream: see
/// `Stream::over_limit`).
pub(crate) const MAX_IN_FLIGHT: usize = 16;

/// Counts of the Vulkan objects a context holds, for finding leaks, and of
/// the commands it has recorded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LiveObjects {
    /// Command buffers allocated (free, recording or in flight).
    pub command_buffers: usize,
    /// Staging buffers alive (pooled or in use).
    pub staging_buffers: usize,
    /// Descriptor pools alive.
    pub descriptor_pools: usize,
    /// Dropped buffers waiting for the stream to pass their last use.
    pub pending_frees: usize,
    /// Submitted batches not yet known to be complete.
    pub batches_in_flight: usize,
    /// Commands (copies, fills, dispatches...) recorded since the context
    /// was made: a counter, not a count of live objects.
    pub commands_recorded: u64,
}

/// The commands recorded since the last submission.
struct Batch {
    cmd: Cmd,
    value: u64,
    commands: usize,
    staged: u64,
    waits: Vec<(Arc<Timeline>, u64)>,
    staging: Vec<StagingBlock>,
    descriptor_pools: Vec<DescriptorPool>,
    /// Objects (pipelines, say) that must live until the batch completes.
    keep: Vec<Arc<dyn Any + Send + Sync>>,
    /// Host work to run once the batch completes (copies out of readback
    /// staging into user memory).
    completions: Vec<Completion>,
    /// When it was submitted, in trace microseconds (traced streams only).
    submitted_us: Option<f64>,
    /// The labels of the commands timed on the device (traced streams).
    timed: Vec<String>,
}

/// Host work run when a batch completes, with the stream at hand.
pub(crate) type Completion = Box<dyn FnOnce(&mut Stream) + Send>;

/// What a stream records into and everything it must give back later.
pub(crate) struct Stream {
    device: Arc<Device>,
    timeline: Arc<Timeline>,
    queue: usize,
    pool: CommandPool,
    batch: Option<Batch>,
    in_flight: VecDeque<Batch>,
    /// Shared with the device's other streams.
    garbage: Arc<GarbageList>,
    /// Records the open batch's commands.
    recorder: Recorder,
    pub(crate) upload: StagingPool,
    pub(crate) readback: StagingPool,
    pub(crate) descriptors: DescriptorPools,
    /// An error from a submission whose caller could not be told (one a
    /// `Drop` made), for the next `flush` or `synchronize`.
    failed: Option<Error>,
    /// The first failed kernel assertion (or failed read of a printf
    /// record buffer) of completed work, for the next host wait.
    asserted: Option<Error>,
    /// Commands recorded since the stream began.
    recorded: u64,
    /// The stream's tracks, where the context traces.
    pub(crate) trace: Option<StreamTrace>,
}

impl Stream {
    /// A stream on `device` that signals `timeline`, with a command pool
    /// of its own on the device's compute family.
    pub(crate) fn new(
        device: Arc<Device>,
        timeline: Arc<Timeline>,
        garbage: Arc<GarbageList>,
        trace: Option<StreamTrace>,
    ) -> Result<Self> {
        let pool = CommandPool::new(&device, false)?;
        let queue = device.assign_queue();
        Ok(Stream {
            device,
            timeline,
            queue,
            pool,
            batch: None,
            in_flight: VecDeque::new(),
            garbage,
            recorder: Recorder::default(),
            upload: StagingPool::new(MemoryUsage::Upload),
            readback: StagingPool::new(MemoryUsage::Readback),
            descriptors: DescriptorPools::descriptors(),
            failed: None,
            asserted: None,
            recorded: 0,
            trace,
        })
    }

    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The index of the device queue the stream submits to.
    pub(crate) fn queue_index(&self) -> usize {
        self.queue
    }

    /// The timeline value the open batch (the next command) will signal.
    pub(crate) fn pending_value(&self) -> u64 {
        self.timeline.submitted() + 1
    }

    /// Opens a batch for a command if none is open, and makes the batch
    /// wait (on the device) for `waits` of other streams. The command is
    /// then given to [`record`](Self::record); what it keeps alive or runs
    /// on completion (`keep_alive`, `on_complete`) goes with this batch.
    pub(crate) fn begin_command(&mut self, waits: Vec<(Arc<Timeline>, u64)>) -> Result<()> {
        if self.batch.is_none() {
            self.begin_batch()?;
        }
        if let Some(t) = &self.trace {
            for (_, value) in &waits {
                t.tracer
                    .instant(t.host, "wait", &format!(r#""for_value":{value}"#));
            }
        }
        #[allow(clippy::expect_used, reason = "the batch was opened just above")]
        let batch = self.batch.as_mut().expect("opened above");
        for (timeline, value) in waits {
            match batch
                .waits
                .iter_mut()
                .find(|(t, _)| Arc::ptr_eq(t, &timeline))
            {
                Some((_, v)) => *v = (*v).max(value),
                None => batch.waits.push((timeline, value)),
            }
        }
        Ok(())
    }

    /// Records `command`, which makes `accesses`, into the batch that
    /// [`begin_command`](Self::begin_command) opened, after a barrier where
    /// it depends on an earlier command of the batch.
    pub(crate) fn record(&mut self, accesses: &[Access], command: Command<'_>) -> Result<()> {
        let barrier =
            self.recorder
                .record(&self.device, &mut self.descriptors, accesses, command)?;
        if barrier {
            self.trace_barrier();
        }
        if let Some(batch) = &mut self.batch {
            batch.commands += 1;
        }
        self.recorded += 1;
        Ok(())
    }

    /// Records a barrier before what comes next where it depends on a
    /// command since the last barrier by `accesses` (a command of several
    /// parts, ordered as a whole).
    pub(crate) fn order(&mut self, accesses: &[Access]) {
        if self.recorder.order(&self.device, accesses) {
            self.trace_barrier();
        }
    }

    /// Records a barrier after which every later command sees what the
    /// earlier ones wrote.
    pub(crate) fn barrier(&mut self) {
        self.recorder.barrier(&self.device);
        self.trace_barrier();
    }

    /// Counts `accesses` as made since the last barrier (by a command of
    /// several parts, for the commands after it).
    pub(crate) fn note(&mut self, accesses: &[Access]) {
        self.recorder.note(accesses);
    }

    fn trace_barrier(&self) {
        if let Some(t) = &self.trace {
            t.tracer.instant(t.host, "barrier", "");
        }
    }

    /// Where the stream traces and the batch times its next command on the
    /// device: records the timestamp before it (after the copy being
    /// merged, which is not part of it), and returns its index for
    /// [`end_timed`](Self::end_timed).
    pub(crate) fn begin_timed(&mut self) -> Option<(u64, usize)> {
        let (Some(t), Some(batch)) = (&self.trace, &self.batch) else {
            return None;
        };
        let index = batch.timed.len();
        if !t.times(index) {
            return None;
        }
        self.recorder.emit_copy(&self.device);
        t.begin_command(batch.cmd, batch.value, index);
        Some((batch.value, index))
    }

    /// Records the timestamp after the command that
    /// [`begin_timed`](Self::begin_timed) started (its copy recorded
    /// first: a traced stream merges no copies across commands), labelled
    /// `label` in the trace.
    pub(crate) fn end_timed(
        &mut self,
        timed: Option<(u64, usize)>,
        label: impl FnOnce() -> String,
    ) {
        let (Some((value, index)), Some(t), Some(batch)) = (timed, &self.trace, &mut self.batch)
        else {
            return;
        };
        // Not where the command moved on to a new batch (`restart_batch`).
        if batch.value != value || batch.timed.len() != index {
            return;
        }
        self.recorder.emit_copy(&self.device);
        t.end_command(batch.cmd, batch.value, index);
        batch.timed.push(label());
    }

    /// A command that only waits (on the device) for `waits` of other
    /// streams: every later command of the stream comes after them.
    pub(crate) fn wait_command(&mut self, waits: Vec<(Arc<Timeline>, u64)>) -> Result<()> {
        self.begin_command(waits)?;
        self.record(&[], Command::Mark)
    }

    /// Room in a staging buffer for an upload recorded into the open batch.
    pub(crate) fn stage_upload(&mut self, size: u64) -> Result<StagingSlice> {
        let slice = self.upload.alloc(&self.device, size)?;
        if let Some(batch) = &mut self.batch {
            batch.staged += size;
        }
        Ok(slice)
    }

    /// Keeps `object` alive until the open batch completes.
    pub(crate) fn keep_alive(&mut self, object: Arc<dyn Any + Send + Sync>) {
        if let Some(batch) = &mut self.batch {
            batch.keep.push(object);
        }
    }

    /// Runs `completion` once the batch that signals `value` has completed
    /// (when the stream reclaims it: on a later flush or wait), or now if it
    /// has been reclaimed already.
    pub(crate) fn on_complete(&mut self, value: u64, completion: Completion) {
        let pending = self
            .batch
            .iter_mut()
            .chain(self.in_flight.iter_mut())
            .find(|b| b.value == value);
        match pending {
            Some(batch) => batch.completions.push(completion),
            // Retired already: the work is done.
            None => completion(self),
        }
    }

    /// Submits the open batch if it has grown large. Called after each command.
    pub(crate) fn maybe_flush(&mut self) -> Result<()> {
        // A traced stream times every command in slots for batches of at
        // most `MAX_BATCH_COMMANDS`: its batches do not grow.
        let growth = match &self.trace {
            Some(t) if t.times(0) => 1,
            _ => (1 + self.in_flight.len()).min(MAX_BATCH_GROWTH),
        };
        let commands = MAX_BATCH_COMMANDS * growth;
        let large = self
            .batch
            .as_ref()
            .is_some_and(|b| b.commands >= commands || b.staged >= MAX_BATCH_STAGED);
        if large {
            self.flush()?;
        }
        Ok(())
    }

    fn begin_batch(&mut self) -> Result<()> {
        let cmd = self.pool.begin()?;
        let value = self.pending_value();
        if let Some(t) = &self.trace {
            t.begin(cmd, value);
        }
        // Order this batch after everything submitted before it on the queue.
        self.recorder.begin(cmd);
        self.recorder.barrier(&self.device);
        self.batch = Some(Batch {
            cmd,
            value,
            commands: 0,
            staged: 0,
            waits: Vec::new(),
            staging: Vec::new(),
            descriptor_pools: Vec::new(),
            keep: Vec::new(),
            completions: Vec::new(),
            submitted_us: None,
            timed: Vec::new(),
        });
        Ok(())
    }

    /// Submits the open batch, waits (with the stream locked) until every
    /// submitted batch has completed, gives back what they held, and opens
    /// a new batch: for a command of several parts that ran out of memory
    /// part-way, before it tries the rest again. Waits of other streams
    /// the old batch had are behind it, as it has completed.
    pub(crate) fn restart_batch(&mut self) -> Result<()> {
        self.flush()?;
        self.timeline.wait_submitted(self.timeline.submitted())?;
        self.reclaim()?;
        self.begin_batch()
    }

    /// Submits the open batch, if any, signalling its timeline value.
    pub(crate) fn flush(&mut self) -> Result<()> {
        let Some(mut batch) = self.batch.take() else {
            // Nothing to submit; still reclaim, as every flush does.
            return self.reclaim();
        };
        self.recorder.finish(&self.device);
        batch.staging = self.upload.take_for_batch();
        batch.descriptor_pools = self.descriptors.take_for_batch();
        // Make the batch's writes available to the host, which reads them
        // after waiting on the timeline.
        batch.cmd.host_barrier(&self.device);
        if let Some(t) = &self.trace {
            t.end(batch.cmd, batch.value);
            batch.submitted_us = Some(t.tracer.now_us());
        }
        let submitted = self.submit(&batch);
        if submitted.is_err() {
            // The batch's work will not run. Its value is signalled from the
            // host (after the earlier values, as the spec requires), so that
            // nothing waits for it forever; the error goes to the caller.
            let _ = self.timeline.wait_submitted(batch.value - 1);
            self.timeline.signal_from_host(batch.value);
            batch.submitted_us = None; // its timestamps are never written
        }
        self.timeline.set_submitted(batch.value);
        self.in_flight.push_back(batch);
        submitted?;
        self.reclaim()
    }

    fn submit(&self, batch: &Batch) -> Result<()> {
        self.pool.end(batch.cmd)?;
        command::submit(
            &self.device,
            self.queue,
            batch.cmd,
            &batch.waits,
            &self.timeline,
            batch.value,
        )
    }

    /// Gives back everything held by batches that have completed, and frees
    /// garbage whose last use has passed.
    pub(crate) fn reclaim(&mut self) -> Result<()> {
        if !self.in_flight.is_empty() {
            let completed = self.timeline.query()?;
            while self.in_flight.front().is_some_and(|b| b.value <= completed) {
                #[allow(clippy::expect_used, reason = "the loop condition saw a front batch")]
                let batch = self.in_flight.pop_front().expect("checked above");
                self.retire(batch);
            }
        }
        self.garbage.reclaim();
        Ok(())
    }

    fn retire(&mut self, mut batch: Batch) {
        for completion in std::mem::take(&mut batch.completions) {
            completion(self);
        }
        if let Some(t) = &self.trace {
            t.retire(
                batch.value,
                batch.commands,
                batch.waits.len(),
                batch.submitted_us,
                &batch.timed,
            );
        }
        self.pool.recycle(batch.cmd);
        self.upload.recycle(&self.device, batch.staging);
        self.descriptors
            .recycle(&self.device, batch.descriptor_pools);
    }

    /// Destroys pooled objects no batch uses: free command buffers, staging
    /// blocks and descriptor pools. The open batch (if any) keeps its own.
    pub(crate) fn trim(&mut self) -> Result<()> {
        self.reclaim()?;
        self.pool.release_free();
        self.upload.release_free(&self.device);
        self.readback.release_free(&self.device);
        self.descriptors.release_free(&self.device);
        Ok(())
    }

    /// Submits the open batch, if there is one (dropped buffers wait for it).
    pub(crate) fn flush_if_open(&mut self) -> Result<()> {
        if self.batch.is_some() {
            self.flush()?;
        }
        Ok(())
    }

    /// Frees garbage whose work completed. Called before buffers are
    /// created, so their memory can be reused at once.
    pub(crate) fn reclaim_garbage(&mut self) -> Result<()> {
        self.garbage.reclaim();
        Ok(())
    }

    /// Where more than `MAX_IN_FLIGHT` batches are in flight (after
    /// reclaiming), the value whose completion leaves `MAX_IN_FLIGHT`: the
    /// host waits for it, with the stream unlocked, before it records or
    /// submits more (see `StreamHandle::lock_with_room`).
    pub(crate) fn over_limit(&mut self) -> Result<Option<u64>> {
        if self.in_flight.len() <= MAX_IN_FLIGHT {
            return Ok(None);
        }
        self.reclaim()?;
        let excess = self.in_flight.len().saturating_sub(MAX_IN_FLIGHT);
        Ok(excess.checked_sub(1).map(|last| self.in_flight[last].value))
    }

    /// Remembers the error of a submission that a `Drop` made (so no caller
    /// could be told): the stream's next public `flush` or `synchronize`
    /// returns it. Recording goes on: the stream itself is still usable.
    pub(crate) fn set_failed(&mut self, error: Error) {
        if self.failed.is_none() {
            self.failed = Some(Error::Deferred(Box::new(error)));
        }
    }

    /// Takes the error kept by `set_failed`, if any.
    pub(crate) fn take_failed(&mut self) -> Option<Error> {
        self.failed.take()
    }

    /// Keeps `error` (a kernel's failed assertion) for the next host wait,
    /// where none is kept yet: the first one is returned, once.
    pub(crate) fn keep_assert(&mut self, error: Error) {
        self.asserted.get_or_insert(error);
    }

    /// The kept failed assertion, once.
    pub(crate) fn take_assert(&mut self) -> Option<Error> {
        self.asserted.take()
    }

    /// Counts of objects alive: command buffers, staging blocks, descriptor
    /// pools, buffers waiting to be freed, batches in flight.
    pub(crate) fn live_objects(&self) -> LiveObjects {
        LiveObjects {
            command_buffers: self.pool.live(),
            staging_buffers: self.upload.live_blocks() + self.readback.live_blocks(),
            descriptor_pools: self.descriptors.live(),
            pending_frees: self.garbage.len(),
            batches_in_flight: self.in_flight.len(),
            commands_recorded: self.recorded,
        }
    }

    /// Waits for every submitted batch and releases all that the stream holds.
    fn shutdown(&mut self) {
        let last = self.timeline.submitted();
        if self.timeline.wait_submitted(last).is_err() {
            // The device is lost or failing: nothing runs any more, but be sure.
            let _ = self.device.wait_idle();
        }
        if let Some(batch) = self.batch.take() {
            // Recorded but never submitted (the final flush failed): its work
            // will not run. Signal its value so that no waiter hangs; the
            // command buffer is freed with the pool.
            self.timeline.signal_from_host(batch.value);
            self.timeline.set_submitted(batch.value);
        }
        while let Some(batch) = self.in_flight.pop_front() {
            self.retire(batch);
        }
        // Garbage this stream's work held is free now; what other streams
        // still use stays in the shared list for them (or its drop).
        self.garbage.reclaim();
        self.upload.destroy(&self.device);
        self.readback.destroy(&self.device);
        self.descriptors.destroy(&self.device);
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // Then the command pool goes: none of its buffers is pending.
        self.shutdown();
    }
}
