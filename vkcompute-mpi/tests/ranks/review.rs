//! Checks from the review of the collectives in pieces and the same-node
//! collectives: ranks whose contexts take different memory paths in one
//! collective (staging forced on the odd ranks only) at the piece
//! threshold, destinations the host holds in pieces, empty buffers
//! against non-empty ones on the same-node path. (A communicator that a
//! timeout broke: `tests/faults.rs`, since what it leaves to MPI is no
//! state for later checks to meet.)

use vkcompute_mpi::{Path, SameNodePolicy};

use super::*;

/// The checks of this file.
pub(crate) fn review_checks() -> Vec<Named> {
    vec![
        (
            "pieces_across_memory_paths_at_the_threshold",
            pieces_across_memory_paths_at_the_threshold,
        ),
        (
            "empty_against_non_empty_collectives",
            empty_against_non_empty_collectives,
        ),
        (
            "destinations_the_host_holds_in_pieces",
            destinations_the_host_holds_in_pieces,
        ),
    ]
}

/// One collective call of every rank over a communicator whose ranks take
/// different memory paths: a context of its own on each rank, staging
/// forced on the odd ranks only (the even ones map device buffers
/// directly, so `broadcast` and `allreduce` post the mapped path's
/// messages there and the pipelined path's on the odd ranks), over MPI.
/// Lengths at the piece threshold: a broadcast of exactly one piece (4
/// MiB) and of one piece and one element (two pieces), into a view at an
/// odd offset on rank 0; an allreduce whose chunks are one piece and
/// 64 elements (the stride's rounding); a reduce, an allgather and a
/// reduce_scatter just over it, each with a host buffer as the
/// destination on the odd ranks (copied into in pieces from pinned host
/// memory). Runs once per rank count (on the first memory path).
pub(crate) fn pieces_across_memory_paths_at_the_threshold(t: &Ranks) -> Check {
    if t.ctx.is_staging_forced() || !t.same_node {
        return Ok(());
    }
    let (p, r, last) = (t.size as usize, t.rank as usize, t.size - 1);
    let odd = t.rank % 2 == 1;
    let ctx = dev(
        "a context with staging forced on odd ranks",
        DeviceContext::with_options(
            ContextOptions::new()
                .validation(true)
                .force_staging(odd)
                .pipeline_cache_dir(None),
        ),
    )?;
    let log = ctx.diagnostics().validation_log();
    let world = mpi::topology::SimpleCommunicator::world();
    let c = ok(
        "a communicator over MPI",
        Communicator::with_same_node(&world, &ctx, SameNodePolicy::Off),
    )?;
    ensure(c.maps_device_memory() != odd, || {
        format!("rank {r}: maps_device_memory {}", c.maps_device_memory())
    })?;
    let u = Ranks {
        comm: &c,
        ctx: &ctx,
        same_node: false,
        ..*t
    };
    let piece = 1usize << 20; // f32 elements in 4 MiB
    for n in [piece, piece + 1] {
        let what = format!("broadcast of {n} f32 across memory paths");
        if t.rank == 0 {
            let (parent, view) = view_in_parent(&u, 3, &data::<f32>(t.rank, n), -1.0)?;
            ok(&what, c.broadcast(&view, last))?;
            parent_holds(&what, &parent, 3, &data::<f32>(last, n), -1.0)?;
        } else {
            broadcast_one::<f32>(&u, n, last)?;
        }
    }
    allreduce_one::<f32>(&u, ReduceOp::Sum, p * piece + 1)?;

    let n = p * piece + 3;
    let what = format!("reduce of {n} f32 across memory paths, a host buffer at the root");
    let root = 1 % t.size;
    let mine = data::<f32>(t.rank, n);
    let got = if t.rank == root {
        let buf = host_buffer(&ctx, &mine)?;
        ok(&what, c.reduce(&buf, ReduceOp::Sum, root))?;
        dev("read", buf.to_vec())?
    } else {
        let buf = upload(&ctx, &mine)?;
        ok(&what, c.reduce(&buf, ReduceOp::Sum, root))?;
        dev("read", buf.to_vec())?
    };
    let want = if t.rank == root {
        reference::<f32>(ReduceOp::Sum, t.size, n)
    } else {
        mine
    };
    same(&what, &got, &want)?;

    let m = piece + 1;
    let what = format!("allgather of {m} u32 across memory paths into host buffers");
    let send = upload(&ctx, &data::<u32>(t.rank, m))?;
    let all: Vec<u32> = (0..t.size).flat_map(|k| data::<u32>(k, m)).collect();
    let got = if odd {
        let recv = host_buffer(&ctx, &vec![0u32; m * p])?;
        ok(&what, c.allgather(&send, &recv))?;
        dev("read", recv.to_vec())?
    } else {
        let recv = dev("create", ctx.enqueue_create_buffer::<u32>(m * p))?;
        ok(&what, c.allgather(&send, &recv))?;
        dev("read", recv.to_vec())?
    };
    same(&what, &got, &all)?;

    let what = format!("reduce_scatter of {m} i32 across memory paths into host buffers");
    let send = upload(&ctx, &data::<i32>(t.rank, m * p))?;
    let reduced = reference::<i32>(ReduceOp::Max, t.size, m * p);
    let got = if odd {
        let recv = host_buffer(&ctx, &vec![0i32; m])?;
        ok(&what, c.reduce_scatter(&send, &recv, ReduceOp::Max))?;
        dev("read", recv.to_vec())?
    } else {
        let recv = dev("create", ctx.enqueue_create_buffer::<i32>(m))?;
        ok(&what, c.reduce_scatter(&send, &recv, ReduceOp::Max))?;
        dev("read", recv.to_vec())?
    };
    same(&what, &got, &reduced[r * m..(r + 1) * m])?;
    drop(c);
    dev("synchronize", ctx.synchronize())?;
    let messages = log.messages();
    ensure(messages.is_empty(), || {
        format!("validation messages: {messages:?}")
    })
}

