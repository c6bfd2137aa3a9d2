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
//! `spans_communicator`; `collective/on_node.rs`): each rank keeps one
//! more exported memory, its collective memory ([`COLLECTIVE_OUTBOX`]),
//! which every peer imports (`fill_collective`, `announce_collective`,
//! `inbox`); the headers of the collective carry its generation.
//!
//! The receiver trusts its peer as it trusts MPI's bytes: the peer is a
//! rank of the same job, and what it sends over the socket is an export
//! of `DeviceBuffer::export_fd` with that export's description.
use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::mem::size_of;
use std::os::fd::AsFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytemuck::{Pod, Zeroable};
use vkcompute::{
    DeviceBuffer, DeviceContext, ExternalMemoryInfo, MemoryHandleType, EXTERNAL_MEMORY_INFO_BYTES,
};

use crate::element::Element;
use crate::error::{Error, Result};
use crate::header::SharedMemory;
use crate::place::Place;
use crate::raw::{self, Comm};

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
    /// copies (CONTRIBUTING.md). The default.
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

/// "vkSN", little-endian: a record of this crate's same-node detection.
const MAGIC: u32 = 0x4e53_6b76;

/// How long a rank waits for the peers it pairs with to connect, once
/// every rank has published its record (they connect at once; this only
/// bounds a peer that cannot).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an accepted connection may take to introduce itself.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

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

/// Bytes of a connection's introduction: the rank, then the listener's
/// random name.
const HELLO_BYTES: usize = 4 + 16;

/// Whether a rank offers the path, or why not.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Offer {
    Yes,
    TurnedOff,
    NoExport,
    NoImport,
    NoSocket,
}

impl Offer {
    const ALL: [Offer; 5] = [
        Offer::Yes,
        Offer::TurnedOff,
        Offer::NoExport,
        Offer::NoImport,
        Offer::NoSocket,
    ];

    fn code(self) -> u32 {
        match self {
            Offer::Yes => 1,
            Offer::TurnedOff => 2,
            Offer::NoExport => 3,
            Offer::NoImport => 4,
            Offer::NoSocket => 5,
        }
    }

    fn from_code(code: u32) -> Option<Offer> {
        Offer::ALL.into_iter().find(|o| o.code() == code)
    }

    fn why_not(self) -> &'static str {
        match self {
            Offer::Yes => "it offers the path",
            Offer::TurnedOff => "turned off (SameNodePolicy::Off, or VKCOMPUTE_MPI_SAME_NODE=0)",
            Offer::NoExport => "its device cannot export opaque fds",
            Offer::NoImport => "its device cannot import opaque fds",
            Offer::NoSocket => "it could not open its node-local socket",
        }
    }
}

/// What each rank publishes to every other at detection.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct Record {
    magic: u32,
    /// An `Offer` code.
    offer: u32,
    /// The node: its lowest rank (`raw::node_leader`).
    node: i32,
    device_uuid: [u8; 16],
    driver_uuid: [u8; 16],
    /// The random name of the rank's socket.
    name: [u8; 16],
    /// 1 where the rank asks for the path wherever it can
    /// ([`SameNodePolicy::Always`]).
    always: u32,
    /// 1 where the rank's device buffers map directly.
    maps: u32,
}

const RECORD_BYTES: usize = size_of::<Record>();

impl Record {
    fn socket_address(&self) -> io::Result<SocketAddr> {
        let hex: String = self.name.iter().map(|b| format!("{b:02x}")).collect();
        SocketAddr::from_abstract_name(format!("vkcompute-mpi/{hex}"))
    }

