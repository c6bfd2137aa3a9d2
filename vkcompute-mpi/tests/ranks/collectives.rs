//! The collective checks of `ranks`: every collective, type and reduction, on
//! device and host buffers, mismatches, mapped buffers and 64 MiB.

use super::*;

/// The checks of broadcast, reduce, allgather and reduce_scatter, and of
/// mismatched collectives (run on every path; allreduce's are
/// `allreduces`).
pub(crate) fn collectives_but_allreduce() -> Vec<Named> {
    vec![
        ("broadcast_matches_root", broadcast_matches_root),
        ("reduce_to_each_root", reduce_to_each_root),
        ("allgather_blocks", allgather_blocks),
        ("reduce_scatter_blocks", reduce_scatter_blocks),
        (
            "collective_mismatch_fails_on_every_rank",
            collective_mismatch_fails_on_every_rank,
        ),
        (
            "collective_bad_length_fails_on_every_rank",
            collective_bad_length_fails_on_every_rank,
        ),
    ]
}

pub(crate) fn barrier_returns(t: &Ranks) -> Check {
    ok("barrier", t.comm.barrier())
}

pub(crate) fn broadcast_one<T: Value>(t: &Ranks, len: usize, root: i32) -> Check {
    let buf = upload(t.ctx, &data::<T>(t.rank, len))?;
    ok(
        &format!("broadcast of {len} {} from {root}", T::TYPE),
        t.comm.broadcast(&buf, root),
    )?;
    same(
        &format!("broadcast of {len} {} from {root}", T::TYPE),
        &dev("read", buf.to_vec())?,
        &data::<T>(root, len),
    )
}

pub(crate) fn broadcast_matches_root(t: &Ranks) -> Check {
    for root in [0, t.size - 1] {
        for len in LENGTHS {
            broadcast_one::<f32>(t, len, root)?;
            broadcast_one::<u8>(t, len, root)?;
            broadcast_one::<i64>(t, len, root)?;
        }
    }
    Ok(())
}

pub(crate) fn allreduce_one<T: Arith>(t: &Ranks, op: ReduceOp, len: usize) -> Check {
    let buf = upload(t.ctx, &data::<T>(t.rank, len))?;
    let what = format!("allreduce {op:?} of {len} {}", T::TYPE);
    ok(&what, t.comm.allreduce(&buf, op))?;
    same(
        &what,
        &dev("read", buf.to_vec())?,
        &reference::<T>(op, t.size, len),
    )
}

/// `allreduce_one` on a host buffer.
pub(crate) fn allreduce_host_one<T: Arith>(t: &Ranks, op: ReduceOp, len: usize) -> Check {
    let buf = host_buffer(t.ctx, &data::<T>(t.rank, len))?;
    let what = format!("allreduce {op:?} of {len} {} on a host buffer", T::TYPE);
    ok(&what, t.comm.allreduce(&buf, op))?;
    same(
        &what,
        &dev("read", buf.to_vec())?,
        &reference::<T>(op, t.size, len),
    )
}

pub(crate) fn allreduce_type<T: Arith>(t: &Ranks) -> Check {
    for op in ReduceOp::ALL {
        for len in LENGTHS {
            allreduce_one::<T>(t, op, len)?;
        }
    }
    Ok(())
}

pub(crate) fn allreduce_every_type_and_op(t: &Ranks) -> Check {
    allreduce_type::<f32>(t)?;
    allreduce_type::<f64>(t)?;
    allreduce_type::<i32>(t)?;
    allreduce_type::<u32>(t)?;
    allreduce_type::<i64>(t)?;
    allreduce_type::<u64>(t)
}

pub(crate) fn allreduce_view_at_odd_offset(t: &Ranks) -> Check {
    for (offset, len) in [(1usize, 1usize), (3, 7), (5, 1003)] {
        allreduce_view(t, ReduceOp::Sum, offset, len)?;
    }
    Ok(())
}

/// An allreduce of a view of `len` elements at `offset` in a parent two
/// elements longer: the view holds the result, the rest of the parent
/// its fill.
fn allreduce_view(t: &Ranks, op: ReduceOp, offset: usize, len: usize) -> Check {
    let parent = dev(
        "parent",
        t.ctx.enqueue_create_buffer::<i32>(offset + len + 2),
    )?;
    dev("fill", parent.enqueue_fill(77))?;
    let view = dev("view", parent.create_sub_buffer::<i32>(offset, len))?;
    dev(
        "upload",
        view.enqueue_copy_from(&data::<i32>(t.rank, len)[..]),
    )?;
    ok("allreduce of a view", t.comm.allreduce(&view, op))?;
    let mut want = vec![77; offset + len + 2];
    want[offset..offset + len].copy_from_slice(&reference::<i32>(op, t.size, len));
    same(
        &format!("parent of a view at {offset} after allreduce {op:?}"),
        &dev("read", parent.to_vec())?,
        &want,
    )
}

