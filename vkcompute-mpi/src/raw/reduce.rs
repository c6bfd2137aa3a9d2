//! MPI's own allreduce over a buffer in pieces ([`allreduce_pieces`]):
//! one `MPI_Iallreduce` a piece (from an operand into its landing), each
//! posted as soon as its memory is ready, a window of them under way at
//! once, each piece handed back as soon as MPI is done with it. The memory is borrowed for the
//! call, which returns only once MPI is done with all of it (within the
//! communicator's timeout; a collective cannot be cancelled, so past it
//! the job is aborted: [`wait`](super::wait)).

use std::ops::Range;
use std::os::raw::{c_int, c_void};
use std::time::Instant;

use mpi::ffi;

use super::pieces::{AbortOnUnwind, Landing, Source};
use super::transfer::Transfer;
use super::wait::{finish_until, pause, Abandon};
use super::{check, Comm, MAX_MESSAGE};
use crate::element::{ElementType, ReduceOp};
use crate::error::Result;

/// An element type and reduction that MPI has natively: `MPI_FLOAT`,
/// `MPI_DOUBLE`, `MPI_INT32_T`, `MPI_UINT32_T`, `MPI_INT64_T`,
/// `MPI_UINT64_T` with `MPI_SUM`, `MPI_PROD`, `MPI_MIN`, `MPI_MAX`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reduction {
    datatype: ffi::MPI_Datatype,
    op: ffi::MPI_Op,
    size: usize,
}

impl Reduction {
    /// MPI's datatype and operation for `ty` and `op`; `None` for an
    /// element type that cannot be reduced.
    pub(crate) fn new(ty: ElementType, op: ReduceOp) -> Option<Reduction> {
        // SAFETY: constant handles that rsmpi's C shim initialises
        // statically.
        let datatype = unsafe {
            match ty {
                ElementType::F32 => ffi::RSMPI_FLOAT,
                ElementType::F64 => ffi::RSMPI_DOUBLE,
                ElementType::I32 => ffi::RSMPI_INT32_T,
                ElementType::U32 => ffi::RSMPI_UINT32_T,
                ElementType::I64 => ffi::RSMPI_INT64_T,
                ElementType::U64 => ffi::RSMPI_UINT64_T,
                _ => return None,
            }
        };
        // SAFETY: as above.
        let op = unsafe {
            match op {
                ReduceOp::Sum => ffi::RSMPI_SUM,
                ReduceOp::Product => ffi::RSMPI_PROD,
                ReduceOp::Min => ffi::RSMPI_MIN,
                ReduceOp::Max => ffi::RSMPI_MAX,
            }
        };
        Some(Reduction {
            datatype,
            op,
            size: ty.size(),
        })
    }
}

/// Posts `MPI_Iallreduce`s of the `len` bytes at `send` into the `len`
/// bytes at `recv` (one per [`MAX_MESSAGE`] bytes), onto `out`. An empty
/// range posts nothing.
///
/// # Safety
///
/// `send` is valid for reads and `recv` for writes of `len` bytes, both
/// aligned for the element type and apart, and nothing else writes (or,
/// at `recv`, reads) them until every transfer pushed here completes; a
/// collective cannot be cancelled, so the caller waits for them with
/// [`Abandon::Abort`].
unsafe fn iallreduce(
    op: &'static str,
    comm: &Comm,
    (send, recv, len): (*const u8, *mut u8, usize),
    reduction: Reduction,
    out: &mut Vec<Transfer>,
) -> Result<()> {
    let size = reduction.size.max(1);
    let mut start = 0;
    while start < len {
        let end = (start + MAX_MESSAGE).min(len);
        // SAFETY: a null handle is a valid out-value for MPI to replace.
        let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
        // At most MAX_MESSAGE bytes: the count fits a c_int.
        let count = ((end - start) / size) as c_int;
        // SAFETY: the caller keeps both ranges valid and otherwise
        // untouched until the transfer completes; the part lies inside
        // them (MAX_MESSAGE is a multiple of every element size); `comm`
        // is live; `request` is a valid out-pointer.
        let rc = unsafe {
            ffi::MPI_Iallreduce(
                send.add(start).cast::<c_void>(),
                recv.add(start).cast::<c_void>(),
                count,
                reduction.datatype,
                reduction.op,
                comm.handle,
                &mut request,
            )
        };
        check(op, "MPI_Iallreduce", rc)?;
        out.push(Transfer { request, due: None });
        start = end;
    }
    Ok(())
}

/// The pieces of [`allreduce_pieces`] under way: their transfers, which
/// of those are unfinished, and each piece's memory while MPI holds it.
struct Window<'m> {
    transfers: Vec<Transfer>,
    open: Vec<usize>,
    at: Vec<Range<usize>>,
    held: Vec<Option<(Source<'m>, Landing<'m>)>>,
    /// The pieces handed back so far (the first ones).
    handed: usize,
    start: Instant,
}

