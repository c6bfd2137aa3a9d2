//! Finding the peers a rank takes the same-node path with, and
//! connecting the sockets the descriptors go over
//! ([`SameNode::detect`], collective: every rank of the communicator
//! calls it when the communicator is made).

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::mem::size_of;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::atomic::AtomicU64;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use bytemuck::{Pod, Zeroable};
use vkcompute::{sharing::MemoryHandleType, DeviceContext};

use super::inbox::Imports;
use super::{SameNode, SameNodePolicy};
use crate::error::{Error, Result};
use crate::raw::{self, Comm};

/// "vkSN", little-endian: a record of this crate's same-node detection.
const MAGIC: u32 = 0x4e53_6b76;

/// How long a rank waits for the peers it pairs with to connect, once
/// every rank has published its record (they connect at once; this only
/// bounds a peer that cannot).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long an accepted connection may take to introduce itself.
const HELLO_TIMEOUT: Duration = Duration::from_secs(5);

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
}

#[cfg(test)]
mod tests {
    use super::*;

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
