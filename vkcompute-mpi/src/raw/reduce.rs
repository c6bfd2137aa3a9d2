//! MPI's own allreduce or reduce over a buffer in pieces
//! ([`reduce_pieces`]): one `MPI_Iallreduce` (or `MPI_Ireduce`; between
//! two ranks a point-to-point message that the root reduces on the host,
//! [`Posting::Pair`]) a piece, from an operand into its landing, each
//! posted as soon as its memory is ready, a window of them under way at
//! once, each piece handed back as soon as MPI is done with it. The memory
//! is borrowed for the call, which returns only once MPI is done with all
//! of it: within the communicator's timeout, counted from the last piece
//! posted or finished; past it a collective cannot be cancelled, so the job is
//! aborted, and point-to-point messages are cancelled ([`wait`](super::wait)).

use std::ops::Range;
use std::os::raw::{c_int, c_void};
use std::time::Instant;

use mpi::ffi;

use super::pieces::{AbortOnUnwind, Landing, Source};
use super::transfer::{irecv, isend, Transfer};
use super::wait::{finish_until_since, pause, Abandon};
use super::{check, Comm, MAX_MESSAGE};
use crate::element::{ElementType, ReduceOp};
use crate::error::Result;

/// An element type and reduction that MPI has natively: `MPI_FLOAT`,
/// `MPI_DOUBLE`, `MPI_INT32_T`, `MPI_UINT32_T`, `MPI_INT64_T`,
/// `MPI_UINT64_T` with `MPI_SUM`, `MPI_PROD`, `MPI_MIN`, `MPI_MAX`; and
/// how each piece is posted ([`Posting`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Reduction {
    datatype: ffi::MPI_Datatype,
    op: ffi::MPI_Op,
    size: usize,
    posting: Posting,
}

/// How [`reduce_pieces`] posts each piece, and who keeps the result.
#[derive(Clone, Copy, Debug)]
enum Posting {
    /// `MPI_Iallreduce`: every rank's landing gets the result.
    All,
    /// `MPI_Ireduce` to this root, whose landing alone gets the result.
    Root(i32),
    /// A reduce of two ranks: the rank that is not `root` sends each piece
    /// of its operand to it (`peer` is then the root), and the root
    /// receives it from `peer` into its landing and reduces its own
    /// operand into it (`MPI_Reduce_local`). Open MPI 4.1's
    /// `MPI_Ireduce` of two ranks (libnbc's default, a commutative
    /// operation) runs a chain of 8 KiB segments, each moved on by a poll
    /// of the request: about 27 ms a piece of 4 MiB here, against 3 ms
    /// this way (BENCHMARKS.md, vkcompute-mpi).
    Pair { root: i32, peer: i32, tag: i32 },
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
            posting: Posting::All,
        })
    }

    /// The same reduction with its result at `root` only (`MPI_Ireduce`:
    /// the landings of the other ranks are left alone).
    pub(crate) fn to_root(self, root: i32) -> Reduction {
        Reduction {
            posting: Posting::Root(root),
            ..self
        }
    }

    /// The same reduction between the two ranks of a communicator, `rank`
    /// this one, with its result at `root` only: point-to-point messages
    /// with `tag`, the root reducing what arrives on the host
    /// ([`Posting::Pair`]).
    pub(crate) fn between_two(self, rank: i32, root: i32, tag: i32) -> Reduction {
        let peer = if rank == root { 1 - rank } else { root };
        Reduction {
            posting: Posting::Pair { root, peer, tag },
            ..self
        }
    }

    /// Whether the landings of rank `rank` get the result.
    pub(crate) fn lands_at(&self, rank: usize) -> bool {
        match self.posting {
            Posting::All => true,
            Posting::Root(root) | Posting::Pair { root, .. } => usize::try_from(root) == Ok(rank),
        }
    }

    /// The MPI call each piece takes, which a timeout names.
    fn call(&self) -> &'static str {
        match self.posting {
            Posting::All => "MPI_Iallreduce",
            Posting::Root(_) => "MPI_Ireduce",
            Posting::Pair { root, peer, .. } if peer == root => "MPI_Isend",
            Posting::Pair { .. } => "MPI_Irecv",
        }
    }

    /// What a timeout does with the pieces under way: a collective cannot
    /// be cancelled, point-to-point messages can.
    fn abandon(&self) -> Abandon {
        match self.posting {
            Posting::Pair { .. } => Abandon::Cancel,
            _ => Abandon::Abort,
        }
    }

    /// Reduces this rank's operand `send` into the piece that arrived at
    /// `recv` (the root of [`Posting::Pair`]; nothing elsewhere): `recv`
    /// becomes `send` op `recv`, in [`MAX_MESSAGE`] parts.
    fn reduce_arrived(&self, op: &'static str, send: &[u8], recv: &mut [u8]) -> Result<()> {
        let Posting::Pair { root, peer, .. } = self.posting else {
            return Ok(());
        };
        if peer == root {
            return Ok(());
        }
        let len = recv.len().min(send.len());
        for start in (0..len).step_by(MAX_MESSAGE) {
            let end = (start + MAX_MESSAGE).min(len);
            // At most MAX_MESSAGE bytes: the count fits a c_int.
            let count = ((end - start) / self.size.max(1)) as c_int;
            // SAFETY: both ranges are live slices of at least `end` bytes
            // (borrowed for the call, so nothing else touches them), apart
            // (one shared, one mutable borrow), and hold `count` whole
            // elements from `start`; MPI only reads `send` and writes
            // `recv` there.
            let rc = unsafe {
                ffi::MPI_Reduce_local(
                    send[start..end].as_ptr().cast::<c_void>(),
                    recv[start..end].as_mut_ptr().cast::<c_void>(),
                    count,
                    self.datatype,
                    self.op,
                )
            };
            check(op, "MPI_Reduce_local", rc)?;
        }
        Ok(())
    }
}

