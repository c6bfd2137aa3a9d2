//! The stream: commands recorded into batches, barriers between dependent
//! commands, submission signalling the timeline, and the reclaiming of
//! whatever a completed batch held.

use std::any::Any;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;

use crate::error::{Error, Result, VkResultExt};
use crate::hazard::{Access, HazardTracker};
use crate::memory::RawBuffer;
use crate::pipeline::{Bound, DescriptorPools};
use crate::staging::{StagingBlock, StagingPool, StagingSlice};
use crate::timeline::Timeline;
use crate::trace::Tracer;
use crate::vk::{Device, MemoryUsage, READS_AND_WRITES, STAGES, WRITES};

/// A batch is submitted once it holds this many commands.
const MAX_BATCH_COMMANDS: usize = 4096;
/// ... or once it has staged this many bytes.
const MAX_BATCH_STAGED: u64 = 256 << 20;
/// ... or once buffers of this many bytes, dropped, wait for its work.
pub(crate) const FLUSH_GARBAGE_BYTES: u64 = 64 << 20;
/// The host waits for the oldest batch when more than this many are in flight.
const MAX_IN_FLIGHT: usize = 16;

/// Memory that is freed once every listed timeline value has completed.
pub(crate) struct Garbage {
    pub(crate) raw: RawBuffer,
    pub(crate) pending: Vec<(Arc<Timeline>, u64)>,
}

impl Garbage {
    fn is_free(&self) -> bool {
        self.pending.iter().all(|(t, v)| t.is_complete(*v))
    }
}

/// The garbage of every stream of one device, in one list: memory used on
/// several streams is freed by whichever of them sees its last use pass,
/// not only by the stream that owned it. Lock order: a stream's lock, then
/// this list's.
pub(crate) struct GarbageList {
    device: Arc<Device>,
    items: Mutex<(Vec<Garbage>, u64)>,
}

impl GarbageList {
    pub(crate) fn new(device: Arc<Device>) -> Arc<Self> {
        Arc::new(GarbageList {
            device,
            items: Mutex::new((Vec::new(), 0)),
        })
    }

    fn items(&self) -> MutexGuard<'_, (Vec<Garbage>, u64)> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Frees `garbage` at once if its uses are complete (`None`), else keeps
    /// it and returns the bytes now waiting.
    pub(crate) fn keep(&self, garbage: Garbage) -> Option<u64> {
        if garbage.is_free() {
            self.device.retire_buffer(garbage.raw);
            return None;
        }
        Some(self.push(garbage))
    }

    /// Adds `garbage`; returns the bytes now waiting.
    fn push(&self, garbage: Garbage) -> u64 {
        let mut items = self.items();
        items.1 += garbage.raw.size;
        items.0.push(garbage);
        items.1
    }

    /// Frees the garbage whose last uses have completed.
    fn reclaim(&self) {
        let freed: Vec<Garbage> = {
            let mut items = self.items();
            let (list, bytes) = &mut *items;
            let mut freed = Vec::new();
            let mut i = 0;
            while i < list.len() {
                if list[i].is_free() {
                    let g = list.swap_remove(i);
                    *bytes -= g.raw.size;
                    freed.push(g);
                } else {
                    i += 1;
                }
            }
            freed
        };
        for g in freed {
            self.device.retire_buffer(g.raw);
        }
    }

    fn len(&self) -> usize {
        self.items().0.len()
    }
}

impl Drop for GarbageList {
    fn drop(&mut self) {
        // Every stream of the device is gone, and each waited for its work
        // as it went: the pending values are complete (the waits are sure).
        let (list, _) = std::mem::take(self.items.get_mut().unwrap_or_else(|e| e.into_inner()));
        for g in list {
            for (timeline, value) in &g.pending {
                let _ = timeline.wait(*value);
            }
            self.device.retire_buffer(g.raw);
        }
    }
}

