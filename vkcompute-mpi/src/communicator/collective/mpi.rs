//! `allreduce` by MPI's own allreduce in pieces (`AllreduceAlgorithm::Mpi`,
//! where the ring would run with chunks of more than one piece): every
//! rank posts one `MPI_Iallreduce` a piece of the buffer, in the same
//! pieces, whichever route its buffer takes: into the mapping of a device
//! buffer that maps in place (from a copy of the piece: MPI's in-place
//! constant is not in rsmpi's bindings), else through pinned host
//! buffers, each piece copied from the device as the others are reduced
//! and copied back once reduced (`exec::allreduce_by_mpi`). MPI's result
//! is the same bits on every rank.

use std::mem::size_of;
use std::sync::atomic::Ordering;

use vkcompute::DeviceBuffer;

use crate::communicator::Communicator;
use crate::element::{ReduceOp, Reducible};
use crate::error::{Error, Result};
use crate::exec::{self, Staged};
use crate::plan;
use crate::raw::{self, Landing, Reduction, Source};
use crate::transport::place::Buffer;
use crate::wire::Header;

/// The most pieces of a staged buffer under way at once (each in two
/// pinned host buffers, its operand and its result).
const SLOTS: usize = 4;

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
        // Every `Reducible` type has one; a failure here fails the header.
        let reduction = Reduction::new(T::TYPE, reduce).ok_or_else(|| Error::InvalidLength {
            op,
            detail: format!("MPI has no reduction of {}", T::TYPE),
        });
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
                let done = raw::allreduce_pieces(
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
                                Source::Spare(part.to_vec())
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
        self.mpi_allreduces.fetch_add(1, Ordering::Relaxed);
        let done =
            self.team()
                .allreduce_by_mpi(op, (buf.place(), reduction), (n, piece), &slots, staged);
        self.pool.keep_piece_slots(slots);
        done
    }
}