/// Ranks on different paths in one allreduce: a device buffer on the even
/// ranks (mapped where the context maps directly), a host buffer on the
/// odd ones (always staged), for lengths that take recursive doubling on 4
/// ranks (at most 64 KiB), ones that take recursive halving there (20,000
/// and 100,003; the ring on 2 and 3 ranks), and 6,000,011 (24 MB:
/// chunks of more than one piece on 2, 3 and 4 ranks, so every rank runs
/// MPI's allreduce in pieces, in the mapping of a device buffer that maps
/// in place, through pinned host memory for a host buffer and for rank
/// 2's view at an odd offset, which the kernels cannot bind in place):
/// the messages must pair up whichever path each rank takes.
pub(crate) fn allreduce_across_paths(t: &Ranks) -> Check {
    let direct_before = t.comm.direct_reduce_scatters();
    let mpi_before = t.comm.mpi_allreduces();
    allreduce_across_paths_run(t)?;
    // The two of 6,000,011 elements, but on the same-node path.
    let by_mpi = t.comm.mpi_allreduces() - mpi_before;
    let on_node = t.comm.collective_path() == vkcompute_mpi::Path::SameNode;
    ensure(by_mpi == if on_node { 0 } else { 2 }, || {
        format!("{by_mpi} allreduces across paths took MPI's allreduce")
    })?;
    // Rank 2's view cannot be bound in place and the odd ranks pass host
    // buffers: they offer the direct reduce-scatter through a mirror, so
    // every allreduce that a host buffer announces as direct takes it.
    let direct = t.comm.direct_reduce_scatters() - direct_before;
    let mut want = 0;
    for len in LENGTHS_ACROSS_PATHS {
        let host = host_buffer(t.ctx, &data::<f32>(t.rank, len))?;
        if t.comm.allreduce_algorithm(&host) == vkcompute_mpi::AllreduceAlgorithm::Direct {
            want += 2;
        }
    }
    ensure(
        direct == want && (t.size != 3 || on_node || want > 0),
        || {
            format!(
                "{direct} allreduces across paths took the direct reduce-scatter, expected {want}"
            )
        },
    )
}

/// The lengths of `allreduce_across_paths`.
const LENGTHS_ACROSS_PATHS: [usize; 6] = [1, 7, 1003, 20_000, 100_003, 6_000_011];

fn allreduce_across_paths_run(t: &Ranks) -> Check {
    for len in LENGTHS_ACROSS_PATHS {
        for op in [ReduceOp::Sum, ReduceOp::Min] {
            let what = format!("allreduce {op:?} of {len} f32 across paths");
            let mine = data::<f32>(t.rank, len);
            let got = if t.rank == 2 {
                let mut padded = vec![0.0f32; len + 1];
                padded[1..].copy_from_slice(&mine);
                let parent = upload(t.ctx, &padded)?;
                let view = dev("view", parent.create_sub_buffer::<f32>(1, len))?;
                ok(&what, t.comm.allreduce(&view, op))?;
                dev("read", view.to_vec())?
            } else if t.rank % 2 == 0 {
                let buf = upload(t.ctx, &mine)?;
                ok(&what, t.comm.allreduce(&buf, op))?;
                dev("read", buf.to_vec())?
            } else {
                let buf = host_buffer(t.ctx, &mine)?;
                ok(&what, t.comm.allreduce(&buf, op))?;
                dev("read", buf.to_vec())?
            };
            same(&what, &got, &reference::<f32>(op, t.size, len))?;
        }
    }
    Ok(())
}

