//! Non-blocking point to point: [`Communicator::isend`] and
//! [`Communicator::irecv`], the [`Request`] each returns, and the progress
//! engine that moves every pending request of a communicator on whenever
//! any of them is tested or waited for.
//!
//! The messages follow the blocking protocol exactly (header, answer, data
//! pieces, trailer; see `communicator.rs`), so an `isend` pairs with a
//! `recv` and a `send` with an `irecv`, and a mismatch is an error on both
//! ranks whichever calls they made. Each message end is an `Op`
//! (`message_op.rs`).

use std::mem::size_of;
use std::sync::{Arc, Mutex, PoisonError};

use crate::communicator::Communicator;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw::PendingOp;
use crate::transport::message::stage_request;
use crate::transport::place::{Buffer, Place};
use crate::wire::{
    Dest, End, Header, Kind, LentOutbox, Op, Owned, PinnedBuffers, SharedMessages, Step,
};

/// A non-blocking send or receive under way, from
/// [`Communicator::isend`] or [`Communicator::irecv`]. It owns everything
/// MPI reads or writes for the message (the header, the answer, the
/// trailer, and the elements in pinned host memory from the
/// communicator's staging pool) and, for a receive, a clone of
/// the destination's handle, so the buffer stays alive while it is pending.
///
/// [`test`](Self::test) and [`wait`](Self::wait) move on every pending
/// request of the communicator, not only their own, so requests complete
/// whatever order they are waited for in. Every MPI wait of the
/// communicator moves them on too: a blocking call such as
/// [`Communicator::recv`] polls while requests are under way, so one whose
/// peer first needs a pending request of this rank completes.
///
/// **Drop.** Dropping an unfinished request finishes it first, so that MPI
/// never writes into freed memory. A receive whose header MPI has not
/// matched yet is cancelled (`MPI_Cancel`, then `MPI_Wait`), and its
/// message is left for a later receive. MPI matches only inside its
/// calls (this crate's tests and waits, and every call of the
/// communicator), so a message its peer sent long before may still be
/// unmatched when a request is dropped without a `test`. A receive whose
/// header was matched is answered as [`wait`](Self::wait) would answer
/// it: its data is taken off the wire and discarded (its destination is
/// never written), and the sender's call returns `Ok`, or
/// [`Error::Mismatch`] where the message does not fit the receive. Any
/// other request is waited for, which needs its peer's matching call as
/// `wait` does. With a timeout set, a drop that waits longer leaks the
/// request's memory to MPI instead and marks the communicator broken,
/// like [`wait`](Self::wait). A request outlives neither its communicator
/// nor the thread it was made on (it borrows the communicator).
#[must_use = "a request finishes in `wait` or `test` (dropping it waits too)"]
pub struct Request<'c> {
    comm: &'c Communicator,
    op: Arc<Mutex<dyn Step + Send>>,
}

impl Request<'_> {
    /// Moves every pending request of the communicator on, without
    /// blocking; `Ok(true)` once this one is complete (for a receive: its
    /// data is in the destination, by a copy enqueued on a device buffer's
    /// stream, so later work on it sees the message). Once complete, every
    /// later call returns the same result.
    pub fn test(&mut self) -> Result<bool> {
        self.comm.progress();
        let mut op = self.op.lock().unwrap_or_else(PoisonError::into_inner);
        if !op.is_over() {
            return Ok(false);
        }
        op.finish().map(|()| true)
    }

    /// Waits until the request is complete (moving every pending request of
    /// the communicator on meanwhile), and returns its result. A receive's
    /// data is copied to its destination here (or in the `test` that
    /// returned `true`): later work on a device buffer sees it.
    ///
    /// With a timeout set ([`Communicator::set_timeout`]), a request not
    /// complete within it is [`Error::Timeout`]: it is then left to MPI
    /// with the memory it owns (leaked, so MPI never touches freed
    /// memory), and the communicator takes no more operations.
    pub fn wait(self) -> Result<()> {
        let start = std::time::Instant::now();
        loop {
            self.comm.progress();
            {
                let mut op = self.op.lock().unwrap_or_else(PoisonError::into_inner);
                if op.is_over() {
                    return op.finish();
                }
            }
            if let Some(e) = self.timed_out("Request::wait", start) {
                return Err(e);
            }
            std::thread::yield_now();
        }
    }

    /// Past the communicator's timeout (counted from `start`), or once
    /// another wait passed it: leaks the operation, which MPI may still
    /// use, and returns the error.
    fn timed_out(&self, op: &'static str, start: std::time::Instant) -> Option<Error> {
        let state = &self.comm.raw().state;
        let error = match state.timeout() {
            Some(after) if start.elapsed() >= after => state.timed_out(op, "MPI_Test", after),
            _ => state.usable(op).err()?,
        };
        std::mem::forget(Arc::clone(&self.op));
        Some(error)
    }
}

