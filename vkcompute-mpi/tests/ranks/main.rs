//! vkcompute-mpi under real MPI: every operation on 2, 3 and 4 ranks of
//! one machine, each rank with its own lavapipe context under the Khronos
//! validation layer, on both memory paths (direct and forced staging),
//! each result checked against a CPU reference.
//!
//! Run by `cargo test` (harness = false): started without MPI, the program
//! launches itself with `mpirun --oversubscribe --timeout 300 -np N` for N
//! in 2, 3, 4 (`VKCOMPUTE_MPI_RANKS="2 3"` chooses others) and fails if
//! any run fails. Started by mpirun, it is one rank: it runs every check,
//! prints each failure, and exits non-zero if any failed, or if the
//! validation layer reported anything.
//!
//! Every check runs on a communicator that takes the same-node path
//! wherever the ranks can (`SameNodePolicy::Always`; `same_node.rs` checks
//! which they take, under each policy), and the checks of point-to-point
//! messages (blocking and not) and of the collectives (which take the
//! path) again on one with it off, over MPI; with staging forced, the
//! checks of the path again through shared host memory
//! (`SameNodePolicy::HostMemory`).
//!
//! `VKCOMPUTE_MPI_LARGE=0` leaves out the 64 MiB cases;
//! `VKCOMPUTE_MPI_CHECKS=word,...` runs only the checks whose names hold
//! one of the words; `VKCOMPUTE_MPI_MIXED` and `VKCOMPUTE_MPI_SEED` size
//! and seed the randomized schedule (`mixed.rs`).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "a test program: a failure fails the test"
)]

use std::fmt::Debug;
use std::process::{Command, ExitCode};

use vkcompute::half::f16;
use vkcompute::{ContextOptions, DeviceBuffer, DeviceContext, HostBuffer};
use vkcompute_mpi::{Communicator, Element, Error, ReduceOp, Reducible, Request, SameNodePolicy};

