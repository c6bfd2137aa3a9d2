//! The non-blocking checks of `ranks`: `isend`/`irecv` and their requests, and
//! blocking calls that move pending requests on.

use super::*;

/// The checks of `isend`, `irecv` and their requests (run on every
/// path), with those of `isend` on the same-node path (`isends.rs`).
pub(crate) fn nonblocking() -> Vec<Named> {
    vec![
        ("isend_irecv_lengths_and_ends", isend_irecv_lengths_and_ends),
        (
            "requests_reuse_memory_across_lengths",
            requests_reuse_memory_across_lengths,
        ),
        (
            "blocking_and_nonblocking_ends_pair",
            blocking_and_nonblocking_ends_pair,
        ),
        (
            "many_outstanding_requests_both_directions",
            many_outstanding_requests_both_directions,
        ),
        ("test_polls_to_completion", test_polls_to_completion),
        (
            "test_never_waits_for_the_peer",
            test_never_waits_for_the_peer,
        ),
        ("dropping_unfinished_requests", dropping_unfinished_requests),
        (
            "irecv_mismatch_fails_on_both_ranks",
            irecv_mismatch_fails_on_both_ranks,
        ),
        (
            "irecv_lands_only_when_complete_in_stream_order",
            irecv_lands_only_when_complete_in_stream_order,
        ),
        (
            "blocking_calls_move_pending_requests_on",
            blocking_calls_move_pending_requests_on,
        ),
        (
            "isends_in_flight_matched_out_of_order",
            isends_in_flight_matched_out_of_order,
        ),
        ("more_isends_than_outboxes", more_isends_than_outboxes),
        (
            "isend_reads_its_buffer_in_stream_order",
            isend_reads_its_buffer_in_stream_order,
        ),
        (
            "isend_refusals_and_failures_keep_the_pair_in_step",
            isend_refusals_and_failures_keep_the_pair_in_step,
        ),
    ]
}

/// A factory of message ends, as `device_end`, `view_end` and `host_end`
/// make them.
pub(crate) type Make<'a, T> = dyn Fn(&[T]) -> Result<Box<dyn SendRecv<T>>, String> + 'a;

/// Rank 0 and every other rank q exchange a message each way at once:
/// rank 0 posts an irecv from and an isend to every q before waiting for
/// any (its sends first), q posts its irecv and isend and waits for its
/// send first too; both check what came against the CPU reference.
pub(crate) fn nonblocking_with_zero<T: Value>(
    t: &Ranks,
    what: &str,
    len: usize,
    make: &Make<T>,
) -> Check {
    let to = |q: i32| data::<T>(q + 10, len);
    let from = |q: i32| data::<T>(q + 20, len);
    let c = t.comm;
    if t.rank == 0 {
        let mut ends = Vec::new();
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for q in 1..t.size {
            let out = make(&to(q))?;
            let into = make(&vec![T::small(0); len])?;
            recvs.push(ok(
                &format!("{what}: irecv from {q}"),
                into.irecv(c, q, 12),
            )?);
            sends.push(ok(&format!("{what}: isend to {q}"), out.isend(c, q, 13))?);
            ends.push((q, into));
        }
        for (q, s) in (1..).zip(sends) {
            ok(&format!("{what}: wait for the isend to {q}"), s.wait())?;
        }
        for (q, r) in (1..).zip(recvs) {
            ok(&format!("{what}: wait for the irecv from {q}"), r.wait())?;
        }
        for (q, into) in ends {
            same(&format!("{what}: from rank {q}"), &into.read()?, &from(q))?;
        }
    } else {
        let into = make(&vec![T::small(0); len])?;
        let out = make(&from(t.rank))?;
        let r = ok(&format!("{what}: irecv"), into.irecv(c, 0, 13))?;
        let s = ok(&format!("{what}: isend"), out.isend(c, 0, 12))?;
        ok(&format!("{what}: wait for the isend"), s.wait())?;
        ok(&format!("{what}: wait for the irecv"), r.wait())?;
        same(&format!("{what}: from rank 0"), &into.read()?, &to(t.rank))?;
    }
    Ok(())
}

