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
use crate::wire::{Header, Kind, LentOutbox, Op, MAX_NOTES};

/// The most pieces a blocking `send` writes a message to a peer on the
/// same-node path in (`Header::notes`; at most `MAX_NOTES`). Each piece
/// is at most two batches of the communicator's stream (its copy, where
/// the buffer is on that stream, then its release and the event after
/// it), and the pieces are enqueued at once, so that they stay within the
/// batches a stream keeps in flight (16) and the header goes out before
/// the first piece is through (where the stream was idle).
const NOTED_PIECES: usize = 6;
const _: () = assert!(NOTED_PIECES as u64 <= MAX_NOTES);

/// The elements of `T` in each piece a message of `len` is written in
/// ([`NOTED_PIECES`] at most, at least `piece`), a multiple of 256 bytes
/// so that a piece the sender writes and one the receiver reads share no
/// cache line.
fn noted_piece<T>(piece: usize, len: usize) -> usize {
    let size = size_of::<T>();
    let bytes = piece.max(len.div_ceil(NOTED_PIECES)) * size;
    bytes.next_multiple_of(256) / size
}

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
    /// answers; a message of more than one piece in pieces, the receiver
    /// copying out each as soon as it is written (where every earlier
    /// message to `dest` with `tag` has its answer and has sent its data).
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
        // Through shared memory, a message of several pieces is written in
        // pieces that the receiver copies out as they are written, where
        // no earlier end of `dest` and `tag` holds or waits for its turn
        // (its answer is in and its data posted): the notes then go out as
        // the device writes the pieces, waiting for nothing else (a send
        // behind an `isend` would wait for that one's answer, and its
        // receiver for its notes meanwhile).
        let clear = self.raw().state.is_clear((true, dest, tag));
        let noted = (len > piece && clear).then(|| noted_piece::<T>(piece, len));
        let shared = (buf.place().unmapped(op))
            .and_then(|()| self.stage_shared(op, (buf.place(), len), dest, noted));
        let (header, ready) = match shared {
            Ok(Some(lent)) => {
                let header = match noted {
                    Some(noted) => header.pieces(noted * size_of::<T>()).noted(),
                    None => header,
                };
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
    /// exported to `dest` (the device waited for; with `piece`, copied in
    /// pieces of that many elements and not waited for:
    /// `SameNode::stage_out`), its descriptor sent where new, where `dest`
    /// is on the same-node path and the message is not empty; `None` where
    /// the message travels over MPI (another path, an empty message, or
    /// every outbox for `dest` lent to messages under way). An error:
    /// nothing went out but a descriptor; the caller sends a failed header.
    pub(crate) fn stage_shared<T: Element>(
        &self,
        op: &'static str,
        (place, len): (Place<'_, T>, usize),
        dest: i32,
        piece: Option<usize>,
    ) -> Result<Option<Lent>> {
        if len == 0 || !self.same_node.is_peer(dest) {
            return Ok(None);
        }
        // A communicator that a timeout broke may have left the peer
        // copying out of memory (its outboxes given up are not lent again,
        // but nothing is written after a timeout at all).
        self.raw().state.usable(op)?;
        SameNode::stage_out(&self.same_node, op, (place, len), dest, piece)
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
    /// sender that failed before sending is [`Error::RemoteFailure`](crate::Error::RemoteFailure),
    /// and so is one whose buffer could not be read while the message was
    /// under way (the pieces before may be written here); a
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
        let body = Receiving::new(buf.place(), (&*self.pool, self.maps_directly));
        Op::<T, _>::receiving(op, self.wire_end(), (source, tag), len, body).run()
    }

    /// The elements of `T` in one piece of a message.
    pub(crate) fn piece_elements<T>(&self) -> usize {
        (self.piece_bytes() / size_of::<T>()).max(1)
    }
}
