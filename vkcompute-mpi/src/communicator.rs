//! The communicator: an MPI communicator bound to a vkcompute context, and
//! point-to-point messages of device and host buffers.

use std::mem::size_of;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mpi::raw::AsRaw;
use mpi::traits::Communicator as _;
use vkcompute::{DeviceBuffer, DeviceContext, HostBuffer};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::header::{Failure, Header, Kind, HEADER_BYTES};
use crate::kernels::Reducer;
use crate::message::{Incoming, Outgoing};
use crate::place::{Buffer, Place};
use crate::raw::{self, Comm, OwnedComm};
use crate::same_node::{self, Lent, Path, SameNode, SameNodePolicy};
use crate::threads::ThreadRule;

/// The largest tag [`Communicator::send`] and [`Communicator::recv`] take.
/// Higher tags carry this crate's own messages (answers, data pieces and
/// the collectives' steps), on the communicator's private duplicate.
pub const MAX_TAG: i32 = 8191;

/// Tag offsets of a message's answer and data, above the user's tag.
pub(crate) const ACK_TAGS: i32 = MAX_TAG + 1;
pub(crate) const DATA_TAGS: i32 = 2 * (MAX_TAG + 1);
/// The tag of the collectives' point-to-point steps (below 32767, the
/// smallest `MPI_TAG_UB` the standard allows).
pub(crate) const COLLECTIVE_TAG: i32 = 3 * (MAX_TAG + 1);

/// The default size of the pieces a large message travels in (4 MiB).
pub const DEFAULT_PIECE_BYTES: usize = 4 << 20;

/// The most piece buffers a communicator keeps between pipelined
/// collectives (four sets of `pipeline::MAX_PIECES`).
const KEPT_PIECE_SLOTS: usize = 4 * crate::pipeline::MAX_PIECES;

/// A trailer after the data of a message: 0, or the sender's `Failure`
/// code where a piece could not be read after the header went out.
pub(crate) const TRAILER_BYTES: usize = 8;

/// An MPI communicator bound to a vkcompute context: device buffers go
/// from rank to rank with [`send`](Self::send) and [`recv`](Self::recv),
/// and the collectives ([`allreduce`](Self::allreduce) and the others)
/// run over every rank, with the arithmetic of reductions in kernels on
/// the context's device.
///
/// The communicator works on a private duplicate (`MPI_Comm_dup`) of the
/// one it is made from, so its messages never meet the application's, and
/// that duplicate has `MPI_ERRORS_RETURN`: MPI errors come back as
/// [`Error::Mpi`] instead of aborting the job.
///
/// **Stream order.** An operation reads a device buffer once the work
/// enqueued on it before the call is done (as `to_vec` would), and writes
/// it with an ordinary enqueued copy, so later work on the buffer sees the
/// result. The calls block until this rank's part is done (the buffer's
/// contents are in flight on its stream, ordered before any later work).
/// No vkcompute lock is held while MPI waits.
///
/// **Headers.** Before any data, the ranks exchange a small header (the
/// operation, element type, length, reduction, root): when they disagree,
/// every rank that takes part gets [`Error::Mismatch`] and no data moves;
/// when one rank fails its preparation (a mapped buffer, say), it returns
/// its own error and the others [`Error::RemoteFailure`]. Never a hang or
/// a truncated message.
pub struct Communicator {
    comm: OwnedComm,
    /// Which threads may use it.
    thread: ThreadRule,
    /// The raw handle of `comm` and the state its waits share.
    raw: Comm,
    ctx: DeviceContext,
    rank: i32,
    size: i32,
    pub(crate) reducer: Reducer,
    piece_bytes: AtomicUsize,
    /// Pinned host buffers kept for reuse between calls.
    staging: Mutex<Vec<HostBuffer<u8>>>,
    /// The pinned host buffers of a pipelined collective's pieces, kept
    /// for reuse between calls (`pipeline`).
    piece_slots: Mutex<Vec<HostBuffer<u8>>>,
    /// Whether the context's device buffers map directly (probed once).
    maps_directly: bool,
    /// The peers on the same-node path, and its sockets and memory.
    pub(crate) same_node: Arc<SameNode>,
    /// How many allreduces took the direct reduce-scatter
    /// (`Communicator::direct_reduce_scatters`).
    pub(crate) direct_reduce_scatters: AtomicU64,
}

