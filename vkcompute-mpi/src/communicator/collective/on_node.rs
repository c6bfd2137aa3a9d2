//! The collectives on the same-node path (`transport::same_node`), taken where
//! every pair of ranks of the communicator takes it
//! (`SameNode::spans_communicator`, the same answer on every rank) by
//! broadcast, allreduce, reduce, allgather and reduce_scatter of buffers
//! that are not empty. No data goes through MPI or host memory: each rank
//! copies its input on the device into its *collective memory* (exported
//! to every peer, imported by each once per generation, kept between
//! calls), and then reads the others' memory on its device:
//!
//! - broadcast: the root copies its buffer into its memory; every other
//!   rank copies it out;
//! - allreduce: every rank copies its buffer in; rank `r` reduces chunk
//!   `r` of every rank's memory into its own (its own operand first, then
//!   the others in rank order, so every rank gets the same bits; three
//!   others a pass of the kernel); every rank copies each chunk out of its
//!   owner's memory;
//! - reduce: the same reduction; only the root copies the chunks out, the
//!   others' buffers are left as they were;
//! - allgather: every rank copies its `send` in; each copies block `q` out
//!   of rank `q`'s memory into its `recv`;
//! - reduce_scatter: every rank copies its `send` in, block `k` at `k`
//!   times the block rounded up to the binding alignment (the staged
//!   path's layout); rank `r` reduces block `r` of every rank's memory
//!   into its own (same order) and copies it to its `recv`.
//!
//! The chunks (`Communicator::stride`) and blocks start at the binding
//! alignment, so the kernels bind them where they lie, in every rank's
//! memory alike.
//!
//! This module fills this rank's memory and agrees; the executor
//! (`exec/on_node.rs`) runs the steps. Phases, each bounded by the
//! communicator's timeout: the header exchange
//! (each rank's input is in its memory by then; the headers carry the
//! generations), where a rank that filled a new generation then sends its
//! descriptor to every peer, and a one-byte status exchange says that all
//! were sent (left out where no header announces a new one); for
//! allreduce and reduce, a status exchange once every chunk is reduced
//! (a rank whose reduction failed says so, and every rank returns an
//! error); last, a barrier, after which no rank reads another's memory
//! any more, so that each may write its own again (the next call's
//! input).
//!
//! Failures: what a rank can find out alone (a bad length or root, a
//! kernel, an allocation, a source buffer that is mapped where the device
//! may not read it) fails its header, so every rank learns of it before
//! any memory is read. A destination that cannot be written (mapped to
//! the host, maybe by another thread) is that rank's own error, returned
//! once it has done its part: the others complete, as for a message
//! received over the path. So is an import that fails where no other rank
//! depends on this one (broadcast, allgather, reduce_scatter).

use vkcompute::DeviceBuffer;

use super::check_blocks;
use crate::communicator::Communicator;
use crate::element::{Element, ReduceOp, Reducible};
use crate::error::Result;
use crate::exec::Memories;
use crate::plan::Chunks;
use crate::transport::place::{Buffer, Place};
use crate::wire::{Header, SharedMemory};

/// What a rank put into its collective memory for a collective: the
/// memory, and `(generation, new)` for its header
/// (`SameNode::fill_collective`).
type Filled = (DeviceBuffer<u8>, SharedMemory);

impl Communicator {
    /// This rank's collective memory holding the first `n` elements of
    /// `place`, and its generation for the header.
    fn fill_from<T: Element>(
        &self,
        op: &'static str,
        place: Place<'_, T>,
        n: usize,
    ) -> Result<Filled> {
        self.fill_shared::<T>(op, n, |part| place.copy_range_to(0, n, part))
    }

    /// This rank's collective memory, its first `len` elements written by
    /// `write` (`SameNode::fill_collective`), and its generation for the
    /// header; `Error::Broken` first, without a write, on a communicator
    /// that a timeout broke: its peers may still be reading the memory
    /// (the collective that timed out left them behind).
    fn fill_shared<T: Element>(
        &self,
        op: &'static str,
        len: usize,
        write: impl FnOnce(&DeviceBuffer<T>) -> vkcompute::Result<()>,
    ) -> Result<Filled> {
        self.raw().state.usable(op)?;
        (self.same_node).fill_collective::<T>(op, len, write)
    }