type Check = Result<(), String>;
/// A named check that every rank runs.
type Named = (&'static str, fn(&Ranks) -> Check);

mod by_mpi;
mod collectives;
mod isends;
mod mixed;
mod on_node;
mod ordering;
mod p2p;
mod requests;
mod review;
mod same_node;

use by_mpi::*;
use collectives::*;
use isends::*;
use mixed::*;
use on_node::*;
use ordering::*;
use p2p::*;
use requests::*;
use review::*;
use same_node::*;

fn main() -> ExitCode {
    let under_mpi = ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if under_mpi {
        rank_main()
    } else {
        launch()
    }
}

/// Runs this program under mpirun once per rank count.
fn launch() -> ExitCode {
    let exe = std::env::current_exe().unwrap();
    let counts = std::env::var("VKCOMPUTE_MPI_RANKS").unwrap_or_else(|_| "2 3 4".into());
    let mut failed = Vec::new();
    for n in counts.split_whitespace() {
        let args = ["--oversubscribe", "--timeout", "300", "-np", n];
        eprintln!("== mpirun {} {}", args.join(" "), exe.display());
        let start = std::time::Instant::now();
        let status = Command::new("mpirun")
            .args(args)
            .arg(&exe)
            // Open MPI refuses root without these; CI runs as root.
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .status();
        match status {
            Ok(s) if s.success() => {
                eprintln!(
                    "== {n} ranks: passed in {:.1} s",
                    start.elapsed().as_secs_f64()
                )
            }
            Ok(s) => {
                eprintln!("== {n} ranks: FAILED ({s})");
                failed.push(n.to_string());
            }
            Err(e) => {
                eprintln!("== cannot run mpirun ({e}): run `make setup`, which installs Open MPI");
                failed.push(n.to_string());
            }
        }
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("ranks: failed with {} ranks", failed.join(", "));
        ExitCode::FAILURE
    }
}

/// Keeps the lines vkcompute-mpi logs (`info` and above), for the checks
/// of what it reports.
struct Lines(std::sync::Mutex<Vec<String>>);

impl log::Log for Lines {
    fn enabled(&self, metadata: &log::Metadata) -> bool {
        metadata.level() <= log::Level::Info
    }
    fn log(&self, record: &log::Record) {
        let line = record.args().to_string();
        if line.starts_with("vkcompute-mpi:") {
            self.0.lock().unwrap().push(line);
        }
    }
    fn flush(&self) {}
}

static LOGGED: Lines = Lines(std::sync::Mutex::new(Vec::new()));

/// The lines logged since the last call.
fn logged() -> Vec<String> {
    std::mem::take(&mut *LOGGED.0.lock().unwrap())
}

/// One rank: every check, on both memory paths.
fn rank_main() -> ExitCode {
    log::set_logger(&LOGGED).expect("the only logger");
    log::set_max_level(log::LevelFilter::Info);
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let large = std::env::var("VKCOMPUTE_MPI_LARGE").map_or(true, |v| v != "0");
    let mut failures = Vec::new();
    let mut rank = 0;
    for staging in [false, true] {
        let path = if staging { "staging" } else { "direct" };
        let ctx = DeviceContext::with_options(
            ContextOptions::new()
                .validation(true)
                .force_staging(staging)
                .pipeline_cache_dir(None),
        )
        .expect("a validated lavapipe context (run `make setup`)");
        let log = ctx.diagnostics().validation_log();
        let comm = Communicator::with_same_node(&world, &ctx, SameNodePolicy::Always)
            .expect("a communicator");
        rank = comm.rank();
        let t = Ranks {
            comm: &comm,
            ctx: &ctx,
            rank: comm.rank(),
            size: comm.size(),
            same_node: true,
            host_memory: false,
        };
        let mut checks: Vec<Named> = vec![
            ("errors_return_is_set", errors_return_is_set),
            (
                "bad_arguments_are_refused_locally",
                bad_arguments_are_refused_locally,
            ),
        ];
        checks.extend(blocking_sends());
        checks.push(("barrier_returns", barrier_returns));
        checks.extend(collectives_but_allreduce());
        checks.extend(on_node_collectives(large));
        checks.extend(nonblocking());
        checks.extend(ordering_checks());
        checks.extend(allreduces(large));
        checks.extend(path_checks());
        checks.push((
            "a_rank_that_turns_it_off_turns_off_its_pairs",
            a_rank_that_turns_it_off_turns_off_its_pairs,
        ));
        checks.extend(review_checks());
        if large {
            checks.push(("send_and_isend_64_mib", send_and_isend_64_mib));
        }
        run_checks(&t, path, checks, &mut failures);
        // The point-to-point checks again with the same-node path off.
        let wire = Communicator::with_same_node(&world, &ctx, SameNodePolicy::Off)
            .expect("a communicator");
        let w = Ranks {
            comm: &wire,
            same_node: false,
            ..t
        };
        run_checks(
            &w,
            &format!("{path}, over MPI"),
            over_mpi(large),
            &mut failures,
        );
        drop(wire);
        if staging {
            // The memory ranks on different devices share (a discrete
            // GPU's node), here on one device: the point-to-point checks
            // and the collectives on the path through shared host memory.
            let host = Communicator::with_same_node(&world, &ctx, SameNodePolicy::HostMemory)
                .expect("a communicator");
            let h = Ranks {
                comm: &host,
                host_memory: true,
                ..t
            };
            run_checks(
                &h,
                "staging, shared host memory",
                through_host_memory(),
                &mut failures,
            );
        }
        drop(comm);
        if let Err(e) = ctx.synchronize() {
            failures.push(format!("rank {rank} [{path}] synchronize: {e}"));
        }
        drop(ctx);
        for m in log.messages() {
            failures.push(format!("rank {rank} [{path}] validation message: {m}"));
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

/// Runs `checks` on every rank, rank 0 reporting each, and notes failures.
/// `VKCOMPUTE_MPI_CHECKS=name,...` runs only the checks whose names
/// contain one of the given words (for work on one of them; the same on
/// every rank).
fn run_checks(t: &Ranks, path: &str, checks: Vec<Named>, failures: &mut Vec<String>) {
    let only = std::env::var("VKCOMPUTE_MPI_CHECKS").unwrap_or_default();
    let chosen = |name: &str| only.is_empty() || only.split(',').any(|w| name.contains(w));
    for (name, check) in checks.into_iter().filter(|(name, _)| chosen(name)) {
        let start = std::time::Instant::now();
        let result = check(t);
        if t.rank == 0 {
            eprintln!(
                "  [{} ranks, {path}] {name}: {} ({:.2} s)",
                t.size,
                if result.is_ok() { "ok" } else { "FAILED" },
                start.elapsed().as_secs_f64()
            );
        }
        if let Err(e) = result {
            failures.push(format!("rank {} [{path}] {name}: {e}", t.rank));
        }
    }
}

#[derive(Clone, Copy)]
struct Ranks<'a> {
    comm: &'a Communicator,
    ctx: &'a DeviceContext,
    rank: i32,
    size: i32,
    /// Whether `comm` was made with the same-node path on
    /// (`SameNodePolicy::Always`: it takes it where the ranks can,
    /// `same_node.rs`) or off.
    same_node: bool,
    /// Whether it was made asking for shared host memory on that path
    /// (`SameNodePolicy::HostMemory`).
    host_memory: bool,
}

impl Ranks<'_> {
    /// The same-node policy `comm` was made with, for other communicators
    /// of a check.
    fn policy(&self) -> SameNodePolicy {
        if self.host_memory {
            SameNodePolicy::HostMemory
        } else if self.same_node {
            SameNodePolicy::Always
        } else {
            SameNodePolicy::Off
        }
    }

    /// A new communicator over the world with this one's policy (its
    /// memory on the same-node path new, its sockets empty).
    fn new_communicator(&self) -> Result<Communicator, String> {
        let world = mpi::topology::SimpleCommunicator::world();
        ok(
            "a new communicator",
            Communicator::with_same_node(&world, self.ctx, self.policy()),
        )
    }
}

/// Fails with `what` unless `cond`.
fn ensure(cond: bool, what: impl FnOnce() -> String) -> Check {
    if cond {
        Ok(())
    } else {
        Err(what())
    }
}

fn ok<T>(what: &str, r: vkcompute_mpi::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

fn dev<T>(what: &str, r: vkcompute::Result<T>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Compares element by element, reporting the first difference.
fn same<T: PartialEq + Debug>(what: &str, got: &[T], want: &[T]) -> Check {
    if got.len() != want.len() {
        return Err(format!(
            "{what}: {} elements, expected {}",
            got.len(),
            want.len()
        ));
    }
    match got.iter().zip(want).position(|(g, w)| g != w) {
        None => Ok(()),
        Some(i) => Err(format!(
            "{what}: element {i} of {} is {:?}, expected {:?}",
            got.len(),
            got[i],
            want[i]
        )),
    }
}

/// The test values: small, so that float sums and products are exact.
trait Value: Element + PartialEq + Debug {
    fn small(v: i64) -> Self;
}

/// Reducible test values with their CPU reference arithmetic.
trait Arith: Value + Reducible {
    fn combine(op: ReduceOp, a: Self, b: Self) -> Self;
}

macro_rules! int_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn small(v: i64) -> Self { v as $t }
        }
    )*};
}
int_value!(u8, u16, i32, u32, i64, u64);

