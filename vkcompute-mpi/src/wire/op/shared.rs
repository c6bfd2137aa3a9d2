//! The same-node transport's side of the protocol: a receiver that
//! copies a message out of the sender's shared memory (whole, or piece by
//! piece as the sender's notes come in, without blocking on the sender),
//! and a sender that notes each piece once it is written.

use std::mem::size_of;
use std::sync::Arc;

use vkcompute::DeviceBuffer;

use super::{Body, Op, Phase};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw::{self, Held};
use crate::wire::header::{Failure, Header};
use crate::wire::DATA_TAGS;

/// A note of a sender on a piece of its shared memory (`Op::send_notes`).
const NOTE_BYTES: usize = 8;

/// A receiver's notes of a message written in pieces (`Header::notes`),
/// all posted at once in its step after the header (so that MPI matches
/// them before any later message's data), and what it does once they are
/// in: copy each piece out as its note comes, or take them all and then
/// refuse the message.
pub(super) struct Noted {
    notes: Vec<Held<Box<[u8; NOTE_BYTES]>>>,
    /// The notes handled so far, in order.
    handled: usize,
    purpose: Purpose,
    /// The sender could not write a piece: nothing more is copied.
    remote: bool,
    /// This rank's error with the destination (the message is taken).
    local: Option<Error>,
    /// An error of the copies or an MPI error of a note: nothing more is
    /// copied and the message is refused.
    failed: Option<Error>,
    /// Whether the answer went out.
    answered: bool,
}

enum Purpose {
    /// Copy each piece out of `inbox`, then answer `wanted`.
    Take {
        inbox: DeviceBuffer<u8>,
        wanted: Header,
    },
    /// Answer `answer` once every note is in, and end with `error`.
    Refuse { answer: Header, error: Error },
    /// Answered.
    Done,
}

impl<T: Element, B: Body> Op<T, B> {
    /// A receiver of a message in the sender's shared memory (`inbox`, or
    /// why it could not be had) with `notes` to come. Without notes:
    /// copies it out now, waiting for the device, and answers (`wanted`,
    /// or failed), which frees the sender's memory; nothing else comes
    /// over MPI. With notes: posts their receives ([`Noted`]); the pieces
    /// are copied as the op moves on. A destination that cannot be written
    /// is this rank's error only: the message was taken, as over MPI.
    pub(super) fn take_shared(
        &mut self,
        inbox: Result<DeviceBuffer<u8>>,
        wanted: Header,
        notes: u64,
    ) -> Result<Phase> {
        let inbox = inbox.and_then(|inbox| self.fits(inbox));
        if notes > 0 {
            let purpose = match inbox {
                Ok(inbox) => Purpose::Take { inbox, wanted },
                Err(error) => Purpose::Refuse {
                    answer: wanted.failed(Failure::of(&error)),
                    error,
                },
            };
            return self.await_notes(notes, purpose);
        }
        let (op, source) = (self.op, self.peer);
        let shared = Arc::clone(&self.same_node);
        let taken = inbox.and_then(|inbox| {
            let from = (source, &inbox);
            let taken = self
                .body
                .take(op, &*shared, from, (0..self.len, 0..inbox.len()));
            // Waited for even where the copy failed: once the answer goes
            // out, nothing of this rank reads the memory.
            shared.settle(op).and(taken)
        });
        let answer = match &taken {
            Ok(_) => wanted,
            Err(e) => wanted.failed(Failure::of(e)),
        };
        self.answer(answer)?;
        match taken? {
            Some(e) => Err(e),
            None => Ok(Phase::Data),
        }
    }

    /// `inbox`, where it holds the message.
    fn fits(&self, inbox: DeviceBuffer<u8>) -> Result<DeviceBuffer<u8>> {
        let bytes = self.len.saturating_mul(size_of::<T>());
        if inbox.len() < bytes {
            return Err(Error::Protocol {
                op: self.op,
                peer: self.peer,
                detail: format!(
                    "a message of {bytes} bytes in shared memory of {}",
                    inbox.len()
                ),
            });
        }
        Ok(inbox)
    }

    /// A receiver whose request `wanted` does not fit the message `sent`
    /// of `notes` notes: a mismatch here and at the sender, answered once
    /// every note is off the wire.
    pub(super) fn refuse(&mut self, sent: &Header, wanted: Header, notes: u64) -> Result<Phase> {
        let mismatch = Error::Mismatch {
            op: self.op,
            rank: self.rank,
            detail: format!(
                "rank {} sent {}, rank {} expects {} elements of {}",
                self.peer,
                sent.describe(),
                self.rank,
                self.len,
                T::TYPE
            ),
        };
        let answer = wanted.failed(Failure::Mismatch);
        if notes > 0 {
            let purpose = Purpose::Refuse {
                answer,
                error: mismatch,
            };
            return self.await_notes(notes, purpose);
        }
        self.answer(answer)?;
        // Ends with this once the answer is out.
        Err(mismatch)
    }

