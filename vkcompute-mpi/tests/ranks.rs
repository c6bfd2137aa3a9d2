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
//! `VKCOMPUTE_MPI_LARGE=0` leaves out the 64 MiB cases.
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
use vkcompute_mpi::{Communicator, Element, Error, ReduceOp, Reducible, Request};

type Check = Result<(), String>;
/// A named check that every rank runs.
type Named = (&'static str, fn(&Ranks) -> Check);

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

/// One rank: every check, on both memory paths.
fn rank_main() -> ExitCode {
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
        let log = ctx.validation_log();
        let comm = Communicator::new(&world, &ctx).expect("a communicator");
        rank = comm.rank();
        let t = Ranks {
            comm: &comm,
            ctx: &ctx,
            rank: comm.rank(),
            size: comm.size(),
        };
        let mut checks: Vec<Named> = vec![
            ("errors_return_is_set", errors_return_is_set),
            (
                "bad_arguments_are_refused_locally",
                bad_arguments_are_refused_locally,
            ),
            (
                "send_recv_device_lengths_and_types",
                send_recv_device_lengths_and_types,
            ),
            (
                "send_recv_views_at_odd_offsets",
                send_recv_views_at_odd_offsets,
            ),
            (
                "send_recv_host_and_device_ends",
                send_recv_host_and_device_ends,
            ),
            ("send_recv_in_many_pieces", send_recv_in_many_pieces),
            (
                "send_recv_mismatch_fails_on_both_ranks",
                send_recv_mismatch_fails_on_both_ranks,
            ),
            ("send_from_mapped_buffer", send_from_mapped_buffer),
            ("recv_into_mapped_buffer", recv_into_mapped_buffer),
            ("barrier_returns", barrier_returns),
            ("broadcast_matches_root", broadcast_matches_root),
            ("allreduce_every_type_and_op", allreduce_every_type_and_op),
            ("allreduce_view_at_odd_offset", allreduce_view_at_odd_offset),
            (
                "allreduce_result_is_stream_ordered",
                allreduce_result_is_stream_ordered,
            ),
            ("reduce_to_each_root", reduce_to_each_root),
            ("allgather_blocks", allgather_blocks),
            ("reduce_scatter_blocks", reduce_scatter_blocks),
            (
                "collective_mismatch_fails_on_every_rank",
                collective_mismatch_fails_on_every_rank,
            ),
            (
                "collective_bad_length_fails_on_every_rank",
                collective_bad_length_fails_on_every_rank,
            ),
            ("allreduce_with_mapped_buffer", allreduce_with_mapped_buffer),
            ("isend_irecv_lengths_and_ends", isend_irecv_lengths_and_ends),
            (
                "blocking_and_nonblocking_ends_pair",
                blocking_and_nonblocking_ends_pair,
            ),
            (
                "many_outstanding_requests_both_directions",
                many_outstanding_requests_both_directions,
            ),
            ("test_polls_to_completion", test_polls_to_completion),
            ("dropping_unfinished_requests", dropping_unfinished_requests),
            (
                "irecv_mismatch_fails_on_both_ranks",
                irecv_mismatch_fails_on_both_ranks,
            ),
            (
                "irecv_lands_only_when_complete_in_stream_order",
                irecv_lands_only_when_complete_in_stream_order,
            ),
            (
                "blocking_calls_move_pending_requests_on",
                blocking_calls_move_pending_requests_on,
            ),
            ("collectives_on_host_buffers", collectives_on_host_buffers),
        ];
        if large {
            checks.push(("large_64_mib", large_64_mib));
        }
        for (name, check) in checks {
            let start = std::time::Instant::now();
            let result = check(&t);
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

struct Ranks<'a> {
    comm: &'a Communicator,
    ctx: &'a DeviceContext,
    rank: i32,
    size: i32,
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

const LENGTHS: [usize; 4] = [0, 1, 7, 1003];

// ---------------------------------------------------------------- errors

fn errors_return_is_set(t: &Ranks) -> Check {
    // SAFETY (test): plain MPI calls on the communicator's live handle; the
    // send goes to a rank that does not exist, which with
    // MPI_ERRORS_RETURN is an error code rather than an abort.
    #[allow(unsafe_code)]
    let (handler_is_return, rc) = unsafe {
        let mut handler = std::mem::zeroed();
        mpi::ffi::MPI_Comm_get_errhandler(t.comm.as_raw(), &mut handler);
        let same = handler == mpi::ffi::RSMPI_ERRORS_RETURN;
        mpi::ffi::MPI_Errhandler_free(&mut handler);
        let byte = 0u8;
        let rc = mpi::ffi::MPI_Send(
            (&byte as *const u8).cast(),
            1,
            mpi::ffi::RSMPI_UINT8_T,
            t.size + 5,
            0,
            t.comm.as_raw(),
        );
        (same, rc)
    };
    ensure(handler_is_return, || {
        "the communicator's error handler is not MPI_ERRORS_RETURN".into()
    })?;
    ensure(rc != 0, || {
        "MPI_Send to a rank that does not exist returned success".into()
    })
}

fn bad_arguments_are_refused_locally(t: &Ranks) -> Check {
    let buf = upload(t.ctx, &[1.0f32, 2.0])?;
    let c = t.comm;
    match c.send(&buf, t.size, 0) {
        Err(Error::InvalidRank { given, .. }) if given == t.size => {}
        other => return Err(format!("send to rank {}: {other:?}", t.size)),
    }
    match c.recv(&buf, -1, 0) {
        Err(Error::InvalidRank { .. }) => {}
        other => return Err(format!("recv from rank -1: {other:?}")),
    }
    match c.send(&buf, t.rank, 0) {
        Err(Error::SelfMessage { .. }) => {}
        other => return Err(format!("send to itself: {other:?}")),
    }
    match c.send(&buf, (t.rank + 1) % t.size, vkcompute_mpi::MAX_TAG + 1) {
        Err(Error::InvalidTag { .. }) => {}
        other => return Err(format!("send with a reserved tag: {other:?}")),
    }
    // Every rank passes the same bad root: every rank refuses it.
    match c.broadcast(&buf, t.size) {
        Err(Error::InvalidRank { .. }) => Ok(()),
        other => Err(format!("broadcast from rank {}: {other:?}", t.size)),
    }
}

// ---------------------------------------------------------- point to point

/// Rank 0 sends `msg(q)` to every other rank q, which checks it and sends
/// back `msg(q)` transformed by `reply`; rank 0 checks the replies.
fn exchange_with_zero<T: Value>(
    t: &Ranks,
    what: &str,
    len: usize,
    make: impl Fn(&[T]) -> Result<Box<dyn SendRecv<T>>, String>,
) -> Check {
    let msg = |q: i32| data::<T>(q + 10, len);
    if t.rank == 0 {
        for q in 1..t.size {
            let out = make(&msg(q))?;
            ok(&format!("{what}: send to {q}"), out.send(t.comm, q, 3))?;
            let back = make(&vec![T::small(0); len])?;
            ok(&format!("{what}: recv from {q}"), back.recv(t.comm, q, 4))?;
            same(
                &format!("{what}: reply of rank {q}"),
                &back.read()?,
                &msg(q + 1),
            )?;
        }
    } else {
        let into = make(&vec![T::small(0); len])?;
        ok(&format!("{what}: recv"), into.recv(t.comm, 0, 3))?;
        same(&format!("{what}: message"), &into.read()?, &msg(t.rank))?;
        let reply = make(&msg(t.rank + 1))?;
        ok(&format!("{what}: reply"), reply.send(t.comm, 0, 4))?;
    }
    Ok(())
}

/// A message end of some kind of buffer, for the exchanges above.
trait SendRecv<T> {
    fn send(&self, c: &Communicator, dest: i32, tag: i32) -> vkcompute_mpi::Result<()>;
    fn recv(&self, c: &Communicator, source: i32, tag: i32) -> vkcompute_mpi::Result<()>;
    fn isend<'c>(
        &self,
        c: &'c Communicator,
        dest: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>>;
    fn irecv<'c>(
        &self,
        c: &'c Communicator,
        source: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>>;
    fn read(&self) -> Result<Vec<T>, String>;
}

/// A whole device or host buffer as a message end.
enum Whole<T> {
    Dev(DeviceBuffer<T>),
    Host(HostBuffer<T>),
}

impl<T: Element> SendRecv<T> for Whole<T> {
    fn send(&self, c: &Communicator, dest: i32, tag: i32) -> vkcompute_mpi::Result<()> {
        match self {
            Whole::Dev(b) => c.send(b, dest, tag),
            Whole::Host(b) => c.send(b, dest, tag),
        }
    }
    fn recv(&self, c: &Communicator, source: i32, tag: i32) -> vkcompute_mpi::Result<()> {
        match self {
            Whole::Dev(b) => c.recv(b, source, tag),
            Whole::Host(b) => c.recv(b, source, tag),
        }
    }
    fn isend<'c>(
        &self,
        c: &'c Communicator,
        dest: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>> {
        match self {
            Whole::Dev(b) => c.isend(b, dest, tag),
            Whole::Host(b) => c.isend(b, dest, tag),
        }
    }
    fn irecv<'c>(
        &self,
        c: &'c Communicator,
        source: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>> {
        match self {
            Whole::Dev(b) => c.irecv(b, source, tag),
            Whole::Host(b) => c.irecv(b, source, tag),
        }
    }
    fn read(&self) -> Result<Vec<T>, String> {
        match self {
            Whole::Dev(b) => dev("to_vec", b.to_vec()),
            Whole::Host(b) => dev("to_vec", b.to_vec()),
        }
    }
}

fn device_end<'a, T: Element + 'static>(
    t: &'a Ranks,
) -> impl Fn(&[T]) -> Result<Box<dyn SendRecv<T>>, String> + 'a {
    move |host| Ok(Box::new(Whole::Dev(upload(t.ctx, host)?)) as Box<dyn SendRecv<T>>)
}

fn host_end<'a, T: Element + 'static>(
    t: &'a Ranks,
) -> impl Fn(&[T]) -> Result<Box<dyn SendRecv<T>>, String> + 'a {
    move |host| {
        let buf = dev(
            "host buffer",
            t.ctx.enqueue_create_host_buffer::<T>(host.len()),
        )?;
        dev("fill host buffer", buf.as_mut_slice()).map(|mut s| s.copy_from_slice(host))?;
        Ok(Box::new(Whole::Host(buf)) as Box<dyn SendRecv<T>>)
    }
}

fn send_recv_device_lengths_and_types(t: &Ranks) -> Check {
    for len in LENGTHS {
        exchange_with_zero::<f32>(t, &format!("f32 x {len}"), len, device_end(t))?;
        exchange_with_zero::<u8>(t, &format!("u8 x {len}"), len, device_end(t))?;
        exchange_with_zero::<i64>(t, &format!("i64 x {len}"), len, device_end(t))?;
        exchange_with_zero::<f16>(t, &format!("f16 x {len}"), len, device_end(t))?;
    }
    Ok(())
}

/// Views of a larger buffer at odd element offsets; the elements around
/// the view keep their value.
fn send_recv_views_at_odd_offsets(t: &Ranks) -> Check {
    for (offset, len) in [(3usize, 7usize), (1, 1003)] {
        let what = format!("u8 view at {offset}");
        exchange_with_zero::<u8>(t, &what, len, view_end(t, offset, 0xee))?;
        let what = format!("f32 view at {offset}");
        exchange_with_zero::<f32>(t, &what, len, view_end(t, offset, -9.0))?;
    }
    Ok(())
}

/// Message ends that are views at `offset` of a larger buffer filled with
/// `fill`.
fn view_end<'a, T: Element + Debug + PartialEq + 'static>(
    t: &'a Ranks,
    offset: usize,
    fill: T,
) -> impl Fn(&[T]) -> Result<Box<dyn SendRecv<T>>, String> + 'a {
    move |host| {
        let parent = dev(
            "parent",
            t.ctx.enqueue_create_buffer::<T>(host.len() + offset + 5),
        )?;
        dev("fill", parent.enqueue_fill(fill))?;
        let view = dev("view", parent.create_sub_buffer::<T>(offset, host.len()))?;
        dev("upload", view.enqueue_copy_from(host))?;
        Ok(Box::new(Viewed {
            parent,
            view,
            offset,
        }) as Box<dyn SendRecv<T>>)
    }
}

