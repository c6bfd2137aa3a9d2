//! The benchmark suite of `/work/shared/BENCH.md`: host-memory reference
//! figures and the runtime's copies, fills, kernels, mapping and
//! allocation, measured in one process on the selected device.
//!
//!     cargo run --release --example bench -- [--json] [--quick] [--staging] [--case NAME]
//!
//! - `--json`: one JSON object per line on stdout instead of a table.
//! - `--quick`: few repetitions (smoke test; every case still runs in full).
//! - `--staging`: a context with `force_staging(true)` (the path of a
//!   discrete GPU); the device string ends with ` [staging]`.
//! - `--case NAME`: run one case only.
//!
//! Every case warms up (at least 2 runs), times `reps` repetitions with
//! `std::time::Instant` around each whole repetition (completion included)
//! and reports the median, min and max; its result is then checked once,
//! and a wrong result ends the run with a non-zero exit. Progress goes to
//! stderr, results to stdout.
//!
//! `saxpy_raw` and `dispatch_raw` dispatch the same kernels through a
//! minimal hand-written `ash` sequence (a command buffer recorded once, one
//! submit and one fence wait per repetition): the floor the runtime's own
//! overhead is measured against (in a full run `saxpy` and `saxpy_raw`
//! alternate their repetitions over the same buffers, so that neither gains
//! from drift in llvmpipe's speed). `increment` is `map_rw`'s loop alone, on a
//! 1 MiB `Vec<u32>` in host memory: the floor of `map_rw`. These three
//! cases are additions to BENCH.md's list.
//!
//! `first_dispatch` runs this program again as a fresh process
//! (`bench --first-dispatch-child DIR`) that opens the default device with
//! its pipeline cache in `DIR`, loads saxpy, runs it once on 1 Mi elements
//! and reads the result back; the time is from spawning the process to its
//! report of a checked result, with an empty cache directory
//! (`first_dispatch_cold`) and with one a previous run filled
//! (`first_dispatch_warm`).
//! cases are additions to BENCH.md's list, and so are `record_raw`,
//! `scale_buffers` and `scale_inflight` (issue 22's host-cost cases,
//! `bench_cases/host_cost.rs`). `d2d_cross` reports a second
//! row, `d2d_cross_host`: the same copy between plain buffers, which goes
//! through host memory (the fallback), against the copy into an exportable
//! buffer through shared memory.

use std::hint::black_box;
use std::io::Write;
use std::process::ExitCode;
use std::time::Instant;

#[path = "bench_cases/bounds.rs"]
mod bounds;
#[path = "bench_cases/host_cost.rs"]
mod host_cost;
#[path = "bench_cases/load.rs"]
mod load;
#[path = "bench_cases/printf.rs"]
mod printf;
#[path = "bench_cases/replay_params.rs"]
mod replay_params;
#[path = "bench_cases/trace_cost.rs"]
mod trace_cost;

use vkcompute::ash::{self, vk};
use vkcompute::{ContextOptions, DeviceBuffer, DeviceContext, Kernel, RawBufferRef};

type BenchResult<T> = Result<T, Box<dyn std::error::Error>>;

/// Every case, in the order they run and are reported.
const CASES: &[&str] = &[
    "memcpy",
    "upload",
    "download",
    "d2d",
    "fill",
    "small_ops",
    "roundtrip",
    "saxpy",
    "saxpy_raw",
    "dispatch",
    "dispatch_raw",
    "increment",
    "map_rw",
    "alloc",
    "launches",
    "launches_raw",
    "graph",
    "enqueue_cost",
    "record_raw",
    "scale_buffers",
    "scale_inflight",
    "replay_cost",
    "replay_with_cost",
    "trace_overhead",
    "first_dispatch",
    "d2d_cross",
    "bounds",
    "load",
    "printf",
];

/// The sizes of the transfer cases.
const SIZES: [usize; 3] = [4 << 10, 1 << 20, 64 << 20];

/// Timed repetitions of a transfer case of `bytes` in a full run.
fn sized_reps(bytes: usize) -> usize {
    match bytes {
        b if b <= 64 << 10 => 500,
        b if b <= 4 << 20 => 100,
        _ => 20,
    }
}

const USAGE: &str = "usage: bench [--json] [--quick] [--staging] [--case NAME]";

struct Options {
    json: bool,
    quick: bool,
    staging: bool,
    case: Option<String>,
}

