//! A safe program may exit at any point (issue 34): futures, events,
//! mappings and streams still pending when `main` returns or
//! `std::process::exit` is called neither crash nor hang the process,
//! with the validation layer and without it. Each case runs in a child
//! process (this test binary, `exit_child`) on eight streams, whose exit
//! status must be 0 within a minute. The child registers an exit handler
//! of its own first, which takes 50 ms (as one that flushes a log
//! might): it runs after the layer's and the driver's, while the other
//! threads go on.
//!
//! Before the fix (vkcompute's exit gate, `src/vk/exit.rs`), 36 of 56
//! exits under the layer crashed (every future case, most blocked waits;
//! without the child's handler, 4-27% of the future cases), and none
//! without the layer. `VKCOMPUTE_EXIT_RUNS` sets the runs of each case
//! (default 2: 32 exits with the layer and 32 without; 63 gives the
//! 1,008 of CONTRIBUTING's long run).
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use std::future::Future;
use std::process::{Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Wake, Waker};
use std::time::{Duration, Instant};

use vkcompute::{ContextOptions, DeviceBuffer, DeviceContext};

/// What a child leaves pending when it exits.
const WHAT: [&str; 8] = [
    "event_future",
    "dropped_future",
    "read_future",
    "map_future",
    "mapping",
    "event_wait",
    "synchronize",
    "stream",
];
/// Streams with a future pending, in the future cases.
const STREAMS: usize = 8;
/// How a child exits: `std::process::exit`, or its `main` returns.
const HOW: [&str; 2] = ["exit", "return"];

