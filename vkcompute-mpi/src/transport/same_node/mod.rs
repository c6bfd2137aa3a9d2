//! The same-node path: ranks of one node whose contexts are on the same
//! device (equal `deviceUUID` and `driverUUID`) and can export and import
//! opaque file descriptors exchange point-to-point messages through
//! device memory that the sender exports and the receiver imports, with
//! one device copy on each side; MPI carries only the header and the
//! answer.
//!
//! **Finding the peers** ([`SameNode::detect`], in
//! `Communicator::new`, collective): `MPI_Comm_split_type(SHARED)` names
//! each rank's node (its lowest rank, `raw::node_leader`); every rank
//! then gathers every rank's [`Record`] (node, UUIDs, whether it offers
//! the path, the name of its socket). A pair takes the path where both
//! offer it on one node and one device; each rank decides from the same
//! records, so both ends of a pair agree without asking each other.
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
//! that peer (exported memory, at most [`MAX_OUTBOXES`] per peer, each
//! with an id and lent to one message at a time; the smallest free one
//! that holds the message, else the largest free one grown, else a new
//! one), copies its buffer into it, releases the memory to
//! `VK_QUEUE_FAMILY_EXTERNAL`, waits for the device, and sends the
//! header, which names the outbox and its *generation*. Outboxes grow by
//! powers of two; a grown or new one is a new generation, whose
//! descriptor goes over the socket, with the outbox id and generation,
//! before the header that uses it. Where every outbox is lent to messages
//! under way (`isend`s not yet answered), the message travels over MPI.
//! The receiver imports a new generation (kept per outbox until the next
//! replaces it), acquires the memory, copies the message into its buffer,
//! releases the memory, waits for the device and answers: only then does
//! the outbox go back to the free ones, to be written again.
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
//! more exported memory, its collective memory ([`COLLECTIVE_OUTBOX`]),
//! which every peer imports (`fill_collective`, `announce_collective`,
//! `inbox`); the headers of the collective carry its generation.
//!
//! The receiver trusts its peer as it trusts MPI's bytes: the peer is a
//! rank of the same job, and what it sends over the socket is an export
//! of `DeviceBuffer::export_fd` with that export's description.

mod detect;
mod inbox;
mod outbox;

pub(crate) use inbox::shared_part;
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
    /// Through device memory that the sender exports and the receiver
    /// imports (same node, same device, opaque file descriptors): one
    /// device copy on each side, and MPI carries only a header and an
    /// answer. Taken by [`send`](crate::Communicator::send) and
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
}

/// The environment variable that chooses the same-node policy of every
/// communicator of a process: `0`, `off`, `false` or `no` turn the path
/// off (whatever the code asks); `always` makes
/// [`Communicator::new`](crate::Communicator::new) take it wherever it
/// can ([`SameNodePolicy::Always`]).
pub const SAME_NODE_VAR: &str = "VKCOMPUTE_MPI_SAME_NODE";

/// The policy of a communicator asked for with `asked` (`None`: by
/// `Communicator::new`) where [`SAME_NODE_VAR`] is `value`.
pub(crate) fn policy(asked: Option<SameNodePolicy>, value: Option<&str>) -> SameNodePolicy {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        Some("0" | "off" | "false" | "no") => SameNodePolicy::Off,
        Some("always") if asked.is_none() => SameNodePolicy::Always,
        _ => asked.unwrap_or(SameNodePolicy::Auto),
    }
}

/// The smallest shared memory a sender keeps for a peer.
const MIN_SHARED_BYTES: usize = 64 << 10;

/// The most outboxes (exported memories) a sender keeps for one peer, so
/// the most messages to it under way through exported memory at once
/// (`isend`s, and a blocking `send`); beyond them a message travels over
/// MPI.
pub(crate) const MAX_OUTBOXES: usize = 4;

/// The outbox id of a rank's collective memory (its outboxes for a peer
/// count up from 0).
const COLLECTIVE_OUTBOX: u32 = u32::MAX;

/// Bytes beside each descriptor on the socket: the outbox id, the
/// generation, then the export's description.
const ANNOUNCE_BYTES: usize = 8 + EXTERNAL_MEMORY_INFO_BYTES;

/// The same-node state of one communicator: the socket to each peer on
/// the path, and the memory exported to and imported from each.
pub(crate) struct SameNode {
    ctx: DeviceContext,
    /// Indexed by rank: the socket to a peer on the path, `None` for the
    /// others (and for this rank).
    sockets: Vec<Option<UnixStream>>,
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
    /// The point-to-point messages sent through exported memory.
    sends: AtomicU64,
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

    /// The point-to-point messages sent through exported memory so far
    /// (`send` and `isend`).
    #[cfg(feature = "test-counters")]
    pub(crate) fn sends(&self) -> u64 {
        self.sends.load(Ordering::Relaxed)
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
        assert_eq!(policy(Some(Auto), Some("always")), Auto);
    }
}