/// Posts the transfers of one piece, as `reduction` says ([`Posting`]):
/// `MPI_Iallreduce`s or `MPI_Ireduce`s of the `len` bytes at `send` into
/// the `len` bytes at `recv` (one per [`MAX_MESSAGE`] bytes), or between
/// two ranks the send of `send` or the receive into `recv`; onto `out`.
/// An empty range posts nothing.
///
/// # Safety
///
/// `send` is valid for reads and `recv` for writes of `len` bytes, both
/// aligned for the element type and apart, and nothing else writes (or,
/// at `recv`, reads) them until every transfer pushed here completes or
/// is cancelled; a collective cannot be cancelled, so the caller waits
/// for them with [`Reduction::abandon`].
unsafe fn post_piece(
    op: &'static str,
    comm: &Comm,
    (send, recv, len): (*const u8, *mut u8, usize),
    reduction: Reduction,
    out: &mut Vec<Transfer>,
) -> Result<()> {
    let (datatype, reduce) = (reduction.datatype, reduction.op);
    match reduction.posting {
        // SAFETY: the caller keeps `send` readable and untouched until the
        // transfer completes.
        Posting::Pair { root, peer, tag } if peer == root => unsafe {
            isend(op, comm, send, len, peer, tag, out)
        },
        // SAFETY: the caller keeps `recv` writable and untouched until the
        // transfer completes or is cancelled.
        Posting::Pair { peer, tag, .. } => unsafe { irecv(op, comm, recv, len, peer, tag, out) },
        posting => {
            let size = reduction.size.max(1);
            let mut start = 0;
            while start < len {
                let end = (start + MAX_MESSAGE).min(len);
                // SAFETY: a null handle is a valid out-value for MPI to
                // replace.
                let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
                // At most MAX_MESSAGE bytes: the count fits a c_int.
                let count = ((end - start) / size) as c_int;
                // SAFETY: the caller keeps both ranges valid and otherwise
                // untouched until the transfer completes; the part lies
                // inside them (MAX_MESSAGE is a multiple of every element
                // size); `comm` is live; `request` is a valid out-pointer.
                // (MPI_Ireduce writes `recv` at the root only.)
                let rc = unsafe {
                    let (send, recv) = (send.add(start).cast::<c_void>(), recv.add(start).cast());
                    match posting {
                        Posting::Root(root) => ffi::MPI_Ireduce(
                            send,
                            recv,
                            count,
                            datatype,
                            reduce,
                            root,
                            comm.handle,
                            &mut request,
                        ),
                        _ => ffi::MPI_Iallreduce(
                            send,
                            recv,
                            count,
                            datatype,
                            reduce,
                            comm.handle,
                            &mut request,
                        ),
                    }
                };
                check(op, reduction.call(), rc)?;
                out.push(Transfer { request, due: None });
                start = end;
            }
            Ok(())
        }
    }
}

/// The pieces of [`reduce_pieces`] under way: their transfers, which
/// of those are unfinished, and each piece's memory while MPI holds it.
struct Window<'m> {
    transfers: Vec<Transfer>,
    open: Vec<usize>,
    at: Vec<Range<usize>>,
    held: Vec<Option<(Source<'m>, Landing<'m>)>>,
    /// The pieces handed back so far (the first ones).
    handed: usize,
    /// When the pieces began: the spin of the waits counts from it.
    start: Instant,
    /// When the last piece was posted or handed back (at first, `start`):
    /// the timeout counts from it, so that it bounds each wait for the
    /// next piece, not the whole buffer (nor this rank's own wait for its
    /// device to fill a piece).
    progress: Instant,
    reduction: Reduction,
    /// This rank's own failure to reduce a piece that arrived: the other
    /// pieces still come and go, and it is returned at the end.
    local: Option<crate::error::Error>,
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
            let (call, abandon) = (self.reduction.call(), self.reduction.abandon());
            let clocks = (self.start, self.progress, abandon);
            finish_until_since(op, comm, call, waits, until, clocks)?;
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
            let mut landed = self.held[p].take();
            let mut in_place = !matches!(landed, Some((_, Landing::Spare(_))));
            if let Some((source, landing)) = &mut landed {
                let done = (self.reduction).reduce_arrived(op, source.bytes(), landing.bytes());
                if let Err(e) = done {
                    // This rank's own failure, like a device error: the
                    // piece's result is not handed back, the others come.
                    self.local.get_or_insert(e);
                    in_place = false;
                }
            }
            drop(landed);
            reduced(p, in_place);
            self.handed += 1;
            self.progress = Instant::now();
        }
        Ok(())
    }
}

