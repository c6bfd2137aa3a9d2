//! The same-node path: ranks of one node exchange point-to-point
//! messages (and, where every pair takes it, the collectives' data)
//! through memory they share, with one device copy on each side; MPI
//! carries only the header and the answer. The memory is one of two
//! kinds ([`SameNodeMemory`]), chosen per pair at detection:
//!
//! - **device memory** the sender exports and the receiver imports as an
//!   opaque fd, where both ranks' contexts are on one device (equal
//!   `deviceUUID` and `driverUUID`) that can export and import them;
//! - **host memory** both ranks map (a `memfd` sealed at its size,
//!   `raw::create_shared_host`) and import into their devices with
//!   `VK_EXT_external_memory_host`, where their devices differ (the ranks
//!   of a node of several GPUs), or cannot share device memory, or the
//!   policy asks for it ([`SameNodePolicy::HostMemory`]). On a discrete
//!   GPU both copies are DMA; without it a message would be copied to
//!   pinned memory, by MPI between the ranks, and back.
//!
//! **Finding the peers** ([`SameNode::detect`], in
//! `Communicator::new`, collective): `MPI_Comm_split_type(SHARED)` names
//! each rank's node (its lowest rank, `raw::node_leader`); every rank
//! then gathers every rank's [`Record`] (node, UUIDs, what it can share,
//! whether it offers the path, the name of its socket). A pair takes the
//! path where both offer it on one node and can share memory of a kind;
//! each rank decides from the same records, so both ends of a pair agree
//! without asking each other.
//!
//! **Passing descriptors.** MPI carries bytes only. Each rank that offers
//! the path listens on a Unix socket in the abstract namespace, named by
//! 16 random bytes of its own (published in its record, over MPI only);
//! every rank connects to the lower ranks it pairs with and introduces
//! itself with its rank and that name's random bytes, which only the
//! communicator's ranks know, so the listener knows whom each connection
//! is from, and a stranger that guesses nothing is turned away. The
//! descriptors then go with `SCM_RIGHTS` (`raw::send_fd`). Chosen over
//! `pidfd_getfd`, which needs ptrace rights over the peer (Yama's
//! `ptrace_scope` 1, the default of several distributions, refuses it
//! between sibling processes) and Linux 5.6; an abstract socket needs no
//! file to clean up after a crash. A second gather says which ranks got
//! all their connections: a pair without its socket takes the other
//! paths, on both ends.
//!
//! **A message** (`Communicator::send` or `isend` to a peer on the path,
//! [`SameNode::stage_out`]): the sender takes one of its *outboxes* for
//! that peer (shared memory, at most [`MAX_OUTBOXES`] per peer, each
//! with an id and lent to one message at a time; the smallest free one
//! that holds the message, else the largest free one grown, else a new
//! one), copies its buffer into it, releases the memory (to
//! `VK_QUEUE_FAMILY_EXTERNAL`; host memory to the host), waits for the
//! device, and sends the
//! header, which names the outbox and its *generation*. Outboxes grow by
//! powers of two; a grown or new one is a new generation, whose
//! descriptor goes over the socket, with the outbox id, generation and
//! kind, before the header that uses it. Where every outbox is lent to
//! messages under way (`isend`s not yet answered), the message travels
//! over MPI. The receiver imports a new generation (kept per outbox until
//! the next replaces it), acquires the memory, copies the message into
//! its buffer, releases the memory, waits for the device and answers:
//! only then does the outbox go back to the free ones, to be written
//! again.
//!
//! **In pieces.** A blocking `send` of more than one piece
//! ([`piece_bytes`](crate::Communicator::piece_bytes)), where every
//! earlier message to the peer with its tag has its answer and has posted
//! all its data, does not wait for its copy: it enqueues it in at most
//! six pieces (all but the last a multiple of 256 bytes), each released
//! on its own and followed by an event, sends the header at once, and
//! then a note as each piece's event is reached (8 bytes on the data
//! tag, `wire/op/shared.rs`), waiting for nothing but
//! its own device. The receiver posts the receives of every note in its
//! step after the header (so that they meet no later message's data) and,
//! as its op is moved on, acquires, copies out and releases each piece
//! whose note is in, so that the two ranks' copies overlap (on a discrete
//! GPU, two DMA transfers); it never waits for the notes inside another
//! call. Six pieces, so that they stay within the batches a stream keeps
//! in flight and the header goes out before the first piece is through.
//! A receiver that refuses the message (a mismatch, a failed import)
//! takes every note first. An `isend`, and a `send` behind another message
//! of its peer and tag, write the whole message first: their notes would
//! wait for the caller, or for that message's answer.
//!
//! **Keeping the sockets in step.** Descriptors travel in the order they
//! were sent, but the receiver may match the headers in another order
//! (`isend`s of different tags, a collective while an `isend` is under
//! way), so it reads descriptors off the socket until it has the one a
//! header names, keeping those before it by (outbox, generation) for the
//! headers that name them ([`SameNode::inbox`]). Every header that
//! announces a new generation has its descriptor taken off the socket
//! whatever becomes of the message (a mismatch, a failed import); a
//! refused message's outbox announces its memory again with the next
//! message, which replaces whatever the receiver holds; an outbox whose
//! answer never came (an MPI error, a timeout) is given up, not written
//! again ([`Lent`]).
//!
//! **A collective** (where every pair of the communicator takes the path,
//! `spans_communicator`; `communicator/collective/on_node.rs`): each rank keeps one
//! more shared memory, its collective memory ([`COLLECTIVE_OUTBOX`]),
//! which every peer imports (`fill_collective`, `announce_collective`,
//! `inbox`); the headers of the collective carry its generation. It is
//! host memory where any pair of the communicator shares host memory
//! (then every rank can import it), else device memory.
//!
//! The receiver trusts its peer as it trusts MPI's bytes: the peer is a
//! rank of the same job, and what it sends over the socket is an export
//! of `DeviceBuffer::export_fd` with that export's description, or a
//! sealed `memfd` (checked: a descriptor that is not one, or whose size
//! may change, is refused).

