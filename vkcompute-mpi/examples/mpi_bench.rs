//! Bandwidth of vkcompute-mpi against plain MPI on host memory, per
//! message size: `cargo build --release -p vkcompute-mpi --example
//! mpi_bench`, then `mpirun -np N target/release/examples/mpi_bench`.
//!
//! Rank 0 prints one JSON line per case and size, with `case`
//! (`allreduce`: `Communicator::allreduce` of a `DeviceBuffer<f32>`, sum;
//! `broadcast` from rank 0; `reduce` (sum) to rank 0; `allgather` into,
//! and `reduce_scatter` (sum) from, a buffer of `bytes`, one block a rank;
//! each `case_host`: the same MPI call on `Vec<f32>`s, `MPI_Allreduce`,
//! `MPI_Bcast`, `MPI_Reduce`, `MPI_Allgather`,
//! `MPI_Reduce_scatter_block`; `sendrecv`:
//! `Communicator::send`/`recv` of a `DeviceBuffer<f32>` from rank 0 to rank
//! 1; `isendrecv`: the same with `isend`/`irecv` and `Request::wait`;
//! `sendrecv_host`: `MPI_Send`/`MPI_Recv` of a `Vec<f32>`), `bytes`,
//! `ranks`, `algbw` and `busbw` in GB/s as nccl-tests defines them (algbw
//! = bytes / time; busbw = algbw * 2 (n - 1) / n for allreduce, * (n - 1) /
//! n for allgather and reduce_scatter, = algbw for broadcast, reduce and
//! a message), `time_us` (per operation, the slowest rank's),
//! `iters` and `path`: how the data went (`same_node`, `same_node_host`
//! (through shared host memory), `mapped` or `staged`:
//! `Communicator::path_to` and `same_node_memory`; `host` for the host
//! cases), and for
//! `allreduce` `algorithm` (`Communicator::allreduce_algorithm`: `ring`,
//! `halving`, `doubling`, `direct`, `all_to_all`). Where
//! ranks 0 and 1 can take the same-node path, `sendrecv` and `isendrecv` are measured on
//! it (`SameNodePolicy::Always`) and over MPI (`SameNodePolicy::Off`),
//! each beside its own `sendrecv_host`, and so are the collectives where
//! every pair can take it (`Communicator::collective_path`); each again
//! through shared host memory (`SameNodePolicy::HostMemory`, the memory
//! ranks on different devices share) where the ranks can; rank 0 says on
//! stderr which path `Communicator::new` takes for a send
//! (`SameNodePolicy::Auto`). Each device case and its host case take turns
//! run by run (see `time_pair`).
//!
//! Options: `--quick` (4 KiB to 1 MiB, few iterations: a smoke test),
//! `--min-bytes N` (default 4 KiB) and `--max-bytes N` (default 256 MiB),
//! `--iters N` (runs per case and size; default 64 MiB / size, clamped to
//! 3..=50: on a noisy VM, more runs at the large sizes steady the figures),
//! `--staging` (force vkcompute's staging path), `--cases a,b,...` (some
//! of `allreduce`, `broadcast`, `reduce`, `allgather`, `reduce_scatter`,
//! `sendrecv`, `isendrecv`; default all).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "an example program"
)]

use std::time::Instant;

use mpi::collective::SystemOperation;
use mpi::traits::*;
use vkcompute::{ContextOptions, DeviceContext};
use vkcompute_mpi::{Communicator as DeviceComm, Path, ReduceOp, SameNodeMemory, SameNodePolicy};

struct Options {
    quick: bool,
    min_bytes: usize,
    max_bytes: usize,
    iters: Option<usize>,
    staging: bool,
    cases: Vec<String>,
}

/// Every case `--cases` names.
const CASES: [&str; 7] = [
    "allreduce",
    "broadcast",
    "reduce",
    "allgather",
    "reduce_scatter",
    "sendrecv",
    "isendrecv",
];

impl Options {
    fn runs(&self, case: &str) -> bool {
        self.cases.iter().any(|c| c == case)
    }
}

fn options() -> Options {
    let mut o = Options {
        quick: false,
        min_bytes: 4 << 10,
        max_bytes: 256 << 20,
        iters: None,
        staging: false,
        cases: CASES.map(String::from).to_vec(),
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => {
                o.quick = true;
                o.max_bytes = o.max_bytes.min(1 << 20);
            }
            "--staging" => o.staging = true,
            "--cases" => {
                let list = args.next().expect("--cases takes a list of cases");
                o.cases = list.split(',').map(String::from).collect();
                for c in &o.cases {
                    assert!(
                        CASES.contains(&c.as_str()),
                        "unknown case {c}: one of {CASES:?}"
                    );
                }
            }
            "--min-bytes" => {
                o.min_bytes = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--min-bytes takes a number of bytes")
            }
            "--max-bytes" => {
                o.max_bytes = args
                    .next()
                    .and_then(|v| v.parse().ok())
                    .expect("--max-bytes takes a number of bytes")
            }
            "--iters" => {
                o.iters = Some(
                    args.next()
                        .and_then(|v| v.parse().ok())
                        .expect("--iters takes a number of runs"),
                )
            }
            other => panic!(
                "unknown option {other:?} (--quick, --min-bytes N, --max-bytes N, --iters N, \
                 --staging)"
            ),
        }
    }
    o
}