pub(crate) fn isend_irecv_lengths_and_ends(t: &Ranks) -> Check {
    for len in [0usize, 1, 7, 1003] {
        nonblocking_with_zero::<f32>(t, &format!("f32 x {len}"), len, &device_end(t))?;
        nonblocking_with_zero::<u8>(t, &format!("u8 x {len}"), len, &device_end(t))?;
        nonblocking_with_zero::<i64>(t, &format!("host i64 x {len}"), len, &host_end(t))?;
    }
    for (offset, len) in [(3usize, 7usize), (1, 1003)] {
        let what = format!("u16 view at {offset} x {len}");
        nonblocking_with_zero::<u16>(t, &what, len, &view_end(t, offset, 0xeeee))?;
    }
    // Larger than a piece (4 MiB): two pieces, an odd length.
    let len = (1 << 20) + 3;
    nonblocking_with_zero::<f32>(t, "f32 x 2^20 + 3", len, &device_end(t))?;
    // Many small pieces, the two ends with different piece sizes.
    let small = t.new_communicator()?;
    small.set_piece_bytes(if t.rank == 0 { 256 } else { 1000 });
    let st = Ranks { comm: &small, ..*t };
    for len in [63usize, 10_001] {
        let what = format!("f32 x {len} in pieces");
        nonblocking_with_zero::<f32>(&st, &what, len, &device_end(t))?;
        let what = format!("host u16 x {len} in pieces");
        nonblocking_with_zero::<u16>(&st, &what, len, &host_end(t))?;
    }
    Ok(())
}

/// A communicator keeps the host memory of finished requests for the next
/// ones: messages longer, then shorter, then of another type than the one
/// before, each with values of its own round, still arrive whole and exact
/// (nothing of an earlier message shows through), on device and host ends.
pub(crate) fn requests_reuse_memory_across_lengths(t: &Ranks) -> Check {
    for (round, len) in (0i32..).zip([1003usize, 5, 1010, 0, 64, 1003]) {
        reuse_round::<f32>(t, (round, len), &device_end(t))?;
        reuse_round::<u32>(t, (round, len), &host_end(t))?;
    }
    Ok(())
}

/// One round of `requests_reuse_memory_across_lengths`: rank 0 and every
/// other rank swap `len` elements made from `round`, isend and irecv.
fn reuse_round<T: Value>(t: &Ranks, (round, len): (i32, usize), make: &Make<T>) -> Check {
    let what = format!("round {round}, {len} elements");
    // `value` is (7 seed + ...) mod 5: these seeds differ from one round
    // to the next, and between the two ends, at every element.
    let values = |from: i32| data::<T>(round + 3 * from, len);
    let (c, peers) = match t.rank {
        0 => (t.comm, (1..t.size).collect::<Vec<_>>()),
        _ => (t.comm, vec![0]),
    };
    for q in peers {
        let into = make(&vec![T::small(0); len])?;
        let out = make(&values(t.rank))?;
        let r = ok(&format!("{what}: irecv from {q}"), into.irecv(c, q, 17))?;
        let s = ok(&format!("{what}: isend to {q}"), out.isend(c, q, 17))?;
        ok(&format!("{what}: wait for the isend to {q}"), s.wait())?;
        ok(&format!("{what}: wait for the irecv from {q}"), r.wait())?;
        same(&format!("{what}: from rank {q}"), &into.read()?, &values(q))?;
    }
    Ok(())
}

