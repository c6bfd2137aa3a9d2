//! One message in pieces through a few buffers that take turns
//! ([`stream_pieces`]): up to a window of pieces under way at once, each
//! posted as soon as its memory is ready (a sender's piece copied to the
//! host, a receiver's buffer free again), each handed back as soon as it
//! is through, while MPI moves the others. The memory is borrowed for the
//! call, which returns only once MPI is done with all of it.

use std::collections::VecDeque;
use std::ops::Range;
use std::time::Instant;

use super::pieces::{AbortOnUnwind, Landing, Source};
use super::transfer::{irecv, isend, Transfer};
use super::wait::{cancel_or_abort, pause};
use super::Comm;
use crate::error::Result;

/// The memory of one piece of a [`stream_pieces`] message: what a sender
/// sends from, or what a receiver receives into.
pub(crate) enum Memory<'m> {
    Send(Source<'m>),
    Recv(Landing<'m>),
}

impl Memory<'_> {
    fn in_slot(&self) -> bool {
        matches!(
            self,
            Memory::Send(Source::Slot(..)) | Memory::Recv(Landing::Slot(..))
        )
    }
}

/// A piece under way: its number, its transfers, its memory.
struct Under<'m> {
    piece: usize,
    transfers: Range<usize>,
    memory: Memory<'m>,
}

/// Sends to `peer` (or receives from it, by the memory `ready` gives) the
/// `pieces` pieces of one message with `tag`, each one MPI message (more
/// only past `MAX_MESSAGE`), in order, at most `window` under way at once.
///
/// `ready(p)` gives piece `p`'s memory once it is ready, `None` while not
/// (it must not block: MPI moves the pieces under way while this polls);
/// it is asked for the pieces in order, and for `p` only once fewer than
/// `window` pieces are under way. Once piece `p` is through, its memory is
/// dropped (it goes back to its owner) and `done(p, in_slot)` is called
/// (`in_slot`: it was a host buffer's, not a scratch one), in order.
///
/// Within the communicator's timeout, counted afresh whenever a piece
/// goes through; past it the pieces under way are cancelled (the job is
/// aborted where MPI does not give them back, `wait`). Returns the first
/// error, once MPI is done with every piece's memory. A panic in `ready`
/// or `done` while pieces are under way aborts the process.
pub(crate) fn stream_pieces<'m>(
    op: &'static str,
    comm: &Comm,
    (peer, tag): (i32, i32),
    (pieces, window): (usize, usize),
    mut ready: impl FnMut(usize) -> Option<Memory<'m>>,
    mut done: impl FnMut(usize, bool),
) -> Result<()> {
    comm.state.usable(op)?;
    let window = window.max(1);
    let mut transfers: Vec<Transfer> = Vec::new();
    // Which transfers are over (tested complete, or failed).
    let mut over: Vec<bool> = Vec::new();
    let mut under: VecDeque<Under<'m>> = VecDeque::new();
    // Declared after the memory, so dropped before it (see `pieces`).
    let _unwinding = AbortOnUnwind;
    let (start, mut since) = (Instant::now(), Instant::now());
    let timeout = comm.state.timeout();
    let (mut next, mut first) = (0, None);
    loop {
        let mut moved = false;
        while first.is_none() && next < pieces && under.len() < window {
            let Some(mut memory) = ready(next) else {
                break;
            };
            let before = transfers.len();
            // SAFETY: the piece's memory is its own (a heap buffer or a
            // host buffer's mapping, which stays put when the memory
            // moves into `under`), held there until its transfers are
            // over: it is dropped once `test` says so, or after every
            // transfer is over or cancelled below; a panic meanwhile
            // aborts the process first (`AbortOnUnwind`).
            let posted = unsafe {
                match &mut memory {
                    Memory::Send(source) => {
                        let bytes = source.bytes();
                        isend(
                            op,
                            comm,
                            bytes.as_ptr(),
                            bytes.len(),
                            peer,
                            tag,
                            &mut transfers,
                        )
                    }
                    Memory::Recv(landing) => {
                        let bytes = landing.bytes();
                        let (ptr, len) = (bytes.as_mut_ptr(), bytes.len());
                        irecv(op, comm, ptr, len, peer, tag, &mut transfers)
                    }
                }
            };
            over.resize(transfers.len(), false);
            under.push_back(Under {
                piece: next,
                transfers: before..transfers.len(),
                memory,
            });
            next += 1;
            moved = true;
            if let Err(e) = posted {
                first = Some(e);
            }
        }
        // The oldest piece first: MPI completes one pair's messages of one
        // tag in order.
        while let Some(oldest) = under.front() {
            let mut through = true;
            for i in oldest.transfers.clone() {
                if over[i] {
                    continue;
                }
                match transfers[i].test(op) {
                    Ok(done) => {
                        over[i] = done;
                        through &= done;
                    }
                    Err(e) => {
                        over[i] = true;
                        first.get_or_insert(e);
                    }
                }
            }
            if !through {
                break;
            }
            let Some(Under { piece, memory, .. }) = under.pop_front() else {
                break;
            };
            let in_slot = memory.in_slot();
            drop(memory);
            if first.is_none() {
                done(piece, in_slot);
            }
            since = Instant::now();
            moved = true;
        }
        if under.is_empty() && (next == pieces || first.is_some()) {
            return first.map_or(Ok(()), Err);
        }
        if moved {
            continue;
        }
        comm.state.progress();
        match timeout {
            Some(after) if since.elapsed() >= after => {
                let error = comm.state.timed_out(op, "MPI_Sendrecv", after);
                let open: Vec<usize> = (under.iter().flat_map(|u| u.transfers.clone()))
                    .filter(|&i| !over[i])
                    .collect();
                cancel_or_abort(op, comm, &mut transfers, &open, &error);
                // MPI is done with every piece's memory now.
                under.clear();
                return Err(error);
            }
            _ => pause(start),
        }
    }
}