/// A stream's part of a trace (see `crate::trace`): its two tracks and the
/// timestamp queries that measure each batch on the device.
pub(crate) struct StreamTrace {
    device: Arc<Device>,
    pub(crate) tracer: Arc<Tracer>,
    /// The track of recorded commands.
    pub(crate) host: u64,
    /// The track of device batches.
    batches: u64,
    /// Two timestamps per batch slot; `None` where the queue has none.
    queries: Option<vk::QueryPool>,
    /// Nanoseconds per timestamp tick.
    period: f64,
    /// The bits of a timestamp that are valid.
    mask: u64,
}

/// Batch slots in the trace's query pool: more than can be in flight at once.
const TRACE_SLOTS: u64 = MAX_IN_FLIGHT as u64 * 2;

impl StreamTrace {
    pub(crate) fn new(device: &Arc<Device>, tracer: Arc<Tracer>) -> Result<Self> {
        let (host, batches) = tracer.new_stream(device.name());
        let bits = device
            .adapter
            .queue_family
            .map_or(0, |f| f.timestamp_valid_bits);
        let queries = if bits == 0 {
            None
        } else {
            let info = vk::QueryPoolCreateInfo::default()
                .query_type(vk::QueryType::TIMESTAMP)
                .query_count(TRACE_SLOTS as u32 * 2);
            // SAFETY: a valid create info on a live device.
            Some(unsafe { device.raw.create_query_pool(&info, None) }.during("vkCreateQueryPool")?)
        };
        Ok(StreamTrace {
            device: device.clone(),
            tracer,
            host,
            batches,
            queries,
            period: f64::from(device.limits().timestamp_period),
            mask: if bits >= 64 {
                u64::MAX
            } else {
                (1u64 << bits) - 1
            },
        })
    }

    fn slot(value: u64) -> u32 {
        (value % TRACE_SLOTS) as u32 * 2
    }

    /// Records the timestamp that opens the batch signalling `value`.
    fn begin(&self, device: &Device, cmd: vk::CommandBuffer, value: u64) {
        if let Some(pool) = self.queries {
            let slot = Self::slot(value);
            // SAFETY: `cmd` is recording outside a render pass; the slot's
            // two queries exist and no batch in flight uses them (fewer than
            // TRACE_SLOTS batches are ever in flight).
            unsafe {
                device.raw.cmd_reset_query_pool(cmd, pool, slot, 2);
                device.raw.cmd_write_timestamp(
                    cmd,
                    vk::PipelineStageFlags::TOP_OF_PIPE,
                    pool,
                    slot,
                );
            }
        }
    }

    /// Records the timestamp that closes the batch signalling `value`.
    fn end(&self, device: &Device, cmd: vk::CommandBuffer, value: u64) {
        if let Some(pool) = self.queries {
            // SAFETY: as in `begin`; BOTTOM_OF_PIPE follows every command.
            unsafe {
                device.raw.cmd_write_timestamp(
                    cmd,
                    vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                    pool,
                    Self::slot(value) + 1,
                )
            };
        }
    }

    /// Writes the device slice of a completed batch.
    fn retire(&self, device: &Device, batch: &Batch) {
        let (Some(pool), Some(submitted)) = (self.queries, batch.submitted_us) else {
            return;
        };
        let mut ticks = [0u64; 2];
        // SAFETY: the batch completed, so both of its queries were written.
        let read = unsafe {
            device.raw.get_query_pool_results(
                pool,
                Self::slot(batch.value),
                &mut ticks,
                vk::QueryResultFlags::TYPE_64,
            )
        };
        if read.is_err() {
            return;
        }
        let us = |t: u64| (t & self.mask) as f64 * self.period / 1e3;
        let start = self.tracer.device_to_host(us(ticks[0]), submitted);
        let args = format!(
            r#""value":{},"commands":{},"waits":{}"#,
            batch.value,
            batch.commands,
            batch.waits.len()
        );
        self.tracer.slice(
            self.batches,
            "batch",
            start,
            us(ticks[1].wrapping_sub(ticks[0]) & self.mask),
            &args,
        );
    }
}

