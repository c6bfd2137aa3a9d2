//! The collectives where the same-node path spans the communicator
//! (`Communicator::collective_path`): that they take it exactly then,
//! views at odd offsets, buffers that overlap (in place), mismatches that
//! must leave the ranks' shared memory in step, buffers borrowed by the
//! host, one-rank communicators, and 64 MiB. All of them run on both
//! communicators of `rank_main` (with the path, and over MPI; the 64 MiB
//! one on the path only), each result checked against the CPU reference.

use mpi::topology::Color;
use mpi::traits::Communicator as _;
use vkcompute_mpi::Path;

use super::*;

/// The checks of this file, with the 64 MiB one where `large`.
pub(crate) fn on_node_collectives(large: bool) -> Vec<Named> {
    let mut checks: Vec<Named> = vec![
        (
            "collectives_take_the_path_where_it_says",
            collectives_take_the_path_where_it_says,
        ),
        (
            "collectives_of_views_at_odd_offsets",
            collectives_of_views_at_odd_offsets,
        ),
        ("collectives_in_place", collectives_in_place),
        (
            "collective_mismatches_keep_the_ranks_in_step",
            collective_mismatches_keep_the_ranks_in_step,
        ),
        (
            "collectives_with_buffers_the_host_holds",
            collectives_with_buffers_the_host_holds,
        ),
        ("collectives_on_one_rank", collectives_on_one_rank),
    ];
    if large {
        checks.push(("collectives_64_mib", collectives_64_mib));
    }
    checks
}

/// The collectives of `collectives.rs`, zero and five elements long:
/// those of five take the same-node path (one each, counted by the
/// communicator) exactly where `collective_path` says so, the empty ones
/// never.
pub(crate) fn collectives_take_the_path_where_it_says(t: &Ranks) -> Check {
    let c = t.comm;
    let on = c.collective_path() == Path::SameNode;
    let peers = (0..t.size).filter(|&p| p != t.rank);
    let every_peer_on = peers
        .map(|p| c.path_to(p))
        .all(|p| matches!(p, Ok(Path::SameNode)));
    ensure(!on || every_peer_on, || {
        "collective_path is SameNode, but path_to is not for every peer".into()
    })?;
    let counted = |what: &str, len: usize, call: &dyn Fn() -> Check| -> Check {
        let before = c.same_node_collectives();
        call()?;
        let taken = c.same_node_collectives() - before;
        let want = u64::from(on && len > 0);
        ensure(taken == want, || {
            format!(
                "{what} of {len}: {taken} collectives on the same-node path, expected {want} \
                 (collective_path {:?})",
                c.collective_path()
            )
        })
    };
    for len in [0usize, 5] {
        counted("broadcast", len, &|| {
            broadcast_one::<f32>(t, len, t.size - 1)
        })?;
        counted("allreduce", len, &|| {
            allreduce_one::<i32>(t, ReduceOp::Max, len)
        })?;
        counted("reduce", len, &|| {
            reduce_one::<u32>(t, ReduceOp::Sum, len, 0)
        })?;
        counted("allgather", len, &|| allgather_one::<u16>(t, len))?;
        counted("reduce_scatter", len, &|| {
            reduce_scatter_one::<f64>(t, ReduceOp::Min, len)
        })?;
    }
    Ok(())
}

/// A view of `host.len()` elements at `offset` in a new parent two
/// elements longer, the rest of which holds `fill`: `(parent, view)`.
pub(crate) fn view_in_parent<T: Element>(
    t: &Ranks,
    offset: usize,
    host: &[T],
    fill: T,
) -> Result<(DeviceBuffer<T>, DeviceBuffer<T>), String> {
    let parent = dev(
        "parent",
        t.ctx.enqueue_create_buffer::<T>(offset + host.len() + 2),
    )?;
    dev("fill", parent.enqueue_fill(fill))?;
    let view = dev("view", parent.create_sub_buffer::<T>(offset, host.len()))?;
    dev("upload", view.enqueue_copy_from(host))?;
    Ok((parent, view))
}

