//! One non-blocking MPI operation under way ([`Transfer`]), and the
//! `unsafe` functions that post them over raw memory (for this layer's
//! own safe wrappers only).

use std::os::raw::{c_int, c_void};

use mpi::ffi;

use super::{byte_type, check, pieces, received, truncated, Comm};
use crate::error::Result;

/// Posts one non-blocking call per piece of `len` bytes (one per
/// [`MAX_MESSAGE`](super::MAX_MESSAGE) bytes, as [`send`](super::send)
/// splits them), onto `out`: `post(start, count, request)` makes MPI's
/// call for bytes `start..start + count` and returns its code; `due` is
/// the peer a receive's completion must name, `None` for a send.
fn post_pieces(
    op: &'static str,
    call: &'static str,
    len: usize,
    due: Option<i32>,
    out: &mut Vec<Transfer>,
    mut post: impl FnMut(usize, c_int, &mut ffi::MPI_Request) -> c_int,
) -> Result<()> {
    for piece in pieces(len) {
        // SAFETY: a null handle is a valid out-value for MPI to replace.
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // A piece of at most MAX_MESSAGE bytes fits a c_int.
        check(
            op,
            call,
            post(piece.start, piece.len() as c_int, &mut request),
        )?;
        out.push(Transfer {
            request,
            due: due.map(|peer| (piece.len(), peer)),
        });
    }
    Ok(())
}

/// Posts `MPI_Ibcast`s of `len` bytes at `ptr` from `root` (split as
/// [`isend`] splits them), onto `out`. An empty range posts nothing.
///
/// # Safety
///
/// `ptr` is valid for reads (at the root) or writes (elsewhere) of `len`
/// bytes, and nothing else writes (or, off the root, reads) them, until
/// every transfer pushed here completes; a collective cannot be
/// cancelled, so the caller waits for them with [`Abandon::Abort`].
pub(super) unsafe fn ibcast(
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
    post_pieces(op, "MPI_Ibcast", len, None, out, |start, count, request| {
        // SAFETY: the caller keeps `ptr..ptr + len` valid and otherwise
        // untouched until the transfer completes; the piece lies inside it;
        // `comm` is live; `request` is a valid out-pointer.
        unsafe {
            ffi::MPI_Ibcast(
                ptr.add(start).cast::<c_void>(),
                count,
                byte_type(),
                root,
                comm.handle,
                request,
            )
        }
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

/// Posts `MPI_Isend`s of `len` bytes at `ptr` to `dest` with `tag`, onto
/// `out`.
///
/// # Safety
///
/// `ptr` is readable for `len` bytes, and nothing writes them, until every
/// transfer pushed here completes.
pub(super) unsafe fn isend(
    op: &'static str,
    comm: &Comm,
    ptr: *const u8,
    len: usize,
    dest: i32,
    tag: i32,
    out: &mut Vec<Transfer>,
) -> Result<()> {
    post_pieces(op, "MPI_Isend", len, None, out, |start, count, request| {
        // SAFETY: the caller keeps `ptr..ptr + len` readable until the
        // transfer completes; the piece lies inside it; `comm` is live;
        // `request` is a valid out-pointer.
        unsafe {
            ffi::MPI_Isend(
                ptr.add(start).cast::<c_void>(),
                count,
                byte_type(),
                dest,
                tag,
                comm.handle,
                request,
            )
        }
    })
}

/// Posts `MPI_Irecv`s of exactly `len` bytes into `ptr` from `source` with
/// `tag` (split as [`recv`](super::recv) splits them), onto `out`.
///
/// # Safety
///
/// `ptr` is writable for `len` bytes, and nothing else reads or writes
/// them, until every transfer pushed here completes or is cancelled.
pub(super) unsafe fn irecv(
    op: &'static str,
    comm: &Comm,
    ptr: *mut u8,
    len: usize,
    source: i32,
    tag: i32,
    out: &mut Vec<Transfer>,
) -> Result<()> {
    post_pieces(
        op,
        "MPI_Irecv",
        len,
        Some(source),
        out,
        |start, count, request| {
            // SAFETY: the caller keeps `ptr..ptr + len` writable and otherwise
            // untouched until the transfer completes; the piece lies inside it;
            // `comm` is live; `request` is a valid out-pointer.
            unsafe {
                ffi::MPI_Irecv(
                    ptr.add(start).cast::<c_void>(),
                    count,
                    byte_type(),
                    source,
                    tag,
                    comm.handle,
                    request,
                )
            }
        },
    )
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
