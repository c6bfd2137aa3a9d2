//! The one recorder. Every command, whether a stream records it into a
//! batch or a graph into its secondary command buffer, is a [`Command`]
//! given to a [`Recorder`] with the byte ranges it reads and writes. The
//! recorder orders it after the earlier commands it depends on (a barrier
//! where the hazard tracker sees a conflict), merges consecutive copies
//! between the same two buffers into one `vkCmdCopyBuffer`, binds only
//! what changed since the previous dispatch, and records it.
//!
//! What is particular to each target stays with it: a stream's batch
//! waits for other streams and signals its timeline, a graph's recording
//! keeps the union of its uses for its replays.

use std::sync::Arc;

use ash::vk;
use smallvec::SmallVec;

use crate::batch_pool::DescriptorPools;
use crate::error::Result;
use crate::hazard::{Access, HazardTracker};
use crate::vk::command::{Cmd, TimestampPool};
use crate::vk::ownership_barrier;
use crate::vk::pipeline::{record_dispatch_into, Bound, ComputePipeline, Groups};
use crate::vk::Device;

/// One command, as a stream or a graph records it. Every buffer range in
/// it was checked by the operation that made it (inside its buffer, of
/// the alignment the command needs); the recorder adds the ordering.
pub(crate) enum Command<'a> {
    /// Nothing to record: a point of the stream (a wait for other streams
    /// is a batch's, not a command's).
    Mark,
    /// A copy of `regions` from `src` to `dst` (merged with the copy
    /// before it where that one is between the same buffers).
    Copy {
        src: vk::Buffer,
        dst: vk::Buffer,
        regions: SmallVec<[vk::BufferCopy; 4]>,
    },
    /// `vkCmdFillBuffer` of `len` bytes at `offset` (multiples of 4).
    FillWord {
        dst: vk::Buffer,
        offset: u64,
        len: u64,
        word: u32,
    },
    /// A dispatch of `pipeline` over `groups` (counts, or counts read on
    /// the device from a buffer), with `buffers` bound in the order of its
    /// bindings and `push` (whole words) as push constants.
    Dispatch {
        pipeline: &'a ComputePipeline,
        buffers: &'a [vk::DescriptorBufferInfo],
        push: &'a [u8],
        groups: Groups,
    },
    /// A graph's recording, run inside a stream's batch.
    Execute(Cmd),
    /// Timestamps into the first slot of `pool`: its start (resetting the
    /// slot) and, once every earlier command is done, its end.
    Timestamps {
        pool: &'a TimestampPool,
        start: bool,
        end: bool,
    },
    /// A queue family ownership transfer of `buffer`'s `range` (offset,
    /// size) to or from `VK_QUEUE_FAMILY_EXTERNAL`; for host memory
    /// another process maps (`host`), a barrier to or from the host
    /// instead (`ownership_barrier`).
    Ownership {
        buffer: vk::Buffer,
        range: (u64, u64),
        release: bool,
        host: bool,
    },
}

impl Command<'_> {
    /// A copy of one region.
    pub(crate) fn copy(src: vk::Buffer, dst: vk::Buffer, region: vk::BufferCopy) -> Self {
        Command::Copy {
            src,
            dst,
            regions: smallvec::smallvec![region],
        }
    }
}

/// A copy being merged: more regions between the same buffers may join it.
struct PendingCopy {
    src: vk::Buffer,
    dst: vk::Buffer,
    regions: Vec<vk::BufferCopy>,
}

/// What a command buffer being recorded has seen: the ranges used since
/// its last barrier, what it has bound, and the copy being merged.
#[derive(Default)]
pub(crate) struct Recorder {
    cmd: Option<Cmd>,
    hazards: HazardTracker,
    bound: Bound,
    pending: Option<PendingCopy>,
    /// An empty vector with capacity, for the next merged copy's regions.
    spare: Vec<vk::BufferCopy>,
}

impl Recorder {
    /// A recorder of `cmd` (recording, nothing in it yet).
    pub(crate) fn new(cmd: Cmd) -> Self {
        let mut recorder = Recorder::default();
        recorder.begin(cmd);
        recorder
    }

    /// Starts over on `cmd` (a new batch's command buffer), keeping only
    /// the allocations.
    pub(crate) fn begin(&mut self, cmd: Cmd) {
        debug_assert!(self.pending.is_none(), "the previous buffer was finished");
        self.cmd = Some(cmd);
        self.hazards.clear();
        self.bound.forget();
    }

