//! Blocking MPI calls over borrowed memory: each posts its transfers
//! non-blocking and returns only once MPI is done with the memory (within
//! the communicator's timeout: see [`wait`](super::wait)).

use std::os::raw::{c_int, c_void};

use mpi::ffi;

use super::transfer::{ibcast, irecv, isend, Transfer};
use super::wait::{finish, finish_with, Abandon, Patience};
use super::{byte_type, check, Comm, MAX_MESSAGE};
use crate::error::{Error, Result};

/// Memory to send and the rank it goes to.
type Out<'a> = (&'a [u8], i32);
/// Memory to receive into and the rank it comes from.
type In<'a> = (&'a mut [u8], i32);

/// `MPI_Send` of `bytes` to `dest` with `tag` (posted as `MPI_Isend`s
/// and waited for within the communicator's timeout, with `patience`:
/// [`streaming`](super::streaming) for a piece of a message whose
/// receiver is taking it).
pub(crate) fn send(
    op: &'static str,
    comm: &Comm,
    bytes: &[u8],
    (dest, tag): (i32, i32),
    patience: Patience,
) -> Result<()> {
    let out = Some((bytes, dest));
    exchange(op, comm, "MPI_Send", (out, None), tag, patience)
}

/// `MPI_Recv` of exactly `bytes.len()` bytes from `source` with `tag`
/// (posted as `MPI_Irecv`s and waited for within the timeout, with
/// `patience`, as [`send`]).
pub(crate) fn recv(
    op: &'static str,
    comm: &Comm,
    bytes: &mut [u8],
    (source, tag): (i32, i32),
    patience: Patience,
) -> Result<()> {
    let into = Some((bytes, source));
    exchange(op, comm, "MPI_Recv", (None, into), tag, patience)
}

/// `out` to `dest` while `into` (exactly its length) comes from `source`,
/// both with `tag`. The two lengths may differ; each side splits its own
/// range into the same pieces as its peer does.
pub(crate) fn sendrecv(
    op: &'static str,
    comm: &Comm,
    out: &[u8],
    dest: i32,
    into: &mut [u8],
    source: i32,
    tag: i32,
) -> Result<()> {
    let (out, into) = (Some((out, dest)), Some((into, source)));
    exchange(op, comm, "MPI_Sendrecv", (out, into), tag, Patience::NAP)
}

/// `out` to `dest` while `into` comes from `source`, both with `tag`, each
/// as messages of `piece` bytes (the last shorter; one empty message for
/// an empty range), all posted at once: the messages of a pipelined
/// collective's step (see `pipeline::split`), which its peer may send or
/// receive one piece at a time.
#[allow(
    clippy::too_many_arguments,
    reason = "MPI_Sendrecv's arguments and the piece"
)]
pub(crate) fn sendrecv_pieces(
    op: &'static str,
    comm: &Comm,
    out: &[u8],
    dest: i32,
    into: &mut [u8],
    source: i32,
    tag: i32,
    piece: usize,
) -> Result<()> {
    exchange_with_peers(
        op,
        comm,
        vec![(out, dest)],
        vec![(into, source)],
        tag,
        piece,
    )
}

/// Posts `MPI_Irecv`s into `into` from its rank and `MPI_Isend`s of
/// `out` to its rank (several where one is over `MAX_MESSAGE`), all with
/// `tag`, and waits for them within the communicator's timeout (as
/// `call`), with `patience`.
fn exchange(
    op: &'static str,
    comm: &Comm,
    call: &'static str,
    (out, into): (Option<Out<'_>>, Option<In<'_>>),
    tag: i32,
    patience: Patience,
) -> Result<()> {
    let outs = out.into_iter().collect();
    let ins = into.into_iter().collect();
    exchange_with(op, comm, call, (outs, ins), tag, patience)
}

/// Sends the messages `pieces` to `dest` with `tag`, in order, all posted
/// at once (`MPI_Isend`s) and waited for together within the timeout: the
/// pieces of one message need no round trip each.
pub(crate) fn send_all(
    op: &'static str,
    comm: &Comm,
    pieces: Vec<&[u8]>,
    dest: i32,
    tag: i32,
) -> Result<()> {
    exchange_all(op, comm, "MPI_Send", (pieces, dest), (Vec::new(), 0), tag)
}

