//! `allreduce` and `reduce` by MPI's own in pieces
//! (`AllreduceAlgorithm::Mpi`, where the ring would run with chunks of
//! more than one piece): every rank posts one `MPI_Iallreduce` (or
//! `MPI_Ireduce`) a piece of the buffer, in the same pieces, whichever
//! route its buffer takes. An allreduce of a device buffer that maps in
//! place reduces into the mapping (from a copy of the piece: MPI's
//! in-place constant is not in rsmpi's bindings); every other buffer goes
//! through pinned host buffers, each piece copied from the device as the
//! others are reduced, and copied back once reduced, at a reduce's root
//! only (`exec::reduce_by_mpi`). MPI's result is the same bits on every
//! rank.

use std::mem::size_of;
use std::sync::atomic::{AtomicU64, Ordering};

use vkcompute::DeviceBuffer;

use crate::communicator::Communicator;
use crate::element::{ReduceOp, Reducible};
use crate::error::{Error, Result};
use crate::exec::{self, Staged};
use crate::plan;
use crate::raw::{self, Landing, Reduction, Source, Spare};
use crate::transport::place::Buffer;
use crate::wire::{Header, COLLECTIVE_TAG};

/// The most pieces of a staged buffer under way at once (each in two
/// pinned host buffers, its operand and its result).
const SLOTS: usize = 4;

/// MPI's datatype and operation for `reduce` over `T`. Every `Reducible`
/// type has one; a failure fails the collective's header.
fn mpi_reduction<T: Reducible>(op: &'static str, reduce: ReduceOp) -> Result<Reduction> {
    Reduction::new(T::TYPE, reduce).ok_or_else(|| Error::InvalidLength {
        op,
        detail: format!("MPI has no reduction of {}", T::TYPE),
    })
}

impl Communicator {
    /// `allreduce` of `buf` by MPI's allreduce in pieces of `piece`: in
    /// `in_place`'s mapping where it is given (a device buffer that maps
    /// in place), else through pinned host buffers. A failure of this
    /// rank's before the ranks agree (a buffer mapped to the host, an
    /// allocation) fails its header; after it, a device error does not
    /// stop this rank's part of the reductions and is returned at the end
    /// (`buf` is then undefined), an MPI error or a timeout ends it at once.
    pub(super) fn allreduce_mpi<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        (buf, reduce): (&B, ReduceOp),
        header: Header,
        (piece, in_place): (usize, Option<&DeviceBuffer<T>>),
    ) -> Result<()> {
        let n = buf.elements();
        let pieces = plan::split(0..n, piece);
        let reduction = mpi_reduction::<T>(op, reduce);
        let window = pieces.len().min(SLOTS);
        let piece_bytes = piece * size_of::<T>();
        if let Some(dev) = in_place {
            // A mapped buffer fails here, before the ranks agree.
            let prepared = reduction.and_then(|reduction| {
                let mapping = dev.map_to_host().map_err(Error::device(op))?;
                let copies = self.pool.piece_slots(op, piece_bytes, window)?;
                Ok((reduction, mapping, copies))
            });
            let (reduction, mut mapping, copies) = self.agree(op, header, prepared)?;
            self.mpi_allreduces.fetch_add(1, Ordering::Relaxed);
            let done = {
                let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut mapping);
                let mut parts = bytes.chunks_mut(piece_bytes);
                let failed = std::cell::RefCell::new(None);
                let count = (pieces.len(), window);
                let done = raw::reduce_pieces(
                    op,
                    self.raw(),
                    reduction,
                    count,
                    |_| true,
                    |p| {
                        // MPI's result lands where the operand lies: the
                        // operand goes from a copy.
                        let part = parts.next().unwrap_or_default();
                        let len = part.len();
                        let copy = &copies[p % window];
                        let source = copy
                            .as_mut_slice()
                            .map(|mut s| s[..len].copy_from_slice(part))
                            .and_then(|()| copy.as_slice())
                            .map(|s| Source::Slot(s, len))
                            .unwrap_or_else(|e| {
                                failed.borrow_mut().get_or_insert(Error::device(op)(e));
                                Source::Spare(Spare::copy_of(part))
                            });
                        (source, Landing::Memory(part))
                    },
                    |_, _| {},
                );
                done.and(failed.into_inner().map_or(Ok(()), Err))
            };
            self.pool.keep_piece_slots(copies);
            done?;
            return mapping.finish().map_err(Error::device(op));
        }
        let counted = &self.mpi_allreduces;
        self.reduce_staged_by_mpi(op, (buf, reduction), header, (piece, counted))
    }

    /// `reduce` of `buf` to `root` by MPI's reduce in pieces of `piece`,
    /// through pinned host buffers (the other ranks' `buf` is left as it
    /// was). Failures: as [`allreduce_mpi`](Self::allreduce_mpi)'s, the
    /// root's `buf` undefined after a device error.
    pub(super) fn reduce_mpi<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        (buf, reduce, root): (&B, ReduceOp, i32),
        header: Header,
        piece: usize,
    ) -> Result<()> {
        let reduction = (self.check_rank(op, root))
            .and_then(|()| mpi_reduction::<T>(op, reduce))
            .map(|reduction| match self.size() {
                2 => reduction.between_two(self.rank(), root, COLLECTIVE_TAG),
                _ => reduction.to_root(root),
            });
        let counted = &self.mpi_reduces;
        self.reduce_staged_by_mpi(op, (buf, reduction), header, (piece, counted))
    }

    /// MPI's `reduction` of `buf` in pieces of `piece` through pinned host
    /// buffers, once the ranks agree on `header` (a failure to make the
    /// reduction, or to stage the first pieces, fails it); counted in
    /// `counted`.
    fn reduce_staged_by_mpi<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        (buf, reduction): (&B, Result<Reduction>),
        header: Header,
        (piece, counted): (usize, &AtomicU64),
    ) -> Result<()> {
        let n = buf.elements();
        let pieces = plan::split(0..n, piece);
        let window = pieces.len().min(SLOTS);
        let piece_bytes = piece * size_of::<T>();
        let prepared = reduction.and_then(|reduction| {
            let slots = self.pool.piece_slots(op, piece_bytes, 2 * window)?;
            let staged: Result<Vec<Staged>> = (pieces.iter().zip(&slots[..window]))
                .map(|(range, slot)| exec::stage_in(op, buf.place(), range, slot).map(Some))
                .collect();
            match staged {
                Ok(staged) => Ok((reduction, slots, staged)),
                Err(e) => {
                    self.pool.keep_piece_slots(slots);
                    Err(e)
                }
            }
        });
        let (reduction, slots, staged) = self.agree(op, header, prepared)?;
        counted.fetch_add(1, Ordering::Relaxed);
        let done =
            self.team()
                .reduce_by_mpi(op, (buf.place(), reduction), (n, piece), &slots, staged);
        self.pool.keep_piece_slots(slots);
        done
    }
}