/// The protocol is the blocking one: a blocking send pairs with an irecv,
/// an isend with a blocking recv.
pub(crate) fn blocking_and_nonblocking_ends_pair(t: &Ranks) -> Check {
    let len = 777;
    let c = t.comm;
    if t.rank == 0 {
        for q in 1..t.size {
            let out = upload(t.ctx, &data::<i32>(q + 30, len))?;
            ok("send to an irecv", c.send(&out, q, 14))?;
            let back = dev("host", t.ctx.enqueue_create_host_buffer::<i32>(len))?;
            ok("recv from an isend", c.recv(&back, q, 15))?;
            same(
                "recv from an isend",
                &dev("read", back.to_vec())?,
                &data::<i32>(q + 40, len),
            )?;
        }
    } else {
        let into = dev("create", t.ctx.enqueue_create_buffer::<i32>(len))?;
        let r = ok("irecv", c.irecv(&into, 0, 14))?;
        ok("irecv of a send", r.wait())?;
        same(
            "irecv of a send",
            &dev("read", into.to_vec())?,
            &data::<i32>(t.rank + 30, len),
        )?;
        let out = upload(t.ctx, &data::<i32>(t.rank + 40, len))?;
        ok(
            "isend to a recv",
            c.isend(&out, 0, 15).and_then(Request::wait),
        )?;
    }
    Ok(())
}

/// Every rank has 8 messages to and from every other rank pending at once,
/// on three tags (so several share a peer and tag and must pair up in the
/// order they were posted), of lengths that differ (a message paired with
/// the wrong receive would be a mismatch); every rank waits for all its
/// sends, last first, before any receive.
pub(crate) fn many_outstanding_requests_both_directions(t: &Ranks) -> Check {
    const K: usize = 8;
    let len = |k: usize| 1 + 37 * k;
    let msg = |from: i32, to: i32, k: usize| data::<f32>(from * 100 + to * 10 + k as i32, len(k));
    let c = t.comm;
    let peers: Vec<i32> = (0..t.size).filter(|&p| p != t.rank).collect();
    let mut outs = Vec::new();
    let mut ins = Vec::new();
    for k in 0..K {
        for &p in &peers {
            let out: Box<dyn SendRecv<f32>> = if k % 2 == 0 {
                device_end(t)(&msg(t.rank, p, k))?
            } else {
                host_end(t)(&msg(t.rank, p, k))?
            };
            let into = device_end(t)(&vec![0.0; len(k)])?;
            outs.push(out);
            ins.push((p, k, into));
        }
    }
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    let mut i = 0;
    for k in 0..K {
        for &p in &peers {
            let tag = 30 + (k % 3) as i32;
            // Receives first on even ranks, sends first on odd ones.
            if t.rank % 2 == 0 {
                recvs.push(ok("irecv", ins[i].2.irecv(c, p, tag))?);
                sends.push(ok("isend", outs[i].isend(c, p, tag))?);
            } else {
                sends.push(ok("isend", outs[i].isend(c, p, tag))?);
                recvs.push(ok("irecv", ins[i].2.irecv(c, p, tag))?);
            }
            i += 1;
        }
    }
    while let Some(s) = sends.pop() {
        ok("wait for an isend", s.wait())?;
    }
    for r in recvs {
        ok("wait for an irecv", r.wait())?;
    }
    for (p, k, into) in &ins {
        same(
            &format!("message {k} from rank {p}"),
            &into.read()?,
            &msg(*p, t.rank, *k),
        )?;
    }
    Ok(())
}

/// A ring (each rank sends to the next and receives from the one before),
/// completed by polling `test` alone, in many small pieces; a completed
/// request keeps answering `true`.
pub(crate) fn test_polls_to_completion(t: &Ranks) -> Check {
    let small = t.new_communicator()?;
    small.set_piece_bytes(256);
    let len = 5000;
    let next = (t.rank + 1) % t.size;
    let prev = (t.rank + t.size - 1) % t.size;
    let out = upload(t.ctx, &data::<u32>(t.rank + 50, len))?;
    let into = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
    dev("fill", into.enqueue_fill(9))?;
    let mut r = ok("irecv", small.irecv(&into, prev, 40))?;
    let mut s = ok("isend", small.isend(&out, next, 40))?;
    let (mut r_done, mut s_done, mut polls) = (false, false, 0u64);
    while !(r_done && s_done) {
        polls += 1;
        if !r_done {
            r_done = ok("test of the irecv", r.test())?;
        }
        if !s_done {
            s_done = ok("test of the isend", s.test())?;
        }
        ensure(polls < 100_000_000, || "test never completed".into())?;
    }
    ensure(
        ok("test again", r.test())? && ok("test again", s.test())?,
        || "a completed request's test is no longer true".into(),
    )?;
    same(
        "ring message received by polling",
        &dev("read", into.to_vec())?,
        &data::<u32>(prev + 50, len),
    )?;
    ok("wait after test", r.wait())?;
    ok("wait after test", s.wait())
}

