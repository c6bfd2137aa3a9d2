//! `isend` on the same-node path: several in flight to one peer and
//! matched out of order, more than the outboxes a sender keeps per peer,
//! messages that grow (new generations) between others that reuse the
//! memory, and refusals, failures and dropped requests followed by good
//! messages on the same pair. Every payload is checked against its CPU
//! reference, and the messages that took the path
//! (`Communicator::same_node_sends`) against `path_to`: all the non-empty
//! ones where the pair takes it, none over MPI (the same checks run again
//! with the path off).

use vkcompute_mpi::Path;

use super::*;

/// The outboxes a sender keeps per peer (`same_node::MAX_OUTBOXES`): as
/// many messages to it can be under way through exported memory at once.
const OUTBOXES: usize = 4;

/// Element `i` of the message that rank `from` sends with `tag` in round
/// `round`: different for every message of a check, so that a message
/// read from the wrong memory (or an old generation) shows.
fn payload(from: i32, tag: i32, round: usize, len: usize) -> Vec<u16> {
    let salt = from as usize * 1000 + tag as usize * 7 + round * 13;
    (0..len).map(|i| (i * 31 + salt) as u16).collect()
}

/// How a message's ends are made.
#[derive(Clone, Copy)]
enum End {
    Device,
    /// A view at element 3 of a larger device buffer.
    View,
    Host,
}

fn make<'a>(t: &'a Ranks, end: End) -> Box<Make<'a, u16>> {
    match end {
        End::Device => Box::new(device_end(t)),
        End::View => Box::new(view_end(t, 3, 0xeeee)),
        End::Host => Box::new(host_end(t)),
    }
}

/// The ranks this one sends to and receives from, in a ring (with two
/// ranks, the one peer both ways at once).
fn ring(t: &Ranks) -> (i32, i32) {
    ((t.rank + 1) % t.size, (t.rank + t.size - 1) % t.size)
}

/// Fails unless `c` sent `want` messages through exported memory since
/// it had sent `before`: `on_path` of them where the pair with `peer`
/// takes the path, else none.
fn took_path(c: &Communicator, peer: i32, before: u64, on_path: usize, what: &str) -> Check {
    let want = match c.path_to(peer) {
        Ok(Path::SameNode) => on_path as u64,
        _ => 0,
    };
    let got = c.same_node_sends() - before;
    ensure(got == want, || {
        format!("{what}: {got} message(s) took the same-node path, expected {want}")
    })
}

/// Every rank sends four messages to the next rank with `isend` (tags 50
/// to 53: 1 element, none, a view at an odd offset, a host buffer) before
/// it receives the previous rank's in the opposite order: by blocking
/// `recv`, then, in the next round, by `irecv`s posted last tag first and
/// waited for first tag first. The rounds grow the messages past their
/// memory (new generations, whose descriptors the receiver takes off the
/// socket out of order) and shrink them again (reused memory).
pub(crate) fn isends_in_flight_matched_out_of_order(t: &Ranks) -> Check {
    let (next, prev) = ring(t);
    let c = t.comm;
    let ends = [End::Device, End::Device, End::View, End::Host];
    let rounds: [[usize; 4]; 3] = [
        [1, 0, 1003, 777],
        [70_001, 0, 1003, 20_000],
        [5, 1, 40_000, 3],
    ];
    for (round, lens) in rounds.iter().enumerate() {
        let what = |k: usize| format!("round {round}, tag {}, {} elements", 50 + k, lens[k]);
        let before = c.same_node_sends();
        let mut outs = Vec::new();
        let mut intos = Vec::new();
        for (k, (&len, &end)) in lens.iter().zip(&ends).enumerate() {
            outs.push(make(t, end)(&payload(t.rank, 50 + k as i32, round, len))?);
            intos.push(make(t, end)(&vec![0; len])?);
        }
        let mut sends = Vec::new();
        for (k, out) in outs.iter().enumerate() {
            sends.push(ok(
                &format!("isend {}", what(k)),
                out.isend(c, next, 50 + k as i32),
            )?);
        }
        // The buffers may be reused at once: the isends copied them.
        drop(outs);
        if round % 2 == 0 {
            for (k, into) in intos.iter().enumerate().rev() {
                ok(
                    &format!("recv {}", what(k)),
                    into.recv(c, prev, 50 + k as i32),
                )?;
            }
        } else {
            let mut recvs = Vec::new();
            for (k, into) in intos.iter().enumerate().rev() {
                recvs.push(ok(
                    &format!("irecv {}", what(k)),
                    into.irecv(c, prev, 50 + k as i32),
                )?);
            }
            for (k, r) in recvs.into_iter().rev().enumerate() {
                ok(&format!("wait for the irecv {}", what(k)), r.wait())?;
            }
        }
        for (k, s) in sends.into_iter().enumerate() {
            ok(&format!("wait for the isend {}", what(k)), s.wait())?;
        }
        for (k, into) in intos.iter().enumerate() {
            let want = payload(prev, 50 + k as i32, round, lens[k]);
            same(&what(k), &into.read()?, &want)?;
        }
        let nonempty = lens.iter().filter(|&&len| len > 0).count();
        took_path(c, next, before, nonempty, &format!("round {round}"))?;
    }
    Ok(())
}

