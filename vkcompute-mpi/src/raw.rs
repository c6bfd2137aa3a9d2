//! Thin functions over the MPI calls this crate makes: each checks the
//! return code (the communicator has `MPI_ERRORS_RETURN`) and turns it into
//! an [`Error::Mpi`], and splits a byte range too large for one MPI count
//! (a C `int`) into several messages. Everything moves as `MPI_BYTE`-sized
//! `uint8_t` elements; the types are the callers' business.
//!
//! rsmpi's safe wrappers ignore MPI's return codes (they rely on the
//! default `MPI_ERRORS_ARE_FATAL`), so the data calls go through its `ffi`
//! module here instead.
#![allow(
    unsafe_code,
    reason = "the raw MPI calls, each over a slice whose length is its count"
)]

use std::os::raw::{c_int, c_void};
use std::sync::Arc;

use mpi::ffi;

use crate::deadline::{self, finish, Abandon};
use crate::error::{Error, Result};

/// The most bytes one MPI message of this crate carries (1 GiB, well under
/// `i32::MAX`); longer ranges travel as several messages in order.
pub(crate) const MAX_MESSAGE: usize = 1 << 30;

/// A raw communicator handle (`MPI_Comm`), valid while the
/// [`Communicator`](crate::Communicator) that holds its owner lives, and
/// the state its waits share: the timeout, and whether one passed.
#[derive(Clone)]
pub(crate) struct Comm {
    pub(crate) handle: ffi::MPI_Comm,
    pub(crate) state: Arc<deadline::WaitState>,
}

// SAFETY: an MPI handle is a plain value, which any thread may hold and
// pass to MPI; whether a thread may call MPI at all is the thread level's
// rule, which `Communicator` enforces before every call it makes
// (`Communicator::check_thread`).
unsafe impl Send for Comm {}
// SAFETY: as for `Send`: sharing the value is sharing an integer-like handle.
unsafe impl Sync for Comm {}

impl Comm {
    pub(crate) fn new(handle: ffi::MPI_Comm) -> Comm {
        Comm {
            handle,
            state: Arc::new(deadline::WaitState::default()),
        }
    }
}

pub(crate) fn byte_type() -> ffi::MPI_Datatype {
    // SAFETY: a constant handle that rsmpi's C shim initialises statically.
    unsafe { ffi::RSMPI_UINT8_T }
}

/// `MPI_Error_string` of `code`.
fn error_string(code: c_int) -> String {
    let mut text = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: `text` holds MPI_MAX_ERROR_STRING characters and more, as the
    // call requires; `len` is a valid out-pointer.
    let rc = unsafe { ffi::MPI_Error_string(code, text.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return "(MPI_Error_string failed too)".into();
    }
    text.truncate(len.clamp(0, text.len() as c_int) as usize);
    String::from_utf8_lossy(&text).into_owned()
}

/// `Ok` for `MPI_SUCCESS`, else the error of `call` within `op`.
pub(crate) fn check(op: &'static str, call: &'static str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Mpi {
            op,
            call,
            code: rc,
            message: error_string(rc),
        })
    }
}

/// The pieces of `len` bytes that travel as separate messages.
fn pieces(len: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..len.div_ceil(MAX_MESSAGE).max(1))
        .map(move |i| i * MAX_MESSAGE..((i + 1) * MAX_MESSAGE).min(len))
}

/// The received byte count of `status`.
fn received(op: &'static str, status: &ffi::MPI_Status) -> Result<usize> {
    let mut count: c_int = 0;
    // SAFETY: `status` was filled in by a completed receive.
    check(op, "MPI_Get_count", unsafe {
        ffi::MPI_Get_count(status, byte_type(), &mut count)
    })?;
    Ok(count.max(0) as usize)
}

fn truncated(op: &'static str, peer: i32, got: usize, want: usize) -> Error {
    Error::Protocol {
        op,
        peer,
        detail: format!("a message of {got} bytes arrived where {want} were due"),
    }
}

/// `MPI_Send` of `bytes` to `dest` with `tag` (posted as `MPI_Isend`s
/// and waited for within the communicator's timeout).
pub(crate) fn send(op: &'static str, comm: &Comm, bytes: &[u8], dest: i32, tag: i32) -> Result<()> {
    exchange(op, comm, "MPI_Send", Some((bytes, dest)), None, tag)
}

