//! The façade: [`Communicator`], an MPI communicator bound to a vkcompute
//! context, with its point-to-point messages ([`request`] for the
//! non-blocking ones) and its collectives ([`collective`]).

mod collective;
mod p2p;
mod request;
mod threads;

pub use request::Request;

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use mpi::raw::AsRaw;
use mpi::traits::Communicator as _;
use vkcompute::DeviceContext;

use crate::error::{Error, Result};
use crate::exec::Team;
use crate::raw::{self, Comm, OwnedComm};
use crate::transport::kernels::Reducer;
use crate::transport::pool::StagingPool;
use crate::transport::same_node::{self, Path, SameNode, SameNodeMemory, SameNodePolicy};
use crate::wire::MAX_TAG;
use threads::ThreadRule;

/// The default size of the pieces a large message travels in (2 MiB).
/// Staged, a piece is copied to or from the device while MPI moves the
/// one before it. On lavapipe, whose copies run on the cores MPI uses,
/// send/recv of 64 MiB against host MPI: medians 0.96 x on 2 ranks and
/// 0.76 x on 4 with pieces of 2 MiB, against 0.81 and 0.68 x with
/// 4 MiB (8 runs each, in turns), though some runs on 4 ranks fall into
/// a slow mode (0.33-0.46 x, against 0.48 x at worst with 4 MiB);
/// pieces of 1 MiB and less fall into it often. The mapped path reads
/// the same with either.
pub const DEFAULT_PIECE_BYTES: usize = 2 << 20;

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
/// when one rank fails its preparation (a device buffer the host maps,
/// [`DeviceBuffer::is_mapped`](vkcompute::DeviceBuffer::is_mapped), on
/// every path, say), it returns its own error and the others
/// [`Error::RemoteFailure`]. Never a hang or a truncated message.
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
    /// Pinned host buffers kept for reuse between calls (the requests'
    /// memory too).
    pub(crate) pool: Arc<StagingPool>,
    /// Whether the context's device buffers map directly (probed once).
    maps_directly: bool,
    /// The peers on the same-node path, and its sockets and memory.
    pub(crate) same_node: Arc<SameNode>,
    /// How many allreduces took the direct reduce-scatter
    /// (`Communicator::direct_reduce_scatters`).
    pub(crate) direct_reduce_scatters: AtomicU64,
    /// How many allreduces ran MPI's own allreduce in pieces
    /// (`Communicator::mpi_allreduces`).
    pub(crate) mpi_allreduces: AtomicU64,
    /// How many reduces ran MPI's own reduce in pieces
    /// (`Communicator::mpi_reduces`).
    pub(crate) mpi_reduces: AtomicU64,
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
        // Bounded once a wait of this process timed out (`raw::suspect_bound`).
        let comm = raw::duplicate(op, comm, raw::suspect_bound())?;
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
            pool: Arc::new(StagingPool::new(ctx)),
            maps_directly,
            direct_reduce_scatters: AtomicU64::new(0),
            mpi_allreduces: AtomicU64::new(0),
            mpi_reduces: AtomicU64::new(0),
        })
    }

    /// Whether this communicator moves device buffers where they lie:
    /// where the context's device memory is host visible and staging is not
    /// forced (lavapipe, integrated GPUs), `send`, `recv`, `broadcast` and
    /// `allreduce` map a device buffer ([`DeviceBuffer::map_to_host`](vkcompute::DeviceBuffer::map_to_host),
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
    /// on one node and can share memory (on one device that can export
    /// and import opaque file descriptors, or on any devices that can
    /// import host memory: [`same_node_memory`](Self::same_node_memory)),
    /// and their policies ask for it (see
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

    /// The memory that messages between this rank and `peer` travel
    /// through where they take [`Path::SameNode`]: device memory (one
    /// device) or host memory both map (different devices, or
    /// [`SameNodePolicy::HostMemory`](crate::SameNodePolicy::HostMemory));
    /// `None` where they take another path.
    pub fn same_node_memory(&self, peer: i32) -> Result<Option<SameNodeMemory>> {
        self.check_rank("Communicator::same_node_memory", peer)?;
        Ok(self.same_node.memory_with(peer))
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
    /// status bytes only, no data. The memory is host memory where any
    /// pair of the communicator shares host memory, else device memory.
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

    /// How many of those were written in pieces that the receiver copied
    /// out as they were written (a blocking [`send`](Self::send) of more
    /// than one piece), for the tests of that protocol.
    #[cfg(feature = "test-counters")]
    pub fn same_node_noted_sends(&self) -> u64 {
        self.same_node.noted_sends()
    }

    /// How many allreduces of this communicator sent every chunk to its
    /// owner at once (the direct reduce-scatter, taken on 3 to 8 ranks
    /// over MPI where the ring would otherwise run with chunks of one
    /// piece), for the tests that check where it is taken.
    #[cfg(feature = "test-counters")]
    pub fn direct_reduce_scatters(&self) -> u64 {
        self.direct_reduce_scatters.load(Ordering::Relaxed)
    }

    /// How many allreduces of this communicator ran MPI's own allreduce in
    /// pieces ([`AllreduceAlgorithm::Mpi`](crate::AllreduceAlgorithm::Mpi)),
    /// for the tests that check where it is taken.
    #[cfg(feature = "test-counters")]
    pub fn mpi_allreduces(&self) -> u64 {
        self.mpi_allreduces.load(Ordering::Relaxed)
    }

    /// How many reduces of this communicator ran MPI's own reduce in
    /// pieces (over MPI, where the ring's chunks would be longer than one
    /// piece), for the tests that check where it is taken.
    #[cfg(feature = "test-counters")]
    pub fn mpi_reduces(&self) -> u64 {
        self.mpi_reduces.load(Ordering::Relaxed)
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

    /// Sets how long any one MPI wait of this communicator may take before it
    /// fails with [`Error::Timeout`] (`None`, the default: as long as MPI
    /// takes, which is for ever where a peer never comes). Applies to every
    /// later wait, on every rank that sets it (each rank its own). One wait may
    /// cover several messages: a collective's step (its pieces), in an
    /// allreduce whose reduce-scatter sends every chunk to its owner at once
    /// `size - 1` chunks, and in MPI's own allreduce or reduce in pieces the
    /// (up to four) pieces under way since the last one was posted or finished;
    /// leave room for the slowest such step, not one message.
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

    /// The ranks as the executor sees them.
    pub(crate) fn team(&self) -> Team<'_> {
        Team {
            raw: &self.raw,
            rank: self.rank as usize,
            size: self.size as usize,
            ctx: &self.ctx,
        }
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
        // A point-to-point call posts to MPI without a wait of the raw
        // layer (which would refuse): a broken communicator refuses here.
        self.raw().state.usable(op)?;
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