fn parse_args() -> Result<Options, String> {
    let mut options = Options {
        json: false,
        quick: false,
        staging: false,
        case: None,
    };
    let mut args = std::env::args().skip(1);
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--json" => options.json = true,
            "--quick" => options.quick = true,
            "--staging" => options.staging = true,
            "--case" => {
                let name = args
                    .next()
                    .ok_or_else(|| format!("--case needs a name; cases: {}", CASES.join(", ")))?;
                options.case = Some(name);
            }
            "-h" | "--help" => {
                println!("{USAGE}\ncases: {}", CASES.join(", "));
                std::process::exit(0);
            }
            other => match other.strip_prefix("--case=") {
                Some(name) => options.case = Some(name.to_string()),
                None => return Err(format!("unknown argument `{other}`\n{USAGE}")),
            },
        }
    }
    if let Some(name) = &options.case {
        if !CASES.contains(&name.as_str()) {
            return Err(format!(
                "unknown case `{name}`; the cases are: {}",
                CASES.join(", ")
            ));
        }
    }
    Ok(options)
}

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    if args.next().as_deref() == Some(FIRST_DISPATCH_CHILD) {
        let Some(dir) = args.next() else {
            eprintln!("bench: {FIRST_DISPATCH_CHILD} needs a directory");
            return ExitCode::from(2);
        };
        return match first_dispatch_child(dir.into()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("bench: first_dispatch child: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let options = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&options) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("bench: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(options: &Options) -> BenchResult<()> {
    let start = Instant::now();
    let ctx = DeviceContext::with_options(ContextOptions::new().force_staging(options.staging))
        .map_err(|e| format!("opening the device: {e}"))?;
    let mut device = ctx.name().to_string();
    if options.staging {
        device.push_str(" [staging]");
    }
    let bench = Bench {
        ctx: &ctx,
        quick: options.quick,
        staging: options.staging,
        json: options.json,
        device,
        start,
    };
    bench.header();
    for &case in CASES {
        if options.case.as_deref().is_some_and(|c| c != case) {
            continue;
        }
        // In a full run `saxpy` times both saxpy cases, alternating their
        // repetitions, so that drift in the device's speed and the
        // placement of the buffers do not favour either.
        if case == "saxpy_raw" && options.case.is_none() {
            continue;
        }
        let case = if case == "saxpy" && options.case.is_none() {
            "saxpy_pair"
        } else {
            case
        };
        bench.run_case(case)?;
    }
    ctx.synchronize()?;
    eprintln!(
        "bench: done in {:.1} s{}",
        start.elapsed().as_secs_f64(),
        if options.quick { " (--quick)" } else { "" }
    );
    Ok(())
}

/// What a case's figure is, computed from the median time of one repetition.
#[derive(Clone, Copy)]
enum Figure {
    /// 10^9 bytes of payload per second, for this many bytes per repetition.
    GigabytesPerSecond(f64),
    /// Things per second, for this many things per repetition.
    PerSecond(f64, &'static str),
    /// The median time in microseconds.
    Microseconds,
    /// The median time in nanoseconds.
    Nanoseconds,
    /// The median time in milliseconds.
    Milliseconds,
    /// A ratio of two figures, given as the "median".
    Ratio,
}

impl Figure {
    fn value(self, median_s: f64) -> (f64, &'static str) {
        let t = median_s.max(1e-9);
        match self {
            Figure::GigabytesPerSecond(bytes) => (bytes / t / 1e9, "GB/s"),
            Figure::PerSecond(count, unit) => (count / t, unit),
            Figure::Microseconds => (t * 1e6, "us"),
            Figure::Nanoseconds => (t * 1e9, "ns"),
            Figure::Milliseconds => (t * 1e3, "ms"),
            Figure::Ratio => (median_s, "x"),
        }
    }
}

/// The timed repetitions of one case and size.
struct Timing {
    reps: usize,
    median: f64,
    min: f64,
    max: f64,
}

impl Timing {
    /// A ratio row: `ratio` given as the median (and min and max).
    fn ratio(ratio: f64, reps: usize) -> Timing {
        Timing {
            reps,
            median: ratio,
            min: ratio,
            max: ratio,
        }
    }

    /// The times of one of the `count` things each repetition did.
    fn per(&self, count: u32) -> Timing {
        let n = f64::from(count);
        Timing {
            reps: self.reps,
            median: self.median / n,
            min: self.min / n,
            max: self.max / n,
        }
    }
}

/// `count` dispatches of the launch cases' kernel on `buf`, enqueued one by
/// one (no wait).
fn enqueue_launches(
    ctx: &DeviceContext,
    kernel: &Kernel,
    buf: &DeviceBuffer<u32>,
    count: u32,
) -> BenchResult<()> {
    for _ in 0..count {
        ctx.enqueue_function(kernel, 1u32, &[buf.arg()], &LAUNCH_LEN)?;
    }
    Ok(())
}

struct Bench<'a> {
    ctx: &'a DeviceContext,
    quick: bool,
    /// Whether `ctx` forces staging (`--staging`).
    staging: bool,
    json: bool,
    device: String,
    start: Instant,
}

impl Bench<'_> {
    fn run_case(&self, case: &str) -> BenchResult<()> {
        let result = match case {
            "memcpy" => SIZES.iter().try_for_each(|&s| self.memcpy(s)),
            "upload" => SIZES.iter().try_for_each(|&s| self.upload(s)),
            "download" => SIZES.iter().try_for_each(|&s| self.download(s)),
            "d2d" => SIZES.iter().try_for_each(|&s| self.d2d(s)),
            "fill" => SIZES.iter().try_for_each(|&s| self.fill(s)),
            "small_ops" => self.small_ops(),
            "roundtrip" => self.roundtrip(),
            "saxpy" => self.saxpy(true, false),
            "saxpy_raw" => self.saxpy(false, true),
            "saxpy_pair" => self.saxpy(true, true),
            "dispatch" => self.dispatch(),
            "dispatch_raw" => self.dispatch_raw(),
            "increment" => self.increment(),
            "map_rw" => self.map_rw(),
            "alloc" => self.alloc(),
            "launches" => self.launches(),
            "launches_raw" => self.launches_raw(),
            "graph" => self.graph(),
            "enqueue_cost" => self.enqueue_cost(),
            "record_raw" => self.record_raw(),
            "scale_buffers" => self.scale_buffers(),
            "scale_inflight" => self.scale_inflight(),
            "replay_cost" => self.replay_cost(),
            "replay_with_cost" => self.replay_with_cost(),
            "trace_overhead" => self.trace_overhead(),
            "first_dispatch" => self.first_dispatch(),
            "d2d_cross" => self.d2d_cross(),
            "bounds" => self.bounds(),
            "load" => self.load(),
            "printf" => self.printf(),
            other => Err(format!("no case `{other}`").into()),
        };
        result.map_err(|e| format!("case `{case}`: {e}").into())
    }

    /// The repetitions to time: `full` in a full run, 3 with `--quick`.
    fn reps(&self, full: usize) -> usize {
        if self.quick {
            full.min(3)
        } else {
            full
        }
    }

    /// Warm-up runs before `reps` timed ones: at least 2.
    fn warmups(&self, reps: usize) -> usize {
        if self.quick {
            2
        } else {
            (reps / 10).clamp(2, 20)
        }
    }

    /// Runs `f` for the warm-ups, then times `reps` repetitions of it.
    fn time(
        &self,
        case: &str,
        bytes: usize,
        warmups: usize,
        reps: usize,
        mut f: impl FnMut() -> BenchResult<()>,
    ) -> BenchResult<Timing> {
        eprintln!(
            "bench: [{:7.1} s] {case} {}: {warmups} warm-up + {reps} timed",
            self.start.elapsed().as_secs_f64(),
            human_size(bytes as u64),
        );
        for _ in 0..warmups {
            f()?;
        }
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = Instant::now();
            f()?;
            times.push(t0.elapsed().as_secs_f64());
        }
        summarize(times)
    }

    /// Like [`time`](Self::time) for two cases at once: warm-ups of both,
    /// then their repetitions in turn (a, b, a, b...).
    #[allow(clippy::too_many_arguments)]
    fn time_pair(
        &self,
        cases: [&str; 2],
        bytes: usize,
        warmups: usize,
        reps: usize,
        mut a: impl FnMut() -> BenchResult<()>,
        mut b: impl FnMut() -> BenchResult<()>,
    ) -> BenchResult<(Timing, Timing)> {
        eprintln!(
            "bench: [{:7.1} s] {} and {} {}, alternating: {warmups} warm-up + {reps} timed each",
            self.start.elapsed().as_secs_f64(),
            cases[0],
            cases[1],
            human_size(bytes as u64),
        );
        for _ in 0..warmups {
            a()?;
            b()?;
        }
        let (mut ta, mut tb) = (Vec::with_capacity(reps), Vec::with_capacity(reps));
        for _ in 0..reps {
            let t0 = Instant::now();
            a()?;
            ta.push(t0.elapsed().as_secs_f64());
            let t0 = Instant::now();
            b()?;
            tb.push(t0.elapsed().as_secs_f64());
        }
        Ok((summarize(ta)?, summarize(tb)?))
    }
}

impl Bench<'_> {
    fn header(&self) {
        if self.json {
            return;
        }
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "device: {}", self.device);
        let _ = writeln!(
            out,
            "{:<13} {:>8} {:>5} {:>11} {:>11} {:>11} {:>12}  unit",
            "case", "size", "reps", "median", "min", "max", "value"
        );
        let _ = out.flush();
    }

    /// Prints one result (after its check passed).
    fn report(&self, case: &str, bytes: usize, t: &Timing, figure: Figure) {
        self.report_with(case, bytes, t, figure, &[]);
    }

    /// Prints one result with `extra` fields after the standard ones (in
    /// JSON, each value as written: a number or `true`/`false`).
    fn report_with(
        &self,
        case: &str,
        bytes: usize,
        t: &Timing,
        figure: Figure,
        extra: &[(&str, String)],
    ) {
        let (value, unit) = figure.value(t.median);
        // A ratio row has no times of its own.
        let ratio = matches!(figure, Figure::Ratio);
        let times = if ratio {
            [0.0; 3]
        } else {
            [t.median, t.min, t.max]
        };
        let time = |s: f64| {
            if ratio {
                "-".to_string()
            } else {
                human_time(s)
            }
        };
        let mut out = std::io::stdout().lock();
        let _ = if self.json {
            writeln!(
                out,
                "{{\"case\":{},\"bytes\":{},\"reps\":{},\"median_s\":{},\"min_s\":{},\"max_s\":{},\"value\":{},\"unit\":{},\"device\":{}{}}}",
                json_string(case),
                bytes,
                t.reps,
                json_number(times[0]),
                json_number(times[1]),
                json_number(times[2]),
                json_number(value),
                json_string(unit),
                json_string(&self.device),
                extra
                    .iter()
                    .map(|(k, v)| format!(",{}:{v}", json_string(k)))
                    .collect::<String>(),
            )
        } else {
            writeln!(
                out,
                "{:<13} {:>8} {:>5} {:>11} {:>11} {:>11} {:>12}  {}{}",
                case,
                human_size(bytes as u64),
                t.reps,
                time(t.median),
                time(t.min),
                time(t.max),
                human_value(value),
                unit,
                extra
                    .iter()
                    .map(|(k, v)| format!("  {k}={v}"))
                    .collect::<String>(),
            )
        };
        let _ = out.flush();
    }

    fn memcpy(&self, bytes: usize) -> BenchResult<()> {
        // Both ends start on a page boundary inside their vectors: where the
        // allocator happens to place two small vectors a few bytes apart
        // modulo 4 KiB, `rep movsb` (glibc's memcpy from 2 KiB up) runs into
        // 4K aliasing and a 4 KiB copy takes 20 times longer (seen on AMD
        // EPYC), which is the allocator's luck, not the memory's speed.
        const PAGE: usize = 4096;
        let page_start = |v: &[u8]| (PAGE - v.as_ptr() as usize % PAGE) % PAGE;
        let mut src = vec![0u8; bytes + PAGE];
        let mut dst = vec![0u8; bytes + PAGE];
        let (s0, d0) = (page_start(&src), page_start(&dst));
        src[s0..s0 + bytes].copy_from_slice(&byte_pattern(bytes));
        let reps = self.reps(sized_reps(bytes) * 4);
        let t = self.time("memcpy", bytes, self.warmups(reps), reps, || {
            black_box(&mut dst[d0..d0 + bytes]).copy_from_slice(black_box(&src[s0..s0 + bytes]));
            black_box(&dst);
            Ok(())
        })?;
        check(
            dst[d0..d0 + bytes] == src[s0..s0 + bytes],
            "memcpy: the destination differs from the source",
        )?;
        self.report(
            "memcpy",
            bytes,
            &t,
            Figure::GigabytesPerSecond(bytes as f64),
        );
        Ok(())
    }

    fn upload(&self, bytes: usize) -> BenchResult<()> {
        let ctx = self.ctx;
        let host = word_pattern(bytes / 4);
        let buf = ctx.enqueue_create_buffer::<u32>(bytes / 4)?;
        buf.enqueue_fill(0)?;
        ctx.synchronize()?;
        let reps = self.reps(sized_reps(bytes));
        let t = self.time("upload", bytes, self.warmups(reps), reps, || {
            buf.enqueue_copy_from(&host[..])?;
            ctx.synchronize()?;
            Ok(())
        })?;
        check_words("upload", &buf.to_vec()?, &host)?;
        self.report(
            "upload",
            bytes,
            &t,
            Figure::GigabytesPerSecond(bytes as f64),
        );
        Ok(())
    }

    fn download(&self, bytes: usize) -> BenchResult<()> {
        let ctx = self.ctx;
        let host = word_pattern(bytes / 4);
        let buf = ctx.enqueue_create_buffer::<u32>(bytes / 4)?;
        buf.enqueue_copy_from(&host[..])?;
        ctx.synchronize()?;
        let mut out = vec![0u32; bytes / 4];
        let reps = self.reps(sized_reps(bytes));
        let t = self.time("download", bytes, self.warmups(reps), reps, || {
            buf.copy_to_slice(&mut out)?;
            Ok(())
        })?;
        check_words("download", &out, &host)?;
        self.report(
            "download",
            bytes,
            &t,
            Figure::GigabytesPerSecond(bytes as f64),
        );
        Ok(())
    }

    fn d2d(&self, bytes: usize) -> BenchResult<()> {
        let ctx = self.ctx;
        let host = word_pattern(bytes / 4);
        let src = ctx.enqueue_create_buffer::<u32>(bytes / 4)?;
        let dst = ctx.enqueue_create_buffer::<u32>(bytes / 4)?;
        src.enqueue_copy_from(&host[..])?;
        dst.enqueue_fill(0)?;
        ctx.synchronize()?;
        let reps = self.reps(sized_reps(bytes));
        let t = self.time("d2d", bytes, self.warmups(reps), reps, || {
            dst.enqueue_copy_from(&src)?;
            ctx.synchronize()?;
            Ok(())
        })?;
        check_words("d2d", &dst.to_vec()?, &host)?;
        self.report("d2d", bytes, &t, Figure::GigabytesPerSecond(bytes as f64));
        Ok(())
    }

    /// 64 MiB from a buffer of this context to one of a second context
    /// (another `VkDevice` on the same physical device), completion
    /// included: `d2d_cross` into an exportable buffer (one device copy
    /// through shared memory), `d2d_cross_host` between plain buffers
    /// (through host memory, the fallback).
    fn d2d_cross(&self) -> BenchResult<()> {
        let bytes = 64 << 20;
        let ctx = self.ctx;
        let other = DeviceContext::with_options(
            ContextOptions::new().force_staging(ctx.is_staging_forced()),
        )?;
        if other.info().uuid != ctx.info().uuid {
            return Err("the second context opened another physical device".into());
        }
        let host = word_pattern(bytes / 4);
        let src = ctx.enqueue_create_buffer::<u32>(bytes / 4)?;
        src.enqueue_copy_from(&host[..])?;
        ctx.synchronize()?;
        let shared = other.enqueue_create_exportable_buffer::<u32>(bytes / 4)?;
        let plain = other.enqueue_create_buffer::<u32>(bytes / 4)?;
        for (name, dst) in [("d2d_cross", &shared), ("d2d_cross_host", &plain)] {
            dst.enqueue_fill(0)?;
            other.synchronize()?;
            let reps = self.reps(sized_reps(bytes));
            let t = self.time(name, bytes, self.warmups(reps), reps, || {
                dst.enqueue_copy_from(&src)?;
                other.synchronize()?;
                Ok(())
            })?;
            check_words(name, &dst.to_vec()?, &host)?;
            self.report(name, bytes, &t, Figure::GigabytesPerSecond(bytes as f64));
        }
        Ok(())
    }

    fn fill(&self, bytes: usize) -> BenchResult<()> {
        let ctx = self.ctx;
        let buf = ctx.enqueue_create_buffer::<f32>(bytes / 4)?;
        buf.enqueue_fill(0.25)?;
        ctx.synchronize()?;
        let mut runs = 0u32;
        let mut last = 0.0f32;
        let reps = self.reps(sized_reps(bytes));
        let t = self.time("fill", bytes, self.warmups(reps), reps, || {
            runs += 1;
            last = runs as f32 * 0.5 + 1.0; // a different non-zero value each time
            buf.enqueue_fill(last)?;
            ctx.synchronize()?;
            Ok(())
        })?;
        let got = buf.to_vec()?;
        if let Some(i) = got.iter().position(|&v| v != last) {
            return Err(
                format!("fill: element {i} is {} after filling with {last}", got[i]).into(),
            );
        }
        self.report("fill", bytes, &t, Figure::GigabytesPerSecond(bytes as f64));
        Ok(())
    }

    /// 10,000 copies of 256 bytes between two 2.5 MiB buffers at distinct
    /// offsets, enqueued back to back, then one wait.
    fn small_ops(&self) -> BenchResult<()> {
        const OPS: usize = 10_000;
        const OP_BYTES: usize = 256;
        const BUF_BYTES: usize = 5 << 19; // 2.5 MiB
        let ctx = self.ctx;
        let host = byte_pattern(BUF_BYTES);
        let src = ctx.enqueue_create_buffer::<u8>(BUF_BYTES)?;
        let dst = ctx.enqueue_create_buffer::<u8>(BUF_BYTES)?;
        src.enqueue_copy_from(&host[..])?;
        dst.enqueue_fill(0)?;
        let views = (0..OPS)
            .map(|i| {
                Ok((
                    src.create_sub_buffer::<u8>(i * OP_BYTES, OP_BYTES)?,
                    dst.create_sub_buffer::<u8>(i * OP_BYTES, OP_BYTES)?,
                ))
            })
            .collect::<vkcompute::Result<Vec<_>>>()?;
        ctx.synchronize()?;
        let reps = self.reps(40);
        let t = self.time("small_ops", 0, self.warmups(reps), reps, || {
            for (s, d) in &views {
                d.enqueue_copy_from(s)?;
            }
            ctx.synchronize()?;
            Ok(())
        })?;
        drop(views);
        let got = dst.to_vec()?;
        let copied = OPS * OP_BYTES;
        check(
            got[..copied] == host[..copied],
            "small_ops: the copied ranges differ from the source",
        )?;
        check(
            got[copied..].iter().all(|&b| b == 0),
            "small_ops: bytes past the copied ranges were written",
        )?;
        self.report("small_ops", 0, &t, Figure::PerSecond(OPS as f64, "ops/s"));
        Ok(())
    }

    /// Upload 4 bytes, download them back (a blocking read).
    fn roundtrip(&self) -> BenchResult<()> {
        let ctx = self.ctx;
        let buf = ctx.enqueue_create_buffer::<u32>(1)?;
        buf.enqueue_fill(0)?;
        ctx.synchronize()?;
        let mut runs = 0u32;
        let mut last = 0u32;
        let mut out = [0u32; 1];
        let mut wrong = 0usize;
        let reps = self.reps(500);
        let t = self.time("roundtrip", 0, self.warmups(reps), reps, || {
            runs += 1;
            last = runs.wrapping_mul(7) + 1;
            buf.enqueue_copy_from(&[last])?;
            buf.copy_to_slice(&mut out)?;
            wrong += usize::from(out[0] != last);
            Ok(())
        })?;
        check(
            wrong == 0 && out[0] == last && buf.to_vec()? == [last],
            &format!("roundtrip: {wrong} reads differed from the value written; last read {out:?}, expected {last}"),
        )?;
        self.report("roundtrip", 0, &t, Figure::Microseconds);
        Ok(())
    }

    /// `y = a * x + y` over 16 Mi floats: through the runtime (`runtime`),
    /// by hand-written `ash` (`raw`), or both with their repetitions
    /// alternating over the same buffers.
    fn saxpy(&self, runtime: bool, raw: bool) -> BenchResult<()> {
        const N: u32 = 1 << 24;
        const A: f32 = 2.0;
        let ctx = self.ctx;
        // Multiples of 0.5 and 0.25 small enough that every sum is exact,
        // with or without fused multiply-adds.
        let x_host: Vec<f32> = (0..N).map(|i| (i % 1000) as f32 * 0.5 + 1.0).collect();
        let y_host: Vec<f32> = (0..N).map(|i| (i % 777) as f32 * 0.25 + 2.0).collect();
        let x = ctx.enqueue_create_buffer::<f32>(N as usize)?;
        let y = ctx.enqueue_create_buffer::<f32>(N as usize)?;
        x.enqueue_copy_from(&x_host)?;
        y.enqueue_copy_from(&y_host)?;
        let push = SaxpyParams { a: A, n: N };
        let max_x = ctx.info().limits.max_workgroup_count[0];
        let grid = grid_2d(N.div_ceil(256), max_x);
        let reps = self.reps(20);
        let warmups = self.warmups(reps);
        let kernel = Kernel::new(ctx, vkcompute::shaders::SAXPY, "main")?;
        check(
            kernel.local_size() == [256, 1, 1],
            "saxpy: the kernel does not have 256 invocations per workgroup",
        )?;
        // Each runtime repetition ends synchronized, so the runtime is idle
        // whenever the raw dispatch submits.
        let through_runtime = || -> BenchResult<()> {
            ctx.enqueue_function(&kernel, grid, &[x.arg(), y.arg()], &push)?;
            ctx.synchronize()?;
            Ok(())
        };
        ctx.synchronize()?;
        let dispatch = if raw {
            Some(RawDispatch::new(
                ctx,
                vkcompute::shaders::SAXPY,
                &[x.raw(), y.raw()],
                bytemuck::bytes_of(&push),
                [grid.0, grid.1, 1],
                1,
                false,
            )?)
        } else {
            None
        };
        let by_hand = || dispatch.as_ref().map_or(Ok(()), RawDispatch::run);
        let bytes = N as usize * 4;
        let (t_runtime, t_raw) = match (runtime, raw) {
            (true, true) => {
                let (a, b) = self.time_pair(
                    ["saxpy", "saxpy_raw"],
                    bytes,
                    warmups,
                    reps,
                    through_runtime,
                    by_hand,
                )?;
                (Some(a), Some(b))
            }
            (true, false) => (
                Some(self.time("saxpy", bytes, warmups, reps, through_runtime)?),
                None,
            ),
            _ => (
                None,
                Some(self.time("saxpy_raw", bytes, warmups, reps, by_hand)?),
            ),
        };
        drop(dispatch);
        let runs = (warmups + reps) * (usize::from(runtime) + usize::from(raw));
        let got = y.to_vec()?;
        let wrong = (0..N as usize)
            .filter(|&i| {
                let mut expected = y_host[i];
                for _ in 0..runs {
                    expected += A * x_host[i]; // y = a * x + y, as the kernel does
                }
                got[i] != expected
            })
            .count();
        check(
            wrong == 0,
            &format!("saxpy: {wrong} of {N} elements are wrong after {runs} runs (grid {grid:?})"),
        )?;
        for (case, t) in [("saxpy", t_runtime), ("saxpy_raw", t_raw)] {
            if let Some(t) = t {
                self.report(case, bytes, &t, Figure::GigabytesPerSecond(12.0 * N as f64));
            }
        }
        Ok(())
    }

    /// One workgroup writes one element, then wait.
    fn dispatch(&self) -> BenchResult<()> {
        const LEN: u32 = 1024;
        let ctx = self.ctx;
        let kernel = Kernel::new(ctx, vkcompute::shaders::STORE, "main")?;
        let buf = ctx.enqueue_create_buffer::<u32>(LEN as usize)?;
        buf.enqueue_fill(0)?;
        ctx.synchronize()?;
        let mut runs = 0u32;
        let mut last = [0u32; 2];
        let reps = self.reps(500);
        let t = self.time("dispatch", 0, self.warmups(reps), reps, || {
            runs += 1;
            last = [runs % LEN, runs.wrapping_mul(3) + 1];
            ctx.enqueue_function(&kernel, 1u32, &[buf.arg()], &last)?;
            ctx.synchronize()?;
            Ok(())
        })?;
        let got = buf.to_vec()?;
        let [index, value] = last;
        check(
            got[index as usize] == value,
            &format!(
                "dispatch: element {index} is {} after storing {value}",
                got[index as usize]
            ),
        )?;
        self.report("dispatch", 0, &t, Figure::Microseconds);
        Ok(())
    }

    /// The same one-workgroup kernel through a pre-recorded command buffer.
    fn dispatch_raw(&self) -> BenchResult<()> {
        const LEN: usize = 1024;
        const INDEX: u32 = 7;
        const VALUE: u32 = 0xC0FFEE;
        let ctx = self.ctx;
        let buf = ctx.enqueue_create_buffer::<u32>(LEN)?;
        buf.enqueue_fill(0)?;
        ctx.synchronize()?; // the runtime is idle from here on
        let push = [INDEX, VALUE];
        let dispatch = RawDispatch::new(
            ctx,
            vkcompute::shaders::STORE,
            &[buf.raw()],
            bytemuck::bytes_of(&push),
            [1, 1, 1],
            1,
            false,
        )?;
        let reps = self.reps(500);
        let t = self.time("dispatch_raw", 0, self.warmups(reps), reps, || {
            dispatch.run()
        })?;
        drop(dispatch);
        let got = buf.to_vec()?;
        let wrong = got
            .iter()
            .enumerate()
            .filter(|&(i, &v)| v != if i == INDEX as usize { VALUE } else { 0 })
            .count();
        check(
            wrong == 0,
            &format!(
                "dispatch_raw: element {INDEX} is {} (expected {VALUE}), {wrong} elements wrong",
                got[INDEX as usize]
            ),
        )?;
        self.report("dispatch_raw", 0, &t, Figure::Microseconds);
        Ok(())
    }

    /// Map 1 MiB of `u32`, add 1 to each, unmap, wait.
    /// `map_rw`'s increment loop alone, over 1 MiB of host memory.
    fn increment(&self) -> BenchResult<()> {
        const BYTES: usize = 1 << 20;
        let host = word_pattern(BYTES / 4);
        let mut words = host.clone();
        let reps = self.reps(100);
        let warmups = self.warmups(reps);
        let t = self.time("increment", BYTES, warmups, reps, || {
            for v in black_box(&mut words[..]).iter_mut() {
                *v += 1;
            }
            black_box(&words);
            Ok(())
        })?;
        let runs = (warmups + reps) as u32;
        let expected: Vec<u32> = host.iter().map(|&v| v + runs).collect();
        check_words("increment", &words, &expected)?;
        self.report("increment", BYTES, &t, Figure::Microseconds);
        Ok(())
    }

    fn map_rw(&self) -> BenchResult<()> {
        const BYTES: usize = 1 << 20;
        let ctx = self.ctx;
        let host = word_pattern(BYTES / 4);
        let buf = ctx.enqueue_create_buffer::<u32>(BYTES / 4)?;
        buf.enqueue_copy_from(&host[..])?;
        ctx.synchronize()?;
        let reps = self.reps(100);
        let warmups = self.warmups(reps);
        let t = self.time("map_rw", BYTES, warmups, reps, || {
            let mut mapped = buf.map_to_host()?;
            for v in mapped.iter_mut() {
                *v += 1;
            }
            mapped.finish()?;
            ctx.synchronize()?;
            Ok(())
        })?;
        let runs = (warmups + reps) as u32;
        let expected: Vec<u32> = host.iter().map(|&v| v + runs).collect();
        check_words("map_rw", &buf.to_vec()?, &expected)?;
        self.report("map_rw", BYTES, &t, Figure::Microseconds);
        Ok(())
    }

    /// Create, fill and drop 1,000 buffers of 1 MiB, then wait.
    fn alloc(&self) -> BenchResult<()> {
        const COUNT: usize = 1000;
        const WORDS: usize = (1 << 20) / 4;
        let ctx = self.ctx;
        let mut runs = 0u32;
        let mut last = 0u32;
        // The last buffer of each repetition lives on until the next one (or
        // the check), so that a filled buffer made in the timed region can be
        // checked.
        let mut kept: Option<DeviceBuffer<u32>> = None;
        let reps = self.reps(15);
        let t = self.time("alloc", 0, self.warmups(reps), reps, || {
            runs += 1;
            last = runs.wrapping_mul(5) + 3;
            for i in 0..COUNT {
                let b = ctx.enqueue_create_buffer::<u32>(WORDS)?;
                b.enqueue_fill(last)?;
                if i == COUNT - 1 {
                    kept = Some(b);
                }
            }
            ctx.synchronize()?;
            Ok(())
        })?;
        let sample = kept.ok_or("alloc: no buffer was kept")?.to_vec()?;
        check(
            sample.len() == WORDS && sample.iter().all(|&v| v == last),
            &format!("alloc: a buffer filled with {last} reads otherwise"),
        )?;
        self.report("alloc", 0, &t, Figure::PerSecond(COUNT as f64, "buffers/s"));
        Ok(())
    }
}