/// A view whose `read` also checks that the parent around it is untouched.
struct Viewed<T> {
    parent: DeviceBuffer<T>,
    view: DeviceBuffer<T>,
    offset: usize,
}

impl<T: Element + Debug + PartialEq> SendRecv<T> for Viewed<T> {
    fn send(&self, c: &Communicator, dest: i32, tag: i32) -> vkcompute_mpi::Result<()> {
        c.send(&self.view, dest, tag)
    }
    fn recv(&self, c: &Communicator, source: i32, tag: i32) -> vkcompute_mpi::Result<()> {
        c.recv(&self.view, source, tag)
    }
    fn isend<'c>(
        &self,
        c: &'c Communicator,
        dest: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>> {
        c.isend(&self.view, dest, tag)
    }
    fn irecv<'c>(
        &self,
        c: &'c Communicator,
        source: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>> {
        c.irecv(&self.view, source, tag)
    }
    fn read(&self) -> Result<Vec<T>, String> {
        let all = dev("parent to_vec", self.parent.to_vec())?;
        let (len, o) = (self.view.len(), self.offset);
        let fill = all[0];
        if all[..o].iter().chain(&all[o + len..]).any(|x| *x != fill) {
            return Err(format!("elements outside the view at {o} changed: {all:?}"));
        }
        Ok(all[o..o + len].to_vec())
    }
}

