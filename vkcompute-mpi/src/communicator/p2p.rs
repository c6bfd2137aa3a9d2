//! Point-to-point messages of the façade: the blocking [`send`] and
//! [`recv`] (the non-blocking ones are in `request.rs`), over the same
//! protocol (`wire::op`): a header, the receiver's answer, then the data in
//! pieces and a trailer over MPI, or the data in the sender's exported
//! memory on the same-node transport.
//!
//! [`send`]: Communicator::send
//! [`recv`]: Communicator::recv

use std::mem::size_of;

use vkcompute::DeviceBuffer;

use super::Communicator;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw;
use crate::transport::message::{Incoming, Outgoing};
use crate::transport::place::{Buffer, Place};
use crate::transport::same_node::{Lent, SameNode};
use crate::wire::{Failure, Header, Kind, ACK_TAGS, DATA_TAGS, HEADER_BYTES, TRAILER_BYTES};

impl Communicator {
    /// Sends `buf` (a [`DeviceBuffer`], a view of one, or a
    /// [`HostBuffer`](vkcompute::HostBuffer)) to rank `dest` with `tag` (0 to [`MAX_TAG`](crate::MAX_TAG)), for a
    /// [`recv`](Self::recv) of the same element type and length there.
    ///
    /// Returns once the receiver has taken the data (like `MPI_Ssend`: the
    /// two ranks first exchange a header and an answer). A device buffer is
    /// read once the work enqueued on it is done, in pieces of
    /// [`piece_bytes`](Self::piece_bytes): from its mapping where it maps
    /// directly ([`maps_device_memory`](Self::maps_device_memory)), else
    /// through pinned host memory, the copy of each piece overlapping the
    /// transfer of the one before. To a peer on the same-node path
    /// ([`path_to`](Self::path_to) is [`Path::SameNode`](crate::Path::SameNode)), a non-empty
    /// buffer is copied on the device into memory exported to the peer
    /// (over MPI where all the memory kept for the peer holds `isend`s
    /// under way), and the receiver copies it out on its device before it
    /// answers.
    ///
    /// Errors: a receiver that expects another type or length makes
    /// [`Error::Mismatch`] on both ranks; a mapped buffer is vkcompute's
    /// `BufferMapped` here and [`Error::RemoteFailure`] at the receiver.
    pub fn send<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
        dest: i32,
        tag: i32,
    ) -> Result<()> {
        let op = "Communicator::send";
        self.check_peer(op, dest, tag)?;
        let comm = self.raw();
        let len = buf.elements();
        let header = Header::new(Kind::Send, T::TYPE, len)
            .pieces(self.piece_elements::<T>() * size_of::<T>());
        let staged = self.stage_shared(op, buf.place(), len, dest);
        if let Some(lent) = self.prepared_or_told(op, staged, header, (dest, tag))? {
            return self.send_shared::<T>(op, lent, (dest, tag), header);
        }
        let prepared = Outgoing::prepare(
            (&self.pool, self.maps_directly),
            op,
            buf.place(),
            self.piece_elements::<T>(),
        );
        let outgoing = self.prepared_or_told(op, prepared, header, (dest, tag))?;
        // The data goes out after that of every earlier message to `dest`
        // with `tag` (`raw::Ticket`), as their headers did.
        let ticket = comm.state.ticket((true, dest, tag));
        raw::send(op, comm, header.bytes(), dest, tag)?;
        let mut answer = [0u8; HEADER_BYTES];
        raw::recv(op, comm, &mut answer, dest, ACK_TAGS + tag)?;
        let turn = self
            .refusal::<T>(op, dest, len, &answer)
            .and_then(|()| raw::wait_turn(op, comm, &ticket));
        if let Err(e) = turn {
            outgoing.finish(&self.pool);
            return Err(e);
        }
        let sent = outgoing.send_all(op, comm, dest, DATA_TAGS + tag);
        let status = match &sent {
            Ok(None) => 0u64,
            Ok(Some(e)) if e.is_mapped_buffer() => 1,
            Ok(Some(_)) => 2,
            Err(_) => 0,
        };
        outgoing.finish(&self.pool);
        let local = sent?;
        raw::send(op, comm, &status.to_le_bytes(), dest, DATA_TAGS + tag)?;
        match local {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// `prepared`, or, where the sender's preparation failed, its error
    /// once `header` marked failed has gone to `dest` (the receiver then
    /// answers nothing, and no data follows).
    fn prepared_or_told<P>(
        &self,
        op: &'static str,
        prepared: Result<P>,
        header: Header,
        (dest, tag): (i32, i32),
    ) -> Result<P> {
        prepared.or_else(|e| {
            raw::send(
                op,
                self.raw(),
                header.failed(Failure::of(&e)).bytes(),
                dest,
                tag,
            )?;
            Err(e)
        })
    }

    /// The sender's error where the receiver's `answer` to a message of
    /// `len` elements of `T` refuses it (or is not this crate's).
    fn refusal<T: Element>(
        &self,
        op: &'static str,
        dest: i32,
        len: usize,
        answer: &[u8; HEADER_BYTES],
    ) -> Result<()> {
        Header::from_bytes(answer).refusal(op, (self.rank, dest), (len, T::TYPE))
    }

    /// The `len` elements of `place` copied on the device into an outbox
    /// exported to `dest` (the device waited for), its descriptor sent
    /// where new, where `dest` is on the same-node path and the message is
    /// not empty; `None` where the message travels over MPI (another path,
    /// an empty message, or every outbox for `dest` lent to messages under
    /// way). An error: nothing went out but a descriptor; the caller sends
    /// a failed header.
    pub(crate) fn stage_shared<T: Element>(
        &self,
        op: &'static str,
        place: Place<'_, T>,
        len: usize,
        dest: i32,
    ) -> Result<Option<Lent>> {
        if len == 0 || !self.same_node.is_peer(dest) {
            return Ok(None);
        }
        // A communicator that a timeout broke may have left the peer
        // copying out of memory (its outboxes given up are not lent again,
        // but nothing is written after a timeout at all).
        self.raw().state.usable(op)?;
        SameNode::stage_out(&self.same_node, op, place, len, dest)
    }

    /// [`send`](Self::send) over the same-node path: the data is in the
    /// outbox `lent` (the device waited for) before the header goes out,
    /// and the receiver's answer says that it has copied the data out (or
    /// refuses the message); the outbox goes back with the answer (and is
    /// given up without one: an MPI error).
    fn send_shared<T: Element>(
        &self,
        op: &'static str,
        lent: Lent,
        (dest, tag): (i32, i32),
        header: Header,
    ) -> Result<()> {
        let comm = self.raw();
        let header = header.in_shared_memory(lent.shared());
        raw::send(op, comm, header.bytes(), dest, tag)?;
        let mut answer = [0u8; HEADER_BYTES];
        raw::recv(op, comm, &mut answer, dest, ACK_TAGS + tag)?;
        let refused = self.refusal::<T>(op, dest, header.len(), &answer);
        lent.answered(refused.is_err());
        refused
    }

    /// [`recv`](Self::recv) of a message in `source`'s shared memory
    /// (`inbox`, or why it could not be had): copies it into `place`,
    /// waits for the device and answers (`wanted`, or failed), so the
    /// sender may reuse its memory. A destination that cannot be written
    /// (mapped) is this rank's error only: the message was taken, as over
    /// MPI.
    fn recv_shared<T: Element>(
        &self,
        op: &'static str,
        place: Place<'_, T>,
        (source, tag): (i32, i32),
        inbox: Result<DeviceBuffer<u8>>,
        wanted: Header,
    ) -> Result<()> {
        let len = wanted.len();
        let taken = inbox.and_then(|inbox| {
            (self.same_node).take::<T>(op, source, &inbox, len, |part| place.copy_from(part))
        });
        let answer = match &taken {
            Ok(_) => wanted,
            Err(e) => wanted.failed(Failure::of(e)),
        };
        raw::send(op, self.raw(), answer.bytes(), source, ACK_TAGS + tag)?;
        match taken? {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }

    /// Receives into `buf` (a [`DeviceBuffer`], a view of one, or a
    /// [`HostBuffer`](vkcompute::HostBuffer)) a message of `buf`'s element type and length that
    /// rank `source` sends with `tag`. A device buffer gets the data in its
    /// mapping where it maps directly
    /// ([`maps_device_memory`](Self::maps_device_memory); the mapping waits
    /// for the work enqueued on it before), else by ordinary copies enqueued
    /// on its stream, in pieces as they arrive; either way later work on it
    /// sees the message.
    ///
    /// Errors: a message of another type or length is
    /// [`Error::Mismatch`] here and at the sender (nothing is written); a
    /// sender that failed before sending is [`Error::RemoteFailure`]; a
    /// buffer mapped to the host is vkcompute's `BufferMapped` (the message
    /// is still taken off the wire, so the sender does not hang).
    pub fn recv<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
        source: i32,
        tag: i32,
    ) -> Result<()> {
        let op = "Communicator::recv";
        self.check_peer(op, source, tag)?;
        let comm = self.raw();
        let len = buf.elements();
        // The answer, and the receives of the data, go after those of
        // every earlier receive from `source` with `tag`
        // (`raw::Ticket`), whose headers MPI matched first.
        let ticket = comm.state.ticket((false, source, tag));
        let mut wire = [0u8; HEADER_BYTES];
        raw::recv(op, comm, &mut wire, source, tag)?;
        let sent = Header::from_bytes(&wire);
        sent.check_protocol(op, source)?;
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
        raw::wait_turn(op, comm, &ticket)?;
        let size = size_of::<T>() as u64;
        let piece_ok = sent.piece_bytes() > 0 && sent.piece_bytes() % size == 0;
        if !wanted.accepts(&sent) || !piece_ok {
            raw::send(
                op,
                comm,
                wanted.failed(Failure::Mismatch).bytes(),
                source,
                ACK_TAGS + tag,
            )?;
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
            return self.recv_shared(op, buf.place(), (source, tag), inbox, wanted);
        }
        let piece = (sent.piece_bytes() / size) as usize;
        let mut incoming =
            match Incoming::prepare((&self.pool, self.maps_directly), op, buf.place(), piece) {
                Ok(incoming) => incoming,
                Err(e) => {
                    raw::send(
                        op,
                        comm,
                        wanted.failed(Failure::of(&e)).bytes(),
                        source,
                        ACK_TAGS + tag,
                    )?;
                    return Err(e);
                }
            };
        raw::send(op, comm, wanted.bytes(), source, ACK_TAGS + tag)?;
        let received = incoming.recv_all(op, comm, source, DATA_TAGS + tag);
        incoming.finish(&self.pool);
        let local = received?;
        let mut trailer = [0u8; TRAILER_BYTES];
        raw::recv(op, comm, &mut trailer, source, DATA_TAGS + tag)?;
        if let Some(e) = local {
            return Err(e);
        }
        match u64::from_le_bytes(trailer) {
            0 => Ok(()),
            code => Err(Error::RemoteFailure {
                op,
                rank: self.rank,
                failed: source,
                reason: if code == 1 {
                    "its buffer was mapped while the message was under way; the data here is incomplete"
                } else {
                    "it could not read its buffer while the message was under way; the data here is incomplete"
                },
            }),
        }
    }

    /// The elements of `T` in one piece of a message.
    pub(crate) fn piece_elements<T>(&self) -> usize {
        (self.piece_bytes() / size_of::<T>()).max(1)
    }
}