/// Over MPI (the paths `Path::Mapped` and `Path::Staged`), allreduces
/// that would take the ring on 3 to 8 ranks send every chunk to its owner at once and reduce the chunks in one
/// kernel pass (`Communicator::direct_reduce_scatters` counts them):
/// lengths 1, 7 and 1003 of each element type with sum and maximum,
/// 100,003 of f32 and i64 (at 4 ranks halving keeps those of at most
/// 4 MiB) and 3,000,007 f32 (12 MB: the ring at 4 ranks too, chunks of
/// one piece; longer chunks take MPI's allreduce) with sum, checked
/// against the CPU; elsewhere (the same-node path, 2 ranks) none, checked
/// on short lengths.
pub(crate) fn allreduce_direct_reduce_scatter(t: &Ranks) -> Check {
    let size = t.size as usize;
    let path = t.comm.collective_path();
    let direct = path != vkcompute_mpi::Path::SameNode && (3..=8).contains(&size);
    let lengths: &[usize] = if direct {
        &[1, 7, 1003, 100_003, 3_000_007]
    } else {
        &[1, 1003]
    };
    for &len in lengths {
        let ops: &[ReduceOp] = if len < 10_000 {
            &[ReduceOp::Sum, ReduceOp::Max]
        } else {
            &[ReduceOp::Sum]
        };
        for &op in ops {
            let before = t.comm.direct_reduce_scatters();
            allreduce_f32_as_announced(t, op, len)?;
            // The element sizes of the calls.
            let mut sizes = vec![4];
            if len < 1_000_000 {
                allreduce_one::<i64>(t, op, len)?;
                sizes.push(8);
            }
            if len < 10_000 {
                allreduce_one::<f64>(t, op, len)?;
                allreduce_one::<i32>(t, op, len)?;
                allreduce_one::<u32>(t, op, len)?;
                allreduce_one::<u64>(t, op, len)?;
                sizes.extend([8, 4, 4, 8]);
            }
            let taken = t.comm.direct_reduce_scatters() - before;
            // The ring (not halving: 4, 8 ranks up to 4 MiB, which covers
            // doubling) on 3 to 8 ranks, every buffer mapped in place.
            let halving = |bytes: usize| size >= 4 && size.is_power_of_two() && bytes <= 4 << 20;
            let want = (sizes.iter())
                .filter(|&&b| direct && !halving(len * b))
                .count() as u64;
            ensure(taken == want, || {
                format!(
                    "allreduce {op:?} of {len} on {size} ranks (path {path:?}): {taken} took \
                     the direct reduce-scatter, expected {want}"
                )
            })?;
        }
    }
    Ok(())
}

/// `allreduce_one::<f32>`, checking that `Communicator::allreduce_algorithm`
/// said beforehand whether it would take the direct reduce-scatter, and
/// what it says of a host buffer of that length and of an empty buffer.
fn allreduce_f32_as_announced(t: &Ranks, op: ReduceOp, len: usize) -> Check {
    use vkcompute_mpi::AllreduceAlgorithm as A;
    let buf = upload(t.ctx, &data::<f32>(t.rank, len))?;
    let said = t.comm.allreduce_algorithm(&buf);
    let before = t.comm.direct_reduce_scatters();
    let what = format!("allreduce {op:?} of {len} f32 ({said:?})");
    ok(&what, t.comm.allreduce(&buf, op))?;
    let direct = t.comm.direct_reduce_scatters() - before == 1;
    ensure(direct == (said == A::Direct), || {
        format!("{what}: took the direct reduce-scatter: {direct}")
    })?;
    let on_node = t.comm.collective_path() == vkcompute_mpi::Path::SameNode;
    ensure(on_node == (said == A::AllToAll) || t.size == 1, || {
        format!("{what} on path {:?}", t.comm.collective_path())
    })?;
    // A host buffer goes through a mirror: the same algorithm.
    let host = host_buffer(t.ctx, &data::<f32>(t.rank, len))?;
    let host_said = t.comm.allreduce_algorithm(&host);
    ensure(host_said == said, || {
        format!("a host buffer of {len} f32: {host_said:?}, a device buffer: {said:?}")
    })?;
    let empty = dev("create", t.ctx.enqueue_create_buffer::<f32>(0))?;
    let empty_said = t.comm.allreduce_algorithm(&empty);
    ensure(empty_said == A::Local, || {
        format!("an empty buffer: {empty_said:?}")
    })?;
    same(
        &what,
        &dev("read", buf.to_vec())?,
        &reference::<f32>(op, t.size, len),
    )
}

/// The input is written by enqueued work just before the call, and the
/// result is read by enqueued work just after it: both in stream order.
pub(crate) fn allreduce_result_is_stream_ordered(t: &Ranks) -> Check {
    let len = 4099;
    let buf = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
    dev("fill", buf.enqueue_fill(t.rank as u32 + 1))?;
    let src = upload(t.ctx, &data::<u32>(t.rank, len))?;
    dev("copy", buf.enqueue_copy_from(&src))?;
    ok("allreduce", t.comm.allreduce(&buf, ReduceOp::Max))?;
    let after = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
    dev("copy after", after.enqueue_copy_from(&buf))?;
    same(
        "copy of the result",
        &dev("read", after.to_vec())?,
        &reference::<u32>(ReduceOp::Max, t.size, len),
    )
}

pub(crate) fn reduce_one<T: Arith>(t: &Ranks, op: ReduceOp, len: usize, root: i32) -> Check {
    let mine = data::<T>(t.rank, len);
    let buf = upload(t.ctx, &mine)?;
    let what = format!("reduce {op:?} of {len} {} to {root}", T::TYPE);
    ok(&what, t.comm.reduce(&buf, op, root))?;
    let want = if t.rank == root {
        reference::<T>(op, t.size, len)
    } else {
        mine
    };
    same(&what, &dev("read", buf.to_vec())?, &want)
}