fn send_recv_host_and_device_ends(t: &Ranks) -> Check {
    for len in [1usize, 7, 1003] {
        exchange_with_zero::<u32>(t, &format!("host u32 x {len}"), len, host_end(t))?;
    }
    // A host buffer at one end and a device buffer at the other.
    let len = 501;
    let msg = data::<i32>(42, len);
    if t.rank == 0 {
        let host = dev("host", t.ctx.enqueue_create_host_buffer::<i32>(len))?;
        dev("fill", host.as_mut_slice()).map(|mut s| s.copy_from_slice(&msg))?;
        for q in 1..t.size {
            ok("host to device: send", t.comm.send(&host, q, 5))?;
        }
        let back = dev("host", t.ctx.enqueue_create_host_buffer::<i32>(len))?;
        for q in 1..t.size {
            ok("device to host: recv", t.comm.recv(&back, q, 6))?;
            same(
                "device to host",
                &dev("read", back.to_vec())?,
                &data::<i32>(q, len),
            )?;
        }
    } else {
        let into = dev("create", t.ctx.enqueue_create_buffer::<i32>(len))?;
        ok("host to device: recv", t.comm.recv(&into, 0, 5))?;
        same("host to device", &dev("read", into.to_vec())?, &msg)?;
        let out = upload(t.ctx, &data::<i32>(t.rank, len))?;
        ok("device to host: send", t.comm.send(&out, 0, 6))?;
    }
    Ok(())
}

/// Messages much longer than the piece size (here 256 bytes) travel in
/// many pieces, each copy overlapping the transfer before it; the sender
/// and receiver may use different piece sizes.
fn send_recv_in_many_pieces(t: &Ranks) -> Check {
    let mut small = Communicator::new(&mpi::topology::SimpleCommunicator::world(), t.ctx)
        .map_err(|e| format!("communicator: {e}"))?;
    small.set_piece_bytes(if t.rank == 0 { 256 } else { 1000 });
    ensure(
        small.piece_bytes() == if t.rank == 0 { 256 } else { 1024 },
        || format!("piece size {}", small.piece_bytes()),
    )?;
    let st = Ranks {
        comm: &small,
        ctx: t.ctx,
        rank: t.rank,
        size: t.size,
    };
    for len in [63usize, 64, 65, 1003, 10_001] {
        exchange_with_zero::<f32>(&st, &format!("f32 x {len} in pieces"), len, device_end(t))?;
        exchange_with_zero::<u16>(
            &st,
            &format!("host u16 x {len} in pieces"),
            len,
            host_end(t),
        )?;
    }
    Ok(())
}

fn send_recv_mismatch_fails_on_both_ranks(t: &Ranks) -> Check {
    let last = t.size - 1;
    if t.rank == 0 {
        let five = upload(t.ctx, &[1.0f32; 5])?;
        match t.comm.send(&five, last, 7) {
            Err(Error::Mismatch { detail, .. }) if detail.contains("6") => {}
            other => return Err(format!("sending 5 f32 to a receiver of 6: {other:?}")),
        }
        let ints = upload(t.ctx, &[1u32; 5])?;
        match t.comm.send(&ints, last, 7) {
            Err(Error::Mismatch { .. }) => {}
            other => return Err(format!("sending u32 to a receiver of i32: {other:?}")),
        }
        // The pair still works afterwards.
        ok("send after the mismatches", t.comm.send(&five, last, 7))?;
    } else if t.rank == last {
        let six = upload(t.ctx, &[0.0f32; 6])?;
        match t.comm.recv(&six, 0, 7) {
            Err(Error::Mismatch { detail, .. }) if detail.contains("5") => {}
            other => return Err(format!("receiving 6 f32 from a sender of 5: {other:?}")),
        }
        same(
            "the buffer after a refused message",
            &dev("read", six.to_vec())?,
            &[0.0; 6],
        )?;
        let ints = upload(t.ctx, &[0i32; 5])?;
        match t.comm.recv(&ints, 0, 7) {
            Err(Error::Mismatch { .. }) => {}
            other => return Err(format!("receiving i32 from a sender of u32: {other:?}")),
        }
        let five = upload(t.ctx, &[0.0f32; 5])?;
        ok("recv after the mismatches", t.comm.recv(&five, 0, 7))?;
        same(
            "the message after the mismatches",
            &dev("read", five.to_vec())?,
            &[1.0; 5],
        )?;
    }
    Ok(())
}

/// A mapped buffer: on the direct path the mapping is the memory itself
/// and the device may not read it (the sender fails, the receiver hears
/// of it); on the staging path the mapping is a copy and the device may
/// still read the buffer (the message goes through).
fn send_from_mapped_buffer(t: &Ranks) -> Check {
    let last = t.size - 1;
    let msg = data::<f32>(3, 9);
    let direct = !t.ctx.is_staging_forced();
    if t.rank == 0 {
        let buf = upload(t.ctx, &msg)?;
        let mapped = dev("map", buf.map_to_host())?;
        let result = t.comm.send(&buf, last, 8);
        drop(mapped);
        match (direct, result) {
            (true, Err(e)) if e.to_string().contains("mapped") => {}
            (false, Ok(())) => {}
            (_, other) => {
                return Err(format!(
                    "send from a mapped buffer (direct: {direct}): {other:?}"
                ))
            }
        }
    } else if t.rank == last {
        let into = upload(t.ctx, &[0.0f32; 9])?;
        match (direct, t.comm.recv(&into, 0, 8)) {
            (
                true,
                Err(Error::RemoteFailure {
                    failed: 0, reason, ..
                }),
            ) if reason.contains("mapped") => {}
            (false, Ok(())) => same(
                "message from a mapped buffer",
                &dev("read", into.to_vec())?,
                &msg,
            )?,
            (_, other) => {
                return Err(format!(
                    "recv from a mapped sender (direct: {direct}): {other:?}"
                ))
            }
        }
    }
    Ok(())
}

/// Receiving into a mapped buffer fails with vkcompute's error there; the
/// message is taken off the wire (the sender completes, and the next
/// message between the two arrives whole).
fn recv_into_mapped_buffer(t: &Ranks) -> Check {
    let last = t.size - 1;
    let mut small = Communicator::new(&mpi::topology::SimpleCommunicator::world(), t.ctx)
        .map_err(|e| format!("communicator: {e}"))?;
    small.set_piece_bytes(256);
    let len = 300;
    if t.rank == 0 {
        let out = upload(t.ctx, &data::<f32>(1, len))?;
        ok("send to a mapped receiver", small.send(&out, last, 9))?;
        let next = upload(t.ctx, &data::<f32>(2, len))?;
        ok("the next send", small.send(&next, last, 9))?;
    } else if t.rank == last {
        let into = upload(t.ctx, &vec![0.0f32; len])?;
        let mapped = dev("map", into.map_to_host())?;
        let result = small.recv(&into, 0, 9);
        drop(mapped);
        match result {
            Err(e) if e.to_string().contains("mapped") => {}
            other => return Err(format!("recv into a mapped buffer: {other:?}")),
        }
        ok("the next recv", small.recv(&into, 0, 9))?;
        same(
            "the next message",
            &dev("read", into.to_vec())?,
            &data::<f32>(2, len),
        )?;
    }
    Ok(())
}