mod detect;
mod inbox;
mod outbox;

pub(crate) use inbox::{shared_part, shared_parts};
pub(crate) use outbox::Lent;

use std::collections::HashMap;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use vkcompute::{sharing::EXTERNAL_MEMORY_INFO_BYTES, DeviceContext};

use crate::error::{Error, Result};
use inbox::Imports;
use outbox::{Outbox, Outboxes};

/// How a communicator's point-to-point messages of device buffers travel
/// to and from one peer, chosen at run time
/// ([`Communicator::path_to`](crate::Communicator::path_to)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Path {
    /// Through memory the two ranks of one node share: device memory the
    /// sender exports and the receiver imports (one device, opaque file
    /// descriptors), or host memory both map and import into their
    /// devices (different devices; [`SameNodeMemory`]). One device copy
    /// on each side, and MPI carries only a header and an answer. Taken by [`send`](crate::Communicator::send) and
    /// [`isend`](crate::Communicator::isend) of non-empty buffers (up to
    /// four messages to a peer under way at once; more travel over MPI)
    /// and received by `recv` and `irecv`; taken by the collectives where
    /// every pair of the communicator takes it
    /// ([`Communicator::collective_path`](crate::Communicator::collective_path)).
    SameNode,
    /// Through MPI, which reads and writes a device buffer's mapping where
    /// it lies ([`Communicator::maps_device_memory`](crate::Communicator::maps_device_memory)).
    Mapped,
    /// Through MPI, staged through pinned host buffers in pieces.
    Staged,
}

impl Path {
    /// The name [`Path::Mapped`] had before (it named a transport with the
    /// word the allreduce algorithm [`Direct`](crate::AllreduceAlgorithm::Direct)
    /// uses).
    #[deprecated(note = "renamed `Path::Mapped`")]
    #[doc(hidden)]
    #[allow(non_upper_case_globals, reason = "the old variant's name")]
    pub const Direct: Path = Path::Mapped;