/// Every rank starts two more `isend`s to the next rank than it keeps
/// outboxes for it, then a blocking `send` (even ranks first; odd ones
/// receive first), while none is answered: the first `OUTBOXES` take the
/// path, the others and the `send` travel over MPI. The receiver takes
/// them in the opposite order (the `send`'s first). Once they are
/// answered, the outboxes are free again: as many `isend`s in flight
/// take the path again.
pub(crate) fn more_isends_than_outboxes(t: &Ranks) -> Check {
    let (next, prev) = ring(t);
    let c = t.comm;
    let n = OUTBOXES + 2;
    let len = |k: usize| 100 + 1000 * k;
    let tag = |k: usize| 60 + k as i32;
    let before = c.same_node_sends();
    let mut sends = Vec::new();
    for k in 0..n {
        let out = upload(t.ctx, &payload(t.rank, tag(k), 0, len(k)))?;
        sends.push(ok(&format!("isend {k}"), c.isend(&out, next, tag(k)))?);
    }
    let last = upload(t.ctx, &payload(t.rank, 70, 0, 333))?;
    let into_last = upload(t.ctx, &[0u16; 333])?;
    if t.rank % 2 == 0 {
        ok("send beyond the outboxes", c.send(&last, next, 70))?;
        ok("recv of the send", c.recv(&into_last, prev, 70))?;
    } else {
        ok("recv of the send", c.recv(&into_last, prev, 70))?;
        ok("send beyond the outboxes", c.send(&last, next, 70))?;
    }
    let want = payload(prev, 70, 0, 333);
    holds("the send beyond the outboxes", &into_last, &want)?;
    took_path(c, next, before, OUTBOXES, "isends beyond the outboxes")?;
    let intos: Vec<DeviceBuffer<u16>> = (0..n)
        .map(|k| upload(t.ctx, &vec![0u16; len(k)]))
        .collect::<Result<_, _>>()?;
    let mut recvs = Vec::new();
    for k in (0..n).rev() {
        if k % 2 == 0 {
            ok(&format!("recv {k}"), c.recv(&intos[k], prev, tag(k)))?;
        } else {
            recvs.push(ok(&format!("irecv {k}"), c.irecv(&intos[k], prev, tag(k)))?);
        }
    }
    for r in recvs {
        ok("wait for an irecv", r.wait())?;
    }
    for s in sends {
        ok("wait for an isend", s.wait())?;
    }
    for (k, into) in intos.iter().enumerate() {
        let want = payload(prev, tag(k), 0, len(k));
        holds(&format!("message {k}"), into, &want)?;
    }
    all_outboxes_free(t, 1)
}

/// Fails unless `buf` holds `want`.
fn holds<T: Value>(what: &str, buf: &DeviceBuffer<T>, want: &[T]) -> Check {
    same(what, &dev("read", buf.to_vec())?, want)
}