/// Dependent dispatches per repetition of the launch cases.
const LAUNCHES: u32 = 10_000;
/// Elements of the launch cases' buffer (one workgroup of `ADD_ONE`).
const LAUNCH_LEN: u32 = 64;

impl Bench<'_> {
    /// The launch cases' buffer, filled with a pattern, and the kernel.
    fn launch_setup(&self) -> BenchResult<(Kernel, DeviceBuffer<u32>, Vec<u32>)> {
        let ctx = self.ctx;
        let kernel = Kernel::new(ctx, vkcompute::shaders::ADD_ONE, "main")?;
        let start = word_pattern(LAUNCH_LEN as usize);
        let buf = ctx.enqueue_create_buffer::<u32>(LAUNCH_LEN as usize)?;
        buf.enqueue_copy_from(&start[..])?;
        ctx.synchronize()?;
        Ok((kernel, buf, start))
    }

    /// Checks that every element of `buf` grew by `runs` launches.
    fn launch_check(
        &self,
        case: &str,
        buf: &DeviceBuffer<u32>,
        start: &[u32],
        runs: usize,
    ) -> BenchResult<()> {
        self.launches_check(case, buf, start, runs as u64 * u64::from(LAUNCHES))
    }

    /// Checks that every element of `buf` grew by `launches` dispatches.
    fn launches_check(
        &self,
        case: &str,
        buf: &DeviceBuffer<u32>,
        start: &[u32],
        launches: u64,
    ) -> BenchResult<()> {
        let added = launches as u32;
        let expected: Vec<u32> = start.iter().map(|&v| v.wrapping_add(added)).collect();
        check_words(case, &buf.to_vec()?, &expected)
    }

    /// 10,000 dependent dispatches enqueued one by one, then one wait.
    fn launches(&self) -> BenchResult<()> {
        let ctx = self.ctx;
        let (kernel, buf, start) = self.launch_setup()?;
        let reps = self.reps(10);
        let warmups = self.warmups(reps);
        let t = self.time("launches", 0, warmups, reps, || {
            enqueue_launches(ctx, &kernel, &buf, LAUNCHES)?;
            ctx.synchronize()?;
            Ok(())
        })?;
        self.launch_check("launches", &buf, &start, warmups + reps)?;
        self.report(
            "launches",
            0,
            &t,
            Figure::PerSecond(LAUNCHES as f64, "launches/s"),
        );
        Ok(())
    }

    /// The same dispatches recorded once by hand into one command buffer.
    fn launches_raw(&self) -> BenchResult<()> {
        let ctx = self.ctx;
        let (_kernel, buf, start) = self.launch_setup()?;
        let raw = RawDispatch::new(
            ctx,
            vkcompute::shaders::ADD_ONE,
            &[buf.raw()],
            bytemuck::bytes_of(&LAUNCH_LEN),
            [1, 1, 1],
            LAUNCHES,
            false,
        )?;
        let reps = self.reps(10);
        let warmups = self.warmups(reps);
        let t = self.time("launches_raw", 0, warmups, reps, || raw.run())?;
        drop(raw);
        self.launch_check("launches_raw", &buf, &start, warmups + reps)?;
        self.report(
            "launches_raw",
            0,
            &t,
            Figure::PerSecond(LAUNCHES as f64, "launches/s"),
        );
        Ok(())
    }

    /// The 10,000 dispatches captured once as a graph.
    fn launch_graph(
        &self,
        kernel: &Kernel,
        buf: &DeviceBuffer<u32>,
    ) -> BenchResult<vkcompute::Graph> {
        let mut g = self.ctx.capture_graph();
        for _ in 0..LAUNCHES {
            g.enqueue_function(kernel, 1u32, &[buf.arg()], &LAUNCH_LEN)?;
        }
        Ok(g.finish()?)
    }

    /// The same dispatches replayed from a graph, then one wait.
    fn graph(&self) -> BenchResult<()> {
        let ctx = self.ctx;
        let (kernel, buf, start) = self.launch_setup()?;
        let graph = self.launch_graph(&kernel, &buf)?;
        let reps = self.reps(10);
        let warmups = self.warmups(reps);
        let t = self.time("graph", 0, warmups, reps, || {
            ctx.enqueue_graph(&graph)?;
            ctx.synchronize()?;
            Ok(())
        })?;
        self.launch_check("graph", &buf, &start, warmups + reps)?;
        self.report(
            "graph",
            0,
            &t,
            Figure::PerSecond(LAUNCHES as f64, "launches/s"),
        );
        Ok(())
    }

    /// Times `f` alone for `reps` repetitions (after warm-ups), running
    /// `settle` untimed after each.
    fn time_host(
        &self,
        case: &str,
        reps: usize,
        mut f: impl FnMut() -> BenchResult<()>,
        mut settle: impl FnMut() -> BenchResult<()>,
    ) -> BenchResult<Timing> {
        let warmups = self.warmups(reps);
        eprintln!(
            "bench: [{:7.1} s] {case}: {warmups} warm-up + {reps} timed (host time only)",
            self.start.elapsed().as_secs_f64(),
        );
        for _ in 0..warmups {
            f()?;
            settle()?;
        }
        let mut times = Vec::with_capacity(reps);
        for _ in 0..reps {
            let t0 = Instant::now();
            f()?;
            times.push(t0.elapsed().as_secs_f64());
            settle()?;
        }
        summarize(times)
    }

    /// Host time of one `enqueue_function` call (10,000 per repetition,
    /// a wait after each, untimed), and the repetitions run (warm-ups
    /// included).
    fn time_enqueue_cost(
        &self,
        case: &str,
        kernel: &Kernel,
        buf: &DeviceBuffer<u32>,
    ) -> BenchResult<(Timing, usize)> {
        let ctx = self.ctx;
        let reps = self.reps(10);
        let t = self.time_host(
            case,
            reps,
            || enqueue_launches(ctx, kernel, buf, LAUNCHES),
            || Ok(ctx.synchronize()?),
        )?;
        Ok((t.per(LAUNCHES), self.warmups(reps) + reps))
    }

    /// Host time of one `enqueue_function` call (10,000 per repetition).
    fn enqueue_cost(&self) -> BenchResult<()> {
        let (kernel, buf, start) = self.launch_setup()?;
        let (t, runs) = self.time_enqueue_cost("enqueue_cost", &kernel, &buf)?;
        self.launch_check("enqueue_cost", &buf, &start, runs)?;
        self.report("enqueue_cost", 0, &t, Figure::Nanoseconds);
        Ok(())
    }

    /// Host time of one replay call of the 10,000-dispatch graph.
    fn replay_cost(&self) -> BenchResult<()> {
        let ctx = self.ctx;
        let (kernel, buf, start) = self.launch_setup()?;
        let graph = self.launch_graph(&kernel, &buf)?;
        let reps = self.reps(30);
        let t = self.time_host(
            "replay_cost",
            reps,
            || Ok(ctx.enqueue_graph(&graph)?),
            || Ok(ctx.synchronize()?),
        )?;
        self.launch_check("replay_cost", &buf, &start, self.warmups(reps) + reps)?;
        self.report("replay_cost", 0, &t, Figure::Microseconds);
        Ok(())
    }
}

