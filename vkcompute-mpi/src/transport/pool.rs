//! The pinned host memory the staged transport moves data through, kept
//! between calls: whole staging buffers (point-to-point pieces, the
//! unpipelined collectives) and the pieces' slots of the pipelined
//! collectives.

use std::sync::Mutex;

use vkcompute::{DeviceContext, HostBuffer};

use crate::error::{Error, Result};

/// The most piece buffers a communicator keeps between pipelined
/// collectives (four sets of `plan::MAX_PIECES`).
const KEPT_PIECE_SLOTS: usize = 4 * crate::plan::MAX_PIECES;

/// A communicator's pinned host buffers, kept for reuse.
pub(crate) struct StagingPool {
    ctx: DeviceContext,
    /// Pinned host buffers kept for reuse between calls.
    staging: Mutex<Vec<HostBuffer<u8>>>,
    /// The pinned host buffers of a pipelined collective's pieces, kept
    /// for reuse between calls.
    piece_slots: Mutex<Vec<HostBuffer<u8>>>,
}

impl StagingPool {
    pub(crate) fn new(ctx: &DeviceContext) -> StagingPool {
        StagingPool {
            ctx: ctx.clone(),
            staging: Mutex::new(Vec::new()),
            piece_slots: Mutex::new(Vec::new()),
        }
    }

    /// A pinned host buffer of at least `bytes` bytes, from those kept
    /// between calls where one is large enough.
    pub(crate) fn staging(&self, op: &'static str, bytes: usize) -> Result<HostBuffer<u8>> {
        let mut kept = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let best = kept
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= bytes)
            .min_by_key(|(_, b)| b.len())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(kept.swap_remove(i));
        }
        drop(kept);
        self.ctx
            .enqueue_create_host_buffer::<u8>(bytes.max(1))
            .map_err(Error::device(op))
    }

    /// Keeps `buffer` for a later call (at most a few, the largest).
    pub(crate) fn keep_staging(&self, buffer: HostBuffer<u8>) {
        let mut kept = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        kept.push(buffer);
        if kept.len() > 4 {
            kept.sort_by_key(|b| std::cmp::Reverse(b.len()));
            kept.truncate(4);
        }
    }

    /// `count` pinned host buffers of at least `bytes` bytes each for the
    /// pieces of a pipelined collective, from those kept between calls
    /// where large enough.
    pub(crate) fn piece_slots(
        &self,
        op: &'static str,
        bytes: usize,
        count: usize,
    ) -> Result<Vec<HostBuffer<u8>>> {
        let mut slots = {
            let mut kept = self.piece_slots.lock().unwrap_or_else(|e| e.into_inner());
            let (fit, small): (Vec<_>, Vec<_>) = std::mem::take(&mut *kept)
                .into_iter()
                .partition(|b| b.len() >= bytes);
            *kept = small;
            fit
        };
        if slots.len() > count {
            let rest = slots.split_off(count);
            self.keep_piece_slots(rest);
        }
        while slots.len() < count {
            let slot = self.ctx.enqueue_create_host_buffer::<u8>(bytes.max(1));
            match slot {
                Ok(slot) => slots.push(slot),
                Err(e) => {
                    self.keep_piece_slots(slots);
                    return Err(Error::device(op)(e));
                }
            }
        }
        Ok(slots)
    }

    /// Keeps `slots` for a later pipelined collective (at most
    /// [`KEPT_PIECE_SLOTS`], the largest).
    pub(crate) fn keep_piece_slots(&self, slots: Vec<HostBuffer<u8>>) {
        let mut kept = self.piece_slots.lock().unwrap_or_else(|e| e.into_inner());
        kept.extend(slots);
        if kept.len() > KEPT_PIECE_SLOTS {
            kept.sort_by_key(|b| std::cmp::Reverse(b.len()));
            kept.truncate(KEPT_PIECE_SLOTS);
        }
    }
}
