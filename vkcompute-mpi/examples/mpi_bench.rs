//! Bandwidth of vkcompute-mpi against plain MPI on host memory, per
//! message size: `cargo build --release -p vkcompute-mpi --example
//! mpi_bench`, then `mpirun -np N target/release/examples/mpi_bench`.
//!
//! Rank 0 prints one JSON line per case and size, with `case`
//! (`allreduce`: `Communicator::allreduce` of a `DeviceBuffer<f32>`, sum;
//! `allreduce_host`: `MPI_Allreduce` of a `Vec<f32>`; `sendrecv`:
//! `Communicator::send`/`recv` of a `DeviceBuffer<f32>` from rank 0 to rank
//! 1; `sendrecv_host`: `MPI_Send`/`MPI_Recv` of a `Vec<f32>`), `bytes`,
//! `ranks`, `algbw` and `busbw` in GB/s as nccl-tests defines them (algbw
//! = bytes / time; for allreduce busbw = algbw * 2 (n - 1) / n, for a
//! message busbw = algbw), `time_us` (per operation, the slowest rank's)
//! and `iters`.
//!
//! Options: `--quick` (4 KiB to 1 MiB, few iterations: a smoke test),
//! `--max-bytes N` (default 256 MiB), `--staging` (force vkcompute's
//! staging path).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "an example program"
)]

use std::time::Instant;

use mpi::collective::SystemOperation;
use mpi::traits::*;
use vkcompute::{ContextOptions, DeviceContext};
use vkcompute_mpi::ReduceOp;

struct Options {
    quick: bool,
    max_bytes: usize,
    staging: bool,
}

fn options() -> Options {
    let mut o = Options {
        quick: false,
        max_bytes: 256 << 20,
        staging: false,
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => {
                o.quick = true;
                o.max_bytes = o.max_bytes.min(1 << 20);
            }
            "--staging" => o.staging = true,
            "--max-bytes" => {
                o.max_bytes = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--max-bytes takes a number of bytes")
            }
            other => panic!("unknown option {other:?} (--quick, --max-bytes N, --staging)"),
        }
    }
    o
}

/// Runs `op` `iters` times after one warm-up run, and returns the slowest
/// rank's seconds per run.
fn time(world: &mpi::topology::SimpleCommunicator, iters: usize, mut op: impl FnMut()) -> f64 {
    op();
    world.barrier();
    let start = Instant::now();
    for _ in 0..iters {
        op();
    }
    let mine = start.elapsed().as_secs_f64() / iters as f64;
    let mut slowest = 0.0f64;
    world.all_reduce_into(&mine, &mut slowest, SystemOperation::max());
    slowest
}

fn main() {
    let o = options();
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let ctx = DeviceContext::with_options(ContextOptions::new().force_staging(o.staging))
        .expect("a Vulkan device");
    let comm = vkcompute_mpi::Communicator::new(&world, &ctx).expect("a communicator");
    if rank == 0 {
        eprintln!(
            "mpi_bench: {size} ranks on `{}`{}",
            ctx.name(),
            if o.staging { " (staging forced)" } else { "" }
        );
    }
    let report = |case: &str, bytes: usize, seconds: f64, factor: f64, iters: usize| {
        if rank == 0 {
            let algbw = bytes as f64 / seconds / 1e9;
            println!(
                "{{\"case\":\"{case}\",\"bytes\":{bytes},\"ranks\":{size},\"algbw\":{algbw:.4},\
                 \"busbw\":{:.4},\"time_us\":{:.2},\"iters\":{iters}}}",
                algbw * factor,
                seconds * 1e6
            );
        }
    };
    let mut bytes = 4 << 10;
    while bytes <= o.max_bytes {
        let len = bytes / 4;
        let iters = if o.quick {
            3
        } else {
            ((64usize << 20) / bytes).clamp(3, 50)
        };
        let host: Vec<f32> = (0..len).map(|i| (i % 7) as f32).collect();
        let buf = ctx.enqueue_create_buffer::<f32>(len).unwrap();
        buf.enqueue_copy_from(&host[..]).unwrap();
        ctx.synchronize().unwrap();

        let ring = 2.0 * (size - 1) as f64 / size as f64;
        let t = time(&world, iters, || {
            comm.allreduce(&buf, ReduceOp::Sum).unwrap();
            ctx.synchronize().unwrap();
        });
        report("allreduce", bytes, t, ring, iters);
        let mut out = vec![0.0f32; len];
        let t = time(&world, iters, || {
            world.all_reduce_into(&host[..], &mut out[..], SystemOperation::sum());
        });
        report("allreduce_host", bytes, t, ring, iters);

        if size >= 2 {
            let t = time(&world, iters, || match rank {
                0 => comm.send(&buf, 1, 0).unwrap(),
                1 => {
                    comm.recv(&buf, 0, 0).unwrap();
                    ctx.synchronize().unwrap();
                }
                _ => {}
            });
            report("sendrecv", bytes, t, 1.0, iters);
            let t = time(&world, iters, || match rank {
                0 => world.process_at_rank(1).send(&host[..]),
                1 => {
                    world.process_at_rank(0).receive_into(&mut out[..]);
                }
                _ => {}
            });
            report("sendrecv_host", bytes, t, 1.0, iters);
        }
        bytes *= 4;
    }
}