    /// The first phase of every collective on the path: shares the outcome
    /// of this rank's preparation (`prepared`, with the memory it filled,
    /// if any) and checks that the ranks asked for the same thing, as
    /// `agree` does, with the generation of each rank's memory in its
    /// header; then a rank with a new generation sends its descriptor to
    /// every peer, and each imports every new one. Returns the prepared
    /// value and every rank's memory, or why the memory could not be had
    /// (an import that failed), for the caller to do its part all the same
    /// and return that error at the end.
    fn agree_on_node<P>(
        &self,
        op: &'static str,
        header: Header,
        prepared: Result<(P, Option<Filled>)>,
    ) -> Result<(P, Result<Memories>)> {
        let (rank, same_node) = (self.rank() as usize, &self.same_node);
        let header = match &prepared {
            Ok((_, Some((_, shared)))) => header.in_shared_memory(*shared),
            _ => header,
        };
        let ((prepared, filled), headers) = self.agree_headers(op, header, prepared)?;
        same_node.count_collective();
        let sent = match &filled {
            Some((_, shared)) if shared.new => same_node.announce_collective(op, self.size()),
            _ => Ok(()),
        };
        // Where no header announces a new generation nobody sends one, and
        // every rank knows it.
        let new = (headers.iter()).any(|h| h.shared_memory().is_some_and(|s| s.new));
        let sent = if new {
            self.team().all_ok(op, sent)
        } else {
            sent
        };
        // Every rank has sent what it could; the new generations come off
        // the sockets even where a rank failed (every one of them, before
        // any error is returned), so that the sockets stay in step with
        // the headers (a rank that could not send to every peer announces
        // it again next time).
        let imports: Vec<Result<Option<DeviceBuffer<u8>>>> = (headers.iter().enumerate())
            .map(|(q, h)| match (q == rank, h.shared_memory()) {
                (true, _) => Ok(filled.as_ref().map(|(memory, _)| memory.clone())),
                (false, Some(announced)) => same_node.inbox(op, q as i32, announced).map(Some),
                (false, None) => Ok(None),
            })
            .collect();
        sent?;
        let memory = imports.into_iter().collect::<Result<Vec<_>>>();
        Ok((prepared, memory.map(Memories)))
    }

