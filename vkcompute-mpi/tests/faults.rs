//! Ranks that stop taking part: under real MPI (Open MPI's `mpirun`, 3
//! ranks on localhost, lavapipe), the others fail within a bounded time
//! instead of hanging.
//!
//! Run by `cargo test` (harness = false): started without MPI, the program
//! launches itself once per case with `mpirun --oversubscribe -np 3` and
//! `VKCOMPUTE_MPI_FAULT=<case>`, checks how the job ended and how long it
//! took, and fails if any case did not end as it should:
//!
//! - `stall`: rank 1 sleeps instead of joining an allreduce; ranks 0 and 2
//!   (timeout 1 s) get `Error::Timeout` after 1 to 4 s, and then
//!   `Error::Broken` at once from every later call (a collective, or a
//!   point-to-point call: blocking or not, without a timeout); every rank
//!   exits 0.
//! - `die`: rank 1 exits (without `MPI_Finalize`) while the ranks run
//!   allreduces back to back; `mpirun` ends the job with a failure within
//!   10 s of the exit (Open MPI terminates the other ranks).
//! - `die-recovery`: the same under `mpirun --enable-recovery`, which
//!   leaves the other ranks running: ranks 0 and 2 (timeout 2 s) each
//!   return an error (`Timeout`, or MPI's own error for the dead peer) or
//!   abort the job (a cancelled send that MPI does not give back), and the
//!   job ends within 10 s of rank 1's exit.
//! - `broken`: a communicator on the same-node path that a timeout broke
//!   must refuse (`Error::Broken`) before it writes the memory its peers
//!   read. Rank 0 (timeout 50 ms) broadcasts while the others sleep (its
//!   header exchange times out and is left to MPI), then broadcasts 3s on
//!   the broken communicator; the others join the first broadcast late
//!   (their header exchange meets rank 0's abandoned one), copy rank 0's
//!   memory and time out in the closing barrier: they must not hold 3s.
//!   The same for a blocking send from rank 0 to rank 1 (its first send
//!   times out waiting for the answer, its second must not overwrite the
//!   memory rank 1 then copies the first out of). Every rank exits 0.
//! - `reduce-pair`: a reduce of two ranks in pieces (a communicator of
//!   ranks 0 and 1 over MPI, 16 MiB: point-to-point pieces to the root)
//!   whose root times out waiting for a piece must return, not abort the
//!   job: rank 1 joins, but its device is busy for about 4 s (fills of its
//!   buffer enqueued first), so its first piece is late. Rank 0 (timeout
//!   1 s) gets `Error::Timeout` naming `MPI_Irecv` after 1 to 4 s, then
//!   `Error::Broken`, and says so before rank 1 sends; rank 1 then ends
//!   as MPI allows (its sends are never taken: a timeout, or the job
//!   aborted where MPI cannot cancel them), which this case accepts.
//! - `notes`: a receive of a message written in pieces on the same-node
//!   path does not hold up the receiver's other calls while the pieces
//!   are late: rank 1's device is busy for about 3 s (fills of its buffer
//!   enqueued first), then it sends 16 MiB to rank 0 (the header goes out
//!   at once, a note after each piece); rank 2 sends rank 0 a small
//!   message after 0.5 s. Rank 0 (timeout 10 s) posts the `irecv` of rank
//!   1's message, then a `recv` of rank 2's, which must return within
//!   1 s (its waits move the `irecv` on without waiting for the notes),
//!   then waits for the `irecv`, whose data must be rank 1's; every rank
//!   exits 0.
//! - `dup`: after a timeout, a new communicator's duplication is bounded.
//!   Rank 0 (timeout 200 ms) times out in a receive nobody sends to, then
//!   makes a new `Communicator` of the world, which the others never do
//!   (they wait for rank 0's word, as a hang in Open MPI's `MPI_Comm_dup`
//!   after a timeout would leave it): rank 0 gets `Error::Timeout` after
//!   5 to 8 s (the bound after a timeout is the longest timeout that
//!   passed, at least 5 s) instead of waiting for ever; every rank exits 0.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    missing_docs,
    reason = "a test program: a failure fails the test"
)]

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use vkcompute::{ContextOptions, DeviceBuffer, DeviceContext};
use vkcompute_mpi::{Communicator, Error, Path, ReduceOp, SameNodePolicy};