/// The push constants of `shaders/saxpy.comp`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct SaxpyParams {
    a: f32,
    n: u32,
}

/// The argument that makes the program the child process of `first_dispatch`.
const FIRST_DISPATCH_CHILD: &str = "--first-dispatch-child";
/// Elements of the `first_dispatch` saxpy.
const FIRST_DISPATCH_N: u32 = 1 << 20;

impl Bench<'_> {
    /// Times fresh processes from spawn to a checked first dispatch, with
    /// a cold and with a warm on-disk pipeline cache.
    fn first_dispatch(&self) -> BenchResult<()> {
        let root = std::env::temp_dir().join(format!(
            "vkcompute-bench-first-dispatch-{}",
            std::process::id()
        ));
        let result = self.first_dispatch_in(&root);
        let _ = std::fs::remove_dir_all(&root);
        result
    }

    fn first_dispatch_in(&self, root: &std::path::Path) -> BenchResult<()> {
        let reps = self.reps(10);
        let warmups = self.warmups(reps);
        // The clock runs inside `spawn_first_dispatch`, from spawning the
        // process to its checked result: emptying the directory before and
        // the child's exit (which writes the cache) after are not timed.
        let timed = |case: &str, warm: bool, dir: &std::path::Path| -> BenchResult<Timing> {
            eprintln!(
                "bench: [{:7.1} s] {case}: {warmups} warm-up + {reps} timed processes",
                self.start.elapsed().as_secs_f64(),
            );
            let mut times = Vec::with_capacity(reps);
            for rep in 0..warmups + reps {
                if !warm {
                    let _ = std::fs::remove_dir_all(dir);
                }
                std::fs::create_dir_all(dir)?;
                let t = spawn_first_dispatch(dir, warm)?;
                if rep >= warmups {
                    times.push(t);
                }
            }
            summarize(times)
        };
        let t_cold = timed("first_dispatch_cold", false, &root.join("cold"))?;
        let warm = root.join("warm");
        std::fs::create_dir_all(&warm)?;
        // Fill the cache once; every run after it starts warm.
        spawn_first_dispatch(&warm, false)?;
        let t_warm = timed("first_dispatch_warm", true, &warm)?;
        self.report("first_dispatch_cold", 0, &t_cold, Figure::Milliseconds);
        self.report("first_dispatch_warm", 0, &t_warm, Figure::Milliseconds);
        Ok(())
    }
}