pub(crate) fn reduce_to_each_root(t: &Ranks) -> Check {
    for root in [0, t.size - 1] {
        for op in ReduceOp::ALL {
            for len in LENGTHS {
                reduce_one::<f32>(t, op, len, root)?;
                reduce_one::<u64>(t, op, len, root)?;
            }
        }
        reduce_one::<i32>(t, ReduceOp::Sum, 1003, root)?;
    }
    Ok(())
}

pub(crate) fn allgather_one<T: Value>(t: &Ranks, m: usize) -> Check {
    let send = upload(t.ctx, &data::<T>(t.rank, m))?;
    let recv = dev(
        "create",
        t.ctx.enqueue_create_buffer::<T>(m * t.size as usize),
    )?;
    let what = format!("allgather of {m} {}", T::TYPE);
    ok(&what, t.comm.allgather(&send, &recv))?;
    let want: Vec<T> = (0..t.size).flat_map(|r| data::<T>(r, m)).collect();
    same(&what, &dev("read", recv.to_vec())?, &want)
}

pub(crate) fn allgather_blocks(t: &Ranks) -> Check {
    for m in [0usize, 1, 5, 1003] {
        allgather_one::<f32>(t, m)?;
        allgather_one::<u16>(t, m)?;
    }
    Ok(())
}

pub(crate) fn reduce_scatter_one<T: Arith>(t: &Ranks, op: ReduceOp, m: usize) -> Check {
    let p = t.size as usize;
    let send = upload(t.ctx, &data::<T>(t.rank, m * p))?;
    let recv = dev("create", t.ctx.enqueue_create_buffer::<T>(m))?;
    let what = format!("reduce_scatter {op:?} of {m} {}", T::TYPE);
    ok(&what, t.comm.reduce_scatter(&send, &recv, op))?;
    let all = reference::<T>(op, t.size, m * p);
    let r = t.rank as usize;
    same(
        &what,
        &dev("read", recv.to_vec())?,
        &all[r * m..(r + 1) * m],
    )
}

pub(crate) fn reduce_scatter_blocks(t: &Ranks) -> Check {
    for m in [0usize, 1, 5, 257] {
        reduce_scatter_one::<f32>(t, ReduceOp::Sum, m)?;
        reduce_scatter_one::<i64>(t, ReduceOp::Min, m)?;
        reduce_scatter_one::<u32>(t, ReduceOp::Product, m)?;
        reduce_scatter_one::<f64>(t, ReduceOp::Max, m)?;
    }
    Ok(())
}

/// Ranks that disagree get `Mismatch` on every rank, and nothing changes.
pub(crate) fn collective_mismatch_fails_on_every_rank(t: &Ranks) -> Check {
    let mine = data::<f32>(t.rank, 9);
    let expect_mismatch = |what: &str, r: vkcompute_mpi::Result<()>| match r {
        Err(Error::Mismatch { detail, .. }) if detail.contains("rank 0") => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    };
    // Rank 0 has one element more.
    let buf = upload(
        t.ctx,
        &data::<f32>(t.rank, if t.rank == 0 { 10 } else { 9 }),
    )?;
    expect_mismatch(
        "allreduce of different lengths",
        t.comm.allreduce(&buf, ReduceOp::Sum),
    )?;
    // Rank 0 reduces i32, the others f32.
    let floats = upload(t.ctx, &mine)?;
    let ints = upload(t.ctx, &data::<i32>(t.rank, 9))?;
    let r = if t.rank == 0 {
        t.comm.allreduce(&ints, ReduceOp::Sum)
    } else {
        t.comm.allreduce(&floats, ReduceOp::Sum)
    };
    expect_mismatch("allreduce of different types", r)?;
    // Different reductions.
    let op = if t.rank == 0 {
        ReduceOp::Max
    } else {
        ReduceOp::Sum
    };
    expect_mismatch(
        "allreduce of different reductions",
        t.comm.allreduce(&floats, op),
    )?;
    // Different roots.
    let root = if t.rank == 0 { 0 } else { t.size - 1 };
    expect_mismatch(
        "broadcast from different roots",
        t.comm.broadcast(&floats, root),
    )?;
    // Different operations.
    let r = if t.rank == 0 {
        t.comm.broadcast(&floats, 0)
    } else {
        t.comm.allreduce(&floats, ReduceOp::Sum)
    };
    expect_mismatch("broadcast against allreduce", r)?;
    same(
        "the buffer after the refused collectives",
        &dev("read", floats.to_vec())?,
        &mine,
    )?;
    // The communicator still works.
    ok(
        "allreduce after the mismatches",
        t.comm.allreduce(&floats, ReduceOp::Sum),
    )?;
    same(
        "allreduce after the mismatches",
        &dev("read", floats.to_vec())?,
        &reference::<f32>(ReduceOp::Sum, t.size, 9),
    )
}

