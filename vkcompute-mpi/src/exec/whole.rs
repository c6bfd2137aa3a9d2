//! The executor of the collectives whose chunks travel whole (one
//! message each, of at most one piece: [`Whole`]), on both ways a working
//! buffer meets MPI ([`View`]): in its own mapping, where it maps
//! directly and the kernels bind it in place, or through a pinned mirror.
//! The algorithms are written once over the view: the reduce-scatter's
//! steps (ring or halving, `plan::schedule`), the direct reduce-scatter,
//! recursive doubling, the allgather, and the gather to a root. Every
//! step sends the same MPI messages on either view (the pieces of
//! `Chunks::piece_bytes`, as the pipelined executor's), so ranks on
//! different views pair.
//!
//! Failures after the ranks agreed (a mapping that another thread holds,
//! a device error) do not stop this rank's part of the messages: zeros go
//! out in place of its data from then on, and the first error is
//! returned at the end ([`Whole::finish`]); this rank's result is then
//! undefined, the others' right. An MPI error or a timeout ends the
//! collective at once.

use std::iter;
use std::mem::size_of;
use std::ops::Range;

use bytemuck::Pod;
use vkcompute::{DeviceBuffer, HostBuffer, MappedBuffer};

use super::Team;
use crate::element::Reducible;
use crate::error::{Error, Result};
use crate::plan::schedule::{self, Algorithm, Step};
use crate::plan::{self, Chunks};
use crate::raw::{self, Patience};
use crate::transport::kernels::{self, ReduceKernels};
use crate::transport::place;
use crate::transport::pool::StagingPool;
use crate::wire::COLLECTIVE_TAG;

/// A pinned host buffer of `len` elements of `T` from the communicator's
/// staging buffers (given back with [`keep`](Self::keep)).
pub(crate) struct Pinned<T> {
    raw: HostBuffer<u8>,
    pub(crate) typed: HostBuffer<T>,
}

impl<T: Pod> Pinned<T> {
    pub(crate) fn new(pool: &StagingPool, op: &'static str, len: usize) -> Result<Self> {
        let raw = pool.staging(op, len * size_of::<T>())?;
        let typed = raw
            .create_sub_buffer::<T>(0, len)
            .map_err(Error::device(op))?;
        Ok(Pinned { raw, typed })
    }

    /// Elements `range` (a view).
    pub(crate) fn part(&self, op: &'static str, range: Range<usize>) -> Result<HostBuffer<T>> {
        self.typed
            .create_sub_buffer::<T>(range.start, range.len())
            .map_err(Error::device(op))
    }

    /// Gives the buffer back for reuse.
    pub(crate) fn keep(self, pool: &StagingPool) {
        drop(self.typed);
        pool.keep_staging(self.raw);
    }
}

