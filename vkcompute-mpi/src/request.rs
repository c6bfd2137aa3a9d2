//! Non-blocking point to point: [`Communicator::isend`] and
//! [`Communicator::irecv`], the [`Request`] each returns, and the progress
//! engine that moves every pending request of a communicator on whenever
//! any of them is tested or waited for.
//!
//! The messages follow the blocking protocol exactly (header, answer, data
//! pieces, trailer; see `communicator.rs`), so an `isend` pairs with a
//! `recv` and a `send` with an `irecv`, and a mismatch is an error on both
//! ranks whichever calls they made.
#![allow(
    unsafe_code,
    reason = "posting MPI_Isend and MPI_Irecv over memory the request owns"
)]

use std::mem::size_of;
use std::sync::{Arc, Mutex, PoisonError, Weak};

use vkcompute::{DeviceBuffer, HostBuffer};

use crate::communicator::{Buffer, Communicator, Place, ACK_TAGS, DATA_TAGS, TRAILER_BYTES};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::header::{Failure, Header, Kind, HEADER_BYTES};
use crate::raw::{self, Comm, Transfer};

/// The pending non-blocking operations of a communicator, oldest first.
/// Weak: each is owned by its [`Request`].
#[derive(Default)]
pub(crate) struct Pending {
    ops: Vec<Weak<Mutex<dyn Step + Send>>>,
}

/// Which end of a message an operation is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Send,
    Recv,
}

/// How far an operation has got.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// A sender's header is out and its answer awaited; a receiver awaits
    /// the header.
    Header,
    /// The data (and answer, trailer) are under way, or a refusal or a
    /// failure is going out.
    Data,
    /// Nothing of this operation is under way in MPI any more.
    Over,
}

/// A pending operation, as the progress engine sees it.
trait Step {
    /// Moves the operation on as far as it can go without blocking.
    fn advance(&mut self);
    /// `(side, peer, tag)` while the header step is still to be done:
    /// operations with the same key take that step in the order they were
    /// posted, so that answers and data pair up as their headers did.
    fn header_key(&self) -> Option<(Side, i32, i32)>;
    /// Whether MPI is done with the operation's memory.
    fn is_over(&self) -> bool;
    /// The result, once over; a receive's data lands here (first call).
    fn finish(&mut self) -> Result<()>;
    /// For a request dropped unfinished: cancels what can be cancelled.
    fn abandon(&mut self);
}

/// Where a receive's elements go once they are all here.
enum Dest<T> {
    Device(DeviceBuffer<T>),
    Host(HostBuffer<T>),
}

/// One non-blocking message end and everything MPI reads or writes for it.
/// Every buffer MPI is given is a heap allocation of this value (boxes and
/// a vector that are never resized or replaced while a transfer is under
/// way), so moving the value moves no memory MPI touches.
struct Op<T: Element> {
    op: &'static str,
    comm: Comm,
    rank: i32,
    peer: i32,
    tag: i32,
    side: Side,
    phase: Phase,
    /// The header this rank sends: a sender's request, a receiver's answer.
    out_header: Box<[u8; HEADER_BYTES]>,
    /// The header this rank receives: a sender's answer, a receiver's request.
    in_header: Box<[u8; HEADER_BYTES]>,
    /// A sender's status after the data (always 0: the data is staged
    /// before the header goes out), or what a receiver got.
    trailer: Box<[u8; TRAILER_BYTES]>,
    /// A sender's copy of its buffer, or where a receiver's data arrives.
    data: Vec<T>,
    /// A sender's piece size in bytes.
    piece_bytes: usize,
    /// A receiver's destination (a clone of the handle: it stays alive).
    dest: Option<Dest<T>>,
    /// The MPI operations under way.
    transfers: Vec<Transfer>,
    /// The error the operation ends with once nothing is under way.
    error: Option<Error>,
    /// The result once over.
    result: Option<Result<()>>,
    /// Whether `finish` ran (a receive's data landed, or will not).
    finished: bool,
}

impl<T: Element> Op<T> {
    fn new(
        op: &'static str,
        comm: &Communicator,
        side: Side,
        peer: i32,
        tag: i32,
        data: Vec<T>,
    ) -> Self {
        Op {
            op,
            comm: comm.raw().clone(),
            rank: comm.rank(),
            peer,
            tag,
            side,
            phase: Phase::Header,
            out_header: Box::new([0; HEADER_BYTES]),
            in_header: Box::new([0; HEADER_BYTES]),
            trailer: Box::new([0; TRAILER_BYTES]),
            data,
            piece_bytes: 1,
            dest: None,
            transfers: Vec::new(),
            error: None,
            result: None,
            finished: false,
        }
    }