/// A length that does not suit reduce_scatter on one rank: that rank gets
/// `InvalidLength`, every other `RemoteFailure` naming it.
pub(crate) fn collective_bad_length_fails_on_every_rank(t: &Ranks) -> Check {
    let p = t.size as usize;
    let bad = t.size - 1;
    let send = upload(
        t.ctx,
        &data::<f32>(t.rank, 4 * p + usize::from(t.rank == bad)),
    )?;
    let recv = dev("create", t.ctx.enqueue_create_buffer::<f32>(4))?;
    match (
        t.rank == bad,
        t.comm.reduce_scatter(&send, &recv, ReduceOp::Sum),
    ) {
        (true, Err(Error::InvalidLength { .. })) => Ok(()),
        (false, Err(Error::RemoteFailure { failed, .. })) if failed == bad => Ok(()),
        (_, other) => Err(format!(
            "reduce_scatter with a bad length on rank {bad}: {other:?}"
        )),
    }
}

/// A buffer mapped on one rank. Direct path: that rank fails before any
/// data moves and every other rank hears of it. Staging path: the device
/// may read the buffer but not write it, so the others complete and that
/// rank alone fails, when it writes the result.
/// The checks of allreduce (run on every path), with the 64 MiB one
/// (which also sends) where `large`.
pub(crate) fn allreduces(large: bool) -> Vec<Named> {
    let mut checks: Vec<Named> = vec![
        ("allreduce_every_type_and_op", allreduce_every_type_and_op),
        ("allreduce_view_at_odd_offset", allreduce_view_at_odd_offset),
        ("allreduce_across_paths", allreduce_across_paths),
        (
            "allreduce_direct_reduce_scatter",
            allreduce_direct_reduce_scatter,
        ),
        (
            "allreduce_result_is_stream_ordered",
            allreduce_result_is_stream_ordered,
        ),
        (
            "collectives_with_a_mapped_buffer_fail_on_every_rank",
            collectives_with_a_mapped_buffer_fail_on_every_rank,
        ),
        ("collectives_on_host_buffers", collectives_on_host_buffers),
        (
            "collectives_in_the_halving_range",
            collectives_in_the_halving_range,
        ),
        (
            "allreduce_with_borrowed_host_buffer",
            allreduce_with_borrowed_host_buffer,
        ),
    ];
    if large {
        checks.push(("large_64_mib", large_64_mib));
        checks.push(("allreduce_by_mpi_in_pieces", allreduce_by_mpi_in_pieces));
    }
    checks
}

/// A buffer the host maps on one rank fails a collective on every rank,
/// on every path (the holder gets vkcompute's error, the others
/// `RemoteFailure`), before anything is written: allreduce, broadcast
/// with the mapping at the root and elsewhere, reduce, and allgather and
/// reduce_scatter with their two buffers views of the mapped one.
pub(crate) fn collectives_with_a_mapped_buffer_fail_on_every_rank(t: &Ranks) -> Check {
    let last = t.size - 1;
    let c = t.comm;
    let blocks = 3 * t.size as usize;
    type Call<'a> = &'a dyn Fn(&DeviceBuffer<f32>) -> vkcompute_mpi::Result<()>;
    let view = |b: &DeviceBuffer<f32>, at, n| b.create_sub_buffer::<f32>(at, n).expect("a view");
    let cases: [(&str, i32, Call); 6] = [
        ("allreduce", last, &|b| c.allreduce(b, ReduceOp::Sum)),
        ("broadcast, mapped at the root", 0, &|b| c.broadcast(b, 0)),
        ("broadcast, mapped elsewhere", last, &|b| c.broadcast(b, 0)),
        ("reduce", last, &|b| c.reduce(b, ReduceOp::Sum, 0)),
        ("allgather", last, &|b| {
            c.allgather(&view(b, 0, 3), &view(b, 3, blocks))
        }),
        ("reduce_scatter", last, &|b| {
            c.reduce_scatter(&view(b, 0, blocks), &view(b, blocks, 3), ReduceOp::Sum)
        }),
    ];
    for (what, holder, call) in cases {
        let before = data::<f32>(t.rank, 33);
        let buf = upload(t.ctx, &before)?;
        let mapping = match t.rank == holder {
            true => Some(dev("map", buf.map_to_host())?),
            false => None,
        };
        let result = call(&buf);
        drop(mapping);
        if !fails_for_mapping(t.rank == holder, holder, &result) {
            return Err(format!(
                "{what}, a buffer mapped on rank {holder}: {result:?}"
            ));
        }
        same(what, &dev("read", buf.to_vec())?, &before)?;
    }
    Ok(())
}