// ------------------------------------------------------ non-blocking p2p

/// A factory of message ends, as `device_end`, `view_end` and `host_end`
/// make them.
type Make<'a, T> = dyn Fn(&[T]) -> Result<Box<dyn SendRecv<T>>, String> + 'a;

/// Rank 0 and every other rank q exchange a message each way at once:
/// rank 0 posts an irecv from and an isend to every q before waiting for
/// any (its sends first), q posts its irecv and isend and waits for its
/// send first too; both check what came against the CPU reference.
fn nonblocking_with_zero<T: Value>(t: &Ranks, what: &str, len: usize, make: &Make<T>) -> Check {
    let to = |q: i32| data::<T>(q + 10, len);
    let from = |q: i32| data::<T>(q + 20, len);
    let c = t.comm;
    if t.rank == 0 {
        let mut ends = Vec::new();
        let mut sends = Vec::new();
        let mut recvs = Vec::new();
        for q in 1..t.size {
            let out = make(&to(q))?;
            let into = make(&vec![T::small(0); len])?;
            recvs.push(ok(
                &format!("{what}: irecv from {q}"),
                into.irecv(c, q, 12),
            )?);
            sends.push(ok(&format!("{what}: isend to {q}"), out.isend(c, q, 13))?);
            ends.push((q, into));
        }
        for (q, s) in (1..).zip(sends) {
            ok(&format!("{what}: wait for the isend to {q}"), s.wait())?;
        }
        for (q, r) in (1..).zip(recvs) {
            ok(&format!("{what}: wait for the irecv from {q}"), r.wait())?;
        }
        for (q, into) in ends {
            same(&format!("{what}: from rank {q}"), &into.read()?, &from(q))?;
        }
    } else {
        let into = make(&vec![T::small(0); len])?;
        let out = make(&from(t.rank))?;
        let r = ok(&format!("{what}: irecv"), into.irecv(c, 0, 13))?;
        let s = ok(&format!("{what}: isend"), out.isend(c, 0, 12))?;
        ok(&format!("{what}: wait for the isend"), s.wait())?;
        ok(&format!("{what}: wait for the irecv"), r.wait())?;
        same(&format!("{what}: from rank 0"), &into.read()?, &to(t.rank))?;
    }
    Ok(())
}

fn isend_irecv_lengths_and_ends(t: &Ranks) -> Check {
    for len in [0usize, 1, 7, 1003] {
        nonblocking_with_zero::<f32>(t, &format!("f32 x {len}"), len, &device_end(t))?;
        nonblocking_with_zero::<u8>(t, &format!("u8 x {len}"), len, &device_end(t))?;
        nonblocking_with_zero::<i64>(t, &format!("host i64 x {len}"), len, &host_end(t))?;
    }
    for (offset, len) in [(3usize, 7usize), (1, 1003)] {
        let what = format!("u16 view at {offset} x {len}");
        nonblocking_with_zero::<u16>(t, &what, len, &view_end(t, offset, 0xeeee))?;
    }
    // Larger than a piece (4 MiB): two pieces, an odd length.
    let len = (1 << 20) + 3;
    nonblocking_with_zero::<f32>(t, "f32 x 2^20 + 3", len, &device_end(t))?;
    // Many small pieces, the two ends with different piece sizes.
    let mut small = Communicator::new(&mpi::topology::SimpleCommunicator::world(), t.ctx)
        .map_err(|e| format!("communicator: {e}"))?;
    small.set_piece_bytes(if t.rank == 0 { 256 } else { 1000 });
    let st = Ranks {
        comm: &small,
        ctx: t.ctx,
        rank: t.rank,
        size: t.size,
    };
    for len in [63usize, 10_001] {
        let what = format!("f32 x {len} in pieces");
        nonblocking_with_zero::<f32>(&st, &what, len, &device_end(t))?;
        let what = format!("host u16 x {len} in pieces");
        nonblocking_with_zero::<u16>(&st, &what, len, &host_end(t))?;
    }
    Ok(())
}

/// The protocol is the blocking one: a blocking send pairs with an irecv,
/// an isend with a blocking recv.
fn blocking_and_nonblocking_ends_pair(t: &Ranks) -> Check {
    let len = 777;
    let c = t.comm;
    if t.rank == 0 {
        for q in 1..t.size {
            let out = upload(t.ctx, &data::<i32>(q + 30, len))?;
            ok("send to an irecv", c.send(&out, q, 14))?;
            let back = dev("host", t.ctx.enqueue_create_host_buffer::<i32>(len))?;
            ok("recv from an isend", c.recv(&back, q, 15))?;
            same(
                "recv from an isend",
                &dev("read", back.to_vec())?,
                &data::<i32>(q + 40, len),
            )?;
        }
    } else {
        let into = dev("create", t.ctx.enqueue_create_buffer::<i32>(len))?;
        let r = ok("irecv", c.irecv(&into, 0, 14))?;
        ok("irecv of a send", r.wait())?;
        same(
            "irecv of a send",
            &dev("read", into.to_vec())?,
            &data::<i32>(t.rank + 30, len),
        )?;
        let out = upload(t.ctx, &data::<i32>(t.rank + 40, len))?;
        ok(
            "isend to a recv",
            c.isend(&out, 0, 15).and_then(Request::wait),
        )?;
    }
    Ok(())
}

/// Every rank has 8 messages to and from every other rank pending at once,
/// on three tags (so several share a peer and tag and must pair up in the
/// order they were posted), of lengths that differ (a message paired with
/// the wrong receive would be a mismatch); every rank waits for all its
/// sends, last first, before any receive.
fn many_outstanding_requests_both_directions(t: &Ranks) -> Check {
    const K: usize = 8;
    let len = |k: usize| 1 + 37 * k;
    let msg = |from: i32, to: i32, k: usize| data::<f32>(from * 100 + to * 10 + k as i32, len(k));
    let c = t.comm;
    let peers: Vec<i32> = (0..t.size).filter(|&p| p != t.rank).collect();
    let mut outs = Vec::new();
    let mut ins = Vec::new();
    for k in 0..K {
        for &p in &peers {
            let out: Box<dyn SendRecv<f32>> = if k % 2 == 0 {
                device_end(t)(&msg(t.rank, p, k))?
            } else {
                host_end(t)(&msg(t.rank, p, k))?
            };
            let into = device_end(t)(&vec![0.0; len(k)])?;
            outs.push(out);
            ins.push((p, k, into));
        }
    }
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    let mut i = 0;
    for k in 0..K {
        for &p in &peers {
            let tag = 30 + (k % 3) as i32;
            // Receives first on even ranks, sends first on odd ones.
            if t.rank % 2 == 0 {
                recvs.push(ok("irecv", ins[i].2.irecv(c, p, tag))?);
                sends.push(ok("isend", outs[i].isend(c, p, tag))?);
            } else {
                sends.push(ok("isend", outs[i].isend(c, p, tag))?);
                recvs.push(ok("irecv", ins[i].2.irecv(c, p, tag))?);
            }
            i += 1;
        }
    }
    while let Some(s) = sends.pop() {
        ok("wait for an isend", s.wait())?;
    }
    for r in recvs {
        ok("wait for an irecv", r.wait())?;
    }
    for (p, k, into) in &ins {
        same(
            &format!("message {k} from rank {p}"),
            &into.read()?,
            &msg(*p, t.rank, *k),
        )?;
    }
    Ok(())
}