impl Drop for Request<'_> {
    /// Cancels a receive still waiting for its header, and waits for
    /// anything else under way (see the type's documentation): MPI never
    /// writes into memory freed here.
    fn drop(&mut self) {
        if let Ok(mut op) = self.op.try_lock() {
            if op.is_over() {
                return;
            }
            op.abandon();
        }
        let start = std::time::Instant::now();
        loop {
            self.comm.progress();
            if self.op.try_lock().is_ok_and(|op| op.is_over()) {
                return;
            }
            if self.timed_out("Request::drop", start).is_some() {
                return;
            }
            std::thread::yield_now();
        }
    }
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let over = self.op.try_lock().map(|op| op.is_over());
        f.debug_struct("Request")
            .field("rank", &self.comm.rank())
            .field("over", &over.ok())
            .finish()
    }
}

impl Communicator {
    /// Moves every pending request on as far as it goes without blocking.
    pub(crate) fn progress(&self) {
        self.raw().state.progress();
    }

    /// Where requests' pinned memory comes from: the staging pool.
    fn pinned(&self) -> Arc<dyn PinnedBuffers> {
        self.pool.clone()
    }

    /// What a message end of this communicator needs: the MPI
    /// communicator, this rank, and the same-node transport.
    pub(super) fn wire_end(&self) -> End {
        let same_node: Arc<dyn SharedMessages> = self.same_node.clone();
        (self.raw().clone(), self.rank(), same_node)
    }

