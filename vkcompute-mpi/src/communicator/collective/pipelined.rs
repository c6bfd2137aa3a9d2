//! The staged collectives in pieces (`pipeline`): where a collective's
//! chunks (one rank's share of its buffer) are longer than one piece, the
//! ring's steps (of reduce_scatter and allgather; an allreduce and a
//! reduce run MPI's own, `mpi.rs`) and the broadcast travel in
//! pieces through pinned host buffers of one piece each, and each piece's
//! device work (its copy to the device, its reduction, its copy out for
//! the next step) is enqueued as soon as it has arrived, so that the
//! device's copies and kernels overlap the transfers of the other pieces.
//! No collective stages a whole buffer in host memory on this path.
//!
//! Which collectives take it depends only on what the ranks agreed (the
//! element type, the length, the number of ranks), and the messages are
//! those of the unpipelined and mapped paths cut alike (`piece_len` of
//! the longest chunk), so ranks on different memory paths still pair.

use std::mem::size_of;
use std::ops::Range;

use vkcompute::{DeviceBuffer, HostBuffer};

use crate::communicator::Communicator;
use crate::element::{Element, ReduceOp, Reducible};
use crate::error::{Error, Result};
use crate::exec::{self, Ring, Slots};
use crate::plan;
use crate::plan::Chunks;
use crate::transport::kernels::ReduceKernels;
use crate::transport::place::{Buffer, Place};
use crate::wire::Header;

/// A pipelined reduction prepared before the ranks agreed: its kernel,
/// its working buffer on the device (holding this rank's input), and its
/// host buffers, the first step's pieces already on their way into them.
struct Prepared<T> {
    kernel: ReduceKernels,
    work: DeviceBuffer<T>,
    slots: Slots,
}

impl Communicator {
    /// The kernel, working buffer (`make_work`) and slots of a pipelined
    /// reduction over `chunks` in pieces of `piece`, with the first
    /// reduce-scatter step's pieces staged.
    fn prepare_pipelined<T: Reducible>(
        &self,
        op: &'static str,
        reduce: ReduceOp,
        (chunks, piece): (&Chunks, usize),
        make_work: impl FnOnce() -> Result<DeviceBuffer<T>>,
    ) -> Result<Prepared<T>> {
        let kernel = self.reducer.kernel::<T>(op, self.context(), reduce)?;
        let work = make_work()?;
        let slots = self.slots_for::<T>(op, chunks.longest(), piece)?;
        let ring = Ring {
            chunks: &chunks.ranges,
            piece,
            slots: &slots,
        };
        if let Err(e) = self.team().stage_first(op, &work, ring) {
            slots.keep(&self.pool);
            return Err(e);
        }
        Ok(Prepared {
            kernel,
            work,
            slots,
        })
    }

    /// The ring's steps `steps` over `p`'s working buffer, its chunks
    /// `chunks` in pieces of `piece`: reduced into it in the
    /// reduce-scatter, stored in the allgather (`ring_steps`).
    fn ring_in_work<T: Reducible>(
        &self,
        op: &'static str,
        p: &Prepared<T>,
        (chunks, piece): (&Chunks, usize),
        steps: Range<usize>,
    ) -> Result<()> {
        let ring = Ring {
            chunks: &chunks.ranges,
            piece,
            slots: &p.slots,
        };
        self.team().ring_steps::<T>(op, ring, steps, |a| {
            self.team().reduce_or_store(op, &p.work, &p.kernel, a)
        })
    }

    /// The slots of a ring whose chunks are at most `longest` elements of
    /// `T`, in pieces of `piece`.
    fn slots_for<T>(&self, op: &'static str, longest: usize, piece: usize) -> Result<Slots> {
        let count = plan::split(0..longest, piece).len();
        Slots::new(&self.pool, op, piece * size_of::<T>(), count)
    }

    /// A new device buffer of `len` elements, for a collective's work.
    fn work_buffer<T: Element>(&self, op: &'static str, len: usize) -> Result<DeviceBuffer<T>> {
        (self.context().enqueue_create_buffer::<T>(len)).map_err(Error::device(op))
    }

    /// Enqueues the copies of `place`'s elements `range`, in pieces of
    /// `piece`, into `slots` (one each), and submits them.
    fn stage_place<T: Element>(
        &self,
        op: &'static str,
        place: Place<'_, T>,
        (range, piece): (Range<usize>, usize),
        slots: &[HostBuffer<u8>],
    ) -> Result<()> {
        for (p, part) in plan::split(range, piece).iter().enumerate() {
            let slot = exec::typed::<T>(op, &slots[p], part.len())?;
            (place.copy_range_to(part.start, part.len(), &slot)).map_err(Error::device(op))?;
        }
        Ok(())
    }