/// Runs the `first_dispatch` child with its pipeline cache in `dir` and
/// returns the time from spawning it to its report of a checked result;
/// fails unless the child found a warm cache exactly when `warm`.
fn spawn_first_dispatch(dir: &std::path::Path, warm: bool) -> BenchResult<f64> {
    use std::io::BufRead;
    let exe = std::env::current_exe()?;
    let t0 = Instant::now();
    let mut child = std::process::Command::new(exe)
        .arg(FIRST_DISPATCH_CHILD)
        .arg(dir)
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    let mut line = String::new();
    if let Some(out) = child.stdout.take() {
        std::io::BufReader::new(out).read_line(&mut line)?;
    }
    let elapsed = t0.elapsed().as_secs_f64();
    let status = child.wait()?;
    check(
        status.success(),
        &format!("first_dispatch: the child process failed ({status})"),
    )?;
    let expected = if warm { "ok warm" } else { "ok cold" };
    check(
        line.trim() == expected,
        &format!(
            "first_dispatch: the child reported `{}`, expected `{expected}`",
            line.trim()
        ),
    )?;
    Ok(elapsed)
}

/// The child of `first_dispatch`: open the default device with its
/// pipeline cache in `dir`, load saxpy, run it once on 1 Mi elements, read
/// the result back and check it, then say whether the cache was warm.
fn first_dispatch_child(dir: std::path::PathBuf) -> BenchResult<()> {
    const A: f32 = 2.0;
    let n = FIRST_DISPATCH_N;
    let ctx = DeviceContext::with_options(ContextOptions::new().pipeline_cache_dir(Some(dir)))?;
    let warm = ctx.diagnostics().pipeline_cache_loaded();
    let kernel = Kernel::new(&ctx, vkcompute::shaders::SAXPY, "main")?;
    let x_host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5 + 1.0).collect();
    let y_host: Vec<f32> = (0..n).map(|i| (i % 777) as f32 * 0.25 + 2.0).collect();
    let x = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    let y = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    x.enqueue_copy_from(&x_host)?;
    y.enqueue_copy_from(&y_host)?;
    let grid = grid_2d(n.div_ceil(256), ctx.info().limits.max_workgroup_count[0]);
    ctx.enqueue_function(&kernel, grid, &[x.arg(), y.arg()], &SaxpyParams { a: A, n })?;
    let got = y.to_vec()?;
    let wrong = (0..n as usize)
        .filter(|&i| got[i] != A * x_host[i] + y_host[i])
        .count();
    check(
        wrong == 0,
        &format!("saxpy: {wrong} of {n} elements are wrong"),
    )?;
    let mut out = std::io::stdout().lock();
    writeln!(out, "ok {}", if warm { "warm" } else { "cold" })?;
    out.flush()?;
    Ok(())
}