/// How the host sees a working buffer, for MPI to read and write.
pub(crate) enum View<'a, T: Pod> {
    /// The working buffer's own mapping (it maps directly): mapped for
    /// each step, once the kernels before it are done. The mapping held is
    /// the first, taken before the ranks agreed (so that a buffer mapped
    /// elsewhere fails this rank's header).
    Mapping(Option<MappedBuffer<'a, T>>),
    /// A pinned host buffer as long as the working buffer, at the same
    /// offsets: what a step sends is copied into it on the device first,
    /// and what MPI writes into it for the working buffer is copied back.
    Mirror(&'a HostBuffer<T>),
    /// A pinned host buffer as long as the longest range a step sends,
    /// which each range is copied to the start of: for the reduce-scatter's
    /// steps and the sends of a gather only (the allgather, the direct
    /// reduce-scatter and doubling see the whole buffer and take a mirror).
    Outbox(&'a HostBuffer<T>),
}

/// One whole-chunk collective under way on this rank: the working buffer
/// on the device, its view, the reduction kernels, the pinned buffer
/// that incoming chunks land in, and the first failure after the ranks
/// agreed.
pub(crate) struct Whole<'a, T: Pod> {
    team: Team<'a>,
    op: &'static str,
    work: &'a DeviceBuffer<T>,
    view: View<'a, T>,
    kernel: &'a ReduceKernels,
    inbox: &'a HostBuffer<T>,
    failed: Option<Error>,
    /// Zeros that stand in for the view once this rank failed.
    spare: Vec<T>,
}

impl<'a, T: Reducible> Whole<'a, T> {
    pub(crate) fn new(
        (team, op): (Team<'a>, &'static str),
        (work, view): (&'a DeviceBuffer<T>, View<'a, T>),
        kernel: &'a ReduceKernels,
        inbox: &'a HostBuffer<T>,
    ) -> Self {
        Whole {
            team,
            op,
            work,
            view,
            kernel,
            inbox,
            failed: None,
            spare: Vec::new(),
        }
    }

    /// Keeps the first error.
    fn note(&mut self, result: Result<()>) {
        super::note(&mut self.failed, result);
    }

    /// Enqueues the copies of the working buffer's elements `fresh` into
    /// a mirror or an outbox (nothing for a mapping) and submits them, for
    /// the next view to see; enqueued before a wait for earlier work (an
    /// inbox that a kernel still reads), so that one wait covers both.
    fn refresh(&mut self, fresh: impl IntoIterator<Item = Range<usize>>) {
        let (ctx, work) = (self.team.ctx, self.work);
        let copied = match (&self.view, &self.failed) {
            (View::Mirror(mirror), None) => fresh
                .into_iter()
                .filter(|r| !r.is_empty())
                .try_for_each(|r| place::copy_parts((*mirror, r.start), (work, r.start), r.len())),
            (View::Outbox(outbox), None) => fresh
                .into_iter()
                .filter(|r| !r.is_empty())
                .try_fold(0, |at, r| {
                    place::copy_parts((*outbox, at), (work, r.start), r.len())?;
                    Ok(at + r.len())
                })
                .map(drop),
            _ => return,
        };
        let submitted = copied.and_then(|()| ctx.flush());
        self.note(submitted.map_err(Error::device(self.op)));
    }

    /// The host's elements `range` of a mirror or an outbox (whose first
    /// elements hold `range` once refreshed).
    fn host_range(&self, range: &Range<usize>) -> Result<Range<usize>> {
        match &self.view {
            View::Outbox(outbox) if range.len() <= outbox.len() => Ok(0..range.len()),
            View::Outbox(_) => Err(Error::Protocol {
                op: self.op,
                peer: -1,
                detail: format!("{} elements for an outbox that holds fewer", range.len()),
            }),
            _ => Ok(range.clone()),
        }
    }

    /// Ends a mapping of the working buffer (its failure is this rank's).
    fn unmap(&mut self, mapping: MappedBuffer<'_, T>) {
        let unmapped = mapping.finish().map_err(Error::device(self.op));
        self.note(unmapped);
    }

    /// Zeros for `len` elements, where this rank failed: its messages
    /// still go out.
    fn zeros(&mut self, len: usize) -> &mut [T] {
        self.spare.clear();
        self.spare.resize(len, T::zeroed());
        &mut self.spare
    }

    /// Calls `f` with the working buffer's elements `range` as the host
    /// sees them, for reading: in its mapping, or in the mirror or outbox
    /// that [`refresh`](Self::refresh) copied them to; zeros where this
    /// rank failed.
    fn with_view<R>(
        &mut self,
        range: Range<usize>,
        f: impl FnOnce(&[T]) -> Result<R>,
    ) -> Result<R> {
        let op = self.op;
        if self.failed.is_none() {
            match &mut self.view {
                View::Mapping(first) => {
                    if let Some(mapping) = mapped(self.work, first.take(), &mut self.failed, op) {
                        let result = f(&mapping[range]);
                        self.unmap(mapping);
                        return result;
                    }
                }
                View::Mirror(host) | View::Outbox(host) => {
                    let host = *host;
                    let at = self.host_range(&range)?;
                    match host.as_slice().map_err(Error::device(op)) {
                        Ok(all) => return f(&all[at]),
                        Err(e) => self.failed = Some(e),
                    }
                }
            }
        }
        f(self.zeros(range.len()))
    }

    /// [`with_view`](Self::with_view) for reading and writing: a mapping
    /// or a mirror (never an outbox), whose elements `range` (which `f`
    /// writes for the working buffer) are copied back to the device after,
    /// where `back`.
    fn with_view_mut<R>(
        &mut self,
        (range, back): (Range<usize>, bool),
        f: impl FnOnce(&mut [T]) -> Result<R>,
    ) -> Result<R> {
        let op = self.op;
        if self.failed.is_none() {
            match &mut self.view {
                View::Mapping(first) => {
                    if let Some(mut mapping) = mapped(self.work, first.take(), &mut self.failed, op)
                    {
                        let result = f(&mut mapping[range]);
                        self.unmap(mapping);
                        return result;
                    }
                }
                View::Mirror(mirror) => {
                    let mirror = *mirror;
                    match mirror.as_mut_slice().map_err(Error::device(op)) {
                        Ok(mut all) => {
                            let result = f(&mut all[range.clone()]);
                            drop(all);
                            if back && !range.is_empty() {
                                let work = self.work;
                                let copied = place::copy_parts(
                                    (work, range.start),
                                    (mirror, range.start),
                                    range.len(),
                                );
                                self.note(copied.map_err(Error::device(op)));
                            }
                            return result;
                        }
                        Err(e) => self.failed = Some(e),
                    }
                }
                View::Outbox(_) => {
                    return Err(Error::Protocol {
                        op,
                        peer: -1,
                        detail: "an outbox view cannot be written for the working buffer".into(),
                    })
                }
            }
        }
        f(self.zeros(range.len()))
    }

    /// Calls `f` with the first `len` elements of `host` (a scratch
    /// buffer where it cannot be had: this rank then failed).
    fn with_host<R>(
        &mut self,
        host: &HostBuffer<T>,
        len: usize,
        f: impl FnOnce(&mut Self, &mut [T]) -> Result<R>,
    ) -> Result<R> {
        match host.as_mut_slice() {
            Ok(mut slice) => f(self, &mut slice[..len]),
            Err(e) => {
                self.note(Err(Error::device(self.op)(e)));
                f(self, &mut vec![T::zeroed(); len])
            }
        }
    }

    /// Enqueues the reduction of `count` operands of `incoming`, `stride`
    /// elements apart, into `range` of the working buffer; nothing where
    /// this rank failed or `range` is empty. It is submitted with the
    /// next copy ([`refresh`](Self::refresh)), or by the next wait for it
    /// (a mapping, an inbox): one submission a step, not two.
    fn reduce_into(
        &mut self,
        range: Range<usize>,
        incoming: &HostBuffer<T>,
        (count, stride): (usize, usize),
    ) {
        if self.failed.is_some() || range.is_empty() {
            return;
        }
        let (op, ctx) = (self.op, self.team.ctx);
        let reduced = (self.work.create_sub_buffer::<T>(range.start, range.len()))
            .map_err(Error::device(op))
            .and_then(|acc| {
                let operands = kernels::Operand::Host(incoming);
                let shape = (count, stride);
                kernels::enqueue_reduce_many(op, ctx, self.kernel, &acc, operands, shape)
            });
        self.note(reduced);
    }

    /// The reduce-scatter in `steps` (`schedule::reduce_scatter`) over
    /// `chunks`: each step's chunks go out of the view, the peer's come
    /// into the inbox, and a kernel reduces them into the working buffer.
    /// Afterwards chunk `rank` of the working buffer holds the reduction
    /// of every rank's.
    pub(crate) fn reduce_scatter(&mut self, chunks: &Chunks, steps: &[Step]) -> Result<()> {
        let piece = chunks.piece_bytes::<T>(steps);
        let (team, op, inbox) = (self.team, self.op, self.inbox);
        for step in steps {
            let (send, recv) = (chunks.span(&step.send), chunks.span(&step.recv));
            self.refresh(iter::once(send.clone()));
            self.with_host(inbox, recv.len(), |this, into| {
                this.with_view(send, |out| team.sendrecv_step(op, step, (out, into), piece))
            })?;
            self.reduce_into(recv, inbox, (1, 0));
        }
        Ok(())
    }

    /// The reduce-scatter with every chunk sent to its owner at once: this
    /// rank sends chunk `k` to rank `k` and receives its own chunk of
    /// every other rank into the inbox (`stride` elements apart, the rank
    /// after it first), and one kernel pass reduces them all into its
    /// chunk (operands in that order). The ring's bytes in one exchange
    /// instead of `size - 1`, and one read of each operand on the device
    /// instead of a kernel pass per step.
    pub(crate) fn direct_reduce_scatter(&mut self, chunks: &Chunks, stride: usize) -> Result<()> {
        let (team, op, inbox) = (self.team, self.op, self.inbox);
        let (rank, size) = (team.rank, team.size);
        let mine = chunks.ranges[rank].clone();
        let piece = plan::piece_len::<T>(chunks.longest()) * size_of::<T>();
        let n = self.work.len();
        // This rank's own chunk stays where it is.
        self.refresh([0..mine.start, mine.end..n]);
        self.with_host(inbox, (size - 1) * stride, |this, into| {
            this.with_view(0..n, |all| {
                // To the ranks before this one, nearest first; from the
                // ranks after it, nearest first (so no rank is every
                // rank's first).
                let outs = (1..size)
                    .map(|d| {
                        let to = (rank + size - d) % size;
                        let chunk = bytemuck::cast_slice(&all[chunks.ranges[to].clone()]);
                        (chunk, to as i32)
                    })
                    .collect();
                let ins = (into.chunks_mut(stride).enumerate())
                    .map(|(d, slot)| {
                        let from = (rank + 1 + d) % size;
                        let slot = bytemuck::cast_slice_mut(&mut slot[..mine.len()]);
                        (slot, from as i32)
                    })
                    .collect();
                raw::exchange_with_peers(op, team.raw, outs, ins, COLLECTIVE_TAG, piece)
            })
        })?;
        self.reduce_into(mine, inbox, (size - 1, stride));
        Ok(())
    }

    /// Recursive doubling over the whole working buffer: at distance `d` =
    /// 1, 2, 4, ... each rank swaps its partial result with rank
    /// `rank ^ d` and reduces, the lower rank's operand first on both
    /// sides, so that both get the same bits: the lower rank receives into
    /// the inbox and reduces it in; the upper one keeps its own in `keep`
    /// (as long as the working buffer), receives the lower one's into the
    /// view, and reduces its own in.
    pub(crate) fn doubling(&mut self, keep: &HostBuffer<T>) -> Result<()> {
        let (team, op, inbox) = (self.team, self.op, self.inbox);
        let (rank, size, n) = (team.rank, team.size, self.work.len());
        let mut d = 1;
        while d < size {
            let partner = (rank ^ d) as i32;
            let swap = |out: &[T], into: &mut [T]| {
                let (out, into) = (bytemuck::cast_slice(out), bytemuck::cast_slice_mut(into));
                raw::sendrecv(op, team.raw, out, partner, into, partner, COLLECTIVE_TAG)
            };
            self.refresh(iter::once(0..n));
            if rank & d == 0 {
                self.with_host(inbox, n, |this, into| {
                    this.with_view(0..n, |all| swap(all, into))
                })?;
                self.reduce_into(0..n, inbox, (1, 0));
            } else {
                self.with_host(keep, n, |this, mine| {
                    this.with_view_mut((0..n, true), |all| {
                        mine.copy_from_slice(all);
                        swap(mine, all)
                    })
                })?;
                self.reduce_into(0..n, keep, (1, 0));
            }
            d <<= 1;
        }
        Ok(())
    }

    /// The allgather (`schedule::allgather`) in the view: chunk `rank` of
    /// the working buffer is this rank's; afterwards every chunk of the
    /// view is its owner's (in a mirror: not copied back to the device).
    pub(crate) fn allgather(&mut self, chunks: &Chunks, algorithm: Algorithm) -> Result<()> {
        let (team, op, n) = (self.team, self.op, self.work.len());
        self.refresh(iter::once(chunks.ranges[team.rank].clone()));
        self.with_view_mut((0..n, false), |all| {
            team.allgather_in(op, all, (chunks, algorithm))
        })
    }

    /// After the reduce-scatter: every rank's chunk to `root`, into the
    /// view there (a mirror: not copied back to the device; the others
    /// may send from an outbox).
    pub(crate) fn gather_to_root(&mut self, chunks: &Chunks, root: i32) -> Result<()> {
        let (team, op, n) = (self.team, self.op, self.work.len());
        let mine = chunks.ranges[team.rank].clone();
        self.refresh(iter::once(mine.clone()));
        if team.rank as i32 != root {
            return self.with_view(mine, |out| {
                let to = (root, COLLECTIVE_TAG);
                raw::send(op, team.raw, bytemuck::cast_slice(out), to, Patience::NAP)
            });
        }
        self.with_view_mut((0..n, false), |all| {
            for (peer, range) in chunks.ranges.iter().enumerate() {
                if peer as i32 != root {
                    let into = bytemuck::cast_slice_mut(&mut all[range.clone()]);
                    let from = (peer as i32, COLLECTIVE_TAG);
                    raw::recv(op, team.raw, into, from, Patience::NAP)?;
                }
            }
            Ok(())
        })
    }

    /// The first failure of this rank after the ranks agreed, if any. On a
    /// mapping it first submits the work enqueued last (doubling's last
    /// reduction), which no copy of the caller's follows; off it, the
    /// caller's copy of the result submits it (one submission, not two).
    pub(crate) fn finish(mut self) -> Result<()> {
        if matches!(self.view, View::Mapping(_)) {
            let submitted = self.team.ctx.flush().map_err(Error::device(self.op));
            self.note(submitted);
        }
        self.failed.map_or(Ok(()), Err)
    }
}

/// `first`, or a new mapping of `work`; `None` where mapping fails (then
/// `failed` holds its error).
fn mapped<'b, T: Pod>(
    work: &'b DeviceBuffer<T>,
    first: Option<MappedBuffer<'b, T>>,
    failed: &mut Option<Error>,
    op: &'static str,
) -> Option<MappedBuffer<'b, T>> {
    match first.map_or_else(|| work.map_to_host(), Ok) {
        Ok(mapping) => Some(mapping),
        Err(e) => {
            *failed = Some(Error::device(op)(e));
            None
        }
    }
}