    fn set_out_header(&mut self, header: Header) {
        self.out_header.copy_from_slice(header.bytes());
    }

    /// Posts the send of `out_header` with `tag`.
    fn post_out_header(&mut self, tag: i32) -> Result<()> {
        // SAFETY: `out_header` is a box of this op, which lives (and is not
        // written) until every transfer completes: the request waits for
        // them before the op is dropped, and `out_header` is only set
        // before it is posted.
        unsafe {
            raw::isend(
                self.op,
                &self.comm,
                self.out_header.as_ptr(),
                HEADER_BYTES,
                self.peer,
                tag,
                &mut self.transfers,
            )
        }
    }

    /// Posts the receive of `in_header` with `tag`.
    fn post_in_header(&mut self, tag: i32) -> Result<()> {
        // SAFETY: `in_header` is a box of this op, which lives until every
        // transfer completes or is cancelled, and is read only after.
        unsafe {
            raw::irecv(
                self.op,
                &self.comm,
                self.in_header.as_mut_ptr(),
                HEADER_BYTES,
                self.peer,
                tag,
                &mut self.transfers,
            )
        }
    }

    /// Ends the operation with `result`.
    fn end(&mut self, result: Result<()>) {
        self.phase = Phase::Over;
        self.result = Some(result);
    }

    /// The step after the transfers of the current phase completed: the
    /// next phase, or `None` when the operation is done.
    fn next(&mut self) -> Result<Option<Phase>> {
        match (self.side, self.phase) {
            (Side::Send, Phase::Header) => self.answered().map(Some),
            (Side::Recv, Phase::Header) => self.headed().map(Some),
            (Side::Send, _) => Ok(None),
            (Side::Recv, _) => self.trailed().map(|()| None),
        }
    }

    /// A sender got its answer: the data and the trailer go out.
    fn answered(&mut self) -> Result<Phase> {
        let (op, dest) = (self.op, self.peer);
        let answer = Header::from_bytes(&self.in_header);
        answer.check_protocol(op, dest)?;
        if let Some(reason) = answer.failure_reason() {
            return Err(if !answer.is_mismatch() {
                Error::RemoteFailure {
                    op,
                    rank: self.rank,
                    failed: dest,
                    reason,
                }
            } else {
                Error::Mismatch {
                    op,
                    rank: self.rank,
                    detail: format!(
                        "rank {} sent {} elements of {}, rank {dest} expects {}",
                        self.rank,
                        self.data.len(),
                        T::TYPE,
                        answer.describe()
                    ),
                }
            });
        }
        let bytes: &[u8] = bytemuck::cast_slice(&self.data);
        let piece = self.piece_bytes.max(1);
        for start in (0..bytes.len()).step_by(piece) {
            let len = piece.min(bytes.len() - start);
            // SAFETY: `data` is this op's vector, which is not resized or
            // written while the op lives, and outlives every transfer (the
            // request waits for them); the range lies inside it.
            unsafe {
                raw::isend(
                    op,
                    &self.comm,
                    bytes[start..].as_ptr(),
                    len,
                    dest,
                    DATA_TAGS + self.tag,
                    &mut self.transfers,
                )?;
            }
        }
        // SAFETY: `trailer` is a box of this op, all zeros (no failure) and
        // never written while a sender's transfers are under way.
        unsafe {
            raw::isend(
                op,
                &self.comm,
                self.trailer.as_ptr(),
                TRAILER_BYTES,
                dest,
                DATA_TAGS + self.tag,
                &mut self.transfers,
            )?;
        }
        Ok(Phase::Data)
    }