/// A grid of exactly `groups` workgroups (when they divide evenly), at most
/// `max_x` in x: 65,536 with a limit of 65,535 gives (32768, 2).
fn grid_2d(groups: u32, max_x: u32) -> (u32, u32) {
    let rows = groups.div_ceil(max_x.max(1)).max(1);
    (groups.div_ceil(rows), rows)
}

/// A kernel dispatched without the runtime: its own shader module,
/// pipeline, descriptor set, a command buffer recorded once, and a fence.
/// Only run while the runtime is idle: it submits to the runtime's queue.
struct RawDispatch {
    device: ash::Device,
    queue: vk::Queue,
    module: vk::ShaderModule,
    set_layout: vk::DescriptorSetLayout,
    pipeline_layout: vk::PipelineLayout,
    pipeline: vk::Pipeline,
    descriptor_pool: vk::DescriptorPool,
    command_pool: vk::CommandPool,
    command_buffer: vk::CommandBuffer,
    fence: vk::Fence,
    /// A submission may still be running (a wait failed).
    in_flight: std::cell::Cell<bool>,
    /// The buffers, bound through `set`, or pushed with `push_descriptor`.
    buffers: Vec<vk::DescriptorBufferInfo>,
    set: vk::DescriptorSet,
    /// `VK_KHR_push_descriptor`, where the set layout is a push layout.
    push_descriptor: Option<ash::khr::push_descriptor::Device>,
}