impl Drop for StreamTrace {
    fn drop(&mut self) {
        if let Some(pool) = self.queries.take() {
            // SAFETY: dropped with its stream, after the stream waited for
            // all its batches (or before it submitted any).
            unsafe { self.device.raw.destroy_query_pool(pool, None) };
        }
    }
}

/// A copy being recorded: more regions between the same buffers may join it.
struct PendingCopy {
    src: vk::Buffer,
    dst: vk::Buffer,
    regions: Vec<vk::BufferCopy>,
}

/// The commands recorded since the last submission.
struct Batch {
    cmd: vk::CommandBuffer,
    value: u64,
    commands: usize,
    staged: u64,
    waits: Vec<(Arc<Timeline>, u64)>,
    staging: Vec<StagingBlock>,
    descriptor_pools: Vec<vk::DescriptorPool>,
    /// Objects (pipelines, say) that must live until the batch completes.
    keep: Vec<Arc<dyn Any + Send + Sync>>,
    /// Host work to run once the batch completes (copies out of readback
    /// staging into user memory).
    completions: Vec<Completion>,
    /// When it was submitted, in trace microseconds (traced streams only).
    submitted_us: Option<f64>,
}

/// Host work run when a batch completes, with the stream at hand.
pub(crate) type Completion = Box<dyn FnOnce(&mut Stream) + Send>;

/// What a stream records into and everything it must give back later.
pub(crate) struct Stream {
    device: Arc<Device>,
    timeline: Arc<Timeline>,
    queue: usize,
    pool: vk::CommandPool,
    free_cmds: Vec<vk::CommandBuffer>,
    batch: Option<Batch>,
    in_flight: VecDeque<Batch>,
    /// Shared with the device's other streams.
    garbage: Arc<GarbageList>,
    hazards: HazardTracker,
    pub(crate) upload: StagingPool,
    pub(crate) readback: StagingPool,
    pub(crate) descriptors: DescriptorPools,
    /// An error from a submission whose caller could not be told (one a
    /// `Drop` made), for the next `flush` or `synchronize`.
    failed: Option<Error>,
    /// Commands recorded since the stream began.
    recorded: u64,
    /// The copy being merged (part of the open batch, not yet recorded).
    pending_copy: Option<PendingCopy>,
    /// An empty vector with capacity, for the next merged copy's regions.
    spare_regions: Vec<vk::BufferCopy>,
    /// The stream's tracks, where the context traces.
    pub(crate) trace: Option<StreamTrace>,
    /// What the open batch's command buffer has bound for dispatches.
    bound: Bound,
}

