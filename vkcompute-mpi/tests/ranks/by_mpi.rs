//! Allreduces by MPI's own allreduce in pieces (`AllreduceAlgorithm::Mpi`:
//! where the ring would run with chunks of more than one piece, on the
//! mapped and staged routes alike).

use super::*;

/// Elements of `T` in 4 MiB: a chunk of more than this travels in pieces.
fn piece_elements<T>() -> usize {
    (4 << 20) / std::mem::size_of::<T>()
}

/// `allreduce_one`, checking that `allreduce_algorithm` announced `Mpi`
/// and that the allreduce took it (`Communicator::mpi_allreduces`).
fn by_mpi_one<T: Arith>(t: &Ranks, op: ReduceOp, len: usize, host: bool) -> Check {
    use vkcompute_mpi::AllreduceAlgorithm as A;
    let what = format!(
        "allreduce {op:?} of {len} {} by MPI{}",
        T::TYPE,
        if host { " on a host buffer" } else { "" }
    );
    let before = t.comm.mpi_allreduces();
    let got = if host {
        let buf = host_buffer(t.ctx, &data::<T>(t.rank, len))?;
        let said = t.comm.allreduce_algorithm(&buf);
        ensure(said == A::Mpi, || format!("{what}: announced {said:?}"))?;
        ok(&what, t.comm.allreduce(&buf, op))?;
        dev("read", buf.to_vec())?
    } else {
        let buf = upload(t.ctx, &data::<T>(t.rank, len))?;
        let said = t.comm.allreduce_algorithm(&buf);
        ensure(said == A::Mpi, || format!("{what}: announced {said:?}"))?;
        ok(&what, t.comm.allreduce(&buf, op))?;
        dev("read", buf.to_vec())?
    };
    let taken = t.comm.mpi_allreduces() - before;
    ensure(taken == 1, || {
        format!("{what}: {taken} took MPI's allreduce")
    })?;
    same(&what, &got, &reference::<T>(op, t.size, len))
}

/// Every element type and reduction by MPI in pieces, at a length of
/// just over one piece a chunk (two pieces a chunk, the last piece short,
/// the buffer not a multiple of the piece); f32 also at three pieces a
/// chunk and on a host buffer, i64 on a host buffer, and a view at an odd
/// offset (its parent's other elements kept). Over MPI only: where the
/// collectives take the same-node path, allreduce reads the ranks'
/// exported memory instead.
pub(crate) fn allreduce_by_mpi_in_pieces(t: &Ranks) -> Check {
    if t.comm.collective_path() == vkcompute_mpi::Path::SameNode {
        return Ok(());
    }
    let p = t.size as usize;
    let just_over = |elements: usize| p * elements + 13;
    for op in ReduceOp::ALL {
        by_mpi_one::<f32>(t, op, just_over(piece_elements::<f32>()), false)?;
        by_mpi_one::<f64>(t, op, just_over(piece_elements::<f64>()), false)?;
        by_mpi_one::<i32>(t, op, just_over(piece_elements::<i32>()), false)?;
        by_mpi_one::<u32>(t, op, just_over(piece_elements::<u32>()), false)?;
        by_mpi_one::<i64>(t, op, just_over(piece_elements::<i64>()), false)?;
        by_mpi_one::<u64>(t, op, just_over(piece_elements::<u64>()), false)?;
    }
    let three = 3 * p * piece_elements::<f32>() - 5;
    by_mpi_one::<f32>(t, ReduceOp::Sum, three, false)?;
    by_mpi_one::<f32>(t, ReduceOp::Max, three, true)?;
    by_mpi_one::<i64>(t, ReduceOp::Min, just_over(piece_elements::<i64>()), true)?;
    // A view at an odd offset: not bound in place, so staged.
    let n = just_over(piece_elements::<i32>());
    let before = t.comm.mpi_allreduces();
    let parent = dev("parent", t.ctx.enqueue_create_buffer::<i32>(n + 3))?;
    dev("fill", parent.enqueue_fill(77))?;
    let view = dev("view", parent.create_sub_buffer::<i32>(1, n))?;
    dev(
        "upload",
        view.enqueue_copy_from(&data::<i32>(t.rank, n)[..]),
    )?;
    let what = "allreduce by MPI of a view at offset 1";
    ok(what, t.comm.allreduce(&view, ReduceOp::Sum))?;
    ensure(t.comm.mpi_allreduces() - before == 1, || {
        format!("{what}: not by MPI")
    })?;
    let mut want = vec![77; n + 3];
    want[1..=n].copy_from_slice(&reference::<i32>(ReduceOp::Sum, t.size, n));
    same(what, &dev("read", parent.to_vec())?, &want)
}