/// Receives the messages `pieces` (each exactly its length) from `source`
/// with `tag`, in order, all posted at once (`MPI_Irecv`s).
pub(crate) fn recv_all(
    op: &'static str,
    comm: &Comm,
    pieces: Vec<&mut [u8]>,
    source: i32,
    tag: i32,
) -> Result<()> {
    exchange_all(op, comm, "MPI_Recv", (Vec::new(), 0), (pieces, source), tag)
}

/// [`exchange_with`] of every slice of `outs` to `dest` and of `ins`
/// from `source`.
fn exchange_all(
    op: &'static str,
    comm: &Comm,
    call: &'static str,
    (outs, dest): (Vec<&[u8]>, i32),
    (ins, source): (Vec<&mut [u8]>, i32),
    tag: i32,
) -> Result<()> {
    let outs = outs.into_iter().map(|out| (out, dest)).collect();
    let ins = ins.into_iter().map(|into| (into, source)).collect();
    exchange_with(op, comm, call, (outs, ins), tag, Patience::NAP)
}

/// Each message of `outs` to the rank beside it, and each of `ins`
/// (exactly its length) from the rank beside it, all with `tag` and cut
/// into messages of `piece` bytes (the last shorter; one empty message
/// for an empty slice), all posted at once and waited for together
/// within the communicator's timeout: the exchange of a reduce-scatter
/// in which every rank sends every other its chunk at once
/// (`exec::Whole::direct_reduce_scatter`).
pub(crate) fn exchange_with_peers(
    op: &'static str,
    comm: &Comm,
    outs: Vec<(&[u8], i32)>,
    ins: Vec<(&mut [u8], i32)>,
    tag: i32,
    piece: usize,
) -> Result<()> {
    let piece = piece.max(1);
    let mut out_pieces = Vec::new();
    for (out, dest) in outs {
        if out.is_empty() {
            out_pieces.push((out, dest));
        } else {
            out_pieces.extend(out.chunks(piece).map(|p| (p, dest)));
        }
    }
    let mut in_pieces = Vec::new();
    for (into, source) in ins {
        if into.is_empty() {
            in_pieces.push((into, source));
        } else {
            in_pieces.extend(into.chunks_mut(piece).map(|p| (p, source)));
        }
    }
    let pieces = (out_pieces, in_pieces);
    exchange_with(op, comm, "MPI_Sendrecv", pieces, tag, Patience::NAP)
}

/// Posts `MPI_Irecv`s into every slice of `ins` from the rank beside it,
/// then `MPI_Isend`s of every slice of `outs` to the rank beside it, all
/// with `tag` and each in order, and waits for them within the
/// communicator's timeout (as `call`), with `patience`.
fn exchange_with(
    op: &'static str,
    comm: &Comm,
    call: &'static str,
    (outs, ins): (Vec<Out<'_>>, Vec<In<'_>>),
    tag: i32,
    patience: Patience,
) -> Result<()> {
    comm.state.usable(op)?;
    let mut transfers = Vec::new();
    let mut posted = Ok(());
    for (into, source) in ins {
        let (ptr, len) = (into.as_mut_ptr(), into.len());
        // SAFETY: `into` is borrowed mutably until this returns (the slices
        // of `ins` are distinct borrows, so they do not overlap), and
        // `finish` with `Abandon::Cancel` returns only once MPI no longer
        // writes it (it aborts the job where MPI cannot give it back).
        posted = unsafe { irecv(op, comm, ptr, len, source, tag, &mut transfers) };
        if posted.is_err() {
            break;
        }
    }
    for (out, dest) in outs {
        if posted.is_err() {
            break;
        }
        let (ptr, len) = (out.as_ptr(), out.len());
        // SAFETY: `out` is borrowed until this returns (a shared borrow,
        // distinct from those of `ins`, so they do not overlap), and
        // `finish` returns only once MPI no longer reads it, as above.
        posted = unsafe { isend(op, comm, ptr, len, dest, tag, &mut transfers) };
    }
    let how = (Abandon::Cancel, patience);
    finish_with(op, comm, call, posted, &mut transfers, how)
}