/// Checks that `parent` holds `want` at `offset` and `fill` elsewhere.
pub(crate) fn parent_holds<T: Value>(
    what: &str,
    parent: &DeviceBuffer<T>,
    offset: usize,
    want: &[T],
    fill: T,
) -> Check {
    let mut all = vec![fill; parent.len()];
    all[offset..offset + want.len()].copy_from_slice(want);
    same(what, &dev("read", parent.to_vec())?, &all)
}

/// Broadcast, reduce, allgather and reduce_scatter of views at odd
/// offsets (the kernels cannot bind them in place; on the same-node path
/// they are copied into and out of the shared memory): the views hold the
/// results, the rest of their parents is untouched.
pub(crate) fn collectives_of_views_at_odd_offsets(t: &Ranks) -> Check {
    let (p, r, last) = (t.size as usize, t.rank as usize, t.size - 1);
    for (offset, m) in [(1usize, 1usize), (3, 7), (5, 1003)] {
        let what = |name: &str| format!("{name} of a view of {m} at {offset}");

        let (parent, view) = view_in_parent(t, offset, &data::<i32>(t.rank, m), 77)?;
        ok(&what("broadcast"), t.comm.broadcast(&view, last))?;
        parent_holds(&what("broadcast"), &parent, offset, &data(last, m), 77)?;

        let (parent, view) = view_in_parent(t, offset, &data::<i32>(t.rank, m), 77)?;
        ok(&what("reduce"), t.comm.reduce(&view, ReduceOp::Sum, 0))?;
        let want = if t.rank == 0 {
            reference::<i32>(ReduceOp::Sum, t.size, m)
        } else {
            data(t.rank, m)
        };
        parent_holds(&what("reduce"), &parent, offset, &want, 77)?;

        let (_, send) = view_in_parent(t, offset, &data::<i32>(t.rank, m), 77)?;
        let (parent, recv) = view_in_parent(t, offset + 2, &vec![0i32; m * p], 77)?;
        ok(&what("allgather"), t.comm.allgather(&send, &recv))?;
        let all: Vec<i32> = (0..t.size).flat_map(|k| data::<i32>(k, m)).collect();
        parent_holds(&what("allgather"), &parent, offset + 2, &all, 77)?;

        let (_, send) = view_in_parent(t, offset + 2, &data::<i32>(t.rank, m * p), 77)?;
        let (parent, recv) = view_in_parent(t, offset, &vec![0i32; m], 77)?;
        ok(
            &what("reduce_scatter"),
            t.comm.reduce_scatter(&send, &recv, ReduceOp::Max),
        )?;
        let all = reference::<i32>(ReduceOp::Max, t.size, m * p);
        parent_holds(
            &what("reduce_scatter"),
            &parent,
            offset,
            &all[r * m..(r + 1) * m],
            77,
        )?;
    }
    Ok(())
}

