//! The same-node path of `ranks`: which peers take it, and through what
//! memory (against what the ranks report of their node, device and
//! export/import capabilities),
//! messages through it as the shared memory grows and is reused, blocking
//! sends written in pieces, refusals that leave the pair in step, a rank that turns it off, and the
//! point-to-point checks of `p2p.rs` over MPI again on a communicator
//! with the path off.

use mpi::traits::{Communicator as _, CommunicatorCollectives as _};
use vkcompute::sharing::MemoryHandleType;
use vkcompute_mpi::{Path, SameNodeMemory, SameNodePolicy};

use super::*;

/// What each rank reports, gathered on every rank: its world rank's node
/// (the lowest world rank in its `split_shared` communicator), whether
/// its context exports and imports opaque fds, whether its device buffers
/// map directly, its device's UUIDs, and whether it imports host memory.
struct Reported {
    node: Vec<i32>,
    capable: Vec<bool>,
    maps: Vec<bool>,
    ids: Vec<[u8; 32]>,
    host: Vec<bool>,
}

const REPORT_BYTES: usize = 39;

fn reported(t: &Ranks) -> Reported {
    let world = mpi::topology::SimpleCommunicator::world();
    let node = world.split_shared(world.rank());
    let mut members = vec![0i32; node.size() as usize];
    node.all_gather_into(&world.rank(), &mut members[..]);
    let leader = members.iter().copied().min().unwrap_or(world.rank());
    let capable = t
        .ctx
        .exportable_handle_types()
        .contains(&MemoryHandleType::OpaqueFd)
        && t.ctx
            .importable_handle_types()
            .contains(&MemoryHandleType::OpaqueFd);
    let info = t.ctx.info();
    let mut mine = [0u8; REPORT_BYTES];
    mine[..4].copy_from_slice(&leader.to_le_bytes());
    mine[4] = u8::from(capable);
    mine[5] = u8::from(t.comm.maps_device_memory());
    mine[6..22].copy_from_slice(&info.uuid);
    mine[22..38].copy_from_slice(&info.driver_uuid);
    mine[38] = u8::from(t.ctx.host_import_alignment().is_some());
    let mut all = vec![0u8; REPORT_BYTES * t.size as usize];
    world.all_gather_into(&mine[..], &mut all[..]);
    let mut r = Reported {
        node: Vec::new(),
        capable: Vec::new(),
        maps: Vec::new(),
        ids: Vec::new(),
        host: Vec::new(),
    };
    for rec in all.chunks_exact(REPORT_BYTES) {
        r.node
            .push(i32::from_le_bytes(rec[..4].try_into().unwrap()));
        r.capable.push(rec[4] == 1);
        r.maps.push(rec[5] == 1);
        r.ids.push(rec[6..38].try_into().unwrap());
        r.host.push(rec[38] == 1);
    }
    r
}

/// The path the communicator should report from `me` to `peer`, where
/// the ranks have the policies `policies`, and on the same-node path the
/// memory the pair shares.
fn expected(
    t: &Ranks,
    r: &Reported,
    (me, peer): (i32, i32),
    policies: &[SameNodePolicy],
) -> (Path, Option<SameNodeMemory>) {
    let (a, b) = (me as usize, peer as usize);
    let on = |k: usize| policies[k] != SameNodePolicy::Off;
    let insists = |k: usize| policies[k] != SameNodePolicy::Auto;
    let asks_host = |k: usize| policies[k] == SameNodePolicy::HostMemory;
    let device = r.capable[a] && r.capable[b] && r.ids[a] == r.ids[b];
    let host = r.host[a] && r.host[b];
    let memory = match (device, host) {
        (true, true) if asks_host(a) || asks_host(b) => Some(SameNodeMemory::Host),
        (true, _) => Some(SameNodeMemory::Device),
        (false, true) => Some(SameNodeMemory::Host),
        (false, false) => None,
    };
    if a != b
        && on(a)
        && on(b)
        && r.node[a] == r.node[b]
        && memory.is_some()
        && (insists(a) || insists(b) || !(r.maps[a] && r.maps[b]))
    {
        (Path::SameNode, memory)
    } else if t.comm.maps_device_memory() {
        (Path::Mapped, None)
    } else {
        (Path::Staged, None)
    }
}

