//! The reductions whose chunks travel whole (`Route::Whole` and
//! `Route::Mapped` but for MPI's allreduce), prepared here and run by the
//! executor (`exec::Whole`): a working buffer on the device, this rank's
//! input in it, seen by the host in its own mapping (an allreduce's
//! device buffer that maps directly and that the kernels bind in place:
//! the reduction works in the buffer itself) or through a pinned mirror.

use std::sync::atomic::Ordering;

use vkcompute::{DeviceBuffer, MappedBuffer};

use crate::communicator::Communicator;
use crate::element::{ReduceOp, Reducible};
use crate::error::{Error, Result};
use crate::exec::{Pinned, View, Whole};
use crate::plan::schedule;
use crate::plan::{AllreduceAlgorithm, Plan};
use crate::transport::kernels::{self, ReduceKernels};
use crate::transport::place::{Buffer, Place};
use crate::wire::Header;

/// The working buffer of a reduction: this rank's own copy of its input,
/// or the caller's buffer itself (mapped in place).
pub(super) enum Work<'b, T: bytemuck::Pod> {
    Own(DeviceBuffer<T>),
    InPlace(&'b DeviceBuffer<T>),
}

impl<T: bytemuck::Pod> Work<'_, T> {
    fn buffer(&self) -> &DeviceBuffer<T> {
        match self {
            Work::Own(own) => own,
            Work::InPlace(buf) => buf,
        }
    }
}

/// What a whole-chunk reduction prepares before the ranks agree: its
/// kernels, its working buffer and how the host sees it (the first
/// mapping, or a mirror), the inbox that incoming chunks land in (the
/// direct reduce-scatter's landing where this rank offers it), and for
/// recursive doubling the buffer the upper rank keeps its operand in.
pub(super) struct Prepared<'b, T: bytemuck::Pod> {
    kernel: ReduceKernels,
    work: Work<'b, T>,
    pub(super) first: Option<MappedBuffer<'b, T>>,
    pub(super) mirror: Option<Pinned<T>>,
    /// Whether `mirror` is an outbox (`Extras::outbox`).
    outbox: bool,
    inbox: Pinned<T>,
    saved: Option<Pinned<T>>,
    /// Whether this rank offers the direct reduce-scatter.
    pub(super) offer: bool,
}

impl<'b, T: Reducible> Prepared<'b, T> {
    pub(super) fn work(&self) -> &DeviceBuffer<T> {
        self.work.buffer()
    }

    /// The executor over these buffers, with the first mapping (taken
    /// out of `first` first).
    pub(super) fn run<'p>(
        &'p self,
        comm: &'p Communicator,
        op: &'static str,
        first: Option<MappedBuffer<'p, T>>,
    ) -> Whole<'p, T> {
        let view = match &self.mirror {
            Some(outbox) if self.outbox => View::Outbox(&outbox.typed),
            Some(mirror) => View::Mirror(&mirror.typed),
            None => View::Mapping(first),
        };
        Whole::new(
            (comm.team(), op),
            (self.work.buffer(), view),
            &self.kernel,
            &self.inbox.typed,
        )
    }

    /// Gives the host buffers back for reuse.
    pub(super) fn keep(self, comm: &Communicator) {
        drop(self.first);
        for pinned in [self.mirror, Some(self.inbox), self.saved]
            .into_iter()
            .flatten()
        {
            pinned.keep(&comm.pool);
        }
    }
}

/// Which extra buffers a reduction needs: the direct reduce-scatter's
/// landing of this many elements (where wanted: one that cannot be had
/// is not offered), recursive doubling's, and, off the mapping, an
/// outbox of this many elements instead of a mirror (`exec::View`: for
/// reductions that only send out of the host's view).
#[derive(Default)]
pub(super) struct Extras {
    pub(super) landing: Option<usize>,
    pub(super) doubling: bool,
    pub(super) outbox: Option<usize>,
}