/// Calls `f` with the elements of `host`, or with zeros as many where the
/// host cannot have them (a device error after the ranks agreed: this
/// rank's part of the messages still goes out). Returns `f`'s result (an
/// MPI error), then the device error.
pub(crate) fn with_pinned<T: Pod, R>(
    op: &'static str,
    host: &HostBuffer<T>,
    f: impl FnOnce(&mut [T]) -> Result<R>,
) -> Result<R> {
    match host.as_mut_slice() {
        Ok(mut all) => f(&mut all),
        Err(e) => {
            f(&mut vec![T::zeroed(); host.len()])?;
            Err(Error::device(op)(e))
        }
    }
}

/// `a` for reading and `b` for writing, two disjoint ranges of `all`.
fn disjoint<T>(all: &mut [T], a: Range<usize>, b: Range<usize>) -> (&[T], &mut [T]) {
    if a.start <= b.start {
        let (low, high) = all.split_at_mut(b.start);
        (&low[a], &mut high[..b.len()])
    } else {
        let (low, high) = all.split_at_mut(a.start);
        let a_len = a.len();
        (&high[..a_len], &mut low[b])
    }
}

impl Team<'_> {
    /// One step of a schedule: `out` to `step.to` while `into` comes from
    /// `step.from`, in messages of `piece` bytes (`raw::sendrecv_pieces`).
    pub(crate) fn sendrecv_step<T: Pod>(
        &self,
        op: &'static str,
        step: &Step,
        (out, into): (&[T], &mut [T]),
        piece: usize,
    ) -> Result<()> {
        let (out, into) = (bytemuck::cast_slice(out), bytemuck::cast_slice_mut(into));
        raw::sendrecv_pieces(
            op,
            self.raw,
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
    pub(crate) fn allgather_in<T: Pod>(
        &self,
        op: &'static str,
        all: &mut [T],
        (chunks, algorithm): (&Chunks, Algorithm),
    ) -> Result<()> {
        let steps = schedule::allgather(algorithm, self.rank, self.size);
        let piece = chunks.piece_bytes::<T>(&steps);
        for step in &steps {
            let (send, recv) = (chunks.span(&step.send), chunks.span(&step.recv));
            let (out, into) = disjoint(all, send, recv);
            self.sendrecv_step(op, step, (out, into), piece)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn disjoint_ranges_read_and_write_the_right_elements() {
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