/// `MPI_Recv` of exactly `bytes.len()` bytes from `source` with `tag`
/// (posted as `MPI_Irecv`s and waited for within the timeout).
pub(crate) fn recv(
    op: &'static str,
    comm: &Comm,
    bytes: &mut [u8],
    source: i32,
    tag: i32,
) -> Result<()> {
    exchange(op, comm, "MPI_Recv", None, Some((bytes, source)), tag)
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
    exchange(op, comm, "MPI_Sendrecv", out, into, tag)
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

/// Posts `MPI_Irecv`s into `into` from its rank and `MPI_Isend`s of `out`
/// to its rank, all with `tag`, and waits for them within the
/// communicator's timeout (as `call`).
fn exchange(
    op: &'static str,
    comm: &Comm,
    call: &'static str,
    out: Option<(&[u8], i32)>,
    into: Option<(&mut [u8], i32)>,
    tag: i32,
) -> Result<()> {
    let outs: Vec<&[u8]> = out.iter().map(|(bytes, _)| *bytes).collect();
    let dest = out.as_ref().map_or(0, |(_, dest)| *dest);
    let source = into.as_ref().map_or(0, |(_, source)| *source);
    let ins: Vec<&mut [u8]> = into.into_iter().map(|(bytes, _)| bytes).collect();
    exchange_all(op, comm, call, (outs, dest), (ins, source), tag)
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
    exchange_with(op, comm, call, outs, ins, tag)
}

/// Each message of `outs` to the rank beside it, and each of `ins`
/// (exactly its length) from the rank beside it, all with `tag` and cut
/// into messages of `piece` bytes (the last shorter; one empty message
/// for an empty slice), all posted at once and waited for together
/// within the communicator's timeout: the exchange of a reduce-scatter
/// in which every rank sends every other its chunk at once
/// (`Communicator::allreduce_mapped`).
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
    exchange_with(op, comm, "MPI_Sendrecv", out_pieces, in_pieces, tag)
}

