//! Command pools, command buffers and what is recorded into them: copies,
//! fills, barriers, secondary buffers, timestamps; and queue submission
//! with timeline semaphores.
//!
//! A [`Cmd`] is a command buffer in the recording state: a pool's
//! [`begin`](CommandPool::begin) makes one, [`end`](CommandPool::end) ends
//! it, and only then may it be [`submit`]ted (or executed from another).
//! The recording methods take the buffers and ranges their callers
//! checked: the layers above keep every buffer a command uses alive until
//! the batch (or graph recording) that holds the command has completed,
//! and record a command only once its ranges were checked against the
//! buffers (`debug_assert`ed here where the size is at hand).

use std::sync::Arc;

use ash::vk;

use super::{Device, Timeline};
use crate::error::{Error, Result, VkResultExt};

/// Stages and accesses of everything the crate records (the indirect
/// stage reads an indirect dispatch's workgroup counts).
pub(crate) const STAGES: vk::PipelineStageFlags = vk::PipelineStageFlags::from_raw(
    vk::PipelineStageFlags::TRANSFER.as_raw()
        | vk::PipelineStageFlags::COMPUTE_SHADER.as_raw()
        | vk::PipelineStageFlags::DRAW_INDIRECT.as_raw(),
);
pub(crate) const WRITES: vk::AccessFlags = vk::AccessFlags::from_raw(
    vk::AccessFlags::TRANSFER_WRITE.as_raw() | vk::AccessFlags::SHADER_WRITE.as_raw(),
);
pub(crate) const READS_AND_WRITES: vk::AccessFlags = vk::AccessFlags::from_raw(
    WRITES.as_raw()
        | vk::AccessFlags::TRANSFER_READ.as_raw()
        | vk::AccessFlags::SHADER_READ.as_raw()
        | vk::AccessFlags::INDIRECT_COMMAND_READ.as_raw(),
);

/// A command pool of the device's compute family and the command buffers
/// it made. One owner uses it at a time (a stream under its lock, a graph
/// under its pool lock), as Vulkan requires. Dropping it destroys the pool
/// and its buffers: its owner drops it only once none is pending.
pub(crate) struct CommandPool {
    device: Arc<Device>,
    raw: vk::CommandPool,
    secondary: bool,
    /// Reset buffers kept for reuse.
    free: Vec<vk::CommandBuffer>,
    /// Buffers allocated and not freed (free, recording or pending).
    live: usize,
}

/// A command buffer of a [`CommandPool`]: recording between
/// [`CommandPool::begin`] and [`CommandPool::end`], executable after.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Cmd(vk::CommandBuffer);

impl CommandPool {
    /// A pool of primary command buffers (one-time submit) or, with
    /// `secondary`, of secondary ones (simultaneous use, for graphs).
    pub(crate) fn new(device: &Arc<Device>, secondary: bool) -> Result<Self> {
        let flags = if secondary {
            vk::CommandPoolCreateFlags::empty()
        } else {
            vk::CommandPoolCreateFlags::RESET_COMMAND_BUFFER
        };
        let info = vk::CommandPoolCreateInfo::default()
            .queue_family_index(device.queue_family)
            .flags(flags);
        super::fault::allocation(device).during("vkCreateCommandPool")?;
        // SAFETY: a valid create info on a live device.
        let raw =
            unsafe { device.raw.create_command_pool(&info, None) }.during("vkCreateCommandPool")?;
        Ok(CommandPool {
            device: device.clone(),
            raw,
            secondary,
            free: Vec::new(),
            live: 0,
        })
    }