    /// A short name: `same_node`, `mapped` or `staged`.
    pub fn name(self) -> &'static str {
        match self {
            Path::SameNode => "same_node",
            Path::Mapped => "mapped",
            Path::Staged => "staged",
        }
    }
}

/// Where a rank takes the same-node path
/// ([`Communicator::with_same_node`](crate::Communicator::with_same_node)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SameNodePolicy {
    /// Never: messages to and from this rank travel over MPI.
    Off,
    /// Where the pair can take it, except where both ranks' device
    /// buffers map directly ([`Path::Mapped`] on both ends): there MPI
    /// reads and writes the memory where it lies, one copy by Open MPI's
    /// CMA, which measured faster on lavapipe than the path's two device
    /// copies (BENCHMARKS.md, vkcompute-mpi). The default.
    Auto,
    /// Wherever the pair can take it.
    Always,
    /// Wherever the pair can take it, through shared host memory even
    /// where both ranks are on one device
    /// ([`SameNodeMemory::Host`]; device memory where a rank cannot
    /// import host memory). The memory that ranks on different devices
    /// share: this runs it on one device, to test or measure it.
    HostMemory,
}

/// What memory a pair of ranks on the same-node path shares
/// ([`Communicator::same_node_memory`](crate::Communicator::same_node_memory)).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SameNodeMemory {
    /// Device memory the sender exports as an opaque fd and the receiver
    /// imports: both ranks on one device.
    Device,
    /// Host memory (a sealed `memfd`) that both ranks map and import into
    /// their devices (`VK_EXT_external_memory_host`): ranks on different
    /// devices, or on devices that cannot share device memory, or asked
    /// for with [`SameNodePolicy::HostMemory`].
    Host,
}

/// The environment variable that chooses the same-node policy of every
/// communicator of a process: `0`, `off`, `false` or `no` turn the path
/// off (whatever the code asks); `always` makes
/// [`Communicator::new`](crate::Communicator::new) take it wherever it
/// can ([`SameNodePolicy::Always`]), and `host` through shared host
/// memory ([`SameNodePolicy::HostMemory`]).
pub const SAME_NODE_VAR: &str = "VKCOMPUTE_MPI_SAME_NODE";

/// The policy of a communicator asked for with `asked` (`None`: by
/// `Communicator::new`) where [`SAME_NODE_VAR`] is `value`.
pub(crate) fn policy(asked: Option<SameNodePolicy>, value: Option<&str>) -> SameNodePolicy {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        Some("0" | "off" | "false" | "no") => SameNodePolicy::Off,
        Some("always") if asked.is_none() => SameNodePolicy::Always,
        Some("host") if asked.is_none() => SameNodePolicy::HostMemory,
        _ => asked.unwrap_or(SameNodePolicy::Auto),
    }
}

/// The smallest shared memory a sender keeps for a peer.
const MIN_SHARED_BYTES: usize = 64 << 10;

/// The most outboxes (exported memories) a sender keeps for one peer, so
/// the most messages to it under way through shared memory at once
/// (`isend`s, and a blocking `send`); beyond them a message travels over
/// MPI.
pub(crate) const MAX_OUTBOXES: usize = 4;

/// The outbox id of a rank's collective memory (its outboxes for a peer
/// count up from 0).
const COLLECTIVE_OUTBOX: u32 = u32::MAX;

/// Bytes beside each descriptor on the socket: the outbox id, the
/// generation, the kind (0: device memory, 1: host memory), then the
/// export's description (zeros for host memory).
const ANNOUNCE_BYTES: usize = 12 + EXTERNAL_MEMORY_INFO_BYTES;