/// A ring (each rank sends to the next and receives from the one before),
/// completed by polling `test` alone, in many small pieces; a completed
/// request keeps answering `true`.
fn test_polls_to_completion(t: &Ranks) -> Check {
    let mut small = Communicator::new(&mpi::topology::SimpleCommunicator::world(), t.ctx)
        .map_err(|e| format!("communicator: {e}"))?;
    small.set_piece_bytes(256);
    let len = 5000;
    let next = (t.rank + 1) % t.size;
    let prev = (t.rank + t.size - 1) % t.size;
    let out = upload(t.ctx, &data::<u32>(t.rank + 50, len))?;
    let into = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
    dev("fill", into.enqueue_fill(9))?;
    let mut r = ok("irecv", small.irecv(&into, prev, 40))?;
    let mut s = ok("isend", small.isend(&out, next, 40))?;
    let (mut r_done, mut s_done, mut polls) = (false, false, 0u64);
    while !(r_done && s_done) {
        polls += 1;
        if !r_done {
            r_done = ok("test of the irecv", r.test())?;
        }
        if !s_done {
            s_done = ok("test of the isend", s.test())?;
        }
        ensure(polls < 100_000_000, || "test never completed".into())?;
    }
    ensure(
        ok("test again", r.test())? && ok("test again", s.test())?,
        || "a completed request's test is no longer true".into(),
    )?;
    same(
        "ring message received by polling",
        &dev("read", into.to_vec())?,
        &data::<u32>(prev + 50, len),
    )?;
    ok("wait after test", r.wait())?;
    ok("wait after test", s.wait())
}

/// An irecv dropped before any message came is cancelled: its buffer is
/// untouched and the next message on its peer and tag goes to a later
/// receive. An isend dropped unfinished is waited for in the drop: its
/// receiver (a blocking recv) gets the whole message. The communicator
/// works on afterwards.
fn dropping_unfinished_requests(t: &Ranks) -> Check {
    let c = t.comm;
    let next = (t.rank + 1) % t.size;
    let prev = (t.rank + t.size - 1) % t.size;
    let len = 301;
    let untouched = upload(t.ctx, &[5i64; 301])?;
    let r = ok("irecv to drop", c.irecv(&untouched, next, 41))?;
    drop(r);
    ok("barrier after the drop", c.barrier())?;
    same(
        "the buffer of a dropped irecv",
        &dev("read", untouched.to_vec())?,
        &[5i64; 301],
    )?;
    // The same peer and tag: the cancelled irecv took nothing.
    let into = dev("create", t.ctx.enqueue_create_buffer::<i64>(len))?;
    let out = upload(t.ctx, &data::<i64>(t.rank + 60, len))?;
    let r = ok("irecv after the drop", c.irecv(&into, next, 41))?;
    let s = ok("isend after the drop", c.isend(&out, prev, 41))?;
    ok("wait for the irecv", r.wait())?;
    ok("wait for the isend", s.wait())?;
    same(
        "the message after a dropped irecv",
        &dev("read", into.to_vec())?,
        &data::<i64>(next + 60, len),
    )?;
    // A dropped isend still delivers: its drop waits.
    let last = t.size - 1;
    if t.rank == 0 {
        let out = upload(t.ctx, &data::<f32>(61, 4099))?;
        let s = ok("isend to drop", c.isend(&out, last, 42))?;
        drop(s);
        // The buffer may be changed at once: the request had copied it.
        dev("overwrite", out.enqueue_fill(-1.0))?;
    } else if t.rank == last {
        let into = dev("create", t.ctx.enqueue_create_buffer::<f32>(4099))?;
        ok("recv from a dropped isend", c.recv(&into, 0, 42))?;
        same(
            "the message of a dropped isend",
            &dev("read", into.to_vec())?,
            &data::<f32>(61, 4099),
        )?;
    }
    ok("barrier after the drops", c.barrier())?;
    let buf = upload(t.ctx, &data::<f32>(t.rank, 17))?;
    ok(
        "allreduce after the drops",
        c.allreduce(&buf, ReduceOp::Sum),
    )?;
    same(
        "allreduce after the drops",
        &dev("read", buf.to_vec())?,
        &reference::<f32>(ReduceOp::Sum, t.size, 17),
    )
}

/// Mismatches through irecv (against isend and against a blocking send)
/// and through isend (against a blocking recv): `Mismatch` on both ranks,
/// the destination untouched; the pair works afterwards.
fn irecv_mismatch_fails_on_both_ranks(t: &Ranks) -> Check {
    let last = t.size - 1;
    let c = t.comm;
    let mismatch = |what: &str, r: vkcompute_mpi::Result<()>| match r {
        Err(Error::Mismatch { detail, .. }) if detail.contains("rank 0") => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    };
    if t.rank == 0 {
        let five = upload(t.ctx, &[1.0f32; 5])?;
        mismatch(
            "isend of 5 f32 to an irecv of 6",
            c.isend(&five, last, 43).and_then(Request::wait),
        )?;
        let ints = upload(t.ctx, &[1u32; 5])?;
        mismatch(
            "isend of u32 to an irecv of i32",
            c.isend(&ints, last, 43).and_then(Request::wait),
        )?;
        mismatch("send of 5 f32 to an irecv of 6", c.send(&five, last, 43))?;
        mismatch(
            "isend of 5 f32 to a recv of 6",
            c.isend(&five, last, 43).and_then(Request::wait),
        )?;
        ok(
            "isend after the mismatches",
            c.isend(&five, last, 43).and_then(Request::wait),
        )?;
    } else if t.rank == last {
        let six = upload(t.ctx, &[0.0f32; 6])?;
        mismatch(
            "irecv of 6 f32 from an isend of 5",
            c.irecv(&six, 0, 43).and_then(Request::wait),
        )?;
        let ints = upload(t.ctx, &[0i32; 5])?;
        mismatch(
            "irecv of i32 from an isend of u32",
            c.irecv(&ints, 0, 43).and_then(Request::wait),
        )?;
        let mut r = ok("irecv", c.irecv(&six, 0, 43))?;
        // Polled: `test` reports the mismatch, and `wait` again after it.
        loop {
            match r.test() {
                Ok(false) => continue,
                Ok(true) => return Err("irecv of 6 f32 from a send of 5 succeeded".into()),
                Err(_) => break,
            }
        }
        mismatch("irecv of 6 f32 from a send of 5", r.wait())?;
        mismatch("recv of 6 f32 from an isend of 5", c.recv(&six, 0, 43))?;
        same(
            "the buffer after refused messages",
            &dev("read", six.to_vec())?,
            &[0.0; 6],
        )?;
        same(
            "the buffer after a refused message",
            &dev("read", ints.to_vec())?,
            &[0; 5],
        )?;
        let five = upload(t.ctx, &[0.0f32; 5])?;
        ok(
            "irecv after the mismatches",
            c.irecv(&five, 0, 43).and_then(Request::wait),
        )?;
        same(
            "the message after the mismatches",
            &dev("read", five.to_vec())?,
            &[1.0; 5],
        )?;
    }
    Ok(())
}