fn check_paths(t: &Ranks, comm: &Communicator, policies: &[SameNodePolicy], what: &str) -> Check {
    let r = reported(t);
    for peer in 0..t.size {
        let got = ok(&format!("{what}: path_to({peer})"), comm.path_to(peer))?;
        let memory = ok("same_node_memory", comm.same_node_memory(peer))?;
        let got = (got, memory);
        let want = expected(t, &r, (t.rank, peer), policies);
        ensure(got == want, || {
            format!(
                "{what}: path and memory to rank {peer} are {got:?}, expected {want:?} (node \
                 {:?}, capable {:?}, host {:?}, maps {:?})",
                r.node, r.capable, r.host, r.maps
            )
        })?;
    }
    match comm.path_to(t.size) {
        Err(Error::InvalidRank { .. }) => Ok(()),
        other => Err(format!("{what}: path_to({}): {other:?}", t.size)),
    }
}

/// The paths of this check's communicator, and of new ones under each
/// policy, against what the ranks report.
pub(crate) fn paths_follow_node_device_and_capabilities(t: &Ranks) -> Check {
    let n = t.size as usize;
    check_paths(t, t.comm, &vec![t.policy(); n], "the communicator")?;
    if t.rank == 0 {
        let paths: Vec<_> = (0..t.size).filter_map(|p| t.comm.path_to(p).ok()).collect();
        eprintln!("    paths from rank 0: {paths:?}");
    }
    let world = mpi::topology::SimpleCommunicator::world();
    for policy in [
        SameNodePolicy::Off,
        SameNodePolicy::Auto,
        SameNodePolicy::Always,
        SameNodePolicy::HostMemory,
    ] {
        let what = format!("with_same_node({policy:?})");
        logged();
        let c = ok(&what, Communicator::with_same_node(&world, t.ctx, policy))?;
        check_paths(t, &c, &vec![policy; n], &what)?;
        check_log_line(t, &c, &what)?;
    }
    Ok(())
}

/// The line a new communicator `c` logged: the ranks it takes the path
/// to, as `path_to` says, and whether the collectives take it
/// (`collective_path`).
fn check_log_line(t: &Ranks, c: &Communicator, what: &str) -> Check {
    let lines = logged();
    let same: Vec<String> = (0..t.size)
        .filter(|&p| matches!(c.path_to(p), Ok(Path::SameNode)))
        .map(|p| match c.same_node_memory(p) {
            Ok(Some(SameNodeMemory::Host)) => format!("{p} (host memory)"),
            _ => format!("{p} (device memory)"),
        })
        .collect();
    let to = if same.is_empty() {
        "to no rank;".to_string()
    } else {
        format!("to ranks {};", same.join(", "))
    };
    let head = format!("vkcompute-mpi: rank {}: same-node path", t.rank);
    let line = lines.iter().find(|l| l.starts_with(&head));
    let collectives = c.collective_path() == Path::SameNode;
    ensure(
        line.is_some_and(|l| l.contains(&to) && l.contains("collectives on it") == collectives),
        || {
            format!(
                "{what}: logged {lines:?}, expected a line `{head} ... {to}` (the collectives \
                 on it: {collectives})"
            )
        },
    )
}

/// Messages between rank 0 and every other rank whose sizes grow past
/// the shared memory (a new generation each time) and shrink again
/// (reusing it), on device and host ends and views at odd offsets.
pub(crate) fn messages_as_shared_memory_grows_and_is_reused(t: &Ranks) -> Check {
    for len in [1usize, 20_000, 3, 70_001, 2, 300_007, 5] {
        exchange_with_zero::<f32>(t, &format!("f32 x {len}"), len, device_end(t))?;
    }
    for len in [33_333usize, 9] {
        exchange_with_zero::<u16>(t, &format!("host u16 x {len}"), len, host_end(t))?;
        let what = format!("u8 view x {len} at 3");
        exchange_with_zero::<u8>(t, &what, len, view_end(t, 3, 0xee))?;
    }
    Ok(())
}