impl<'m> Window<'m> {
    /// Moves the pieces under way on (with `wait`, until the oldest one is
    /// done), then hands back, in order, those done: their memory goes
    /// back to its owner, then `reduced(p, in_place)`.
    fn settle(
        &mut self,
        op: &'static str,
        comm: &Comm,
        wait: bool,
        reduced: &mut impl FnMut(usize, bool),
    ) -> Result<()> {
        if wait && self.handed < self.at.len() {
            let waits = (&mut self.transfers[..], &mut self.open);
            let until = self.at[self.handed].clone();
            finish_until(op, comm, CALL, waits, until, (self.start, Abandon::Abort))?;
        } else {
            let mut first = None;
            let transfers = &mut self.transfers;
            self.open.retain(|&i| match transfers[i].test(op) {
                Ok(done) => !done,
                Err(e) => {
                    first.get_or_insert(e);
                    false
                }
            });
            if let Some(e) = first {
                return Err(e);
            }
        }
        while self.handed < self.at.len() {
            let p = self.handed;
            if self.open.iter().any(|i| self.at[p].contains(i)) {
                break;
            }
            let landed = self.held[p].take();
            let in_place = !matches!(landed, Some((_, Landing::Spare(_))));
            drop(landed);
            reduced(p, in_place);
            self.handed += 1;
        }
        Ok(())
    }
}

/// The MPI call a timeout names.
const CALL: &str = "MPI_Iallreduce";

/// MPI's allreduce of `reduction` over `count` pieces, at most `window`
/// of them under way at once. For each piece `p` in order: while
/// `ready(p)` says its memory is not ready yet, the pieces under way are
/// moved on (and handed back as they finish); then `memory(p)` gives its
/// memory, this rank's operand and where the result lands (of the same
/// whole elements; a scratch landing where this rank's own memory could
/// not be had), and its `MPI_Iallreduce` is posted. Once piece `p` is
/// reduced, and every earlier one handed back, its memory is dropped (it
/// goes back to its owner) and `reduced(p, landed)` is called (`landed`:
/// the result is in the landing given, not in a scratch one). Every rank posts the same pieces
/// in the same order. Returns once MPI is done with every piece's memory:
/// the first MPI error (which stops the posting and the calls of
/// `reduced`), or `Ok`.
///
/// A panic in a callback while reductions are under way aborts the
/// process: the memory they use cannot be freed.
pub(crate) fn allreduce_pieces<'m>(
    op: &'static str,
    comm: &Comm,
    reduction: Reduction,
    (count, window): (usize, usize),
    mut ready: impl FnMut(usize) -> bool,
    mut memory: impl FnMut(usize) -> (Source<'m>, Landing<'m>),
    mut reduced: impl FnMut(usize, bool),
) -> Result<()> {
    comm.state.usable(op)?;
    let window_len = window.max(1);
    let mut w = Window {
        transfers: Vec::new(),
        open: Vec::new(),
        at: Vec::with_capacity(count),
        held: Vec::with_capacity(count),
        handed: 0,
        start: Instant::now(),
    };
    // Declared after the memory, so dropped before it: a panic below while
    // reductions are under way ends the process instead of freeing memory
    // MPI still reads or writes.
    let _unwinding = AbortOnUnwind;
    let mut result = Ok(());
    for p in 0..count {
        // Room in the window.
        while result.is_ok() && p - w.handed >= window_len {
            result = w.settle(op, comm, true, &mut reduced);
        }
        // The piece's memory: the pieces under way move on meanwhile.
        while result.is_ok() && p > w.handed && !ready(p) {
            result = w.settle(op, comm, false, &mut reduced);
            comm.state.progress();
            pause(w.start);
        }
        if result.is_err() {
            break;
        }
        let (source, mut landing) = memory(p);
        let recv = landing.bytes();
        let (recv, len) = (recv.as_mut_ptr(), recv.len());
        let send = source.bytes();
        if send.len() < len {
            result = Err(crate::error::Error::Protocol {
                op,
                peer: -1,
                detail: format!("an operand of {} bytes for a result of {len}", send.len()),
            });
            break;
        }
        let send = send.as_ptr();
        w.held.push(Some((source, landing)));
        let before = w.transfers.len();
        // SAFETY: `send..send + len` and `recv..recv + len` are the
        // piece's memory (host buffers' mappings, a device buffer's
        // mapping or heap buffers: they stay put when they move into
        // `w.held`, and no two pieces share memory), dropped only once its
        // reductions are over or after `finish_until` over all (which
        // returns once MPI is done, aborting the job past the timeout); a
        // panic meanwhile aborts the process first (`AbortOnUnwind`).
        let posted =
            unsafe { iallreduce(op, comm, (send, recv, len), reduction, &mut w.transfers) };
        w.open.extend(before..w.transfers.len());
        w.at.push(before..w.transfers.len());
        if let Err(e) = posted {
            result = Err(e);
            break;
        }
    }
    while result.is_ok() && w.handed < w.at.len() {
        result = w.settle(op, comm, true, &mut reduced);
    }
    let all = 0..w.transfers.len();
    let waits = (&mut w.transfers[..], &mut w.open);
    let rest = finish_until(op, comm, CALL, waits, all, (w.start, Abandon::Abort));
    // Only now may the memory go.
    drop(w);
    result.and(rest)
}
