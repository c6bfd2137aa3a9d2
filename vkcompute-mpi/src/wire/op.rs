//! One non-blocking message end as a state machine ([`Op`]), and the
//! [`Step`] trait through which the progress engine of `request.rs` moves
//! it on: header, answer, data pieces and trailer, each posted with
//! `MPI_Isend`/`MPI_Irecv` over memory the operation owns and lends to
//! MPI (`raw::Held`).
use std::mem::size_of;
use std::sync::Arc;

use vkcompute::{DeviceBuffer, HostBuffer};

use super::header::{Failure, Header, Kind, HEADER_BYTES};
use super::{LentOutbox, SharedMessages, ACK_TAGS, DATA_TAGS, TRAILER_BYTES};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw::{Comm, Held, Pollable, Ticket};

/// Which end of a message an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Send,
    Recv,
}

/// How far an operation has got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Phase {
    /// A sender's header is out and its answer awaited; a receiver awaits
    /// the header.
    Header,
    /// The data (and answer, trailer) are under way, or a refusal or a
    /// failure is going out.
    Data,
    /// Nothing of this operation is under way in MPI any more.
    Over,
}

/// A pending operation, as its request sees it (the progress engine sees
/// it as [`Pollable`]).
pub(crate) trait Step: Pollable {
    /// The result, once over; a receive's data lands here (first call).
    fn finish(&mut self) -> Result<()>;
    /// For a request dropped unfinished: cancels what can be cancelled.
    fn abandon(&mut self);
}

/// Where a receive's elements go once they are all here.
pub(crate) enum Dest<T> {
    Device(DeviceBuffer<T>),
    Host(HostBuffer<T>),
}

/// One non-blocking message end and everything MPI reads or writes for it,
/// each buffer lent to MPI while transfers over it are under way
/// (`raw::Held`, which leaks it if the op is dropped meanwhile).
pub(crate) struct Op<T: Element> {
    pub(crate) op: &'static str,
    pub(crate) comm: Comm,
    /// The communicator's same-node path, for a message in shared memory.
    pub(crate) same_node: Arc<dyn SharedMessages>,
    pub(crate) rank: i32,
    pub(crate) peer: i32,
    pub(crate) tag: i32,
    pub(crate) side: Side,
    pub(crate) phase: Phase,
    /// The header this rank sends: a sender's request, a receiver's answer.
    pub(crate) out_header: Held<Box<[u8; HEADER_BYTES]>>,
    /// The header this rank receives: a sender's answer, a receiver's request.
    pub(crate) in_header: Held<Box<[u8; HEADER_BYTES]>>,
    /// A sender's status after the data (always 0: the data is staged
    /// before the header goes out), or what a receiver got.
    pub(crate) trailer: Held<Box<[u8; TRAILER_BYTES]>>,
    /// A sender's copy of its buffer (empty where the data is in `lent`),
    /// or where a receiver's data arrives.
    pub(crate) data: Held<Vec<T>>,
    /// The data's length in elements.
    pub(crate) len: usize,
    /// A sender's outbox on the same-node path, which holds the data,
    /// lent to this message until the receiver answers.
    pub(crate) lent: Option<Box<dyn LentOutbox>>,
    /// A sender's piece size in bytes.
    pub(crate) piece_bytes: usize,
    /// A receiver's destination (a clone of the handle: it stays alive).
    pub(crate) dest: Option<Dest<T>>,
    /// Its place in the matching order of its peer and tag, until it
    /// has taken the step after its header (`raw::Ticket`).
    pub(crate) ticket: Option<Ticket>,
    /// The error the operation ends with once nothing is under way.
    pub(crate) error: Option<Error>,
    /// The result once over.
    pub(crate) result: Option<Result<()>>,
    /// Whether `finish` ran (a receive's data landed, or will not).
    pub(crate) finished: bool,
}

impl<T: Element> Op<T> {
    pub(crate) fn new(
        op: &'static str,
        (comm, rank, same_node): (Comm, i32, Arc<dyn SharedMessages>),
        side: Side,
        peer: i32,
        tag: i32,
        data: Vec<T>,
    ) -> Self {
        Op {
            op,
            comm,
            same_node,
            rank,
            peer,
            tag,
            side,
            phase: Phase::Header,
            out_header: Held::new(Box::new([0; HEADER_BYTES])),
            in_header: Held::new(Box::new([0; HEADER_BYTES])),
            trailer: Held::new(Box::new([0; TRAILER_BYTES])),
            len: data.len(),
            data: Held::new(data),
            lent: None,
            piece_bytes: 1,
            dest: None,
            ticket: None,
            error: None,
            result: None,
            finished: false,
        }
    }

    pub(crate) fn set_out_header(&mut self, header: Header) {
        if let Some(out) = self.out_header.get_mut() {
            out.copy_from_slice(header.bytes());
        }
    }