    /// A receiver got the header: it answers, and if it accepted, the
    /// pieces and the trailer are received (into `data`, not yet into the
    /// destination).
    fn headed(&mut self) -> Result<Phase> {
        let (op, source) = (self.op, self.peer);
        let sent = Header::from_bytes(&self.in_header);
        sent.check_protocol(op, source)?;
        let len = self.data.len();
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
        self.set_out_header(wanted);
        self.post_out_header(ACK_TAGS + self.tag)?;
        let piece = usize::try_from(sent.piece_bytes()).unwrap_or(usize::MAX);
        let bytes: &mut [u8] = bytemuck::cast_slice_mut(&mut self.data);
        let total = bytes.len();
        let base = bytes.as_mut_ptr();
        for start in (0..total).step_by(piece) {
            let len = piece.min(total - start);
            // SAFETY: `data` is this op's vector, not resized, read or
            // written by anything else until every transfer completes (it
            // is read in `finish`, once the op is over); the range lies
            // inside it.
            unsafe {
                raw::irecv(
                    op,
                    &self.comm,
                    base.add(start),
                    len,
                    source,
                    DATA_TAGS + self.tag,
                    &mut self.transfers,
                )?;
            }
        }
        // SAFETY: `trailer` is a box of this op, read only once the op is over.
        unsafe {
            raw::irecv(
                op,
                &self.comm,
                self.trailer.as_mut_ptr(),
                TRAILER_BYTES,
                source,
                DATA_TAGS + self.tag,
                &mut self.transfers,
            )?;
        }
        Ok(Phase::Data)
    }

