//! A receiver's side of the same-node path: the descriptors its peers
//! sent, taken off the sockets in step with the headers that announce
//! them, the imports of their memory (one per outbox and generation:
//! exported device memory or a `memfd`), and the copy out of a message
//! between an acquire and a release.

use std::collections::HashMap;
use std::io;
use std::sync::PoisonError;

use vkcompute::{
    sharing::{ExternalMemoryInfo, MemoryHandleType},
    DeviceBuffer,
};

use super::{SameNode, ANNOUNCE_BYTES};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw;
use crate::wire::{SharedMemory, SharedMessages};

/// A receiver's import of a peer's shared memory.
pub(super) struct Inbox {
    generation: u32,
    memory: DeviceBuffer<u8>,
}

/// A descriptor a peer sent over its socket, and the description of the
/// export that came with it (`None`: a `memfd` of shared host memory).
pub(super) struct Announced {
    fd: raw::PeerFd,
    info: Option<ExternalMemoryInfo>,
}

/// A receiver's imports of its peers' memory, and the descriptors it took
/// off the sockets before the headers that announce them.
#[derive(Default)]
pub(super) struct Imports {
    /// By `(source, outbox)`: the generation imported last.
    inboxes: HashMap<(i32, u32), Inbox>,
    /// By `(source, outbox, generation)`: descriptors that came before
    /// the one a header asked for (messages matched out of order, a
    /// collective's memory behind an `isend`'s).
    ahead: HashMap<(i32, u32, u32), Announced>,
}

impl SameNode {
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
                    format!("taking the shared memory off the socket: {e}")
                },
            })?;
            let word = |at: usize| {
                let mut bytes = [0u8; 4];
                bytes.copy_from_slice(&payload[at..at + 4]);
                u32::from_le_bytes(bytes)
            };
            let sent = (word(0), word(4));
            let info = match word(8) {
                0 => Some(
                    ExternalMemoryInfo::from_bytes(&payload[12..]).map_err(Error::device(op))?,
                ),
                _ => None,
            };
            let exported = Announced { fd, info };
            if sent == wanted {
                return Ok(exported);
            }
            ahead.insert((source, sent.0, sent.1), exported);
        }
    }

    /// Imports `exported`, which came from `source` over its socket:
    /// exported device memory, or shared host memory.
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
        let Some(info) = exported.info else {
            // What the peer sent is its fault; this device's errors are
            // this rank's.
            return raw::import_shared_host(&self.ctx, exported.fd).map_err(|e| match e {
                vkcompute::Error::InvalidHandle { .. } => {
                    broken(format!("importing its shared host memory: {e}"))
                }
                e => Error::device(op)(e),
            });
        };
        if info.handle_type != MemoryHandleType::OpaqueFd {
            return Err(broken(format!("a {:?} handle", info.handle_type)));
        }
        let len = usize::try_from(info.size)
            .map_err(|_| broken(format!("{} bytes of memory", info.size)))?;
        raw::import_peer_memory(&self.ctx, exported.fd, info, len).map_err(Error::device(op))
    }
}

impl SharedMessages for SameNode {
    fn inbox(
        &self,
        op: &'static str,
        source: i32,
        shared: SharedMemory,
    ) -> Result<DeviceBuffer<u8>> {
        SameNode::inbox(self, op, source, shared)
    }

    fn take_part(
        &self,
        op: &'static str,
        (source, inbox): (i32, &DeviceBuffer<u8>),
        own: std::ops::Range<usize>,
        write: &mut dyn FnMut() -> vkcompute::Result<()>,
    ) -> Result<Option<Error>> {
        if own.end > inbox.len() {
            return Err(Error::Protocol {
                op,
                peer: source,
                detail: format!(
                    "a message of {} bytes in shared memory of {}",
                    own.end,
                    inbox.len()
                ),
            });
        }
        let part =
            (inbox.create_sub_buffer::<u8>(own.start, own.len())).map_err(Error::device(op))?;
        (part.enqueue_acquire_from_external()).map_err(Error::device(op))?;
        let written = write();
        let released = part.enqueue_release_to_external();
        released
            .and_then(|()| self.ctx.flush())
            .map_err(Error::device(op))?;
        Ok(written.err().map(Error::device(op)))
    }

    fn settle(&self, op: &'static str) -> Result<()> {
        self.ctx.synchronize().map_err(Error::device(op))
    }
}

/// Runs `with` on elements `range` (of `T`) of shared memory `memory`
/// between an acquire from and a release to `VK_QUEUE_FAMILY_EXTERNAL`
/// (for host memory, barriers with the host: `import_host_mapping`),
/// enqueued, not waited for; nothing for an empty range.
pub(crate) fn shared_part<T: Element>(
    op: &'static str,
    memory: &DeviceBuffer<u8>,
    range: &std::ops::Range<usize>,
    with: impl FnOnce(&DeviceBuffer<T>) -> Result<()>,
) -> Result<()> {
    shared_parts(op, &[memory], range, |parts| {
        parts.first().map_or(Ok(()), with)
    })
}

/// [`shared_part`] of several memories at once: `with` gets their parts in
/// the order of `memories`, each acquired before and released after it
/// (every one acquired is released, even where another failed; a failed
/// release is the error returned, else `with`'s).
pub(crate) fn shared_parts<T: Element>(
    op: &'static str,
    memories: &[&DeviceBuffer<u8>],
    range: &std::ops::Range<usize>,
    with: impl FnOnce(&[DeviceBuffer<T>]) -> Result<()>,
) -> Result<()> {
    if range.is_empty() {
        return Ok(());
    }
    let parts = (memories.iter())
        .map(|m| m.create_sub_buffer::<T>(range.start, range.len()))
        .collect::<vkcompute::Result<Vec<_>>>()
        .map_err(Error::device(op))?;
    let mut acquired = 0;
    let mut done = Ok(());
    for part in &parts {
        done = (part.enqueue_acquire_from_external()).map_err(Error::device(op));
        if done.is_err() {
            break;
        }
        acquired += 1;
    }
    let done = done.and_then(|()| with(&parts));
    let released = (parts[..acquired].iter())
        .map(|part| part.enqueue_release_to_external())
        .fold(Ok(()), vkcompute::Result::and)
        .map_err(Error::device(op));
    released.and(done)
}
