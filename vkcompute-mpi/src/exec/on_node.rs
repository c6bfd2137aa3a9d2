//! The steps of the collectives on the same-node path, once the ranks
//! agreed and imported each other's collective memory (the façade's
//! `communicator/collective/on_node.rs` fills this rank's and agrees): no
//! data goes through MPI or host memory, each rank reads the others'
//! memory on its device. Copies out of the ranks' memory, the reduction
//! of this rank's chunk of every rank's memory into its own, the status
//! exchange that says every rank's part is done, and the barrier after
//! which no rank reads another's memory any more.

use std::ops::Range;

use vkcompute::DeviceBuffer;

use super::Team;
use crate::element::{Element, ReduceOp, Reducible};
use crate::error::{Error, Result};
use crate::raw;
use crate::transport::kernels;
use crate::transport::place::Place;
use crate::transport::same_node;

/// Every rank's collective memory as a collective on the path sees it once
/// the ranks agreed, by rank: this rank's own where it filled it, the
/// others' imports where their headers announce one.
pub(crate) struct Memories(pub(crate) Vec<Option<DeviceBuffer<u8>>>);

impl Memories {
    /// Rank `q`'s memory; an error where its header announced none.
    fn of(&self, op: &'static str, q: usize) -> Result<&DeviceBuffer<u8>> {
        self.0
            .get(q)
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::Protocol {
                op,
                peer: q as i32,
                detail: "a collective's header on the same-node path without its shared memory"
                    .into(),
            })
    }
}

impl Team<'_> {
    /// The last phase of every collective on the path: a barrier, after
    /// which no rank reads another's memory any more; then this rank's own
    /// outcome, `done`.
    pub(crate) fn leave_on_node(&self, op: &'static str, done: Result<()>) -> Result<()> {
        raw::barrier(op, self.raw)?;
        done
    }

    /// Copies, for each `(q, from, to)` of `parts`, elements `from` of rank
    /// `q`'s memory into `place` from element `to` on (between an acquire
    /// and a release of that memory), and waits for the device, even where
    /// a copy failed: nothing reads the memory once this returns.
    pub(crate) fn copy_out_of<T: Element>(
        &self,
        op: &'static str,
        memory: &Result<Memories>,
        place: Place<'_, T>,
        parts: impl IntoIterator<Item = (usize, Range<usize>, usize)>,
    ) -> Result<()> {
        let memory = memory.as_ref().map_err(Clone::clone)?;
        let copied = parts.into_iter().try_for_each(|(q, from, to)| {
            same_node::shared_part::<T>(op, memory.of(op, q)?, &from, |part| {
                (place.copy_into_range(to, part.len(), part)).map_err(Error::device(op))
            })
        });
        let waited = self.ctx.synchronize().map_err(Error::device(op));
        copied.and(waited)
    }

    /// Reduces elements `range` of every rank's memory into this rank's
    /// own, its own operand first and the others' in rank order (up to
    /// three a pass: `kernels::enqueue_reduce_operands`), and waits for the
    /// device (even where an enqueue failed: nothing reads the memory once
    /// this returns).
    pub(crate) fn reduce_own_chunk<T: Reducible>(
        &self,
        op: &'static str,
        reducer: (&kernels::Reducer, ReduceOp),
        memory: &Memories,
        range: &Range<usize>,
    ) -> Result<()> {
        // This rank's memory first (the accumulator), then the others'.
        let order =
            std::iter::once(self.rank).chain((0..memory.0.len()).filter(|&q| q != self.rank));
        let reduced =
            (order.map(|q| memory.of(op, q)).collect::<Result<Vec<_>>>()).and_then(|all| {
                same_node::shared_parts::<T>(op, &all, range, |parts| match parts.split_first() {
                    Some((acc, others)) => {
                        kernels::enqueue_reduce_operands(op, self.ctx, reducer, acc, others)
                    }
                    None => Ok(()),
                })
            });
        let waited = self.ctx.synchronize().map_err(Error::device(op));
        reduced.and(waited)
    }

    /// Every rank's word on its part (`local`): this rank's error first,
    /// then [`Error::RemoteFailure`] naming the first rank that failed (an
    /// exchange of one byte per rank, within the timeout).
    pub(crate) fn all_ok(&self, op: &'static str, local: Result<()>) -> Result<()> {
        let mut all = vec![0u8; self.size];
        raw::allgather(op, self.raw, &[u8::from(local.is_ok())], &mut all)?;
        local?;
        match all.iter().position(|&ok| ok == 0) {
            Some(failed) => Err(Error::RemoteFailure {
                op,
                rank: self.rank as i32,
                failed: failed as i32,
                reason: "a local error on that rank; its own call returned it",
            }),
            None => Ok(()),
        }
    }
}