    /// Records `command`, which makes `accesses`, after a barrier where it
    /// depends on a command recorded since the last one. Returns whether
    /// it recorded that barrier.
    pub(crate) fn record(
        &mut self,
        device: &Arc<Device>,
        descriptors: &mut DescriptorPools,
        accesses: &[Access],
        command: Command<'_>,
    ) -> Result<bool> {
        let Some(cmd) = self.cmd else {
            debug_assert!(false, "a recorder records after `begin`");
            return Ok(false);
        };
        if !matches!(command, Command::Copy { .. } | Command::Mark) {
            self.emit_copy(device);
        }
        let conflict = self.order(device, accesses);
        self.hazards.record(accesses);
        match command {
            Command::Mark => {}
            Command::Copy { src, dst, regions } => self.push_copy(device, src, dst, &regions),
            Command::FillWord {
                dst,
                offset,
                len,
                word,
            } => cmd.fill_buffer(device, dst, offset, len, word),
            Command::Dispatch {
                pipeline,
                buffers,
                push,
                groups,
            } => record_dispatch_into(
                device,
                &mut |layout| descriptors.allocate(device, layout),
                &mut self.bound,
                cmd,
                pipeline,
                buffers,
                push,
                groups,
            )?,
            Command::Execute(secondary) => {
                cmd.execute(device, secondary);
                // After a secondary command buffer the primary's bound
                // state is undefined.
                self.bound.forget();
            }
            Command::Timestamps { pool, start, end } => {
                if start {
                    pool.start(cmd, 0);
                }
                if end {
                    pool.end(cmd, 0);
                }
            }
            Command::Ownership {
                buffer,
                range,
                release,
                host,
            } => ownership_barrier(device, cmd, buffer, range, (release, host)),
        }
        Ok(conflict)
    }

    /// Records a barrier where `accesses` conflict with the ranges used
    /// since the last one (without counting them as used: see `note`).
    /// Returns whether it did.
    pub(crate) fn order(&mut self, device: &Device, accesses: &[Access]) -> bool {
        let conflict = self.hazards.conflicts(accesses);
        if conflict {
            self.barrier(device);
        }
        conflict
    }

    /// Counts `accesses` as used since the last barrier.
    pub(crate) fn note(&mut self, accesses: &[Access]) {
        self.hazards.record(accesses);
    }

    /// Records a barrier after which every later command sees what the
    /// earlier ones wrote, and forgets the ranges used before it.
    pub(crate) fn barrier(&mut self, device: &Device) {
        self.emit_copy(device);
        if let Some(cmd) = self.cmd {
            cmd.dependency_barrier(device);
        }
        self.hazards.clear();
    }

    /// Records what is still pending (the copy being merged) and gives the
    /// command buffer back, to be ended.
    pub(crate) fn finish(&mut self, device: &Device) -> Option<Cmd> {
        self.emit_copy(device);
        self.cmd.take()
    }

    /// Adds a copy to the one being merged, or starts a new one. Copies
    /// between the same two buffers with nothing between them become one
    /// `vkCmdCopyBuffer` of several regions: they are independent, since a
    /// conflict between them would have recorded a barrier, which ends the
    /// merging.
    fn push_copy(
        &mut self,
        device: &Device,
        src: vk::Buffer,
        dst: vk::Buffer,
        regions: &[vk::BufferCopy],
    ) {
        match &mut self.pending {
            Some(p) if p.src == src && p.dst == dst => p.regions.extend_from_slice(regions),
            _ => {
                self.emit_copy(device);
                let mut merged = std::mem::take(&mut self.spare);
                merged.extend_from_slice(regions);
                self.pending = Some(PendingCopy {
                    src,
                    dst,
                    regions: merged,
                });
            }
        }
    }

    /// Records the copy being merged, if any.
    pub(crate) fn emit_copy(&mut self, device: &Device) {
        let (Some(copy), Some(cmd)) = (self.pending.take(), self.cmd) else {
            return;
        };
        // Every region was checked against both buffers by the operation
        // that made the command.
        cmd.copy_buffer(device, copy.src, copy.dst, &copy.regions);
        let mut regions = copy.regions;
        regions.clear();
        self.spare = regions;
    }
}