impl Communicator {
    /// A communicator over the ranks of `comm` (duplicated, a collective
    /// call: every rank of `comm` makes it), bound to `ctx`, whose stream
    /// and device run the copies and kernels.
    ///
    /// It finds the peers it exchanges with over the same-node path
    /// ([`path_to`](Self::path_to); logged, `info`) with
    /// [`SameNodePolicy::Auto`], or as the environment variable
    /// [`VKCOMPUTE_MPI_SAME_NODE`](crate::SAME_NODE_VAR) says (`0` or
    /// `off`: never; `always`); [`with_same_node`](Self::with_same_node)
    /// chooses in code.
    pub fn new(comm: &impl mpi::traits::Communicator, ctx: &DeviceContext) -> Result<Communicator> {
        Self::build(comm, ctx, None)
    }

    /// As [`new`](Self::new), with the same-node path taken as `policy`
    /// says on this rank ([`SameNodePolicy::Off`] whatever it says where
    /// the environment variable [`VKCOMPUTE_MPI_SAME_NODE`](crate::SAME_NODE_VAR)
    /// is `0` or `off`). A pair of ranks takes the path only where neither
    /// has it off, so a rank that turns it off turns it off for its
    /// pairs; the ranks need not pass the same policy.
    ///
    /// Finding the peers (collective, here): `MPI_Comm_split_type` with
    /// `MPI_COMM_TYPE_SHARED` gives each rank's node; every rank gathers
    /// every other's device UUID and driver UUID, whether its context can
    /// export and import opaque file descriptors, whether its device
    /// buffers map directly, and its policy; a pair of one node with equal
    /// UUIDs, both able, takes the path (under `Auto`, not where both map
    /// directly) once it has connected a Unix socket (abstract namespace,
    /// named by random bytes sent over MPI only) to pass descriptors over.
    /// A pair whose socket cannot be connected takes the other paths, on
    /// both ends.
    ///
    /// Memory: a rank keeps, for each peer it sends to over the path, one
    /// exportable device memory per message that was under way to it at
    /// once (one for blocking sends; up to four with `isend`s), each as
    /// large as the largest message it held (rounded up to a power of
    /// two, at least 64 KiB), and one more as large as its largest
    /// collective on the path (a reduce_scatter's blocks rounded up to
    /// the binding alignment); the peers' imports of it are the same
    /// memory, not copies. It is freed with the communicator.
    pub fn with_same_node(
        comm: &impl mpi::traits::Communicator,
        ctx: &DeviceContext,
        policy: SameNodePolicy,
    ) -> Result<Communicator> {
        Self::build(comm, ctx, Some(policy))
    }

    fn build(
        comm: &impl mpi::traits::Communicator,
        ctx: &DeviceContext,
        policy: Option<SameNodePolicy>,
    ) -> Result<Communicator> {
        let op = "Communicator::new";
        let thread = ThreadRule::here(op)?;
        let comm = comm.duplicate();
        let raw = Comm::new(comm.as_raw());
        raw::set_errors_return(op, &raw)?;
        let (rank, size) = (comm.rank(), comm.size());
        let env = std::env::var(same_node::SAME_NODE_VAR).ok();
        let wanted = same_node::policy(policy, env.as_deref());
        let maps_directly = maps_directly(ctx, rank);
        let same_node = SameNode::detect(op, &raw, (rank, size), ctx, (wanted, maps_directly))?;
        Ok(Communicator {
            same_node: Arc::new(same_node),
            raw,
            rank,
            size,
            comm: OwnedComm::new(comm),
            thread,
            ctx: ctx.clone(),
            reducer: Reducer::new(),
            piece_bytes: AtomicUsize::new(DEFAULT_PIECE_BYTES),
            staging: Mutex::new(Vec::new()),
            piece_slots: Mutex::new(Vec::new()),
            maps_directly,
            direct_reduce_scatters: AtomicU64::new(0),
        })
    }