fn vk_err(call: &'static str) -> impl Fn(vk::Result) -> Box<dyn std::error::Error> {
    move |e| format!("{call} failed: {e}").into()
}

impl RawDispatch {
    fn new(
        ctx: &DeviceContext,
        spirv: &[u32],
        buffers: &[RawBufferRef],
        push: &[u8],
        grid: [u32; 3],
        repeat: u32,
        push_descriptors: bool,
    ) -> BenchResult<Self> {
        let device = ctx.raw().device().clone();
        let family = ctx.raw().queue_family_index();
        // SAFETY: the context created queue 0 of its queue family; this
        // program submits to it only while the runtime is idle.
        let queue = unsafe { device.get_device_queue(family, 0) };
        // Handles are filled in as they are made; `Drop` destroys the
        // non-null ones, so an error part way leaks nothing.
        let mut raw = RawDispatch {
            device,
            queue,
            module: vk::ShaderModule::null(),
            set_layout: vk::DescriptorSetLayout::null(),
            pipeline_layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            descriptor_pool: vk::DescriptorPool::null(),
            command_pool: vk::CommandPool::null(),
            command_buffer: vk::CommandBuffer::null(),
            fence: vk::Fence::null(),
            in_flight: std::cell::Cell::new(false),
            buffers: buffers
                .iter()
                .map(|b| vk::DescriptorBufferInfo {
                    buffer: b.buffer,
                    offset: b.offset,
                    range: b.size,
                })
                .collect(),
            set: vk::DescriptorSet::null(),
            push_descriptor: push_descriptors.then(|| {
                ash::khr::push_descriptor::Device::new(ctx.raw().instance(), ctx.raw().device())
            }),
        };
        let d = raw.device.clone();

        let info = vk::ShaderModuleCreateInfo::default().code(spirv);
        // SAFETY: `spirv` is a valid SPIR-V module (the crate's own kernels).
        raw.module = unsafe { d.create_shader_module(&info, None) }
            .map_err(vk_err("vkCreateShaderModule"))?;

        let bindings: Vec<_> = (0..buffers.len() as u32)
            .map(|i| {
                vk::DescriptorSetLayoutBinding::default()
                    .binding(i)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .descriptor_count(1)
                    .stage_flags(vk::ShaderStageFlags::COMPUTE)
            })
            .collect();
        let flags = if push_descriptors {
            vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR
        } else {
            vk::DescriptorSetLayoutCreateFlags::empty()
        };
        let info = vk::DescriptorSetLayoutCreateInfo::default()
            .flags(flags)
            .bindings(&bindings);
        // SAFETY: a valid create info.
        raw.set_layout = unsafe { d.create_descriptor_set_layout(&info, None) }
            .map_err(vk_err("vkCreateDescriptorSetLayout"))?;

        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(push.len() as u32)];
        let set_layouts = [raw.set_layout];
        let info = vk::PipelineLayoutCreateInfo::default()
            .set_layouts(&set_layouts)
            .push_constant_ranges(&ranges);
        // SAFETY: a valid create info; the set layout is live.
        raw.pipeline_layout = unsafe { d.create_pipeline_layout(&info, None) }
            .map_err(vk_err("vkCreatePipelineLayout"))?;

        let stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(raw.module)
            .name(c"main");
        let info = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(raw.pipeline_layout);
        // SAFETY: the module and layout are live and match the shader's
        // interface (storage buffers in set 0, push constants of `push`'s size).
        raw.pipeline =
            unsafe { d.create_compute_pipelines(vk::PipelineCache::null(), &[info], None) }
                .map_err(|(_, e)| vk_err("vkCreateComputePipelines")(e))?[0];

        if !push_descriptors {
            raw.write_set()?;
        }

        let info = vk::CommandPoolCreateInfo::default().queue_family_index(family);
        // SAFETY: a valid create info for the context's queue family.
        raw.command_pool =
            unsafe { d.create_command_pool(&info, None) }.map_err(vk_err("vkCreateCommandPool"))?;
        let info = vk::CommandBufferAllocateInfo::default()
            .command_pool(raw.command_pool)
            .level(vk::CommandBufferLevel::PRIMARY)
            .command_buffer_count(1);
        // SAFETY: the pool is live and used by this thread only.
        raw.command_buffer = unsafe { d.allocate_command_buffers(&info) }
            .map_err(vk_err("vkAllocateCommandBuffers"))?[0];

        let cb = raw.command_buffer;
        let (before, between) = (barrier_before(), barrier_between());
        // SAFETY: `cb` is a new command buffer of this thread's pool; every
        // object recorded is live and matches the pipeline layout; the
        // push-constant range covers `push`.
        unsafe {
            d.begin_command_buffer(cb, &vk::CommandBufferBeginInfo::default())
                .map_err(vk_err("vkBeginCommandBuffer"))?;
            d.cmd_pipeline_barrier(
                cb,
                vk::PipelineStageFlags::ALL_COMMANDS,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::DependencyFlags::empty(),
                &before,
                &[],
                &[],
            );
            raw.record_binds(cb, push);
            for i in 0..repeat {
                if i > 0 {
                    // Each dispatch depends on the one before.
                    d.cmd_pipeline_barrier(
                        cb,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::PipelineStageFlags::COMPUTE_SHADER,
                        vk::DependencyFlags::empty(),
                        &between,
                        &[],
                        &[],
                    );
                }
                d.cmd_dispatch(cb, grid[0], grid[1], grid[2]);
            }
            raw.record_end(cb)?;
        }

