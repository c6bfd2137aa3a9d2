//! The staged collectives over whole buffers (chunks of at most one
//! piece): a device working buffer, host buffers for the step's chunks,
//! and the schedule's steps (`plan::schedule`): the reduce-scatter
//! reduces each received chunk into the working buffer on the device, the
//! allgather runs in host memory. Recursive doubling too, for small
//! allreduces.

use std::mem::size_of;
use std::ops::Range;

use bytemuck::Pod;
use vkcompute::{DeviceBuffer, HostBuffer};

use crate::communicator::Communicator;
use crate::element::{ReduceOp, Reducible};
use crate::error::{Error, Result};
use crate::plan::schedule::{self, Algorithm, Step};
use crate::plan::Chunks;
use crate::raw;
use crate::transport::kernels;
use crate::transport::place;
use crate::wire::COLLECTIVE_TAG;

/// `a` for reading and `b` for writing, two disjoint ranges of `all`.
pub(super) fn disjoint<T>(all: &mut [T], a: Range<usize>, b: Range<usize>) -> (&[T], &mut [T]) {
    if a.start <= b.start {
        let (low, high) = all.split_at_mut(b.start);
        (&low[a], &mut high[..b.len()])
    } else {
        let (low, high) = all.split_at_mut(a.start);
        let a_len = a.len();
        (&high[..a_len], &mut low[b])
    }
}

/// A pinned host buffer of `len` elements of `T`, from the communicator's
/// staging buffers.
pub(super) struct Staged<T> {
    pub(super) raw: HostBuffer<u8>,
    pub(super) typed: HostBuffer<T>,
}

impl<T: Pod> Staged<T> {
    pub(super) fn new(comm: &Communicator, op: &'static str, len: usize) -> Result<Self> {
        let raw = comm.pool.staging(op, len * size_of::<T>())?;
        let typed = raw
            .create_sub_buffer::<T>(0, len)
            .map_err(Error::device(op))?;
        Ok(Staged { raw, typed })
    }

    pub(super) fn part(&self, op: &'static str, range: Range<usize>) -> Result<HostBuffer<T>> {
        self.typed
            .create_sub_buffer::<T>(range.start, range.len())
            .map_err(Error::device(op))
    }

    pub(super) fn keep(self, comm: &Communicator) {
        drop(self.typed);
        comm.pool.keep_staging(self.raw);
    }
}

/// Enqueues a copy of `src` into `dst` on `src`'s stream and submits it.
pub(super) fn copy_out<T: Pod>(
    op: &'static str,
    src: &DeviceBuffer<T>,
    dst: &HostBuffer<T>,
) -> Result<()> {
    place::copy_parts((dst, 0), (src, 0), src.len())
        .and_then(|()| src.context().flush())
        .map_err(Error::device(op))
}

/// What a reduction prepared before the ranks agreed: its kernel, its
/// working buffer on the device (already holding this rank's input), its
/// chunks and its host buffers.
pub(super) struct Ring<T> {
    pub(super) kernel: kernels::ReduceKernels,
    pub(super) acc: DeviceBuffer<T>,
    pub(super) chunks: Chunks,
    pub(super) algorithm: Algorithm,
    pub(super) outbox: Staged<T>,
    pub(super) inbox: Staged<T>,
}

impl<T: Pod> Ring<T> {
    /// The chunk `k` of the working buffer.
    pub(super) fn chunk(&self, op: &'static str, k: usize) -> Result<DeviceBuffer<T>> {
        let range = &self.chunks.ranges[k];
        self.acc
            .create_sub_buffer::<T>(range.start, range.len())
            .map_err(Error::device(op))
    }

    /// Gives the host buffers back for reuse.
    pub(super) fn keep(self, comm: &Communicator) {
        self.outbox.keep(comm);
        self.inbox.keep(comm);
    }
}

impl Communicator {
    /// Prepares a reduction over `chunks` of a new working buffer of
    /// `acc_len` elements, filled by `fill` (from this rank's input), with
    /// host buffers for the longest step of `algorithm`'s reduce-scatter.
    pub(super) fn prepare_ring<T: Reducible>(
        &self,
        op: &'static str,
        reduce: ReduceOp,
        acc_len: usize,
        (chunks, algorithm): (Chunks, Algorithm),
        fill: impl FnOnce(&DeviceBuffer<T>) -> vkcompute::Result<()>,
    ) -> Result<Ring<T>> {
        let kernel = self.reducer.kernel::<T>(op, self.context(), reduce)?;
        let acc = self
            .context()
            .enqueue_create_buffer::<T>(acc_len)
            .map_err(Error::device(op))?;
        fill(&acc)
            .and_then(|()| self.context().flush())
            .map_err(Error::device(op))?;
        let (rank, size) = (self.rank() as usize, self.size() as usize);
        let steps = schedule::reduce_scatter(algorithm, rank, size);
        let longest = chunks.longest_step(&steps);
        Ok(Ring {
            kernel,
            acc,
            outbox: Staged::new(self, op, longest)?,
            inbox: Staged::new(self, op, longest)?,
            chunks,
            algorithm,
        })
    }

