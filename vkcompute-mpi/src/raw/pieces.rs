//! One step of a collective in pieces ([`exchange_pieces`]): every
//! incoming piece's receive posted into memory of its own, every outgoing
//! piece sent as soon as its memory is ready, and each incoming piece
//! handed back as soon as it is in, while the others are still under way.
//! The memory is borrowed for the call, which returns only once MPI is
//! done with all of it (within the communicator's timeout, cancelling or
//! aborting past it: [`wait`](super::wait)).

use std::time::Instant;

use vkcompute::{HostSlice, HostSliceMut};

use super::transfer::{ibcast, irecv, isend, Transfer};
use super::wait::{finish_until, Abandon};
use super::Comm;
use crate::error::Result;

/// How a step's pieces travel.
#[derive(Clone, Copy, Debug)]
pub(crate) enum Wire {
    /// Point to point with `tag`: sends to `dest`, receives from `source`.
    Pair { dest: i32, source: i32, tag: i32 },
    /// `MPI_Ibcast`s from `root`: the root's pieces are the step's sends,
    /// every other rank's its receives.
    Broadcast { root: i32 },
}

impl Wire {
    /// The MPI call a timeout names.
    fn call(self) -> &'static str {
        match self {
            Wire::Pair { .. } => "MPI_Sendrecv",
            Wire::Broadcast { .. } => "MPI_Bcast",
        }
    }

    /// What a timeout does with the transfers under way: point-to-point
    /// ones are cancelled, a collective cannot be.
    fn abandon(self) -> Abandon {
        match self {
            Wire::Pair { .. } => Abandon::Cancel,
            Wire::Broadcast { .. } => Abandon::Abort,
        }
    }
}

/// Scratch bytes on the heap, aligned for every element type (8 bytes),
/// which MPI may reduce as elements where a piece's own memory could not
/// be had.
pub(crate) struct Spare {
    words: Vec<u64>,
    len: usize,
}

impl Spare {
    /// `len` zero bytes.
    pub(crate) fn zeroed(len: usize) -> Spare {
        Spare {
            words: vec![0; len.div_ceil(8)],
            len,
        }
    }

    /// A copy of `bytes`.
    pub(crate) fn copy_of(bytes: &[u8]) -> Spare {
        let mut spare = Spare::zeroed(bytes.len());
        spare.bytes_mut().copy_from_slice(bytes);
        spare
    }

    fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.words)[..self.len]
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.words)[..self.len]
    }
}

/// The memory an incoming piece lands in: the first `len` bytes of a
/// pinned host buffer borrowed for the host, other memory borrowed for
/// the call (a part of a device buffer's mapping), or a scratch buffer
/// (where the host buffer could not be borrowed: the piece is taken off
/// the wire and dropped).
pub(crate) enum Landing<'m> {
    Slot(HostSliceMut<'m, u8>, usize),
    Memory(&'m mut [u8]),
    Spare(Spare),
}

impl Landing<'_> {
    pub(super) fn bytes(&mut self) -> &mut [u8] {
        match self {
            Landing::Slot(slice, len) => &mut slice[..*len],
            Landing::Memory(memory) => memory,
            Landing::Spare(spare) => spare.bytes_mut(),
        }
    }
}

/// The memory an outgoing piece is sent from: the first `len` bytes of a
/// pinned host buffer borrowed for reading, or other bytes (a copy; zeros,
/// where this rank's data is wrong and the peers must still complete).
pub(crate) enum Source<'m> {
    Slot(HostSlice<'m, u8>, usize),
    Spare(Spare),
}

impl Source<'_> {
    pub(super) fn bytes(&self) -> &[u8] {
        match self {
            Source::Slot(slice, len) => &slice[..*len],
            Source::Spare(spare) => spare.bytes(),
        }
    }
}

/// Ends the process where it is dropped by a panic's unwinding: held
/// while MPI transfers into or out of memory that the unwinding would
/// free are under way.
pub(super) struct AbortOnUnwind;

impl Drop for AbortOnUnwind {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "vkcompute-mpi: a panic while MPI transfers of a collective's pieces are under \
                 way; their memory cannot be freed, so the process is aborted"
            );
            std::process::abort();
        }
    }
}

