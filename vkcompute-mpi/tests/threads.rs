//! Threads under real MPI (Open MPI's `mpirun`, 2 and 3 ranks on localhost):
//!
//! - `multiple`: MPI initialised with `MPI_THREAD_MULTIPLE`; where MPI
//!   provides it (`Communicator::thread_level`), three threads per rank
//!   each run collectives (allreduce, broadcast, allgather,
//!   reduce_scatter, reduce), send/recv pairs and two `isend`s in flight
//!   (received in the opposite order) on their own communicator (three
//!   duplicates of the world, two moved to other threads, each with a
//!   context of its own): the main thread's made by
//!   `Communicator::new` (over MPI on lavapipe, whose buffers map
//!   directly; its reduce, allgather and reduce_scatter of one round
//!   travel in pieces, `pipelined.rs`), the other two with the same-node
//!   path asked for (`SameNodePolicy::Always`, exported device memory,
//!   and `SameNodePolicy::HostMemory`, shared host memory: two
//!   communicators' shared memory and sockets in use at once), at the
//!   same time, each result
//!   checked against a CPU reference. Where MPI provides less, the moved
//!   communicator must refuse instead (`WrongThread`).
//! - `funneled`: MPI initialised with `MPI_THREAD_FUNNELED`: a
//!   communicator moved to another thread refuses every operation there
//!   (`Error::WrongThread`, before any MPI call) and works again once
//!   moved back; one cannot be made on another thread.
//!
//! Run by `cargo test` (harness = false): started without MPI, the program
//! launches itself once per case with `mpirun --oversubscribe -np 2`, and
//! `multiple` once more on 3 ranks, where the main thread's allreduces
//! take the direct reduce-scatter (every chunk to its owner at once,
//! `Communicator::allreduce_algorithm`) while the other threads run
//! theirs on the same-node path.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "a test program: a failure fails the test"
)]

use std::process::{Command, ExitCode};

use mpi::Threading;
use vkcompute::{ContextOptions, DeviceContext};
use vkcompute_mpi::{
    AllreduceAlgorithm, Communicator, Error, Path, ReduceOp, SameNodeMemory, SameNodePolicy,
};

fn main() -> ExitCode {
    match std::env::var("VKCOMPUTE_MPI_THREADS") {
        Ok(case) => rank_main(&case),
        Err(_) => launch(),
    }
}

