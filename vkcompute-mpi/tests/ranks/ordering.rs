//! MPI's matching order across the crate's blocking and non-blocking
//! calls, and collectives of different kinds against each other: the
//! checks of issue 36's faults (each failed before its fix).
//!
//! MPI matches the messages between a pair with one tag in the order the
//! receives were posted, and delivers them in the order they were sent.
//! A message here is several MPI messages (header, answer, data, trailer),
//! so the crate must keep that order through every step, whichever calls
//! (blocking or not) the two ranks make.

use std::time::Duration;

use super::*;

/// The checks of this file and `mixed.rs` (on every path).
pub(crate) fn ordering_checks() -> Vec<Named> {
    vec![
        (
            "recv_after_a_pending_irecv_keeps_the_order",
            recv_after_a_pending_irecv_keeps_the_order,
        ),
        (
            "send_after_a_pending_isend_keeps_the_order",
            send_after_a_pending_isend_keeps_the_order,
        ),
        (
            "barrier_against_an_allreduce_fails_on_every_rank",
            barrier_against_an_allreduce_fails_on_every_rank,
        ),
        (
            "mixed_messages_keep_their_order",
            mixed_messages_keep_their_order,
        ),
    ]
}

/// How long a receiver leaves the messages on the wire before it moves
/// on, so that every header has arrived when it does.
const SETTLE: Duration = Duration::from_millis(50);

/// `len` elements of `v`.
fn filled_with(t: &Ranks, v: f32, len: usize) -> Result<DeviceBuffer<f32>, String> {
    upload(t.ctx, &vec![v; len])
}

/// Rank 1 posts an `irecv` (message a), then, once every header has
/// arrived, a blocking `recv` (message b) from rank 0 with the same tag:
/// the irecv must get a and the recv b. Rank 0 `isend`s a and b, waits
/// for a, then `isend`s c (which may reuse a's memory on the same-node
/// path) before it waits for b; rank 1 receives c last. Lengths alike
/// (the data would be swapped) and different (the pieces would not fit).
/// Before the fix the recv answered first: over MPI the data of a went
/// to the recv (or the rank died on the lengths), on the same-node path
/// a's memory went back to rank 0 before the irecv read it.
pub(crate) fn recv_after_a_pending_irecv_keeps_the_order(t: &Ranks) -> Check {
    if t.rank > 1 {
        return Ok(());
    }
    let c = t.comm;
    for (la, lb) in [(1000usize, 1000usize), (1000, 3000), (5000, 7)] {
        let what = |m: &str| format!("{m} ({la} and {lb} elements)");
        if t.rank == 0 {
            let a = filled_with(t, 1.0, la)?;
            let b = filled_with(t, 3.0, lb)?;
            let ra = ok(&what("isend a"), c.isend(&a, 1, 21))?;
            let rb = ok(&what("isend b"), c.isend(&b, 1, 21))?;
            ok(&what("wait for a"), ra.wait())?;
            let cc = filled_with(t, 5.0, la)?;
            let rc = ok(&what("isend c"), c.isend(&cc, 1, 21))?;
            ok(&what("wait for b"), rb.wait())?;
            ok(&what("wait for c"), rc.wait())?;
        } else {
            let (a, b) = (filled_with(t, 0.0, la)?, filled_with(t, 0.0, lb)?);
            let cc = filled_with(t, 0.0, la)?;
            let ra = ok(&what("irecv a"), c.irecv(&a, 0, 21))?;
            std::thread::sleep(SETTLE);
            ok(&what("recv b after a pending irecv"), c.recv(&b, 0, 21))?;
            std::thread::sleep(SETTLE);
            ok(&what("wait for the irecv of a"), ra.wait())?;
            ok(&what("recv c"), c.recv(&cc, 0, 21))?;
            same(&what("a"), &dev("read", a.to_vec())?, &vec![1.0; la])?;
            same(&what("b"), &dev("read", b.to_vec())?, &vec![3.0; lb])?;
            same(&what("c"), &dev("read", cc.to_vec())?, &vec![5.0; la])?;
        }
    }
    Ok(())
}

/// Rank 0 `isend`s message a, then sends b with a blocking `send`, same
/// tag; rank 1 posts two `irecv`s and, once both headers have arrived,
/// waits: the first irecv must get a, the second b. Rounds of it, since
/// before the fix the blocking send sent its data first only where both
/// answers arrived within one of its polls (over MPI, the receiver then
/// died or got the data swapped).
pub(crate) fn send_after_a_pending_isend_keeps_the_order(t: &Ranks) -> Check {
    if t.rank > 1 {
        return Ok(());
    }
    let c = t.comm;
    for round in 0..8 {
        let (la, lb) = if round % 2 == 0 { (999, 999) } else { (999, 5) };
        let what = |m: &str| format!("{m} (round {round}, {la} and {lb} elements)");
        if t.rank == 0 {
            let a = filled_with(t, 1.0 + round as f32, la)?;
            let b = filled_with(t, 100.0 + round as f32, lb)?;
            let ra = ok(&what("isend a"), c.isend(&a, 1, 22))?;
            ok(&what("send b after a pending isend"), c.send(&b, 1, 22))?;
            ok(&what("wait for a"), ra.wait())?;
        } else {
            let (a, b) = (filled_with(t, 0.0, la)?, filled_with(t, 0.0, lb)?);
            let ra = ok(&what("irecv a"), c.irecv(&a, 0, 22))?;
            let rb = ok(&what("irecv b"), c.irecv(&b, 0, 22))?;
            std::thread::sleep(SETTLE);
            ok(&what("wait for b"), rb.wait())?;
            ok(&what("wait for a"), ra.wait())?;
            let want_a = vec![1.0 + round as f32; la];
            same(&what("a"), &dev("read", a.to_vec())?, &want_a)?;
            let want_b = vec![100.0 + round as f32; lb];
            same(&what("b"), &dev("read", b.to_vec())?, &want_b)?;
        }
    }
    Ok(())
}

/// A barrier on rank 0 while the others call an allreduce: `Mismatch` on
/// every rank (before the fix the barrier sent no header, and Open MPI
/// ended the whole job); the communicator works on afterwards.
pub(crate) fn barrier_against_an_allreduce_fails_on_every_rank(t: &Ranks) -> Check {
    let c = t.comm;
    let buf = filled_with(t, 1.0, 64)?;
    let result = if t.rank == 0 {
        c.barrier()
    } else {
        c.allreduce(&buf, ReduceOp::Sum)
    };
    match result {
        Err(Error::Mismatch { .. }) => {}
        other => return Err(format!("a barrier against an allreduce: {other:?}")),
    }
    same(
        "the allreduce's buffer after the mismatch",
        &dev("read", buf.to_vec())?,
        &[1.0; 64],
    )?;
    ok("a barrier after the mismatch", c.barrier())?;
    ok(
        "an allreduce after the mismatch",
        c.allreduce(&buf, ReduceOp::Sum),
    )?;
    same(
        "the allreduce after the mismatch",
        &dev("read", buf.to_vec())?,
        &[t.size as f32; 64],
    )
}