/// A pending irecv's destination is not written until the request
/// completes: device work enqueued before `wait` reads the old contents
/// even when the message is in (another request's wait moved it on), and
/// device work enqueued right after `wait` (no host synchronisation
/// between) reads the message.
fn irecv_lands_only_when_complete_in_stream_order(t: &Ranks) -> Check {
    let last = t.size - 1;
    let c = t.comm;
    let len = 2049;
    if t.rank == 0 {
        let a = upload(t.ctx, &data::<u32>(70, len))?;
        let b = upload(t.ctx, &data::<u32>(71, len))?;
        let sa = ok("isend a", c.isend(&a, last, 44))?;
        let sb = ok("isend b", c.isend(&b, last, 45))?;
        ok("wait a", sa.wait())?;
        ok("wait b", sb.wait())?;
        ok("barrier", c.barrier())?;
    } else if t.rank == last {
        let dest = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
        dev("fill", dest.enqueue_fill(77))?;
        let other = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
        let ra = ok("irecv a", c.irecv(&dest, 0, 44))?;
        let rb = ok("irecv b", c.irecv(&other, 0, 45))?;
        // b's wait moves a on too; the sender finishes a before the barrier.
        ok("wait b", rb.wait())?;
        ok("barrier", c.barrier())?;
        let before = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
        dev("copy before wait", before.enqueue_copy_from(&dest))?;
        let after = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
        ok("wait a", ra.wait())?;
        dev("copy after wait", after.enqueue_copy_from(&dest))?;
        dev("fill after", dest.enqueue_fill(0))?;
        same(
            "device copy of a pending irecv's destination",
            &dev("read", before.to_vec())?,
            &[77; 2049],
        )?;
        same(
            "device copy enqueued right after wait",
            &dev("read", after.to_vec())?,
            &data::<u32>(70, len),
        )?;
        same(
            "the other message",
            &dev("read", other.to_vec())?,
            &data::<u32>(71, len),
        )?;
    } else {
        ok("barrier", c.barrier())?;
    }
    Ok(())
}

// ------------------------------------------------------------ collectives

fn barrier_returns(t: &Ranks) -> Check {
    ok("barrier", t.comm.barrier())
}

fn broadcast_one<T: Value>(t: &Ranks, len: usize, root: i32) -> Check {
    let buf = upload(t.ctx, &data::<T>(t.rank, len))?;
    ok(
        &format!("broadcast of {len} {} from {root}", T::TYPE),
        t.comm.broadcast(&buf, root),
    )?;
    same(
        &format!("broadcast of {len} {} from {root}", T::TYPE),
        &dev("read", buf.to_vec())?,
        &data::<T>(root, len),
    )
}

fn broadcast_matches_root(t: &Ranks) -> Check {
    for root in [0, t.size - 1] {
        for len in LENGTHS {
            broadcast_one::<f32>(t, len, root)?;
            broadcast_one::<u8>(t, len, root)?;
            broadcast_one::<i64>(t, len, root)?;
        }
    }
    Ok(())
}

fn allreduce_one<T: Arith>(t: &Ranks, op: ReduceOp, len: usize) -> Check {
    let buf = upload(t.ctx, &data::<T>(t.rank, len))?;
    let what = format!("allreduce {op:?} of {len} {}", T::TYPE);
    ok(&what, t.comm.allreduce(&buf, op))?;
    same(
        &what,
        &dev("read", buf.to_vec())?,
        &reference::<T>(op, t.size, len),
    )
}

fn allreduce_type<T: Arith>(t: &Ranks) -> Check {
    for op in ReduceOp::ALL {
        for len in LENGTHS {
            allreduce_one::<T>(t, op, len)?;
        }
    }
    Ok(())
}

fn allreduce_every_type_and_op(t: &Ranks) -> Check {
    allreduce_type::<f32>(t)?;
    allreduce_type::<f64>(t)?;
    allreduce_type::<i32>(t)?;
    allreduce_type::<u32>(t)?;
    allreduce_type::<i64>(t)?;
    allreduce_type::<u64>(t)
}

fn allreduce_view_at_odd_offset(t: &Ranks) -> Check {
    for (offset, len) in [(1usize, 1usize), (3, 7), (5, 1003)] {
        let parent = dev(
            "parent",
            t.ctx.enqueue_create_buffer::<i32>(offset + len + 2),
        )?;
        dev("fill", parent.enqueue_fill(77))?;
        let view = dev("view", parent.create_sub_buffer::<i32>(offset, len))?;
        dev(
            "upload",
            view.enqueue_copy_from(&data::<i32>(t.rank, len)[..]),
        )?;
        ok(
            "allreduce of a view",
            t.comm.allreduce(&view, ReduceOp::Sum),
        )?;
        let mut want = vec![77; offset + len + 2];
        want[offset..offset + len].copy_from_slice(&reference::<i32>(ReduceOp::Sum, t.size, len));
        same(
            &format!("parent of a view at {offset} after allreduce"),
            &dev("read", parent.to_vec())?,
            &want,
        )?;
    }
    Ok(())
}

/// The input is written by enqueued work just before the call, and the
/// result is read by enqueued work just after it: both in stream order.
fn allreduce_result_is_stream_ordered(t: &Ranks) -> Check {
    let len = 4099;
    let buf = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
    dev("fill", buf.enqueue_fill(t.rank as u32 + 1))?;
    let src = upload(t.ctx, &data::<u32>(t.rank, len))?;
    dev("copy", buf.enqueue_copy_from(&src))?;
    ok("allreduce", t.comm.allreduce(&buf, ReduceOp::Max))?;
    let after = dev("create", t.ctx.enqueue_create_buffer::<u32>(len))?;
    dev("copy after", after.enqueue_copy_from(&buf))?;
    same(
        "copy of the result",
        &dev("read", after.to_vec())?,
        &reference::<u32>(ReduceOp::Max, t.size, len),
    )
}

fn reduce_one<T: Arith>(t: &Ranks, op: ReduceOp, len: usize, root: i32) -> Check {
    let mine = data::<T>(t.rank, len);
    let buf = upload(t.ctx, &mine)?;
    let what = format!("reduce {op:?} of {len} {} to {root}", T::TYPE);
    ok(&what, t.comm.reduce(&buf, op, root))?;
    let want = if t.rank == root {
        reference::<T>(op, t.size, len)
    } else {
        mine
    };
    same(&what, &dev("read", buf.to_vec())?, &want)
}

