//! The small header the ranks exchange before any data: what each rank
//! asked for (operation, element type, length, reduction, root) and
//! whether its own preparation failed. A collective gathers every rank's
//! header and each rank checks them all, so that a mismatch or a failure
//! anywhere is an error on every rank, before a byte of data moves.

use bytemuck::{Pod, Zeroable};

use crate::element::{ElementType, ReduceOp};
use crate::error::{Error, Result};
use crate::raw::{self, Comm};

/// "vkMP", little-endian: a header of this crate.
const MAGIC: u32 = 0x504d_6b76;
/// The protocol's version; ranks of other versions are refused (3: the
/// header names the sender's outbox, `Header::outbox`; 4: `flags`; 5:
/// barriers exchange headers, `Kind::Barrier`; 6: same-node messages in
/// pieces, `Header::notes`).
const VERSION: u32 = 6;

/// `Header::flags`: this rank can take the allreduce whose reduce-scatter
/// sends every chunk to its owner at once
/// (`exec::Whole::direct_reduce_scatter`).
const DIRECT_REDUCE_SCATTER: u32 = 1;
/// `Header::flags` of a message in the sender's shared memory that the
/// sender is still writing, in pieces of `piece_bytes`: after the header,
/// a note on the data tag says that each piece is written
/// ([`Header::notes`]).
const SHARED_IN_PIECES: u32 = 2;
/// The most notes a message in shared memory may come with (the sender
/// makes its pieces large enough).
pub(crate) const MAX_NOTES: u64 = 256;

/// `Header::shared` of a message whose data travels over MPI.
const OVER_MPI: u32 = 0;
/// `Header::shared` of a message in the sender's shared memory (outbox
/// `outbox`) of `generation`, which the receiver imported already.
const SHARED_KNOWN: u32 = 1;
/// `Header::shared` of a message in the sender's shared memory of a new
/// `generation`, whose descriptor went over the node-local socket first.
const SHARED_NEW: u32 = 2;

/// Where a message's data lies on the same-node path (`same_node.rs`):
/// in the sender's exported memory `outbox` (one of those it keeps for
/// the receiver, or its collective memory) of `generation`, whose
/// descriptor went over the node-local socket before the header where
/// `new`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct SharedMemory {
    pub(crate) outbox: u32,
    pub(crate) generation: u32,
    pub(crate) new: bool,
}

/// The operation a header belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    Send,
    Ack,
    Broadcast,
    Allreduce,
    Reduce,
    Allgather,
    ReduceScatter,
    Barrier,
}

impl Kind {
    const ALL: [Kind; 8] = [
        Kind::Send,
        Kind::Ack,
        Kind::Broadcast,
        Kind::Allreduce,
        Kind::Reduce,
        Kind::Allgather,
        Kind::ReduceScatter,
        Kind::Barrier,
    ];

    fn code(self) -> u32 {
        match self {
            Kind::Send => 1,
            Kind::Ack => 2,
            Kind::Broadcast => 3,
            Kind::Allreduce => 4,
            Kind::Reduce => 5,
            Kind::Allgather => 6,
            Kind::ReduceScatter => 7,
            Kind::Barrier => 8,
        }
    }

    fn name(code: u32) -> &'static str {
        match Kind::ALL.into_iter().find(|k| k.code() == code) {
            Some(Kind::Send) => "send",
            Some(Kind::Ack) => "recv",
            Some(Kind::Broadcast) => "broadcast",
            Some(Kind::Allreduce) => "allreduce",
            Some(Kind::Reduce) => "reduce",
            Some(Kind::Allgather) => "allgather",
            Some(Kind::ReduceScatter) => "reduce_scatter",
            Some(Kind::Barrier) => "barrier",
            None => "an unknown operation",
        }
    }
}

/// Why a rank failed its part, as a code in its header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Its buffer is mapped to the host.
    Mapped,
    /// Another local error (a device error, an allocation, a bad argument).
    Local,
    /// It found the headers mismatched (a receiver's answer to a sender).
    Mismatch,
}

impl Failure {
    fn code(self) -> u32 {
        match self {
            Failure::Mapped => 1,
            Failure::Local => 2,
            Failure::Mismatch => 3,
        }
    }

    fn reason(code: u32) -> &'static str {
        match code {
            1 => "its buffer is mapped to the host",
            2 => "a local error on that rank; its own call returned it",
            3 => "it found the ranks' requests mismatched",
            _ => "an unknown failure code",
        }
    }

    /// The code that tells other ranks about `error`.
    pub(crate) fn of(error: &Error) -> Failure {
        if error.is_mapped_buffer() {
            Failure::Mapped
        } else {
            Failure::Local
        }
    }
}