const RANKS: &str = "3";

fn main() -> ExitCode {
    match std::env::var("VKCOMPUTE_MPI_FAULT") {
        Ok(case) => rank_main(&case),
        Err(_) => launch(),
    }
}

/// Seconds since the epoch, which every rank and the launcher share.
fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs_f64()
}

/// The time rank 1 printed as its exit, in `output`.
fn exit_time(output: &str) -> Option<f64> {
    output
        .lines()
        .find_map(|l| l.strip_prefix("FAULT rank 1 exits at "))
        .and_then(|t| t.trim().parse().ok())
}

fn launch() -> ExitCode {
    let exe = std::env::current_exe().unwrap();
    let mut failed = Vec::new();
    for case in [
        "stall",
        "die",
        "die-recovery",
        "broken",
        "reduce-pair",
        "notes",
        "dup",
    ] {
        let mut args = vec!["--oversubscribe", "--timeout", "60", "-np", RANKS];
        if case == "die-recovery" {
            args.insert(0, "--enable-recovery");
        }
        eprintln!("== mpirun {} {} ({case})", args.join(" "), exe.display());
        let start = Instant::now();
        let out = Command::new("mpirun")
            .args(&args)
            .arg(&exe)
            .env("VKCOMPUTE_MPI_FAULT", case)
            .env("OMPI_ALLOW_RUN_AS_ROOT", "1")
            .env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")
            .output()
            .expect("mpirun runs (run `make setup`, which installs Open MPI)");
        let (ended, took) = (now(), start.elapsed());
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        let fault_lines: Vec<&str> = text.lines().filter(|l| l.starts_with("FAULT")).collect();
        for l in &fault_lines {
            eprintln!("  {l}");
        }
        let verdict = match case {
            "broken" | "dup" | "notes" => {
                let ok = fault_lines.iter().filter(|l| l.contains(" ok: ")).count();
                if !out.status.success() {
                    Err(format!("the job failed ({})", out.status))
                } else if ok.to_string() != RANKS {
                    Err(format!("{ok} ranks reported success, {RANKS} were due"))
                } else {
                    Ok(())
                }
            }
            "reduce-pair" => {
                let root_ok = fault_lines
                    .iter()
                    .any(|l| l.starts_with("FAULT rank 0 ok: "));
                let early = fault_lines.iter().any(|l| l.contains("FAILED"));
                if early || !root_ok {
                    Err("rank 0 did not report its timeout and Broken".into())
                } else if took > Duration::from_secs(30) {
                    Err(format!("the job took {:.1} s", took.as_secs_f64()))
                } else {
                    Ok(())
                }
            }
            "stall" => {
                let timeouts = fault_lines
                    .iter()
                    .filter(|l| l.contains("ok: timeout"))
                    .count();
                if !out.status.success() {
                    Err(format!("the job failed ({})", out.status))
                } else if timeouts != 2 {
                    Err(format!("{timeouts} ranks reported the timeout, 2 were due"))
                } else {
                    Ok(())
                }
            }
            _ => match exit_time(&text) {
                None => Err("rank 1 did not report its exit".into()),
                Some(died) => {
                    let after = ended - died;
                    eprintln!(
                        "  the job ended {after:.2} s after rank 1 exited ({:.1} s in all, {})",
                        took.as_secs_f64(),
                        out.status
                    );
                    let reported = fault_lines
                        .iter()
                        .filter(|l| l.contains("ok: error"))
                        .count();
                    // A survivor whose cancelled send MPI could not give
                    // back aborts the job instead of returning.
                    let aborted = text.contains("so the job is aborted (MPI_Abort)");
                    let early = fault_lines.iter().any(|l| l.contains("FAILED"));
                    if early {
                        Err("a rank reported a failure".into())
                    } else if case == "die" && out.status.success() {
                        Err("the job succeeded although a rank died".into())
                    } else if after > 10.0 {
                        Err(format!("the job took {after:.1} s to end after the death"))
                    } else if case == "die-recovery" && reported < 2 && !aborted {
                        Err(format!(
                            "{reported} ranks reported an error and none aborted the job; 2 were due"
                        ))
                    } else {
                        Ok(())
                    }
                }
            },
        };
        if let Err(e) = verdict {
            eprintln!("== {case}: FAILED: {e}\n{text}");
            failed.push(case);
        } else {
            eprintln!("== {case}: passed");
        }
    }
    if failed.is_empty() {
        ExitCode::SUCCESS
    } else {
        eprintln!("faults: failed: {}", failed.join(", "));
        ExitCode::FAILURE
    }
}