/// `test` never waits for the peer: rank 1 posts an irecv from rank 0 and
/// an isend to it (several pieces), tests both, and only then tells rank 0
/// (a message on another tag) to post its ends. A `test` that waited for
/// rank 0 would never return, and rank 0's receive of the word would fail
/// at its timeout. Other ranks take no part.
pub(crate) fn test_never_waits_for_the_peer(t: &Ranks) -> Check {
    // Made on every rank: making a communicator is collective.
    let c = t.new_communicator()?;
    if t.rank > 1 {
        return Ok(());
    }
    c.set_timeout(Some(std::time::Duration::from_secs(60)));
    let len = (1 << 20) + 3;
    let word = dev("create", t.ctx.enqueue_create_buffer::<u32>(1))?;
    let into = dev("create", t.ctx.enqueue_create_buffer::<f32>(len))?;
    if t.rank == 1 {
        let out = upload(t.ctx, &data::<f32>(61, len))?;
        let mut r = ok("irecv", c.irecv(&into, 0, 42))?;
        let mut s = ok("isend", c.isend(&out, 0, 43))?;
        for _ in 0..3 {
            let done = ok("test of the irecv", r.test())?;
            ensure(!done, || "an irecv completed before rank 0 sent".into())?;
            ok("test of the isend", s.test())?;
        }
        ok("send of the word", c.send(&word, 0, 44))?;
        ok("wait for the isend", s.wait())?;
        ok("wait for the irecv", r.wait())?;
        same(
            "from rank 0",
            &dev("read", into.to_vec())?,
            &data::<f32>(60, len),
        )
    } else {
        ok("recv of the word from rank 1", c.recv(&word, 1, 44))?;
        let out = upload(t.ctx, &data::<f32>(60, len))?;
        let r = ok("irecv", c.irecv(&into, 1, 43))?;
        ok("send", c.send(&out, 1, 42))?;
        ok("wait for the irecv", r.wait())?;
        same(
            "from rank 1",
            &dev("read", into.to_vec())?,
            &data::<f32>(61, len),
        )
    }
}

/// An irecv dropped before any message came is cancelled: its buffer is
/// untouched and the next message on its peer and tag goes to a later
/// receive. An isend dropped unfinished is waited for in the drop: its
/// receiver (a blocking recv) gets the whole message. The communicator
/// works on afterwards.
pub(crate) fn dropping_unfinished_requests(t: &Ranks) -> Check {
    let c = t.comm;
    let next = (t.rank + 1) % t.size;
    let prev = (t.rank + t.size - 1) % t.size;
    let len = 301;
    let untouched = upload(t.ctx, &[5i64; 301])?;
    let r = ok("irecv to drop", c.irecv(&untouched, next, 41))?;
    drop(r);
    ok("barrier after the drop", c.barrier())?;
    same(
        "the buffer of a dropped irecv",
        &dev("read", untouched.to_vec())?,
        &[5i64; 301],
    )?;
    // The same peer and tag: the cancelled irecv took nothing.
    let into = dev("create", t.ctx.enqueue_create_buffer::<i64>(len))?;
    let out = upload(t.ctx, &data::<i64>(t.rank + 60, len))?;
    let r = ok("irecv after the drop", c.irecv(&into, next, 41))?;
    let s = ok("isend after the drop", c.isend(&out, prev, 41))?;
    ok("wait for the irecv", r.wait())?;
    ok("wait for the isend", s.wait())?;
    same(
        "the message after a dropped irecv",
        &dev("read", into.to_vec())?,
        &data::<i64>(next + 60, len),
    )?;
    // A dropped isend still delivers: its drop waits.
    let last = t.size - 1;
    if t.rank == 0 {
        let out = upload(t.ctx, &data::<f32>(61, 4099))?;
        let s = ok("isend to drop", c.isend(&out, last, 42))?;
        drop(s);
        // The buffer may be changed at once: the request had copied it.
        dev("overwrite", out.enqueue_fill(-1.0))?;
    } else if t.rank == last {
        let into = dev("create", t.ctx.enqueue_create_buffer::<f32>(4099))?;
        ok("recv from a dropped isend", c.recv(&into, 0, 42))?;
        same(
            "the message of a dropped isend",
            &dev("read", into.to_vec())?,
            &data::<f32>(61, 4099),
        )?;
    }
    ok("barrier after the drops", c.barrier())?;
    let buf = upload(t.ctx, &data::<f32>(t.rank, 17))?;
    ok(
        "allreduce after the drops",
        c.allreduce(&buf, ReduceOp::Sum),
    )?;
    same(
        "allreduce after the drops",
        &dev("read", buf.to_vec())?,
        &reference::<f32>(ReduceOp::Sum, t.size, 17),
    )
}