/// Buffers that overlap: an allgather whose `send` is this rank's block
/// of its `recv` (in place), reduce_scatters whose `recv` is a block of
/// their `send` (this rank's, and the first), and one buffer passed as
/// both, which is the wrong length for one of them on every rank
/// (`InvalidLength` everywhere, and the communicator works on).
pub(crate) fn collectives_in_place(t: &Ranks) -> Check {
    let (p, r) = (t.size as usize, t.rank as usize);
    for m in [1usize, 7, 1003] {
        let what = |name: &str| format!("{name} of {m} in place");
        let mut start = vec![-9i64; m * p];
        start[r * m..(r + 1) * m].copy_from_slice(&data::<i64>(t.rank, m));
        let recv = upload(t.ctx, &start)?;
        let send = dev("view", recv.create_sub_buffer::<i64>(r * m, m))?;
        ok(&what("allgather"), t.comm.allgather(&send, &recv))?;
        let all: Vec<i64> = (0..t.size).flat_map(|k| data::<i64>(k, m)).collect();
        same(&what("allgather"), &dev("read", recv.to_vec())?, &all)?;

        for block in [r, 0] {
            let mine = data::<u32>(t.rank, m * p);
            let send = upload(t.ctx, &mine)?;
            let recv = dev("view", send.create_sub_buffer::<u32>(block * m, m))?;
            let name = format!("reduce_scatter into block {block} of its send");
            ok(
                &what(&name),
                t.comm.reduce_scatter(&send, &recv, ReduceOp::Sum),
            )?;
            let mut want = mine;
            let reduced = reference::<u32>(ReduceOp::Sum, t.size, m * p);
            want[block * m..(block + 1) * m].copy_from_slice(&reduced[r * m..(r + 1) * m]);
            same(&what(&name), &dev("read", send.to_vec())?, &want)?;
        }
    }
    let both = upload(t.ctx, &data::<f32>(t.rank, 8))?;
    for (name, result) in [
        ("allgather", t.comm.allgather(&both, &both)),
        (
            "reduce_scatter",
            t.comm.reduce_scatter(&both, &both, ReduceOp::Sum),
        ),
    ] {
        match result {
            Err(Error::InvalidLength { .. }) => {}
            other => return Err(format!("{name} of one buffer as send and recv: {other:?}")),
        }
    }
    same(
        "the buffer passed as both",
        &dev("read", both.to_vec())?,
        &data::<f32>(t.rank, 8),
    )?;
    allreduce_one::<f32>(t, ReduceOp::Sum, 8)
}

/// On a new communicator (its shared memory empty), rank 0 asks for more
/// than the others in each collective (so its memory grows to a new
/// generation that never goes out), then for another root: `Mismatch` on
/// every rank; then the same collectives agreed, large (every rank's
/// memory new) and small (reused), arrive whole; an allgather whose
/// `recv` is the wrong length on one rank is `InvalidLength` there and
/// `RemoteFailure` elsewhere.
pub(crate) fn collective_mismatches_keep_the_ranks_in_step(t: &Ranks) -> Check {
    let c = t.new_communicator()?;
    let u = Ranks { comm: &c, ..*t };
    let (p, last) = (t.size as usize, t.size - 1);
    let (big, small) = (300_007usize, 1001usize);
    let mine = if t.rank == 0 { big } else { small };
    let mismatch = |what: &str, r: vkcompute_mpi::Result<()>| match r {
        Err(Error::Mismatch { detail, .. }) if detail.contains("rank 0") => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    };
    let buf = upload(t.ctx, &data::<f32>(t.rank, mine))?;
    mismatch("broadcast of different lengths", c.broadcast(&buf, 0))?;
    mismatch(
        "reduce of different lengths",
        c.reduce(&buf, ReduceOp::Sum, 0),
    )?;
    let recv = dev("create", t.ctx.enqueue_create_buffer::<f32>(mine * p))?;
    mismatch("allgather of different lengths", c.allgather(&buf, &recv))?;
    mismatch(
        "reduce_scatter of different lengths",
        c.reduce_scatter(&recv, &buf, ReduceOp::Sum),
    )?;
    let root = if t.rank == 0 { 0 } else { last };
    let small_buf = upload(t.ctx, &data::<f32>(t.rank, small))?;
    mismatch(
        "reduce to different roots",
        c.reduce(&small_buf, ReduceOp::Sum, root),
    )?;
    same(
        "the buffer after the refused collectives",
        &dev("read", buf.to_vec())?,
        &data::<f32>(t.rank, mine),
    )?;
    for len in [big, small] {
        broadcast_one::<f32>(&u, len, last)?;
        reduce_one::<f32>(&u, ReduceOp::Sum, len, 0)?;
        allgather_one::<f32>(&u, len / p)?;
        reduce_scatter_one::<f32>(&u, ReduceOp::Sum, len / p)?;
        allreduce_one::<f32>(&u, ReduceOp::Min, len)?;
    }
    let bad = last;
    let send = upload(t.ctx, &data::<u32>(t.rank, 4))?;
    let recv = dev(
        "create",
        t.ctx
            .enqueue_create_buffer::<u32>(4 * p + usize::from(t.rank == bad)),
    )?;
    match (t.rank == bad, c.allgather(&send, &recv)) {
        (true, Err(Error::InvalidLength { .. })) => {}
        (false, Err(Error::RemoteFailure { failed, .. })) if failed == bad => {}
        (_, other) => {
            return Err(format!(
                "allgather with a bad length on rank {bad}: {other:?}"
            ))
        }
    }
    allgather_one::<u32>(&u, 4)
}