    /// The reduce-scatter over the staged working buffer: after its steps
    /// (`schedule::reduce_scatter`), chunk `rank` of this rank's working
    /// buffer holds the reduction of every rank's. Each step copies the
    /// chunks it sends to the outbox, exchanges them (in the pieces the
    /// mapped path sends too) and reduces the chunks received into the
    /// working buffer.
    pub(super) fn ring_reduce_scatter<T: Reducible>(
        &self,
        op: &'static str,
        ring: &Ring<T>,
    ) -> Result<()> {
        let (rank, size) = (self.rank() as usize, self.size() as usize);
        let steps = schedule::reduce_scatter(ring.algorithm, rank, size);
        let piece = ring.chunks.piece_bytes::<T>(&steps);
        for step in &steps {
            let (send, recv) = (ring.chunks.span(&step.send), ring.chunks.span(&step.recv));
            let outbox = ring.outbox.part(op, 0..send.len())?;
            let sent = (ring.acc.create_sub_buffer::<T>(send.start, send.len()))
                .map_err(Error::device(op))?;
            copy_out(op, &sent, &outbox)?;
            {
                let out = outbox.as_slice().map_err(Error::device(op))?;
                let mut into = ring.inbox.typed.as_mut_slice().map_err(Error::device(op))?;
                self.sendrecv_step(op, step, (&out, &mut into[..recv.len()]), piece)?;
            }
            let acc = ring
                .acc
                .create_sub_buffer::<T>(recv.start, recv.len())
                .map_err(Error::device(op))?;
            let incoming = ring.inbox.part(op, 0..recv.len())?;
            kernels::enqueue_reduce(op, self.context(), &ring.kernel, &acc, &incoming)?;
        }
        Ok(())
    }

    /// One step of a schedule: `out` to `step.to` while `into` comes from
    /// `step.from`, in messages of `piece` bytes (`raw::sendrecv_pieces`).
    pub(super) fn sendrecv_step<T: Pod>(
        &self,
        op: &'static str,
        step: &Step,
        (out, into): (&[T], &mut [T]),
        piece: usize,
    ) -> Result<()> {
        let (out, into) = (bytemuck::cast_slice(out), bytemuck::cast_slice_mut(into));
        raw::sendrecv_pieces(
            op,
            self.raw(),
            out,
            step.to,
            into,
            step.from,
            COLLECTIVE_TAG,
            piece,
        )
    }

    /// The allgather over host memory (`schedule::allgather`): chunk `rank`
    /// of `all` is this rank's; afterwards every chunk is its owner's.
    pub(super) fn ring_allgather<T: Pod>(
        &self,
        op: &'static str,
        all: &mut [T],
        (chunks, algorithm): (&Chunks, Algorithm),
    ) -> Result<()> {
        let (rank, size) = (self.rank() as usize, self.size() as usize);
        let steps = schedule::allgather(algorithm, rank, size);
        let piece = chunks.piece_bytes::<T>(&steps);
        for step in &steps {
            let (send, recv) = (chunks.span(&step.send), chunks.span(&step.recv));
            let (out, into) = disjoint(all, send, recv);
            self.sendrecv_step(op, step, (out, into), piece)?;
        }
        Ok(())
    }

    /// Recursive doubling over the staged working buffer `ring.acc` (one
    /// chunk, the whole buffer, with host buffers as long): at distance
    /// `d` = 1, 2, 4, ... each rank swaps its whole partial result with rank
    /// `rank ^ d` and reduces, the lower rank's operand first on both
    /// sides, so that both get the same bits.
    pub(super) fn doubling_staged<T: Reducible>(
        &self,
        op: &'static str,
        ring: &Ring<T>,
    ) -> Result<()> {
        let (rank, size, n) = (self.rank() as usize, self.size() as usize, ring.acc.len());
        let mut d = 1;
        while d < size {
            let partner = (rank ^ d) as i32;
            let outbox = ring.outbox.part(op, 0..n)?;
            copy_out(op, &ring.acc, &outbox)?;
            {
                let out = outbox.as_slice().map_err(Error::device(op))?;
                let mut into = ring.inbox.typed.as_mut_slice().map_err(Error::device(op))?;
                raw::sendrecv(
                    op,
                    self.raw(),
                    bytemuck::cast_slice(&out),
                    partner,
                    bytemuck::cast_slice_mut(&mut into[..n]),
                    partner,
                    COLLECTIVE_TAG,
                )?;
            }
            let inbox = ring.inbox.part(op, 0..n)?;
            if rank & d == 0 {
                kernels::enqueue_reduce(op, self.context(), &ring.kernel, &ring.acc, &inbox)?;
            } else {
                // theirs OP mine: the partner's (lower) operand goes first.
                (ring.acc.enqueue_copy_from(&inbox)).map_err(Error::device(op))?;
                kernels::enqueue_reduce(op, self.context(), &ring.kernel, &ring.acc, &outbox)?;
            }
            self.context().flush().map_err(Error::device(op))?;
            d <<= 1;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    pub(super) fn disjoint_ranges_read_and_write_the_right_elements() {
        let mut all = [0, 1, 2, 3, 4, 5];
        let (out, into) = disjoint(&mut all, 4..6, 0..2);
        assert_eq!(out, &[4, 5]);
        into.copy_from_slice(&[9, 9]);
        let (out, into) = disjoint(&mut all, 0..2, 3..4);
        assert_eq!(out, &[9, 9]);
        into[0] = 7;
        assert_eq!(all, [9, 9, 2, 7, 4, 5]);
    }
}