    /// Whether this rank and `other` can take the path between them, or why not.
    fn pairs_with(&self, other: &Record) -> std::result::Result<(), String> {
        if self.node != other.node {
            return Err("another node".into());
        }
        for (who, record) in [("this rank", self), ("the peer", other)] {
            match Offer::from_code(record.offer) {
                Some(Offer::Yes) => {}
                Some(offer) => return Err(format!("{who}: {}", offer.why_not())),
                None => return Err(format!("{who}: unknown offer code {}", record.offer)),
            }
        }
        if self.device_uuid != other.device_uuid || self.driver_uuid != other.driver_uuid {
            return Err("another device or driver (deviceUUID or driverUUID differs)".into());
        }
        if self.maps == 1 && other.maps == 1 && self.always == 0 && other.always == 0 {
            return Err(
                "both map device memory directly, where MPI moves it in one copy \
                        (SameNodePolicy::Auto)"
                    .into(),
            );
        }
        Ok(())
    }
}

/// A sender's exported memory for one peer (one of its outboxes for that
/// peer, or its collective memory).
struct Outbox {
    /// Which of the sender's memories it is: its outboxes for a peer count
    /// up from 0, the collective memory is [`COLLECTIVE_OUTBOX`].
    id: u32,
    generation: u32,
    memory: DeviceBuffer<u8>,
    /// Whether the memory is released to `VK_QUEUE_FAMILY_EXTERNAL` (it
    /// must be acquired before this rank writes it again).
    released: bool,
    /// Whether the peer has this generation's descriptor.
    announced: bool,
}

impl Outbox {
    /// Where a header says the data is: this memory, new where its
    /// descriptor has not gone out yet.
    fn shared(&self) -> SharedMemory {
        SharedMemory {
            outbox: self.id,
            generation: self.generation,
            new: !self.announced,
        }
    }
}

/// A sender's outboxes for one peer: at most [`MAX_OUTBOXES`], each lent
/// to one message at a time.
#[derive(Default)]
struct Outboxes {
    /// Those no message uses now.
    free: Vec<Outbox>,
    /// How many are lent to messages under way.
    lent: usize,
    /// The id of the next one made.
    next_id: u32,
}

/// An outbox lent to one message to `dest`, filled and announced
/// ([`SameNode::stage_out`]). It goes back to its peer's outboxes once
/// the receiver answered ([`answered`](Self::answered)); dropped without
/// an answer (an MPI error, a timeout), it is given up, since the
/// receiver may still read it: its memory is freed here (a receiver's
/// import keeps the memory alive) and a new outbox takes its place.
pub(crate) struct Lent {
    same_node: Arc<SameNode>,
    dest: i32,
    outbox: Option<Outbox>,
    shared: SharedMemory,
}

impl Lent {
    /// Where the header says the data is.
    pub(crate) fn shared(&self) -> SharedMemory {
        self.shared
    }

    /// The receiver answered the message: it is done with the memory,
    /// which goes back to the peer's outboxes. `refused`: the answer
    /// refused the message, maybe without importing the memory (an import
    /// that failed), so the next message in it sends its descriptor again
    /// and the receiver replaces whatever it holds.
    pub(crate) fn answered(mut self, refused: bool) {
        if let Some(mut outbox) = self.outbox.take() {
            outbox.announced &= !refused;
            self.same_node.give_back(self.dest, Some(outbox));
        }
    }
}

impl Drop for Lent {
    /// Gives up an outbox whose message was not answered (see the type).
    fn drop(&mut self) {
        if self.outbox.take().is_some() {
            self.same_node.give_back(self.dest, None);
        }
    }
}

/// A receiver's import of a peer's exported memory.
struct Inbox {
    generation: u32,
    memory: DeviceBuffer<u8>,
}

/// A descriptor a peer sent over its socket, and the description of the
/// export that came with it.
struct Announced {
    fd: raw::PeerFd,
    info: ExternalMemoryInfo,
}

/// A receiver's imports of its peers' memory, and the descriptors it took
/// off the sockets before the headers that announce them.
#[derive(Default)]
struct Imports {
    /// By `(source, outbox)`: the generation imported last.
    inboxes: HashMap<(i32, u32), Inbox>,
    /// By `(source, outbox, generation)`: descriptors that came before
    /// the one a header asked for (messages matched out of order, a
    /// collective's memory behind an `isend`'s).
    ahead: HashMap<(i32, u32, u32), Announced>,
}

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
    /// The collectives that took the path (`collective/on_node.rs`).
    collectives: AtomicU64,
    /// The point-to-point messages sent through exported memory.
    sends: AtomicU64,
    /// This rank's memory for the collectives, exported to every peer.
    shared: Mutex<Option<Outbox>>,
}

