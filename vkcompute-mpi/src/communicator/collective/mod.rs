//! The collectives: barrier, broadcast, allreduce, reduce, allgather and
//! reduce_scatter of device and host buffers (any [`Buffer`]: a host
//! buffer is copied to and from the device working buffers by the same
//! stream-ordered copies as a device buffer).
//!
//! MPI moves bytes between pinned host buffers (or, for `broadcast` and
//! `allreduce` of a device buffer that maps directly, in the buffer's
//! mapping); the arithmetic of the reductions runs in this crate's kernels
//! on the device, but for an allreduce or reduce of chunks longer than one
//! piece over MPI, which MPI reduces on the host (`mpi.rs`). The reductions
//! are a reduce-scatter (each rank then owning one fully reduced chunk)
//! and, for allreduce, an allgather of the chunks, chosen by size
//! (`schedule`): bandwidth-optimal, every rank sending `2 (n - 1) / n` of
//! the buffer, in the ring (`size - 1` steps each), or on 4, 8, ... ranks
//! up to `HALVING_MAX_BYTES` (4 MiB) in recursive halving and doubling
//! (`log2(size)` steps each). An allreduce of at most `DOUBLING_MAX_BYTES`
//! (64 KiB) on 4, 8, ... ranks takes recursive doubling instead (log2(n)
//! exchanges of the whole buffer). Where the ring would run on 3 to
//! `DIRECT_MAX_RANKS` (8) ranks with chunks of one piece (on the mapped and
//! the staged path), the allreduce's reduce-scatter sends every chunk to
//! its owner at once instead, and the owner reduces the `n - 1` chunks it
//! receives in one kernel pass: the ring's bytes, without its `n - 1`
//! dependent steps, and one read of each operand instead of a kernel pass
//! per step (the ranks learn that every rank can from the header exchange,
//! `Header::offers_direct`). Chunks start at multiples of 256 bytes (and of
//! the device's `minStorageBufferOffsetAlignment`), so that a kernel can
//! bind any of them.
//!
//! This module checks the arguments, agrees with the other ranks and
//! plans (`plan::plan`); the executor (`exec`) runs the plan: chunks that
//! travel whole (`whole.rs` prepares them), in pieces (`pipelined.rs`),
//! or MPI's allreduce and reduce in pieces (`mpi.rs`).
//!
//! Where every pair of ranks takes the same-node path
//! (`Communicator::collective_path`), the collectives of buffers that are
//! not empty exchange through exported device memory instead, no data
//! through MPI (`on_node.rs`).
//!
//! Failures: everything that can fail on one rank for a reason of its own
//! (a mapped buffer, a bad length or root, an allocation, loading a kernel)
//! happens before the header exchange, so every rank learns of it. After
//! the exchange a rank touches only its own working buffers until the last
//! step; a device error there (a lost device, say) is returned by that rank
//! once it has still done its MPI part, so no other rank hangs, but the
//! others are not told and their results are then undefined. A rank that
//! dies or hangs: see the crate documentation (`Communicator::set_timeout`
//! bounds every wait).

use std::mem::size_of;

use vkcompute::DeviceBuffer;

use crate::communicator::Communicator;
use crate::element::{Element, ReduceOp, Reducible};
use crate::error::{Error, Result};
use crate::exec::{with_pinned, Pinned};
use crate::plan::schedule;
use crate::plan::{self, AllreduceAlgorithm, Ask, Chunks, Collective, Route};
use crate::raw;
use crate::transport::kernels;
use crate::transport::place::{Buffer, Place};
use crate::wire::{self, Failure, Header, Kind};

mod mpi;
mod on_node;
mod pipelined;
mod whole;

use whole::Extras;

impl Communicator {
    /// Waits until every rank has called `barrier`. Device work is not
    /// involved: synchronize a stream first where the barrier should also
    /// mean "my enqueued work is done".
    ///
    /// The ranks exchange headers as in every collective (the exchange is
    /// the barrier: no rank's completes before every rank has sent its
    /// own), so a barrier against another collective on another rank is
    /// [`Error::Mismatch`] on every rank, not an MPI error.
    pub fn barrier(&self) -> Result<()> {
        let op = "Communicator::barrier";
        let header = Header::new(Kind::Barrier, crate::element::ElementType::U8, 0);
        self.agree(op, header, Ok(()))
    }

    /// Shares the failure of this rank's preparation and checks that every
    /// rank asked for the same thing (see `header::agree`); this rank's own
    /// error comes first.
    pub(crate) fn agree<P>(
        &self,
        op: &'static str,
        header: Header,
        prepared: Result<P>,
    ) -> Result<P> {
        self.agree_headers(op, header, prepared).map(|(p, _)| p)
    }