    /// A command buffer of the pool, recording.
    pub(crate) fn begin(&mut self) -> Result<Cmd> {
        let raw = match self.free.pop() {
            Some(raw) => raw,
            None => {
                let level = if self.secondary {
                    vk::CommandBufferLevel::SECONDARY
                } else {
                    vk::CommandBufferLevel::PRIMARY
                };
                let info = vk::CommandBufferAllocateInfo::default()
                    .command_pool(self.raw)
                    .level(level)
                    .command_buffer_count(1);
                super::fault::allocation(&self.device).during("vkAllocateCommandBuffers")?;
                // SAFETY: the pool is live and used by its one owner.
                let raw = unsafe { self.device.raw.allocate_command_buffers(&info) }
                    .during("vkAllocateCommandBuffers")?[0];
                self.live += 1;
                raw
            }
        };
        let inheritance = vk::CommandBufferInheritanceInfo::default();
        let begin = if self.secondary {
            vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::SIMULTANEOUS_USE)
                .inheritance_info(&inheritance)
        } else {
            vk::CommandBufferBeginInfo::default()
                .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT)
        };
        let begun = super::fault::allocation(&self.device).and_then(|()| {
            // SAFETY: the buffer is new or was reset: in the initial state.
            unsafe { self.device.raw.begin_command_buffer(raw, &begin) }
        });
        match begun {
            Ok(()) => Ok(Cmd(raw)),
            Err(e) => {
                if self.secondary {
                    // Without the reset flag, a buffer whose begin failed
                    // may not be in the initial state: not begun again.
                    self.free_now(&[raw]);
                } else {
                    // A primary buffer's begin resets it implicitly.
                    self.free.push(raw);
                }
                Err(Error::vk("vkBeginCommandBuffer", e))
            }
        }
    }

    /// Ends the recording of `cmd`, which may then be submitted.
    pub(crate) fn end(&self, cmd: Cmd) -> Result<()> {
        // SAFETY: `cmd` is recording (made by `begin` of this pool).
        unsafe { self.device.raw.end_command_buffer(cmd.0) }.during("vkEndCommandBuffer")
    }

    /// Takes back `cmd`, whose work has completed (or never ran), for reuse
    /// (a secondary pool, made without the reset flag, frees it instead).
    pub(crate) fn recycle(&mut self, cmd: Cmd) {
        if self.secondary {
            self.free_now(&[cmd.0]);
            return;
        }
        // SAFETY: `cmd` belongs to this pool, which was made with the reset
        // flag, and is not pending.
        let reset = unsafe {
            self.device
                .raw
                .reset_command_buffer(cmd.0, vk::CommandBufferResetFlags::empty())
        };
        if reset.is_ok() {
            self.free.push(cmd.0);
        } else {
            self.free_now(&[cmd.0]);
        }
    }

    /// Frees `cmd` (not pending) instead of keeping it.
    pub(crate) fn free(&mut self, cmd: Cmd) {
        self.free_now(&[cmd.0]);
    }

    /// Frees the buffers kept for reuse.
    pub(crate) fn release_free(&mut self) {
        let free = std::mem::take(&mut self.free);
        self.free_now(&free);
    }

    fn free_now(&mut self, cmds: &[vk::CommandBuffer]) {
        if cmds.is_empty() {
            return;
        }
        // SAFETY: the buffers belong to this pool and none is pending.
        unsafe { self.device.raw.free_command_buffers(self.raw, cmds) };
        self.live -= cmds.len();
    }

    /// Command buffers allocated and not freed.
    pub(crate) fn live(&self) -> usize {
        self.live
    }
}

impl Drop for CommandPool {
    fn drop(&mut self) {
        // SAFETY: the owner drops the pool only once none of its buffers is
        // pending (a stream after waiting for its batches; a graph once
        // every batch that executed its recordings completed); destroying
        // the pool frees its buffers.
        unsafe { self.device.raw.destroy_command_pool(self.raw, None) };
    }
}

impl Cmd {
    /// The raw handle, for the recording functions of this layer.
    pub(super) fn raw(self) -> vk::CommandBuffer {
        self.0
    }

    /// Records a copy of `regions` from `src` to `dst` (each region inside
    /// both buffers, checked by the caller).
    pub(crate) fn copy_buffer(
        self,
        device: &Device,
        src: vk::Buffer,
        dst: vk::Buffer,
        regions: &[vk::BufferCopy],
    ) {
        // SAFETY: `self` is recording; the buffers are live until the work
        // completes and the regions lie inside them (the module's contract).
        unsafe { device.raw.cmd_copy_buffer(self.0, src, dst, regions) };
    }

    /// Records a fill of `size` bytes of `dst` at `offset` with `word`
    /// (both multiples of 4, inside the buffer: checked by the caller).
    pub(crate) fn fill_buffer(
        self,
        device: &Device,
        dst: vk::Buffer,
        offset: u64,
        size: u64,
        word: u32,
    ) {
        debug_assert!(offset % 4 == 0 && size % 4 == 0);
        // SAFETY: `self` is recording; the range is inside the live buffer
        // and 4-byte aligned (the module's contract).
        unsafe { device.raw.cmd_fill_buffer(self.0, dst, offset, size, word) };
    }