/// Posts `MPI_Irecv`s into every slice of `ins` from the rank beside it,
/// then `MPI_Isend`s of every slice of `outs` to the rank beside it, all
/// with `tag` and each in order, and waits for them within the
/// communicator's timeout (as `call`).
fn exchange_with(
    op: &'static str,
    comm: &Comm,
    call: &'static str,
    outs: Vec<(&[u8], i32)>,
    ins: Vec<(&mut [u8], i32)>,
    tag: i32,
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
    finish(op, comm, call, posted, &mut transfers, Abandon::Cancel)
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

/// Posts `MPI_Ibcast`s of `len` bytes at `ptr` from `root` (one per
/// [`MAX_MESSAGE`] bytes, as [`isend`] splits them), onto `out`. An
/// empty range posts nothing.
///
/// # Safety
///
/// `ptr` is valid for reads (at the root) or writes (elsewhere) of `len`
/// bytes, and nothing else writes (or, off the root, reads) them, until
/// every transfer pushed here completes; a collective cannot be
/// cancelled, so the caller waits for them with [`Abandon::Abort`].
pub(crate) unsafe fn ibcast(
    op: &'static str,
    comm: &Comm,
    ptr: *mut u8,
    len: usize,
    root: i32,
    out: &mut Vec<Transfer>,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    for piece in pieces(len) {
        // SAFETY: a null handle is a valid out-value for MPI to replace.
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: the caller keeps `ptr..ptr + len` valid and otherwise
        // untouched until the transfer completes; the piece lies inside it
        // and fits a c_int; `comm` is live; `request` is a valid out-pointer.
        let rc = unsafe {
            ffi::MPI_Ibcast(
                ptr.add(piece.start).cast::<c_void>(),
                piece.len() as c_int,
                byte_type(),
                root,
                comm.handle,
                &mut request,
            )
        };
        check(op, "MPI_Ibcast", rc)?;
        out.push(Transfer { request, due: None });
    }
    Ok(())
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

/// The lowest rank of `comm` among those that share memory with this one
/// (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`, keyed by `rank`): the
/// same number on every rank of one node, so it names the node. A
/// collective call (like the split, it has no non-blocking form in MPI
/// 3.1, so the communicator's timeout does not bound it); the node's
/// communicator is freed before this returns.
pub(crate) fn node_leader(op: &'static str, comm: &Comm, rank: i32) -> Result<i32> {
    comm.state.usable(op)?;
    // SAFETY: a null handle is a valid out-value for MPI to replace.
    let mut node = unsafe { ffi::RSMPI_COMM_NULL };
    // SAFETY: `comm` is live; the split type and the null info are MPI's
    // constants (statics of rsmpi's C shim); `node` is a valid out-pointer.
    check(op, "MPI_Comm_split_type", unsafe {
        ffi::MPI_Comm_split_type(
            comm.handle,
            ffi::RSMPI_COMM_TYPE_SHARED,
            rank,
            ffi::RSMPI_INFO_NULL,
            &mut node,
        )
    })?;
    let leader = first_rank_in(op, node, comm);
    // SAFETY: `node` is the communicator the split just made, freed once.
    let freed = check(op, "MPI_Comm_free", unsafe {
        ffi::MPI_Comm_free(&mut node)
    });
    let leader = leader?;
    freed?;
    Ok(leader)
}

/// The rank in `comm` of rank 0 of `part`, a communicator of some of
/// `comm`'s processes (local: group calls only).
fn first_rank_in(op: &'static str, part: ffi::MPI_Comm, comm: &Comm) -> Result<i32> {
    // SAFETY: null handles are valid out-values for MPI to replace.
    let (mut part_group, mut group) = unsafe { (ffi::RSMPI_GROUP_NULL, ffi::RSMPI_GROUP_NULL) };
    // SAFETY: `part` is live; `part_group` is a valid out-pointer.
    check(op, "MPI_Comm_group", unsafe {
        ffi::MPI_Comm_group(part, &mut part_group)
    })?;
    // SAFETY: `comm` is live; `group` is a valid out-pointer.
    let mut result = check(op, "MPI_Comm_group", unsafe {
        ffi::MPI_Comm_group(comm.handle, &mut group)
    });
    let first: c_int = 0;
    let mut translated: c_int = -1;
    if result.is_ok() {
        // SAFETY: both groups are live; one rank in, one out, each a
        // valid pointer to one c_int.
        result = check(op, "MPI_Group_translate_ranks", unsafe {
            ffi::MPI_Group_translate_ranks(part_group, 1, &first, group, &mut translated)
        });
        // SAFETY: `group` was made above and is freed once.
        let freed = check(op, "MPI_Group_free", unsafe {
            ffi::MPI_Group_free(&mut group)
        });
        result = result.and(freed);
    }
    // SAFETY: `part_group` was made above and is freed once.
    let freed = check(op, "MPI_Group_free", unsafe {
        ffi::MPI_Group_free(&mut part_group)
    });
    result.and(freed)?;
    Ok(translated)
}

/// Makes MPI return error codes on `comm` instead of aborting the job.
pub(crate) fn set_errors_return(op: &'static str, comm: &Comm) -> Result<()> {
    // SAFETY: `comm` is live; the handler is MPI's predefined constant.
    check(op, "MPI_Comm_set_errhandler", unsafe {
        ffi::MPI_Comm_set_errhandler(comm.handle, ffi::RSMPI_ERRORS_RETURN)
    })
}

/// A non-blocking MPI operation under way (`MPI_Isend` or `MPI_Irecv`),
/// and, for a receive, the byte count its completion must show.
///
/// Whoever posts one keeps the memory it reads or writes alive and
/// untouched until [`test`](Self::test) returns `Ok(true)` or an error, or
/// [`cancel`](Self::cancel) returns.
pub(crate) struct Transfer {
    pub(crate) request: ffi::MPI_Request,
    /// For a receive: the bytes due and the peer they come from.
    pub(crate) due: Option<(usize, i32)>,
}

/// Posts `MPI_Isend`s of `len` bytes at `ptr` to `dest` with `tag` (one per
/// [`MAX_MESSAGE`] bytes, as [`send`] splits them), onto `out`.
///
/// # Safety
///
/// `ptr` is readable for `len` bytes, and nothing writes them, until every
/// transfer pushed here completes.
pub(crate) unsafe fn isend(
    op: &'static str,
    comm: &Comm,
    ptr: *const u8,
    len: usize,
    dest: i32,
    tag: i32,
    out: &mut Vec<Transfer>,
) -> Result<()> {
    for piece in pieces(len) {
        // SAFETY: a null handle is a valid out-value for MPI to replace.
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: the caller keeps `ptr..ptr + len` readable until the
        // transfer completes; the piece lies inside it and fits a c_int;
        // `comm` is live; `request` is a valid out-pointer.
        let rc = unsafe {
            ffi::MPI_Isend(
                ptr.add(piece.start).cast::<c_void>(),
                piece.len() as c_int,
                byte_type(),
                dest,
                tag,
                comm.handle,
                &mut request,
            )
        };
        check(op, "MPI_Isend", rc)?;
        out.push(Transfer { request, due: None });
    }
    Ok(())
}

/// Posts `MPI_Irecv`s of exactly `len` bytes into `ptr` from `source` with
/// `tag` (split as [`recv`] splits them), onto `out`.
///
/// # Safety
///
/// `ptr` is writable for `len` bytes, and nothing else reads or writes
/// them, until every transfer pushed here completes or is cancelled.
pub(crate) unsafe fn irecv(
    op: &'static str,
    comm: &Comm,
    ptr: *mut u8,
    len: usize,
    source: i32,
    tag: i32,
    out: &mut Vec<Transfer>,
) -> Result<()> {
    for piece in pieces(len) {
        // SAFETY: as in `isend`.
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // SAFETY: the caller keeps `ptr..ptr + len` writable and otherwise
        // untouched until the transfer completes; the piece lies inside it
        // and fits a c_int; `comm` is live; `request` is a valid out-pointer.
        let rc = unsafe {
            ffi::MPI_Irecv(
                ptr.add(piece.start).cast::<c_void>(),
                piece.len() as c_int,
                byte_type(),
                source,
                tag,
                comm.handle,
                &mut request,
            )
        };
        check(op, "MPI_Irecv", rc)?;
        out.push(Transfer {
            request,
            due: Some((piece.len(), source)),
        });
    }
    Ok(())
}

// SAFETY: an `MPI_Request` is a plain handle that MPI lets any thread
// test or wait for, within the thread level (enforced by `Communicator`,
// whose thread alone moves its transfers on below MPI_THREAD_MULTIPLE).
unsafe impl Send for Transfer {}

impl Transfer {
    /// `MPI_Test`: whether the transfer is complete (then MPI no longer
    /// touches its memory). An error completes it too (with
    /// `MPI_ERRORS_RETURN` a failed request is finished, not pending), as
    /// does a receive of the wrong length.
    pub(crate) fn test(&mut self, op: &'static str) -> Result<bool> {
        let mut flag: c_int = 0;
        // SAFETY: a zeroed status is a valid out-value for MPI to fill in.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: `request` is a request this transfer posted (or the null
        // request once complete); `flag` and `status` are valid out-pointers.
        let rc = unsafe { ffi::MPI_Test(&mut self.request, &mut flag, &mut status) };
        check(op, "MPI_Test", rc)?;
        if flag == 0 {
            return Ok(false);
        }
        self.check_count(op, &status).map(|()| true)
    }

    /// Whether a completed receive brought the bytes due.
    fn check_count(&self, op: &'static str, status: &ffi::MPI_Status) -> Result<()> {
        if let Some((want, peer)) = self.due {
            let got = received(op, status)?;
            if got != want {
                return Err(truncated(op, peer, got, want));
            }
        }
        Ok(())
    }

    /// `MPI_Cancel` alone: asks MPI to cancel the transfer, which still has
    /// to be completed (`test`) before its memory is free.
    pub(crate) fn request_cancel(&mut self, op: &'static str) -> Result<()> {
        // SAFETY: `request` is a request this transfer posted.
        check(op, "MPI_Cancel", unsafe {
            ffi::MPI_Cancel(&mut self.request)
        })
    }

    /// `MPI_Cancel` and `MPI_Wait`: whether the operation was cancelled
    /// (nothing was received) rather than completed. Either way MPI no
    /// longer touches its memory when this returns `Ok`.
    pub(crate) fn cancel(&mut self, op: &'static str) -> Result<bool> {
        // SAFETY: `request` is a request this transfer posted.
        check(op, "MPI_Cancel", unsafe {
            ffi::MPI_Cancel(&mut self.request)
        })?;
        // SAFETY: as in `test`.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: `request` was posted and cancelled (a cancelled request
        // still has to be completed); `status` is a valid out-pointer.
        check(op, "MPI_Wait", unsafe {
            ffi::MPI_Wait(&mut self.request, &mut status)
        })?;
        let mut flag: c_int = 0;
        // SAFETY: `status` was filled in by the completed wait.
        check(op, "MPI_Test_cancelled", unsafe {
            ffi::MPI_Test_cancelled(&status, &mut flag)
        })?;
        Ok(flag != 0)
    }
}