    /// A receiver got the trailer: the sender's word on its data.
    fn trailed(&mut self) -> Result<()> {
        match u64::from_le_bytes(*self.trailer) {
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
    fn land(&mut self) -> Result<()> {
        let op = self.op;
        match &self.dest {
            _ if self.data.is_empty() => Ok(()),
            Some(Dest::Device(buf)) => buf
                .enqueue_copy_from(&self.data[..])
                .and_then(|()| buf.context().flush())
                .map_err(Error::device(op)),
            Some(Dest::Host(host)) => host
                .as_mut_slice()
                .map(|mut slice| slice.copy_from_slice(&self.data))
                .map_err(Error::device(op)),
            None => Ok(()),
        }
    }
}

impl<T: Element> Step for Op<T> {
    fn advance(&mut self) {
        while self.phase != Phase::Over {
            let mut i = 0;
            while i < self.transfers.len() {
                match self.transfers[i].test(self.op) {
                    Ok(false) => i += 1,
                    Ok(true) => {
                        self.transfers.swap_remove(i);
                    }
                    Err(e) => {
                        self.transfers.swap_remove(i);
                        self.error.get_or_insert(e);
                    }
                }
            }
            if !self.transfers.is_empty() {
                return;
            }
            if let Some(e) = self.error.take() {
                self.end(Err(e));
                return;
            }
            match self.next() {
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

    fn header_key(&self) -> Option<(Side, i32, i32)> {
        (self.phase == Phase::Header && self.error.is_none())
            .then_some((self.side, self.peer, self.tag))
    }

    fn is_over(&self) -> bool {
        self.phase == Phase::Over
    }

    fn finish(&mut self) -> Result<()> {
        if !self.finished {
            self.finished = true;
            let mut result = self.result.take().unwrap_or(Ok(()));
            if result.is_ok() && self.side == Side::Recv {
                result = self.land();
            }
            self.data = Vec::new();
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
            && self.transfers.len() == 1;
        if !waiting_for_header {
            return;
        }
        match self.transfers[0].cancel(self.op) {
            // Nothing was received: the message, if one comes, is left
            // for a later receive.
            Ok(true) => {
                self.transfers.clear();
                self.end(Ok(()));
            }
            // The header arrived meanwhile: the message is taken off the
            // wire as usual (the sender does not hang) and discarded.
            Ok(false) => self.transfers.clear(),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
    }
}

/// A non-blocking send or receive under way, from
/// [`Communicator::isend`] or [`Communicator::irecv`]. It owns everything
/// MPI reads or writes for the message (the header, the answer, the
/// trailer, and a host copy of the elements) and, for a receive, a clone of
/// the destination's handle, so the buffer stays alive while it is pending.
///
/// [`test`](Self::test) and [`wait`](Self::wait) move on every pending
/// request of the communicator, not only their own, so requests complete
/// whatever order they are waited for in (a request makes progress only
/// inside `test`, `wait` or a drop of one of its communicator's requests;
/// blocking calls such as [`Communicator::send`] move none on).
///
/// **Drop.** Dropping an unfinished request finishes it first, so that MPI
/// never writes into freed memory: a receive whose header has not arrived
/// is cancelled (`MPI_Cancel`, then `MPI_Wait`) and its message, if one
/// comes, is left for a later receive; any other request is waited for,
/// which needs its peer's matching call as `wait` does, and a dropped
/// receive's data is taken off the wire and discarded (its destination is
/// never written). With a timeout set, a drop that waits longer leaks
/// the request's memory to MPI instead and marks the communicator broken,
/// like [`wait`](Self::wait). A request outlives neither its communicator nor the
/// thread it was made on (it borrows the communicator).
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
    /// Moves every pending request on as far as it goes without blocking,
    /// oldest first (those with the same peer, tag and direction take their
    /// header step in the order they were posted).
    pub(crate) fn progress(&self) {
        let ops: Vec<Arc<Mutex<dyn Step + Send>>> = {
            let mut pending = self.pending.borrow_mut();
            pending.ops.retain(|weak| {
                weak.upgrade()
                    .is_some_and(|op| op.try_lock().map_or(true, |op| !op.is_over()))
            });
            pending.ops.iter().filter_map(Weak::upgrade).collect()
        };
        let mut waiting = Vec::new();
        for op in ops {
            let Ok(mut op) = op.try_lock() else {
                continue;
            };
            if op.header_key().is_some_and(|key| waiting.contains(&key)) {
                continue;
            }
            op.advance();
            if let Some(key) = op.header_key() {
                waiting.push(key);
            }
        }
    }

    fn register<T: Element>(&self, op: Op<T>) -> Request<'_> {
        let op: Arc<Mutex<dyn Step + Send>> = Arc::new(Mutex::new(op));
        self.pending.borrow_mut().ops.push(Arc::downgrade(&op));
        Request { comm: self, op }
    }

    /// Starts sending `buf` (a [`DeviceBuffer`], a view of one, or a
    /// [`HostBuffer`]) to rank `dest` with `tag` (0 to
    /// [`MAX_TAG`](crate::MAX_TAG)), for a receive of the same element type
    /// and length there ([`recv`](Self::recv) or [`irecv`](Self::irecv)).
    ///
    /// The elements are copied to host memory the request owns before this
    /// returns (a device buffer once the work enqueued on it is done, as
    /// [`send`](Self::send) reads it), so `buf` may be written or dropped
    /// at once; the header goes out now and the data once the receiver
    /// accepts it, as the request is tested or waited for.
    ///
    /// Errors: a bad rank or tag here, at once. The rest come from the
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
        let mut data = vec![T::zeroed(); len];
        let staged = match buf.place() {
            _ if len == 0 => Ok(()),
            Place::Device(device) => device.copy_to_slice(&mut data),
            Place::Host(host) => host.as_slice().map(|s| data.copy_from_slice(&s)),
        }
        .map_err(Error::device(op));
        let mut state = Op::new(op, self, Side::Send, dest, tag, data);
        state.piece_bytes = piece_bytes;
        match staged {
            Ok(()) => {
                state.set_out_header(header);
                let posted = state
                    .post_out_header(tag)
                    .and_then(|()| state.post_in_header(ACK_TAGS + tag));
                if let Err(e) = posted {
                    state.phase = Phase::Data;
                    state.error = Some(e);
                }
            }
            Err(e) => {
                // The receiver hears of the failure and answers nothing.
                state.set_out_header(header.failed(Failure::of(&e)));
                if let Err(mpi) = state.post_out_header(tag) {
                    log::warn!("{op}: could not tell rank {dest} of a failure: {mpi}");
                }
                state.phase = Phase::Data;
                state.error = Some(e);
            }
        }
        Ok(self.register(state))
    }

    /// Starts receiving into `buf` (a [`DeviceBuffer`], a view of one, or a
    /// [`HostBuffer`]) a message of `buf`'s element type and length that
    /// rank `source` sends with `tag` ([`send`](Self::send) or
    /// [`isend`](Self::isend)).
    ///
    /// **Stream order.** The message arrives in host memory the request
    /// owns, and `buf` is not written until the request completes: its
    /// [`wait`](Request::wait), or the [`test`](Request::test) that returns
    /// `true`, enqueues an ordinary copy into a device buffer on its stream
    /// (or writes a host buffer), so device work enqueued after that sees
    /// the message, and work enqueued before it sees the old contents,
    /// never a part of the message. The request holds a clone of `buf`'s
    /// handle, so the buffer lives until then. No vkcompute lock is held
    /// while MPI is waited for.
    ///
    /// Errors, from the request: a message of another type or length is
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
        let data = vec![T::zeroed(); buf.elements()];
        let mut state = Op::new(op, self, Side::Recv, source, tag, data);
        state.dest = Some(match buf.place() {
            Place::Device(device) => Dest::Device(device.clone()),
            Place::Host(host) => Dest::Host(host.clone()),
        });
        if let Err(e) = state.post_in_header(tag) {
            state.phase = Phase::Data;
            state.error = Some(e);
        }
        Ok(self.register(state))
    }
}
