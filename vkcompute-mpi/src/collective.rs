//! The collectives: barrier, broadcast, allreduce, reduce, allgather and
//! reduce_scatter of device and host buffers (any [`Buffer`]: a host
//! buffer is copied to and from the device working buffers by the same
//! stream-ordered copies as a device buffer).
//!
//! MPI moves bytes between pinned host buffers (or, for `broadcast` and
//! `allreduce` of a device buffer that maps directly, in the buffer's
//! mapping); the arithmetic of the reductions runs in this crate's kernels
//! on the device. The reductions are a reduce-scatter (each rank then
//! owning one fully reduced chunk) and, for allreduce, an allgather of the
//! chunks, chosen by size (`schedule`): bandwidth-optimal, every rank
//! sending `2 (n - 1) / n` of the buffer, in the ring (`size - 1` steps
//! each), or on 4, 8, ... ranks up to `HALVING_MAX_BYTES` (4 MiB) in
//! recursive halving and doubling (`log2(size)` steps each). An allreduce
//! of at most `DOUBLING_MAX_BYTES` (64 KiB) on 4, 8, ... ranks takes
//! recursive doubling instead (log2(n) exchanges of the whole buffer).
//! Where every rank maps its device buffer in place and the ring would
//! run on 3 to `DIRECT_MAX_RANKS` (8) ranks, the allreduce's
//! reduce-scatter sends every chunk to its owner at once instead, and
//! the owner reduces the `n - 1` chunks it receives in one kernel pass:
//! the ring's bytes, without its `n - 1` dependent steps, and one read
//! of each operand instead of a kernel pass per step (the ranks learn
//! that every rank can from the header exchange, `Header::offers_direct`).
//! Chunks start at multiples of 256 bytes
//! (and of the device's `minStorageBufferOffsetAlignment`), so that a
//! kernel can bind any of them.
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
use std::ops::Range;

use bytemuck::Pod;
use vkcompute::{DeviceBuffer, HostBuffer};

use crate::communicator::{Communicator, COLLECTIVE_TAG};
use crate::element::{Element, ReduceOp, Reducible};
use crate::error::{Error, Result};
use crate::header::{self, Failure, Header, Kind};
use crate::kernels;
use crate::pipeline;
use crate::place::{self, Buffer, Place};
use crate::raw;
use crate::schedule::{self, Algorithm, Step};

mod on_node;

/// The largest allreduce (in bytes) that takes recursive doubling rather
/// than the ring, where the number of ranks is a power of two and at least
/// 4: log2(n) steps, each exchanging and reducing the whole buffer,
/// against the ring's 2 (n - 1) steps over chunks of 1/n of it. Measured
/// (release mpi_bench, mapped path, two runs each, microseconds per
/// allreduce, ring against doubling): 4 ranks 4 KiB 799/858 against
/// 337/514, 64 KiB 1480/2417 against 1235/1274, 256 KiB 3063/3321 against
/// 3435/4079; 2 ranks 4 KiB 58/51 against 60/66 (so never on 2 ranks).
pub(crate) const DOUBLING_MAX_BYTES: usize = 64 << 10;

/// The largest buffer (in bytes) whose reduce-scatter and allgather take
/// recursive halving and doubling (`schedule`) rather than the ring, where
/// the number of ranks is a power of two and at least 4 (on 2 ranks the
/// two are one step alike): the same bytes in `log2(n)` steps instead of
/// `n - 1`, with host buffers of up to half the buffer (the ring's: one
/// chunk). Above it the ring (the staged allreduce pipelines chunks of
/// over 4 MiB). A reduce_scatter whose blocks leave gaps between them
/// (not a multiple of the binding alignment) keeps the ring. Measured for
/// allreduce only; reduce, reduce_scatter and allgather follow the same
/// rule unmeasured. Release mpi_bench, 4 ranks, allreduce of f32, 18 runs
/// of a build with halving and one without taking turns; median time with
/// halving over time with the ring: mapped path 256 KiB 0.67x, 1 MiB
/// 0.85x, 4 MiB 0.90x; staged 1.04x, 0.84x, 0.96x; at 16 MiB (both the
/// ring) 1.00x and 1.01x, and the same-node path (unchanged) 0.80-1.16x,
/// which is this VM's noise. 4 MiB is the largest size measured.
pub(crate) const HALVING_MAX_BYTES: usize = 4 << 20;

/// The most ranks whose mapped allreduce sends every chunk to its owner
/// at once (`Communicator::takes_direct`): each rank then has
/// `size - 1` messages under way at once and a landing of `size - 1`
/// chunks; above it the ring.
pub(crate) const DIRECT_MAX_RANKS: usize = 8;

