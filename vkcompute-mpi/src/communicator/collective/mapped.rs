//! `allreduce` of a device buffer that maps directly and that the
//! kernels bind in place: the reduction works in the buffer itself, MPI
//! moving the chunks out of and into its mapping, the kernels reducing
//! what arrived into it between the mappings (ring, halving, doubling, or
//! the direct reduce-scatter where every rank offers it).

use std::mem::size_of;
use std::ops::Range;

use bytemuck::Pod;
use vkcompute::{DeviceBuffer, HostBuffer};

use super::ring::Staged;
use crate::communicator::Communicator;
use crate::element::{ReduceOp, Reducible};
use crate::error::{Error, Result};
use crate::plan::schedule::{self, Step};
use crate::plan::{self, AllreduceAlgorithm, Chunks, Plan};
use crate::raw;
use crate::transport::kernels;
use crate::transport::place::{Buffer, Place};
use crate::wire::{Header, COLLECTIVE_TAG};

impl Communicator {
    /// `buf`'s device buffer where allreduce works in it in place
    /// (`allreduce_mapped`): it maps directly and the kernels bind it.
    pub(super) fn mapped_in_place<'b, T: Pod, B: Buffer<T> + ?Sized>(
        &self,
        buf: &'b B,
    ) -> Option<&'b DeviceBuffer<T>> {
        match buf.place() {
            Place::Device(dev) if self.maps_device_memory() && self.binds_in_place(dev) => {
                Some(dev)
            }
            _ => None,
        }
    }

    /// Whether the reduction kernels can bind the chunks of `buf` where it
    /// lies: it starts at the binding alignment in its `VkBuffer`.
    pub(crate) fn binds_in_place<T: Pod>(&self, buf: &DeviceBuffer<T>) -> bool {
        buf.raw().offset % kernels::align_bytes(self.context()) as u64 == 0
    }

    /// `allreduce` of a device buffer that maps directly
    /// (`maps_device_memory`) and that the kernels bind in place: the
    /// reduction works in `buf` itself. Each reduce-scatter step (ring or
    /// halving, `schedule`) maps `buf`, MPI sends the chunks due from the
    /// mapping and receives the peer's into a pinned host buffer, the
    /// mapping ends, and the kernel reduces them with the host buffer where
    /// it lies; the allgather then runs in the mapping. No copies but MPI's
    /// own. Same chunks, steps and messages as the staged path, so ranks on
    /// either path work together. Where every rank offers it instead (the
    /// ring on 3 to [`DIRECT_MAX_RANKS`] ranks, all on this path, each with
    /// its landing of `size - 1` chunks, at most
    /// [`DIRECT_MAX_LANDING_BYTES`], allocated), the reduce-scatter is
    /// [`direct_reduce_scatter_mapped`](Self::direct_reduce_scatter_mapped).
    /// The landing is kept for reuse like the other staging buffers
    /// (`Communicator::keep_staging`), also where the ring ran.
    ///
    /// A failure after the ranks agreed (a mapping that fails because
    /// another thread mapped the buffer meanwhile, a device error) does not
    /// stop this rank's part of the messages: zeros go out in place of the
    /// data, and the error is returned at the end; `buf` is then undefined.
    pub(super) fn allreduce_mapped<T: Reducible>(
        &self,
        op: &'static str,
        buf: &DeviceBuffer<T>,
        reduce: ReduceOp,
        (header, plan): (Header, Plan),
    ) -> Result<()> {
        let (n, size, rank) = (buf.len(), self.size() as usize, self.rank() as usize);
        let doubling = plan.algorithm == AllreduceAlgorithm::Doubling;
        let (chunks, algorithm) = (plan.chunks, plan.schedule);
        let steps = schedule::reduce_scatter(algorithm, rank, size);
        let stride = self.stride::<T>(n);
        let wanted = plan.algorithm == AllreduceAlgorithm::Direct;
        let prepared = self
            .reducer
            .kernel::<T>(op, self.context(), reduce)
            .and_then(|kernels| {
                // The direct reduce-scatter's landing (`size - 1` chunks),
                // where it is wanted and can be had; else the ring's.
                let landing = wanted
                    .then(|| Staged::<T>::new(self, op, (size - 1) * stride).ok())
                    .flatten();
                let offer = landing.is_some();
                let inbox = match landing {
                    Some(landing) => landing,
                    None => Staged::<T>::new(self, op, chunks.longest_step(&steps))?,
                };
                let outbox = if doubling {
                    Some(Staged::<T>::new(self, op, n)?)
                } else {
                    None
                };
                // A mapped buffer fails here, before the ranks agree.
                let mapping = buf.map_to_host().map_err(Error::device(op))?;
                Ok((kernels, (inbox, offer), outbox, mapping))
            });
        let offer = matches!(&prepared, Ok((_, (_, true), _, _)));
        let ((kernels, (inbox, _), outbox, first), headers) =
            self.agree_headers(op, header.direct(offer), prepared)?;
        if let Some(outbox) = outbox {
            let result = self.doubling_mapped(op, buf, &kernels, &inbox, &outbox, first);
            inbox.keep(self);
            outbox.keep(self);
            return result;
        }
        let mut failed: Option<Error> = None;
        // Stands in for `buf` once it cannot be mapped (zeros go out).
        let mut spare: Vec<T> = Vec::new();
        if offer && headers.iter().all(Header::offers_direct) {
            (self.direct_reduce_scatters).fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let landing = (&kernels, &inbox, &chunks, stride);
            self.direct_reduce_scatter_mapped(op, buf, landing, first, &mut failed)?;
        } else {
            self.ring_reduce_scatter_mapped(
                op,
                buf,
                (&kernels, &inbox, &chunks, &steps),
                first,
                (&mut failed, &mut spare),
            )?;
        }
        // The allgather in the mapping, which waits for the last kernel.
        let mut mapped = self.map_or_note(op, buf, None, &mut failed);
        if mapped.is_none() && spare.is_empty() {
            spare = vec![<T as bytemuck::Zeroable>::zeroed(); n];
        }
        {
            let all: &mut [T] = match mapped.as_deref_mut() {
                Some(all) => all,
                None => &mut spare,
            };
            self.ring_allgather(op, all, (&chunks, algorithm))?;
        }
        if let Some(Err(e)) = mapped.map(|m| m.finish().map_err(Error::device(op))) {
            failed.get_or_insert(e);
        }
        inbox.keep(self);
        failed.map_or(Ok(()), Err)
    }

    /// Recursive doubling in `buf`'s mapping (see `doubling_staged`): the
    /// lower rank of each pair sends from the mapping and receives into
    /// `inbox`, the upper one copies its part to `outbox`, sends that and
    /// receives into the mapping, and both then reduce in `buf` with the
    /// lower rank's operand first. Failures after the ranks agreed: as in
    /// `allreduce_mapped`.
    pub(super) fn doubling_mapped<T: Reducible>(
        &self,
        op: &'static str,
        buf: &DeviceBuffer<T>,
        kernels: &kernels::ReduceKernels,
        inbox: &Staged<T>,
        outbox: &Staged<T>,
        first: vkcompute::MappedBuffer<'_, T>,
    ) -> Result<()> {
        let (rank, size, n) = (self.rank() as usize, self.size() as usize, buf.len());
        let mut failed: Option<Error> = None;
        let mut spare: Vec<T> = Vec::new();
        let mut mapping = Some(first);
        let mut d = 1;
        while d < size {
            let partner = (rank ^ d) as i32;
            let low = rank & d == 0;
            let mut mapped = self.map_or_note(op, buf, mapping.take(), &mut failed);
            if mapped.is_none() && spare.is_empty() {
                spare = vec![<T as bytemuck::Zeroable>::zeroed(); n];
            }
            {
                let mine: &mut [T] = match mapped.as_deref_mut() {
                    Some(mine) => mine,
                    None => &mut spare,
                };
                let (out, into): (&[T], &mut [T]);
                let mut staged_in;
                let mut staged_out;
                if low {
                    staged_in = inbox.typed.as_mut_slice().map_err(Error::device(op))?;
                    (out, into) = (mine, &mut staged_in[..n]);
                } else {
                    staged_out = outbox.typed.as_mut_slice().map_err(Error::device(op))?;
                    staged_out[..n].copy_from_slice(mine);
                    (out, into) = (&staged_out[..n], mine);
                }
                raw::sendrecv(
                    op,
                    self.raw(),
                    bytemuck::cast_slice(out),
                    partner,
                    bytemuck::cast_slice_mut(into),
                    partner,
                    COLLECTIVE_TAG,
                )?;
            }
            if let Some(Err(e)) = mapped.map(|m| m.finish().map_err(Error::device(op))) {
                failed.get_or_insert(e);
            }
            if failed.is_none() {
                let other = if low { inbox } else { outbox };
                let reduced = other.part(op, 0..n).and_then(|other| {
                    kernels::enqueue_reduce(op, self.context(), kernels, buf, &other)?;
                    self.context().flush().map_err(Error::device(op))
                });
                if let Err(e) = reduced {
                    failed.get_or_insert(e);
                }
            }
            d <<= 1;
        }
        failed.map_or(Ok(()), Err)
    }

    /// The reduce-scatter of [`allreduce_mapped`](Self::allreduce_mapped)
    /// in `steps` of the ring, in `buf`'s mapping (`first`, mapped again
    /// for each step after the last one's kernel): each step's chunk goes
    /// out of the mapping and its peer's comes into `inbox`, and a kernel
    /// reduces it into `buf`. A failure on this rank after the ranks
    /// agreed goes to `failed`, and zeros (in `spare`) go out in place of
    /// the buffer from then on, so that the other ranks still complete.
    pub(super) fn ring_reduce_scatter_mapped<'b, T: Reducible>(
        &self,
        op: &'static str,
        buf: &'b DeviceBuffer<T>,
        (kernels, inbox, chunks, steps): (&kernels::ReduceKernels, &Staged<T>, &Chunks, &[Step]),
        first: vkcompute::MappedBuffer<'b, T>,
        (failed, spare): (&mut Option<Error>, &mut Vec<T>),
    ) -> Result<()> {
        let n = buf.len();
        // The staged ring's pieces (`pipeline`), posted at once here.
        let piece = chunks.piece_bytes::<T>(steps);
        let mut mapping = Some(first);
        for step in steps {
            let (send, recv) = (chunks.span(&step.send), chunks.span(&step.recv));
            let mapped = self.map_or_note(op, buf, mapping.take(), failed);
            if mapped.is_none() && spare.is_empty() {
                *spare = vec![<T as bytemuck::Zeroable>::zeroed(); n];
            }
            {
                let out: &[T] = mapped.as_deref().unwrap_or(spare);
                let mut into = inbox.typed.as_mut_slice().map_err(Error::device(op))?;
                self.sendrecv_step(op, step, (&out[send], &mut into[..recv.len()]), piece)?;
            }
            if let Some(Err(e)) = mapped.map(|m| m.finish().map_err(Error::device(op))) {
                failed.get_or_insert(e);
            }
            self.reduce_into(op, (buf, recv), kernels, (&inbox.typed, 1, 0), failed);
        }
        Ok(())
    }

    /// Enqueues the reduction of `count` operands of `incoming`, `stride`
    /// elements apart, into `range` of `buf` and submits it
    /// (`kernels::enqueue_reduce_many`); an error goes to `failed`, and
    /// nothing happens where `failed` holds one already or `range` is
    /// empty.
    pub(super) fn reduce_into<T: Reducible>(
        &self,
        op: &'static str,
        (buf, range): (&DeviceBuffer<T>, Range<usize>),
        kernels: &kernels::ReduceKernels,
        (incoming, count, stride): (&HostBuffer<T>, usize, usize),
        failed: &mut Option<Error>,
    ) {
        if failed.is_some() || range.is_empty() {
            return;
        }
        let reduced = buf
            .create_sub_buffer::<T>(range.start, range.len())
            .map_err(Error::device(op))
            .and_then(|acc| {
                let operands = kernels::Operand::Host(incoming);
                let shape = (count, stride);
                kernels::enqueue_reduce_many(op, self.context(), kernels, &acc, operands, shape)?;
                self.context().flush().map_err(Error::device(op))
            });
        if let Err(e) = reduced {
            failed.get_or_insert(e);
        }
    }

    /// The reduce-scatter of [`allreduce_mapped`](Self::allreduce_mapped)
    /// with every chunk sent to its owner at once: this rank sends chunk
    /// `k` of `buf`'s mapping (`first`) to rank `k`, receives its own
    /// chunk of every other rank into `inbox` (`stride` elements apart,
    /// the rank after it first), and one kernel pass reduces them all into
    /// its chunk of `buf` (operands in that order). The same bytes as the
    /// ring in one exchange instead of `size - 1`, and one read of each
    /// operand on the device instead of a kernel pass per step: on
    /// lavapipe the kernels are most of an allreduce's time (see
    /// CONTRIBUTING.md). A failure on this rank after the exchange goes to
    /// `failed`.
    pub(super) fn direct_reduce_scatter_mapped<'b, T: Reducible>(
        &self,
        op: &'static str,
        buf: &'b DeviceBuffer<T>,
        (kernels, inbox, chunks, stride): (&kernels::ReduceKernels, &Staged<T>, &Chunks, usize),
        first: vkcompute::MappedBuffer<'b, T>,
        failed: &mut Option<Error>,
    ) -> Result<()> {
        let (rank, size) = (self.rank() as usize, self.size() as usize);
        let mine = chunks.ranges[rank].clone();
        let piece = plan::piece_len::<T>(chunks.longest()) * size_of::<T>();
        {
            let out: &[T] = &first;
            let mut into = inbox.typed.as_mut_slice().map_err(Error::device(op))?;
            // To the ranks before this one, nearest first; from the ranks
            // after it, nearest first (so no rank is every rank's first).
            let outs = (1..size)
                .map(|d| {
                    let to = (rank + size - d) % size;
                    let chunk = bytemuck::cast_slice(&out[chunks.ranges[to].clone()]);
                    (chunk, to as i32)
                })
                .collect();
            let ins = (into.chunks_mut(stride).take(size - 1).enumerate())
                .map(|(d, slot)| {
                    let from = (rank + 1 + d) % size;
                    (
                        bytemuck::cast_slice_mut(&mut slot[..mine.len()]),
                        from as i32,
                    )
                })
                .collect();
            raw::exchange_with_peers(op, self.raw(), outs, ins, COLLECTIVE_TAG, piece)?;
        }
        if let Err(e) = first.finish().map_err(Error::device(op)) {
            failed.get_or_insert(e);
        }
        let operands = (&inbox.typed, size - 1, stride);
        self.reduce_into(op, (buf, mine), kernels, operands, failed);
        Ok(())
    }

    /// `mapping`, or a new mapping of `buf`; `None` where `failed` holds an
    /// error already or mapping fails (then `failed` holds its error).
    pub(super) fn map_or_note<'b, T: Pod>(
        &self,
        op: &'static str,
        buf: &'b DeviceBuffer<T>,
        mapping: Option<vkcompute::MappedBuffer<'b, T>>,
        failed: &mut Option<Error>,
    ) -> Option<vkcompute::MappedBuffer<'b, T>> {
        if failed.is_some() {
            return None;
        }
        let mapped = match mapping {
            Some(m) => Ok(m),
            None => buf.map_to_host().map_err(Error::device(op)),
        };
        match mapped {
            Ok(m) => Some(m),
            Err(e) => {
                *failed = Some(e);
                None
            }
        }
    }
}