    /// `Ok` where a buffer was lent to MPI, else the error of a buffer
    /// still in use (which the phases rule out).
    fn lent(&self, posted: Result<bool>) -> Result<()> {
        match posted? {
            true => Ok(()),
            false => Err(Error::Protocol {
                op: self.op,
                peer: self.peer,
                detail: "a message buffer posted twice".into(),
            }),
        }
    }

    /// Posts the send of `out_header` with `tag`.
    pub(crate) fn post_out_header(&mut self, tag: i32) -> Result<()> {
        let (op, comm) = (self.op, self.comm.clone());
        let posted =
            (self.out_header).send((op, &comm), (0..HEADER_BYTES, HEADER_BYTES), self.peer, tag);
        self.lent(posted)
    }

    /// Posts the receive of `in_header` with `tag`.
    pub(crate) fn post_in_header(&mut self, tag: i32) -> Result<()> {
        let (op, comm) = (self.op, self.comm.clone());
        let posted =
            (self.in_header).recv((op, &comm), (0..HEADER_BYTES, HEADER_BYTES), self.peer, tag);
        self.lent(posted)
    }

    /// The header received, once in.
    fn received_header(&self) -> Header {
        self.in_header.get().map_or_else(
            || Header::from_bytes(&[0; HEADER_BYTES]),
            |h| Header::from_bytes(h),
        )
    }

    /// Ends the operation with `result`.
    pub(crate) fn end(&mut self, result: Result<()>) {
        self.phase = Phase::Over;
        self.ticket = None;
        self.result = Some(result);
    }

    /// The step after the transfers of the current phase completed: the
    /// next phase, or `None` when the operation is done.
    pub(crate) fn next(&mut self) -> Result<Option<Phase>> {
        match (self.side, self.phase) {
            (Side::Send, Phase::Header) => self.answered().map(Some),
            (Side::Recv, Phase::Header) => self.headed().map(Some),
            (Side::Send, _) => Ok(None),
            (Side::Recv, _) => self.trailed().map(|()| None),
        }
    }

    /// A sender got its answer: the data and the trailer go out; where
    /// the data is in an outbox on the same-node path, the receiver has
    /// copied it out (or refused it) and nothing more goes out: the
    /// outbox goes back.
    pub(crate) fn answered(&mut self) -> Result<Phase> {
        let (op, dest) = (self.op, self.peer);
        let answer = self.received_header();
        let len = self.len;
        let refused = answer.refusal(op, (self.rank, dest), (len, T::TYPE));
        if let Some(lent) = self.lent.take() {
            lent.answered(refused.is_err());
            return refused.map(|()| Phase::Data);
        }
        refused?;
        let comm = self.comm.clone();
        let bytes = len * size_of::<T>();
        let piece = self.piece_bytes.max(1);
        let tag = DATA_TAGS + self.tag;
        let posted = self.data.send((op, &comm), (0..bytes, piece), dest, tag);
        self.lent(posted)?;
        // The trailer is all zeros (no failure): the data was copied before
        // the header went out.
        let posted = (self.trailer).send((op, &comm), (0..TRAILER_BYTES, TRAILER_BYTES), dest, tag);
        self.lent(posted)?;
        Ok(Phase::Data)
    }

    /// A receiver got the header: it answers, and if it accepted, the
    /// pieces and the trailer are received (into `data`, not yet into the
    /// destination).
    pub(crate) fn headed(&mut self) -> Result<Phase> {
        let (op, source) = (self.op, self.peer);
        let sent = self.received_header();
        sent.check_protocol(op, source)?;
        let len = self.len;
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
        let size = size_of::<T>() as u64;
        let piece_ok = sent.piece_bytes() > 0 && sent.piece_bytes() % size == 0;
        if !wanted.accepts(&sent) || !piece_ok {
            self.set_out_header(wanted.failed(Failure::Mismatch));
            self.post_out_header(ACK_TAGS + self.tag)?;
            // Ends with this once the answer is out.
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
            return self.take_shared(inbox, wanted);
        }
        self.set_out_header(wanted);
        self.post_out_header(ACK_TAGS + self.tag)?;
        let piece = usize::try_from(sent.piece_bytes()).unwrap_or(usize::MAX);
        let comm = self.comm.clone();
        let tag = DATA_TAGS + self.tag;
        let bytes = len * size_of::<T>();
        let posted = self.data.recv((op, &comm), (0..bytes, piece), source, tag);
        self.lent(posted)?;
        let posted =
            (self.trailer).recv((op, &comm), (0..TRAILER_BYTES, TRAILER_BYTES), source, tag);
        self.lent(posted)?;
        Ok(Phase::Data)
    }