    /// Whether this communicator moves device buffers where they lie:
    /// where the context's device memory is host visible and staging is not
    /// forced (lavapipe, integrated GPUs), `send`, `recv`, `broadcast` and
    /// `allreduce` map a device buffer ([`DeviceBuffer::map_to_host`],
    /// which is then the memory itself) and MPI reads and writes it there,
    /// without copies through pinned host buffers; the reductions' kernels
    /// still do the arithmetic on the device, between the mappings.
    /// Elsewhere (`false`) device memory is staged through pinned host
    /// buffers in pieces. Probed once, with a small buffer, when the
    /// communicator is made; logged (`info`).
    ///
    /// While such an operation runs, its buffer is mapped whenever MPI
    /// touches it: work enqueued on that buffer meanwhile from another
    /// thread fails with vkcompute's `BufferMapped`.
    pub fn maps_device_memory(&self) -> bool {
        self.maps_directly
    }

    /// The path that point-to-point messages of device buffers between
    /// this rank and `peer` take, chosen when the communicator was made
    /// and logged then (`info`): [`Path::SameNode`] where both ranks are
    /// on one node, on one device, and can export and import opaque file
    /// descriptors, and their policies ask for it (see
    /// [`with_same_node`](Self::with_same_node));
    /// otherwise [`Path::Mapped`] where this rank's device buffers map
    /// directly ([`maps_device_memory`](Self::maps_device_memory)), else
    /// [`Path::Staged`]. For `peer` this rank itself, how its buffers meet
    /// MPI: `Direct` or `Staged`.
    ///
    /// What takes the same-node path: [`send`](Self::send) and
    /// [`isend`](Self::isend) of a non-empty buffer, received by
    /// [`recv`](Self::recv) or [`irecv`](Self::irecv) (which copies it
    /// out of the shared memory into the memory it owns when the header
    /// arrives, and lands it when it completes, as for a message over
    /// MPI). A rank keeps up to four exported memories per peer, each
    /// holding one message until the receiver has copied it out: a
    /// message sent while all four hold `isend`s under way travels over
    /// MPI instead (the receiver takes either). The collectives take the
    /// path where every pair does
    /// ([`collective_path`](Self::collective_path)).
    pub fn path_to(&self, peer: i32) -> Result<Path> {
        self.check_rank("Communicator::path_to", peer)?;
        Ok(if self.same_node.is_peer(peer) {
            Path::SameNode
        } else {
            self.mpi_path()
        })
    }

    /// How this rank's device buffers meet MPI: mapped or staged.
    fn mpi_path(&self) -> Path {
        if self.maps_device_memory() {
            Path::Mapped
        } else {
            Path::Staged
        }
    }

    /// The path the collectives take ([`broadcast`](Self::broadcast),
    /// [`allreduce`](Self::allreduce), [`reduce`](Self::reduce),
    /// [`allgather`](Self::allgather) and
    /// [`reduce_scatter`](Self::reduce_scatter), of buffers that are not
    /// empty, over two ranks or more): [`Path::SameNode`] where every pair
    /// of ranks of the communicator takes the same-node path (the same on
    /// every rank; logged with the paths), else how this rank's buffers
    /// meet MPI ([`Path::Mapped`] or [`Path::Staged`]).
    ///
    /// On the same-node path each rank copies its input on the device into
    /// memory it exports to every peer, and the ranks read each other's
    /// on their devices: the root's for a broadcast; for allreduce and
    /// reduce, rank `r` reduces chunk `r` of every rank's memory (its own
    /// operand first, then rank order: every rank gets the same bits) and
    /// the ranks (for reduce, the root) copy the chunks out; for allgather
    /// each copies every rank's block; for reduce_scatter rank `r` reduces
    /// block `r` of every rank's memory. MPI carries the headers and a few
    /// status bytes only, no data.
    pub fn collective_path(&self) -> Path {
        if self.same_node.spans_communicator() {
            Path::SameNode
        } else {
            self.mpi_path()
        }
    }