/// Runs `a` and `b` `iters` times each, taking turns (a, b, a, b, ...)
/// after one warm-up run of each, every run between barriers, and returns
/// the slowest rank's mean seconds per run of each. Taking turns exposes
/// both to the same load: on a shared VM the speed drifts by 2x within
/// seconds, and cases timed one after the other would compare different
/// machines.
fn time_pair(
    world: &mpi::topology::SimpleCommunicator,
    iters: usize,
    mut a: impl FnMut(),
    mut b: impl FnMut(),
) -> (f64, f64) {
    a();
    b();
    let mut mine = [0.0f64; 2];
    for _ in 0..iters {
        for (k, op) in [&mut a as &mut dyn FnMut(), &mut b].into_iter().enumerate() {
            world.barrier();
            let start = Instant::now();
            op();
            mine[k] += start.elapsed().as_secs_f64();
        }
    }
    let mut slowest = [0.0f64; 2];
    world.all_reduce_into(&mine[..], &mut slowest[..], SystemOperation::max());
    (slowest[0] / iters as f64, slowest[1] / iters as f64)
}

fn main() {
    let o = options();
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let (rank, size) = (world.rank(), world.size());
    let ctx = DeviceContext::with_options(ContextOptions::new().force_staging(o.staging))
        .expect("a Vulkan device");
    let comm = DeviceComm::new(&world, &ctx).expect("a communicator");
    let always =
        DeviceComm::with_same_node(&world, &ctx, SameNodePolicy::Always).expect("a communicator");
    let off =
        DeviceComm::with_same_node(&world, &ctx, SameNodePolicy::Off).expect("a communicator");
    let host_memory = DeviceComm::with_same_node(&world, &ctx, SameNodePolicy::HostMemory)
        .expect("a communicator");
    // The paths between ranks 0 and 1, as rank 0 sees them (every rank
    // takes part in every case, so every rank follows rank 0), and of the
    // collectives; `same_node_host` is the same-node path through shared
    // host memory.
    let names = ["same_node", "mapped", "staged", "same_node_host"];
    let host_of = |c: &DeviceComm, peer: i32| {
        c.same_node_memory(peer).expect("a rank") == Some(SameNodeMemory::Host)
    };
    let code = |path: Path, host: bool| match path {
        Path::SameNode if host => 3u8,
        Path::SameNode => 0,
        Path::Mapped => 1,
        _ => 2,
    };
    let peer = 1.min(size - 1);
    let mut paths = [&comm, &always, &off, &host_memory]
        .map(|c| code(c.path_to(peer).expect("rank 1"), host_of(c, peer)));
    let mut collective = [&always, &off, &host_memory].map(|c| {
        let host = (0..size).any(|p| host_of(c, p));
        code(c.collective_path(), host)
    });
    world.process_at_rank(0).broadcast_into(&mut paths[..]);
    world.process_at_rank(0).broadcast_into(&mut collective[..]);
    let [default_path, always_path, off_path, host_path] = paths.map(|code| names[code as usize]);
    let [always_collective, off_collective, host_collective] =
        collective.map(|code| names[code as usize]);
    if rank == 0 {
        eprintln!(
            "mpi_bench: {size} ranks on `{}`{}; send from rank 0 to 1 by default: {default_path}",
            ctx.name(),
            if o.staging { " (staging forced)" } else { "" }
        );
    }
    // `path` is "path" or "path/algorithm" (an allreduce on the device).
    let report = |case: &str, path: &str, bytes: usize, seconds: f64, factor: f64, iters: usize| {
        if rank == 0 {
            let algbw = bytes as f64 / seconds / 1e9;
            let (path, algorithm) = match path.split_once('/') {
                Some((path, algorithm)) => (path, format!(",\"algorithm\":\"{algorithm}\"")),
                None => (path, String::new()),
            };
            println!(
                "{{\"case\":\"{case}\",\"bytes\":{bytes},\"ranks\":{size},\"algbw\":{algbw:.4},\
                 \"busbw\":{:.4},\"time_us\":{:.2},\"iters\":{iters},\"path\":\"{path}\"\
                 {algorithm}}}",
                algbw * factor,
                seconds * 1e6
            );
        }
    };
    let mut bytes = 4 << 10;
    while bytes < o.min_bytes {
        bytes *= 4;
    }
    while bytes <= o.max_bytes {
        let len = bytes / 4;
        let iters = match o.iters {
            Some(n) => n.max(1),
            None if o.quick => 3,
            None => ((64usize << 20) / bytes).clamp(3, 50),
        };
        let host: Vec<f32> = (0..len).map(|i| (i % 7) as f32).collect();
        let buf = ctx.enqueue_create_buffer::<f32>(len).unwrap();
        buf.enqueue_copy_from(&host[..]).unwrap();
        ctx.synchronize().unwrap();

        let n = size as f64;
        let mut out = vec![0.0f32; len];
        // An allgather's `recv` and a reduce_scatter's `send`: `bytes`
        // (rounded down to whole blocks), one block a rank.
        let block = len / size as usize;
        let blocks = buf
            .create_sub_buffer::<f32>(0, block * size as usize)
            .unwrap();
        let part = ctx.enqueue_create_buffer::<f32>(block).unwrap();
        // Each collective beside its host MPI call (`case` and `case_host`,
        // their busbw `factor` times algbw).
        let case = |name: &str,
                    path: &str,
                    factor: f64,
                    device: &mut dyn FnMut(),
                    host: &mut dyn FnMut()| {
            if !o.runs(name) {
                return;
            }
            let (device, plain) = time_pair(&world, iters, device, host);
            report(name, path, bytes, device, factor, iters);
            report(&format!("{name}_host"), "host", bytes, plain, factor, iters);
        };
        // On the same-node path where every pair can take it, and over MPI.
        let mut collectives = vec![(&always, always_collective)];
        if always_collective != off_collective {
            collectives.push((&off, off_collective));
        }
        if ![always_collective, off_collective].contains(&host_collective) {
            collectives.push((&host_memory, host_collective));
        }
        let sum = SystemOperation::sum();
        for (c, path) in collectives {
            let synced = |r: vkcompute_mpi::Result<()>| {
                r.unwrap();
                ctx.synchronize().unwrap();
            };
            let algorithm = c.allreduce_algorithm(&buf).name();
            case(
                "allreduce",
                &format!("{path}/{algorithm}"),
                2.0 * (n - 1.0) / n,
                &mut || synced(c.allreduce(&buf, ReduceOp::Sum)),
                &mut || world.all_reduce_into(&host[..], &mut out[..], sum),
            );
            case(
                "broadcast",
                path,
                1.0,
                &mut || synced(c.broadcast(&buf, 0)),
                &mut || world.process_at_rank(0).broadcast_into(&mut out[..]),
            );
            case(
                "reduce",
                path,
                1.0,
                &mut || synced(c.reduce(&buf, ReduceOp::Sum, 0)),
                &mut || match rank {
                    0 => world
                        .process_at_rank(0)
                        .reduce_into_root(&host[..], &mut out[..], sum),
                    _ => world.process_at_rank(0).reduce_into(&host[..], sum),
                },
            );
            case(
                "allgather",
                path,
                (n - 1.0) / n,
                &mut || synced(c.allgather(&part, &blocks)),
                &mut || world.all_gather_into(&host[..block], &mut out[..block * size as usize]),
            );
            case(
                "reduce_scatter",
                path,
                (n - 1.0) / n,
                &mut || synced(c.reduce_scatter(&blocks, &part, ReduceOp::Sum)),
                &mut || {
                    world.reduce_scatter_block_into(
                        &host[..block * size as usize],
                        &mut out[..block],
                        sum,
                    )
                },
            );
        }

        // On the same-node path where ranks 0 and 1 can take it, and over
        // MPI; blocking (`sendrecv`) and through requests (`isendrecv`).
        let mut paths = vec![(&always, always_path)];
        if always_path != off_path {
            paths.push((&off, off_path));
        }
        if ![always_path, off_path].contains(&host_path) {
            paths.push((&host_memory, host_path));
        }
        let cases = ["sendrecv", "isendrecv"]
            .into_iter()
            .filter(|&case| o.runs(case));
        for case in cases.filter(|_| size >= 2) {
            let blocking = case == "sendrecv";
            for &(c, path) in &paths {
                let (device, plain) = time_pair(
                    &world,
                    iters,
                    || match (rank, blocking) {
                        (0, true) => c.send(&buf, 1, 0).unwrap(),
                        (0, false) => c.isend(&buf, 1, 0).unwrap().wait().unwrap(),
                        (1, _) => {
                            match blocking {
                                true => c.recv(&buf, 0, 0).unwrap(),
                                false => c.irecv(&buf, 0, 0).unwrap().wait().unwrap(),
                            }
                            ctx.synchronize().unwrap();
                        }
                        _ => {}
                    },
                    || match rank {
                        0 => world.process_at_rank(1).send(&host[..]),
                        1 => {
                            world.process_at_rank(0).receive_into(&mut out[..]);
                        }
                        _ => {}
                    },
                );
                report(case, path, bytes, device, 1.0, iters);
                report("sendrecv_host", "host", bytes, plain, 1.0, iters);
            }
        }
        bytes *= 4;
    }
}