/// `call`, with `buf` borrowed mutably on the host meanwhile where `holds`.
fn while_held<T: Element, R>(
    holds: bool,
    buf: &HostBuffer<T>,
    call: impl FnOnce() -> R,
) -> Result<R, String> {
    let borrow = if holds {
        Some(dev("borrow", buf.as_mut_slice())?)
    } else {
        None
    };
    let result = call();
    drop(borrow);
    Ok(result)
}

/// Buffers the host holds on the last rank. A source borrowed mutably
/// (`as_mut_slice`: the device may neither read nor write it) fails
/// before the ranks agree, on every path: that rank gets vkcompute's
/// error, the others `RemoteFailure` naming it. So does a device buffer
/// the host maps, destination or not. A destination host buffer borrowed
/// so is that rank's error only, once it has done its part: the others'
/// results are right.
pub(crate) fn collectives_with_buffers_the_host_holds(t: &Ranks) -> Check {
    buffers_the_host_holds(t, 33)
}

/// `collectives_with_buffers_the_host_holds` with buffers of `m`
/// elements (blocks of `m` for allgather and reduce_scatter).
pub(crate) fn buffers_the_host_holds(t: &Ranks, m: usize) -> Check {
    let (p, r, holder) = (t.size as usize, t.rank as usize, t.size - 1);
    let holds = t.rank == holder;
    let source_fails = |what: &str, result: vkcompute_mpi::Result<()>| {
        ensure(fails_for_mapping(holds, holder, &result), || {
            format!("{what} with its source borrowed on rank {holder}: {result:?}")
        })
    };
    let buf = host_buffer(t.ctx, &data::<f32>(t.rank, m))?;
    let result = while_held(holds, &buf, || t.comm.broadcast(&buf, holder))?;
    source_fails("broadcast", result)?;
    let result = while_held(holds, &buf, || t.comm.reduce(&buf, ReduceOp::Sum, 0))?;
    source_fails("reduce", result)?;
    let recv = dev("create", t.ctx.enqueue_create_buffer::<f32>(m * p))?;
    let result = while_held(holds, &buf, || t.comm.allgather(&buf, &recv))?;
    source_fails("allgather", result)?;
    let send = host_buffer(t.ctx, &data::<f32>(t.rank, m * p))?;
    let result = while_held(holds, &send, || {
        t.comm.reduce_scatter(&send, &buf, ReduceOp::Sum)
    })?;
    source_fails("reduce_scatter", result)?;

    // Destinations: the holder's error after its part, the others'
    // results (`got`) right (`early`: every rank fails before the ranks
    // agree).
    let only_holder = |what: &str,
                       (result, early): (vkcompute_mpi::Result<()>, bool),
                       got: &dyn Fn() -> vkcompute::Result<Vec<i32>>,
                       want: &[i32]| {
        let fine = match (holds, &result) {
            (true, Err(e)) => e.to_string().contains("mapped"),
            (false, Ok(())) => !early,
            (false, Err(_)) => early && fails_for_mapping(false, holder, &result),
            (true, Ok(())) => false,
        };
        ensure(fine, || {
            format!("{what} into a buffer the host holds on rank {holder}: {result:?}")
        })?;
        if holds || early {
            return Ok(());
        }
        same(what, &dev("read", got())?, want)
    };
    let host = host_buffer(t.ctx, &data::<i32>(t.rank, m))?;
    let result = while_held(holds, &host, || t.comm.broadcast(&host, 0))?;
    let from_root = data::<i32>(0, m);
    only_holder("broadcast", (result, false), &|| host.to_vec(), &from_root)?;
    let device = upload(t.ctx, &data::<i32>(t.rank, m))?;
    let mapping = if holds {
        Some(dev("map", device.map_to_host())?)
    } else {
        None
    };
    let result = t.comm.broadcast(&device, 0);
    drop(mapping);
    let what = "broadcast into a mapped device buffer";
    only_holder(what, (result, true), &|| device.to_vec(), &from_root)?;
    let send = upload(t.ctx, &data::<i32>(t.rank, m))?;
    let recv = host_buffer(t.ctx, &vec![0i32; m * p])?;
    let result = while_held(holds, &recv, || t.comm.allgather(&send, &recv))?;
    let all: Vec<i32> = (0..t.size).flat_map(|k| data::<i32>(k, m)).collect();
    only_holder("allgather", (result, false), &|| recv.to_vec(), &all)?;
    let send = upload(t.ctx, &data::<i32>(t.rank, m * p))?;
    let recv = host_buffer(t.ctx, &vec![0i32; m])?;
    let result = while_held(holds, &recv, || {
        t.comm.reduce_scatter(&send, &recv, ReduceOp::Sum)
    })?;
    let all = reference::<i32>(ReduceOp::Sum, t.size, m * p);
    let mine = &all[r * m..(r + 1) * m];
    only_holder("reduce_scatter", (result, false), &|| recv.to_vec(), mine)?;
    allreduce_one::<i32>(t, ReduceOp::Sum, m)
}