fn launch() -> ExitCode {
    let exe = std::env::current_exe().unwrap();
    let mut failed = Vec::new();
    for (case, ranks) in [("multiple", "2"), ("multiple", "3"), ("funneled", "2")] {
        let args = ["--oversubscribe", "--timeout", "120", "-np", ranks];
        eprintln!("== mpirun {} {} ({case})", args.join(" "), exe.display());
        let status = Command::new("mpirun")
            .args(args)
            .arg(&exe)
            .env("VKCOMPUTE_MPI_THREADS", case)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .status()
            .expect("mpirun runs (run `make setup`, which installs Open MPI)");
        if status.success() {
            eprintln!("== {case} on {ranks} ranks: passed");
        } else {
            eprintln!("== {case} on {ranks} ranks: FAILED ({status})");
            failed.push(case);
        }
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn context() -> DeviceContext {
    DeviceContext::with_options(
        ContextOptions::new()
            .validation(true)
            .pipeline_cache_dir(None),
    )
    .expect("a validated lavapipe context")
}

/// Fails with `what` and the first element of `got` that is not `want(i)`.
fn check(what: &str, got: &[u32], want: impl Fn(usize) -> u32) -> Result<(), String> {
    match got.iter().enumerate().find(|(i, v)| **v != want(*i)) {
        Some((i, v)) => Err(format!("{what}: element {i} is {v}, expected {}", want(i))),
        None => Ok(()),
    }
}

/// A broadcast from rank 1, an allgather, a reduce_scatter (sum) and a
/// reduce (max, to rank 0) of `len` elements on `comm`, each checked:
/// rank `r` contributes `r + salt` (the allgather `r * salt + i`).
fn other_collectives(comm: &Communicator, salt: u32, len: usize) -> Result<(), String> {
    let ctx = comm.context();
    let (rank, size) = (comm.rank() as u32, comm.size() as u32);
    let filled = |len: usize, value: u32| {
        let buf = ctx.enqueue_create_buffer::<u32>(len).unwrap();
        buf.enqueue_fill(value).unwrap();
        buf
    };
    let buf = filled(len, rank + salt);
    comm.broadcast(&buf, 1)
        .map_err(|e| format!("broadcast: {e}"))?;
    check("broadcast", &buf.to_vec().unwrap(), |_| 1 + salt)?;
    let mine: Vec<u32> = (0..len as u32).map(|i| rank * salt + i).collect();
    let send = ctx.enqueue_create_buffer::<u32>(len).unwrap();
    send.enqueue_copy_from(&mine[..]).unwrap();
    let all = filled(len * size as usize, 0);
    comm.allgather(&send, &all)
        .map_err(|e| format!("allgather: {e}"))?;
    check("allgather", &all.to_vec().unwrap(), |i| {
        (i / len) as u32 * salt + (i % len) as u32
    })?;
    let spread = filled(len * size as usize, rank + salt);
    comm.reduce_scatter(&spread, &buf, ReduceOp::Sum)
        .map_err(|e| format!("reduce_scatter: {e}"))?;
    let total = (0..size).map(|r| r + salt).sum::<u32>();
    check("reduce_scatter", &buf.to_vec().unwrap(), |_| total)?;
    let mine = filled(len, rank + salt);
    comm.reduce(&mine, ReduceOp::Max, 0)
        .map_err(|e| format!("reduce: {e}"))?;
    let want = if rank == 0 {
        size - 1 + salt
    } else {
        rank + salt
    };
    check("reduce", &mine.to_vec().unwrap(), |_| want)
}

/// `rounds` allreduces (sum of `rank + salt + round` over the ranks), the
/// other collectives (`other_collectives`) and send/recv pairs (rank 0
/// to 1) on `comm`, each checked.
fn exercise(comm: &Communicator, salt: u32, rounds: u32) -> Result<(), String> {
    let ctx = comm.context();
    let (rank, size) = (comm.rank() as u32, comm.size() as u32);
    for round in 0..rounds {
        let len = 1000 + 37 * round as usize + salt as usize;
        let buf = ctx.enqueue_create_buffer::<u32>(len).unwrap();
        buf.enqueue_fill(rank + salt + round).unwrap();
        let said = comm.allreduce_algorithm(&buf);
        let before = comm.direct_reduce_scatters();
        comm.allreduce(&buf, ReduceOp::Sum)
            .map_err(|e| format!("allreduce: {e}"))?;
        let direct = comm.direct_reduce_scatters() - before == 1;
        if direct != (said == AllreduceAlgorithm::Direct) {
            return Err(format!(
                "allreduce round {round}: {said:?} said, the direct reduce-scatter taken: {direct}"
            ));
        }
        let want = (0..size).map(|r| r + salt + round).sum::<u32>();
        check(
            &format!("allreduce round {round}"),
            &buf.to_vec().unwrap(),
            |_| want,
        )?;
        other_collectives(comm, salt + round, len)?;
        let msg = ctx.enqueue_create_buffer::<u32>(len).unwrap();
        if rank == 0 {
            msg.enqueue_copy_from(&(0..len as u32).map(|i| i ^ salt).collect::<Vec<_>>()[..])
                .unwrap();
            comm.send(&msg, 1, 7).map_err(|e| format!("send: {e}"))?;
        } else if rank == 1 {
            comm.recv(&msg, 0, 7).map_err(|e| format!("recv: {e}"))?;
            let got = msg.to_vec().unwrap();
            if got.iter().enumerate().any(|(i, v)| *v != i as u32 ^ salt) {
                return Err(format!("recv round {round}: wrong data"));
            }
        }
        isends(comm, salt + round, len)?;
    }
    Ok(())
}

/// Two `isend`s in flight from rank 0 to rank 1 (`len` and `len + 1`
/// elements), received in the opposite order (`recv`, then `irecv`),
/// each checked: element `i` of message `k` is `i ^ salt ^ k`.
fn isends(comm: &Communicator, salt: u32, len: usize) -> Result<(), String> {
    let ctx = comm.context();
    let want = |k: usize| {
        (0..(len + k) as u32)
            .map(|i| i ^ salt ^ k as u32)
            .collect::<Vec<_>>()
    };
    let bufs = [0, 1].map(|k| ctx.enqueue_create_buffer::<u32>(len + k).unwrap());
    if comm.rank() == 0 {
        let mut sent = Vec::new();
        for (k, buf) in bufs.iter().enumerate() {
            buf.enqueue_copy_from(&want(k)[..]).unwrap();
            sent.push(
                comm.isend(buf, 1, 8 + k as i32)
                    .map_err(|e| format!("isend: {e}"))?,
            );
        }
        for s in sent {
            s.wait().map_err(|e| format!("isend: {e}"))?;
        }
    } else if comm.rank() == 1 {
        comm.recv(&bufs[1], 0, 9)
            .map_err(|e| format!("recv of an isend: {e}"))?;
        (comm
            .irecv(&bufs[0], 0, 8)
            .and_then(vkcompute_mpi::Request::wait))
        .map_err(|e| format!("irecv of an isend: {e}"))?;
        for (k, buf) in bufs.iter().enumerate() {
            check(
                &format!("isend {k} (salt {salt})"),
                &buf.to_vec().unwrap(),
                |i| want(k)[i],
            )?;
        }
    }
    Ok(())
}

/// Elements (`u32`) of the round of `exercise_on_its_path` whose chunks
/// are longer than one 4 MiB piece on 2 ranks: over MPI, reduce,
/// allgather and reduce_scatter travel in pieces through pinned host
/// buffers (`pipelined.rs`), at the same time as the other threads'
/// collectives.
const PIECES_LEN: usize = (2 << 20) + 1;

/// `exercise`, and `other_collectives` once in pieces (`PIECES_LEN`),
/// then the name of the path the collectives took (`collective_path`),
/// checked against the count of those that took the same-node path: all
/// five of each round and the four in pieces there, none elsewhere; and
/// so for rank 0's `send` and two `isend`s of each round to rank 1
/// (`path_to(1)`).
fn exercise_on_its_path(comm: &Communicator, salt: u32, rounds: u32) -> Result<String, String> {
    let before = comm.same_node_collectives();
    let sends_before = comm.same_node_sends();
    let direct_before = comm.direct_reduce_scatters();
    exercise(comm, salt, rounds)?;
    // On 3 ranks over MPI (mapped or staged) every round's allreduce (the
    // ring's sizes) sends each chunk to its owner at once; on 2, none.
    let direct = comm.direct_reduce_scatters() - direct_before;
    let over_mpi = comm.collective_path() != Path::SameNode;
    let want = if over_mpi && comm.size() == 3 {
        u64::from(rounds)
    } else {
        0
    };
    if direct != want {
        return Err(format!(
            "{direct} allreduces took the direct reduce-scatter, expected {want}"
        ));
    }
    let sends = comm.same_node_sends() - sends_before;
    let want = match (comm.rank(), comm.path_to(1)) {
        (0, Ok(Path::SameNode)) => 3 * u64::from(rounds),
        _ => 0,
    };
    if sends != want {
        return Err(format!(
            "{sends} messages on the same-node path, expected {want} ({:?})",
            comm.path_to(1)
        ));
    }
    other_collectives(comm, salt, PIECES_LEN).map_err(|e| format!("in pieces: {e}"))?;
    let taken = comm.same_node_collectives() - before;
    let path = comm.collective_path();
    let want = if path == Path::SameNode {
        5 * u64::from(rounds) + 4
    } else {
        0
    };
    if taken != want {
        return Err(format!(
            "{taken} collectives on the same-node path, expected {want} ({path:?})"
        ));
    }
    Ok(path.name().to_string())
}

fn wrong_thread<T: std::fmt::Debug>(what: &str, r: vkcompute_mpi::Result<T>) -> Result<(), String> {
    match r {
        Err(Error::WrongThread { .. }) => Ok(()),
        other => Err(format!(
            "{what} on another thread gave {other:?}, not WrongThread"
        )),
    }
}

/// Moves `comm` to another thread, checks that it refuses there, and
/// gives it back.
fn refused_elsewhere(comm: Communicator) -> Result<Communicator, String> {
    std::thread::spawn(move || {
        let buf = comm.context().enqueue_create_buffer::<u32>(4).unwrap();
        let peer = 1 - comm.rank();
        let checks = wrong_thread("allreduce", comm.allreduce(&buf, ReduceOp::Sum))
            .and_then(|()| wrong_thread("barrier", comm.barrier()))
            .and_then(|()| wrong_thread("send", comm.send(&buf, peer, 1)))
            .and_then(|()| wrong_thread("irecv", comm.irecv(&buf, peer, 1).map(|_| ())));
        checks.map(|()| comm)
    })
    .join()
    .unwrap()
}

fn rank_main(case: &str) -> ExitCode {
    let asked = if case == "multiple" {
        Threading::Multiple
    } else {
        Threading::Funneled
    };
    let (universe, provided) = mpi::initialize_with_threading(asked).expect("MPI initialises once");
    let world = universe.world();
    let ctx = context();
    let log = ctx.diagnostics().validation_log();
    let comm = Communicator::new(&world, &ctx).expect("a communicator");
    let rank = comm.rank();
    let result = (|| -> Result<String, String> {
        if comm.thread_level() != provided {
            return Err(format!(
                "thread_level {:?}, MPI said {provided:?}",
                comm.thread_level()
            ));
        }
        if provided == Threading::Multiple {
            // Made here, in the same order on every rank, before any thread
            // starts (the validation layer of Debian 12 can crash when a
            // device is made while another thread records commands), then
            // moved to threads of their own.
            let made = [1000, 2000].map(|salt| {
                let ctx = context();
                let policy = match salt {
                    1000 => SameNodePolicy::Always,
                    _ => SameNodePolicy::HostMemory,
                };
                let comm = Communicator::with_same_node(&world, &ctx, policy)
                    .expect("a communicator on the same-node path");
                (salt, ctx, comm)
            });
            let others = made.map(|(salt, ctx, comm)| {
                let log = ctx.diagnostics().validation_log();
                std::thread::spawn(move || {
                    // The second shares host memory wherever the device
                    // can import it (every rank here has the same one).
                    let peer = (comm.rank() + 1) % comm.size();
                    let memory = comm.same_node_memory(peer).unwrap();
                    let host = salt != 1000 && ctx.host_import_alignment().is_some();
                    if host && memory != Some(SameNodeMemory::Host) {
                        return Err(format!("salt {salt}: {memory:?} shared with rank {peer}"));
                    }
                    let r = exercise_on_its_path(&comm, salt, 20);
                    drop(comm);
                    ctx.synchronize().unwrap();
                    r.and_then(|path| match log.messages() {
                        m if m.is_empty() => Ok(path),
                        m => Err(format!("validation messages: {m:?}")),
                    })
                })
            });
            let mut paths =
                vec![exercise_on_its_path(&comm, 0, 20).map_err(|e| format!("main thread: {e}"))?];
            for (k, other) in others.into_iter().enumerate() {
                let theirs = other.join().unwrap();
                paths.push(theirs.map_err(|e| format!("thread {} (Always): {e}", k + 1))?);
            }
            return Ok(format!(
                "{provided:?}: three threads, 20 rounds each; the collectives' paths: {}",
                paths.join(", ")
            ));
        }
        let comm = refused_elsewhere(comm)?;
        comm.barrier()
            .map_err(|e| format!("barrier back home: {e}"))?;
        let made_elsewhere = std::thread::spawn(move || {
            let ctx = context();
            Communicator::new(&mpi::topology::SimpleCommunicator::world(), &ctx).map(|_| ())
        })
        .join()
        .unwrap();
        wrong_thread("Communicator::new", made_elsewhere)?;
        exercise(&comm, 0, 2)?;
        Ok(format!(
            "{provided:?}: refused on another thread, fine at home"
        ))
    })();
    ctx.synchronize().unwrap();
    let messages = log.messages();
    match result {
        Ok(line) if messages.is_empty() => {
            eprintln!("threads rank {rank} ok: {line}");
            ExitCode::SUCCESS
        }
        Ok(_) => {
            eprintln!("threads rank {rank} FAILED: validation messages: {messages:?}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("threads rank {rank} FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}
