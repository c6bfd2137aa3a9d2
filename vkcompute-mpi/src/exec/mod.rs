//! The executor of the collectives, below the façade, which checks,
//! agrees and plans: the chunks that travel whole (`whole.rs`, on a
//! working buffer's mapping or its pinned mirror), MPI's allreduce in
//! pieces (`mpi.rs`), the same-node path's steps (`on_node.rs`), and,
//! here, collectives in pieces
//! (`communicator/collective/pipelined.rs` builds them on it): each
//! step's chunk travels as several MPI messages,
//! through pinned host buffers of one piece each (separate allocations,
//! so that MPI holds one while the device copies another), and the device
//! work of a piece is enqueued as soon as it has arrived. The
//! device-to-host copy of a piece for the next step, the MPI transfers of
//! the others and the reduction kernels so overlap; in the ring's
//! allgather a received piece is copied to the device while MPI forwards
//! it from the same host buffer (no copy back out). A step is
//! point-to-point messages (the ring's steps) or `MPI_Ibcast`s (a
//! broadcast's pieces).
//!
//! The messages are the same as those of the collectives whose chunks
//! travel whole (`whole.rs`, `Whole`: `raw::sendrecv_pieces` posts a
//! step's pieces at once, `raw::broadcast` a broadcast's), so ranks on
//! different routes work together: the piece length depends only on what
//! the ranks agreed (the element type and the chunks). MPI's own
//! allreduce and reduce in pieces: `mpi.rs`.
mod mpi;
mod on_node;
mod whole;

use std::mem::size_of;
use std::ops::Range;

use bytemuck::Pod;
use vkcompute::{DeviceBuffer, HostBuffer};

use vkcompute::DeviceContext;

use crate::element::Reducible;
use crate::error::{Error, Result};
use crate::plan::split;
use crate::raw::Comm;
use crate::raw::{self, Landing, Source, Spare, Wire};
use crate::transport::kernels::{self, ReduceKernels};
use crate::transport::pool::StagingPool;
use crate::wire::COLLECTIVE_TAG;

pub(crate) use mpi::{stage_in, Staged};
pub(crate) use on_node::Memories;
pub(crate) use whole::{with_pinned, Pinned, View, Whole};

/// The pinned host buffers of a pipelined ring: for each parity of the
/// step, one per piece of the longest chunk, for outgoing pieces copied
/// from the device (`out`) and incoming ones (`inbox`).
pub(crate) struct Slots {
    out: [Vec<HostBuffer<u8>>; 2],
    inbox: [Vec<HostBuffer<u8>>; 2],
}

impl Slots {
    /// Slots for chunks cut into at most `count` pieces of `piece_bytes`.
    pub(crate) fn new(
        pool: &StagingPool,
        op: &'static str,
        piece_bytes: usize,
        count: usize,
    ) -> Result<Slots> {
        let mut all = pool.piece_slots(op, piece_bytes, 4 * count)?;
        let mut take = || all.drain(..count).collect::<Vec<_>>();
        Ok(Slots {
            out: [take(), take()],
            inbox: [take(), take()],
        })
    }

    /// The slots step `g` of a ring sends its device's pieces from.
    pub(crate) fn out_at(&self, g: usize) -> &[HostBuffer<u8>] {
        &self.out[g % 2]
    }

    /// Gives the buffers back for reuse.
    pub(crate) fn keep(self, pool: &StagingPool) {
        let [a, b] = self.out;
        let [c, d] = self.inbox;
        pool.keep_piece_slots(a.into_iter().chain(b).chain(c).chain(d).collect());
    }
}

/// A pipelined ring: its chunks (one per rank, chunk `k` owned by rank
/// `k` at the end of the reduce-scatter), the piece length (elements)
/// they travel in, and the host buffers they travel through.
#[derive(Clone, Copy)]
pub(crate) struct Ring<'a> {
    pub(crate) chunks: &'a [Range<usize>],
    pub(crate) piece: usize,
    pub(crate) slots: &'a Slots,
}

/// A piece of a ring that has landed in its slot.
pub(crate) struct Arrived<'a, T> {
    /// Where it belongs in the working buffer (or the result).
    pub(crate) range: &'a Range<usize>,
    /// The piece, in its slot.
    pub(crate) incoming: HostBuffer<T>,
    /// `Some` in the reduce-scatter, where the piece is to be reduced into
    /// the working buffer: with the slot the reduced piece goes out from
    /// in the next step, where there is one. `None` in the allgather,
    /// where it is stored.
    pub(crate) reduce: Option<Option<&'a HostBuffer<u8>>>,
}

/// Keeps the first error.
fn note(failed: &mut Option<Error>, result: Result<()>) {
    if let Err(e) = result {
        failed.get_or_insert(e);
    }
}

/// The first `len` elements of slot `slot` as a buffer of `T`.
pub(crate) fn typed<T: Pod>(
    op: &'static str,
    slot: &HostBuffer<u8>,
    len: usize,
) -> Result<HostBuffer<T>> {
    slot.create_sub_buffer::<T>(0, len)
        .map_err(Error::device(op))
}