/// Runs of each case.
fn runs() -> usize {
    std::env::var("VKCOMPUTE_EXIT_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2)
}

/// Runs one child: `Ok` if it exited with status 0 within the limit.
fn run_child(what: &str, how: &str, layer: bool) -> Result<(), String> {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "exit_child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("VKCOMPUTE_EXIT_CHILD", format!("{what},{how}"))
        .env("VKCOMPUTE_EXIT_LAYER", if layer { "1" } else { "0" })
        // With the layer, any message aborts the child.
        .env("VKCOMPUTE_VALIDATION", if layer { "abort" } else { "0" })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if started.elapsed() > Duration::from_secs(60) {
            child.kill().unwrap();
            let _ = child.wait();
            return Err("hung: killed after 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let out = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !status.success() {
        return Err(format!(
            "exited with {status:?}\nstdout:\n{stdout}\nstderr:\n{}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if !stdout.contains("child: pending") {
        return Err(format!("nothing was pending at the exit:\n{stdout}"));
    }
    Ok(())
}

fn run_cases(layer: bool) {
    let runs = runs();
    let mut failures = Vec::new();
    let mut total = 0;
    for what in WHAT {
        for how in HOW {
            for run in 0..runs {
                total += 1;
                if let Err(e) = run_child(what, how, layer) {
                    failures.push(format!("{what}, {how}, run {run}: {e}"));
                }
            }
        }
    }
    println!(
        "{} of {total} exits clean (layer {})",
        total - failures.len(),
        if layer { "on" } else { "off" }
    );
    assert!(
        failures.is_empty(),
        "{} of {total} exits failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

#[test]
fn exits_with_work_pending_under_the_validation_layer_are_clean() {
    run_cases(true);
}

#[test]
fn exits_with_work_pending_without_the_layer_are_clean() {
    run_cases(false);
}

/// Work that keeps the stream busy for a while (tens of milliseconds on
/// lavapipe): 32 fills of 16 MiB.
fn keep_busy(ctx: &DeviceContext) -> DeviceBuffer<u32> {
    let data = ctx.enqueue_create_buffer::<u32>(1 << 22).unwrap();
    for i in 0..32 {
        data.enqueue_fill(i).unwrap();
    }
    data
}

/// An exit handler of the program's own that takes a while (as one that
/// flushes a log might): registered before any device exists, it runs
/// after the layer's and the driver's handlers, and holds the process in
/// its exit for 50 ms while other threads go on.
extern "C" fn slow_exit_handler() {
    std::thread::sleep(Duration::from_millis(50));
}

/// A waker that does nothing.
struct Noop;

impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

/// Polls `f` once with a waker that does nothing, and leaves it pending
/// for ever (never dropped).
fn poll_and_keep<F: Future + 'static>(f: F) -> bool {
    let f = Box::leak(Box::new(Box::pin(f)));
    let waker = Waker::from(Arc::new(Noop));
    f.as_mut()
        .poll(&mut Context::from_waker(&waker))
        .is_pending()
}

#[test]
#[ignore = "run by the exits_with_work_pending tests"]
fn exit_child() {
    let Ok(case) = std::env::var("VKCOMPUTE_EXIT_CHILD") else {
        return;
    };
    let (what, how) = case.split_once(',').unwrap();
    let layer = std::env::var("VKCOMPUTE_EXIT_LAYER").as_deref() == Ok("1");
    // SAFETY: a plain C-ABI function, valid for the whole process.
    assert_eq!(unsafe { libc::atexit(slow_exit_handler) }, 0);
    // Never dropped: a context kept for the whole program.
    static CTX: OnceLock<DeviceContext> = OnceLock::new();
    let ctx = CTX.get_or_init(|| {
        let ctx = DeviceContext::with_options(ContextOptions::new().pipeline_cache_dir(None));
        let ctx = ctx.unwrap();
        assert_eq!(ctx.diagnostics().is_validation_enabled(), layer);
        ctx
    });
    if what == "mapping" {
        // A mapping alive at the exit (of a buffer whose work is done),
        // while the streams' work is pending.
        let mapped: &'static DeviceBuffer<u32> =
            Box::leak(Box::new(ctx.enqueue_create_buffer::<u32>(1024).unwrap()));
        mapped.enqueue_fill(5).unwrap();
        let mut mapping = mapped.map_to_host().unwrap();
        mapping[0] = 6;
        std::mem::forget(mapping);
    }
    // The case on several streams: a waiter thread or a blocked thread
    // each.
    let streams: Vec<&'static DeviceContext> = (0..STREAMS)
        .map(|_| &*Box::leak(Box::new(ctx.new_stream().unwrap())))
        .collect();
    let started = streams.iter().all(|&s| {
        let busy = || -> &'static DeviceBuffer<u32> { Box::leak(Box::new(keep_busy(s))) };
        match what {
            "event_future" => {
                busy();
                poll_and_keep(s.enqueue_record_event().unwrap())
            }
            "dropped_future" => {
                // Polled, then dropped before it resolved: the waiter
                // thread lets it go within 20 ms, while the work runs on.
                busy();
                let mut f = Box::pin(s.enqueue_record_event().unwrap());
                let waker = Waker::from(Arc::new(Noop));
                let pending = f
                    .as_mut()
                    .poll(&mut Context::from_waker(&waker))
                    .is_pending();
                drop(f);
                pending
            }
            "read_future" => poll_and_keep(busy().to_vec_async()),
            "map_future" => poll_and_keep(busy().map_to_host_async()),
            "mapping" => {
                // Mapped above, before any work was pending.
                busy();
                s.flush().unwrap();
                true
            }
            "event_wait" => {
                // A thread blocked in `Event::wait`.
                busy();
                let event = s.enqueue_record_event().unwrap();
                // Submitted here: the thread only waits.
                s.flush().unwrap();
                std::thread::spawn(move || event.wait());
                true
            }
            "synchronize" => {
                // A thread blocked in `synchronize`.
                busy();
                s.flush().unwrap();
                std::thread::spawn(|| s.synchronize());
                true
            }
            "stream" => {
                busy();
                s.flush().unwrap();
                true
            }
            other => panic!("unknown case {other}"),
        }
    });
    // The threads are in their waits, and the last stream's work is not
    // done.
    std::thread::sleep(Duration::from_millis(2));
    let tail = streams[STREAMS - 1].enqueue_record_event().unwrap();
    let pending = started && !tail.is_complete().unwrap();
    println!("child: {}", if pending { "pending" } else { "ready" });
    if how == "exit" {
        std::process::exit(0);
    }
    // Returns: the harness's `main` returns and the process exits.
}
