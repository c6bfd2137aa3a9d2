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
use super::{SameNode, SameNodeMemory, SameNodePolicy, MIN_SHARED_BYTES};
use crate::error::{Error, Result};
use crate::raw::{self, Comm};

/// "vkS2", little-endian: a record of this crate's same-node detection
/// (its second form, with the kinds of memory a rank can share).
const MAGIC: u32 = 0x3253_6b76;

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
    NoSharing,
    NoSocket,
}

impl Offer {
    const ALL: [Offer; 4] = [
        Offer::Yes,
        Offer::TurnedOff,
        Offer::NoSharing,
        Offer::NoSocket,
    ];

    fn code(self) -> u32 {
        match self {
            Offer::Yes => 1,
            Offer::TurnedOff => 2,
            Offer::NoSharing => 3,
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
            Offer::NoSharing => {
                "its device can neither export and import opaque fds nor import host memory"
            }
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
    /// 1 where the rank's device can export and import opaque fds.
    device_memory: u32,
    /// 1 where the rank's device can import host memory.
    host_memory: u32,
    /// 1 where the rank asks for shared host memory
    /// ([`SameNodePolicy::HostMemory`]).
    host_asked: u32,
}

const RECORD_BYTES: usize = size_of::<Record>();

impl Record {
    fn socket_address(&self) -> io::Result<SocketAddr> {
        let hex: String = self.name.iter().map(|b| format!("{b:02x}")).collect();
        SocketAddr::from_abstract_name(format!("vkcompute-mpi/{hex}"))
    }

    /// The memory this rank and `other` share on the path between them, or
    /// why they do not take it.
    fn pairs_with(&self, other: &Record) -> std::result::Result<SameNodeMemory, String> {
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
        let one_device =
            self.device_uuid == other.device_uuid && self.driver_uuid == other.driver_uuid;
        let device = one_device && self.device_memory == 1 && other.device_memory == 1;
        let host = self.host_memory == 1 && other.host_memory == 1;
        let asked_host = self.host_asked == 1 || other.host_asked == 1;
        let memory = match (device, host) {
            (true, false) => SameNodeMemory::Device,
            (true, true) if !asked_host => SameNodeMemory::Device,
            (_, true) => SameNodeMemory::Host,
            (false, false) if !one_device => {
                return Err(
                    "another device or driver (deviceUUID or driverUUID differs), \
                            and not both can import host memory"
                        .into(),
                )
            }
            (false, false) => {
                return Err(
                    "not both can share device memory (opaque fds) or import host \
                            memory"
                        .into(),
                )
            }
        };
        if self.maps == 1 && other.maps == 1 && self.always == 0 && other.always == 0 {
            return Err(
                "both map device memory directly, where MPI moves it in one copy \
                        (SameNodePolicy::Auto)"
                    .into(),
            );
        }
        Ok(memory)
    }
}

/// Whether `ctx`'s device can share device memory (export and import
/// opaque fds) and import host memory (tried: a device may offer the
/// extension and still refuse the buffers or memory types it needs).
fn can_share(ctx: &DeviceContext) -> (bool, bool) {
    let fd = MemoryHandleType::OpaqueFd;
    let device =
        ctx.exportable_handle_types().contains(&fd) && ctx.importable_handle_types().contains(&fd);
    let host = ctx.host_import_alignment().is_some()
        && raw::create_shared_host(ctx, MIN_SHARED_BYTES).is_ok();
    (device, host)
}

/// This rank's offer and, where it offers the path, its listening socket
/// (`shares`: what [`can_share`] said).
fn open(wanted: SameNodePolicy, shares: (bool, bool)) -> (Offer, [u8; 16], Option<UnixListener>) {
    if wanted == SameNodePolicy::Off {
        return (Offer::TurnedOff, [0; 16], None);
    }
    if shares == (false, false) {
        return (Offer::NoSharing, [0; 16], None);
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
        let shares = match wanted {
            SameNodePolicy::Off => (false, false),
            _ => can_share(ctx),
        };
        let (offer, name, listener) = open(wanted, shares);
        let (device_memory, host_memory) = shares;
        let info = ctx.info();
        let mine = Record {
            magic: MAGIC,
            offer: offer.code(),
            node,
            device_uuid: info.uuid,
            driver_uuid: info.driver_uuid,
            name,
            always: u32::from(matches!(
                wanted,
                SameNodePolicy::Always | SameNodePolicy::HostMemory
            )),
            maps: u32::from(maps),
            device_memory: u32::from(device_memory),
            host_memory: u32::from(host_memory),
            host_asked: u32::from(wanted == SameNodePolicy::HostMemory),
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
        let decided: Vec<std::result::Result<SameNodeMemory, String>> = (0..size)
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
        let (whole, collective_memory) = spanning(&records, &ready);
        let memory: Vec<SameNodeMemory> = decided
            .iter()
            .map(|d| d.clone().unwrap_or(SameNodeMemory::Device))
            .collect();
        let same: Vec<String> = (0..size)
            .filter(|&p| sockets[p as usize].is_some())
            .map(|p| match memory[p as usize] {
                SameNodeMemory::Host => format!("{p} (host memory)"),
                _ => format!("{p} (device memory)"),
            })
            .collect();
        let others: Vec<String> = (0..size)
            .filter(|&p| p != rank && sockets[p as usize].is_none())
            .map(|p| match &decided[p as usize] {
                Err(why) => format!("rank {p}: {why}"),
                Ok(_) => format!("rank {p}: a socket could not be connected"),
            })
            .collect();
        log::info!(
            "vkcompute-mpi: rank {rank}: same-node path to {}; over MPI to {}{}",
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
            memory,
            collective_memory,
            outboxes: Mutex::new(HashMap::new()),
            imports: Mutex::new(Imports::default()),
            whole,
            collectives: AtomicU64::new(0),
            sends: AtomicU64::new(0),
            noted_sends: AtomicU64::new(0),
            shared: Mutex::new(None),
        })
    }
}

/// Whether every pair of the ranks of `records` takes the path (every
/// rank `ready`, its sockets connected), and the memory of the
/// collectives: host memory where any pair shares host memory (then every
/// rank must be able to import it), else device memory.
fn spanning(records: &[Record], ready: &[u8]) -> (bool, SameNodeMemory) {
    let mut memory = SameNodeMemory::Device;
    let mut every = records.len() > 1 && ready.iter().all(|&r| r == 1);
    for (p, a) in records.iter().enumerate() {
        let others = records.iter().enumerate().filter(|&(q, _)| q != p);
        for (_, b) in others {
            match a.pairs_with(b) {
                Ok(SameNodeMemory::Host) => memory = SameNodeMemory::Host,
                Ok(_) => {}
                Err(_) => every = false,
            }
        }
    }
    if memory == SameNodeMemory::Host && records.iter().any(|r| r.host_memory == 0) {
        every = false;
    }
    (every, memory)
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
            device_memory: 1,
            host_memory: 0,
            host_asked: 0,
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
        assert!(why(record(0, Offer::NoSharing, 1)).contains("import"));
        let off = record(0, Offer::NoSharing, 1);
        assert!(off.pairs_with(&a).unwrap_err().contains("this rank"));
    }

    #[test]
    fn host_memory_joins_other_devices_and_serves_who_asks_for_it() {
        use SameNodeMemory::{Device, Host};
        let host = |uuid| Record {
            host_memory: 1,
            ..record(0, Offer::Yes, uuid)
        };
        // Other devices share host memory where both can import it.
        assert_eq!(host(1).pairs_with(&host(2)), Ok(Host));
        assert!(host(1).pairs_with(&record(0, Offer::Yes, 2)).is_err());
        // One device shares device memory, unless a rank asks for host.
        assert_eq!(host(1).pairs_with(&host(1)), Ok(Device));
        let asks = Record {
            host_asked: 1,
            ..host(1)
        };
        assert_eq!(asks.pairs_with(&host(1)), Ok(Host));
        assert_eq!(host(1).pairs_with(&asks), Ok(Host));
        assert_eq!(asks.pairs_with(&record(0, Offer::Yes, 1)), Ok(Device));
        // Host memory without device sharing, on one device.
        let only_host = Record {
            device_memory: 0,
            ..host(1)
        };
        assert_eq!(only_host.pairs_with(&host(1)), Ok(Host));
        // The collectives: host memory where any pair shares it, and only
        // where every rank can import it.
        let ready = [1u8; 3];
        assert_eq!(
            spanning(&[host(1), host(1), host(1)], &ready),
            (true, Device)
        );
        assert_eq!(spanning(&[host(1), host(2), host(2)], &ready), (true, Host));
        let mixed = [record(0, Offer::Yes, 1), record(0, Offer::Yes, 1), host(2)];
        assert!(!spanning(&mixed, &ready).0);
        assert!(!spanning(&[host(1), host(2), host(2)], &[1, 0, 1]).0);
        assert!(!spanning(&[host(1)], &[1]).0);
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
