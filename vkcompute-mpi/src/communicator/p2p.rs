//! Point-to-point messages of the façade: the blocking [`send`] and
//! [`recv`], each the protocol's state machine (`wire::Op`) posted and
//! waited for, over the caller's buffer (`transport::ends`); the
//! non-blocking ones (`request.rs`) are the same machine over memory of
//! their own.
//!
//! [`send`]: Communicator::send
//! [`recv`]: Communicator::recv

use std::mem::size_of;

use super::Communicator;
use crate::element::Element;
use crate::error::Result;
use crate::transport::ends::{Receiving, Sending};
use crate::transport::message::Outgoing;
use crate::transport::place::{Buffer, Place};
use crate::transport::same_node::{Lent, SameNode};
use crate::wire::{Header, Kind, LentOutbox, Op};

impl Communicator {
    /// Sends `buf` (a [`DeviceBuffer`](vkcompute::DeviceBuffer), a view of one, or a
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
    /// [`Error::Mismatch`](crate::Error::Mismatch) on both ranks; a buffer the host maps
    /// ([`DeviceBuffer::is_mapped`](vkcompute::DeviceBuffer::is_mapped)) is vkcompute's
    /// `BufferMapped` here, on every path, and [`Error::RemoteFailure`](crate::Error::RemoteFailure) at the receiver.
    pub fn send<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
        dest: i32,
        tag: i32,
    ) -> Result<()> {
        let op = "Communicator::send";
        self.check_peer(op, dest, tag)?;
        let len = buf.elements();
        let piece = self.piece_elements::<T>();
        let header = Header::new(Kind::Send, T::TYPE, len).pieces(piece * size_of::<T>());
        let none = || Sending::new(None, &self.pool);
        let shared =
            (buf.place().unmapped(op)).and_then(|()| self.stage_shared(op, buf.place(), len, dest));
        let (header, ready) = match shared {
            Ok(Some(lent)) => {
                let header = header.in_shared_memory(lent.shared());
                let lent: Box<dyn LentOutbox> = Box::new(lent);
                (header, Ok((none(), Some(lent))))
            }
            Ok(None) => {
                let memory = (&*self.pool, self.maps_directly);
                let prepared = Outgoing::prepare(memory, op, buf.place(), piece);
                let ready = prepared.map(|out| (Sending::new(Some(out), &self.pool), None));
                (header, ready)
            }
            Err(e) => (header, Err(e)),
        };
        let end = self.wire_end();
        Op::<T, _>::sending(op, end, (dest, tag), header, ready, none()).run()
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

    /// Receives into `buf` (a [`DeviceBuffer`](vkcompute::DeviceBuffer), a view of one, or a
    /// [`HostBuffer`](vkcompute::HostBuffer)) a message of `buf`'s element type and length that
    /// rank `source` sends with `tag`. A device buffer gets the data in its
    /// mapping where it maps directly
    /// ([`maps_device_memory`](Self::maps_device_memory); the mapping waits
    /// for the work enqueued on it before), else by ordinary copies enqueued
    /// on its stream, in pieces as they arrive; either way later work on it
    /// sees the message.
    ///
    /// Errors: a message of another type or length is
    /// [`Error::Mismatch`](crate::Error::Mismatch) here and at the sender (nothing is written); a
    /// sender that failed before sending is [`Error::RemoteFailure`](crate::Error::RemoteFailure); a
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
        let len = buf.elements();
        let body = Receiving::new(buf.place(), len, (&*self.pool, self.maps_directly));
        Op::<T, _>::receiving(op, self.wire_end(), (source, tag), len, body).run()
    }

    /// The elements of `T` in one piece of a message.
    pub(crate) fn piece_elements<T>(&self) -> usize {
        (self.piece_bytes() / size_of::<T>()).max(1)
    }
}