/// 64 MiB of f32: allreduce, broadcast and a message from rank 0 to the
/// last rank.
pub(crate) fn large_64_mib(t: &Ranks) -> Check {
    let len = 16 << 20;
    let buf = upload(t.ctx, &data::<f32>(t.rank, len))?;
    ok("allreduce of 64 MiB", t.comm.allreduce(&buf, ReduceOp::Sum))?;
    same(
        "allreduce of 64 MiB",
        &dev("read", buf.to_vec())?,
        &reference::<f32>(ReduceOp::Sum, t.size, len),
    )?;
    let last = t.size - 1;
    if t.rank == 0 {
        let out = upload(t.ctx, &data::<f32>(5, len))?;
        ok("send of 64 MiB", t.comm.send(&out, last, 10))?;
    } else if t.rank == last {
        ok("recv of 64 MiB", t.comm.recv(&buf, 0, 10))?;
        same(
            "message of 64 MiB",
            &dev("read", buf.to_vec())?,
            &data::<f32>(5, len),
        )?;
    }
    // The same through isend and irecv, both directions at once.
    if t.rank == 0 || t.rank == last {
        let peer = last - t.rank;
        let out = upload(t.ctx, &data::<f32>(t.rank + 6, len))?;
        let r = ok("irecv of 64 MiB", t.comm.irecv(&buf, peer, 11))?;
        let s = ok("isend of 64 MiB", t.comm.isend(&out, peer, 11))?;
        ok("wait for the isend of 64 MiB", s.wait())?;
        ok("wait for the irecv of 64 MiB", r.wait())?;
        same(
            "irecv of 64 MiB",
            &dev("read", buf.to_vec())?,
            &data::<f32>(peer + 6, len),
        )?;
    }
    Ok(())
}

/// A host buffer holding `host`.
pub(crate) fn host_buffer<T: Element>(
    ctx: &DeviceContext,
    host: &[T],
) -> Result<HostBuffer<T>, String> {
    let buf = dev(
        "create",
        ctx.enqueue_create_host_buffer::<T>(host.len().max(1)),
    )?;
    let buf = dev("view", buf.create_sub_buffer::<T>(0, host.len()))?;
    dev("upload", buf.enqueue_copy_from(host))?;
    Ok(buf)
}

/// Every collective on `HostBuffer`s (and one mixing a host and a device
/// buffer), against the CPU reference.
pub(crate) fn collectives_on_host_buffers(t: &Ranks) -> Check {
    let p = t.size as usize;
    let r = t.rank as usize;
    for m in [0usize, 1, 7, 1001] {
        let what = |name: &str| format!("{name} of {m} on host buffers");
        allreduce_host_one::<u32>(t, ReduceOp::Sum, m)?;

        let buf = host_buffer(t.ctx, &data::<f32>(t.rank, m))?;
        let root = t.size - 1;
        ok(&what("reduce"), t.comm.reduce(&buf, ReduceOp::Max, root))?;
        let want = if t.rank == root {
            reference::<f32>(ReduceOp::Max, t.size, m)
        } else {
            data::<f32>(t.rank, m)
        };
        same(&what("reduce"), &dev("read", buf.to_vec())?, &want)?;

        let buf = host_buffer(t.ctx, &data::<i64>(t.rank, m))?;
        ok(&what("broadcast"), t.comm.broadcast(&buf, 0))?;
        same(
            &what("broadcast"),
            &dev("read", buf.to_vec())?,
            &data::<i64>(0, m),
        )?;

        let send = host_buffer(t.ctx, &data::<u32>(t.rank, m))?;
        let recv = host_buffer(t.ctx, &vec![0u32; m * p])?;
        ok(&what("allgather"), t.comm.allgather(&send, &recv))?;
        let all: Vec<u32> = (0..t.size).flat_map(|k| data::<u32>(k, m)).collect();
        same(&what("allgather"), &dev("read", recv.to_vec())?, &all)?;

        // A host buffer in, a device buffer out.
        let send = host_buffer(t.ctx, &data::<f64>(t.rank, m * p))?;
        let recv = dev("create", t.ctx.enqueue_create_buffer::<f64>(m))?;
        ok(
            &what("reduce_scatter"),
            t.comm.reduce_scatter(&send, &recv, ReduceOp::Sum),
        )?;
        let all = reference::<f64>(ReduceOp::Sum, t.size, m * p);
        same(
            &what("reduce_scatter"),
            &dev("read", recv.to_vec())?,
            &all[r * m..(r + 1) * m],
        )?;
    }
    Ok(())
}

