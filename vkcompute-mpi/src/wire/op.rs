//! The point-to-point protocol, written once: one message end as a state
//! machine ([`Op`]). A sender posts its header and the receive of the
//! answer; once the receiver's answer accepts the message, the data goes
//! out in pieces, then a trailer (the sender's word on its data). A
//! receiver posts the receive of the header; once it has the header, it
//! answers and receives the data and the trailer. Where the data lies in
//! the sender's memory on the same-node transport, the receiver copies it
//! out before it answers and nothing else follows the answer; or, where a
//! blocking send whose turn came at once writes it in pieces, as the
//! notes after the header say each piece is written (`op/shared.rs`).
//!
//! The step after the header (a receiver's answer or the receives of its
//! data or notes, a sender's data or notes) waits for the turn of its
//! `raw::Ticket`, so that the ends of one peer and tag keep MPI's matching
//! order whatever calls made them.
//!
//! What the data is and how it travels is the [`Body`]'s: a request's own
//! memory (`Owned`, moved on by the progress engine of
//! `communicator/request.rs`), or a blocking call's buffer (`transport`'s
//! staged, mapped or host bodies, the call posting the op and waiting for
//! it: [`Op::run`]).

use std::mem::size_of;
use std::ops::Range;
use std::sync::Arc;
use std::time::Instant;

use vkcompute::DeviceBuffer;

use super::header::{Failure, Header, Kind, HEADER_BYTES};
use super::{LentOutbox, SharedMessages, ACK_TAGS, DATA_TAGS, TRAILER_BYTES};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw::{self, Comm, Held, Pollable, Ticket};

mod shared;

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