/// On a new communicator (so that the first message's memory is a new
/// generation, whose descriptor is on the socket), refused first
/// messages to a `recv` and to an `irecv` leave the pair in step: the
/// messages after them arrive whole.
pub(crate) fn refusing_a_new_generation_keeps_the_pair_in_step(t: &Ranks) -> Check {
    let last = t.size - 1;
    for nonblocking in [false, true] {
        let c = t.new_communicator()?;
        if t.rank == 0 {
            let five = upload(t.ctx, &data::<f32>(1, 5))?;
            match c.send(&five, last, 1) {
                Err(Error::Mismatch { .. }) => {}
                other => return Err(format!("the refused first send: {other:?}")),
            }
            ok("the send after it", c.send(&five, last, 1))?;
            let big = upload(t.ctx, &data::<f32>(2, 100_000))?;
            ok("a send of a new generation", c.send(&big, last, 1))?;
        } else if t.rank == last {
            let six = upload(t.ctx, &[0.0f32; 6])?;
            let five = upload(t.ctx, &[0.0f32; 5])?;
            let big = upload(t.ctx, &[0.0f32; 100_000])?;
            let result = if nonblocking {
                ok("irecv", c.irecv(&six, 0, 1))?.wait()
            } else {
                c.recv(&six, 0, 1)
            };
            match result {
                Err(Error::Mismatch { .. }) => {}
                other => return Err(format!("the refused first message: {other:?}")),
            }
            same("refused", &dev("read", six.to_vec())?, &[0.0; 6])?;
            if nonblocking {
                ok("irecv after", c.irecv(&five, 0, 1).and_then(Request::wait))?;
                ok("irecv big", c.irecv(&big, 0, 1).and_then(Request::wait))?;
            } else {
                ok("recv after", c.recv(&five, 0, 1))?;
                ok("recv big", c.recv(&big, 0, 1))?;
            }
            same("after", &dev("read", five.to_vec())?, &data::<f32>(1, 5))?;
            same("big", &dev("read", big.to_vec())?, &data::<f32>(2, 100_000))?;
        }
    }
    Ok(())
}