impl Communicator {
    /// `buf`'s device buffer where allreduce works in it in place: it maps
    /// directly and the kernels bind it.
    pub(super) fn mapped_in_place<'b, T: bytemuck::Pod, B: Buffer<T> + ?Sized>(
        &self,
        buf: &'b B,
    ) -> Option<&'b DeviceBuffer<T>> {
        match buf.place() {
            Place::Device(dev) if self.maps_device_memory() && binds_in_place(self, dev) => {
                Some(dev)
            }
            _ => None,
        }
    }

    /// Prepares a reduction with `reduce` over a working buffer: `in_place`
    /// (mapped here: a buffer mapped elsewhere fails now, before the ranks
    /// agree), or a new one of `len` elements filled by `fill` (from this
    /// rank's input) with a mirror as long (or the outbox of `extras`);
    /// with an inbox of `inbox` elements.
    pub(super) fn prepare_whole<'b, T: Reducible>(
        &self,
        op: &'static str,
        reduce: ReduceOp,
        (in_place, len, fill): (
            Option<&'b DeviceBuffer<T>>,
            usize,
            impl FnOnce(&DeviceBuffer<T>) -> vkcompute::Result<()>,
        ),
        inbox: usize,
        extras: Extras,
    ) -> Result<Prepared<'b, T>> {
        let kernel = self.reducer.kernel::<T>(op, self.context(), reduce)?;
        let landing =
            (extras.landing).and_then(|landing| Pinned::<T>::new(&self.pool, op, landing).ok());
        let offer = landing.is_some();
        let inbox = match landing {
            Some(landing) => landing,
            None => Pinned::new(&self.pool, op, inbox)?,
        };
        let (work, first, mirror) = match in_place {
            Some(buf) => {
                let mapping = buf.map_to_host().map_err(Error::device(op))?;
                (Work::InPlace(buf), Some(mapping), None)
            }
            None => {
                let own =
                    (self.context().enqueue_create_buffer::<T>(len)).map_err(Error::device(op))?;
                fill(&own)
                    .and_then(|()| self.context().flush())
                    .map_err(Error::device(op))?;
                let host = Pinned::new(&self.pool, op, extras.outbox.unwrap_or(len))?;
                (Work::Own(own), None, Some(host))
            }
        };
        let n = work.buffer().len();
        let saved = if extras.doubling {
            Some(Pinned::new(&self.pool, op, n)?)
        } else {
            None
        };
        Ok(Prepared {
            kernel,
            work,
            first,
            mirror,
            outbox: extras.outbox.is_some(),
            inbox,
            saved,
            offer,
        })
    }

    /// `allreduce` of chunks that travel whole: the reduce-scatter (ring
    /// or halving, or the direct one where every rank offers it: the ring
    /// on 3 to `DIRECT_MAX_RANKS` ranks, all mapped in place, each with
    /// its landing of `size - 1` chunks allocated) and the allgather, or
    /// recursive doubling; in `in_place`'s mapping, or through a mirror
    /// whose result is then copied into `buf`.
    pub(super) fn allreduce_whole<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        op: &'static str,
        (buf, reduce, in_place): (&B, ReduceOp, Option<&DeviceBuffer<T>>),
        (header, plan): (Header, Plan),
    ) -> Result<()> {
        let (n, size, rank) = (buf.elements(), self.size() as usize, self.rank() as usize);
        let doubling = plan.algorithm == AllreduceAlgorithm::Doubling;
        let steps = schedule::reduce_scatter(plan.schedule, rank, size);
        let stride = self.stride::<T>(n);
        let extras = Extras {
            landing: (plan.algorithm == AllreduceAlgorithm::Direct).then_some((size - 1) * stride),
            doubling,
            outbox: None,
        };
        let fill = |acc: &DeviceBuffer<T>| buf.place().copy_range_to(0, n, acc);
        let inbox = plan.chunks.longest_step(&steps);
        let prepared = self.prepare_whole(op, reduce, (in_place, n, fill), inbox, extras);
        let offer = matches!(&prepared, Ok(p) if p.offer);
        let (mut prepared, headers) = self.agree_headers(op, header.direct(offer), prepared)?;
        let first = prepared.first.take();
        let ran = {
            let mut run = prepared.run(self, op, first);
            if let Some(saved) = &prepared.saved {
                run.doubling(&saved.typed)?;
            } else {
                if prepared.offer && headers.iter().all(Header::offers_direct) {
                    (self.direct_reduce_scatters).fetch_add(1, Ordering::Relaxed);
                    run.direct_reduce_scatter(&plan.chunks, stride)?;
                } else {
                    run.reduce_scatter(&plan.chunks, &steps)?;
                }
                run.allgather(&plan.chunks, plan.schedule)?;
            }
            run.finish()
        };
        // Through a mirror: the result is in the working buffer after
        // doubling, in the mirror after the allgather.
        let result = ran.and_then(|()| {
            match &prepared.mirror {
                None => Ok(()),
                Some(_) if doubling => buf.place().copy_from(prepared.work()),
                Some(mirror) => buf.place().copy_from(&mirror.typed),
            }
            .map_err(Error::device(op))
        });
        prepared.keep(self);
        result
    }
}

/// Whether the reduction kernels can bind the chunks of `buf` where it
/// lies: it starts at the binding alignment in its `VkBuffer`.
fn binds_in_place<T: bytemuck::Pod>(comm: &Communicator, buf: &DeviceBuffer<T>) -> bool {
    buf.raw().offset % kernels::align_bytes(comm.context()) as u64 == 0
}