/// The data of one message end: where its elements come from or go to,
/// and how they meet MPI.
pub(crate) trait Body {
    /// Sender, once the answer accepted the message: sends the data (or
    /// posts its sends) to `dest` with `tag`, in messages of `piece`
    /// bytes. `Ok(Some(e))`: a piece could not be read after the header
    /// went out (zeros went in its place; the trailer says so).
    fn send(
        &mut self,
        at: (&'static str, &Comm),
        to: (i32, i32),
        piece: usize,
    ) -> Result<Option<Error>>;
    /// Sender, after [`send`](Self::send) and then whenever the op is moved
    /// on: posts what `send` could not post without waiting (a request's
    /// slots whose device copies were not through yet), without waiting.
    /// `Some(failure)` once everything is posted (`failure` as `send`'s:
    /// the trailer goes out then), `None` while some is still to go.
    fn send_rest(&mut self, _op: &'static str) -> Result<Option<Option<Error>>> {
        Ok(Some(None))
    }
    /// Receiver, once the header accepted a message in pieces of `piece`
    /// bytes: gets ready to receive it (where this fails, the answer
    /// refuses the message).
    fn accept(&mut self, op: &'static str, piece: usize) -> Result<()>;
    /// Receiver, once its answer is out: receives the data (or posts its
    /// receives) from `source` with `tag`.
    fn recv(&mut self, at: (&'static str, &Comm), from: (i32, i32)) -> Result<()>;
    /// Receiver of a message in the sender's memory on the same-node
    /// transport: enqueues the copy of elements `range` out of `inbox`
    /// into the same elements of the destination, between the acquire and
    /// the release of bytes `own` of `inbox`
    /// (`SharedMessages::take_part`), without waiting; `from` is `(source,
    /// inbox)`, `part` is `(range, own)`. Taken whole, or piece by piece in
    /// order.
    fn take(
        &mut self,
        op: &'static str,
        shared: &dyn SharedMessages,
        from: (i32, &DeviceBuffer<u8>),
        part: (Range<usize>, Range<usize>),
    ) -> Result<Option<Error>>;
    /// Whether MPI is done with the body's memory (tests what it posted);
    /// an error of a transfer goes to `error`.
    fn poll(&mut self, op: &'static str, error: &mut Option<Error>) -> bool;
    /// Receiver: this rank's own error with the data it received (a piece
    /// it could not store), which comes before the sender's trailer.
    fn local_error(&mut self) -> Option<Error>;
    /// Receiver, once the whole message is here and the trailer says it is
    /// good: lands it in the destination (where it did not land as it came).
    fn land(&mut self, op: &'static str) -> Result<()>;
    /// Gives back what the body borrowed for the message (staging
    /// buffers), once nothing of it is under way.
    fn release(&mut self);
}

/// One message end: the protocol's state, the header, answer and trailer
/// (each lent to MPI while its transfer is under way: `raw::Held`), and
/// the [`Body`] of the data.
pub(crate) struct Op<T: Element, B: Body> {
    op: &'static str,
    comm: Comm,
    /// The communicator's same-node transport, for a message in shared memory.
    same_node: Arc<dyn SharedMessages>,
    rank: i32,
    peer: i32,
    tag: i32,
    side: Side,
    phase: Phase,
    /// The header this rank sends: a sender's request, a receiver's answer.
    out_header: Held<Box<[u8; HEADER_BYTES]>>,
    /// The header this rank receives: a sender's answer, a receiver's request.
    in_header: Held<Box<[u8; HEADER_BYTES]>>,
    /// A sender's word on its data after it, or what a receiver got.
    trailer: Held<Box<[u8; TRAILER_BYTES]>>,
    body: B,
    /// The message's length in elements of `T`.
    len: usize,
    /// A sender's memory on the same-node transport, which holds the
    /// data, lent to this message until the receiver answers.
    lent: Option<Box<dyn LentOutbox>>,
    /// A sender's piece size in bytes.
    piece_bytes: usize,
    /// Its place in the matching order of its peer and tag, until it has
    /// taken the step after its header (`raw::Ticket`).
    ticket: Option<Ticket>,
    /// The error the operation ends with once nothing is under way.
    error: Option<Error>,
    /// A sender's trailer waits for the body to post all its data.
    trailer_due: bool,
    /// A sender's notes of the pieces of its same-node memory it is still
    /// writing wait for its turn (`Header::notes`).
    notes_due: bool,
    /// A receiver's notes of a message in the sender's shared memory that
    /// comes in pieces (`shared.rs`).
    noted: Option<Box<shared::Noted>>,
    /// The result once over.
    result: Option<Result<()>>,
    /// Whether `finish` ran (a receive's data landed, or will not).
    finished: bool,
    _element: std::marker::PhantomData<fn() -> T>,
}

/// What an end of a communicator needs: its MPI communicator, its rank
/// and its same-node transport.
pub(crate) type End = (Comm, i32, Arc<dyn SharedMessages>);

/// A sender's data made ready before its header goes out: its body, and
/// the same-node memory that holds it where it travels that way.
pub(crate) type Ready<B> = (B, Option<Box<dyn LentOutbox>>);

impl<T: Element, B: Body> Op<T, B> {
    fn new(
        op: &'static str,
        (comm, rank, same_node): End,
        side: Side,
        peer_tag: (i32, i32),
        body: B,
    ) -> Self {
        Op {
            op,
            comm,
            same_node,
            rank,
            peer: peer_tag.0,
            tag: peer_tag.1,
            side,
            phase: Phase::Header,
            out_header: Held::new(Box::new([0; HEADER_BYTES])),
            in_header: Held::new(Box::new([0; HEADER_BYTES])),
            trailer: Held::new(Box::new([0; TRAILER_BYTES])),
            body,
            len: 0,
            lent: None,
            piece_bytes: 1,
            ticket: None,
            error: None,
            trailer_due: false,
            notes_due: false,
            noted: None,
            result: None,
            finished: false,
            _element: std::marker::PhantomData,
        }
    }

    /// The sending end of a message to `dest` with `tag`, described by
    /// `header` (a `Kind::Send` header, naming the same-node memory where
    /// the data lies there), its data `ready` (or why not: then a failed
    /// header goes out, and the op ends with the error once it is out).
    /// The header goes out now.
    pub(crate) fn sending(
        op: &'static str,
        end: End,
        (dest, tag): (i32, i32),
        header: Header,
        ready: Result<Ready<B>>,
        idle: B,
    ) -> Self {
        let ticket = end.0.state.ticket((true, dest, tag));
        let (body, lent, header, failure) = match ready {
            Ok((body, lent)) => (body, lent, header, None),
            Err(e) => (idle, None, header.failed(Failure::of(&e)), Some(e)),
        };
        let mut this = Op::new(op, end, Side::Send, (dest, tag), body);
        this.len = header.len();
        this.piece_bytes = usize::try_from(header.piece_bytes()).unwrap_or(usize::MAX);
        let noted = lent.as_ref().is_some_and(|l| l.pieces() > 0);
        this.lent = lent;
        this.set_out_header(header);
        let posted = this.post_out_header(tag);
        if let Some(e) = failure {
            // The receiver hears of the failure and answers nothing.
            if let Err(mpi) = posted {
                log::warn!("{op}: could not tell rank {dest} of a failure: {mpi}");
            }
            this.phase = Phase::Data;
            this.error = Some(e);
            return this;
        }
        this.ticket = Some(ticket);
        // The receiver of a header that went out waits for the notes.
        this.notes_due = noted && posted.is_ok();
        if let Err(e) = posted.and_then(|()| this.post_in_header(ACK_TAGS + tag)) {
            this.phase = Phase::Data;
            this.error = Some(e);
        }
        this
    }

    /// The receiving end of a message of `len` elements from `source`
    /// with `tag`, into `body`. The receive of the header is posted now.
    pub(crate) fn receiving(
        op: &'static str,
        end: End,
        (source, tag): (i32, i32),
        len: usize,
        body: B,
    ) -> Self {
        let ticket = end.0.state.ticket((false, source, tag));
        let mut this = Op::new(op, end, Side::Recv, (source, tag), body);
        this.len = len;
        this.ticket = Some(ticket);
        if let Err(e) = this.post_in_header(tag) {
            this.phase = Phase::Data;
            this.error = Some(e);
        }
        this
    }

    /// A blocking call: moves the op on (and the communicator's requests
    /// meanwhile) until it is over, and returns its result. Each wait is
    /// bounded by the communicator's timeout, counted afresh whenever the
    /// op moves on; past it the op's buffers are left to MPI (leaked) and
    /// the communicator is broken.
    pub(crate) fn run(mut self) -> Result<()> {
        let state = Arc::clone(&self.comm.state);
        let timeout = state.timeout();
        let (start, mut since) = (Instant::now(), Instant::now());
        loop {
            let moved = |o: &Self| (o.phase, o.ticket.is_some(), o.notes_due, o.notes_handled());
            let before = moved(&self);
            self.advance();
            if self.phase == Phase::Over {
                return self.finish();
            }
            if moved(&self) != before {
                since = Instant::now();
                continue;
            }
            state.progress();
            match timeout {
                Some(after) if since.elapsed() >= after => {
                    return Err(state.timed_out(self.op, "MPI_Test", after));
                }
                // A receiver taking a message in pieces stays runnable while
                // they come (`raw::streaming`), counted from the last one.
                _ if self.noted.is_some() => raw::streaming(self.piece_bytes).pause(since),
                _ => raw::pause(start),
            }
        }
    }

    fn set_out_header(&mut self, header: Header) {
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
    fn post_out_header(&mut self, tag: i32) -> Result<()> {
        let (op, comm) = (self.op, self.comm.clone());
        let whole = (0..HEADER_BYTES, HEADER_BYTES);
        let posted = self.out_header.send((op, &comm), whole, self.peer, tag);
        self.lent(posted)
    }

    /// Posts the receive of `in_header` with `tag`.
    fn post_in_header(&mut self, tag: i32) -> Result<()> {
        let (op, comm) = (self.op, self.comm.clone());
        let whole = (0..HEADER_BYTES, HEADER_BYTES);
        let posted = self.in_header.recv((op, &comm), whole, self.peer, tag);
        self.lent(posted)
    }

    /// The header received, once in.
    fn received_header(&self) -> Header {
        (self.in_header.get()).map_or_else(
            || Header::from_bytes(&[0; HEADER_BYTES]),
            |h| Header::from_bytes(h),
        )
    }

    /// Ends the operation with `result`.
    fn end(&mut self, result: Result<()>) {
        self.phase = Phase::Over;
        self.ticket = None;
        self.body.release();
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

    /// A sender got its answer: the data and the trailer go out; where
    /// the data is in the same-node memory, the receiver has copied it out
    /// (or refused it) and nothing more goes out: the memory goes back.
    fn answered(&mut self) -> Result<Phase> {
        let (op, dest) = (self.op, self.peer);
        let answer = self.received_header();
        let refused = answer.refusal(op, (self.rank, dest), (self.len, T::TYPE));
        if let Some(lent) = self.lent.take() {
            lent.answered(refused.is_err());
            return refused.map(|()| Phase::Data);
        }
        refused?;
        let (comm, tag) = (self.comm.clone(), DATA_TAGS + self.tag);
        let failed = self
            .body
            .send((op, &comm), (dest, tag), self.piece_bytes.max(1))?;
        // Ends with the local failure once the trailer is out.
        self.error = failed;
        self.trailer_due = true;
        if let Err(e) = self.send_trailer_when_due() {
            (self.trailer_due, self.ticket) = (false, None);
            return Err(e);
        }
        Ok(Phase::Data)
    }

    /// A sender whose data is all posted (`Body::send_rest`): posts the
    /// trailer, its word on the data (after every piece: MPI matches them
    /// in the order they are posted). Nothing while some data is to go.
    fn send_trailer_when_due(&mut self) -> Result<()> {
        if !self.trailer_due {
            return Ok(());
        }
        let op = self.op;
        let Some(more) = self.body.send_rest(op)? else {
            return Ok(());
        };
        self.trailer_due = false;
        self.ticket = None;
        if self.error.is_none() {
            self.error = more;
        }
        let code: u64 = match &self.error {
            None => 0,
            Some(e) if e.is_mapped_buffer() => 1,
            Some(_) => 2,
        };
        if let Some(trailer) = self.trailer.get_mut() {
            trailer.copy_from_slice(&code.to_le_bytes());
        }
        let (comm, tag) = (self.comm.clone(), DATA_TAGS + self.tag);
        let whole = (0..TRAILER_BYTES, TRAILER_BYTES);
        let posted = self.trailer.send((op, &comm), whole, self.peer, tag);
        self.lent(posted)
    }

    /// A receiver got the header: it answers, and if it accepted, the
    /// pieces and the trailer are received.
    fn headed(&mut self) -> Result<Phase> {
        let (op, source, len) = (self.op, self.peer, self.len);
        let sent = self.received_header();
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
        // becomes of the message, and so do the notes of its pieces.
        let inbox = (sent.shared_memory()).map(|shared| self.same_node.inbox(op, source, shared));
        let notes = sent.notes(op, source)?;
        self.piece_bytes = usize::try_from(sent.piece_bytes()).unwrap_or(usize::MAX);
        let size = size_of::<T>() as u64;
        let piece_ok = sent.piece_bytes() > 0 && sent.piece_bytes() % size == 0;
        if !wanted.accepts(&sent) || !piece_ok {
            return self.refuse(&sent, wanted, notes);
        }
        if let Some(inbox) = inbox {
            return self.take_shared(inbox, wanted, notes);
        }
        let piece = usize::try_from(sent.piece_bytes()).unwrap_or(usize::MAX);
        if let Err(e) = self.body.accept(op, piece) {
            self.answer(wanted.failed(Failure::of(&e)))?;
            return Err(e);
        }
        self.answer(wanted)?;
        let (comm, tag) = (self.comm.clone(), DATA_TAGS + self.tag);
        self.body.recv((op, &comm), (source, tag))?;
        let whole = (0..TRAILER_BYTES, TRAILER_BYTES);
        let posted = self.trailer.recv((op, &comm), whole, source, tag);
        self.lent(posted)?;
        Ok(Phase::Data)
    }

    /// Sends the answer `header`.
    fn answer(&mut self, header: Header) -> Result<()> {
        self.set_out_header(header);
        self.post_out_header(ACK_TAGS + self.tag)
    }

    /// A receiver's data and trailer are in: its own error with the data
    /// first, then the sender's word on it.
    fn trailed(&mut self) -> Result<()> {
        if let Some(e) = self.body.local_error() {
            return Err(e);
        }
        let trailer = self.trailer.get().map_or(0, |t| u64::from_le_bytes(**t));
        match trailer {
            0 => Ok(()),
            code => Err(Error::RemoteFailure {
                op: self.op,
                rank: self.rank,
                failed: self.peer,
                reason: if code == 1 {
                    "its buffer was mapped while the message was under way; the data here is \
                     incomplete"
                } else {
                    "it could not read its buffer while the message was under way; the data \
                     here is incomplete"
                },
            }),
        }
    }
}

impl<T: Element, B: Body> Pollable for Op<T, B> {
    fn advance(&mut self) {
        while self.phase != Phase::Over {
            let notes_turn = self.ticket.as_ref().is_none_or(Ticket::has_turn);
            if self.notes_due && notes_turn {
                if let Err(e) = self.send_notes() {
                    self.error.get_or_insert(e);
                }
            }
            if let Err(e) = self.send_trailer_when_due() {
                // The rest will not go.
                (self.trailer_due, self.ticket) = (false, None);
                self.error.get_or_insert(e);
            }
            let (op, mut error) = (self.op, None);
            let notes_idle = self.poll_notes(&mut error);
            let mut idle = notes_idle && self.out_header.poll(op, &mut error);
            idle &= self.in_header.poll(op, &mut error);
            idle &= self.trailer.poll(op, &mut error);
            idle &= self.body.poll(op, &mut error);
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
            // A sender whose data is not all posted keeps its turn until
            // it is (`send_trailer_when_due`): a later message of its
            // peer and tag must not post its data before.
            if ordered && !self.trailer_due {
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

impl<T: Element, B: Body> Step for Op<T, B> {
    fn finish(&mut self) -> Result<()> {
        if !self.finished {
            self.finished = true;
            let mut result = self.result.take().unwrap_or(Ok(()));
            if result.is_ok() && self.side == Side::Recv {
                result = self.body.land(self.op);
            }
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
