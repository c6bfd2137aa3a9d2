//! Threads under real MPI (Open MPI's `mpirun`, 2 ranks on localhost):
//!
//! - `multiple`: MPI initialised with `MPI_THREAD_MULTIPLE`; where MPI
//!   provides it (`Communicator::thread_level`), two threads per rank each
//!   run allreduces and send/recv pairs on their own communicator (two
//!   duplicates of the world, one moved to the second thread), at the same
//!   time, each result checked against a CPU reference. Where MPI provides
//!   less, the moved communicator must refuse instead (`WrongThread`).
//! - `funneled`: MPI initialised with `MPI_THREAD_FUNNELED`: a
//!   communicator moved to another thread refuses every operation there
//!   (`Error::WrongThread`, before any MPI call) and works again once
//!   moved back; one cannot be made on another thread.
//!
//! Run by `cargo test` (harness = false): started without MPI, the program
//! launches itself once per case with `mpirun --oversubscribe -np 2`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "a test program: a failure fails the test"
)]

use std::process::{Command, ExitCode};

use mpi::Threading;
use vkcompute::{ContextOptions, DeviceContext};
use vkcompute_mpi::{Communicator, Error, ReduceOp};

fn main() -> ExitCode {
    match std::env::var("VKCOMPUTE_MPI_THREADS") {
        Ok(case) => rank_main(&case),
        Err(_) => launch(),
    }
}

fn launch() -> ExitCode {
    let exe = std::env::current_exe().unwrap();
    let mut failed = Vec::new();
    for case in ["multiple", "funneled"] {
        let args = ["--oversubscribe", "--timeout", "120", "-np", "2"];
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
            eprintln!("== {case}: passed");
        } else {
            eprintln!("== {case}: FAILED ({status})");
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

/// `rounds` allreduces (sum of `rank + salt + round` over the ranks) and
/// send/recv pairs (rank 0 to 1) on `comm`, each checked.
fn exercise(comm: &Communicator, salt: u32, rounds: u32) -> Result<(), String> {
    let ctx = comm.context();
    let (rank, size) = (comm.rank() as u32, comm.size() as u32);
    for round in 0..rounds {
        let len = 1000 + 37 * round as usize + salt as usize;
        let buf = ctx.enqueue_create_buffer::<u32>(len).unwrap();
        buf.enqueue_fill(rank + salt + round).unwrap();
        comm.allreduce(&buf, ReduceOp::Sum)
            .map_err(|e| format!("allreduce: {e}"))?;
        let want = (0..size).map(|r| r + salt + round).sum::<u32>();
        let got = buf.to_vec().unwrap();
        if let Some(i) = got.iter().position(|v| *v != want) {
            return Err(format!(
                "allreduce round {round}: element {i} is {}, expected {want}",
                got[i]
            ));
        }
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
    }
    Ok(())
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
    let log = ctx.validation_log();
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
            let ctx2 = context();
            let log2 = ctx2.validation_log();
            let second = Communicator::new(&world, &ctx2).expect("a second communicator");
            let other = std::thread::spawn(move || {
                let r = exercise(&second, 1000, 20);
                drop(second);
                ctx2.synchronize().unwrap();
                r.and_then(|()| match log2.messages() {
                    m if m.is_empty() => Ok(()),
                    m => Err(format!("validation messages: {m:?}")),
                })
            });
            let mine = exercise(&comm, 0, 20);
            let theirs = other.join().unwrap();
            mine.map_err(|e| format!("main thread: {e}"))?;
            theirs.map_err(|e| format!("second thread: {e}"))?;
            return Ok(format!("{provided:?}: two threads, 20 rounds each"));
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