/// Mismatches through irecv (against isend and against a blocking send)
/// and through isend (against a blocking recv): `Mismatch` on both ranks,
/// the destination untouched; the pair works afterwards.
pub(crate) fn irecv_mismatch_fails_on_both_ranks(t: &Ranks) -> Check {
    let last = t.size - 1;
    let c = t.comm;
    let mismatch = |what: &str, r: vkcompute_mpi::Result<()>| match r {
        Err(Error::Mismatch { detail, .. }) if detail.contains("rank 0") => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    };
    if t.rank == 0 {
        let five = upload(t.ctx, &[1.0f32; 5])?;
        mismatch(
            "isend of 5 f32 to an irecv of 6",
            c.isend(&five, last, 43).and_then(Request::wait),
        )?;
        let ints = upload(t.ctx, &[1u32; 5])?;
        mismatch(
            "isend of u32 to an irecv of i32",
            c.isend(&ints, last, 43).and_then(Request::wait),
        )?;
        mismatch("send of 5 f32 to an irecv of 6", c.send(&five, last, 43))?;
        mismatch(
            "isend of 5 f32 to a recv of 6",
            c.isend(&five, last, 43).and_then(Request::wait),
        )?;
        ok(
            "isend after the mismatches",
            c.isend(&five, last, 43).and_then(Request::wait),
        )?;
    } else if t.rank == last {
        let six = upload(t.ctx, &[0.0f32; 6])?;
        mismatch(
            "irecv of 6 f32 from an isend of 5",
            c.irecv(&six, 0, 43).and_then(Request::wait),
        )?;
        let ints = upload(t.ctx, &[0i32; 5])?;
        mismatch(
            "irecv of i32 from an isend of u32",
            c.irecv(&ints, 0, 43).and_then(Request::wait),
        )?;
        let mut r = ok("irecv", c.irecv(&six, 0, 43))?;
        // Polled: `test` reports the mismatch, and `wait` again after it.
        loop {
            match r.test() {
                Ok(false) => continue,
                Ok(true) => return Err("irecv of 6 f32 from a send of 5 succeeded".into()),
                Err(_) => break,
            }
        }
        mismatch("irecv of 6 f32 from a send of 5", r.wait())?;
        mismatch("recv of 6 f32 from an isend of 5", c.recv(&six, 0, 43))?;
        same(
            "the buffer after refused messages",
            &dev("read", six.to_vec())?,
            &[0.0; 6],
        )?;
        same(
            "the buffer after a refused message",
            &dev("read", ints.to_vec())?,
            &[0; 5],
        )?;
        let five = upload(t.ctx, &[0.0f32; 5])?;
        ok(
            "irecv after the mismatches",
            c.irecv(&five, 0, 43).and_then(Request::wait),
        )?;
        same(
            "the message after the mismatches",
            &dev("read", five.to_vec())?,
            &[1.0; 5],
        )?;
    }
    Ok(())
}

