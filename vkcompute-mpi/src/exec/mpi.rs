//! MPI's own allreduce (or reduce) of a buffer that does not map, in
//! pieces through pinned host memory ([`Team::reduce_by_mpi`]): each
//! piece is copied from the device into a slot of its own, reduced by
//! `MPI_Iallreduce` (`MPI_Ireduce`; between two ranks, a message to the
//! root reduced there with `MPI_Reduce_local`) into another once its copy
//! is through, and copied back once reduced (at a reduce's root only), the
//! slot then taking the piece `window` further on. The copies of some
//! pieces so overlap MPI's reductions of others, and no piece makes more
//! than its two device copies.

use std::cell::RefCell;
use std::mem::size_of;
use std::ops::Range;

use vkcompute::{Event, HostBuffer};

use super::{note, typed, Team};
use crate::element::Reducible;
use crate::error::{Error, Result};
use crate::plan::split;
use crate::raw::{self, Landing, Reduction, Source, Spare};
use crate::transport::place::Place;

/// A piece on its way into its slot: the event that says its copy is
/// through, or `None` where the copy could not be enqueued (zeros go out
/// in its place).
pub(crate) type Staged = Option<Event>;

/// Enqueues the copy of `range` of `place` into `slot`, and records the
/// event that says it is through.
pub(crate) fn stage_in<T: Reducible>(
    op: &'static str,
    place: Place<'_, T>,
    range: &Range<usize>,
    slot: &HostBuffer<u8>,
) -> Result<Event> {
    let host = typed::<T>(op, slot, range.len())?;
    place
        .copy_range_to(range.start, range.len(), &host)
        .and_then(|()| place.record_event())
        .map_err(Error::device(op))
}

impl Team<'_> {
    /// MPI's allreduce of `reduction` (its reduce, where it has a root)
    /// over the `n` elements of `place`, in pieces of `piece`, through
    /// `slots`: their first half holds the operands (one piece each at a
    /// time), the second half the results. The first `slots.len() / 2`
    /// pieces must be on their way into their operand slots, `staged`
    /// saying when each is through ([`stage_in`]). Each reduced piece is
    /// copied back into `place` (on every rank, or at the root alone) and
    /// its operand slot takes the piece `slots.len() / 2` further on. The
    /// same MPI calls as MPI's allreduce of a mapping in the same pieces,
    /// so ranks on either route pair.
    ///
    /// A device error (a copy, a slot) does not stop this rank's part of
    /// the reductions and is returned at the end: zeros go in for a piece
    /// this rank could not read, a piece it could not write back is
    /// dropped. An MPI error or a timeout ends it at once, once MPI no
    /// longer touches the slots.
    pub(crate) fn reduce_by_mpi<T: Reducible>(
        &self,
        op: &'static str,
        (place, reduction): (Place<'_, T>, Reduction),
        (n, piece): (usize, usize),
        slots: &[HostBuffer<u8>],
        staged: Vec<Staged>,
    ) -> Result<()> {
        let pieces = split(0..n, piece);
        let window = (slots.len() / 2).max(1);
        let (operands, results) = slots.split_at(window);
        let size = size_of::<T>();
        let gets_result = reduction.lands_at(self.rank);
        // Shared by the three callbacks, which the raw layer calls in turn.
        let state = RefCell::new((staged, None::<Error>));
        let ready = |p: usize| {
            let (staged, failed) = &mut *state.borrow_mut();
            match &staged[p % window] {
                Some(event) => match event.is_complete() {
                    Ok(done) => done,
                    Err(e) => {
                        note(failed, Err(Error::device(op)(e)));
                        true
                    }
                },
                None => true,
            }
        };
        let memory = |p: usize| {
            let (staged, failed) = &mut *state.borrow_mut();
            let bytes = pieces[p].len() * size;
            let source = match (&staged[p % window], operands[p % window].as_slice()) {
                (Some(_), Ok(slice)) => Source::Slot(slice, bytes),
                (_, read) => {
                    if let Err(e) = read {
                        note(failed, Err(Error::device(op)(e)));
                    }
                    Source::Spare(Spare::zeroed(bytes))
                }
            };
            let landing = match results[p % window].as_mut_slice() {
                Ok(slice) => Landing::Slot(slice, bytes),
                Err(e) => {
                    note(failed, Err(Error::device(op)(e)));
                    Landing::Spare(Spare::zeroed(bytes))
                }
            };
            (source, landing)
        };
        let reduced = |p: usize, landed: bool| {
            let (staged, failed) = &mut *state.borrow_mut();
            let range = &pieces[p];
            if landed && gets_result {
                let back = typed::<T>(op, &results[p % window], range.len()).and_then(|host| {
                    (place.copy_into_range(range.start, range.len(), &host))
                        .map_err(Error::device(op))
                });
                note(failed, back);
            }
            staged[p % window] = pieces.get(p + window).and_then(|next| {
                let slot = &operands[p % window];
                stage_in(op, place, next, slot)
                    .map_err(|e| note(failed, Err(e)))
                    .ok()
            });
        };
        let count = (pieces.len(), window);
        let done = raw::reduce_pieces(op, self.raw, reduction, count, ready, memory, reduced);
        let (_, failed) = state.into_inner();
        done.and(failed.map_or(Ok(()), Err))
    }
}