/// Blocking sends of more than one piece through shared memory go out
/// while the sender still writes the memory, and the receiver copies each
/// piece as the sender's note says it is written
/// (`same_node_noted_sends` counts them): to `recv` and `irecv`, on
/// device, host and view ends, the last piece shorter; refused by a
/// receiver that expects another length (a mismatch on both ranks, and
/// the next message arrives whole: the refused message's notes were
/// taken); and after an `isend` of the same tag, in order (that one
/// written whole: a send in pieces waits for no earlier message).
pub(crate) fn blocking_sends_in_pieces(t: &Ranks) -> Check {
    let c = t.new_communicator()?;
    c.set_piece_bytes(4096);
    let p = Ranks { comm: &c, ..*t };
    // 10_001 f32 in pieces of 4 KiB: five of 1_728 (6_912 bytes, a
    // multiple of 256), the last of 1_361.
    exchange_with_zero::<f32>(&p, "f32 x 10_001", 10_001, device_end(t))?;
    exchange_with_zero::<u16>(&p, "host u16 x 33_333", 33_333, host_end(t))?;
    let what = "u8 view x 9_001 at 3";
    exchange_with_zero::<u8>(&p, what, 9_001, view_end(t, 3, 0xee))?;
    let (last, len) = (t.size - 1, 30_000);
    let shared = |q: i32| u64::from(matches!(c.path_to(q), Ok(Path::SameNode)));
    let mut expected = 3 * if t.rank == 0 {
        (1..t.size).map(shared).sum()
    } else {
        shared(0)
    };
    if t.rank == 0 {
        let a = upload(t.ctx, &data::<f32>(1, len))?;
        let b = upload(t.ctx, &data::<f32>(2, len))?;
        ok("a send to an irecv", c.send(&a, last, 5))?;
        match c.send(&a, last, 5) {
            Err(Error::Mismatch { .. }) => {}
            other => return Err(format!("the refused send: {other:?}")),
        }
        ok("the send after the refused one", c.send(&b, last, 5))?;
        let first = ok("an isend", c.isend(&a, last, 6))?;
        ok("a send after the isend", c.send(&b, last, 6))?;
        ok("the isend", first.wait())?;
        expected += 3 * shared(last);
    } else if t.rank == last {
        let into = upload(t.ctx, &vec![0.0f32; len])?;
        ok("irecv", c.irecv(&into, 0, 5).and_then(Request::wait))?;
        same(
            "to the irecv",
            &dev("read", into.to_vec())?,
            &data::<f32>(1, len),
        )?;
        let short = upload(t.ctx, &vec![0.0f32; len - 1])?;
        match c.recv(&short, 0, 5) {
            Err(Error::Mismatch { .. }) => {}
            other => return Err(format!("the refused message: {other:?}")),
        }
        same(
            "refused",
            &dev("read", short.to_vec())?,
            &vec![0.0; len - 1],
        )?;
        ok("the recv after", c.recv(&into, 0, 5))?;
        same(
            "after the refused",
            &dev("read", into.to_vec())?,
            &data::<f32>(2, len),
        )?;
        let first = upload(t.ctx, &vec![0.0f32; len])?;
        let pending = ok("an irecv", c.irecv(&first, 0, 6))?;
        ok("a recv after the irecv", c.recv(&into, 0, 6))?;
        ok("the irecv", pending.wait())?;
        same(
            "the isend",
            &dev("read", first.to_vec())?,
            &data::<f32>(1, len),
        )?;
        same(
            "the send after it",
            &dev("read", into.to_vec())?,
            &data::<f32>(2, len),
        )?;
    }
    let noted = c.same_node_noted_sends();
    ensure(noted == expected && expected > 0, || {
        format!("{noted} sends in pieces, expected {expected}")
    })
}

/// Rank 0 turns the path off: no rank takes it with rank 0, the others
/// still take it among themselves where they can, and messages go both
/// ways on both kinds of pair.
pub(crate) fn a_rank_that_turns_it_off_turns_off_its_pairs(t: &Ranks) -> Check {
    let world = mpi::topology::SimpleCommunicator::world();
    let policies: Vec<SameNodePolicy> = (0..t.size)
        .map(|r| {
            if r == 0 {
                SameNodePolicy::Off
            } else {
                t.policy()
            }
        })
        .collect();
    let c = ok(
        "a communicator without the path on rank 0",
        Communicator::with_same_node(&world, t.ctx, policies[t.rank as usize]),
    )?;
    check_paths(t, &c, &policies, "rank 0 off")?;
    let mixed = Ranks { comm: &c, ..*t };
    exchange_with_zero::<i32>(&mixed, "i32 x 1001 with rank 0", 1001, device_end(t))?;
    // Rank 1 and the last rank, both allowing it.
    let last = t.size - 1;
    if last > 1 && (t.rank == 1 || t.rank == last) {
        let peer = 1 + last - t.rank;
        let out = upload(t.ctx, &data::<i32>(t.rank, 999))?;
        let into = upload(t.ctx, &[0i32; 999])?;
        if t.rank == 1 {
            ok("send to the last rank", c.send(&out, peer, 2))?;
            ok("recv from the last rank", c.recv(&into, peer, 3))?;
        } else {
            ok("recv from rank 1", c.recv(&into, peer, 2))?;
            ok("send to rank 1", c.send(&out, peer, 3))?;
        }
        same(
            "between 1 and last",
            &dev("read", into.to_vec())?,
            &data::<i32>(peer, 999),
        )?;
    }
    Ok(())
}