/// A host buffer borrowed on the host (`as_mut_slice`) on the last rank
/// during an allreduce: that rank gets vkcompute's error for a mapped
/// buffer, the others `RemoteFailure` naming it, and nothing hangs.
pub(crate) fn allreduce_with_borrowed_host_buffer(t: &Ranks) -> Check {
    let borrowing = t.size - 1;
    let buf = host_buffer(t.ctx, &data::<f32>(t.rank, 33))?;
    let borrow = if t.rank == borrowing {
        Some(dev("borrow", buf.as_mut_slice())?)
    } else {
        None
    };
    let result = t.comm.allreduce(&buf, ReduceOp::Sum);
    drop(borrow);
    ensure(
        fails_for_mapping(t.rank == borrowing, borrowing, &result),
        || format!("allreduce with a host buffer borrowed on rank {borrowing}: {result:?}"),
    )
}

/// Whether `result` is the failure a buffer mapped on rank `holder` gives:
/// vkcompute's error there (`holds`: this is that rank), `RemoteFailure`
/// naming it elsewhere.
pub(crate) fn fails_for_mapping(
    holds: bool,
    holder: i32,
    result: &vkcompute_mpi::Result<()>,
) -> bool {
    match (holds, result) {
        (true, Err(e)) => e.to_string().contains("mapped"),
        (false, Err(Error::RemoteFailure { failed, reason, .. })) => {
            *failed == holder && reason.contains("mapped")
        }
        _ => false,
    }
}

/// Every reduction and gather at lengths over 64 KiB and at most 4 MiB,
/// which take recursive halving and doubling on 4 ranks (the ring on 2 and
/// 3; allreduce takes the same-node path where the communicator does, so
/// this runs over MPI too, with `allreduces`): odd lengths, so the last
/// chunks are short, reduce_scatter blocks that are a multiple of the
/// binding alignment (16,384: halving) and ones that are not (40,003: the
/// ring, since halving would send the gaps between them), a view at an
/// odd offset (staged: the kernels cannot bind it in place) and a host
/// buffer.
pub(crate) fn collectives_in_the_halving_range(t: &Ranks) -> Check {
    allreduce_one::<f64>(t, ReduceOp::Sum, 70_001)?;
    allreduce_one::<u32>(t, ReduceOp::Product, 300_007)?;
    allreduce_one::<i64>(t, ReduceOp::Min, 500_003)?;
    allreduce_view(t, ReduceOp::Max, 7, 50_001)?;
    allreduce_host_one::<u64>(t, ReduceOp::Sum, 40_009)?;
    reduce_one::<f32>(t, ReduceOp::Sum, 100_003, t.size - 1)?;
    reduce_one::<u64>(t, ReduceOp::Max, 30_011, 0)?;
    reduce_scatter_one::<f32>(t, ReduceOp::Sum, 40_003)?;
    reduce_scatter_one::<i32>(t, ReduceOp::Min, 16_384)?;
    allgather_one::<f32>(t, 30_001)?;
    allgather_one::<u16>(t, 65_537)
}