/// Each rank alone in a communicator of its own (made with the path
/// asked for): no peer, so no same-node path; every collective leaves
/// this rank's data where it belongs.
pub(crate) fn collectives_on_one_rank(t: &Ranks) -> Check {
    let world = mpi::topology::SimpleCommunicator::world();
    let alone = world
        .split_by_color(Color::with_value(t.rank))
        .ok_or("split_by_color gave no communicator")?;
    let c = ok(
        "a one-rank communicator",
        Communicator::with_same_node(&alone, t.ctx, t.policy()),
    )?;
    ensure(
        c.size() == 1 && c.collective_path() != Path::SameNode,
        || format!("one rank: size {}, {:?}", c.size(), c.collective_path()),
    )?;
    let u = Ranks {
        comm: &c,
        rank: 0,
        size: 1,
        ..*t
    };
    for len in [0usize, 1, 1003] {
        broadcast_one::<f32>(&u, len, 0)?;
        allreduce_one::<i32>(&u, ReduceOp::Sum, len)?;
        reduce_one::<u64>(&u, ReduceOp::Max, len, 0)?;
        allgather_one::<u16>(&u, len)?;
        reduce_scatter_one::<f64>(&u, ReduceOp::Product, len)?;
    }
    ensure(c.same_node_collectives() == 0, || {
        format!(
            "{} collectives on the path on one rank",
            c.same_node_collectives()
        )
    })
}

/// 64 MiB of f32 in allgather (`recv`) and reduce_scatter (`send`): the
/// largest collective memories and copies of the new collectives on the
/// same-node path. Broadcast and reduce are left out at this size: on the
/// path they fill, reduce and copy out as allreduce does, which
/// `large_64_mib` runs at 64 MiB, and each would add 1-3 s per rank count
/// and memory path.
pub(crate) fn collectives_64_mib(t: &Ranks) -> Check {
    let block = (16usize << 20) / t.size as usize;
    allgather_one::<f32>(t, block)?;
    reduce_scatter_one::<f32>(t, ReduceOp::Sum, block)
}