    /// The path [`allreduce`](Self::allreduce) takes: [`Path::SameNode`]
    /// where every pair of ranks of the communicator takes the same-node
    /// path (the same on every rank; logged with the paths), else how
    /// this rank's buffers meet MPI ([`Path::Mapped`] or [`Path::Staged`]).
    /// The same as [`collective_path`](Self::collective_path): every
    /// collective takes the path where allreduce does.
    #[deprecated(note = "the same as `collective_path`")]
    #[doc(hidden)]
    pub fn allreduce_path(&self) -> Path {
        self.collective_path()
    }

    /// How many collectives of this communicator took the same-node path
    /// (those whose ranks agreed on it), for the tests that check
    /// [`collective_path`](Self::collective_path).
    #[cfg(feature = "test-counters")]
    pub fn same_node_collectives(&self) -> u64 {
        self.same_node.collectives()
    }

    /// How many point-to-point messages this communicator sent through
    /// memory exported to the receiver ([`send`](Self::send) and
    /// [`isend`](Self::isend) on the same-node path), for the tests that
    /// check which messages take it.
    #[cfg(feature = "test-counters")]
    pub fn same_node_sends(&self) -> u64 {
        self.same_node.sends()
    }

    /// How many allreduces of this communicator sent every chunk to its
    /// owner at once (the direct reduce-scatter, taken where every rank
    /// maps its buffer directly, on 3 to 8 ranks, and the ring would
    /// otherwise run), for the tests that check where it is taken.
    #[cfg(feature = "test-counters")]
    pub fn direct_reduce_scatters(&self) -> u64 {
        self.direct_reduce_scatters.load(Ordering::Relaxed)
    }