/// Every collective whose chunks (one rank's share) are longer than one 4
/// MiB piece, which the staged path moves in pieces through host buffers of
/// one piece each (`pipelined.rs`; a reduce by MPI's own reduce in pieces,
/// `mpi.rs`, every type and operation over MPI): odd lengths (short last
/// pieces and chunks), reduce_scatter blocks with gaps between them in the
/// working buffer, views at odd offsets (their parents' other elements
/// checked), host buffers, and a broadcast and an allgather with a host
/// buffer on the odd ranks and a device buffer (mapped where it maps
/// directly) on the even ones, so that ranks on different memory paths
/// pair.
pub(crate) fn collectives_in_pieces(t: &Ranks) -> Check {
    let (p, r) = (t.size as usize, t.rank as usize);
    // Elements of 4 bytes in a piece.
    let piece = 1usize << 20;
    let last = t.size - 1;
    let mpi_before = t.comm.mpi_reduces();
    reduce_one::<f32>(t, ReduceOp::Sum, p * piece + 13, last)?;
    let n = p * piece + 5;
    let (parent, view) = in_view::<i32>(t, 3, &data::<i32>(t.rank, n))?;
    ok(
        "reduce of a view in pieces",
        t.comm.reduce(&view, ReduceOp::Max, 0),
    )?;
    let want = if t.rank == 0 {
        reference::<i32>(ReduceOp::Max, t.size, n)
    } else {
        data::<i32>(t.rank, n)
    };
    parent_holds(&parent, 3, &want, "reduce of a view in pieces")?;
    // A host buffer of u64 (three pieces a chunk, the last short) to a
    // root in the middle; the other ranks' buffers are left alone.
    let n = 3 * p * (piece / 2) - 7;
    let mine = data::<u64>(t.rank, n);
    let host = host_buffer(t.ctx, &mine)?;
    let what = "reduce of a host buffer in pieces to rank 1";
    ok(what, t.comm.reduce(&host, ReduceOp::Min, 1))?;
    let want = match t.rank {
        1 => reference::<u64>(ReduceOp::Min, t.size, n),
        _ => mine,
    };
    same(what, &dev("read", host.to_vec())?, &want)?;
    // Over MPI (where MPI reduces them, or on two ranks this rank with
    // MPI_Reduce_local) the other element types and operations, to the
    // last rank and to rank 0, each just over one piece a chunk.
    let on_node = t.comm.collective_path() == vkcompute_mpi::Path::SameNode;
    if !on_node {
        let just_over = |piece: usize| p * piece + 3;
        reduce_one::<f64>(t, ReduceOp::Product, just_over(piece / 2), last)?;
        reduce_one::<i64>(t, ReduceOp::Max, just_over(piece / 2), 0)?;
        reduce_one::<u32>(t, ReduceOp::Sum, just_over(piece), last)?;
        reduce_one::<i32>(t, ReduceOp::Min, just_over(piece), 0)?;
    }
    // Over MPI each took MPI's reduce in pieces; on the same-node path
    // none did.
    let by_mpi = t.comm.mpi_reduces() - mpi_before;
    let want = if on_node { 0 } else { 7 };
    ensure(by_mpi == want, || {
        format!("{by_mpi} of {want} reduces in pieces took MPI's reduce")
    })?;
    reduce_scatter_one::<f32>(t, ReduceOp::Sum, piece + 7)?;
    let m = piece / 2 + 1;
    let send = host_buffer(t.ctx, &data::<u64>(t.rank, m * p))?;
    let (parent, recv) = in_view::<u64>(t, 1, &vec![0; m])?;
    let what = "reduce_scatter of a host buffer into a view in pieces";
    ok(what, t.comm.reduce_scatter(&send, &recv, ReduceOp::Min))?;
    let all = reference::<u64>(ReduceOp::Min, t.size, m * p);
    parent_holds(&parent, 1, &all[r * m..(r + 1) * m], what)?;
    allgather_one::<f32>(t, piece + 3)?;
    let m = piece + 1;
    let mine = data::<u32>(t.rank, m);
    let (parent, recv) = in_view::<u32>(t, 1, &vec![0; m * p])?;
    let what = "allgather in pieces, host and device buffers, into a view";
    if r % 2 == 1 {
        ok(what, t.comm.allgather(&host_buffer(t.ctx, &mine)?, &recv))?;
    } else {
        ok(what, t.comm.allgather(&upload(t.ctx, &mine)?, &recv))?;
    }
    let all: Vec<u32> = (0..t.size).flat_map(|k| data::<u32>(k, m)).collect();
    parent_holds(&parent, 1, &all, what)?;
    broadcast_one::<i64>(t, 5 * piece / 2 + 3, last)?;
    let n = (5 << 20) + 3;
    let what = "broadcast in pieces, host and device buffers";
    let got = if r % 2 == 1 {
        let buf = host_buffer(t.ctx, &data::<u8>(t.rank, n))?;
        ok(what, t.comm.broadcast(&buf, 0))?;
        dev("read", buf.to_vec())?
    } else {
        let buf = upload(t.ctx, &data::<u8>(t.rank, n))?;
        ok(what, t.comm.broadcast(&buf, 0))?;
        dev("read", buf.to_vec())?
    };
    same(what, &got, &data::<u8>(0, n))
}

/// The fill of the parents of `in_view`.
const PARENT_FILL: u8 = 0x5a;

/// A view at `offset` in a parent two elements longer (the rest of it
/// filled with `PARENT_FILL` bytes), holding `host`.
fn in_view<T: Element>(
    t: &Ranks,
    offset: usize,
    host: &[T],
) -> Result<(DeviceBuffer<T>, DeviceBuffer<T>), String> {
    let len = offset + host.len() + 2;
    let parent = dev("parent", t.ctx.enqueue_create_buffer::<T>(len))?;
    let fill = vec![PARENT_FILL; len * std::mem::size_of::<T>()];
    dev(
        "fill",
        parent.enqueue_copy_from(bytemuck::cast_slice::<u8, T>(&fill)),
    )?;
    let view = dev("view", parent.create_sub_buffer::<T>(offset, host.len()))?;
    dev("upload", view.enqueue_copy_from(host))?;
    Ok((parent, view))
}

/// Whether `parent` (of `in_view`) holds `want` at `offset` and its fill
/// elsewhere.
fn parent_holds<T: Element + PartialEq + Debug>(
    parent: &DeviceBuffer<T>,
    offset: usize,
    want: &[T],
    what: &str,
) -> Check {
    let got = dev("read", parent.to_vec())?;
    let fill: T = bytemuck::cast_slice::<u8, T>(&vec![PARENT_FILL; std::mem::size_of::<T>()])[0];
    let mut all = vec![fill; got.len()];
    all[offset..offset + want.len()].copy_from_slice(want);
    same(&format!("{what} (the view's parent)"), &got, &all)
}