        // SAFETY: a valid create info.
        raw.fence = unsafe { d.create_fence(&vk::FenceCreateInfo::default(), None) }
            .map_err(vk_err("vkCreateFence"))?;
        Ok(raw)
    }

    /// A descriptor set of its own pool, written with the buffers.
    fn write_set(&mut self) -> BenchResult<()> {
        let d = self.device.clone();
        let sizes = [vk::DescriptorPoolSize {
            ty: vk::DescriptorType::STORAGE_BUFFER,
            descriptor_count: self.buffers.len() as u32,
        }];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(1)
            .pool_sizes(&sizes);
        // SAFETY: a valid create info.
        self.descriptor_pool = unsafe { d.create_descriptor_pool(&info, None) }
            .map_err(vk_err("vkCreateDescriptorPool"))?;
        let set_layouts = [self.set_layout];
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(self.descriptor_pool)
            .set_layouts(&set_layouts);
        // SAFETY: the pool has room for one set of this layout.
        self.set = unsafe { d.allocate_descriptor_sets(&info) }
            .map_err(vk_err("vkAllocateDescriptorSets"))?[0];
        let writes: Vec<_> = self
            .buffers
            .iter()
            .enumerate()
            .map(|(i, info)| {
                vk::WriteDescriptorSet::default()
                    .dst_set(self.set)
                    .dst_binding(i as u32)
                    .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                    .buffer_info(std::slice::from_ref(info))
            })
            .collect();
        // SAFETY: the set is not in use; the buffers are live vkcompute
        // buffers that outlive this dispatch object.
        unsafe { d.update_descriptor_sets(&writes, &[]) };
        Ok(())
    }

    /// Records what one dispatch binds: the pipeline, the buffers (pushed,
    /// or the descriptor set) and the push constants `push`.
    ///
    /// # Safety
    ///
    /// `cb` is a command buffer of this object's device, recording.
    unsafe fn record_binds(&self, cb: vk::CommandBuffer, push: &[u8]) {
        let d = &self.device;
        let bind = vk::PipelineBindPoint::COMPUTE;
        // SAFETY: `cb` is recording (the caller's contract); the pipeline,
        // its layout, the set and the buffers are live, match the shader's
        // interface, and the push-constant range covers `push`.
        unsafe {
            d.cmd_bind_pipeline(cb, bind, self.pipeline);
            match &self.push_descriptor {
                Some(push_descriptor) => {
                    for (i, info) in self.buffers.iter().enumerate() {
                        let write = vk::WriteDescriptorSet::default()
                            .dst_binding(i as u32)
                            .descriptor_type(vk::DescriptorType::STORAGE_BUFFER)
                            .buffer_info(std::slice::from_ref(info));
                        push_descriptor.cmd_push_descriptor_set(
                            cb,
                            bind,
                            self.pipeline_layout,
                            0,
                            std::slice::from_ref(&write),
                        );
                    }
                }
                None => {
                    d.cmd_bind_descriptor_sets(cb, bind, self.pipeline_layout, 0, &[self.set], &[])
                }
            }
            d.cmd_push_constants(
                cb,
                self.pipeline_layout,
                vk::ShaderStageFlags::COMPUTE,
                0,
                push,
            );
        }
    }

    /// Records the barrier that makes the dispatches' writes available to
    /// later work and to the host, and ends `cb`.
    ///
    /// # Safety
    ///
    /// `cb` is a command buffer of this object's device, recording.
    unsafe fn record_end(&self, cb: vk::CommandBuffer) -> BenchResult<()> {
        let d = &self.device;
        // SAFETY: `cb` is recording (the caller's contract); the barrier is
        // well formed.
        unsafe {
            d.cmd_pipeline_barrier(
                cb,
                vk::PipelineStageFlags::COMPUTE_SHADER,
                vk::PipelineStageFlags::ALL_COMMANDS | vk::PipelineStageFlags::HOST,
                vk::DependencyFlags::empty(),
                &barrier_after(),
                &[],
                &[],
            );
            d.end_command_buffer(cb)
        }
        .map_err(vk_err("vkEndCommandBuffer"))?;
        Ok(())
    }

    /// One submission of the recorded command buffer, waited for.
    fn run(&self) -> BenchResult<()> {
        let d = &self.device;
        let cbs = [self.command_buffer];
        let submit = [vk::SubmitInfo::default().command_buffers(&cbs)];
        // SAFETY: the command buffer is executable and not pending (every
        // earlier submission was waited for); the fence is unsignaled; the
        // runtime is idle, so nothing else uses the queue.
        unsafe { d.queue_submit(self.queue, &submit, self.fence) }
            .map_err(vk_err("vkQueueSubmit"))?;
        self.in_flight.set(true);
        // SAFETY: the fence is live.
        unsafe { d.wait_for_fences(&[self.fence], true, u64::MAX) }
            .map_err(vk_err("vkWaitForFences"))?;
        self.in_flight.set(false);
        // SAFETY: the fence is signaled and no submission uses it.
        unsafe { d.reset_fences(&[self.fence]) }.map_err(vk_err("vkResetFences"))?;
        Ok(())
    }
}

impl Drop for RawDispatch {
    fn drop(&mut self) {
        let d = &self.device;
        if self.in_flight.get() {
            // SAFETY: the fence is live; waiting makes the objects idle.
            let _ = unsafe { d.wait_for_fences(&[self.fence], true, u64::MAX) };
        }
        // SAFETY: no submission uses these objects any more (each was waited
        // for); null handles are ignored by vkDestroy*; the device outlives
        // this object (the context is alive while the case runs).
        unsafe {
            d.destroy_fence(self.fence, None);
            d.destroy_command_pool(self.command_pool, None);
            d.destroy_descriptor_pool(self.descriptor_pool, None);
            d.destroy_pipeline(self.pipeline, None);
            d.destroy_pipeline_layout(self.pipeline_layout, None);
            d.destroy_descriptor_set_layout(self.set_layout, None);
            d.destroy_shader_module(self.module, None);
        }
    }
}

/// Orders a dispatch after earlier work on the queue (the runtime's
/// uploads, the previous repetition).
fn barrier_before() -> [vk::MemoryBarrier<'static>; 1] {
    [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::MEMORY_WRITE)
        .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)]
}

/// Orders a dispatch after the one before.
fn barrier_between() -> [vk::MemoryBarrier<'static>; 1] {
    [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
        .dst_access_mask(vk::AccessFlags::SHADER_READ | vk::AccessFlags::SHADER_WRITE)]
}

/// Makes the dispatches' writes available to later work and to the host.
fn barrier_after() -> [vk::MemoryBarrier<'static>; 1] {
    [vk::MemoryBarrier::default()
        .src_access_mask(vk::AccessFlags::SHADER_WRITE)
        .dst_access_mask(
            vk::AccessFlags::MEMORY_READ
                | vk::AccessFlags::MEMORY_WRITE
                | vk::AccessFlags::HOST_READ,
        )]
}

/// Non-zero, non-constant bytes.
fn byte_pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8 + 1).collect()
}

/// Non-zero, non-constant words.
fn word_pattern(len: usize) -> Vec<u32> {
    (0..len as u32).map(|i| i.wrapping_mul(3) + 1).collect()
}

fn check(ok: bool, message: &str) -> BenchResult<()> {
    if ok {
        Ok(())
    } else {
        Err(format!("wrong result: {message}").into())
    }
}

/// Checks `y` after `runs` saxpy dispatches (a = 0.5) on `y` filled with
/// 2 and `x`.
fn check_saxpy(
    case: &str,
    y: &vkcompute::DeviceBuffer<f32>,
    x: &[f32],
    runs: usize,
) -> BenchResult<()> {
    let got = y.to_vec()?;
    let wrong = (0..x.len())
        .filter(|&i| got[i] != 2.0 + runs as f32 * 0.5 * x[i])
        .count();
    check(
        wrong == 0,
        &format!("{case}: {wrong} of {} elements wrong", x.len()),
    )
}

fn check_words(case: &str, got: &[u32], expected: &[u32]) -> BenchResult<()> {
    if got.len() != expected.len() {
        return Err(format!(
            "wrong result: {case}: {} elements read, {} expected",
            got.len(),
            expected.len()
        )
        .into());
    }
    match got.iter().zip(expected).position(|(g, e)| g != e) {
        None => Ok(()),
        Some(i) => Err(format!(
            "wrong result: {case}: element {i} is {}, expected {}",
            got[i], expected[i]
        )
        .into()),
    }
}

/// `64 MiB`, `4 KiB`, `100 B`; `-` for no size.
fn human_size(bytes: u64) -> String {
    match bytes {
        0 => "-".to_string(),
        b if b % (1 << 30) == 0 => format!("{} GiB", b >> 30),
        b if b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// A duration in seconds, in ns, us, ms or s.
fn human_time(s: f64) -> String {
    if s < 1e-6 {
        format!("{:.0} ns", s * 1e9)
    } else if s < 1e-3 {
        format!("{:.2} us", s * 1e6)
    } else if s < 1.0 {
        format!("{:.2} ms", s * 1e3)
    } else {
        format!("{s:.3} s")
    }
}

/// A figure with a sensible number of digits.
fn human_value(v: f64) -> String {
    if v >= 10_000.0 {
        format!("{v:.0}")
    } else if v >= 100.0 {
        format!("{v:.1}")
    } else if v >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.4}")
    }
}

fn json_string(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// A JSON number (`null` where the value is not finite).
fn json_number(v: f64) -> String {
    if v.is_finite() {
        format!("{v}")
    } else {
        "null".to_string()
    }
}

/// The median, min and max of `times`.
fn summarize(mut times: Vec<f64>) -> BenchResult<Timing> {
    times.sort_by(f64::total_cmp);
    let n = times.len();
    if n == 0 {
        return Err("no repetitions".into());
    }
    let median = if n % 2 == 1 {
        times[n / 2]
    } else {
        (times[n / 2 - 1] + times[n / 2]) / 2.0
    };
    Ok(Timing {
        reps: n,
        median,
        min: times[0],
        max: times[n - 1],
    })
}