/// Receives into `into` from `source` with `tag` by a blocking `recv`,
/// and checks it against `want`.
fn received<T: Value>(
    c: &Communicator,
    what: &str,
    into: &DeviceBuffer<T>,
    (source, tag): (i32, i32),
    want: &[T],
) -> Check {
    ok(&format!("recv {what}"), c.recv(into, source, tag))?;
    holds(what, into, want)
}

/// `OUTBOXES` `isend`s in flight to the next rank at once all take the
/// path where the pair does (none of its outboxes was lost to the
/// messages before), received whole; `round` salts the payloads.
fn all_outboxes_free(t: &Ranks, round: usize) -> Check {
    let (next, prev) = ring(t);
    let c = t.comm;
    let before = c.same_node_sends();
    let mut sends = Vec::new();
    for k in 0..OUTBOXES {
        let out = upload(t.ctx, &payload(t.rank, 80 + k as i32, round, 50 + k))?;
        sends.push(ok(
            "isend to a free outbox",
            c.isend(&out, next, 80 + k as i32),
        )?);
    }
    for k in (0..OUTBOXES).rev() {
        let into = upload(t.ctx, &vec![0u16; 50 + k])?;
        let want = payload(prev, 80 + k as i32, round, 50 + k);
        received(c, "from a free outbox", &into, (prev, 80 + k as i32), &want)?;
    }
    for s in sends {
        ok("wait for an isend", s.wait())?;
    }
    took_path(c, next, before, OUTBOXES, "isends to free outboxes")
}

/// On a new communicator (so that the first `isend`'s memory is a new
/// generation), from rank 0 to the last rank: refused `isend`s (a length
/// to an `irecv`, a type to a `recv`, a grown message refused while
/// another is in flight and matched after it), one from a mapped buffer
/// (an error on both ranks, on every path), and one
/// dropped unfinished, each followed by good messages on the same pair;
/// then every outbox takes a message again (none was lost).
pub(crate) fn isend_refusals_and_failures_keep_the_pair_in_step(t: &Ranks) -> Check {
    let c = t.new_communicator()?;
    let last = t.size - 1;
    let mismatch = |what: &str, r: vkcompute_mpi::Result<()>| match r {
        Err(Error::Mismatch { .. }) => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    };
    let big = 100_000;
    if t.rank == 0 {
        let before = c.same_node_sends();
        let five = upload(t.ctx, &data::<f32>(1, 5))?;
        let wait = |r: vkcompute_mpi::Result<Request>| r.and_then(Request::wait);
        mismatch(
            "isend of 5 f32 to an irecv of 6",
            wait(c.isend(&five, last, 70)),
        )?;
        let ints = upload(t.ctx, &[1i32; 5])?;
        mismatch(
            "isend of i32 to a recv of f32",
            wait(c.isend(&ints, last, 70)),
        )?;
        ok("isend after the mismatches", wait(c.isend(&five, last, 70)))?;
        let small = upload(t.ctx, &data::<f32>(2, 7))?;
        let grown = upload(t.ctx, &data::<f32>(3, big))?;
        let a = ok("isend of 7", c.isend(&small, last, 71))?;
        let b = ok("isend of a new generation", c.isend(&grown, last, 72))?;
        mismatch("the refused new generation", b.wait())?;
        ok("the isend in flight beside it", a.wait())?;
        ok("the grown isend again", wait(c.isend(&grown, last, 72)))?;
        let mapped_buf = upload(t.ctx, &data::<f32>(4, 9))?;
        let mapped = dev("map", mapped_buf.map_to_host())?;
        let result = wait(c.isend(&mapped_buf, last, 73));
        drop(mapped);
        match result {
            Err(e) if e.to_string().contains("mapped") => {}
            other => return Err(format!("isend from a mapped buffer: {other:?}")),
        }
        let one = upload(t.ctx, &data::<f32>(5, 1))?;
        ok(
            "isend after the mapped buffer",
            wait(c.isend(&one, last, 73)),
        )?;
        let dropped = upload(t.ctx, &data::<f32>(6, 4099))?;
        drop(ok("isend to drop", c.isend(&dropped, last, 74))?);
        dev("overwrite after the drop", dropped.enqueue_fill(-1.0))?;
        ok("isend after the drop", wait(c.isend(&one, last, 74)))?;
        // Every message but the one from a mapped buffer.
        took_path(&c, last, before, 9, "refused and failed isends")?;
    } else if t.rank == last {
        let zeros = |len: usize| upload(t.ctx, &vec![0.0f32; len]);
        let (six, five) = (zeros(6)?, zeros(5)?);
        let refused = ok("irecv", c.irecv(&six, 0, 70))?.wait();
        mismatch("irecv of 6 from an isend of 5", refused)?;
        mismatch("recv of f32 from an isend of i32", c.recv(&five, 0, 70))?;
        holds("the refused irecv's buffer", &six, &[0.0; 6])?;
        holds("the refused recv's buffer", &five, &[0.0; 5])?;
        let want = |salt: i32, len: usize| data::<f32>(salt, len);
        received(&c, "after the mismatches", &five, (0, 70), &want(1, 5))?;
        let short = zeros(big - 1)?;
        let refused = ok("irecv", c.irecv(&short, 0, 72))?.wait();
        mismatch("irecv of the new generation", refused)?;
        received(&c, "beside the refusal", &zeros(7)?, (0, 71), &want(2, 7))?;
        received(&c, "the grown isend", &zeros(big)?, (0, 72), &want(3, big))?;
        let nine = zeros(9)?;
        match c.recv(&nine, 0, 73) {
            Err(Error::RemoteFailure { reason, .. }) if reason.contains("mapped") => {}
            other => return Err(format!("recv from a mapped isend: {other:?}")),
        }
        let one = zeros(1)?;
        let after = c.irecv(&one, 0, 73).and_then(Request::wait);
        ok("irecv after the mapped buffer", after)?;
        holds("after the mapped buffer", &one, &want(5, 1))?;
        received(
            &c,
            "the dropped isend",
            &zeros(4099)?,
            (0, 74),
            &want(6, 4099),
        )?;
        received(&c, "after the drop", &one, (0, 74), &want(5, 1))?;
    }
    all_outboxes_free(&Ranks { comm: &c, ..*t }, 2)
}