fn reduce_to_each_root(t: &Ranks) -> Check {
    for root in [0, t.size - 1] {
        for op in ReduceOp::ALL {
            for len in LENGTHS {
                reduce_one::<f32>(t, op, len, root)?;
                reduce_one::<u64>(t, op, len, root)?;
            }
        }
        reduce_one::<i32>(t, ReduceOp::Sum, 1003, root)?;
    }
    Ok(())
}

fn allgather_one<T: Value>(t: &Ranks, m: usize) -> Check {
    let send = upload(t.ctx, &data::<T>(t.rank, m))?;
    let recv = dev(
        "create",
        t.ctx.enqueue_create_buffer::<T>(m * t.size as usize),
    )?;
    let what = format!("allgather of {m} {}", T::TYPE);
    ok(&what, t.comm.allgather(&send, &recv))?;
    let want: Vec<T> = (0..t.size).flat_map(|r| data::<T>(r, m)).collect();
    same(&what, &dev("read", recv.to_vec())?, &want)
}

fn allgather_blocks(t: &Ranks) -> Check {
    for m in [0usize, 1, 5, 1003] {
        allgather_one::<f32>(t, m)?;
        allgather_one::<u16>(t, m)?;
    }
    Ok(())
}

fn reduce_scatter_one<T: Arith>(t: &Ranks, op: ReduceOp, m: usize) -> Check {
    let p = t.size as usize;
    let send = upload(t.ctx, &data::<T>(t.rank, m * p))?;
    let recv = dev("create", t.ctx.enqueue_create_buffer::<T>(m))?;
    let what = format!("reduce_scatter {op:?} of {m} {}", T::TYPE);
    ok(&what, t.comm.reduce_scatter(&send, &recv, op))?;
    let all = reference::<T>(op, t.size, m * p);
    let r = t.rank as usize;
    same(
        &what,
        &dev("read", recv.to_vec())?,
        &all[r * m..(r + 1) * m],
    )
}

fn reduce_scatter_blocks(t: &Ranks) -> Check {
    for m in [0usize, 1, 5, 257] {
        reduce_scatter_one::<f32>(t, ReduceOp::Sum, m)?;
        reduce_scatter_one::<i64>(t, ReduceOp::Min, m)?;
        reduce_scatter_one::<u32>(t, ReduceOp::Product, m)?;
        reduce_scatter_one::<f64>(t, ReduceOp::Max, m)?;
    }
    Ok(())
}

/// Ranks that disagree get `Mismatch` on every rank, and nothing changes.
fn collective_mismatch_fails_on_every_rank(t: &Ranks) -> Check {
    let mine = data::<f32>(t.rank, 9);
    let expect_mismatch = |what: &str, r: vkcompute_mpi::Result<()>| match r {
        Err(Error::Mismatch { detail, .. }) if detail.contains("rank 0") => Ok(()),
        other => Err(format!("{what}: {other:?}")),
    };
    // Rank 0 has one element more.
    let buf = upload(
        t.ctx,
        &data::<f32>(t.rank, if t.rank == 0 { 10 } else { 9 }),
    )?;
    expect_mismatch(
        "allreduce of different lengths",
        t.comm.allreduce(&buf, ReduceOp::Sum),
    )?;
    // Rank 0 reduces i32, the others f32.
    let floats = upload(t.ctx, &mine)?;
    let ints = upload(t.ctx, &data::<i32>(t.rank, 9))?;
    let r = if t.rank == 0 {
        t.comm.allreduce(&ints, ReduceOp::Sum)
    } else {
        t.comm.allreduce(&floats, ReduceOp::Sum)
    };
    expect_mismatch("allreduce of different types", r)?;
    // Different reductions.
    let op = if t.rank == 0 {
        ReduceOp::Max
    } else {
        ReduceOp::Sum
    };
    expect_mismatch(
        "allreduce of different reductions",
        t.comm.allreduce(&floats, op),
    )?;
    // Different roots.
    let root = if t.rank == 0 { 0 } else { t.size - 1 };
    expect_mismatch(
        "broadcast from different roots",
        t.comm.broadcast(&floats, root),
    )?;
    // Different operations.
    let r = if t.rank == 0 {
        t.comm.broadcast(&floats, 0)
    } else {
        t.comm.allreduce(&floats, ReduceOp::Sum)
    };
    expect_mismatch("broadcast against allreduce", r)?;
    same(
        "the buffer after the refused collectives",
        &dev("read", floats.to_vec())?,
        &mine,
    )?;
    // The communicator still works.
    ok(
        "allreduce after the mismatches",
        t.comm.allreduce(&floats, ReduceOp::Sum),
    )?;
    same(
        "allreduce after the mismatches",
        &dev("read", floats.to_vec())?,
        &reference::<f32>(ReduceOp::Sum, t.size, 9),
    )
}

/// A length that does not suit reduce_scatter on one rank: that rank gets
/// `InvalidLength`, every other `RemoteFailure` naming it.
fn collective_bad_length_fails_on_every_rank(t: &Ranks) -> Check {
    let p = t.size as usize;
    let bad = t.size - 1;
    let send = upload(
        t.ctx,
        &data::<f32>(t.rank, 4 * p + usize::from(t.rank == bad)),
    )?;
    let recv = dev("create", t.ctx.enqueue_create_buffer::<f32>(4))?;
    match (
        t.rank == bad,
        t.comm.reduce_scatter(&send, &recv, ReduceOp::Sum),
    ) {
        (true, Err(Error::InvalidLength { .. })) => Ok(()),
        (false, Err(Error::RemoteFailure { failed, .. })) if failed == bad => Ok(()),
        (_, other) => Err(format!(
            "reduce_scatter with a bad length on rank {bad}: {other:?}"
        )),
    }
}

/// A buffer mapped on one rank. Direct path: that rank fails before any
/// data moves and every other rank hears of it. Staging path: the device
/// may read the buffer but not write it, so the others complete and that
/// rank alone fails, when it writes the result.
fn allreduce_with_mapped_buffer(t: &Ranks) -> Check {
    let direct = !t.ctx.is_staging_forced();
    let mapped_rank = t.size - 1;
    let buf = upload(t.ctx, &data::<f32>(t.rank, 33))?;
    let mapping = if t.rank == mapped_rank {
        Some(dev("map", buf.map_to_host())?)
    } else {
        None
    };
    let result = t.comm.allreduce(&buf, ReduceOp::Sum);
    drop(mapping);
    match (t.rank == mapped_rank, direct, result) {
        (true, _, Err(e)) if e.to_string().contains("mapped") => Ok(()),
        (false, true, Err(Error::RemoteFailure { failed, reason, .. }))
            if failed == mapped_rank && reason.contains("mapped") =>
        {
            Ok(())
        }
        (false, false, Ok(())) => same(
            "allreduce beside a mapped buffer",
            &dev("read", buf.to_vec())?,
            &reference::<f32>(ReduceOp::Sum, t.size, 33),
        ),
        (_, _, other) => Err(format!(
            "allreduce with a buffer mapped on rank {mapped_rank} (direct: {direct}): {other:?}"
        )),
    }
}