/// One step's messages: pieces `sends` of the working buffer from the host
/// buffers `from` (one each), pieces `recvs` into `into`, over `wire`.
struct Step<'s> {
    wire: Wire,
    sends: Vec<Range<usize>>,
    from: &'s [HostBuffer<u8>],
    recvs: Vec<Range<usize>>,
    into: &'s [HostBuffer<u8>],
}

/// The ranks a collective runs over, as the executor sees them: the MPI
/// communicator, this rank and the number of ranks, and the context whose
/// stream runs the device work.
#[derive(Clone, Copy)]
pub(crate) struct Team<'a> {
    pub(crate) raw: &'a Comm,
    pub(crate) rank: usize,
    pub(crate) size: usize,
    pub(crate) ctx: &'a DeviceContext,
}

impl Team<'_> {
    /// What a ring over the working buffer `work` does with an arrived
    /// piece: reduces it into `work` (and stages the result out for the
    /// next step, where there is one), or stores it there.
    pub(crate) fn reduce_or_store<T: Reducible>(
        &self,
        op: &'static str,
        work: &DeviceBuffer<T>,
        kernel: &ReduceKernels,
        piece: Arrived<'_, T>,
    ) -> Result<()> {
        let range = piece.range;
        let part = work
            .create_sub_buffer::<T>(range.start, range.len())
            .map_err(Error::device(op))?;
        match piece.reduce {
            Some(next) => {
                kernels::enqueue_reduce(op, self.ctx, kernel, &part, &piece.incoming)?;
                if let Some(next) = next {
                    self.stage_out(op, work, range, next)?;
                }
            }
            None => (part.enqueue_copy_from(&piece.incoming)).map_err(Error::device(op))?,
        }
        self.flush(op)
    }

    /// The steps `steps` of the ring (of `0..2 (size - 1)`: the
    /// reduce-scatter's `size - 1`, then the allgather's) over `ring`'s
    /// chunks in pieces, through its slots: the first step's outgoing
    /// pieces must be on their way into `ring.slots.out_at(steps.start)`
    /// (`stage_first` for the reduce-scatter). `arrived` is called for each
    /// piece as it lands in its slot, in order; in the reduce-scatter it
    /// reduces the piece and, where `Arrived::reduce` holds a slot (there
    /// is a next step), enqueues the copy of the reduced piece into it,
    /// which the next step sends; in the allgather it stores the piece,
    /// which the next step forwards from where it landed.
    ///
    /// A device error (from `arrived` or a slot) after the ranks agreed
    /// does not stop this rank's part of the messages and is returned at
    /// the end: after a failed reduction or slot, zeros go out in place of
    /// the data; a piece that the allgather could not store (a
    /// destination the host holds, say) is forwarded all the same, so
    /// that only this rank's result is wrong. An MPI error or timeout ends
    /// it at once, once MPI no longer touches the host buffers.
    pub(crate) fn ring_steps<T: Pod>(
        &self,
        op: &'static str,
        ring: Ring<'_>,
        steps: Range<usize>,
        mut arrived: impl FnMut(Arrived<'_, T>) -> Result<()>,
    ) -> Result<()> {
        let Ring {
            chunks,
            piece,
            slots,
        } = ring;
        let (rank, size) = (self.rank, self.size);
        let right = ((rank + 1) % size) as i32;
        let left = ((rank + size - 1) % size) as i32;
        // What this rank sends is wrong (zeros go out instead) once a
        // reduction or a slot failed; a piece the allgather could not
        // store is this rank's own error: it is still forwarded, from the
        // slot it landed in, so the others' results stay right.
        let mut failed = None;
        let mut unstored = None;
        for g in steps.clone() {
            let reducing = g < size - 1;
            let (send, recv) = if reducing {
                (
                    (rank + 2 * size - g - 1) % size,
                    (rank + 2 * size - g - 2) % size,
                )
            } else {
                let t = g - (size - 1);
                ((rank + size - t) % size, (rank + 2 * size - t - 1) % size)
            };
            // The reduce-scatter and the first allgather step send what the
            // device copied out; later allgather steps forward what came in
            // the step before, from where it landed.
            let from = if g < size {
                slots.out_at(g)
            } else {
                &slots.inbox[(g - 1) % 2]
            };
            let step = Step {
                wire: Wire::Pair {
                    dest: right,
                    source: left,
                    tag: COLLECTIVE_TAG,
                },
                sends: split(chunks[send].clone(), piece),
                from,
                recvs: split(chunks[recv].clone(), piece),
                into: &slots.inbox[g % 2],
            };
            // The reduced pieces go out in the next step (the allgather's
            // first, after the last reduction: this rank's chunk).
            let next_out = (g + 1 < steps.end).then(|| slots.out_at(g + 1));
            self.exchange_step::<T>(op, &step, &mut failed, |p, range| {
                if range.is_empty() {
                    return Ok(());
                }
                let piece = Arrived {
                    range,
                    incoming: typed::<T>(op, &step.into[p], range.len())?,
                    reduce: reducing.then(|| next_out.map(|out| &out[p])),
                };
                if reducing {
                    return arrived(piece);
                }
                note(&mut unstored, arrived(piece));
                Ok(())
            })?;
        }
        failed.or(unstored).map_or(Ok(()), Err)
    }

    /// `MPI_Bcast` from `root` of `n` elements in pieces of `piece`, one
    /// `MPI_Ibcast` each through a slot of its own in `slots`: at the root
    /// the pieces must be on their way into their slots, and each goes out
    /// once it is there; elsewhere `arrived(range, piece)` is called for
    /// each piece as it lands. The same messages as `raw::broadcast` with
    /// the same piece. Failures: as [`ring_steps`](Self::ring_steps), but
    /// a timeout aborts the job (MPI cannot cancel a collective).
    pub(crate) fn broadcast_pieces<T: Pod>(
        &self,
        op: &'static str,
        (n, piece): (usize, usize),
        slots: &[HostBuffer<u8>],
        root: i32,
        mut arrived: impl FnMut(&Range<usize>, HostBuffer<T>) -> Result<()>,
    ) -> Result<()> {
        let pieces = split(0..n, piece);
        let (sends, recvs) = if self.rank as i32 == root {
            (pieces, Vec::new())
        } else {
            (Vec::new(), pieces)
        };
        let step = Step {
            wire: Wire::Broadcast { root },
            sends,
            from: slots,
            recvs,
            into: slots,
        };
        let mut failed = None;
        self.exchange_step::<T>(op, &step, &mut failed, |p, range| {
            arrived(range, typed::<T>(op, &step.into[p], range.len())?)
        })?;
        failed.map_or(Ok(()), Err)
    }

    /// Starts the first step's outgoing pieces of `work` on their way to
    /// the host (before the ranks agree: a buffer mapped to the host fails
    /// here).
    pub(crate) fn stage_first<T: Pod>(
        &self,
        op: &'static str,
        work: &DeviceBuffer<T>,
        ring: Ring<'_>,
    ) -> Result<()> {
        let (rank, size) = (self.rank, self.size);
        let first = split(ring.chunks[(rank + size - 1) % size].clone(), ring.piece);
        for (p, range) in first.iter().enumerate() {
            self.stage_out(op, work, range, &ring.slots.out_at(0)[p])?;
        }
        self.flush(op)
    }

    /// Submits the work enqueued so far.
    pub(crate) fn flush(&self, op: &'static str) -> Result<()> {
        self.ctx.flush().map_err(Error::device(op))
    }

    /// Enqueues the copy of `range` of `work` into `slot`.
    pub(crate) fn stage_out<T: Pod>(
        &self,
        op: &'static str,
        work: &DeviceBuffer<T>,
        range: &Range<usize>,
        slot: &HostBuffer<u8>,
    ) -> Result<()> {
        if range.is_empty() {
            return Ok(());
        }
        let host = typed::<T>(op, slot, range.len())?;
        work.create_sub_buffer::<T>(range.start, range.len())
            .and_then(|part| part.enqueue_copy_to(&host))
            .map_err(Error::device(op))
    }

    /// Posts the receives of `step`, then its sends one by one as each
    /// outgoing piece reaches the host, then waits for the incoming pieces
    /// in order, calling `arrived(p, range)` for each once it is in its
    /// slot (and the slot free for the device), and last for the sends
    /// (`raw::exchange_pieces`). Device errors go to `failed`, and zeros
    /// go out in place of the data once one did; MPI errors are returned,
    /// once MPI no longer touches any of the step's memory.
    fn exchange_step<T: Pod>(
        &self,
        op: &'static str,
        step: &Step<'_>,
        failed: &mut Option<Error>,
        mut arrived: impl FnMut(usize, &Range<usize>) -> Result<()>,
    ) -> Result<()> {
        let size = size_of::<T>();
        let mut landings = Vec::with_capacity(step.recvs.len());
        for (p, range) in step.recvs.iter().enumerate() {
            let bytes = range.len() * size;
            landings.push(match step.into[p].as_mut_slice() {
                Ok(slice) => Landing::Slot(slice, bytes),
                Err(e) => {
                    failed.get_or_insert(Error::device(op)(e));
                    Landing::Spare(Spare::zeroed(bytes))
                }
            });
        }
        // `source` and `arrived` both note failures: they take turns.
        let failed = std::cell::RefCell::new(failed);
        let source = |p: usize| {
            let bytes = step.sends[p].len() * size;
            // Waits for the copy of this piece to the host.
            let mut failed = failed.borrow_mut();
            match step.from[p].as_slice() {
                Ok(slice) if failed.is_none() => Source::Slot(slice, bytes),
                Ok(_) => Source::Spare(Spare::zeroed(bytes)),
                Err(e) => {
                    failed.get_or_insert(Error::device(op)(e));
                    Source::Spare(Spare::zeroed(bytes))
                }
            }
        };
        let landed = |p: usize, in_slot: bool| {
            let mut failed = failed.borrow_mut();
            if in_slot && failed.is_none() {
                let result = arrived(p, &step.recvs[p]);
                note(&mut failed, result);
            }
        };
        let sends = (landings, step.sends.len());
        raw::exchange_pieces(op, self.raw, step.wire, sends, source, landed)
    }
}