    /// Posts the receives of the sender's `notes`, to `purpose` once they
    /// are in: taken in the step after the header, so that they meet no
    /// other message's data.
    fn await_notes(&mut self, notes: u64, purpose: Purpose) -> Result<Phase> {
        let (op, comm) = (self.op, self.comm.clone());
        let from = (self.peer, DATA_TAGS + self.tag);
        let mut noted = Noted {
            notes: Vec::new(),
            handled: 0,
            purpose,
            remote: false,
            local: None,
            failed: None,
            answered: false,
        };
        for _ in 0..notes {
            let mut note = Held::new(Box::new([0u8; NOTE_BYTES]));
            let posted = note.recv((op, &comm), (0..NOTE_BYTES, NOTE_BYTES), from.0, from.1);
            noted.notes.push(note);
            if let Err(e) = self.lent(posted) {
                // The notes posted are waited for and the message refused;
                // the sender's others would meet a later message's
                // receives, so the communicator takes no more.
                noted.failed = Some(self.comm.state.lost_step(op, e));
                break;
            }
        }
        self.noted = Some(Box::new(noted));
        Ok(Phase::Data)
    }

    /// The notes handled so far (what moves a receiver in pieces on).
    pub(super) fn notes_handled(&self) -> usize {
        self.noted.as_ref().map_or(0, |n| n.handled)
    }

    /// Moves a receiver's notes on without waiting for the sender: copies
    /// the piece of each note that came in (in order), and once every note
    /// is in, waits for the device (the last piece's copy) and answers,
    /// the error to end with in `self.error`. Whether nothing of the notes
    /// is under way any more.
    pub(super) fn poll_notes(&mut self, error: &mut Option<Error>) -> bool {
        let Some(mut noted) = self.noted.take() else {
            return true;
        };
        let done = self.move_notes(&mut noted, error);
        self.noted = Some(noted);
        done
    }

    fn move_notes(&mut self, noted: &mut Noted, error: &mut Option<Error>) -> bool {
        let (op, size) = (self.op, size_of::<T>());
        let per = (self.piece_bytes / size).max(1);
        while let Some(note) = noted.notes.get_mut(noted.handled) {
            let mut failed = None;
            if !note.poll(op, &mut failed) {
                return false;
            }
            let code = note.get().map_or(2, |n| u64::from_le_bytes(**n));
            noted.remote |= code != 0;
            if let Some(e) = failed {
                noted.failed.get_or_insert(e);
            }
            let start = noted.handled.saturating_mul(per);
            let n = per.min(self.len.saturating_sub(start));
            noted.handled += 1;
            let Purpose::Take { inbox, .. } = &noted.purpose else {
                continue;
            };
            if noted.remote || noted.failed.is_some() || n == 0 {
                continue;
            }
            let own = start * size..(start + n) * size;
            let shared = Arc::clone(&self.same_node);
            let from = (self.peer, inbox);
            match self.body.take(op, &*shared, from, (start..start + n, own)) {
                Ok(e) => noted.local = noted.local.take().or(e),
                Err(e) => noted.failed = Some(e),
            }
        }
        if noted.handled < noted.notes.len() || noted.answered {
            return noted.handled >= noted.notes.len();
        }
        // Every note that will come is in (a note that failed to post ends
        // the list: the message is refused).
        noted.answered = true;
        let (answer, end) = match std::mem::replace(&mut noted.purpose, Purpose::Done) {
            Purpose::Refuse { answer, error } => (answer, Some(error)),
            Purpose::Take { wanted, .. } => self.taken(noted, wanted),
            Purpose::Done => return true,
        };
        if let Err(e) = self.answer(answer) {
            error.get_or_insert(e);
        }
        if let Some(e) = end {
            self.error.get_or_insert(e);
        }
        true
    }

    /// Once every piece is copied: waits for the device (nothing of this
    /// rank reads the memory once the answer goes out), and returns the
    /// answer and the error to end with.
    fn taken(&self, noted: &mut Noted, wanted: Header) -> (Header, Option<Error>) {
        let settled = self.same_node.settle(self.op);
        let failed = noted.failed.take().or(settled.err());
        if let Some(e) = failed {
            return (wanted.failed(Failure::of(&e)), Some(e));
        }
        if noted.remote {
            let e = Error::RemoteFailure {
                op: self.op,
                rank: self.rank,
                failed: self.peer,
                reason: "it could not read its buffer while the message was under way; the data \
                         here is incomplete",
            };
            return (wanted.failed(Failure::of(&e)), Some(e));
        }
        (wanted, noted.local.take())
    }

    /// A sender whose shared memory is still being written, once it has
    /// its turn: a note for each piece once it is written (0, or 2 from the
    /// first the device could not write on: the receiver copies no more
    /// and refuses the message), in order. Waits for this rank's device
    /// only. A device error ends the op once the answer is in.
    pub(super) fn send_notes(&mut self) -> Result<()> {
        self.notes_due = false;
        let (op, comm) = (self.op, self.comm.clone());
        let to = (self.peer, DATA_TAGS + self.tag);
        let Some(lent) = self.lent.as_mut() else {
            return Ok(());
        };
        let mut failed = None;
        for index in 0..lent.pieces() {
            if failed.is_none() {
                failed = lent.piece_written(op, index).err();
            }
            let note: u64 = if failed.is_some() { 2 } else { 0 };
            let sent = raw::send(op, &comm, &note.to_le_bytes(), to, raw::Patience::NAP);
            // The receiver waits for the notes that did not go.
            sent.map_err(|e| comm.state.lost_step(op, e))?;
        }
        if let Some(e) = failed {
            self.error.get_or_insert(e);
        }
        Ok(())
    }
}
