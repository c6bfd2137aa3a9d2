//! Messages of 2^31 and 2^32 bytes under real MPI (Open MPI's `mpirun`,
//! 2 ranks on localhost, lavapipe) on every path: the same-node path
//! (exported device memory; shared host memory, staging forced), over
//! MPI on mapped device memory, and over MPI staged through pinned host
//! memory (staging forced).
//!
//! On each path a `send`/`recv` of 2^29 `u32` (2^31 bytes) from rank 0 to
//! rank 1, and on the same-node path in device memory a `reduce` (to
//! rank 1) of 2^29 `f32` (the collectives read either memory alike), each
//! checked element by element against a CPU reference (read
//! back in 64 MiB parts). Then 2^32 bytes: where the device cannot hold
//! a buffer that large (its `maxMemoryAllocationSize` or `maxBufferSize`,
//! reported by vkcompute as `Error::TooLarge`), the check says so and
//! goes no further; elsewhere the same send/recv at 2^30 `u32`.
//!
//! Run by `cargo test` (harness = false): started without MPI, the program
//! launches itself with `mpirun --oversubscribe -np 2` once (about 20 s
//! here, and 6 GiB of memory at the peak: each rank's buffer, and on the
//! same-node path its exported memory). `VKCOMPUTE_MPI_HUGE=0` leaves the
//! whole test out (it prints so); `VKCOMPUTE_MPI_HUGE=all` adds
//! `allreduce`, `reduce`, `isend`/`irecv`, `broadcast`, `allgather` and
//! `reduce_scatter` at 2^31 bytes on every path (a long run, about 9
//! minutes: BENCHMARKS.md).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "a test program: a failure fails the test"
)]

use std::process::{Command, ExitCode};

use bytemuck::Pod;
use vkcompute::{ContextOptions, DeviceBuffer, DeviceContext};
use vkcompute_mpi::{Communicator, Path, ReduceOp, SameNodePolicy};

/// Elements of the parts a buffer is written and read in (64 MiB of
/// 4-byte elements).
const PART: usize = 16 << 20;
/// 2^31 bytes of 4-byte elements.
const BIG: usize = 1 << 29;

fn main() -> ExitCode {
    let huge = std::env::var("VKCOMPUTE_MPI_HUGE").unwrap_or_default();
    if huge == "0" {
        eprintln!("skipped: VKCOMPUTE_MPI_HUGE=0 leaves the 2 GiB messages out");
        return ExitCode::SUCCESS;
    }
    let under_mpi = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if under_mpi {
        return rank_main(huge == "all");
    }
    let exe = std::env::current_exe().unwrap();
    let args = ["--oversubscribe", "--timeout", "600", "-np", "2"];
    eprintln!("== mpirun {} {}", args.join(" "), exe.display());
    let start = std::time::Instant::now();
    let status = Command::new("mpirun")
        .args(args)
        .arg(&exe)
        .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
        .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
        .status()
        .expect("mpirun runs (run `make setup`, which installs Open MPI)");
    let took = start.elapsed().as_secs_f64();
    if status.success() {
        eprintln!("== large messages: passed in {took:.1} s");
        ExitCode::SUCCESS
    } else {
        eprintln!("== large messages: FAILED ({status}) after {took:.1} s");
        ExitCode::FAILURE
    }
}

type Check = Result<(), String>;

/// Rank `rank`'s element `i` of the reductions: small integers, so that
/// the f32 sums are exact.
fn term(rank: i32, i: usize) -> f32 {
    ((i % 7) as i32 + 3 * rank) as f32
}

/// A device buffer of `len` elements, element `i` being `f(i)`, written
/// in parts.
fn filled<T: Pod>(
    ctx: &DeviceContext,
    len: usize,
    f: impl Fn(usize) -> T,
) -> Result<DeviceBuffer<T>, String> {
    let buf = ctx
        .enqueue_create_buffer::<T>(len)
        .map_err(|e| format!("a buffer of {len} elements: {e}"))?;
    for start in (0..len).step_by(PART) {
        let n = PART.min(len - start);
        let part: Vec<T> = (start..start + n).map(&f).collect();
        buf.create_sub_buffer::<T>(start, n)
            .and_then(|view| view.enqueue_copy_from(&part[..]))
            .map_err(|e| format!("writing elements {start}..: {e}"))?;
        // One part in flight at a time: the staging memory stays small.
        ctx.synchronize().map_err(|e| e.to_string())?;
    }
    Ok(buf)
}