/// The largest landing (bytes of pinned host memory, `size - 1` chunks)
/// that the direct reduce-scatter takes; above it the ring (one chunk).
pub(crate) const DIRECT_MAX_LANDING_BYTES: usize = 256 << 20;

/// How an allreduce moves and reduces its data
/// ([`Communicator::allreduce_algorithm`]), chosen by size and path alike
/// on every rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AllreduceAlgorithm {
    /// No data moves: an empty buffer, or a communicator of one rank
    /// (the ranks still exchange headers).
    Local,
    /// Recursive doubling: log2(n) exchanges of the whole buffer (4, 8,
    /// ... ranks, at most 64 KiB).
    Doubling,
    /// Recursive halving (the reduce-scatter) and doubling (the
    /// allgather): log2(n) steps each (4, 8, ... ranks, at most 4 MiB).
    Halving,
    /// The ring: n - 1 steps of one chunk in each half (in pieces through
    /// pinned host memory on the staged path).
    Ring,
    /// The reduce-scatter sends every chunk to its owner at once, which
    /// reduces them in one kernel pass; the allgather is the ring's (3 to
    /// 8 ranks that all map their buffers in place, where the ring would
    /// run).
    Direct,
    /// Every rank reads every rank's chunks: it reduces its own chunk of
    /// every rank's memory, then copies every reduced chunk out of its
    /// owner's (the same-node path, where the ranks read each other's
    /// exported memory).
    AllToAll,
}

impl AllreduceAlgorithm {
    /// The name [`AllreduceAlgorithm::AllToAll`] had before (it named the
    /// algorithm after the transport it runs on, [`Path::SameNode`](crate::Path::SameNode)).
    #[deprecated(note = "renamed `AllreduceAlgorithm::AllToAll`")]
    #[doc(hidden)]
    #[allow(non_upper_case_globals, reason = "the old variant's name")]
    pub const SameNode: AllreduceAlgorithm = AllreduceAlgorithm::AllToAll;

    /// A short name: `local`, `doubling`, `halving`, `ring`, `direct` or
    /// `all_to_all`.
    pub fn name(self) -> &'static str {
        match self {
            AllreduceAlgorithm::Local => "local",
            AllreduceAlgorithm::Doubling => "doubling",
            AllreduceAlgorithm::Halving => "halving",
            AllreduceAlgorithm::Ring => "ring",
            AllreduceAlgorithm::Direct => "direct",
            AllreduceAlgorithm::AllToAll => "all_to_all",
        }
    }
}

/// Where each rank's chunk lies in a collective's working buffer: chunk
/// `k` is `starts[k]..starts[k] + lens[k]`.
pub(crate) struct Chunks {
    pub(crate) ranges: Vec<Range<usize>>,
}

impl Chunks {
    /// `len` elements cut into `size` chunks of `stride` (the last ones
    /// shorter or empty).
    fn contiguous(len: usize, size: usize, stride: usize) -> Chunks {
        Chunks {
            ranges: (0..size)
                .map(|k| {
                    let start = (k * stride).min(len);
                    start..(start + stride).min(len)
                })
                .collect(),
        }
    }

    /// `size` chunks of `len` elements each, `stride` apart.
    fn blocks(len: usize, size: usize, stride: usize) -> Chunks {
        Chunks {
            ranges: (0..size).map(|k| k * stride..k * stride + len).collect(),
        }
    }

    pub(crate) fn longest(&self) -> usize {
        self.ranges.iter().map(|r| r.len()).max().unwrap_or(0)
    }

    /// The elements of the chunks `ks` (a run of chunk indices), with any
    /// gaps between them.
    fn span(&self, ks: &Range<usize>) -> Range<usize> {
        match (
            self.ranges.get(ks.start),
            self.ranges.get(ks.end.wrapping_sub(1)),
        ) {
            (Some(first), Some(last)) if !ks.is_empty() => first.start..last.end,
            _ => 0..0,
        }
    }

    /// The longest chunk, or span that any of `steps` sends or receives.
    fn longest_step(&self, steps: &[Step]) -> usize {
        let spans = steps.iter().flat_map(|s| [&s.send, &s.recv]);
        let longest = spans.map(|ks| self.span(ks).len()).max().unwrap_or(0);
        longest.max(self.longest())
    }

    /// The piece (bytes) that `steps`' messages travel in, on every path
    /// (`pipeline::piece_len` of the longest step), so that ranks on
    /// different paths cut their messages alike.
    fn piece_bytes<T>(&self, steps: &[Step]) -> usize {
        pipeline::piece_len::<T>(self.longest_step(steps)) * size_of::<T>()
    }
}