/// Posts a receive of every piece of `landings` (in order, over `wire`),
/// then for each of the step's `sends` pieces in order asks `source(p)`
/// for its memory (which may wait for a copy to reach the host) and sends
/// it, then waits for the incoming pieces in order: once piece `p` is in,
/// its landing is dropped (its memory goes back to its owner) and
/// `arrived(p, in_slot)` is called (`in_slot`: it landed in its host
/// buffer, not a scratch one). Returns once MPI is done with every
/// piece's memory: the first MPI error (which stops the posting and the
/// calls of `arrived`), or `Ok`.
///
/// A panic in `source` or `arrived` while transfers are under way aborts
/// the process: the memory they use cannot be freed.
pub(crate) fn exchange_pieces<'m>(
    op: &'static str,
    comm: &Comm,
    wire: Wire,
    (mut landings, sends): (Vec<Landing<'m>>, usize),
    mut source: impl FnMut(usize) -> Source<'m>,
    mut arrived: impl FnMut(usize, bool),
) -> Result<()> {
    comm.state.usable(op)?;
    let (call, abandon) = (wire.call(), wire.abandon());
    let mut transfers: Vec<Transfer> = Vec::new();
    // The transfers of each incoming piece (one, unless over MAX_MESSAGE).
    let mut recv_at = Vec::with_capacity(landings.len());
    let mut held_in: Vec<Option<Landing<'m>>> = Vec::with_capacity(landings.len());
    let mut held_out: Vec<Source<'m>> = Vec::with_capacity(sends);
    // Declared after the memory, so dropped before it: a panic below
    // while transfers are under way ends the process instead of freeing
    // memory MPI still reads or writes.
    let _unwinding = AbortOnUnwind;
    let mut posted = Ok(());
    for mut landing in landings.drain(..) {
        let memory = landing.bytes();
        let (ptr, len) = (memory.as_mut_ptr(), memory.len());
        let before = transfers.len();
        held_in.push(Some(landing));
        // SAFETY: `ptr..ptr + len` is a landing's own memory (a heap
        // buffer or a host buffer's mapping: it stays put when the landing
        // moves into `held_in`), dropped only once its transfers are over
        // or after `finish_until` over all (which returns once MPI is done,
        // cancelling or aborting past the timeout); a panic meanwhile
        // aborts the process first (`AbortOnUnwind`).
        posted = unsafe {
            match wire {
                Wire::Pair { source, tag, .. } => {
                    irecv(op, comm, ptr, len, source, tag, &mut transfers)
                }
                Wire::Broadcast { root } => ibcast(op, comm, ptr, len, root, &mut transfers),
            }
        };
        recv_at.push(before..transfers.len());
        if posted.is_err() {
            break;
        }
    }
    for p in 0..sends {
        if posted.is_err() {
            break;
        }
        let memory = source(p);
        let bytes = memory.bytes();
        let (ptr, len) = (bytes.as_ptr(), bytes.len());
        held_out.push(memory);
        // SAFETY: `ptr..ptr + len` is the memory of a source held in
        // `held_out` until the end, after `finish_until` over every
        // transfer, as above, which does not move with it; nothing writes
        // it meanwhile (a host buffer's read borrow keeps device writes
        // out); at a broadcast's root MPI only reads the buffer it is
        // given.
        posted = unsafe {
            match wire {
                Wire::Pair { dest, tag, .. } => {
                    isend(op, comm, ptr, len, dest, tag, &mut transfers)
                }
                Wire::Broadcast { root } => {
                    ibcast(op, comm, ptr.cast_mut(), len, root, &mut transfers)
                }
            }
        };
    }
    let mut open: Vec<usize> = (0..transfers.len()).collect();
    let start = Instant::now();
    let mut result: Result<()> = posted;
    if result.is_ok() {
        for (p, at) in recv_at.iter().enumerate() {
            let waits = (&mut transfers[..], &mut open);
            if let Err(e) = finish_until(op, comm, call, waits, at.clone(), (start, abandon)) {
                result = Err(e);
                break;
            }
            // The piece is in: its memory goes back to its owner.
            let landed = held_in[p].take();
            let in_slot = !matches!(landed, Some(Landing::Spare(_)));
            drop(landed);
            arrived(p, in_slot);
        }
    }
    let all = 0..transfers.len();
    let waits = (&mut transfers[..], &mut open);
    let rest = finish_until(op, comm, call, waits, all, (start, abandon));
    // Only now may the memory go.
    drop(held_in);
    drop(held_out);
    result.and(rest)
}