/// 64 MiB of f32: allreduce, broadcast and a message from rank 0 to the
/// last rank.
fn large_64_mib(t: &Ranks) -> Check {
    let len = 16 << 20;
    let buf = upload(t.ctx, &data::<f32>(t.rank, len))?;
    ok("allreduce of 64 MiB", t.comm.allreduce(&buf, ReduceOp::Sum))?;
    same(
        "allreduce of 64 MiB",
        &dev("read", buf.to_vec())?,
        &reference::<f32>(ReduceOp::Sum, t.size, len),
    )?;
    let last = t.size - 1;
    if t.rank == 0 {
        let out = upload(t.ctx, &data::<f32>(5, len))?;
        ok("send of 64 MiB", t.comm.send(&out, last, 10))?;
    } else if t.rank == last {
        ok("recv of 64 MiB", t.comm.recv(&buf, 0, 10))?;
        same(
            "message of 64 MiB",
            &dev("read", buf.to_vec())?,
            &data::<f32>(5, len),
        )?;
    }
    // The same through isend and irecv, both directions at once.
    if t.rank == 0 || t.rank == last {
        let peer = last - t.rank;
        let out = upload(t.ctx, &data::<f32>(t.rank + 6, len))?;
        let r = ok("irecv of 64 MiB", t.comm.irecv(&buf, peer, 11))?;
        let s = ok("isend of 64 MiB", t.comm.isend(&out, peer, 11))?;
        ok("wait for the isend of 64 MiB", s.wait())?;
        ok("wait for the irecv of 64 MiB", r.wait())?;
        same(
            "irecv of 64 MiB",
            &dev("read", buf.to_vec())?,
            &data::<f32>(peer + 6, len),
        )?;
    }
    Ok(())
}

/// Rank 0 starts an `isend` to rank 1, then blocks in a `recv` of what
/// rank 1 sends only once it has received the `isend`'s message: the
/// blocking `recv` must move the pending `isend` on (before, it waited for
/// ever). The same again with a blocking collective (a barrier) as the
/// call that must move it on.
fn blocking_calls_move_pending_requests_on(t: &Ranks) -> Check {
    let ctx = t.ctx;
    let len = 3001;
    let first: Vec<u32> = (0..len as u32).map(|i| i * 7 + 1).collect();
    let reply: Vec<u32> = (0..len as u32).map(|i| i ^ 0x55).collect();
    let a = dev("buffer", ctx.enqueue_create_buffer::<u32>(len))?;
    let b = dev("buffer", ctx.enqueue_create_buffer::<u32>(len))?;
    match t.rank {
        0 => {
            dev("fill", a.enqueue_copy_from(&first[..]))?;
            let sent = ok("isend", t.comm.isend(&a, 1, 40))?;
            ok("recv", t.comm.recv(&b, 1, 41))?;
            same("reply", &dev("read", b.to_vec())?, &reply)?;
            ok("wait", sent.wait())?;
            let sent = ok("isend", t.comm.isend(&a, 1, 42))?;
            ok("barrier", t.comm.barrier())?;
            ok("wait", sent.wait())?;
        }
        1 => {
            ok("recv", t.comm.recv(&a, 0, 40))?;
            same("first", &dev("read", a.to_vec())?, &first)?;
            dev("fill", b.enqueue_copy_from(&reply[..]))?;
            ok("send", t.comm.send(&b, 0, 41))?;
            ok("recv", t.comm.recv(&a, 0, 42))?;
            same("second", &dev("read", a.to_vec())?, &first)?;
            ok("barrier", t.comm.barrier())?;
        }
        _ => ok("barrier", t.comm.barrier())?,
    }
    Ok(())
}

/// A host buffer holding `host`.
fn host_buffer<T: Element>(ctx: &DeviceContext, host: &[T]) -> Result<HostBuffer<T>, String> {
    let buf = dev(
        "create",
        ctx.enqueue_create_host_buffer::<T>(host.len().max(1)),
    )?;
    let buf = dev("view", buf.create_sub_buffer::<T>(0, host.len()))?;
    dev("upload", buf.enqueue_copy_from(host))?;
    Ok(buf)
}

/// Every collective on `HostBuffer`s (and one mixing a host and a device
/// buffer), against the CPU reference.
fn collectives_on_host_buffers(t: &Ranks) -> Check {
    let p = t.size as usize;
    let r = t.rank as usize;
    for m in [0usize, 1, 7, 1001] {
        let what = |name: &str| format!("{name} of {m} on host buffers");
        let buf = host_buffer(t.ctx, &data::<u32>(t.rank, m))?;
        ok(&what("allreduce"), t.comm.allreduce(&buf, ReduceOp::Sum))?;
        let sum = reference::<u32>(ReduceOp::Sum, t.size, m);
        same(&what("allreduce"), &dev("read", buf.to_vec())?, &sum)?;

        let buf = host_buffer(t.ctx, &data::<f32>(t.rank, m))?;
        let root = t.size - 1;
        ok(&what("reduce"), t.comm.reduce(&buf, ReduceOp::Max, root))?;
        let want = if t.rank == root {
            reference::<f32>(ReduceOp::Max, t.size, m)
        } else {
            data::<f32>(t.rank, m)
        };
        same(&what("reduce"), &dev("read", buf.to_vec())?, &want)?;

        let buf = host_buffer(t.ctx, &data::<i64>(t.rank, m))?;
        ok(&what("broadcast"), t.comm.broadcast(&buf, 0))?;
        same(
            &what("broadcast"),
            &dev("read", buf.to_vec())?,
            &data::<i64>(0, m),
        )?;

        let send = host_buffer(t.ctx, &data::<u32>(t.rank, m))?;
        let recv = host_buffer(t.ctx, &vec![0u32; m * p])?;
        ok(&what("allgather"), t.comm.allgather(&send, &recv))?;
        let all: Vec<u32> = (0..t.size).flat_map(|k| data::<u32>(k, m)).collect();
        same(&what("allgather"), &dev("read", recv.to_vec())?, &all)?;

        // A host buffer in, a device buffer out.
        let send = host_buffer(t.ctx, &data::<f64>(t.rank, m * p))?;
        let recv = dev("create", t.ctx.enqueue_create_buffer::<f64>(m))?;
        ok(
            &what("reduce_scatter"),
            t.comm.reduce_scatter(&send, &recv, ReduceOp::Sum),
        )?;
        let all = reference::<f64>(ReduceOp::Sum, t.size, m * p);
        same(
            &what("reduce_scatter"),
            &dev("read", recv.to_vec())?,
            &all[r * m..(r + 1) * m],
        )?;
    }
    Ok(())
}