/// Checks every element of `buf` against `f`, reading it in parts.
fn holds<T: Pod + PartialEq + std::fmt::Debug>(
    what: &str,
    buf: &DeviceBuffer<T>,
    f: impl Fn(usize) -> T,
) -> Check {
    for start in (0..buf.len()).step_by(PART) {
        let n = PART.min(buf.len() - start);
        let got = buf
            .create_sub_buffer::<T>(start, n)
            .and_then(|view| view.to_vec())
            .map_err(|e| format!("{what}: reading elements {start}..: {e}"))?;
        if let Some(k) = (0..n).find(|&k| got[k] != f(start + k)) {
            return Err(format!(
                "{what}: element {} of {} is {:?}, expected {:?}",
                start + k,
                buf.len(),
                got[k],
                f(start + k)
            ));
        }
    }
    Ok(())
}

fn ok<T>(what: &str, r: vkcompute_mpi::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// `send`/`recv` of `len` `u32` from rank 0 to rank 1.
fn send_recv(c: &Communicator, ctx: &DeviceContext, len: usize) -> Check {
    let what = format!("send/recv of {len} u32");
    let pattern = |i: usize| (i as u32).wrapping_mul(2_654_435_761);
    if c.rank() == 0 {
        let buf = filled(ctx, len, pattern)?;
        ok(&what, c.send(&buf, 1, 7))
    } else {
        let buf = filled(ctx, len, |_| 0u32)?;
        ok(&what, c.recv(&buf, 0, 7))?;
        holds(&what, &buf, pattern)
    }
}

/// `isend`/`irecv` of `len` `u32` from rank 1 to rank 0.
fn isend_irecv(c: &Communicator, ctx: &DeviceContext, len: usize) -> Check {
    let what = format!("isend/irecv of {len} u32");
    let pattern = |i: usize| (i as u32) ^ 0x5a5a_5a5a;
    if c.rank() == 1 {
        let buf = filled(ctx, len, pattern)?;
        ok(&what, ok(&what, c.isend(&buf, 0, 8))?.wait())
    } else {
        let buf = filled(ctx, len, |_| 0u32)?;
        ok(&what, ok(&what, c.irecv(&buf, 1, 8))?.wait())?;
        holds(&what, &buf, pattern)
    }
}

/// `allreduce` (sum) of `len` `f32`.
fn allreduce(c: &Communicator, ctx: &DeviceContext, len: usize) -> Check {
    let what = format!("allreduce of {len} f32");
    let buf = filled(ctx, len, |i| term(c.rank(), i))?;
    ok(&what, c.allreduce(&buf, ReduceOp::Sum))?;
    holds(&what, &buf, |i| (0..c.size()).map(|r| term(r, i)).sum())
}

/// `reduce` (sum) of `len` `f32` to rank 1; rank 0's buffer unchanged.
fn reduce(c: &Communicator, ctx: &DeviceContext, len: usize) -> Check {
    let what = format!("reduce of {len} f32");
    let buf = filled(ctx, len, |i| term(c.rank(), i))?;
    ok(&what, c.reduce(&buf, ReduceOp::Sum, 1))?;
    if c.rank() == 1 {
        holds(&what, &buf, |i| (0..c.size()).map(|r| term(r, i)).sum())
    } else {
        holds(&what, &buf, |i| term(0, i))
    }
}

/// `broadcast` of `len` `u32` from rank 1.
fn broadcast(c: &Communicator, ctx: &DeviceContext, len: usize) -> Check {
    let what = format!("broadcast of {len} u32");
    let pattern = |i: usize| (i as u32).rotate_left(7);
    let buf = if c.rank() == 1 {
        filled(ctx, len, pattern)?
    } else {
        filled(ctx, len, |_| 0u32)?
    };
    ok(&what, c.broadcast(&buf, 1))?;
    holds(&what, &buf, pattern)
}

/// `allgather` into `len` `u32` (`len / size` from each rank).
fn allgather(c: &Communicator, ctx: &DeviceContext, len: usize) -> Check {
    let what = format!("allgather into {len} u32");
    let m = len / c.size() as usize;
    let pattern = move |i: usize| (i / m) as u32 * 1000 + (i % m) as u32 % 997;
    let rank = c.rank() as usize;
    let send = filled(ctx, m, |i| pattern(rank * m + i))?;
    let recv = filled(ctx, len, |_| u32::MAX)?;
    ok(&what, c.allgather(&send, &recv))?;
    holds(&what, &recv, pattern)
}

/// `reduce_scatter` (sum) of `len` `f32`.
fn reduce_scatter(c: &Communicator, ctx: &DeviceContext, len: usize) -> Check {
    let what = format!("reduce_scatter of {len} f32");
    let m = len / c.size() as usize;
    let send = filled(ctx, len, |i| term(c.rank(), i))?;
    let recv = filled(ctx, m, |_| -1.0f32)?;
    ok(&what, c.reduce_scatter(&send, &recv, ReduceOp::Sum))?;
    let base = c.rank() as usize * m;
    holds(&what, &recv, |i| {
        (0..c.size()).map(|r| term(r, base + i)).sum()
    })
}

/// 2^32 bytes where the device holds a buffer that large; otherwise the
/// device's limit, as vkcompute reports it.
fn four_gib(c: &Communicator, ctx: &DeviceContext) -> Result<String, String> {
    let len = 1usize << 30;
    match ctx.enqueue_create_buffer::<u32>(len) {
        Ok(probe) => drop(probe),
        Err(vkcompute::Error::TooLarge {
            limit_name, limit, ..
        }) if limit < 4 << 30 => {
            return Ok(format!(
                "skipped: 2^32 bytes: the device's {limit_name} is {limit} bytes"
            ))
        }
        Err(e) => return Err(format!("a buffer of 2^32 bytes: {e}")),
    }
    send_recv(c, ctx, len)?;
    Ok("2^32 bytes: send/recv ok".into())
}

fn rank_main(all: bool) -> ExitCode {
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let mut failures = Vec::new();
    let paths = [
        ("same_node", SameNodePolicy::Always, false),
        ("same_node_host", SameNodePolicy::HostMemory, true),
        ("mapped", SameNodePolicy::Off, false),
        ("staged", SameNodePolicy::Off, true),
    ];
    let mut rank = 0;
    for (name, policy, staging) in paths {
        let ctx = DeviceContext::with_options(
            ContextOptions::new()
                .validation(true)
                .force_staging(staging)
                .pipeline_cache_dir(None),
        )
        .expect("a validated lavapipe context (run `make setup`)");
        let log = ctx.diagnostics().validation_log();
        let c = Communicator::with_same_node(&world, &ctx, policy).expect("a communicator");
        rank = c.rank();
        let path = c.path_to(1 - rank).unwrap();
        let wanted = match name {
            "same_node" | "same_node_host" => Path::SameNode,
            "mapped" => Path::Mapped,
            _ => Path::Staged,
        };
        if path != wanted && rank == 0 {
            eprintln!("  [{name}] the pair takes {path:?} on this device");
        }
        type Case = fn(&Communicator, &DeviceContext, usize) -> Check;
        let mut cases: Vec<(&str, Case)> = vec![("send_recv", send_recv)];
        // The same-node collectives read the memory alike whatever its
        // kind: the reduce through host memory runs with the others.
        if all || name == "same_node" {
            cases.push(("reduce", reduce));
        }
        if all {
            cases.extend([
                ("allreduce", allreduce as Case),
                ("isend_irecv", isend_irecv),
                ("broadcast", broadcast),
                ("allgather", allgather),
                ("reduce_scatter", reduce_scatter),
            ]);
        }
        for (case, run) in cases {
            let start = std::time::Instant::now();
            let result = run(&c, &ctx, BIG);
            if rank == 0 {
                eprintln!(
                    "  [{name}] {case} of 2^31 bytes: {} ({:.1} s)",
                    if result.is_ok() { "ok" } else { "FAILED" },
                    start.elapsed().as_secs_f64()
                );
            }
            if let Err(e) = result {
                failures.push(format!("rank {rank} [{name}] {case}: {e}"));
            }
            // Every rank's memory of the case is gone before the next.
            let _ = c.barrier();
        }
        match four_gib(&c, &ctx) {
            Ok(line) if rank == 0 => eprintln!("  [{name}] {line}"),
            Ok(_) => {}
            Err(e) => failures.push(format!("rank {rank} [{name}] 2^32 bytes: {e}")),
        }
        drop(c);
        if let Err(e) = ctx.synchronize() {
            failures.push(format!("rank {rank} [{name}] synchronize: {e}"));
        }
        drop(ctx);
        for m in log.messages() {
            failures.push(format!("rank {rank} [{name}] validation message: {m}"));
        }
    }
    for f in &failures {
        eprintln!("FAILED {f}");
    }
    if failures.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("rank {rank}: {} failure(s)", failures.len());
        ExitCode::FAILURE
    }
}