    /// `broadcast` on the path (module documentation).
    pub(super) fn broadcast_same_node<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        buf: &B,
        root: i32,
        header: Header,
    ) -> Result<()> {
        let (n, rank) = (buf.elements(), self.rank());
        let prepared = self.check_rank(op, root).and_then(|()| {
            let filled = if rank == root {
                Some(self.fill_from(op, buf.place(), n)?)
            } else {
                None
            };
            Ok(((), filled))
        });
        let ((), memory) = self.agree_on_node(op, header, prepared)?;
        let copied = if rank == root {
            Ok(())
        } else {
            self.team()
                .copy_out_of(op, &memory, buf.place(), [(root as usize, 0..n, 0)])
        };
        self.team().leave_on_node(op, copied)
    }

    /// Loads the kernels with which this rank reduces its chunk of the
    /// others' memory ([`Team::reduce_own_chunk`]), before the ranks agree.
    fn load_operand_kernels<T: Reducible>(&self, op: &'static str, reduce: ReduceOp) -> Result<()> {
        let others = self.size() as usize - 1;
        (self.reducer).load_operand_kernels::<T>(op, self.context(), reduce, others)
    }

    /// The reduction of `allreduce` and `reduce` on the path (module
    /// documentation), once `check` passed: every rank's `buf` into its
    /// memory, and chunk `rank` of `chunks` of every rank's memory reduced
    /// into this rank's; a status exchange then says that every chunk is
    /// reduced, or gives every rank an error.
    fn reduce_on_node<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        (buf, reduce): (&B, ReduceOp),
        (header, check): (Header, Result<()>),
        chunks: &Chunks,
    ) -> Result<Result<Memories>> {
        let n = buf.elements();
        let prepared = check
            .and_then(|()| self.load_operand_kernels::<T>(op, reduce))
            .and_then(|()| Ok(((), Some(self.fill_from(op, buf.place(), n)?))));
        let ((), memory) = self.agree_on_node(op, header, prepared)?;
        let mine = &chunks.ranges[self.rank() as usize];
        let reducer = (&self.reducer, reduce);
        let reduced = (memory.as_ref().map_err(Clone::clone))
            .and_then(|memory| self.team().reduce_own_chunk::<T>(op, reducer, memory, mine));
        self.team().all_ok(op, reduced)?;
        Ok(memory)
    }

    /// `allreduce` on the path (module documentation); every chunk is read
    /// by every rank, so a failure of one rank's part (its reduction) is an
    /// error on every rank (`buf` then undefined), and only a destination
    /// that cannot be written is this rank's error alone.
    pub(super) fn allreduce_same_node<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        buf: &B,
        reduce: ReduceOp,
        header: Header,
    ) -> Result<()> {
        let n = buf.elements();
        let chunks = Chunks::contiguous(n, self.size() as usize, self.stride::<T>(n));
        let memory = self.reduce_on_node(op, (buf, reduce), (header, Ok(())), &chunks)?;
        let every = (chunks.ranges.iter().enumerate()).map(|(q, r)| (q, r.clone(), r.start));
        let gathered = self.team().copy_out_of(op, &memory, buf.place(), every);
        self.team().leave_on_node(op, gathered)
    }

    /// `reduce` on the path (module documentation): the allreduce's
    /// reduction, then only `root` copies the chunks out.
    pub(super) fn reduce_same_node<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        (buf, reduce, root): (&B, ReduceOp, i32),
        header: Header,
    ) -> Result<()> {
        let n = buf.elements();
        let chunks = Chunks::contiguous(n, self.size() as usize, self.stride::<T>(n));
        let check = self.check_rank(op, root);
        let memory = self.reduce_on_node(op, (buf, reduce), (header, check), &chunks)?;
        let gathered = if self.rank() == root {
            let every = (chunks.ranges.iter().enumerate()).map(|(q, r)| (q, r.clone(), r.start));
            self.team().copy_out_of(op, &memory, buf.place(), every)
        } else {
            Ok(())
        };
        self.team().leave_on_node(op, gathered)
    }

    /// `allgather` on the path (module documentation).
    pub(super) fn allgather_same_node<T: Element, S: Buffer<T> + ?Sized, R: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        (send, recv): (&S, &R),
        header: Header,
    ) -> Result<()> {
        let (m, size) = (send.elements(), self.size() as usize);
        let prepared = check_blocks(op, "recv", recv.elements(), "send", m, size)
            .and_then(|()| Ok(((), Some(self.fill_from(op, send.place(), m)?))));
        let ((), memory) = self.agree_on_node(op, header, prepared)?;
        let blocks = (0..size).map(|q| (q, 0..m, q * m));
        let copied = self.team().copy_out_of(op, &memory, recv.place(), blocks);
        self.team().leave_on_node(op, copied)
    }

    /// `reduce_scatter` on the path (module documentation): no other rank
    /// reads the block this rank reduces, so a failure of its part is its
    /// own error alone.
    pub(super) fn reduce_scatter_same_node<T, S, R>(
        &self,
        op: &'static str,
        (send, recv, reduce): (&S, &R, ReduceOp),
        header: Header,
    ) -> Result<()>
    where
        T: Reducible,
        S: Buffer<T> + ?Sized,
        R: Buffer<T> + ?Sized,
    {
        let (m, size, rank) = (recv.elements(), self.size() as usize, self.rank() as usize);
        let stride = m.next_multiple_of(self.stride::<T>(1));
        let prepared = check_blocks(op, "send", send.elements(), "recv", m, size)
            .and_then(|()| self.load_operand_kernels::<T>(op, reduce))
            .and_then(|()| {
                let filled = self.fill_shared::<T>(op, stride * size, |memory| {
                    (0..size).try_for_each(|k| {
                        let block = memory.create_sub_buffer::<T>(k * stride, m)?;
                        send.place().copy_range_to(k * m, m, &block)
                    })
                })?;
                Ok(((), Some(filled)))
            });
        let ((), memory) = self.agree_on_node(op, header, prepared)?;
        let mine = rank * stride..rank * stride + m;
        let reducer = (&self.reducer, reduce);
        let done = (memory.as_ref().map_err(Clone::clone))
            .and_then(|all| self.team().reduce_own_chunk::<T>(op, reducer, all, &mine))
            .and_then(|()| {
                self.team()
                    .copy_out_of(op, &memory, recv.place(), [(rank, mine, 0)])
            });
        self.team().leave_on_node(op, done)
    }
}