    /// Runs `secondary` (ended, simultaneous use, of this device's compute
    /// family) inside this primary buffer.
    pub(crate) fn execute(self, device: &Device, secondary: Cmd) {
        // SAFETY: `self` is a recording primary buffer; `secondary` was
        // recorded for simultaneous use on a pool of the same family and
        // is kept alive (with what it uses) until the batch completes.
        unsafe { device.raw.cmd_execute_commands(self.0, &[secondary.0]) };
    }

    /// Records a barrier after which transfers and compute see everything
    /// earlier transfers and compute wrote (and may overwrite what they read).
    pub(crate) fn dependency_barrier(self, device: &Device) {
        self.barrier(device, (STAGES, WRITES), (STAGES, READS_AND_WRITES));
    }

    /// Records a barrier that makes every earlier write available to the
    /// host, which reads after waiting on the timeline.
    pub(crate) fn host_barrier(self, device: &Device) {
        self.barrier(
            device,
            (STAGES, WRITES),
            (
                vk::PipelineStageFlags::HOST,
                vk::AccessFlags::HOST_READ | vk::AccessFlags::HOST_WRITE,
            ),
        );
    }

    /// Records a global memory barrier from `src` to `dst` (stages,
    /// accesses), with synchronization2 where it is enabled.
    fn barrier(
        self,
        device: &Device,
        src: (vk::PipelineStageFlags, vk::AccessFlags),
        dst: (vk::PipelineStageFlags, vk::AccessFlags),
    ) {
        if device.synchronization2() {
            // The legacy flag bits have the same values in the 64-bit sync2 flags.
            let barriers = [vk::MemoryBarrier2::default()
                .src_stage_mask(vk::PipelineStageFlags2::from_raw(src.0.as_raw() as u64))
                .src_access_mask(vk::AccessFlags2::from_raw(src.1.as_raw() as u64))
                .dst_stage_mask(vk::PipelineStageFlags2::from_raw(dst.0.as_raw() as u64))
                .dst_access_mask(vk::AccessFlags2::from_raw(dst.1.as_raw() as u64))];
            let info = vk::DependencyInfo::default().memory_barriers(&barriers);
            // SAFETY: `self` is recording; synchronization2 is enabled.
            unsafe { device.raw.cmd_pipeline_barrier2(self.0, &info) };
        } else {
            let barriers = [vk::MemoryBarrier::default()
                .src_access_mask(src.1)
                .dst_access_mask(dst.1)];
            // SAFETY: `self` is recording.
            unsafe {
                device.raw.cmd_pipeline_barrier(
                    self.0,
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
}

/// Submits `cmd` (ended) to queue `queue` of `device`, after `waits` (each
/// timeline at its value) and signalling `signal` at `value`.
pub(crate) fn submit(
    device: &Device,
    queue: usize,
    cmd: Cmd,
    waits: &[(Arc<Timeline>, u64)],
    signal: &Timeline,
    value: u64,
) -> Result<()> {
    let waits: smallvec::SmallVec<[(vk::Semaphore, u64); 4]> =
        waits.iter().map(|(t, v)| (t.semaphore, *v)).collect();
    // SAFETY: `cmd` has ended; every semaphore is live, and the caller
    // keeps what the work uses alive until `value` is reached.
    let submitted = unsafe {
        queue_submit(
            device,
            queue,
            &[cmd.0],
            &waits,
            &[(signal.semaphore, value)],
            vk::Fence::null(),
        )
    };
    device.note(submitted).during("vkQueueSubmit")
}

/// Submits `cmds` to queue `queue` of `device`, after `waits` and
/// signalling `signals` (each a semaphore and its value, which a binary
/// semaphore ignores), with `fence` (or none), under the queue's lock.
///
/// # Safety
///
/// Every command buffer has ended; every semaphore is live, each wait's
/// value is (or will be) signalled, and what the work uses stays alive
/// until it completes; `fence`, where not null, is unsignalled and not in
/// use.
pub(super) unsafe fn queue_submit(
    device: &Device,
    queue: usize,
    cmds: &[vk::CommandBuffer],
    waits: &[(vk::Semaphore, u64)],
    signals: &[(vk::Semaphore, u64)],
    fence: vk::Fence,
) -> std::result::Result<(), vk::Result> {
    let wait_semaphores: smallvec::SmallVec<[vk::Semaphore; 4]> =
        waits.iter().map(|(s, _)| *s).collect();
    let wait_values: smallvec::SmallVec<[u64; 4]> = waits.iter().map(|(_, v)| *v).collect();
    let wait_stages: smallvec::SmallVec<[vk::PipelineStageFlags; 4]> = waits
        .iter()
        .map(|_| vk::PipelineStageFlags::ALL_COMMANDS)
        .collect();
    let signal_semaphores: smallvec::SmallVec<[vk::Semaphore; 2]> =
        signals.iter().map(|(s, _)| *s).collect();
    let signal_values: smallvec::SmallVec<[u64; 2]> = signals.iter().map(|(_, v)| *v).collect();
    let mut timeline_info = vk::TimelineSemaphoreSubmitInfo::default()
        .wait_semaphore_values(&wait_values)
        .signal_semaphore_values(&signal_values);
    let info = vk::SubmitInfo::default()
        .wait_semaphores(&wait_semaphores)
        .wait_dst_stage_mask(&wait_stages)
        .command_buffers(cmds)
        .signal_semaphores(&signal_semaphores)
        .push_next(&mut timeline_info);
    let queue = device.queue(queue);
    // SAFETY: the queue is locked; every handle in `info` is valid as the
    // caller guarantees.
    unsafe { device.raw.queue_submit(*queue, &[info], fence) }
}

/// Timestamp queries: two a slot (the start and end of a batch or a
/// dispatch). Destroyed when dropped, by an owner that no pending work
/// writes it any more.
pub(crate) struct TimestampPool {
    device: Arc<Device>,
    raw: vk::QueryPool,
    slots: u32,
}

impl TimestampPool {
    /// How many bits of a timestamp `device`'s compute queue writes (0
    /// where it writes none).
    pub(crate) fn valid_bits(device: &Device) -> u32 {
        device
            .adapter
            .queue_family
            .map_or(0, |f| f.timestamp_valid_bits)
    }

    /// The mask of those bits, for arithmetic on ticks.
    pub(crate) fn tick_mask(device: &Device) -> u64 {
        match Self::valid_bits(device) {
            bits @ 0..=63 => (1u64 << bits) - 1,
            _ => u64::MAX,
        }
    }

    /// A pool of `slots` start/end pairs.
    pub(crate) fn new(device: &Arc<Device>, slots: u32) -> Result<Self> {
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(slots * 2);
        // SAFETY: a valid create info on a live device.
        let raw =
            unsafe { device.raw.create_query_pool(&info, None) }.during("vkCreateQueryPool")?;
        Ok(TimestampPool {
            device: device.clone(),
            raw,
            slots,
        })
    }

    /// Records the reset of `slot` and its start timestamp into `cmd`.
    /// The caller makes sure no pending work uses the slot.
    pub(crate) fn start(&self, cmd: Cmd, slot: u32) {
        assert!(slot < self.slots, "timestamp slot {slot} of {}", self.slots);
        // SAFETY: `cmd` is recording outside a render pass; the slot's two
        // queries exist and no pending work writes them.
        unsafe {
            self.device
                .raw
                .cmd_reset_query_pool(cmd.0, self.raw, slot * 2, 2);
            self.device.raw.cmd_write_timestamp(
                cmd.0,
                vk::PipelineStageFlags::TOP_OF_PIPE,
                self.raw,
                slot * 2,
            );
        }
    }

    /// Records the end timestamp of `slot` into `cmd`.
    pub(crate) fn end(&self, cmd: Cmd, slot: u32) {
        assert!(slot < self.slots, "timestamp slot {slot} of {}", self.slots);
        // SAFETY: `cmd` is recording; the query exists and was reset by
        // `start` earlier in the same work.
        unsafe {
            self.device.raw.cmd_write_timestamp(
                cmd.0,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                self.raw,
                slot * 2 + 1,
            )
        };
    }

    /// The start and end ticks of `slot`, once the work that wrote them
    /// completed (`NOT_READY` where one was not written).
    pub(crate) fn read(&self, slot: u32) -> Result<[u64; 2]> {
        assert!(slot < self.slots, "timestamp slot {slot} of {}", self.slots);
        let mut ticks = [0u64; 2];
        // SAFETY: both queries exist; without WAIT the call returns
        // NOT_READY rather than blocking when one was not written.
        unsafe {
            self.device.raw.get_query_pool_results(
                self.raw,
                slot * 2,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64,
            )
        }
        .during("vkGetQueryPoolResults")?;
        Ok(ticks)
    }
}

impl Drop for TimestampPool {
    fn drop(&mut self) {
        // SAFETY: dropped by an owner whose work writing the queries has
        // completed (or was never submitted).
        unsafe { self.device.raw.destroy_query_pool(self.raw, None) };
    }
}