/// One rank's header.
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
pub(crate) struct Header {
    magic: u32,
    version: u32,
    kind: u32,
    /// 0, or a `Failure` code.
    status: u32,
    element: u32,
    element_size: u32,
    reduce: u32,
    root: i32,
    /// Elements in the rank's buffer (for allgather and reduce_scatter: in
    /// its own block).
    len: u64,
    /// The size in bytes of the pieces the data travels in (point to point).
    piece_bytes: u64,
    /// Where a point-to-point message's data is: `OVER_MPI`, or in the
    /// sender's memory exported to the receiver (`SHARED_KNOWN`,
    /// `SHARED_NEW`; the same-node path, `same_node.rs`).
    shared: u32,
    /// The generation of that memory (the sender replaces it when it grows).
    generation: u32,
    /// Which of the sender's exported memories (`SharedMemory::outbox`).
    outbox: u32,
    /// What this rank can do beyond the request (`DIRECT_REDUCE_SCATTER`),
    /// for choices every rank then makes alike; not part of the request
    /// (`agrees_with` ignores it).
    flags: u32,
}

/// The size of a header on the wire.
pub(crate) const HEADER_BYTES: usize = std::mem::size_of::<Header>();

impl Header {
    /// The header of an operation of `len` elements of `element`.
    pub(crate) fn new(kind: Kind, element: ElementType, len: usize) -> Header {
        Header {
            magic: MAGIC,
            version: VERSION,
            kind: kind.code(),
            status: 0,
            element: element.code(),
            element_size: element.size() as u32,
            reduce: u32::MAX,
            root: -1,
            len: len as u64,
            piece_bytes: 0,
            shared: OVER_MPI,
            generation: 0,
            outbox: 0,
            flags: 0,
        }
    }

    /// With reduction `op`.
    pub(crate) fn reduce(mut self, op: ReduceOp) -> Header {
        self.reduce = op.code();
        self
    }

    /// With root `root`.
    pub(crate) fn root(mut self, root: i32) -> Header {
        self.root = root;
        self
    }

    /// With data pieces of `bytes`.
    pub(crate) fn pieces(mut self, bytes: usize) -> Header {
        self.piece_bytes = bytes as u64;
        self
    }

    /// With the data in the sender's exported memory `shared` (the
    /// same-node path).
    pub(crate) fn in_shared_memory(mut self, shared: SharedMemory) -> Header {
        self.shared = if shared.new { SHARED_NEW } else { SHARED_KNOWN };
        self.generation = shared.generation;
        self.outbox = shared.outbox;
        self
    }

    /// With the data in the sender's shared memory written in pieces of
    /// `piece_bytes`, a note following the header for each
    /// ([`notes`](Self::notes)).
    pub(crate) fn noted(mut self) -> Header {
        self.flags |= SHARED_IN_PIECES;
        self
    }

    /// How many notes follow the header on the data tag, one a piece
    /// (`Ok(0)`: none, the data was written before the header): a message
    /// in the sender's shared memory that the sender still writes.
    /// Counted from the sender's own length, element size and pieces, so
    /// that a receiver that refuses the message still takes every note.
    /// Errors: more than [`MAX_NOTES`] (not this crate's sender).
    pub(crate) fn notes(&self, op: &'static str, peer: i32) -> Result<u64> {
        if self.shared == OVER_MPI || self.flags & SHARED_IN_PIECES == 0 {
            return Ok(0);
        }
        let bytes = self.len.checked_mul(u64::from(self.element_size));
        let notes = bytes
            .zip((self.piece_bytes > 0).then_some(self.piece_bytes))
            .map(|(bytes, piece)| bytes.div_ceil(piece));
        match notes {
            Some(n) if n <= MAX_NOTES => Ok(n),
            _ => Err(Error::Protocol {
                op,
                peer,
                detail: format!(
                    "a message of {} elements of {} bytes in pieces of {} bytes",
                    self.len, self.element_size, self.piece_bytes
                ),
            }),
        }
    }

    /// Offering the direct reduce-scatter where `yes` (see
    /// [`offers_direct`](Self::offers_direct)).
    pub(crate) fn direct(mut self, yes: bool) -> Header {
        if yes {
            self.flags |= DIRECT_REDUCE_SCATTER;
        }
        self
    }

    /// Whether this rank offered the allreduce whose reduce-scatter sends
    /// every chunk to its owner at once (`exec::Whole::direct_reduce_scatter`);
    /// it is taken only where every rank offered it.
    pub(crate) fn offers_direct(&self) -> bool {
        self.flags & DIRECT_REDUCE_SCATTER != 0
    }

    /// Marked as failed (no data follows, in shared memory or otherwise).
    pub(crate) fn failed(mut self, failure: Failure) -> Header {
        self.status = failure.code();
        self.shared = OVER_MPI;
        self.flags &= !SHARED_IN_PIECES;
        self
    }