/// The same-node state of one communicator: the socket to each peer on
/// the path, and the memory exported to and imported from each.
pub(crate) struct SameNode {
    ctx: DeviceContext,
    /// Indexed by rank: the socket to a peer on the path, `None` for the
    /// others (and for this rank).
    sockets: Vec<Option<UnixStream>>,
    /// Indexed by rank: the memory shared with a peer on the path.
    memory: Vec<SameNodeMemory>,
    /// The kind of this rank's collective memory (the same on every rank).
    collective_memory: SameNodeMemory,
    /// By peer: the outboxes of point-to-point messages to it.
    outboxes: Mutex<HashMap<i32, Outboxes>>,
    /// Every peer's memory this rank imported (point-to-point and
    /// collective).
    imports: Mutex<Imports>,
    /// Whether every pair of the communicator takes the path (then the
    /// collectives do too); the same on every rank.
    whole: bool,
    /// The collectives that took the path (`communicator/collective/on_node.rs`).
    collectives: AtomicU64,
    /// The point-to-point messages sent through shared memory.
    sends: AtomicU64,
    /// Those of them written in pieces (`stage_out`).
    noted_sends: AtomicU64,
    /// This rank's memory for the collectives, exported to every peer.
    shared: Mutex<Option<Outbox>>,
}

impl SameNode {
    /// Whether messages to and from `rank` take the path.
    pub(crate) fn is_peer(&self, rank: i32) -> bool {
        usize::try_from(rank)
            .ok()
            .and_then(|r| self.sockets.get(r))
            .is_some_and(Option::is_some)
    }

    /// The memory shared with `rank`, where messages to and from it take
    /// the path.
    pub(crate) fn memory_with(&self, rank: i32) -> Option<SameNodeMemory> {
        let index = usize::try_from(rank).ok().filter(|_| self.is_peer(rank))?;
        self.memory.get(index).copied()
    }

    fn socket(&self, op: &'static str, peer: i32) -> Result<&UnixStream> {
        usize::try_from(peer)
            .ok()
            .and_then(|p| self.sockets.get(p))
            .and_then(Option::as_ref)
            .ok_or_else(|| Error::Protocol {
                op,
                peer,
                detail: "a message in shared memory from a rank not on the same-node path".into(),
            })
    }

    /// Whether every pair of the communicator takes the path, so that the
    /// collectives take it too (the same answer on every rank).
    pub(crate) fn spans_communicator(&self) -> bool {
        self.whole
    }

    /// Counts a collective that took the path (the ranks agreed on it).
    pub(crate) fn count_collective(&self) {
        self.collectives.fetch_add(1, Ordering::Relaxed);
    }

    /// The collectives that took the path so far.
    #[cfg(feature = "test-counters")]
    pub(crate) fn collectives(&self) -> u64 {
        self.collectives.load(Ordering::Relaxed)
    }

    /// The point-to-point messages sent through shared memory so far
    /// (`send` and `isend`).
    #[cfg(feature = "test-counters")]
    pub(crate) fn sends(&self) -> u64 {
        self.sends.load(Ordering::Relaxed)
    }

    /// Those of them written in pieces.
    #[cfg(feature = "test-counters")]
    pub(crate) fn noted_sends(&self) -> u64 {
        self.noted_sends.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_turns_the_path_off_or_on_only_when_it_says_so() {
        use SameNodePolicy::{Always, Auto, Off};
        for off in ["0", "off", "FALSE", " no "] {
            assert_eq!(policy(None, Some(off)), Off, "{off:?}");
            assert_eq!(policy(Some(Always), Some(off)), Off, "{off:?}");
        }
        for other in [None, Some("1"), Some("on"), Some("")] {
            assert_eq!(policy(None, other), Auto, "{other:?}");
            assert_eq!(policy(Some(Always), other), Always, "{other:?}");
        }
        assert_eq!(policy(None, Some("Always")), Always);
        assert_eq!(policy(None, Some("host")), SameNodePolicy::HostMemory);
        assert_eq!(policy(Some(Always), Some("host")), Always);
        assert_eq!(policy(Some(Auto), Some("always")), Auto);
    }
}