    /// A receiver of a message in the sender's shared memory (`inbox`, or
    /// why it could not be had): copies it out into `data` now, waiting
    /// for the device (it lands in the destination at `finish`, as a
    /// message over MPI does), and answers (`wanted`, or failed), which
    /// frees the sender's memory. Nothing else comes over MPI: the trailer
    /// stays zero.
    fn take_shared(&mut self, inbox: Result<DeviceBuffer<u8>>, wanted: Header) -> Result<Phase> {
        let (op, source, len) = (self.op, self.peer, self.len);
        let (same_node, mut data) = (&self.same_node, self.data.get_mut());
        let taken = inbox.and_then(|inbox| {
            let mut write = || match data.as_deref_mut() {
                Some(data) if len > 0 => inbox.create_sub_buffer::<T>(0, len)?.copy_to_slice(data),
                _ => Ok(()),
            };
            same_node.take_bytes(op, (source, &inbox, len * size_of::<T>()), &mut write)
        });
        let answer = match &taken {
            Ok(_) => wanted,
            Err(e) => wanted.failed(Failure::of(e)),
        };
        self.set_out_header(answer);
        self.post_out_header(ACK_TAGS + self.tag)?;
        match taken? {
            Some(e) => Err(e),
            None => Ok(Phase::Data),
        }
    }

    /// A receiver got the trailer: the sender's word on its data.
    pub(crate) fn trailed(&mut self) -> Result<()> {
        let trailer = self.trailer.get().map_or(0, |t| u64::from_le_bytes(**t));
        match trailer {
            0 => Ok(()),
            code => Err(Error::RemoteFailure {
                op: self.op,
                rank: self.rank,
                failed: self.peer,
                reason: if code == 1 {
                    "its buffer was mapped while the message was under way; nothing was written here"
                } else {
                    "it could not read its buffer while the message was under way; nothing was written here"
                },
            }),
        }
    }

    /// Copies a received message to its destination: an ordinary copy
    /// enqueued on a device buffer's stream (later work on it sees the
    /// message), or a host write.
    pub(crate) fn land(&mut self) -> Result<()> {
        let op = self.op;
        let data = match self.data.get() {
            Some(data) if !data.is_empty() => data,
            _ => return Ok(()),
        };
        match &self.dest {
            Some(Dest::Device(buf)) => buf
                .enqueue_copy_from(&data[..])
                .and_then(|()| buf.context().flush())
                .map_err(Error::device(op)),
            Some(Dest::Host(host)) => host
                .as_mut_slice()
                .map(|mut slice| slice.copy_from_slice(data))
                .map_err(Error::device(op)),
            None => Ok(()),
        }
    }
}

impl<T: Element> Pollable for Op<T> {
    fn advance(&mut self) {
        while self.phase != Phase::Over {
            let (op, mut error) = (self.op, None);
            let mut idle = self.out_header.poll(op, &mut error);
            idle &= self.in_header.poll(op, &mut error);
            idle &= self.trailer.poll(op, &mut error);
            idle &= self.data.poll(op, &mut error);
            if let Some(e) = error {
                self.error.get_or_insert(e);
            }
            if !idle {
                return;
            }
            if let Some(e) = self.error.take() {
                self.end(Err(e));
                return;
            }
            // The step after the header waits for the earlier ends of
            // this peer and tag to take theirs.
            let ordered = self.phase == Phase::Header;
            if ordered && self.ticket.as_ref().is_some_and(|t| !t.has_turn()) {
                return;
            }
            let next = self.next();
            if ordered {
                self.ticket = None;
            }
            match next {
                Ok(Some(phase)) => self.phase = phase,
                Ok(None) => self.end(Ok(())),
                // Ends with it once whatever was posted (a refusal, say)
                // is through.
                Err(e) => {
                    self.phase = Phase::Data;
                    self.error = Some(e);
                }
            }
        }
    }

    fn is_over(&self) -> bool {
        self.phase == Phase::Over
    }
}

impl<T: Element> Step for Op<T> {
    fn finish(&mut self) -> Result<()> {
        if !self.finished {
            self.finished = true;
            let mut result = self.result.take().unwrap_or(Ok(()));
            if result.is_ok() && self.side == Side::Recv {
                result = self.land();
            }
            self.data = Held::new(Vec::new());
            self.result = Some(result);
        }
        self.result.clone().unwrap_or(Ok(()))
    }

    fn abandon(&mut self) {
        // The data of a dropped receive never lands.
        self.finished = true;
        let waiting_for_header = self.side == Side::Recv
            && self.phase == Phase::Header
            && self.error.is_none()
            && self.in_header.is_lent();
        if !waiting_for_header {
            return;
        }
        match self.in_header.cancel_receive(self.op) {
            // Nothing was received: the message, if one comes, is left
            // for a later receive.
            Ok(true) => self.end(Ok(())),
            // The header arrived meanwhile: the message is taken off the
            // wire as usual (the sender does not hang) and discarded.
            Ok(false) => {}
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }
}