    /// This rank's number in the communicator.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> i32 {
        self.size
    }

    /// The context the communicator is bound to.
    pub fn context(&self) -> &DeviceContext {
        &self.ctx
    }

    /// The raw handle of the communicator's private duplicate (an
    /// `MPI_Comm`, with `MPI_ERRORS_RETURN`), for MPI calls of one's own.
    /// Valid while the communicator lives.
    pub fn as_raw(&self) -> mpi::ffi::MPI_Comm {
        self.comm.get().as_raw()
    }

    /// The thread level MPI provides (`MPI_Query_thread`, at
    /// [`new`](Self::new)), which decides the threads that may use this
    /// communicator: any thread under `MPI_THREAD_MULTIPLE` (it is `Send`),
    /// else only the one that made it; see the crate documentation.
    pub fn thread_level(&self) -> mpi::Threading {
        self.thread.level()
    }

    /// [`Error::WrongThread`] unless this thread may make MPI calls for
    /// the communicator.
    pub(crate) fn check_thread(&self, op: &'static str) -> Result<()> {
        self.thread.check(op)
    }

    /// The size of the pieces in which [`send`](Self::send) moves a large
    /// device buffer, overlapping its copy to the host with MPI.
    pub fn piece_bytes(&self) -> usize {
        self.piece_bytes.load(Ordering::Relaxed)
    }

    /// Sets the piece size of [`piece_bytes`](Self::piece_bytes), rounded
    /// up to a multiple of 256 bytes (at least 256). Ranks may differ: a
    /// receiver follows its sender's pieces.
    pub fn set_piece_bytes(&self, bytes: usize) {
        let bytes = bytes.max(1).next_multiple_of(256);
        self.piece_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Sets how long any one MPI wait of this communicator may take
    /// before it fails with [`Error::Timeout`] (`None`, the default: as
    /// long as MPI takes, which is for ever where a peer never comes).
    /// Applies to every later wait, on every rank that sets it (each rank
    /// its own). One wait may cover several messages: a collective's step
    /// (its pieces), or, in an allreduce whose reduce-scatter sends every
    /// chunk to its owner at once, `size - 1` chunks; leave room for the
    /// slowest such step, not one message.
    ///
    /// A timeout marks the communicator broken: its later operations fail
    /// at once with [`Error::Broken`], because the abandoned messages may
    /// still arrive. Where MPI keeps memory that it cannot give back (a
    /// collective over a buffer, or a cancelled point-to-point transfer
    /// that MPI does not finish within a second), returning would not be
    /// sound, so the job is aborted (`MPI_Abort`) with the error on
    /// stderr. See the crate documentation on ranks that die.
    pub fn set_timeout(&self, timeout: Option<std::time::Duration>) {
        self.raw.state.set_timeout(timeout);
    }

    /// The timeout of [`set_timeout`](Self::set_timeout).
    pub fn timeout(&self) -> Option<std::time::Duration> {
        self.raw.state.timeout()
    }

    pub(crate) fn raw(&self) -> &Comm {
        &self.raw
    }

    /// Refuses a rank outside the communicator.
    pub(crate) fn check_rank(&self, op: &'static str, rank: i32) -> Result<()> {
        if rank < 0 || rank >= self.size {
            return Err(Error::InvalidRank {
                op,
                given: rank,
                last: self.size - 1,
            });
        }
        Ok(())
    }

    pub(crate) fn check_peer(&self, op: &'static str, peer: i32, tag: i32) -> Result<()> {
        self.check_thread(op)?;
        self.check_rank(op, peer)?;
        if peer == self.rank {
            return Err(Error::SelfMessage { op, rank: peer });
        }
        if !(0..=MAX_TAG).contains(&tag) {
            return Err(Error::InvalidTag {
                op,
                given: tag,
                max: MAX_TAG,
            });
        }
        Ok(())
    }

    /// A pinned host buffer of at least `bytes` bytes, from those kept
    /// between calls where one is large enough.
    pub(crate) fn staging(&self, op: &'static str, bytes: usize) -> Result<HostBuffer<u8>> {
        let mut kept = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        let best = kept
            .iter()
            .enumerate()
            .filter(|(_, b)| b.len() >= bytes)
            .min_by_key(|(_, b)| b.len())
            .map(|(i, _)| i);
        if let Some(i) = best {
            return Ok(kept.swap_remove(i));
        }
        drop(kept);
        self.ctx
            .enqueue_create_host_buffer::<u8>(bytes.max(1))
            .map_err(Error::device(op))
    }

    /// Keeps `buffer` for a later call (at most a few, the largest).
    pub(crate) fn keep_staging(&self, buffer: HostBuffer<u8>) {
        let mut kept = self.staging.lock().unwrap_or_else(|e| e.into_inner());
        kept.push(buffer);
        if kept.len() > 4 {
            kept.sort_by_key(|b| std::cmp::Reverse(b.len()));
            kept.truncate(4);
        }
    }

    /// `count` pinned host buffers of at least `bytes` bytes each for the
    /// pieces of a pipelined collective, from those kept between calls
    /// where large enough.
    pub(crate) fn piece_slots(
        &self,
        op: &'static str,
        bytes: usize,
        count: usize,
    ) -> Result<Vec<HostBuffer<u8>>> {
        let mut slots = {
            let mut kept = self.piece_slots.lock().unwrap_or_else(|e| e.into_inner());
            let (fit, small): (Vec<_>, Vec<_>) = std::mem::take(&mut *kept)
                .into_iter()
                .partition(|b| b.len() >= bytes);
            *kept = small;
            fit
        };
        if slots.len() > count {
            let rest = slots.split_off(count);
            self.keep_piece_slots(rest);
        }
        while slots.len() < count {
            let slot = self.ctx.enqueue_create_host_buffer::<u8>(bytes.max(1));
            match slot {
                Ok(slot) => slots.push(slot),
                Err(e) => {
                    self.keep_piece_slots(slots);
                    return Err(Error::device(op)(e));
                }
            }
        }
        Ok(slots)
    }

    /// Keeps `slots` for a later pipelined collective (at most
    /// [`KEPT_PIECE_SLOTS`], the largest).
    pub(crate) fn keep_piece_slots(&self, slots: Vec<HostBuffer<u8>>) {
        let mut kept = self.piece_slots.lock().unwrap_or_else(|e| e.into_inner());
        kept.extend(slots);
        if kept.len() > KEPT_PIECE_SLOTS {
            kept.sort_by_key(|b| std::cmp::Reverse(b.len()));
            kept.truncate(KEPT_PIECE_SLOTS);
        }
    }

    /// Sends `buf` (a [`DeviceBuffer`], a view of one, or a
    /// [`HostBuffer`]) to rank `dest` with `tag` (0 to [`MAX_TAG`]), for a
    /// [`recv`](Self::recv) of the same element type and length there.
    ///
    /// Returns once the receiver has taken the data (like `MPI_Ssend`: the
    /// two ranks first exchange a header and an answer). A device buffer is
    /// read once the work enqueued on it is done, in pieces of
    /// [`piece_bytes`](Self::piece_bytes): from its mapping where it maps
    /// directly ([`maps_device_memory`](Self::maps_device_memory)), else
    /// through pinned host memory, the copy of each piece overlapping the
    /// transfer of the one before. To a peer on the same-node path
    /// ([`path_to`](Self::path_to) is [`Path::SameNode`]), a non-empty
    /// buffer is copied on the device into memory exported to the peer
    /// (over MPI where all the memory kept for the peer holds `isend`s
    /// under way), and the receiver copies it out on its device before it
    /// answers.
    ///
    /// Errors: a receiver that expects another type or length makes
    /// [`Error::Mismatch`] on both ranks; a mapped buffer is vkcompute's
    /// `BufferMapped` here and [`Error::RemoteFailure`] at the receiver.
    pub fn send<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
        dest: i32,
        tag: i32,
    ) -> Result<()> {
        let op = "Communicator::send";
        self.check_peer(op, dest, tag)?;
        let comm = self.raw();
        let len = buf.elements();
        let header = Header::new(Kind::Send, T::TYPE, len)
            .pieces(self.piece_elements::<T>() * size_of::<T>());
        let staged = self.stage_shared(op, buf.place(), len, dest);
        if let Some(lent) = self.prepared_or_told(op, staged, header, (dest, tag))? {
            return self.send_shared::<T>(op, lent, (dest, tag), header);
        }
        let prepared = Outgoing::prepare(self, op, buf.place(), self.piece_elements::<T>());
        let outgoing = self.prepared_or_told(op, prepared, header, (dest, tag))?;
        // The data goes out after that of every earlier message to `dest`
        // with `tag` (`raw::Ticket`), as their headers did.
        let ticket = comm.state.ticket((true, dest, tag));
        raw::send(op, comm, header.bytes(), dest, tag)?;
        let mut answer = [0u8; HEADER_BYTES];
        raw::recv(op, comm, &mut answer, dest, ACK_TAGS + tag)?;
        let turn = self
            .refusal::<T>(op, dest, len, &answer)
            .and_then(|()| raw::wait_turn(op, comm, &ticket));
        if let Err(e) = turn {
            outgoing.finish(self);
            return Err(e);
        }
        let sent = outgoing.send_all(op, comm, dest, DATA_TAGS + tag);
        let status = match &sent {
            Ok(None) => 0u64,
            Ok(Some(e)) if e.is_mapped_buffer() => 1,
            Ok(Some(_)) => 2,
            Err(_) => 0,
        };
        outgoing.finish(self);
        let local = sent?;
        raw::send(op, comm, &status.to_le_bytes(), dest, DATA_TAGS + tag)?;
        match local {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `prepared`, or, where the sender's preparation failed, its error
    /// once `header` marked failed has gone to `dest` (the receiver then
    /// answers nothing, and no data follows).
    fn prepared_or_told<P>(
        &self,
        op: &'static str,
        prepared: Result<P>,
        header: Header,
        (dest, tag): (i32, i32),
    ) -> Result<P> {
        prepared.or_else(|e| {
            raw::send(
                op,
                self.raw(),
                header.failed(Failure::of(&e)).bytes(),
                dest,
                tag,
            )?;
            Err(e)
        })
    }

    /// The sender's error where the receiver's `answer` to a message of
    /// `len` elements of `T` refuses it (or is not this crate's).
    fn refusal<T: Element>(
        &self,
        op: &'static str,
        dest: i32,
        len: usize,
        answer: &[u8; HEADER_BYTES],
    ) -> Result<()> {
        Header::from_bytes(answer).refusal(op, (self.rank, dest), (len, T::TYPE))
    }

    /// The `len` elements of `place` copied on the device into an outbox
    /// exported to `dest` (the device waited for), its descriptor sent
    /// where new, where `dest` is on the same-node path and the message is
    /// not empty; `None` where the message travels over MPI (another path,
    /// an empty message, or every outbox for `dest` lent to messages under
    /// way). An error: nothing went out but a descriptor; the caller sends
    /// a failed header.
    pub(crate) fn stage_shared<T: Element>(
        &self,
        op: &'static str,
        place: Place<'_, T>,
        len: usize,
        dest: i32,
    ) -> Result<Option<Lent>> {
        if len == 0 || !self.same_node.is_peer(dest) {
            return Ok(None);
        }
        // A communicator that a timeout broke may have left the peer
        // copying out of memory (its outboxes given up are not lent again,
        // but nothing is written after a timeout at all).
        self.raw().state.usable(op)?;
        SameNode::stage_out(&self.same_node, op, place, len, dest)
    }

    /// [`send`](Self::send) over the same-node path: the data is in the
    /// outbox `lent` (the device waited for) before the header goes out,
    /// and the receiver's answer says that it has copied the data out (or
    /// refuses the message); the outbox goes back with the answer (and is
    /// given up without one: an MPI error).
    fn send_shared<T: Element>(
        &self,
        op: &'static str,
        lent: Lent,
        (dest, tag): (i32, i32),
        header: Header,
    ) -> Result<()> {
        let comm = self.raw();
        let header = header.in_shared_memory(lent.shared());
        raw::send(op, comm, header.bytes(), dest, tag)?;
        let mut answer = [0u8; HEADER_BYTES];
        raw::recv(op, comm, &mut answer, dest, ACK_TAGS + tag)?;
        let refused = self.refusal::<T>(op, dest, header.len(), &answer);
        lent.answered(refused.is_err());
        refused
    }

    /// [`recv`](Self::recv) of a message in `source`'s shared memory
    /// (`inbox`, or why it could not be had): copies it into `place`,
    /// waits for the device and answers (`wanted`, or failed), so the
    /// sender may reuse its memory. A destination that cannot be written
    /// (mapped) is this rank's error only: the message was taken, as over
    /// MPI.
    fn recv_shared<T: Element>(
        &self,
        op: &'static str,
        place: Place<'_, T>,
        (source, tag): (i32, i32),
        inbox: Result<DeviceBuffer<u8>>,
        wanted: Header,
    ) -> Result<()> {
        let len = wanted.len();
        let taken = inbox.and_then(|inbox| {
            (self.same_node).take::<T>(op, source, &inbox, len, |part| place.copy_from(part))
        });
        let answer = match &taken {
            Ok(_) => wanted,
            Err(e) => wanted.failed(Failure::of(e)),
        };
        raw::send(op, self.raw(), answer.bytes(), source, ACK_TAGS + tag)?;
        match taken? {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Receives into `buf` (a [`DeviceBuffer`], a view of one, or a
    /// [`HostBuffer`]) a message of `buf`'s element type and length that
    /// rank `source` sends with `tag`. A device buffer gets the data in its
    /// mapping where it maps directly
    /// ([`maps_device_memory`](Self::maps_device_memory); the mapping waits
    /// for the work enqueued on it before), else by ordinary copies enqueued
    /// on its stream, in pieces as they arrive; either way later work on it
    /// sees the message.
    ///
    /// Errors: a message of another type or length is
    /// [`Error::Mismatch`] here and at the sender (nothing is written); a
    /// sender that failed before sending is [`Error::RemoteFailure`]; a
    /// buffer mapped to the host is vkcompute's `BufferMapped` (the message
    /// is still taken off the wire, so the sender does not hang).
    pub fn recv<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
        source: i32,
        tag: i32,
    ) -> Result<()> {
        let op = "Communicator::recv";
        self.check_peer(op, source, tag)?;
        let comm = self.raw();
        let len = buf.elements();
        // The answer, and the receives of the data, go after those of
        // every earlier receive from `source` with `tag`
        // (`raw::Ticket`), whose headers MPI matched first.
        let ticket = comm.state.ticket((false, source, tag));
        let mut wire = [0u8; HEADER_BYTES];
        raw::recv(op, comm, &mut wire, source, tag)?;
        let sent = Header::from_bytes(&wire);
        sent.check_protocol(op, source)?;
        let wanted = Header::new(Kind::Ack, T::TYPE, len);
        if let Some(reason) = sent.failure_reason() {
            // The sender gave up before the header: it waits for no answer.
            return Err(Error::RemoteFailure {
                op,
                rank: self.rank,
                failed: source,
                reason,
            });
        }
        // A new generation's descriptor comes off the socket whatever
        // becomes of the message.
        let inbox = (sent.shared_memory()).map(|shared| self.same_node.inbox(op, source, shared));
        raw::wait_turn(op, comm, &ticket)?;
        let size = size_of::<T>() as u64;
        let piece_ok = sent.piece_bytes() > 0 && sent.piece_bytes() % size == 0;
        if !wanted.accepts(&sent) || !piece_ok {
            raw::send(
                op,
                comm,
                wanted.failed(Failure::Mismatch).bytes(),
                source,
                ACK_TAGS + tag,
            )?;
            return Err(Error::Mismatch {
                op,
                rank: self.rank,
                detail: format!(
                    "rank {source} sent {}, rank {} expects {len} elements of {}",
                    sent.describe(),
                    self.rank,
                    T::TYPE
                ),
            });
        }
        if let Some(inbox) = inbox {
            return self.recv_shared(op, buf.place(), (source, tag), inbox, wanted);
        }
        let piece = (sent.piece_bytes() / size) as usize;
        let mut incoming = match Incoming::prepare(self, op, buf.place(), piece) {
            Ok(incoming) => incoming,
            Err(e) => {
                raw::send(
                    op,
                    comm,
                    wanted.failed(Failure::of(&e)).bytes(),
                    source,
                    ACK_TAGS + tag,
                )?;
                return Err(e);
            }
        };
        raw::send(op, comm, wanted.bytes(), source, ACK_TAGS + tag)?;
        let received = incoming.recv_all(op, comm, source, DATA_TAGS + tag);
        incoming.finish(self);
        let local = received?;
        let mut trailer = [0u8; TRAILER_BYTES];
        raw::recv(op, comm, &mut trailer, source, DATA_TAGS + tag)?;
        if let Some(e) = local {
            return Err(e);
        }
        match u64::from_le_bytes(trailer) {
            0 => Ok(()),
            code => Err(Error::RemoteFailure {
                op,
                rank: self.rank,
                failed: source,
                reason: if code == 1 {
                    "its buffer was mapped while the message was under way; the data here is incomplete"
                } else {
                    "it could not read its buffer while the message was under way; the data here is incomplete"
                },
            }),
        }
    }

    /// The elements of `T` in one piece of a message.
    pub(crate) fn piece_elements<T>(&self) -> usize {
        (self.piece_bytes() / size_of::<T>()).max(1)
    }
}

/// Whether `ctx`'s device buffers map directly (staging not forced, and a
/// small probe buffer's mapping is the memory itself); logged (`info`) as
/// rank `rank`'s.
fn maps_directly(ctx: &DeviceContext, rank: i32) -> bool {
    let direct = !ctx.is_staging_forced()
        && ctx
            .enqueue_create_buffer::<u32>(64)
            .and_then(|probe| probe.map_to_host().map(|m| m.is_direct()))
            .unwrap_or(false);
    log::info!(
        "vkcompute-mpi: rank {rank}: device buffers on `{}` {}",
        ctx.name(),
        if direct {
            "are mapped: MPI moves them where they lie"
        } else {
            "are staged through pinned host buffers"
        }
    );
    direct
}

impl Drop for Communicator {
    /// Frees the MPI communicator (`MPI_Comm_free`) where this thread may
    /// call MPI for it, and leaves it unfreed elsewhere.
    fn drop(&mut self) {
        let allowed = self.thread.allows_this_thread();
        if !allowed {
            log::warn!(
                "vkcompute-mpi: a communicator dropped on a thread that may not call MPI ({:?}) \
                 is left unfreed",
                self.thread.level()
            );
        }
        self.comm.free_or_leak(allowed);
    }
}