/// This rank's offer and, where it offers the path, its listening socket.
fn open(ctx: &DeviceContext, wanted: SameNodePolicy) -> (Offer, [u8; 16], Option<UnixListener>) {
    if wanted == SameNodePolicy::Off {
        return (Offer::TurnedOff, [0; 16], None);
    }
    if !ctx
        .exportable_handle_types()
        .contains(&MemoryHandleType::OpaqueFd)
    {
        return (Offer::NoExport, [0; 16], None);
    }
    if !ctx
        .importable_handle_types()
        .contains(&MemoryHandleType::OpaqueFd)
    {
        return (Offer::NoImport, [0; 16], None);
    }
    let listening = raw::random_bytes().and_then(|name| {
        let probe = Record {
            name,
            ..Record::zeroed()
        };
        let listener = UnixListener::bind_addr(&probe.socket_address()?)?;
        listener.set_nonblocking(true)?;
        Ok((name, listener))
    });
    match listening {
        Ok((name, listener)) => (Offer::Yes, name, Some(listener)),
        Err(e) => {
            log::warn!("vkcompute-mpi: no same-node path: a node-local socket: {e}");
            (Offer::NoSocket, [0; 16], None)
        }
    }
}

/// Connects to the listener of rank `to` (of `record`) as rank `me`.
fn connect(me: i32, record: &Record) -> io::Result<UnixStream> {
    let mut stream = UnixStream::connect_addr(&record.socket_address()?)?;
    let mut hello = [0u8; HELLO_BYTES];
    hello[..4].copy_from_slice(&me.to_le_bytes());
    hello[4..].copy_from_slice(&record.name);
    stream.write_all(&hello)?;
    Ok(stream)
}