    /// `reduce_scatter` of blocks longer than one piece: the ring's
    /// reduce-scatter in a device working copy of `send` whose blocks lie
    /// at `chunks` (a stride apart that the kernels can bind), then this
    /// rank's block into `recv`. A device error after the ranks agreed
    /// does not stop this rank's part of the messages and is returned at
    /// the end (`recv` is then undefined).
    pub(crate) fn reduce_scatter_pipelined<T, S, R>(
        &self,
        op: &'static str,
        (send, recv, reduce): (&S, &R, ReduceOp),
        header: Header,
        (chunks, piece): (Chunks, usize),
    ) -> Result<()>
    where
        T: Reducible,
        S: Buffer<T> + ?Sized,
        R: Buffer<T> + ?Sized,
    {
        let (m, size, rank) = (recv.elements(), self.size() as usize, self.rank() as usize);
        let acc_len = chunks.ranges.last().map_or(0, |r| r.end);
        let prepared = self.prepare_pipelined(op, reduce, (&chunks, piece), || {
            let acc = self.work_buffer::<T>(op, acc_len)?;
            for (k, block) in chunks.ranges.iter().enumerate() {
                acc.create_sub_buffer::<T>(block.start, m)
                    .and_then(|part| send.place().copy_range_to(k * m, m, &part))
                    .map_err(Error::device(op))?;
            }
            Ok(acc)
        });
        let p = self.agree(op, header, prepared)?;
        let reduced = self.ring_in_work(op, &p, (&chunks, piece), 0..size - 1);
        p.slots.keep(&self.pool);
        reduced?;
        let mine = &chunks.ranges[rank];
        p.work
            .create_sub_buffer::<T>(mine.start, mine.len())
            .and_then(|chunk| recv.place().copy_from(&chunk))
            .map_err(Error::device(op))
    }

    /// `allgather` of blocks longer than one piece: the ring's allgather steps,
    /// this rank's block staged from `send` into the first step's slots (and
    /// copied from there into its place in `recv`), every arriving piece copied
    /// into `recv` as it lands and forwarded in the next step from where it
    /// landed. Failures after the ranks agreed: as in
    /// [`reduce_scatter_pipelined`](Self::reduce_scatter_pipelined) (`recv`
    /// then undefined); a `recv` that cannot be written (the host holds it) is
    /// this rank's error alone, since the pieces it could not store are
    /// forwarded from their slots all the same.
    pub(crate) fn allgather_pipelined<T, S, R>(
        &self,
        op: &'static str,
        (send, recv): (&S, &R),
        header: Header,
        (chunks, piece): (Chunks, usize),
        checked: Result<()>,
    ) -> Result<()>
    where
        T: Element,
        S: Buffer<T> + ?Sized,
        R: Buffer<T> + ?Sized,
    {
        let (m, size, rank) = (send.elements(), self.size() as usize, self.rank() as usize);
        let first = size - 1;
        let prepared = checked.and_then(|()| {
            let slots = self.slots_for::<T>(op, m, piece)?;
            let out = slots.out_at(first);
            if let Err(e) = self.stage_place(op, send.place(), (0..m, piece), out) {
                slots.keep(&self.pool);
                return Err(e);
            }
            Ok(slots)
        });
        let slots = self.agree(op, header, prepared)?;
        let ring = Ring {
            chunks: &chunks.ranges,
            piece,
            slots: &slots,
        };
        let store = |range: &Range<usize>, piece: &HostBuffer<T>| {
            (recv
                .place()
                .copy_into_range(range.start, range.len(), piece))
            .map_err(Error::device(op))
        };
        let mine = plan::split(chunks.ranges[rank].clone(), piece);
        let own = mine.iter().enumerate().try_for_each(|(p, range)| {
            store(
                range,
                &exec::typed::<T>(op, &slots.out_at(first)[p], range.len())?,
            )
        });
        let gathered = self
            .team()
            .ring_steps::<T>(op, ring, first..2 * first, |a| store(a.range, &a.incoming));
        slots.keep(&self.pool);
        gathered.and(own)
    }

    /// `broadcast` of more than one piece through host memory: the root
    /// stages `buf` into one slot per piece, each `MPI_Ibcast` going out
    /// as its piece reaches the host; elsewhere each piece is copied into
    /// `buf` as it lands. Failures after the ranks agreed: as in
    /// [`reduce_scatter_pipelined`](Self::reduce_scatter_pipelined).
    pub(crate) fn broadcast_pipelined<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        (buf, root): (&B, i32),
        header: Header,
        piece: usize,
    ) -> Result<()> {
        let n = buf.elements();
        let count = plan::split(0..n, piece).len();
        let prepared = self.check_rank(op, root).and_then(|()| {
            let slots = self.pool.piece_slots(op, piece * size_of::<T>(), count)?;
            if self.rank() == root {
                if let Err(e) = self.stage_place(op, buf.place(), (0..n, piece), &slots) {
                    self.pool.keep_piece_slots(slots);
                    return Err(e);
                }
            }
            Ok(slots)
        });
        let slots = self.agree(op, header, prepared)?;
        let done =
            self.team()
                .broadcast_pieces::<T>(op, (n, piece), &slots, root, |range, incoming| {
                    (buf.place()
                        .copy_into_range(range.start, range.len(), &incoming))
                    .map_err(Error::device(op))
                });
        self.pool.keep_piece_slots(slots);
        done
    }
}