impl Value for f16 {
    fn small(v: i64) -> Self {
        f16::from_f32(v as f32)
    }
}

macro_rules! int_arith {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a.wrapping_add(b),
                    ReduceOp::Product => a.wrapping_mul(b),
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                }
            }
        }
    )*};
}
int_arith!(i32, u32, i64, u64);

macro_rules! float_value {
    ($($t:ty),*) => {$(
        impl Value for $t {
            fn small(v: i64) -> Self { v as $t }
        }
        impl Arith for $t {
            fn combine(op: ReduceOp, a: Self, b: Self) -> Self {
                match op {
                    ReduceOp::Sum => a + b,
                    ReduceOp::Product => a * b,
                    ReduceOp::Min => a.min(b),
                    ReduceOp::Max => a.max(b),
                }
            }
        }
    )*};
}
float_value!(f32, f64);

/// Rank `rank`'s element `i`: -2..=2 for signed types (and floats), 0..=4
/// for unsigned ones.
fn value<T: Value>(rank: i32, i: usize, signed: bool) -> T {
    let v = ((rank as i64) * 7 + (i as i64) * 3 + (i as i64 / 5)) % 5;
    T::small(if signed { v - 2 } else { v })
}

fn signed<T: Element>() -> bool {
    !matches!(
        T::TYPE,
        vkcompute_mpi::ElementType::U8
            | vkcompute_mpi::ElementType::U16
            | vkcompute_mpi::ElementType::U32
            | vkcompute_mpi::ElementType::U64
    )
}

fn data<T: Value>(rank: i32, len: usize) -> Vec<T> {
    (0..len)
        .map(|i| value::<T>(rank, i, signed::<T>()))
        .collect()
}

fn upload<T: Element>(ctx: &DeviceContext, host: &[T]) -> Result<DeviceBuffer<T>, String> {
    let buf = dev("create", ctx.enqueue_create_buffer::<T>(host.len()))?;
    dev("upload", buf.enqueue_copy_from(host))?;
    Ok(buf)
}

/// The reduction of every rank's `data` with `op`, in rank order.
fn reference<T: Arith>(op: ReduceOp, size: i32, len: usize) -> Vec<T> {
    let mut acc = data::<T>(0, len);
    for r in 1..size {
        for (a, b) in acc.iter_mut().zip(data::<T>(r, len)) {
            *a = T::combine(op, *a, b);
        }
    }
    acc
}