/// MPI's allreduce of `reduction` (its reduce, where it has a root; between
/// two ranks, messages to the root: [`Posting`]) over `count` pieces, at
/// most `window` of them under way at once. For each piece `p` in order:
/// while `ready(p)` says its memory is not ready yet, the pieces under way
/// are moved on (and handed back as they finish); then `memory(p)` gives
/// its memory, this rank's operand and where the result lands (of the same
/// whole elements; a scratch landing where this rank's own memory could not
/// be had), and its transfers are posted. Once piece `p` is reduced (at a
/// pair's root, by this rank once it arrived), and every earlier one handed
/// back, its memory is dropped (it goes back to its owner) and `reduced(p,
/// landed)` is called (`landed`: the result is in the landing given, not in
/// a scratch one; only the root's landings get a reduce's result). Every
/// rank posts the same pieces in the same order. Returns once MPI is done
/// with every piece's memory: the first MPI error or timeout (which stops
/// the posting and the calls of `reduced`; the timeout counts from the last
/// piece posted or handed back), else a pair's root's failure to reduce a
/// piece (whose `landed` then says `false`, the other pieces going on), or
/// `Ok`.
///
/// A panic in a callback while reductions are under way aborts the
/// process: the memory they use cannot be freed.
pub(crate) fn reduce_pieces<'m>(
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
    let start = Instant::now();
    let mut w = Window {
        transfers: Vec::new(),
        open: Vec::new(),
        at: Vec::with_capacity(count),
        held: Vec::with_capacity(count),
        handed: 0,
        start,
        progress: start,
        reduction,
        local: None,
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
        // piece's memory (mappings or heap buffers: they stay put when
        // they move into `w.held`, and no two pieces share memory),
        // dropped only once its transfers are over or after
        // `finish_until` over all (which returns once MPI is done,
        // cancelling or aborting past the timeout); a panic meanwhile
        // aborts the process first (`AbortOnUnwind`).
        let posted =
            unsafe { post_piece(op, comm, (send, recv, len), reduction, &mut w.transfers) };
        w.open.extend(before..w.transfers.len());
        w.at.push(before..w.transfers.len());
        w.progress = Instant::now();
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
    let (call, abandon) = (reduction.call(), reduction.abandon());
    let clocks = (w.start, w.progress, abandon);
    let rest = finish_until_since(op, comm, call, waits, all, clocks);
    let local = w.local.take();
    // Only now may the memory go.
    drop(w);
    result.and(rest).and(local.map_or(Ok(()), Err))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_posting_says_who_keeps_the_result_and_which_call_it_makes() {
        let sum = Reduction::new(ElementType::F32, ReduceOp::Sum).unwrap();
        assert!((0..4).all(|r| sum.lands_at(r)));
        assert_eq!(
            (sum.call(), sum.abandon()),
            ("MPI_Iallreduce", Abandon::Abort)
        );
        let to_two = sum.to_root(2);
        assert_eq!(
            (0..4).map(|r| to_two.lands_at(r)).collect::<Vec<_>>(),
            [false, false, true, false]
        );
        assert_eq!(
            (to_two.call(), to_two.abandon()),
            ("MPI_Ireduce", Abandon::Abort)
        );
        // Two ranks, root 1: rank 1 receives from rank 0, rank 0 sends to 1.
        let at_root = sum.between_two(1, 1, 7);
        let elsewhere = sum.between_two(0, 1, 7);
        for pair in [at_root, elsewhere] {
            assert!(!pair.lands_at(0) && pair.lands_at(1));
            assert_eq!(pair.abandon(), Abandon::Cancel);
        }
        assert!(matches!(
            at_root.posting,
            Posting::Pair {
                root: 1,
                peer: 0,
                tag: 7
            }
        ));
        assert!(matches!(
            elsewhere.posting,
            Posting::Pair {
                root: 1,
                peer: 1,
                tag: 7
            }
        ));
        assert_eq!(
            (at_root.call(), elsewhere.call()),
            ("MPI_Irecv", "MPI_Isend")
        );
    }

    #[test]
    fn only_the_root_of_a_pair_reduces_what_arrived() {
        // Neither an allreduce's landing nor the sending rank's is touched
        // (no MPI call is made, so this runs without MPI).
        let sum = Reduction::new(ElementType::U32, ReduceOp::Sum).unwrap();
        let send = [1u8; 8];
        for reduction in [sum, sum.to_root(0), sum.between_two(0, 1, 7)] {
            let mut recv = [2u8; 8];
            reduction.reduce_arrived("test", &send, &mut recv).unwrap();
            assert_eq!(recv, [2u8; 8]);
        }
    }
}