    /// Where the data is in the sender's shared memory (see
    /// [`in_shared_memory`](Self::in_shared_memory)); `None` where it
    /// travels over MPI. An unknown code is read as shared and new, so
    /// that the receiver's look for its descriptor on the socket refuses
    /// it.
    pub(crate) fn shared_memory(&self) -> Option<SharedMemory> {
        (self.shared != OVER_MPI).then_some(SharedMemory {
            outbox: self.outbox,
            generation: self.generation,
            new: self.shared != SHARED_KNOWN,
        })
    }

    /// The elements of the request.
    pub(crate) fn len(&self) -> usize {
        usize::try_from(self.len).unwrap_or(usize::MAX)
    }

    pub(crate) fn piece_bytes(&self) -> u64 {
        self.piece_bytes
    }

    pub(crate) fn failure_reason(&self) -> Option<&'static str> {
        (self.status != 0).then(|| Failure::reason(self.status))
    }

    /// Whether the header is a receiver's answer that the request did not fit.
    pub(crate) fn is_mismatch(&self) -> bool {
        self.status == Failure::Mismatch.code()
    }

    /// A sender's error where this answer of rank `dest` to `rank`'s
    /// message of `len` elements of `element` refuses it (or is not this
    /// crate's).
    pub(crate) fn refusal(
        &self,
        op: &'static str,
        (rank, dest): (i32, i32),
        (len, element): (usize, ElementType),
    ) -> Result<()> {
        self.check_protocol(op, dest)?;
        let Some(reason) = self.failure_reason() else {
            return Ok(());
        };
        Err(if !self.is_mismatch() {
            Error::RemoteFailure {
                op,
                rank,
                failed: dest,
                reason,
            }
        } else {
            Error::Mismatch {
                op,
                rank,
                detail: format!(
                    "rank {rank} sent {len} elements of {element}, rank {dest} expects {}",
                    self.describe()
                ),
            }
        })
    }

    pub(crate) fn is_kind(&self, kind: Kind) -> bool {
        self.kind == kind.code()
    }

    /// Whether the header is one of this crate's, of this version.
    pub(crate) fn check_protocol(&self, op: &'static str, peer: i32) -> Result<()> {
        if self.magic != MAGIC {
            return Err(Error::Protocol {
                op,
                peer,
                detail: "the message is not a vkcompute-mpi header (another program's \
                         message on this communicator?)"
                    .into(),
            });
        }
        if self.version != VERSION {
            return Err(Error::Protocol {
                op,
                peer,
                detail: format!(
                    "the peer speaks vkcompute-mpi protocol {}, this rank {VERSION}",
                    self.version
                ),
            });
        }
        Ok(())
    }

    /// What the header asks for, in words: `allreduce (sum) of 5 f32`.
    pub(crate) fn describe(&self) -> String {
        if self.is_kind(Kind::Barrier) {
            return "a barrier".into();
        }
        let element = ElementType::from_code(self.element).map_or_else(
            || format!("type #{}", self.element),
            |t| t.name().to_string(),
        );
        let mut text = format!("{} of {} {element}", Kind::name(self.kind), self.len);
        if let Some(op) = ReduceOp::from_code(self.reduce) {
            text.push_str(&format!(" ({op:?})"));
        }
        if self.root >= 0 {
            text.push_str(&format!(" with root {}", self.root));
        }
        text
    }

    /// Whether two ranks' requests describe the same operation: kind,
    /// element type and size, length, reduction and root.
    pub(crate) fn agrees_with(&self, other: &Header) -> bool {
        self.kind == other.kind
            && self.element == other.element
            && self.element_size == other.element_size
            && self.len == other.len
            && self.reduce == other.reduce
            && self.root == other.root
    }

    /// Whether a sender's header fits this receiver's request (element type
    /// and length; `self` is the receiver's).
    pub(crate) fn accepts(&self, sent: &Header) -> bool {
        sent.is_kind(Kind::Send)
            && self.element == sent.element
            && self.element_size == sent.element_size
            && self.len == sent.len
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        bytemuck::bytes_of(self)
    }

    pub(crate) fn from_bytes(bytes: &[u8; HEADER_BYTES]) -> Header {
        bytemuck::pod_read_unaligned(bytes)
    }
}