/// `MPI_Bcast` of `bytes` from `root` (every rank passes the same
/// length) as `MPI_Ibcast`s of `piece` bytes each (the last shorter),
/// posted at once and waited for within the timeout: the messages of a
/// pipelined broadcast (`pipeline::Communicator::broadcast_pieces`), which
/// the other ranks may post one piece at a time. MPI cannot cancel a
/// collective, so where the timeout passes the job is aborted.
pub(crate) fn broadcast(
    op: &'static str,
    comm: &Comm,
    bytes: &mut [u8],
    root: i32,
    piece: usize,
) -> Result<()> {
    comm.state.usable(op)?;
    let mut transfers = Vec::new();
    let mut posted = Ok(());
    for part in bytes.chunks_mut(piece.max(1)) {
        let (ptr, len) = (part.as_mut_ptr(), part.len());
        // SAFETY: `part` is borrowed mutably until this returns (the pieces
        // of `bytes` do not overlap), and `finish` returns only once MPI no
        // longer touches it (it aborts the job rather than return while MPI
        // may).
        posted = unsafe { ibcast(op, comm, ptr, len, root, &mut transfers) };
        if posted.is_err() {
            break;
        }
    }
    finish(
        op,
        comm,
        "MPI_Bcast",
        posted,
        &mut transfers,
        Abandon::Abort,
    )
}

/// `MPI_Allgather` of one small fixed-size record per rank: `mine` from
/// this rank, into `all` (`mine.len()` times the number of ranks), as an
/// `MPI_Iallgather` of copies that are leaked where the timeout passes
/// (MPI cannot cancel a collective; the copies are as small as the
/// records).
pub(crate) fn allgather(op: &'static str, comm: &Comm, mine: &[u8], all: &mut [u8]) -> Result<()> {
    debug_assert!(mine.len() <= MAX_MESSAGE);
    debug_assert!(all.len() % mine.len().max(1) == 0);
    comm.state.usable(op)?;
    let send: Box<[u8]> = mine.into();
    let mut gathered: Box<[u8]> = vec![0u8; all.len()].into_boxed_slice();
    // SAFETY: a null handle is a valid out-value for MPI to replace.
    let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `send` is readable for its length and `gathered` writable
    // for the communicator's size times it (the caller sizes `all` so);
    // both fit a c_int and are separate heap allocations, which stay alive
    // until the request completes: `finish` returns before that only with
    // a timeout, and then both are leaked below. `comm` is live.
    let rc = unsafe {
        ffi::MPI_Iallgather(
            send.as_ptr().cast::<c_void>(),
            send.len() as c_int,
            byte_type(),
            gathered.as_mut_ptr().cast::<c_void>(),
            send.len() as c_int,
            byte_type(),
            comm.handle,
            &mut request,
        )
    };
    check(op, "MPI_Iallgather", rc)?;
    let mut transfers = [Transfer { request, due: None }];
    match finish(
        op,
        comm,
        "MPI_Allgather",
        Ok(()),
        &mut transfers,
        Abandon::Leak,
    ) {
        Ok(()) => {
            all.copy_from_slice(&gathered);
            Ok(())
        }
        Err(e) => {
            if matches!(e, Error::Timeout { .. }) {
                Box::leak(send);
                Box::leak(gathered);
            }
            Err(e)
        }
    }
}

/// `MPI_Barrier`, as an `MPI_Ibarrier` waited for within the timeout (a
/// barrier has no memory, so one that times out is simply left to MPI).
pub(crate) fn barrier(op: &'static str, comm: &Comm) -> Result<()> {
    comm.state.usable(op)?;
    // SAFETY: a null handle is a valid out-value for MPI to replace.
    let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `comm` is live; `request` is a valid out-pointer.
    let rc = unsafe { ffi::MPI_Ibarrier(comm.handle, &mut request) };
    check(op, "MPI_Ibarrier", rc)?;
    let mut transfers = [Transfer { request, due: None }];
    finish(
        op,
        comm,
        "MPI_Barrier",
        Ok(()),
        &mut transfers,
        Abandon::Leak,
    )
}