fn rank_main(case: &str) -> ExitCode {
    let universe = mpi::initialize().expect("MPI initialises once");
    let ctx = DeviceContext::with_options(ContextOptions::new().pipeline_cache_dir(None))
        .expect("a lavapipe context");
    let comm = Communicator::new(&universe.world(), &ctx).expect("a communicator");
    let rank = comm.rank();
    let buf = ctx.enqueue_create_buffer::<f32>(1 << 22).unwrap();
    buf.enqueue_fill(1.0).unwrap();
    let result = match case {
        "stall" => stall(&comm, &buf),
        "reduce-pair" => reduce_pair(&universe.world(), &ctx),
        "notes" => notes(&universe.world(), &ctx),
        "dup" => dup_after_timeout(&universe.world(), &ctx, &comm),
        "broken" => {
            let world = universe.world();
            match (broken_collective(&world, &ctx), broken_send(&world, &ctx)) {
                (Ok(a), Ok(b)) => Ok(format!("{a}; {b}")),
                (a, b) => Err(format!("{a:?}; {b:?}")),
            }
        }
        _ => die(&comm, &buf),
    };
    match result {
        Ok(line) => {
            println!("FAULT rank {rank} ok: {line}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            println!("FAULT rank {rank} FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn stall(comm: &Communicator, buf: &vkcompute::DeviceBuffer<f32>) -> Result<String, String> {
    if comm.rank() == 1 {
        std::thread::sleep(Duration::from_secs(5));
        return Ok("slept instead of joining".into());
    }
    comm.set_timeout(Some(Duration::from_secs(1)));
    let start = Instant::now();
    let first = comm.allreduce(buf, ReduceOp::Sum);
    let took = start.elapsed().as_secs_f64();
    match first {
        Err(Error::Timeout { .. }) if (1.0..4.0).contains(&took) => {}
        other => return Err(format!("the allreduce gave {other:?} after {took:.2} s")),
    }
    // Every later call is refused at once, the timeout cleared or not
    // (a point-to-point call once waited out a whole timeout, or for ever
    // without one).
    comm.set_timeout(None);
    let peer = 2 - comm.rank();
    let small = &buf.create_sub_buffer::<f32>(0, 16).unwrap();
    let calls: [(&str, &dyn Fn() -> vkcompute_mpi::Result<()>); 5] = [
        ("barrier", &|| comm.barrier()),
        ("recv", &|| comm.recv(small, peer, 9)),
        ("send", &|| comm.send(small, peer, 9)),
        ("isend", &|| comm.isend(small, peer, 9).map(drop)),
        ("irecv", &|| comm.irecv(small, peer, 9).map(drop)),
    ];
    for (what, call) in calls {
        let start = Instant::now();
        match call() {
            Err(Error::Broken { .. }) if start.elapsed() < Duration::from_millis(100) => {}
            other => return Err(format!("{what} after the timeout gave {other:?}")),
        }
    }
    Ok(format!("timeout after {took:.2} s, then Broken at once"))
}

/// Keeps the device busy for about `seconds` with fills of `buf`
/// (enqueued, not waited for), so that later work on it waits behind
/// them; the fills' count comes from timing a few.
fn busy_with_fills(ctx: &DeviceContext, buf: &DeviceBuffer<f32>, seconds: f64) -> usize {
    // The first fill also maps the memory in: timed apart. The fastest of
    // three batches, so that a loaded machine makes the wait longer, not
    // shorter.
    buf.enqueue_fill(1.0).unwrap();
    ctx.synchronize().unwrap();
    let mut each = f64::MAX;
    for _ in 0..3 {
        let start = Instant::now();
        for v in 0..16 {
            buf.enqueue_fill(v as f32).unwrap();
        }
        ctx.synchronize().unwrap();
        each = each.min(start.elapsed().as_secs_f64() / 16.0);
    }
    let count = (seconds / each.max(1e-6)).ceil() as usize;
    for v in 0..count {
        buf.enqueue_fill(v as f32).unwrap();
    }
    ctx.flush().unwrap();
    count
}

/// The `reduce-pair` case (see the file's documentation).
fn reduce_pair(
    world: &mpi::topology::SimpleCommunicator,
    ctx: &DeviceContext,
) -> Result<String, String> {
    use mpi::topology::Color;
    use mpi::traits::Communicator as _;
    let color = match world.rank() {
        0 | 1 => Color::with_value(0),
        _ => Color::undefined(),
    };
    let Some(pair) = world.split_by_color(color) else {
        return Ok("not in the pair".into());
    };
    let c = Communicator::with_same_node(&pair, ctx, SameNodePolicy::Off)
        .map_err(|e| format!("a communicator of two ranks: {e}"))?;
    // Chunks of 8 MiB: MPI's reduce in pieces (of 4 MiB).
    let buf = ctx.enqueue_create_buffer::<f32>((1 << 22) + 1000).unwrap();
    c.set_timeout(Some(Duration::from_secs(1)));
    if c.rank() == 1 {
        let fills = busy_with_fills(ctx, &buf, 4.0);
        let start = Instant::now();
        let late = c.reduce(&buf, ReduceOp::Sum, 0);
        let took = start.elapsed().as_secs_f64();
        return Ok(format!(
            "the late rank's reduce behind {fills} fills: {late:?} after {took:.2} s"
        ));
    }
    buf.enqueue_fill(1.0).unwrap();
    let start = Instant::now();
    let first = c.reduce(&buf, ReduceOp::Sum, 0);
    let took = start.elapsed().as_secs_f64();
    match first {
        Err(Error::Timeout {
            call: "MPI_Irecv", ..
        }) if (1.0..4.0).contains(&took) => {}
        other => return Err(format!("the reduce gave {other:?} after {took:.2} s")),
    }
    match c.barrier() {
        Err(Error::Broken { .. }) => {}
        other => return Err(format!("a barrier after the timeout gave {other:?}")),
    }
    Ok(format!(
        "reduce: timeout in MPI_Irecv after {took:.2} s, then Broken"
    ))
}

/// The `notes` case (see the file's documentation).
fn notes(world: &mpi::topology::SimpleCommunicator, ctx: &DeviceContext) -> Result<String, String> {
    let c = Communicator::with_same_node(world, ctx, SameNodePolicy::Always)
        .map_err(|e| format!("a communicator on the same-node path: {e}"))?;
    let peers: &[i32] = if c.rank() == 0 { &[1, 2] } else { &[0] };
    if !peers
        .iter()
        .all(|&p| matches!(c.path_to(p), Ok(Path::SameNode)))
    {
        return Err("a pair does not take the same-node path".into());
    }
    let len = 1 << 22;
    let big = ctx.enqueue_create_buffer::<f32>(len).unwrap();
    let small = ctx.enqueue_create_buffer::<u32>(1024).unwrap();
    small.enqueue_fill(2).unwrap();
    match c.rank() {
        1 => {
            let fills = busy_with_fills(ctx, &big, 3.0);
            big.enqueue_fill(7.0).unwrap();
            let start = Instant::now();
            c.send(&big, 0, 5)
                .map_err(|e| format!("the send in pieces: {e}"))?;
            let took = start.elapsed().as_secs_f64();
            Ok(format!("sent 16 MiB behind {fills} fills in {took:.2} s"))
        }
        2 => {
            std::thread::sleep(Duration::from_millis(500));
            c.send(&small, 0, 7)
                .map_err(|e| format!("the small send: {e}"))?;
            Ok("sent the small message".into())
        }
        _ => {
            c.set_timeout(Some(Duration::from_secs(10)));
            big.enqueue_fill(0.0).unwrap();
            small.enqueue_fill(0).unwrap();
            let pending = c.irecv(&big, 1, 5).map_err(|e| format!("irecv: {e}"))?;
            let start = Instant::now();
            c.recv(&small, 2, 7).map_err(|e| format!("recv: {e}"))?;
            let first = start.elapsed().as_secs_f64();
            if first >= 1.0 {
                return Err(format!("the recv from rank 2 took {first:.2} s"));
            }
            pending.wait().map_err(|e| format!("the irecv: {e}"))?;
            let all = start.elapsed().as_secs_f64();
            let got = big.to_vec().unwrap();
            if got.iter().any(|&v| v != 7.0) || small.to_vec().unwrap() != vec![2; 1024] {
                return Err("the data is not what was sent".into());
            }
            Ok(format!(
                "recv from rank 2 in {first:.2} s, the irecv in pieces in {all:.2} s"
            ))
        }
    }
}

fn die(comm: &Communicator, buf: &vkcompute::DeviceBuffer<f32>) -> Result<String, String> {
    comm.set_timeout(Some(Duration::from_secs(2)));
    if comm.rank() == 1 {
        std::thread::spawn(|| {
            std::thread::sleep(Duration::from_millis(700));
            println!("FAULT rank 1 exits at {:.3}", now());
            std::process::exit(3);
        });
    }
    let start = Instant::now();
    loop {
        if let Err(e) = comm.allreduce(buf, ReduceOp::Sum) {
            let after = start.elapsed().as_secs_f64();
            return Ok(format!("error after {after:.2} s: {e}"));
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err("allreduces still succeed 30 s after the death".into());
        }
    }
}

/// A new communicator of the world with the same-node path asked for.
fn on_the_path(
    world: &mpi::topology::SimpleCommunicator,
    ctx: &DeviceContext,
) -> Result<Communicator, String> {
    Communicator::with_same_node(world, ctx, SameNodePolicy::Always)
        .map_err(|e| format!("a communicator on the same-node path: {e}"))
}

/// 1024 elements of `v`.
fn filled(ctx: &DeviceContext, v: u32) -> DeviceBuffer<u32> {
    let buf = ctx.enqueue_create_buffer::<u32>(1024).unwrap();
    buf.enqueue_fill(v).unwrap();
    buf
}

/// The `broken` case's broadcast (see the file's documentation).
fn broken_collective(
    world: &mpi::topology::SimpleCommunicator,
    ctx: &DeviceContext,
) -> Result<String, String> {
    let c = on_the_path(world, ctx)?;
    if c.collective_path() != Path::SameNode {
        return Err(format!("the collectives take {:?}", c.collective_path()));
    }
    // The shared memory made and announced, so that the later broadcasts
    // reuse it.
    let warm = filled(ctx, u32::from(c.rank() == 0));
    c.broadcast(&warm, 0)
        .map_err(|e| format!("first broadcast: {e}"))?;
    if c.rank() == 0 {
        c.set_timeout(Some(Duration::from_millis(50)));
        match c.broadcast(&filled(ctx, 2), 0) {
            Err(Error::Timeout { .. }) => {}
            other => return Err(format!("a broadcast nobody joins: {other:?}")),
        }
        return match c.broadcast(&filled(ctx, 3), 0) {
            Err(Error::Broken { .. }) => Ok("broadcast: Timeout, then Broken".into()),
            other => Err(format!("a broadcast after the timeout: {other:?}")),
        };
    }
    std::thread::sleep(Duration::from_millis(400));
    c.set_timeout(Some(Duration::from_millis(300)));
    let buf = filled(ctx, 0);
    let result = c.broadcast(&buf, 0);
    if buf.to_vec().unwrap().contains(&3) {
        return Err(format!(
            "joining rank 0's abandoned broadcast ({result:?}) copied 3s, written by a \
             broadcast rank 0 made after its communicator broke"
        ));
    }
    match result {
        Err(Error::Timeout { .. }) => Ok("late broadcast: no 3s, Timeout".into()),
        other => Err(format!("joining rank 0's abandoned broadcast: {other:?}")),
    }
}

/// The `broken` case's send (see the file's documentation).
fn broken_send(
    world: &mpi::topology::SimpleCommunicator,
    ctx: &DeviceContext,
) -> Result<String, String> {
    let c = on_the_path(world, ctx)?;
    if c.rank() > 1 {
        return Ok("no send".into());
    }
    let path = c.path_to(1 - c.rank()).map_err(|e| e.to_string())?;
    if path != Path::SameNode {
        return Err(format!("ranks 0 and 1 take {path:?}"));
    }
    // The shared memory of the pair made and announced.
    let warm = filled(ctx, 1);
    if c.rank() == 0 {
        c.send(&warm, 1, 3)
            .map_err(|e| format!("first send: {e}"))?;
        c.set_timeout(Some(Duration::from_millis(50)));
        match c.send(&filled(ctx, 2), 1, 3) {
            Err(Error::Timeout { .. }) => {}
            other => return Err(format!("a send nobody receives yet: {other:?}")),
        }
        return match c.send(&filled(ctx, 3), 1, 3) {
            Err(Error::Broken { .. }) => Ok("send: Timeout, then Broken".into()),
            other => Err(format!("a send after the timeout: {other:?}")),
        };
    }
    c.recv(&warm, 0, 3)
        .map_err(|e| format!("first recv: {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    c.set_timeout(Some(Duration::from_millis(300)));
    let buf = filled(ctx, 0);
    let result = c.recv(&buf, 0, 3);
    if buf.to_vec().unwrap().contains(&3) {
        return Err(format!(
            "the recv of rank 0's message ({result:?}) holds 3s, from a send rank 0 made \
             after its communicator broke"
        ));
    }
    Ok(format!("late recv: no 3s ({result:?})"))
}

/// The `dup` case (see the file's documentation).
fn dup_after_timeout(
    world: &mpi::topology::SimpleCommunicator,
    ctx: &DeviceContext,
    comm: &Communicator,
) -> Result<String, String> {
    use mpi::traits::{Communicator as _, Destination as _, Source as _};
    if comm.rank() != 0 {
        // Rank 0's word that it is done, over the world (the crate's
        // communicators keep to their own duplicates).
        let (word, _) = world.process_at_rank(0).receive::<u32>();
        return Ok(format!("waited for rank 0 ({word})"));
    }
    comm.set_timeout(Some(Duration::from_millis(200)));
    let buf = filled(ctx, 0);
    match comm.recv(&buf, 1, 5) {
        Err(Error::Timeout { .. }) => {}
        other => return Err(format!("a receive nobody sends to: {other:?}")),
    }
    let start = Instant::now();
    let made = Communicator::new(world, ctx);
    let took = start.elapsed().as_secs_f64();
    for peer in 1..world.size() {
        world.process_at_rank(peer).send(&1u32);
    }
    match made {
        Err(Error::Timeout { call, .. }) if (5.0..8.0).contains(&took) => Ok(format!(
            "a new communicator nobody else makes: Timeout ({call}) after {took:.2} s"
        )),
        other => Err(format!(
            "a new communicator nobody else makes gave {:?} after {took:.2} s",
            other.map(|c| c.rank())
        )),
    }
}