    /// [`agree`](Self::agree), returning every rank's header too.
    pub(crate) fn agree_headers<P>(
        &self,
        op: &'static str,
        header: Header,
        prepared: Result<P>,
    ) -> Result<(P, Vec<Header>)> {
        self.check_thread(op)?;
        let mine = match &prepared {
            Ok(_) => header,
            Err(e) => header.failed(Failure::of(e)),
        };
        let agreed = wire::agree(op, self.raw(), self.rank(), self.size(), mine);
        let prepared = prepared?;
        Ok((prepared, agreed?))
    }

    /// The first check of every collective: where one of `places` is a
    /// buffer the host maps, this rank's header says it failed (so every
    /// rank learns of it before any data moves) and its error comes back.
    fn refuse_mapped<T: Element>(
        &self,
        op: &'static str,
        header: Header,
        places: &[Place<'_, T>],
    ) -> Result<()> {
        match places.iter().try_for_each(|place| place.unmapped(op)) {
            Ok(()) => Ok(()),
            Err(e) => self.agree(op, header, Err(e)),
        }
    }

    /// Copies `buf` of rank `root` into `buf` on every rank (`MPI_Bcast`
    /// through pinned host memory, or in a device buffer's mapping where it
    /// maps directly: [`maps_device_memory`](Self::maps_device_memory)).
    /// Every rank passes a buffer of the same element type and length, and
    /// the same root.
    pub fn broadcast<T: Element, B: Buffer<T> + ?Sized>(&self, buf: &B, root: i32) -> Result<()> {
        let op = "Communicator::broadcast";
        let n = buf.elements();
        let header = Header::new(Kind::Broadcast, T::TYPE, n).root(root);
        self.refuse_mapped(op, header, &[buf.place()])?;
        let device = match buf.place() {
            Place::Device(dev) if self.maps_device_memory() => Some(dev),
            _ => None,
        };
        let plan = plan::plan(&self.ask::<T>(Collective::Broadcast, n, device.is_some()));
        if plan.route == Route::SameNode {
            return self.broadcast_same_node(op, buf, root, header);
        }
        // Every route sends the same pieces, so that ranks on different
        // routes pair.
        let piece = plan.piece;
        let piece_bytes = piece * size_of::<T>();
        if let (Route::Mapped, Some(dev)) = (plan.route, device) {
            {
                // A mapped buffer fails here, before the ranks agree.
                let prepared = self
                    .check_rank(op, root)
                    .and_then(|()| dev.map_to_host().map_err(Error::device(op)));
                let mut mapping = self.agree(op, header, prepared)?;
                let bytes = bytemuck::cast_slice_mut(&mut mapping);
                raw::broadcast(op, self.raw(), bytes, root, piece_bytes)?;
                return mapping.finish().map_err(Error::device(op));
            }
        }
        if plan.route == Route::Pieces {
            return self.broadcast_pipelined(op, (buf, root), header, piece);
        }
        let prepared = self.check_rank(op, root).and_then(|()| {
            let staged = Pinned::<T>::new(&self.pool, op, n)?;
            if self.rank() == root {
                (buf.place().copy_range_to(0, n, &staged.typed)).map_err(Error::device(op))?;
            }
            Ok(staged)
        });
        let staged = self.agree(op, header, prepared)?;
        if n == 0 || self.size() == 1 {
            staged.keep(&self.pool);
            return Ok(());
        }
        with_pinned(op, &staged.typed, |all| {
            let bytes = bytemuck::cast_slice_mut(all);
            raw::broadcast(op, self.raw(), bytes, root, piece_bytes)
        })?;
        if self.rank() != root {
            (buf.place().copy_from(&staged.typed)).map_err(Error::device(op))?;
        }
        staged.keep(&self.pool);
        Ok(())
    }

    /// What the planner needs of a `collective` of `len` elements of `T`
    /// (a block's, for allgather and reduce_scatter) on this communicator,
    /// `mapped` where this rank's buffer takes the mapped route.
    fn ask<T>(&self, collective: Collective, len: usize, mapped: bool) -> Ask {
        Ask {
            collective,
            ranks: self.size() as usize,
            len,
            element: size_of::<T>(),
            align: (kernels::align_bytes(self.context()) / size_of::<T>()).max(1),
            same_node: self.same_node.spans_communicator(),
            mapped,
        }
    }

    /// The chunk stride of a reduction of `len` elements of `T` over the
    /// ranks: a multiple of the binding alignment.
    fn stride<T>(&self, len: usize) -> usize {
        self.ask::<T>(Collective::Allreduce, len, false).stride(len)
    }

    /// Reduces `buf` element by element over every rank with `reduce`, and
    /// leaves the result in `buf` on every rank (`MPI_Allreduce` in
    /// place). Every rank passes a buffer of the same element type and
    /// length, and the same reduction. Every rank gets the same bits.
    pub fn allreduce<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
        reduce: ReduceOp,
    ) -> Result<()> {
        let op = "Communicator::allreduce";
        let n = buf.elements();
        let header = Header::new(Kind::Allreduce, T::TYPE, n).reduce(reduce);
        self.refuse_mapped(op, header, &[buf.place()])?;
        let in_place = self.mapped_in_place(buf);
        let plan = plan::plan(&self.ask::<T>(Collective::Allreduce, n, in_place.is_some()));
        match plan.route {
            Route::SameNode => self.allreduce_same_node(op, buf, reduce, header),
            _ if plan.algorithm == AllreduceAlgorithm::Local => self.agree(op, header, Ok(())),
            _ if plan.algorithm == AllreduceAlgorithm::Mpi => {
                let pieces = (plan.piece, in_place);
                self.allreduce_mpi(op, (buf, reduce), header, pieces)
            }
            // The mapped route works in `buf` itself; the others through
            // a mirror.
            Route::Mapped => self.allreduce_whole(op, (buf, reduce, in_place), (header, plan)),
            _ => self.allreduce_whole(op, (buf, reduce, None), (header, plan)),
        }
    }