/// Gathers every rank's header (`mine` from this one) and checks them: a
/// failed rank, a mismatch or a foreign message is an error here, and
/// since every rank sees the same headers, on every rank. `op` names the
/// operation; `rank` is this rank. Returns every rank's header.
pub(crate) fn agree(
    op: &'static str,
    comm: &Comm,
    rank: i32,
    size: i32,
    mine: Header,
) -> Result<Vec<Header>> {
    let mut all = vec![0u8; HEADER_BYTES * size as usize];
    raw::allgather(op, comm, mine.bytes(), &mut all)?;
    let headers: Vec<Header> = all
        .chunks_exact(HEADER_BYTES)
        .map(bytemuck::pod_read_unaligned)
        .collect();
    for (peer, h) in headers.iter().enumerate() {
        h.check_protocol(op, peer as i32)?;
    }
    // A failed rank first: a failure explains any mismatch that follows it.
    if let Some((failed, h)) = headers
        .iter()
        .enumerate()
        .find(|(peer, h)| h.status != 0 && *peer as i32 != rank)
    {
        return Err(Error::RemoteFailure {
            op,
            rank,
            failed: failed as i32,
            reason: Failure::reason(h.status),
        });
    }
    if headers.iter().any(|h| !h.agrees_with(&headers[0])) {
        let detail = headers
            .iter()
            .enumerate()
            .map(|(peer, h)| format!("rank {peer} asked for {}", h.describe()))
            .collect::<Vec<_>>()
            .join("; ");
        return Err(Error::Mismatch { op, rank, detail });
    }
    Ok(headers)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_describes_its_request() {
        let h = Header::new(Kind::Allreduce, ElementType::F32, 5).reduce(ReduceOp::Sum);
        assert_eq!(h.describe(), "allreduce of 5 f32 (Sum)");
        let b = Header::new(Kind::Broadcast, ElementType::U64, 0).root(2);
        assert_eq!(b.describe(), "broadcast of 0 u64 with root 2");
        let barrier = Header::new(Kind::Barrier, ElementType::U8, 0);
        assert_eq!(barrier.describe(), "a barrier");
        assert!(!barrier.agrees_with(&Header::new(Kind::Allreduce, ElementType::U8, 0)));
    }

    #[test]
    fn headers_agree_only_on_the_same_request() {
        let h = Header::new(Kind::Allreduce, ElementType::F32, 5).reduce(ReduceOp::Sum);
        assert!(h.agrees_with(&h));
        assert!(!h
            .agrees_with(&Header::new(Kind::Allreduce, ElementType::F32, 4).reduce(ReduceOp::Sum)));
        assert!(!h
            .agrees_with(&Header::new(Kind::Allreduce, ElementType::I32, 5).reduce(ReduceOp::Sum)));
        assert!(!h
            .agrees_with(&Header::new(Kind::Allreduce, ElementType::F32, 5).reduce(ReduceOp::Max)));
        assert!(
            !h.agrees_with(&Header::new(Kind::Reduce, ElementType::F32, 5).reduce(ReduceOp::Sum))
        );
        assert!(!h.agrees_with(&h.root(1)));
    }

    #[test]
    fn a_receiver_accepts_only_a_send_of_its_type_and_length() {
        let want = Header::new(Kind::Ack, ElementType::U32, 7);
        assert!(want.accepts(&Header::new(Kind::Send, ElementType::U32, 7)));
        assert!(!want.accepts(&Header::new(Kind::Send, ElementType::I32, 7)));
        assert!(!want.accepts(&Header::new(Kind::Send, ElementType::U32, 8)));
        assert!(!want.accepts(&Header::new(Kind::Broadcast, ElementType::U32, 7)));
    }

    #[test]
    fn a_header_survives_the_wire_and_foreign_bytes_are_refused() {
        let h = Header::new(Kind::Send, ElementType::F64, 9).pieces(4096);
        let mut wire = [0u8; HEADER_BYTES];
        wire.copy_from_slice(h.bytes());
        let back = Header::from_bytes(&wire);
        assert!(back.accepts(&h) && back.piece_bytes() == 4096);
        assert_eq!(back.shared_memory(), None);
        let at = |outbox, generation, new| SharedMemory {
            outbox,
            generation,
            new,
        };
        let shared = Header::from_bytes(
            h.in_shared_memory(at(3, 7, true))
                .bytes()
                .try_into()
                .expect("a header's bytes"),
        );
        assert_eq!(shared.shared_memory(), Some(at(3, 7, true)));
        assert_eq!(
            h.in_shared_memory(at(0, 8, false)).shared_memory(),
            Some(at(0, 8, false))
        );
        assert_eq!(
            h.in_shared_memory(at(1, 9, true))
                .failed(Failure::Local)
                .shared_memory(),
            None
        );
        assert!(back.check_protocol("test", 1).is_ok());
        let foreign = Header::from_bytes(&[7u8; HEADER_BYTES]);
        assert!(matches!(
            foreign.check_protocol("test", 1),
            Err(Error::Protocol { peer: 1, .. })
        ));
    }
}
