//! MPI for [vkcompute]: device buffers sent, received,
//! broadcast, gathered and reduced across the ranks of an MPI job.
//!
//! No MPI implementation knows Vulkan memory, so this crate brings the
//! device side: MPI (rsmpi over the system's MPI, Open MPI 4.1 on Debian
//! 12) moves bytes between pinned host buffers, vkcompute copies them to
//! and from the device, and the arithmetic of the reductions runs as
//! kernels on the device (but for a large allreduce or reduce over MPI,
//! which MPI reduces on the host).
//!
//! ```no_run
//! use vkcompute::DeviceContext;
//! use vkcompute_mpi::{Communicator, ReduceOp};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (universe, _threading) = mpi::initialize_with_threading(mpi::Threading::Funneled)
//!     .ok_or("MPI was initialised already")?;
//! let ctx = DeviceContext::new()?;
//! let comm = Communicator::new(&universe.world(), &ctx)?;
//! let grads = ctx.enqueue_create_buffer::<f32>(1 << 20)?;
//! grads.enqueue_fill(comm.rank() as f32)?;
//! comm.allreduce(&grads, ReduceOp::Sum)?; // on every rank: 0 + 1 + ... + (size - 1)
//! # Ok(()) }
//! ```
//!
//! What goes where, chosen at run time per peer
//! ([`Communicator::path_to`], logged when the communicator is made):
//! - **Same node** ([`Path::SameNode`]): where two ranks share a node
//!   (`MPI_Comm_split_type(SHARED)`) and can share memory
//!   ([`Communicator::same_node_memory`]: device memory where their
//!   contexts are on one device, equal device and driver UUIDs, that can
//!   export and import opaque file descriptors; host memory both map and
//!   import where their devices differ, a sealed `memfd`),
//!   [`Communicator::send`] and
//!   [`Communicator::isend`] copy the buffer on the device into memory
//!   they share with the receiver (the descriptor passed once over a Unix
//!   socket, the memory kept for later messages: up to four per peer, so
//!   that as many `isend`s can be under way at once, beyond which a
//!   message travels over MPI), and the receiver (`recv` or `irecv`)
//!   copies it out on its device; MPI carries only the header and the
//!   answer. Where every pair of the communicator
//!   takes the path, so do the collectives of buffers that are not empty
//!   ([`Communicator::collective_path`]): each rank copies its input into
//!   memory shared with all, and the ranks read each other's on their
//!   devices. In a broadcast the others copy the root's out; in
//!   `allreduce` rank `r` reduces chunk `r` of every rank's memory with
//!   the crate's kernels and every rank (in `reduce`, the root) copies
//!   the reduced chunks out; in `allgather` each copies every rank's
//!   block out; in `reduce_scatter` rank `r` reduces block `r` of every
//!   rank's memory into its `recv`. MPI carries the headers and a few
//!   status bytes. By default
//!   ([`SameNodePolicy::Auto`]) a pair whose device buffers both map
//!   directly keeps to MPI, which moves mapped
//!   memory in one copy (measured faster on lavapipe than two device
//!   copies); [`Communicator::with_same_node`] or
//!   `VKCOMPUTE_MPI_SAME_NODE` ([`SAME_NODE_VAR`]: `0`, `always`, `host`)
//!   choose ([`SameNodePolicy::HostMemory`]: host memory even on one
//!   device).
//!
//! Over MPI, nothing goes GPU to GPU directly. Where device
//! memory is host visible and staging is not forced (lavapipe, integrated
//! GPUs; [`Communicator::maps_device_memory`] says which, and logs it),
//! `send`, `recv`, `broadcast` and `allreduce` map a device buffer and MPI
//! reads and writes it where it lies, the reductions' kernels running on
//! it between the mappings. Elsewhere every operation stages device memory
//! through pinned host memory ([`vkcompute::HostBuffer`]): point-to-point
//! messages travel in pieces ([`Communicator::piece_bytes`]) whose
//! device-to-host (or host-to-device) copies overlap the MPI transfer of
//! the piece before. A collective whose chunks (a rank's share of the
//! buffer) exceed 4 MiB pipelines the same way: in the ring of
//! `allgather` and `reduce_scatter` and a `broadcast`'s `MPI_Ibcast`s,
//! each chunk travels in pieces through host buffers of one piece each,
//! each piece's copies and reduction kernel overlapping the transfer of
//! the others. Such an `allreduce` runs MPI's own allreduce instead
//! ([`AllreduceAlgorithm::Mpi`]), one `MPI_Iallreduce` a piece of the
//! buffer, reduced on the host: each piece is copied to pinned host
//! memory, reduced by MPI once there and copied back once reduced, four
//! pieces under way; on a mapped buffer MPI reduces into the mapping, in
//! the same pieces, so that ranks on either path pair. Such a `reduce`
//! runs MPI's reduce the same way through pinned host memory (one
//! `MPI_Ireduce` a piece; on two ranks the other rank sends each piece
//! and the root reduces it with `MPI_Reduce_local`), the result copied
//! back at the root only. Smaller collectives stage their buffer whole over
//! MPI. A communicator keeps the pinned buffers between calls, at most
//! 256 MiB of whole staging buffers and 256 MiB of pieces' buffers (the
//! oldest given back first); beyond that a call's buffers are new.
//!
//! The reductions and gathers choose their algorithm by size, alike on
//! every rank: on 4, 8, ... ranks recursive doubling for an allreduce of
//! at most 64 KiB, recursive halving and doubling (log2 of the ranks
//! steps) for buffers of at most 4 MiB, and the ring otherwise. Where
//! the ring would run on 3 to 8 ranks with chunks of at most one piece,
//! an allreduce's reduce-scatter sends every chunk to its owner at once
//! instead, and the owner reduces them in one kernel pass (the ring's
//! bytes; on lavapipe's staged path 0.73-0.88x of the ring's time on 3
//! ranks, 64 KiB to 4 MiB). Each rank then receives into `size - 1`
//! chunks of pinned host memory (kept for reuse).
//!
//! Non-blocking messages: [`Communicator::isend`] and
//! [`Communicator::irecv`] return a [`Request`] (`wait`, `test`) over the
//! same protocol as `send` and `recv`; see [`Request`] for progress and for
//! what dropping an unfinished one does. A request holds its whole
//! message in pinned host memory from the communicator's staging pool: an
//! `isend` of a device buffer enqueues the copies into it and returns,
//! and each part of the message goes to MPI once its copy is through; an
//! `irecv` lands the message with one device copy once it is all here.
//!
//! **Ranks that die or hang.** MPI promises nothing here: a blocking call
//! whose peer never comes waits for ever, and what happens when a process
//! dies is up to the runtime. Measured with Open MPI 4.1.4's `mpirun` on
//! one machine (3 ranks, `tests/faults.rs`): when a rank exits without
//! `MPI_Finalize` (any exit code, or killed), `mpirun` terminates the
//! other ranks about 1.1 s later, wherever they wait, and the job fails;
//! under `mpirun --enable-recovery` the others keep waiting. What this
//! crate adds is [`Communicator::set_timeout`]: every MPI wait of the
//! communicator (each is posted non-blocking and polled with `MPI_Test`)
//! fails with [`Error::Timeout`] once it passes the timeout, and the
//! communicator then refuses further operations ([`Error::Broken`]),
//! since the abandoned messages may still arrive. Returning is sound only
//! once MPI lets go of the memory of the transfers under way: receives are
//! cancelled, the small header buffers of the collectives are leaked, and
//! where MPI keeps memory it cannot give back (a collective's broadcast, a
//! send that the peer never takes and MPI cannot cancel) the job is
//! aborted with `MPI_Abort` instead, the error on stderr. Measured: a rank
//! that stalls makes the others' allreduce return `Timeout` 1.04 s into a
//! 1 s timeout; under `--enable-recovery`, a rank that dies mid-allreduce
//! made one survivor return `Timeout` and the other (its send to the dead
//! rank not cancellable) abort the job, 4.1 s after the death with a 2 s
//! timeout. No timeout is set by default: a slow rank is not a dead one.
//! After a timeout, treat the job as suspect, not only the communicator:
//! once (2 runs of 4), a later `MPI_Comm_dup` of the world hung in Open
//! MPI 4.1 after a communicator broke with a receive cancelled and an
//! answer left unmatched (cause not found). So once a wait of the process
//! timed out, [`Communicator::new`]'s duplication (`MPI_Comm_idup`,
//! polled) is bounded by the longest timeout that passed, at least 5 s:
//! past it, [`Error::Timeout`] (`tests/faults.rs`, case `dup`). The
//! same-node detection's `MPI_Comm_split_type`, which has no
//! non-blocking form, is not bounded.
//!
//! **Threads.** MPI is the application's to initialise (`mpi::initialize`
//! or `initialize_with_threading`); a [`Communicator`] reads the level MPI
//! actually provides (`MPI_Query_thread`;
//! [`Communicator::thread_level`]) and checks it before every MPI call:
//! - under `MPI_THREAD_MULTIPLE` a communicator may move to any thread and
//!   be used there (`Communicator` is `Send`, not `Sync`: one thread at a
//!   time per communicator; use one communicator per thread, made on one
//!   thread in the same order on every rank, as `tests/threads.rs` does
//!   with two threads on two duplicates of the world);
//! - under `MPI_THREAD_SERIALIZED` it is used only on the thread that made
//!   it (this crate cannot know whether the application's other MPI calls
//!   are serialized with it);
//! - under `MPI_THREAD_FUNNELED` and `MPI_THREAD_SINGLE` it is made and
//!   used only on MPI's main thread.
//!
//! Elsewhere an operation is [`Error::WrongThread`], before any MPI call.
//! A [`Request`] stays on its communicator's thread (it borrows it).
#![deny(unsafe_code)]

mod communicator;
mod element;
mod error;
mod exec;
mod kept;
mod plan;
mod raw;
mod transport;
mod wire;

pub use communicator::{Communicator, Request, DEFAULT_PIECE_BYTES};
pub use element::{Element, ElementType, KernelTypeToken, ReduceOp, Reducible};
pub use error::{Error, Result};
pub use plan::AllreduceAlgorithm;
pub use transport::place::{Buffer, Place};
pub use transport::same_node::{Path, SameNodeMemory, SameNodePolicy, SAME_NODE_VAR};
pub use wire::MAX_TAG;

/// The checked-in SPIR-V of the reduction kernels, by the name of the GLSL
/// file (`shaders/<name>.comp`) each comes from, for the test that checks
/// them (`tests/shipped_spirv.rs`).
#[doc(hidden)]
pub fn shipped_spirv() -> Vec<(&'static str, &'static [u8])> {
    raw::SHIPPED
        .iter()
        .map(|(_, _, name, bytes)| (*name, *bytes))
        .collect()
}