    /// The algorithm [`allreduce`](Self::allreduce) takes for `buf` (every
    /// rank decides alike, whichever path its buffer takes). Where a rank
    /// cannot allocate the landing of the direct reduce-scatter, an
    /// allreduce that this says is [`AllreduceAlgorithm::Direct`] takes
    /// the ring.
    pub fn allreduce_algorithm<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
    ) -> AllreduceAlgorithm {
        let mapped = self.mapped_in_place(buf).is_some();
        plan::plan(&self.ask::<T>(Collective::Allreduce, buf.elements(), mapped)).algorithm
    }

    /// Reduces `buf` element by element over every rank with `reduce`, and
    /// leaves the result in `buf` on rank `root` (`MPI_Reduce` in place at
    /// the root); the other ranks' buffers are left as they were.
    pub fn reduce<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
        reduce: ReduceOp,
        root: i32,
    ) -> Result<()> {
        let op = "Communicator::reduce";
        let (n, rank, size) = (buf.elements(), self.rank(), self.size() as usize);
        let header = Header::new(Kind::Reduce, T::TYPE, n)
            .reduce(reduce)
            .root(root);
        self.refuse_mapped(op, header, &[buf.place()])?;
        let plan = plan::plan(&self.ask::<T>(Collective::Reduce, n, false));
        let trivial = plan.algorithm == AllreduceAlgorithm::Local;
        match plan.route {
            Route::SameNode => return self.reduce_same_node(op, (buf, reduce, root), header),
            Route::Pieces => {
                return self.reduce_mpi(op, (buf, reduce, root), header, plan.piece);
            }
            _ => {}
        }
        let prepared = self.check_rank(op, root).and_then(|()| {
            if trivial {
                return Ok(None);
            }
            let fill = |acc: &DeviceBuffer<T>| buf.place().copy_range_to(0, n, acc);
            let steps = schedule::reduce_scatter(plan.schedule, rank as usize, size);
            let inbox = plan.chunks.longest_step(&steps);
            // The root gathers into a mirror; the others only send.
            let extras = Extras {
                outbox: (rank != root).then_some(inbox),
                ..Extras::default()
            };
            let prepared = self.prepare_whole(op, reduce, (None, n, fill), inbox, extras)?;
            Ok(Some((prepared, steps)))
        });
        let Some((prepared, steps)) = self.agree(op, header, prepared)? else {
            return Ok(());
        };
        let ran = {
            let mut run = prepared.run(self, op, None);
            run.reduce_scatter(&plan.chunks, &steps)?;
            run.gather_to_root(&plan.chunks, root)?;
            run.finish()
        };
        let result = ran.and_then(|()| match &prepared.mirror {
            // The root's is a mirror.
            Some(mirror) if rank == root => {
                (buf.place().copy_from(&mirror.typed)).map_err(Error::device(op))
            }
            _ => Ok(()),
        });
        prepared.keep(self);
        result
    }

    /// Gathers every rank's `send` (of the same length on every rank) into
    /// `recv` on every rank, rank `k`'s at elements `k * send.len()`
    /// onwards (`MPI_Allgather`). `recv` holds `size()` times `send.len()`
    /// elements.
    pub fn allgather<T: Element, S: Buffer<T> + ?Sized, R: Buffer<T> + ?Sized>(
        &self,
        send: &S,
        recv: &R,
    ) -> Result<()> {
        let op = "Communicator::allgather";
        let (m, size, rank) = (send.elements(), self.size() as usize, self.rank() as usize);
        let header = Header::new(Kind::Allgather, T::TYPE, m);
        self.refuse_mapped(op, header, &[send.place(), recv.place()])?;
        let plan = plan::plan(&self.ask::<T>(Collective::Allgather, m, false));
        if m > 0 && plan.route == Route::SameNode {
            return self.allgather_same_node(op, (send, recv), header);
        }
        let checked = check_blocks(op, "recv", recv.elements(), "send", m, size);
        if plan.route == Route::Pieces {
            let pieces = (plan.chunks, plan.piece);
            return self.allgather_pipelined(op, (send, recv), header, pieces, checked);
        }
        let prepared = checked.and_then(|()| {
            let result = Pinned::<T>::new(&self.pool, op, m * size)?;
            let mine = result.part(op, rank * m..(rank + 1) * m)?;
            (send.place().copy_range_to(0, m, &mine)).map_err(Error::device(op))?;
            Ok(result)
        });
        let result = self.agree(op, header, prepared)?;
        if m > 0 && size > 1 {
            let chunks = (&plan.chunks, plan.schedule);
            with_pinned(op, &result.typed, |all| {
                self.team().allgather_in(op, all, chunks)
            })?;
        }
        (recv.place().copy_from(&result.typed)).map_err(Error::device(op))?;
        result.keep(&self.pool);
        Ok(())
    }

    /// Reduces `send` (of `size()` times `recv.len()` elements on every
    /// rank) element by element over every rank with `reduce`, and leaves
    /// block `rank()` of the result (elements `rank() * recv.len()`
    /// onwards) in `recv` (`MPI_Reduce_scatter_block`).
    pub fn reduce_scatter<T: Reducible, S: Buffer<T> + ?Sized, R: Buffer<T> + ?Sized>(
        &self,
        send: &S,
        recv: &R,
        reduce: ReduceOp,
    ) -> Result<()> {
        let op = "Communicator::reduce_scatter";
        let (m, size, rank) = (recv.elements(), self.size() as usize, self.rank() as usize);
        let header = Header::new(Kind::ReduceScatter, T::TYPE, m).reduce(reduce);
        self.refuse_mapped(op, header, &[send.place(), recv.place()])?;
        let plan = plan::plan(&self.ask::<T>(Collective::ReduceScatter, m, false));
        if m > 0 && plan.route == Route::SameNode {
            return self.reduce_scatter_same_node(op, (send, recv, reduce), header);
        }
        let checked = check_blocks(op, "send", send.elements(), "recv", m, size);
        let stride = m.next_multiple_of(self.stride::<T>(1));
        if plan.route == Route::Pieces && checked.is_ok() {
            let args = (send, recv, reduce);
            return self.reduce_scatter_pipelined(op, args, header, (plan.chunks, plan.piece));
        }
        let chunks = Chunks::blocks(m, size, stride);
        let steps = schedule::reduce_scatter(plan.schedule, rank, size);
        let prepared = checked.and_then(|()| {
            if m == 0 {
                return Ok(None);
            }
            let fill = |acc: &DeviceBuffer<T>| {
                for k in 0..size {
                    let part = acc.create_sub_buffer::<T>(k * stride, m)?;
                    send.place().copy_range_to(k * m, m, &part)?;
                }
                Ok(())
            };
            let inbox = chunks.longest_step(&steps);
            let extras = Extras {
                outbox: Some(inbox),
                ..Extras::default()
            };
            let input = (None, stride * size, fill);
            Ok(Some(self.prepare_whole(op, reduce, input, inbox, extras)?))
        });
        let Some(prepared) = self.agree(op, header, prepared)? else {
            return Ok(());
        };
        let ran = {
            let mut run = prepared.run(self, op, None);
            if size > 1 {
                run.reduce_scatter(&chunks, &steps)?;
            }
            run.finish()
        };
        let result = ran.and_then(|()| {
            let mine = (prepared.work().create_sub_buffer::<T>(rank * stride, m))
                .map_err(Error::device(op))?;
            (recv.place().copy_from(&mine)).map_err(Error::device(op))
        });
        prepared.keep(self);
        result
    }
}

/// Refuses a buffer `big` that is not `size` times `small` long.
fn check_blocks(
    op: &'static str,
    big_name: &str,
    big: usize,
    small_name: &str,
    small: usize,
    size: usize,
) -> Result<()> {
    if small.checked_mul(size) != Some(big) {
        return Err(Error::InvalidLength {
            op,
            detail: format!(
                "`{big_name}` holds {big} elements; it must hold {size} (the ranks) times \
                 `{small_name}`'s {small}"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_lengths_are_checked() {
        assert!(check_blocks("t", "recv", 12, "send", 4, 3).is_ok());
        assert!(matches!(
            check_blocks("t", "recv", 11, "send", 4, 3),
            Err(Error::InvalidLength { .. })
        ));
    }
}