/// The algorithm of a reduce-scatter or allgather of `bytes` in all over
/// `size` ranks (see [`HALVING_MAX_BYTES`]).
fn algorithm(size: usize, bytes: usize) -> Algorithm {
    if size >= 4 && size.is_power_of_two() && bytes <= HALVING_MAX_BYTES {
        Algorithm::Halving
    } else {
        Algorithm::Ring
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

/// A pinned host buffer of `len` elements of `T`, from the communicator's
/// staging buffers.
struct Staged<T> {
    raw: HostBuffer<u8>,
    typed: HostBuffer<T>,
}

impl<T: Pod> Staged<T> {
    fn new(comm: &Communicator, op: &'static str, len: usize) -> Result<Self> {
        let raw = comm.staging(op, len * size_of::<T>())?;
        let typed = raw
            .create_sub_buffer::<T>(0, len)
            .map_err(Error::device(op))?;
        Ok(Staged { raw, typed })
    }

    fn part(&self, op: &'static str, range: Range<usize>) -> Result<HostBuffer<T>> {
        self.typed
            .create_sub_buffer::<T>(range.start, range.len())
            .map_err(Error::device(op))
    }

    fn keep(self, comm: &Communicator) {
        drop(self.typed);
        comm.keep_staging(self.raw);
    }
}

/// Enqueues a copy of `src` into `dst` on `src`'s stream and submits it.
fn copy_out<T: Pod>(op: &'static str, src: &DeviceBuffer<T>, dst: &HostBuffer<T>) -> Result<()> {
    place::copy_parts((dst, 0), (src, 0), src.len())
        .and_then(|()| src.context().flush())
        .map_err(Error::device(op))
}

/// What a reduction prepared before the ranks agreed: its kernel, its
/// working buffer on the device (already holding this rank's input), its
/// chunks and its host buffers.
struct Ring<T> {
    kernel: kernels::ReduceKernels,
    acc: DeviceBuffer<T>,
    chunks: Chunks,
    algorithm: Algorithm,
    outbox: Staged<T>,
    inbox: Staged<T>,
}

impl<T: Pod> Ring<T> {
    /// The chunk `k` of the working buffer.
    fn chunk(&self, op: &'static str, k: usize) -> Result<DeviceBuffer<T>> {
        let range = &self.chunks.ranges[k];
        self.acc
            .create_sub_buffer::<T>(range.start, range.len())
            .map_err(Error::device(op))
    }

    /// Gives the host buffers back for reuse.
    fn keep(self, comm: &Communicator) {
        self.outbox.keep(comm);
        self.inbox.keep(comm);
    }
}

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
        let agreed = header::agree(op, self.raw(), self.rank(), self.size(), mine);
        let prepared = prepared?;
        Ok((prepared, agreed?))
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
        if n > 0 && self.same_node.spans_communicator() {
            return self.broadcast_same_node(op, buf, root, header);
        }
        // Every path sends the same pieces, so that ranks on different
        // paths pair.
        let piece = pipeline::piece_len::<T>(n);
        let piece_bytes = piece * size_of::<T>();
        if let Place::Device(dev) = buf.place() {
            if n > 0 && self.size() > 1 && self.maps_device_memory() {
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
        if piece < n && self.size() > 1 {
            return self.broadcast_pipelined(op, (buf, root), header, piece);
        }
        let prepared = self.check_rank(op, root).and_then(|()| {
            let staged = Staged::<T>::new(self, op, n)?;
            if self.rank() == root {
                (buf.place().copy_range_to(0, n, &staged.typed)).map_err(Error::device(op))?;
            }
            Ok(staged)
        });
        let staged = self.agree(op, header, prepared)?;
        if n == 0 || self.size() == 1 {
            staged.keep(self);
            return Ok(());
        }
        {
            let mut all = staged.typed.as_mut_slice().map_err(Error::device(op))?;
            let bytes = bytemuck::cast_slice_mut(&mut all);
            raw::broadcast(op, self.raw(), bytes, root, piece_bytes)?;
        }
        if self.rank() != root {
            (buf.place().copy_from(&staged.typed)).map_err(Error::device(op))?;
        }
        staged.keep(self);
        Ok(())
    }

    /// Prepares a reduction over `chunks` of a new working buffer of
    /// `acc_len` elements, filled by `fill` (from this rank's input), with
    /// host buffers for the longest step of `algorithm`'s reduce-scatter.
    fn prepare_ring<T: Reducible>(
        &self,
        op: &'static str,
        reduce: ReduceOp,
        acc_len: usize,
        (chunks, algorithm): (Chunks, Algorithm),
        fill: impl FnOnce(&DeviceBuffer<T>) -> vkcompute::Result<()>,
    ) -> Result<Ring<T>> {
        let kernel = self.reducer.kernel::<T>(op, self.context(), reduce)?;
        let acc = self
            .context()
            .enqueue_create_buffer::<T>(acc_len)
            .map_err(Error::device(op))?;
        fill(&acc)
            .and_then(|()| self.context().flush())
            .map_err(Error::device(op))?;
        let (rank, size) = (self.rank() as usize, self.size() as usize);
        let steps = schedule::reduce_scatter(algorithm, rank, size);
        let longest = chunks.longest_step(&steps);
        Ok(Ring {
            kernel,
            acc,
            outbox: Staged::new(self, op, longest)?,
            inbox: Staged::new(self, op, longest)?,
            chunks,
            algorithm,
        })
    }

    /// The reduce-scatter over the staged working buffer: after its steps
    /// (`schedule::reduce_scatter`), chunk `rank` of this rank's working
    /// buffer holds the reduction of every rank's. Each step copies the
    /// chunks it sends to the outbox, exchanges them (in the pieces the
    /// mapped path sends too) and reduces the chunks received into the
    /// working buffer.
    fn ring_reduce_scatter<T: Reducible>(&self, op: &'static str, ring: &Ring<T>) -> Result<()> {
        let (rank, size) = (self.rank() as usize, self.size() as usize);
        let steps = schedule::reduce_scatter(ring.algorithm, rank, size);
        let piece = ring.chunks.piece_bytes::<T>(&steps);
        for step in &steps {
            let (send, recv) = (ring.chunks.span(&step.send), ring.chunks.span(&step.recv));
            let outbox = ring.outbox.part(op, 0..send.len())?;
            let sent = (ring.acc.create_sub_buffer::<T>(send.start, send.len()))
                .map_err(Error::device(op))?;
            copy_out(op, &sent, &outbox)?;
            {
                let out = outbox.as_slice().map_err(Error::device(op))?;
                let mut into = ring.inbox.typed.as_mut_slice().map_err(Error::device(op))?;
                self.sendrecv_step(op, step, (&out, &mut into[..recv.len()]), piece)?;
            }
            let acc = ring
                .acc
                .create_sub_buffer::<T>(recv.start, recv.len())
                .map_err(Error::device(op))?;
            let incoming = ring.inbox.part(op, 0..recv.len())?;
            kernels::enqueue_reduce(op, self.context(), &ring.kernel, &acc, &incoming)?;
        }
        Ok(())
    }

    /// One step of a schedule: `out` to `step.to` while `into` comes from
    /// `step.from`, in messages of `piece` bytes (`raw::sendrecv_pieces`).
    fn sendrecv_step<T: Pod>(
        &self,
        op: &'static str,
        step: &Step,
        (out, into): (&[T], &mut [T]),
        piece: usize,
    ) -> Result<()> {
        let (out, into) = (bytemuck::cast_slice(out), bytemuck::cast_slice_mut(into));
        raw::sendrecv_pieces(
            op,
            self.raw(),
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
    fn ring_allgather<T: Pod>(
        &self,
        op: &'static str,
        all: &mut [T],
        (chunks, algorithm): (&Chunks, Algorithm),
    ) -> Result<()> {
        let (rank, size) = (self.rank() as usize, self.size() as usize);
        let steps = schedule::allgather(algorithm, rank, size);
        let piece = chunks.piece_bytes::<T>(&steps);
        for step in &steps {
            let (send, recv) = (chunks.span(&step.send), chunks.span(&step.recv));
            let (out, into) = disjoint(all, send, recv);
            self.sendrecv_step(op, step, (out, into), piece)?;
        }
        Ok(())
    }

    /// The chunk stride of a reduction of `len` elements of `T` over the
    /// ranks: a multiple of the binding alignment.
    fn stride<T>(&self, len: usize) -> usize {
        let align = (kernels::align_bytes(self.context()) / size_of::<T>()).max(1);
        len.div_ceil(self.size() as usize)
            .next_multiple_of(align)
            .max(align)
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
        let (n, size) = (buf.elements(), self.size() as usize);
        let header = Header::new(Kind::Allreduce, T::TYPE, n).reduce(reduce);
        let trivial = n == 0 || size == 1;
        if !trivial && self.same_node.spans_communicator() {
            return self.allreduce_same_node(op, buf, reduce, header);
        }
        if let (false, Some(dev)) = (trivial, self.mapped_in_place(buf)) {
            return self.allreduce_mapped(op, dev, reduce, header);
        }
        if !trivial && self.doubles::<T>(n) {
            let fill = |acc: &DeviceBuffer<T>| buf.place().copy_range_to(0, n, acc);
            let whole = (Chunks::contiguous(n, 1, n), Algorithm::Ring);
            let prepared = self.prepare_ring(op, reduce, n, whole, fill);
            let ring = self.agree(op, header, prepared)?;
            self.doubling_staged(op, &ring)?;
            (buf.place().copy_from(&ring.acc)).map_err(Error::device(op))?;
            ring.keep(self);
            return Ok(());
        }
        if !trivial {
            if let Some(pieces) = self.pipelines::<T>(self.chunked::<T>(n)) {
                return self.allreduce_pipelined(op, (buf, reduce), header, pieces);
            }
        }
        let prepared = if trivial {
            Ok(None)
        } else {
            let fill = |acc: &DeviceBuffer<T>| buf.place().copy_range_to(0, n, acc);
            self.prepare_ring(op, reduce, n, self.chunked::<T>(n), fill)
                .and_then(|ring| Ok(Some((ring, Staged::<T>::new(self, op, n)?))))
        };
        let Some((ring, result)) = self.agree(op, header, prepared)? else {
            return Ok(());
        };
        self.ring_reduce_scatter(op, &ring)?;
        let rank = self.rank() as usize;
        let mine = ring.chunks.ranges[rank].clone();
        copy_out(op, &ring.chunk(op, rank)?, &result.part(op, mine)?)?;
        {
            let mut all = result.typed.as_mut_slice().map_err(Error::device(op))?;
            self.ring_allgather(op, &mut all, (&ring.chunks, ring.algorithm))?;
        }
        (buf.place().copy_from(&result.typed)).map_err(Error::device(op))?;
        result.keep(self);
        ring.keep(self);
        Ok(())
    }

    /// The algorithm [`allreduce`](Self::allreduce) takes for `buf`, where
    /// every rank passes a buffer on the same path as this rank's (a
    /// device buffer that maps in place, or not). Where ranks differ, or a
    /// rank cannot allocate the landing of the direct reduce-scatter, an
    /// allreduce that this says is [`AllreduceAlgorithm::Direct`] takes
    /// the ring.
    pub fn allreduce_algorithm<T: Reducible, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
    ) -> AllreduceAlgorithm {
        let (n, size) = (buf.elements(), self.size() as usize);
        if n == 0 || size == 1 {
            return AllreduceAlgorithm::Local;
        }
        if self.same_node.spans_communicator() {
            return AllreduceAlgorithm::AllToAll;
        }
        if self.doubles::<T>(n) {
            return AllreduceAlgorithm::Doubling;
        }
        let algorithm = self.algorithm::<T>(n);
        let mapped = self.mapped_in_place(buf).is_some();
        match algorithm {
            Algorithm::Halving => AllreduceAlgorithm::Halving,
            Algorithm::Ring if mapped && self.takes_direct::<T>(algorithm, n) => {
                AllreduceAlgorithm::Direct
            }
            Algorithm::Ring => AllreduceAlgorithm::Ring,
        }
    }

    /// The algorithm of a reduce-scatter or allgather whose buffer holds
    /// `n` elements of `T` in all: recursive halving and doubling on 4, 8,
    /// ... ranks up to [`HALVING_MAX_BYTES`], else the ring. The same on
    /// every rank (it depends only on what the ranks agree on).
    fn algorithm<T>(&self, n: usize) -> Algorithm {
        algorithm(self.size() as usize, n.saturating_mul(size_of::<T>()))
    }

    /// `n` elements cut into one chunk per rank, and their algorithm.
    fn chunked<T>(&self, n: usize) -> (Chunks, Algorithm) {
        let chunks = Chunks::contiguous(n, self.size() as usize, self.stride::<T>(n));
        (chunks, self.algorithm::<T>(n))
    }

    /// `chunks` and their piece length where a collective over them takes
    /// the pipelined ring (`pipelined.rs`): the ring, with chunks longer
    /// than one piece. The same on every rank (it depends only on what the
    /// ranks agree on).
    fn pipelines<T>(&self, (chunks, algorithm): (Chunks, Algorithm)) -> Option<(Chunks, usize)> {
        let piece = pipeline::piece_len::<T>(chunks.longest());
        (algorithm == Algorithm::Ring && piece < chunks.longest()).then_some((chunks, piece))
    }

    /// Whether an allreduce of `n` elements of `T` takes recursive doubling
    /// rather than the ring: a power-of-two number of ranks, at least 4,
    /// and at most [`DOUBLING_MAX_BYTES`]. The same on every rank (it
    /// depends only on what the ranks agree on), whichever path each rank
    /// takes.
    fn doubles<T>(&self, n: usize) -> bool {
        let size = self.size() as usize;
        size >= 4
            && size.is_power_of_two()
            && n.saturating_mul(size_of::<T>()) <= DOUBLING_MAX_BYTES
    }

    /// Recursive doubling over the staged working buffer `ring.acc` (one
    /// chunk, the whole buffer, with host buffers as long): at distance
    /// `d` = 1, 2, 4, ... each rank swaps its whole partial result with rank
    /// `rank ^ d` and reduces, the lower rank's operand first on both
    /// sides, so that both get the same bits.
    fn doubling_staged<T: Reducible>(&self, op: &'static str, ring: &Ring<T>) -> Result<()> {
        let (rank, size, n) = (self.rank() as usize, self.size() as usize, ring.acc.len());
        let mut d = 1;
        while d < size {
            let partner = (rank ^ d) as i32;
            let outbox = ring.outbox.part(op, 0..n)?;
            copy_out(op, &ring.acc, &outbox)?;
            {
                let out = outbox.as_slice().map_err(Error::device(op))?;
                let mut into = ring.inbox.typed.as_mut_slice().map_err(Error::device(op))?;
                raw::sendrecv(
                    op,
                    self.raw(),
                    bytemuck::cast_slice(&out),
                    partner,
                    bytemuck::cast_slice_mut(&mut into[..n]),
                    partner,
                    COLLECTIVE_TAG,
                )?;
            }
            let inbox = ring.inbox.part(op, 0..n)?;
            if rank & d == 0 {
                kernels::enqueue_reduce(op, self.context(), &ring.kernel, &ring.acc, &inbox)?;
            } else {
                // theirs OP mine: the partner's (lower) operand goes first.
                (ring.acc.enqueue_copy_from(&inbox)).map_err(Error::device(op))?;
                kernels::enqueue_reduce(op, self.context(), &ring.kernel, &ring.acc, &outbox)?;
            }
            self.context().flush().map_err(Error::device(op))?;
            d <<= 1;
        }
        Ok(())
    }

    /// `buf`'s device buffer where allreduce works in it in place
    /// (`allreduce_mapped`): it maps directly and the kernels bind it.
    fn mapped_in_place<'b, T: Pod, B: Buffer<T> + ?Sized>(
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
    fn allreduce_mapped<T: Reducible>(
        &self,
        op: &'static str,
        buf: &DeviceBuffer<T>,
        reduce: ReduceOp,
        header: Header,
    ) -> Result<()> {
        let (n, size, rank) = (buf.len(), self.size() as usize, self.rank() as usize);
        let doubling = self.doubles::<T>(n);
        let (chunks, algorithm) = if doubling {
            (Chunks::contiguous(n, 1, n), Algorithm::Ring)
        } else {
            self.chunked::<T>(n)
        };
        let steps = schedule::reduce_scatter(algorithm, rank, size);
        let stride = self.stride::<T>(n);
        let wanted = !doubling && self.takes_direct::<T>(algorithm, n);
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
    fn doubling_mapped<T: Reducible>(
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

    /// Whether an allreduce of `n` elements of `T` whose reduce-scatter
    /// takes `algorithm` may send every chunk to its owner at once
    /// ([`direct_reduce_scatter_mapped`](Self::direct_reduce_scatter_mapped)):
    /// the ring on 3 to [`DIRECT_MAX_RANKS`] ranks, with a landing of at
    /// most [`DIRECT_MAX_LANDING_BYTES`]. The same on every rank; it is
    /// taken where every rank offers it (on 2 ranks the ring is one such
    /// step already).
    fn takes_direct<T>(&self, algorithm: Algorithm, n: usize) -> bool {
        let size = self.size() as usize;
        let landing = (size.saturating_sub(1))
            .saturating_mul(self.stride::<T>(n))
            .saturating_mul(size_of::<T>());
        algorithm == Algorithm::Ring
            && (3..=DIRECT_MAX_RANKS).contains(&size)
            && landing <= DIRECT_MAX_LANDING_BYTES
    }

    /// The reduce-scatter of [`allreduce_mapped`](Self::allreduce_mapped)
    /// in `steps` of the ring, in `buf`'s mapping (`first`, mapped again
    /// for each step after the last one's kernel): each step's chunk goes
    /// out of the mapping and its peer's comes into `inbox`, and a kernel
    /// reduces it into `buf`. A failure on this rank after the ranks
    /// agreed goes to `failed`, and zeros (in `spare`) go out in place of
    /// the buffer from then on, so that the other ranks still complete.
    fn ring_reduce_scatter_mapped<'b, T: Reducible>(
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
    fn reduce_into<T: Reducible>(
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
    fn direct_reduce_scatter_mapped<'b, T: Reducible>(
        &self,
        op: &'static str,
        buf: &'b DeviceBuffer<T>,
        (kernels, inbox, chunks, stride): (&kernels::ReduceKernels, &Staged<T>, &Chunks, usize),
        first: vkcompute::MappedBuffer<'b, T>,
        failed: &mut Option<Error>,
    ) -> Result<()> {
        let (rank, size) = (self.rank() as usize, self.size() as usize);
        let mine = chunks.ranges[rank].clone();
        let piece = pipeline::piece_len::<T>(chunks.longest()) * size_of::<T>();
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
    fn map_or_note<'b, T: Pod>(
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
        let (n, size, rank) = (buf.elements(), self.size() as usize, self.rank());
        let header = Header::new(Kind::Reduce, T::TYPE, n)
            .reduce(reduce)
            .root(root);
        let trivial = n == 0 || size == 1;
        if !trivial && self.same_node.spans_communicator() {
            return self.reduce_same_node(op, (buf, reduce, root), header);
        }
        if !trivial {
            if let Some(pieces) = self.pipelines::<T>(self.chunked::<T>(n)) {
                return self.reduce_pipelined(op, (buf, reduce, root), header, pieces);
            }
        }
        let prepared = self.check_rank(op, root).and_then(|()| {
            if trivial {
                return Ok(None);
            }
            let fill = |acc: &DeviceBuffer<T>| buf.place().copy_range_to(0, n, acc);
            let ring = self.prepare_ring(op, reduce, n, self.chunked::<T>(n), fill)?;
            let result = if rank == root {
                Some(Staged::<T>::new(self, op, n)?)
            } else {
                None
            };
            Ok(Some((ring, result)))
        });
        let Some((ring, result)) = self.agree(op, header, prepared)? else {
            return Ok(());
        };
        self.ring_reduce_scatter(op, &ring)?;
        let mine = ring.chunks.ranges[rank as usize].clone();
        let own_chunk = ring.chunk(op, rank as usize)?;
        match result {
            None => {
                let outbox = ring.outbox.part(op, 0..mine.len())?;
                copy_out(op, &own_chunk, &outbox)?;
                let out = outbox.as_slice().map_err(Error::device(op))?;
                raw::send(
                    op,
                    self.raw(),
                    bytemuck::cast_slice(&out),
                    root,
                    COLLECTIVE_TAG,
                )?;
            }
            Some(result) => {
                copy_out(op, &own_chunk, &result.part(op, mine)?)?;
                {
                    let mut all = result.typed.as_mut_slice().map_err(Error::device(op))?;
                    for (peer, range) in ring.chunks.ranges.iter().enumerate() {
                        if peer as i32 != rank {
                            let into = bytemuck::cast_slice_mut(&mut all[range.clone()]);
                            raw::recv(op, self.raw(), into, peer as i32, COLLECTIVE_TAG)?;
                        }
                    }
                }
                (buf.place().copy_from(&result.typed)).map_err(Error::device(op))?;
                result.keep(self);
            }
        }
        ring.keep(self);
        Ok(())
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
        if m > 0 && self.same_node.spans_communicator() {
            return self.allgather_same_node(op, (send, recv), header);
        }
        let checked = check_blocks(op, "recv", recv.elements(), "send", m, size);
        let blocks = (Chunks::blocks(m, size, m), self.algorithm::<T>(m * size));
        if m > 0 && size > 1 {
            if let Some(pieces) = self.pipelines::<T>(blocks) {
                return self.allgather_pipelined(op, (send, recv), header, pieces, checked);
            }
        }
        let prepared = checked.and_then(|()| {
            let result = Staged::<T>::new(self, op, m * size)?;
            let mine = result.part(op, rank * m..(rank + 1) * m)?;
            (send.place().copy_range_to(0, m, &mine)).map_err(Error::device(op))?;
            Ok(result)
        });
        let result = self.agree(op, header, prepared)?;
        if m > 0 {
            let chunks = Chunks::blocks(m, size, m);
            let algorithm = self.algorithm::<T>(m * size);
            let mut all = result.typed.as_mut_slice().map_err(Error::device(op))?;
            self.ring_allgather(op, &mut all, (&chunks, algorithm))?;
        }
        (recv.place().copy_from(&result.typed)).map_err(Error::device(op))?;
        result.keep(self);
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
        if m > 0 && self.same_node.spans_communicator() {
            return self.reduce_scatter_same_node(op, (send, recv, reduce), header);
        }
        let checked = check_blocks(op, "send", send.elements(), "recv", m, size);
        let stride = m.next_multiple_of(self.stride::<T>(1));
        // Halving's steps send runs of blocks, so only blocks with no gap
        // between them (which would travel, unwritten) take it.
        let gapless = match self.algorithm::<T>(stride.saturating_mul(size)) {
            Algorithm::Halving if stride == m => Algorithm::Halving,
            _ => Algorithm::Ring,
        };
        if m > 0 && size > 1 && checked.is_ok() {
            if let Some(pieces) = self.pipelines::<T>((Chunks::blocks(m, size, stride), gapless)) {
                let args = (send, recv, reduce);
                return self.reduce_scatter_pipelined(op, args, header, pieces);
            }
        }
        let prepared = checked.and_then(|()| {
            if m == 0 {
                return Ok(None);
            }
            let ring = self.prepare_ring::<T>(
                op,
                reduce,
                stride * size,
                (Chunks::blocks(m, size, stride), gapless),
                |acc| {
                    for k in 0..size {
                        let part = acc.create_sub_buffer::<T>(k * stride, m)?;
                        send.place().copy_range_to(k * m, m, &part)?;
                    }
                    Ok(())
                },
            )?;
            Ok(Some(ring))
        });
        let Some(ring) = self.agree(op, header, prepared)? else {
            return Ok(());
        };
        if size > 1 {
            self.ring_reduce_scatter(op, &ring)?;
        }
        (recv.place().copy_from(&ring.chunk(op, rank)?)).map_err(Error::device(op))?;
        ring.keep(self);
        Ok(())
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
    fn contiguous_chunks_cover_the_buffer_in_order() {
        let c = Chunks::contiguous(10, 3, 4);
        assert_eq!(c.ranges, vec![0..4, 4..8, 8..10]);
        let short = Chunks::contiguous(3, 4, 64);
        assert_eq!(short.ranges, vec![0..3, 3..3, 3..3, 3..3]);
        assert_eq!(short.longest(), 3);
    }

    #[test]
    fn blocks_are_a_stride_apart() {
        let c = Chunks::blocks(5, 3, 64);
        assert_eq!(c.ranges, vec![0..5, 64..69, 128..133]);
    }

    #[test]
    fn halving_is_chosen_on_powers_of_two_from_4_up_to_its_limit() {
        for size in [4, 8, 16] {
            assert_eq!(algorithm(size, 1), Algorithm::Halving);
            assert_eq!(algorithm(size, HALVING_MAX_BYTES), Algorithm::Halving);
            assert_eq!(algorithm(size, HALVING_MAX_BYTES + 1), Algorithm::Ring);
        }
        for size in [1, 2, 3, 5, 6, 7, 12] {
            assert_eq!(algorithm(size, 1 << 20), Algorithm::Ring, "{size} ranks");
        }
    }

    #[test]
    fn spans_cover_runs_of_chunks_and_their_gaps() {
        let c = Chunks::blocks(5, 4, 64);
        assert_eq!(c.span(&(1..3)), 64..133);
        assert_eq!(c.span(&(3..4)), 192..197);
        assert_eq!(c.span(&(2..2)), 0..0);
        assert_eq!(c.span(&(3..5)), 0..0); // past the end: nothing
        let halving = schedule::reduce_scatter(Algorithm::Halving, 0, 4);
        assert_eq!(c.longest_step(&halving), 69); // 0..2 and 2..4: 0..69 and 128..197
        let short = Chunks::contiguous(3, 4, 64);
        assert_eq!(short.span(&(0..2)), 0..3);
        assert_eq!(short.span(&(2..4)), 3..3);
        // One chunk (recursive doubling's): the chunk itself.
        let whole = Chunks::contiguous(7, 1, 7);
        let ring = schedule::reduce_scatter(Algorithm::Ring, 2, 4);
        assert_eq!(whole.longest_step(&ring), 7);
    }

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

    #[test]
    fn block_lengths_are_checked() {
        assert!(check_blocks("t", "recv", 12, "send", 4, 3).is_ok());
        assert!(matches!(
            check_blocks("t", "recv", 11, "send", 4, 3),
            Err(Error::InvalidLength { .. })
        ));
    }
}