/// 64 MiB from rank 0 to the last rank by `send`, received by `recv`,
/// and by `isend`, received by `irecv`.
pub(crate) fn send_and_isend_64_mib(t: &Ranks) -> Check {
    let len = 16 << 20;
    let last = t.size - 1;
    if t.rank == 0 {
        let out = upload(t.ctx, &data::<f32>(20, len))?;
        ok("send of 64 MiB", t.comm.send(&out, last, 12))?;
        dev("refill", out.enqueue_copy_from(&data::<f32>(21, len)[..]))?;
        let sent = ok("isend of 64 MiB", t.comm.isend(&out, last, 12))?;
        ok("wait for the isend of 64 MiB", sent.wait())?;
    } else if t.rank == last {
        let into = upload(t.ctx, &vec![0.0f32; len])?;
        ok("recv of 64 MiB", t.comm.recv(&into, 0, 12))?;
        same(
            "recv of 64 MiB",
            &dev("read", into.to_vec())?,
            &data::<f32>(20, len),
        )?;
        let r = ok("irecv of 64 MiB", t.comm.irecv(&into, 0, 12))?;
        ok("wait for the irecv of 64 MiB", r.wait())?;
        same(
            "irecv of 64 MiB",
            &dev("read", into.to_vec())?,
            &data::<f32>(21, len),
        )?;
    }
    Ok(())
}

/// The checks of what takes the same-node path (point-to-point messages
/// and the collectives), run again on a communicator with it off (over
/// MPI, mapped or staged).
pub(crate) fn over_mpi(large: bool) -> Vec<Named> {
    let mut checks: Vec<Named> = vec![(
        "paths_follow_node_device_and_capabilities",
        paths_follow_node_device_and_capabilities,
    )];
    checks.extend(blocking_sends());
    checks.extend(nonblocking());
    checks.extend(ordering_checks());
    checks.extend(allreduces(large));
    checks.extend(collectives_but_allreduce());
    // The 64 MiB allgather and reduce_scatter (`collectives_64_mib`) run
    // on the same-node communicator only: with broadcast and reduce they
    // took 2-7 s per rank count and memory path (about 25 s more of `make
    // test` over MPI, measured). Over MPI the collectives but allreduce
    // are checked in pieces (chunks of just over 4 MiB, 16-20 MiB buffers:
    // `collectives_in_pieces`) and up to a few hundred KiB
    // (`collectives_in_the_halving_range`), and allreduce at 64 MiB
    // (`large_64_mib`).
    checks.extend(on_node_collectives(false));
    checks.extend(review_checks());
    if large {
        checks.push(("send_and_isend_64_mib", send_and_isend_64_mib));
        checks.push(("collectives_in_pieces", collectives_in_pieces));
    }
    checks
}

/// The checks of which peers take the path and of messages through its
/// shared memory.
pub(crate) fn path_checks() -> Vec<Named> {
    vec![
        (
            "paths_follow_node_device_and_capabilities",
            paths_follow_node_device_and_capabilities,
        ),
        (
            "messages_as_shared_memory_grows_and_is_reused",
            messages_as_shared_memory_grows_and_is_reused,
        ),
        (
            "refusing_a_new_generation_keeps_the_pair_in_step",
            refusing_a_new_generation_keeps_the_pair_in_step,
        ),
        ("blocking_sends_in_pieces", blocking_sends_in_pieces),
    ]
}

/// The checks of the same-node path run again through shared host memory
/// (`SameNodePolicy::HostMemory`): the memory ranks on different devices
/// share, here on one device.
pub(crate) fn through_host_memory() -> Vec<Named> {
    let mut checks = path_checks();
    checks.extend(blocking_sends());
    checks.extend(nonblocking());
    checks.extend(ordering_checks());
    checks.extend(on_node_collectives(false));
    checks
}