/// Accepts the connections of the ranks `expected` into `sockets`,
/// turning away any that does not introduce itself with this listener's
/// `name` and an expected rank, within [`CONNECT_TIMEOUT`].
fn accept(
    listener: &UnixListener,
    name: &[u8; 16],
    mut expected: Vec<i32>,
    sockets: &mut [Option<UnixStream>],
) -> io::Result<()> {
    let deadline = Instant::now() + CONNECT_TIMEOUT;
    while !expected.is_empty() {
        match listener.accept() {
            Ok((mut stream, _)) => {
                stream.set_nonblocking(false)?;
                stream.set_read_timeout(Some(HELLO_TIMEOUT))?;
                let mut hello = [0u8; HELLO_BYTES];
                if stream.read_exact(&mut hello).is_err() {
                    continue;
                }
                let mut rank = [0u8; 4];
                rank.copy_from_slice(&hello[..4]);
                let rank = i32::from_le_bytes(rank);
                if hello[4..] != name[..] || !expected.contains(&rank) {
                    log::warn!("vkcompute-mpi: a connection to the same-node socket turned away");
                    continue;
                }
                stream.set_read_timeout(None)?;
                expected.retain(|&r| r != rank);
                sockets[rank as usize] = Some(stream);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                if Instant::now() >= deadline {
                    return Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        format!("ranks {expected:?} did not connect within {CONNECT_TIMEOUT:?}"),
                    ));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl SameNode {
    /// Finds the ranks of `comm` that this one (`rank` of `size`) takes
    /// the path with under policy `wanted` (`maps`: whether this rank's
    /// device buffers map directly), and connects to them (see the module
    /// documentation). Collective: every rank calls it, whatever its
    /// policy (a rank with the path off takes part, so that its peers
    /// learn it). Logs the outcome (`info`).
    pub(crate) fn detect(
        op: &'static str,
        comm: &Comm,
        (rank, size): (i32, i32),
        ctx: &DeviceContext,
        (wanted, maps): (SameNodePolicy, bool),
    ) -> Result<SameNode> {
        let node = raw::node_leader(op, comm, rank)?;
        let (offer, name, listener) = open(ctx, wanted);
        let info = ctx.info();
        let mine = Record {
            magic: MAGIC,
            offer: offer.code(),
            node,
            device_uuid: info.uuid,
            driver_uuid: info.driver_uuid,
            name,
            always: u32::from(wanted == SameNodePolicy::Always),
            maps: u32::from(maps),
        };
        let mut all = vec![0u8; RECORD_BYTES * size as usize];
        raw::allgather(op, comm, bytemuck::bytes_of(&mine), &mut all)?;
        let records: Vec<Record> = all
            .chunks_exact(RECORD_BYTES)
            .map(bytemuck::pod_read_unaligned)
            .collect();
        if let Some(peer) = records.iter().position(|r| r.magic != MAGIC) {
            return Err(Error::Protocol {
                op,
                peer: peer as i32,
                detail: "its same-node record is not vkcompute-mpi's (another version?)".into(),
            });
        }
        let decided: Vec<std::result::Result<(), String>> = (0..size)
            .map(|p| match p {
                p if p == rank => Err("this rank".into()),
                p => mine.pairs_with(&records[p as usize]),
            })
            .collect();
        let mut sockets: Vec<Option<UnixStream>> = (0..size).map(|_| None).collect();
        let mut connected: io::Result<()> = Ok(());
        for p in 0..rank {
            if decided[p as usize].is_ok() && connected.is_ok() {
                match connect(rank, &records[p as usize]) {
                    Ok(stream) => sockets[p as usize] = Some(stream),
                    Err(e) => connected = Err(e),
                }
            }
        }
        if let (Some(listener), true) = (&listener, connected.is_ok()) {
            let higher = (rank + 1..size)
                .filter(|&p| decided[p as usize].is_ok())
                .collect();
            connected = accept(listener, &name, higher, &mut sockets);
        }
        drop(listener);
        if let Err(e) = &connected {
            log::warn!("vkcompute-mpi: rank {rank}: the same-node path's sockets: {e}");
        }
        let mut ready = vec![0u8; size as usize];
        raw::allgather(op, comm, &[u8::from(connected.is_ok())], &mut ready)?;
        for (p, socket) in sockets.iter_mut().enumerate() {
            if ready[rank as usize] == 0 || ready[p] == 0 {
                *socket = None;
            }
        }
        let whole = size > 1
            && ready.iter().all(|&r| r == 1)
            && records.iter().enumerate().all(|(p, a)| {
                records
                    .iter()
                    .enumerate()
                    .all(|(q, b)| p == q || a.pairs_with(b).is_ok())
            });
        let same: Vec<String> = (0..size)
            .filter(|&p| sockets[p as usize].is_some())
            .map(|p| p.to_string())
            .collect();
        let others: Vec<String> = (0..size)
            .filter(|&p| p != rank && sockets[p as usize].is_none())
            .map(|p| match &decided[p as usize] {
                Err(why) => format!("rank {p}: {why}"),
                Ok(()) => format!("rank {p}: a socket could not be connected"),
            })
            .collect();
        log::info!(
            "vkcompute-mpi: rank {rank}: same-node path (exported device memory) to {}; over MPI \
             to {}{}",
            if same.is_empty() {
                "no rank".to_string()
            } else {
                format!("ranks {}", same.join(", "))
            },
            if others.is_empty() {
                "no rank".to_string()
            } else {
                others.join("; ")
            },
            if whole {
                "; the collectives on it too (every pair takes it)"
            } else {
                ""
            }
        );
        Ok(SameNode {
            ctx: ctx.clone(),
            sockets,
            outboxes: Mutex::new(HashMap::new()),
            imports: Mutex::new(Imports::default()),
            whole,
            collectives: AtomicU64::new(0),
            sends: AtomicU64::new(0),
            shared: Mutex::new(None),
        })
    }

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

    /// Copies the `len` elements of `place` into an outbox for `dest` (a
    /// free one, made or grown first where none holds them), releases it
    /// and waits for the device; sends the descriptor of a new generation
    /// over the socket. Returns the outbox, lent to this message until the
    /// receiver answers, or `None` where [`MAX_OUTBOXES`] are lent to
    /// messages under way (the message then travels over MPI). Where this
    /// fails no header has gone out: the caller sends a failed one (the
    /// outbox is back with the others, its descriptor to be sent again
    /// where it may not have gone out whole).
    pub(crate) fn stage_out<T: Element>(
        self: &Arc<Self>,
        op: &'static str,
        place: Place<'_, T>,
        len: usize,
        dest: i32,
    ) -> Result<Option<Lent>> {
        let Some(mut outbox) = self.lend(op, dest, len * size_of::<T>())? else {
            return Ok(None);
        };
        let shared = outbox.shared();
        let staged = self
            .fill(op, &mut outbox, len, |part| {
                place.copy_range_to(0, len, part)
            })
            .and_then(|()| self.announce(op, &mut outbox, dest));
        if let Err(e) = staged {
            self.give_back(dest, Some(outbox));
            return Err(e);
        }
        self.sends.fetch_add(1, Ordering::Relaxed);
        Ok(Some(Lent {
            same_node: Arc::clone(self),
            dest,
            outbox: Some(outbox),
            shared,
        }))
    }

    /// An outbox for a message of `bytes` to `dest`, counted as lent: the
    /// smallest free one that holds it, else the largest free one grown (a
    /// new generation), else a new one where fewer than [`MAX_OUTBOXES`]
    /// are lent; `None` where that many are.
    fn lend(&self, op: &'static str, dest: i32, bytes: usize) -> Result<Option<Outbox>> {
        let (kept, id) = {
            let mut pools = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
            let pool = pools.entry(dest).or_default();
            let len = |i: &(usize, &Outbox)| i.1.memory.len();
            let free = || pool.free.iter().enumerate();
            let fitting = free().filter(|i| len(i) >= bytes).min_by_key(len);
            let chosen = fitting.or_else(|| free().max_by_key(len)).map(|(i, _)| i);
            let kept = match chosen {
                Some(i) => Some(pool.free.swap_remove(i)),
                None if pool.lent < MAX_OUTBOXES => None,
                None => return Ok(None),
            };
            let id = kept.as_ref().map_or(pool.next_id, |o| o.id);
            if kept.is_none() {
                pool.next_id = (pool.next_id + 1) % COLLECTIVE_OUTBOX;
            }
            pool.lent += 1;
            (kept, id)
        };
        let made = self.at_least(op, kept, bytes, id);
        if made.is_err() {
            self.give_back(dest, None);
        }
        made.map(Some)
    }

    /// Takes back an outbox lent to a message to `dest`: `Some` to lend
    /// again, `None` where it is given up (a new one may take its place).
    fn give_back(&self, dest: i32, outbox: Option<Outbox>) {
        let mut pools = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
        let pool = pools.entry(dest).or_default();
        pool.lent = pool.lent.saturating_sub(1);
        pool.free.extend(outbox);
    }

    /// `kept` where it holds `bytes`, else new exportable memory of the
    /// next generation (a power of two, at least [`MIN_SHARED_BYTES`]),
    /// as outbox `id`.
    fn at_least(
        &self,
        op: &'static str,
        kept: Option<Outbox>,
        bytes: usize,
        id: u32,
    ) -> Result<Outbox> {
        Ok(match kept {
            Some(outbox) if outbox.memory.len() >= bytes => outbox,
            old => Outbox {
                id,
                generation: old.map_or(1, |o| o.generation.wrapping_add(1)),
                memory: self
                    .ctx
                    .enqueue_create_exportable_buffer_as::<u8>(
                        bytes.next_power_of_two().max(MIN_SHARED_BYTES),
                        &[MemoryHandleType::OpaqueFd],
                    )
                    .map_err(Error::device(op))?,
                released: false,
                announced: false,
            },
        })
    }

    /// Writes the first `len` elements (of `T`) of `outbox` with `write`
    /// (given a view of them) between an acquire (where it was released)
    /// and a release of the memory, and waits for the device.
    fn fill<T: Element>(
        &self,
        op: &'static str,
        outbox: &mut Outbox,
        len: usize,
        write: impl FnOnce(&DeviceBuffer<T>) -> vkcompute::Result<()>,
    ) -> Result<()> {
        let memory = &outbox.memory;
        if outbox.released {
            (memory.enqueue_acquire_from_external()).map_err(Error::device(op))?;
            outbox.released = false;
        }
        let part = memory
            .create_sub_buffer::<T>(0, len)
            .map_err(Error::device(op))?;
        write(&part).map_err(Error::device(op))?;
        (memory.enqueue_release_to_external()).map_err(Error::device(op))?;
        outbox.released = true;
        self.ctx.synchronize().map_err(Error::device(op))
    }

    /// Sends the descriptor of `outbox` to `dest` where it has not had
    /// this generation yet; whether it did.
    fn announce(&self, op: &'static str, outbox: &mut Outbox, dest: i32) -> Result<bool> {
        self.announce_to(op, outbox, dest..dest + 1)
    }

    /// Sends the descriptor of `outbox` to every rank of `peers` (but this
    /// one) where they have not had this generation yet, with the
    /// outbox's id and generation; whether it did.
    fn announce_to(
        &self,
        op: &'static str,
        outbox: &mut Outbox,
        peers: std::ops::Range<i32>,
    ) -> Result<bool> {
        if outbox.announced {
            return Ok(false);
        }
        let exported = (outbox.memory)
            .export_fd(MemoryHandleType::OpaqueFd)
            .map_err(Error::device(op))?;
        let mut payload = [0u8; ANNOUNCE_BYTES];
        payload[..4].copy_from_slice(&outbox.id.to_le_bytes());
        payload[4..8].copy_from_slice(&outbox.generation.to_le_bytes());
        payload[8..].copy_from_slice(&exported.info.to_bytes());
        for dest in peers.filter(|&p| self.is_peer(p)) {
            raw::send_fd(self.socket(op, dest)?, exported.fd.as_fd(), &payload).map_err(|e| {
                Error::SameNode {
                    op,
                    peer: dest,
                    detail: format!("passing the exported memory over the node-local socket: {e}"),
                }
            })?;
        }
        outbox.announced = true;
        Ok(true)
    }

    /// The memory `source` announces a message in (`shared`, from its
    /// header; a point-to-point message's or a collective's): a new
    /// generation's descriptor is taken off the socket first (or from
    /// those taken ahead of their headers) and imported (and kept,
    /// replacing the outbox's generation before), whatever becomes of the
    /// message, so that the socket stays in step with the headers.
    pub(crate) fn inbox(
        &self,
        op: &'static str,
        source: i32,
        shared: SharedMemory,
    ) -> Result<DeviceBuffer<u8>> {
        let mut imports = self.imports.lock().unwrap_or_else(PoisonError::into_inner);
        let key = (source, shared.outbox);
        if !shared.new {
            return match imports.inboxes.get(&key) {
                Some(inbox) if inbox.generation == shared.generation => Ok(inbox.memory.clone()),
                _ => Err(Error::Protocol {
                    op,
                    peer: source,
                    detail: format!(
                        "a message in shared memory {} of generation {}, which this rank has \
                         not imported",
                        shared.outbox, shared.generation
                    ),
                }),
            };
        }
        let exported = self.descriptor(op, &mut imports.ahead, source, shared)?;
        // Copies of this outbox's descriptors sent again after a refusal.
        imports
            .ahead
            .retain(|&(s, outbox, _), _| (s, outbox) != key);
        let memory = self.import(op, source, exported)?;
        let generation = shared.generation;
        let inbox = Inbox {
            generation,
            memory: memory.clone(),
        };
        imports.inboxes.insert(key, inbox);
        Ok(memory)
    }

    /// The descriptor of `shared` from `source`: one taken off the socket
    /// before (in `ahead`), or the next on the socket that is it, those
    /// before it kept in `ahead` (the peer sends each before the header
    /// that announces it, so it is there; descriptors of messages matched
    /// later come before it where messages are matched out of order).
    fn descriptor(
        &self,
        op: &'static str,
        ahead: &mut HashMap<(i32, u32, u32), Announced>,
        source: i32,
        shared: SharedMemory,
    ) -> Result<Announced> {
        let wanted = (shared.outbox, shared.generation);
        if let Some(exported) = ahead.remove(&(source, wanted.0, wanted.1)) {
            return Ok(exported);
        }
        let socket = self.socket(op, source)?;
        loop {
            let mut payload = [0u8; ANNOUNCE_BYTES];
            let fd = raw::recv_fd_now(socket, &mut payload).map_err(|e| Error::SameNode {
                op,
                peer: source,
                detail: if e.kind() == io::ErrorKind::WouldBlock {
                    format!(
                        "the node-local socket holds no descriptor of shared memory {} of \
                         generation {}, which the header announces",
                        wanted.0, wanted.1
                    )
                } else {
                    format!("taking the exported memory off the socket: {e}")
                },
            })?;
            let word = |at: usize| {
                let mut bytes = [0u8; 4];
                bytes.copy_from_slice(&payload[at..at + 4]);
                u32::from_le_bytes(bytes)
            };
            let sent = (word(0), word(4));
            let info = ExternalMemoryInfo::from_bytes(&payload[8..]).map_err(Error::device(op))?;
            let exported = Announced { fd, info };
            if sent == wanted {
                return Ok(exported);
            }
            ahead.insert((source, sent.0, sent.1), exported);
        }
    }

    /// Imports `exported`, which came from `source` over its socket.
    fn import(
        &self,
        op: &'static str,
        source: i32,
        exported: Announced,
    ) -> Result<DeviceBuffer<u8>> {
        let broken = |detail: String| Error::SameNode {
            op,
            peer: source,
            detail,
        };
        let info = exported.info;
        if info.handle_type != MemoryHandleType::OpaqueFd {
            return Err(broken(format!("a {:?} handle", info.handle_type)));
        }
        let len = usize::try_from(info.size)
            .map_err(|_| broken(format!("{} bytes of memory", info.size)))?;
        raw::import_peer_memory(&self.ctx, exported.fd, info, len).map_err(Error::device(op))
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

    /// Writes the first `len` elements (of `T`) of this rank's collective
    /// memory (made, or grown, first) with `write` (given a view of them),
    /// between an acquire and a release, and waits for the device. Returns
    /// the memory and where it is for the header; a new generation goes to
    /// the peers with
    /// [`announce_collective`](Self::announce_collective) once the ranks
    /// agree.
    pub(crate) fn fill_collective<T: Element>(
        &self,
        op: &'static str,
        len: usize,
        write: impl FnOnce(&DeviceBuffer<T>) -> vkcompute::Result<()>,
    ) -> Result<(DeviceBuffer<u8>, SharedMemory)> {
        let kept = self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let bytes = len * size_of::<T>();
        let mut outbox = self.at_least(op, kept, bytes, COLLECTIVE_OUTBOX)?;
        let filled = self.fill(op, &mut outbox, len, write);
        let announced = outbox.shared();
        let memory = outbox.memory.clone();
        *self.shared.lock().unwrap_or_else(PoisonError::into_inner) = Some(outbox);
        filled.map(|()| (memory, announced))
    }

    /// Sends this rank's collective memory to every peer where it is a new
    /// generation (`size` ranks).
    pub(crate) fn announce_collective(&self, op: &'static str, size: i32) -> Result<()> {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        match shared.as_mut() {
            Some(outbox) => self.announce_to(op, outbox, 0..size).map(|_| ()),
            None => Ok(()),
        }
    }

    /// Copies the first `len` elements of `inbox` (from `source`) out
    /// with `write` (given a view of them), between the acquire and the
    /// release of the memory, and waits for the device: the sender may
    /// write the memory again once this returns. `Ok(Some(e))`: `write`
    /// failed (a mapped destination, say), the memory is released all the
    /// same.
    pub(crate) fn take<T: Element>(
        &self,
        op: &'static str,
        source: i32,
        inbox: &DeviceBuffer<u8>,
        len: usize,
        write: impl FnOnce(&DeviceBuffer<T>) -> vkcompute::Result<()>,
    ) -> Result<Option<Error>> {
        let bytes = len * size_of::<T>();
        if inbox.len() < bytes {
            return Err(Error::Protocol {
                op,
                peer: source,
                detail: format!(
                    "a message of {bytes} bytes in shared memory of {}",
                    inbox.len()
                ),
            });
        }
        (inbox.enqueue_acquire_from_external()).map_err(Error::device(op))?;
        let written = inbox
            .create_sub_buffer::<T>(0, len)
            .and_then(|part| write(&part));
        let released = inbox.enqueue_release_to_external();
        // Waited for even where the release failed: once the answer goes
        // out, whatever it says, nothing of this rank reads the memory.
        let waited = self.ctx.synchronize();
        released.and(waited).map_err(Error::device(op))?;
        Ok(written.err().map(Error::device(op)))
    }
}

/// Runs `with` on elements `range` (of `T`) of shared memory `memory`
/// between an acquire from and a release to `VK_QUEUE_FAMILY_EXTERNAL`
/// (enqueued, not waited for); nothing for an empty range.
pub(crate) fn shared_part<T: Element>(
    op: &'static str,
    memory: &DeviceBuffer<u8>,
    range: &std::ops::Range<usize>,
    with: impl FnOnce(&DeviceBuffer<T>) -> Result<()>,
) -> Result<()> {
    if range.is_empty() {
        return Ok(());
    }
    let part = memory
        .create_sub_buffer::<T>(range.start, range.len())
        .map_err(Error::device(op))?;
    (part.enqueue_acquire_from_external()).map_err(Error::device(op))?;
    let done = with(&part);
    (part.enqueue_release_to_external()).map_err(Error::device(op))?;
    done
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

    fn record(node: i32, offer: Offer, uuid: u8) -> Record {
        Record {
            magic: MAGIC,
            offer: offer.code(),
            node,
            device_uuid: [uuid; 16],
            driver_uuid: [7; 16],
            name: [1; 16],
            always: 0,
            maps: 0,
        }
    }

    #[test]
    fn two_ranks_that_map_directly_pair_only_where_one_insists() {
        let mapped = Record {
            maps: 1,
            ..record(0, Offer::Yes, 1)
        };
        assert!(mapped.pairs_with(&mapped).unwrap_err().contains("directly"));
        assert!(mapped.pairs_with(&record(0, Offer::Yes, 1)).is_ok());
        let insists = Record {
            always: 1,
            ..mapped
        };
        assert!(mapped.pairs_with(&insists).is_ok());
        assert!(insists.pairs_with(&mapped).is_ok());
    }

    #[test]
    fn ranks_pair_only_on_one_node_and_device_both_offering() {
        let a = record(0, Offer::Yes, 1);
        assert!(a.pairs_with(&record(0, Offer::Yes, 1)).is_ok());
        let why = |b: Record| a.pairs_with(&b).unwrap_err();
        assert!(why(record(2, Offer::Yes, 1)).contains("another node"));
        assert!(why(record(0, Offer::Yes, 9)).contains("deviceUUID"));
        assert!(why(record(0, Offer::TurnedOff, 1)).contains("turned off"));
        assert!(why(record(0, Offer::NoImport, 1)).contains("import"));
        let off = record(0, Offer::NoExport, 1);
        assert!(off.pairs_with(&a).unwrap_err().contains("this rank"));
    }

    #[test]
    fn socket_names_differ_by_their_random_bytes() {
        let (a, mut b) = (record(0, Offer::Yes, 1), record(0, Offer::Yes, 1));
        b.name[15] = 2;
        let name = |r: &Record| {
            r.socket_address()
                .unwrap()
                .as_abstract_name()
                .unwrap()
                .to_vec()
        };
        assert_ne!(name(&a), name(&b));
        assert!(name(&a).starts_with(b"vkcompute-mpi/0101"));
    }
}