    fn register<T: Element>(&self, op: Op<T, Owned<T>>) -> Request<'_> {
        let op = Arc::new(Mutex::new(op));
        let pending: PendingOp = Arc::downgrade(&op) as PendingOp;
        self.raw().state.register(pending);
        Request { comm: self, op }
    }

    /// Starts sending `buf` (a [`DeviceBuffer`](vkcompute::DeviceBuffer), a view of one, or a
    /// [`HostBuffer`](vkcompute::HostBuffer)) to rank `dest` with `tag` (0 to
    /// [`MAX_TAG`](crate::MAX_TAG)), for a receive of the same element type
    /// and length there ([`recv`](Self::recv) or [`irecv`](Self::irecv)).
    ///
    /// `buf` may be written or dropped at once: what goes is what the work
    /// enqueued on it before this call leaves there. To a peer on the
    /// same-node path ([`path_to`](Self::path_to) is
    /// [`Path::SameNode`](crate::Path::SameNode)), a non-empty buffer is
    /// copied on the device into memory exported to the peer before this
    /// returns (one of up to four kept per peer, each holding one message
    /// until the receiver has copied it out; where all four hold messages
    /// under way, the message takes the way below). Otherwise a device
    /// buffer's elements are copied into pinned host memory from the
    /// communicator's staging pool, in up to 16 parts, by copies enqueued
    /// on its stream now and not waited for: device work enqueued on the
    /// buffer later, a mapping of it and its drop come after them (stream
    /// order), and each part goes to MPI once its copy is through (asked
    /// without waiting, as the request is tested or waited for), while the
    /// later parts are still copied. A host buffer's elements are
    /// copied before this returns. The header goes out now, and the data
    /// (over MPI) once the receiver accepts it, as the request is tested
    /// or waited for.
    ///
    /// Errors: a bad rank or tag, or a communicator a timeout broke
    /// ([`Error::Broken`]), here, at once. The rest come from the
    /// request: a receiver that expects another type or length makes
    /// [`Error::Mismatch`] on both ranks; a buffer that cannot be read (a
    /// mapped one) is vkcompute's error here and [`Error::RemoteFailure`]
    /// at the receiver.
    pub fn isend<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
        dest: i32,
        tag: i32,
    ) -> Result<Request<'_>> {
        let op = "Communicator::isend";
        self.check_peer(op, dest, tag)?;
        let len = buf.elements();
        let piece_bytes = self.piece_elements::<T>() * size_of::<T>();
        let header = Header::new(Kind::Send, T::TYPE, len).pieces(piece_bytes);
        let pool = self.pinned();
        let shared = (buf.place().unmapped(op))
            .and_then(|()| self.stage_shared(op, (buf.place(), len), dest, None));
        let (header, ready) = match shared {
            Ok(Some(lent)) => {
                let header = header.in_shared_memory(lent.shared());
                let lent: Box<dyn LentOutbox> = Box::new(lent);
                let body = Owned::sending(Vec::new(), len, &pool);
                (header, Ok((body, Some(lent))))
            }
            Ok(None) => {
                let piece = self.piece_elements::<T>();
                let staged = stage_request(&self.pool, op, buf.place(), piece);
                let owned = |slots| (Owned::sending(slots, len, &pool), None);
                (header, staged.map(owned))
            }
            Err(e) => (header, Err(e)),
        };
        let idle = Owned::sending(Vec::new(), len, &pool);
        let state = Op::<T, _>::sending(op, self.wire_end(), (dest, tag), header, ready, idle);
        Ok(self.register(state))
    }

    /// Starts receiving into `buf` (a [`DeviceBuffer`](vkcompute::DeviceBuffer), a view of one, or a
    /// [`HostBuffer`](vkcompute::HostBuffer)) a message of `buf`'s element type and length that
    /// rank `source` sends with `tag` ([`send`](Self::send) or
    /// [`isend`](Self::isend)).
    ///
    /// **Stream order.** The message arrives in pinned host memory from
    /// the communicator's staging pool, and `buf` is not written until the
    /// request completes: its
    /// [`wait`](Request::wait), or the [`test`](Request::test) that returns
    /// `true`, enqueues an ordinary copy into a device buffer on its stream
    /// (or writes a host buffer), so device work enqueued after that sees
    /// the message, and work enqueued before it sees the old contents,
    /// never a part of the message. The request holds a clone of `buf`'s
    /// handle, so the buffer lives until then. No vkcompute lock is held
    /// while MPI is waited for.
    ///
    /// Errors: a bad rank or tag, or a broken communicator
    /// ([`Error::Broken`]), here, at once; the rest from the request: a
    /// message of another type or length is
    /// [`Error::Mismatch`] here and at the sender (nothing is written); a
    /// sender that failed is [`Error::RemoteFailure`]; a destination that
    /// cannot be written when the request completes (mapped) is vkcompute's
    /// error (the message was still taken off the wire).
    pub fn irecv<T: Element, B: Buffer<T> + ?Sized>(
        &self,
        buf: &B,
        source: i32,
        tag: i32,
    ) -> Result<Request<'_>> {
        let op = "Communicator::irecv";
        self.check_peer(op, source, tag)?;
        let dest = match buf.place() {
            Place::Device(device) => Dest::Device(device.clone()),
            Place::Host(host) => Dest::Host(host.clone()),
        };
        let len = buf.elements();
        let body = Owned::receiving(len, dest, &self.pinned());
        let state = Op::<T, _>::receiving(op, self.wire_end(), (source, tag), len, body);
        Ok(self.register(state))
    }
}