impl Stream {
    /// A command pool on `device`'s compute family; the caller makes the timeline.
    pub(crate) fn create_pool(device: &Device) -> Result<vk::CommandPool> {
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device.queue_family)
            .flags(vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER);
        crate::fault::allocation(device).during("vkCreateCommandPool")?;
        // SAFETY: a valid create info.
        unsafe { device.raw.create_command_pool(&info, None) }.during("vkCreateCommandPool")
    }

    /// Takes ownership of `pool` (from `create_pool`).
    pub(crate) fn new(
        device: Arc<Device>,
        timeline: Arc<Timeline>,
        pool: vk::CommandPool,
        garbage: Arc<GarbageList>,
        trace: Option<StreamTrace>,
    ) -> Self {
        let queue = device.assign_queue();
        Stream {
            device,
            timeline,
            queue,
            pool,
            free_cmds: Vec::new(),
            batch: None,
            in_flight: VecDeque::new(),
            garbage,
            hazards: HazardTracker::default(),
            upload: StagingPool::new(MemoryUsage::Upload),
            readback: StagingPool::new(MemoryUsage::Readback),
            descriptors: DescriptorPools::default(),
            failed: None,
            recorded: 0,
            pending_copy: None,
            spare_regions: Vec::new(),
            trace,
            bound: Bound::default(),
        }
    }

    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The timeline value the open batch (the next command) will signal.
    pub(crate) fn pending_value(&self) -> u64 {
        self.timeline.submitted() + 1
    }

    /// Starts a command that makes `accesses`, after waiting (on the device)
    /// for `waits` of other streams: opens a batch if none is open, and
    /// records a barrier first if the command depends on an earlier one of
    /// the batch. Returns the command buffer to record into. A copy
    /// (`copy: true`) is then given with [`push_copy`](Self::push_copy),
    /// which may merge it into the copy before it; any other command is
    /// recorded into the returned buffer directly.
    pub(crate) fn command(
        &mut self,
        accesses: &[Access],
        waits: Vec<(Arc<Timeline>, u64)>,
        copy: bool,
    ) -> Result<vk::CommandBuffer> {
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
        let cmd = batch.cmd;
        let conflict = self.hazards.conflicts(accesses);
        if conflict || !copy {
            self.emit_copy();
        }
        if conflict {
            dependency_barrier(&self.device, cmd);
            self.hazards.clear();
            if let Some(t) = &self.trace {
                t.tracer.instant(t.host, "barrier", "");
            }
        }
        self.hazards.record(accesses);
        if let Some(batch) = &mut self.batch {
            batch.commands += 1;
        }
        self.recorded += 1;
        Ok(cmd)
    }

    /// Records a copy of `regions` from `src` to `dst`, after
    /// [`command`](Self::command) with `copy: true`. Copies between the same
    /// two buffers with nothing between them become one `vkCmdCopyBuffer`
    /// with several regions (they are independent: `command` separated any
    /// that depend on each other with a barrier, which ends the merging).
    pub(crate) fn push_copy(
        &mut self,
        src: vk::Buffer,
        dst: vk::Buffer,
        regions: &[vk::BufferCopy],
    ) {
        match &mut self.pending_copy {
            Some(p) if p.src == src && p.dst == dst => p.regions.extend_from_slice(regions),
            _ => {
                self.emit_copy();
                let mut merged = std::mem::take(&mut self.spare_regions);
                merged.extend_from_slice(regions);
                self.pending_copy = Some(PendingCopy {
                    src,
                    dst,
                    regions: merged,
                });
            }
        }
    }

    /// Records the copy being merged, if any.
    fn emit_copy(&mut self) {
        let (Some(copy), Some(batch)) = (self.pending_copy.take(), &self.batch) else {
            return;
        };
        // SAFETY: the batch's command buffer is recording; every region was
        // checked against both buffers by the caller of `push_copy`.
        unsafe {
            self.device
                .raw
                .cmd_copy_buffer(batch.cmd, copy.src, copy.dst, &copy.regions)
        };
        let mut regions = copy.regions;
        regions.clear();
        self.spare_regions = regions;
    }

    /// Room in a staging buffer for an upload recorded into the open batch.
    pub(crate) fn stage_upload(&mut self, size: u64) -> Result<StagingSlice> {
        let slice = self.upload.alloc(&self.device, size)?;
        if let Some(batch) = &mut self.batch {
            batch.staged += size;
        }
        Ok(slice)
    }

    /// The descriptor pools and the bound state a dispatch records with.
    pub(crate) fn dispatch_state(&mut self) -> (&mut DescriptorPools, &mut Bound) {
        (&mut self.descriptors, &mut self.bound)
    }

    /// The open batch's command buffer had its bound state changed outside
    /// `record_dispatch` (a secondary command buffer ran in it).
    pub(crate) fn forget_bindings(&mut self) {
        self.bound.forget();
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
        let large = self
            .batch
            .as_ref()
            .is_some_and(|b| b.commands >= MAX_BATCH_COMMANDS || b.staged >= MAX_BATCH_STAGED);
        if large {
            self.flush()?;
        }
        Ok(())
    }

    fn begin_batch(&mut self) -> Result<()> {
        let cmd = match self.free_cmds.pop() {
            Some(cmd) => cmd,
            None => {
                let info = vk::CommandBufferAllocateInfo::default()
                    .command_pool(self.pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1);
                crate::fault::allocation(&self.device).during("vkAllocateCommandBuffers")?;
                // SAFETY: the pool is live and used only under this stream's lock.
                unsafe { self.device.raw.allocate_command_buffers(&info) }
                    .during("vkAllocateCommandBuffers")?[0]
            }
        };
        let begin = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        let begun = crate::fault::allocation(&self.device).and_then(|()| {
            // SAFETY: the command buffer is in the initial state (new or reset).
            unsafe { self.device.raw.begin_command_buffer(cmd, &begin) }
        });
        if let Err(e) = begun {
            self.free_cmds.push(cmd);
            return Err(Error::vk("vkBeginCommandBuffer", e));
        }
        let value = self.pending_value();
        self.bound.forget();
        if let Some(t) = &self.trace {
            t.begin(&self.device, cmd, value);
        }
        // Order this batch after everything submitted before it on the queue.
        dependency_barrier(&self.device, cmd);
        self.hazards.clear();
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
        });
        Ok(())
    }

    /// Submits the open batch, if any, signalling its timeline value.
    pub(crate) fn flush(&mut self) -> Result<()> {
        self.emit_copy();
        let Some(mut batch) = self.batch.take() else {
            // Nothing to submit; still reclaim, as every flush does.
            return self.reclaim();
        };
        batch.staging = self.upload.take_for_batch();
        batch.descriptor_pools = self.descriptors.take_for_batch();
        // Make the batch's writes available to the host, which reads them
        // after waiting on the timeline.
        barrier(
            &self.device,
            batch.cmd,
            (STAGES, WRITES),
            (
                vk::PipelineStageFlags::HOST,
                vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE,
            ),
        );
        if let Some(t) = &self.trace {
            t.end(&self.device, batch.cmd, batch.value);
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
        if self.in_flight.len() > MAX_IN_FLIGHT {
            let oldest = self.in_flight.front().map_or(0, |b| b.value);
            self.timeline.wait_submitted(oldest)?;
        }
        self.reclaim()
    }

    fn submit(&self, batch: &Batch) -> Result<()> {
        // SAFETY: the command buffer is recording and owned by this stream.
        unsafe { self.device.raw.end_command_buffer(batch.cmd) }.during("vkEndCommandBuffer")?;
        let wait_semaphores: Vec<vk::Semaphore> =
            batch.waits.iter().map(|(t, _)| t.semaphore).collect();
        let wait_values: Vec<u64> = batch.waits.iter().map(|(_, v)| *v).collect();
        let wait_stages = vec![vk::PipelineStageFlags::ALL_COMMANDS; wait_semaphores.len()];
        let signal_semaphores = [self.timeline.semaphore];
        let signal_values = [batch.value];
        let cmds = [batch.cmd];
        let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default()
            .wait_semaphore_values(&wait_values)
            .signal_semaphore_values(&signal_values);
        let submit = vk::SubmitInfo::default()
            .wait_semaphores(&wait_semaphores)
            .wait_dst_stage_mask(&wait_stages)
            .command_buffers(&cmds)
            .signal_semaphores(&signal_semaphores)
            .push_next(&mut timeline_info);
        let queue = self.device.queue(self.queue);
        // SAFETY: the queue is locked; every handle in `submit` is live and
        // stays so until the batch completes (the batch keeps what it uses).
        unsafe {
            self.device
                .raw
                .queue_submit(*queue, &[submit], vk::Fence::null())
        }
        .during("vkQueueSubmit")
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
            t.retire(&self.device, &batch);
        }
        // SAFETY: the batch completed, so its command buffer is not pending.
        let reset = unsafe {
            self.device
                .raw
                .reset_command_buffer(batch.cmd, vk::CommandBufferResetFlags::empty())
        };
        if reset.is_ok() {
            self.free_cmds.push(batch.cmd);
        } else {
            // SAFETY: not pending (completed); freed once.
            unsafe {
                self.device
                    .raw
                    .free_command_buffers(self.pool, &[batch.cmd])
            };
        }
        self.upload.recycle(&self.device, batch.staging);
        self.descriptors
            .recycle(&self.device, batch.descriptor_pools);
    }

    /// Destroys pooled objects no batch uses: free command buffers, staging
    /// blocks and descriptor pools. The open batch (if any) keeps its own.
    pub(crate) fn trim(&mut self) -> Result<()> {
        self.reclaim()?;
        if !self.free_cmds.is_empty() {
            // SAFETY: the free command buffers are not pending (their batches
            // completed and they were reset).
            unsafe {
                self.device
                    .raw
                    .free_command_buffers(self.pool, &self.free_cmds)
            };
            self.free_cmds.clear();
        }
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

    /// Counts of objects alive: command buffers, staging blocks, descriptor
    /// pools, buffers waiting to be freed, batches in flight.
    pub(crate) fn live_objects(&self) -> crate::context::LiveObjects {
        crate::context::LiveObjects {
            command_buffers: self.free_cmds.len()
                + self.in_flight.len()
                + usize::from(self.batch.is_some()),
            staging_buffers: self.upload.live_blocks() + self.readback.live_blocks(),
            descriptor_pools: self.descriptors.live_pools(),
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
            // SAFETY: the device is live; waiting on it is always allowed.
            let _ = unsafe { self.device.raw.device_wait_idle() };
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
        self.shutdown();
        // SAFETY: every command buffer of the pool has completed (shutdown
        // waited) or was never submitted.
        unsafe { self.device.raw.destroy_command_pool(self.pool, None) };
    }
}

/// Records a barrier after which transfers and compute see everything
/// earlier transfers and compute wrote (and may overwrite what they read).
pub(crate) fn dependency_barrier(device: &Device, cmd: vk::CommandBuffer) {
    barrier(device, cmd, (STAGES, WRITES), (STAGES, READS_AND_WRITES));
}

/// Records a global memory barrier from `src` to `dst` (stages, accesses),
/// with synchronization2 where it is enabled.
fn barrier(
    device: &Device,
    cmd: vk::CommandBuffer,
    src: (vk::PipelineStageFlags, vk::AccessFlags),
    dst: (vk::PipelineStageFlags, vk::AccessFlags),
) {
    if device.synchronization2 {
        // The legacy flag bits have the same values in the 64-bit sync2 flags.
        let barriers = [vk::MemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::from_raw(src.0.as_raw() as u64))
            .src_access_mask(vk::AccessFlags2::from_raw(src.1.as_raw() as u64))
            .dst_stage_mask(vk::PipelineStageFlags2::from_raw(dst.0.as_raw() as u64))
            .dst_access_mask(vk::AccessFlags2::from_raw(dst.1.as_raw() as u64))];
        let info = vk::DependencyInfo::default().memory_barriers(&barriers);
        // SAFETY: `cmd` is recording; synchronization2 is enabled.
        unsafe { device.raw.cmd_pipeline_barrier2(cmd, &info) };
    } else {
        let barriers = [vk::MemoryBarrier::default()
            .src_access_mask(src.1)
            .dst_access_mask(dst.1)];
        // SAFETY: `cmd` is recording.
        unsafe {
            device.raw.cmd_pipeline_barrier(
                cmd,
                src.0,
                dst.0,
                vk::DependencyFlags::empty(),
                &barriers,
                &[],
                &[],
            )
        };
    }
}