/// A pending irecv's destination is not written until the request
/// completes: device work enqueued before `wait` reads the old contents
/// even when the message is in (another request's wait moved it on), and
/// device work enqueued right after `wait` (no host synchronisation
/// between) reads the message.
pub(crate) fn irecv_lands_only_when_complete_in_stream_order(t: &Ranks) -> Check {
    let last = t.size - 1;
    let c = t.comm;
    let len = 2049;
    if t.rank == 0 {
        let a = upload(t.ctx, &data::<u32>(70, len))?;
        let b = upload(t.ctx, &data::<u32>(71, len))?;
        let sa = ok("isend a", c.isend(&a, last, 44))?;
        let sb = ok("isend b", c.isend(&b, last, 45))?;
        ok("wait a", sa.wait())?;
        ok("wait b", sb.wait())?;
        ok("barrier", c.barrier())?;
    } else if t.rank == last {
        let dest = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
        dev("fill", dest.enqueue_fill(77))?;
        let other = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
        let ra = ok("irecv a", c.irecv(&dest, 0, 44))?;
        let rb = ok("irecv b", c.irecv(&other, 0, 45))?;
        // b's wait moves a on too; the sender finishes a before the barrier.
        ok("wait b", rb.wait())?;
        ok("barrier", c.barrier())?;
        let before = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
        dev("copy before wait", before.enqueue_copy_from(&dest))?;
        let after = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
        ok("wait a", ra.wait())?;
        dev("copy after wait", after.enqueue_copy_from(&dest))?;
        dev("fill after", dest.enqueue_fill(0))?;
        same(
            "device copy of a pending irecv's destination",
            &dev("read", before.to_vec())?,
            &[77; 2049],
        )?;
        same(
            "device copy enqueued right after wait",
            &dev("read", after.to_vec())?,
            &data::<u32>(70, len),
        )?;
        same(
            "the other message",
            &dev("read", other.to_vec())?,
            &data::<u32>(71, len),
        )?;
    } else {
        ok("barrier", c.barrier())?;
    }
    Ok(())
}

// ------------------------------------------------------------ collectives

/// Rank 0 starts an `isend` to rank 1, then blocks in a `recv` of what
/// rank 1 sends only once it has received the `isend`'s message: the
/// blocking `recv` must move the pending `isend` on (before, it waited for
/// ever). The same again with a blocking collective (a barrier) as the
/// call that must move it on.
pub(crate) fn blocking_calls_move_pending_requests_on(t: &Ranks) -> Check {
    let ctx = t.ctx;
    let len = 3001;
    let first: Vec<u32> = (0..len as u32).map(|i| i * 7 + 1).collect();
    let reply: Vec<u32> = (0..len as u32).map(|i| i ^ 0x55).collect();
    let a = dev("buffer", ctx.enqueue_create_buffer::<u32>(len))?;
    let b = dev("buffer", ctx.enqueue_create_buffer::<u32>(len))?;
    match t.rank {
        0 => {
            dev("fill", a.enqueue_copy_from(&first[..]))?;
            let sent = ok("isend", t.comm.isend(&a, 1, 40))?;
            ok("recv", t.comm.recv(&b, 1, 41))?;
            same("reply", &dev("read", b.to_vec())?, &reply)?;
            ok("wait", sent.wait())?;
            let sent = ok("isend", t.comm.isend(&a, 1, 42))?;
            ok("barrier", t.comm.barrier())?;
            ok("wait", sent.wait())?;
        }
        1 => {
            ok("recv", t.comm.recv(&a, 0, 40))?;
            same("first", &dev("read", a.to_vec())?, &first)?;
            dev("fill", b.enqueue_copy_from(&reply[..]))?;
            ok("send", t.comm.send(&b, 0, 41))?;
            ok("recv", t.comm.recv(&a, 0, 42))?;
            same("second", &dev("read", a.to_vec())?, &first)?;
            ok("barrier", t.comm.barrier())?;
        }
        _ => ok("barrier", t.comm.barrier())?,
    }
    Ok(())
}