/// Rank 0 passes empty buffers where the others pass five elements: on a
/// communicator that takes the same-node path, the others take it and
/// rank 0 does not (empty buffers never do), yet every rank exchanges one
/// header and gets `Mismatch`, and the communicator works on.
pub(crate) fn empty_against_non_empty_collectives(t: &Ranks) -> Check {
    let p = t.size as usize;
    let m = if t.rank == 0 { 0 } else { 5 };
    let mismatch = |what: &str, r: vkcompute_mpi::Result<()>| match r {
        Err(Error::Mismatch { .. }) => Ok(()),
        other => Err(format!("{what}, empty on rank 0 only: {other:?}")),
    };
    let buf = upload(t.ctx, &data::<f32>(t.rank, m))?;
    let wide = dev("create", t.ctx.enqueue_create_buffer::<f32>(m * p))?;
    mismatch("broadcast", t.comm.broadcast(&buf, 0))?;
    mismatch("allreduce", t.comm.allreduce(&buf, ReduceOp::Sum))?;
    mismatch("reduce", t.comm.reduce(&buf, ReduceOp::Sum, 0))?;
    mismatch("allgather", t.comm.allgather(&buf, &wide))?;
    mismatch(
        "reduce_scatter",
        t.comm.reduce_scatter(&wide, &buf, ReduceOp::Sum),
    )?;
    allreduce_one::<f32>(t, ReduceOp::Sum, 5)?;
    allgather_one::<f32>(t, 5)
}

/// Buffers that the last rank's host holds (`as_mut_slice` on a host
/// buffer, a device buffer mapped) in collectives whose chunks travel in
/// pieces over MPI (`pipelined.rs`; on the same-node path these take no
/// pieces): `buffers_the_host_holds` of `on_node.rs` at one piece and one
/// element. A destination held is that rank's own error once it has done
/// its part, and the others' results are right. The allgather is where
/// it mattered: on 3 ranks and more its ring forwards what arrived, and
/// the holder, unable to store a piece, forwarded zeros in its place,
/// which the others took as data and returned `Ok`.
pub(crate) fn destinations_the_host_holds_in_pieces(t: &Ranks) -> Check {
    if t.comm.collective_path() == Path::SameNode {
        return Ok(());
    }
    buffers_the_host_holds(t, (1 << 20) + 1)
}