/// An `isend` reads its buffer in stream order: what the work enqueued
/// before it (not waited for) leaves there is what goes, and the buffer
/// may be written (device work, a mapping) or dropped at once after the
/// call. Small pieces, so that a message over MPI travels in several
/// pinned slots, each copied from the device on its own.
pub(crate) fn isend_reads_its_buffer_in_stream_order(t: &Ranks) -> Check {
    let (last, c, len) = (t.size - 1, t.comm, 10_000);
    if t.rank == 0 {
        let piece = c.piece_bytes();
        c.set_piece_bytes(4096);
        let sent = (|| {
            let a = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
            dev("fill", a.enqueue_fill(5))?;
            dev("copy in", a.enqueue_copy_from(&data::<u32>(80, len)[..]))?;
            let sa = ok("isend a", c.isend(&a, last, 46))?;
            dev("overwrite a", a.enqueue_fill(0))?;
            let b = upload(t.ctx, &data::<u32>(81, len))?;
            let sb = ok("isend b", c.isend(&b, last, 47))?;
            let mut mapped = dev("map b", b.map_to_host())?;
            mapped.fill(1);
            dev("unmap b", mapped.finish())?;
            let d = upload(t.ctx, &data::<u32>(82, len))?;
            let sd = ok("isend d", c.isend(&d, last, 48))?;
            drop(d);
            ok("wait a", sa.wait())?;
            ok("wait b", sb.wait())?;
            ok("wait d", sd.wait())
        })();
        c.set_piece_bytes(piece);
        sent?;
    } else if t.rank == last {
        for (tag, salt) in [(46, 80), (47, 81), (48, 82)] {
            let into = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
            ok("recv", c.recv(&into, 0, tag))?;
            let what = format!("the message of tag {tag}");
            same(&what, &dev("read", into.to_vec())?, &data::<u32>(salt, len))?;
        }
    }
    ok("barrier", c.barrier())
}
