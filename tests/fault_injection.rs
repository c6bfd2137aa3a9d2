//! Fault injection (feature `fault-injection`): for every N, a model
//! sequence of operations runs with the Nth allocation on the device made to
//! fail (buffer creation, memory, staging, command buffers, descriptor pools
//! and sets, pipelines, a second stream's semaphore and command pool). Every call succeeds or returns an error; results
//! of calls that succeeded are right; nothing leaks (live objects and
//! allocated bytes return to their baseline after `trim`, and the
//! validation layer reports nothing, leaked objects at device destruction
//! included); buffers the sequence does not touch keep their contents; and
//! the same sequence then runs without a fault and gives the right results.
//!
//! Each N runs on a fresh context, so that first-use allocations (the fill
//! kernel's pipeline, the first descriptor pool) fail too, and so that the
//! layer's leak check at device destruction covers that N alone.
//! One test runs the sequence on two threads at once, each on a stream of
//! the device, so that a fault lands on either.
//! `VKCOMPUTE_FAULT_LONG=1` adds a large staged transfer (several pieces)
//! to the sequence and runs every combination of memory path, descriptor
//! path and fault kind;
//! `VKCOMPUTE_FAULT_VERBOSE=1` prints what failed for each N.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{assert_clean, context_with, Path, Rng};
use vkcompute::{shaders, testing, DeviceContext, Error, Kernel, LiveObjects};

/// One configuration: the memory path and the descriptor path.
#[derive(Clone, Copy, Debug)]
struct Config {
    path: Path,
    push_descriptors: bool,
    /// Every allocation after the Nth fails too, not only the Nth.
    sticky: bool,
    /// Adds a transfer larger than one staging piece (8 MiB).
    long: bool,
    /// Threads running the sequence at once, each on a stream of its own.
    threads: usize,
    /// The step between the values of N tried.
    step: u64,
}

/// Buffers made before the fault is armed and never touched by the
/// sequence: they must keep their contents whatever fails.
struct Bystanders {
    device: vkcompute::DeviceBuffer<u32>,
    device_data: Vec<u32>,
    host: vkcompute::HostBuffer<u32>,
    host_data: Vec<u32>,
}

impl Bystanders {
    fn new(ctx: &DeviceContext, rng: &mut Rng) -> Bystanders {
        let device_data: Vec<u32> = (0..1000).map(|_| rng.next_u64() as u32).collect();
        let host_data: Vec<u32> = (0..333).map(|_| rng.next_u64() as u32).collect();
        let device = ctx.enqueue_create_buffer::<u32>(device_data.len()).unwrap();
        device.enqueue_copy_from(&device_data).unwrap();
        let host = ctx
            .enqueue_create_host_buffer::<u32>(host_data.len())
            .unwrap();
        host.as_mut_slice().unwrap().copy_from_slice(&host_data);
        Bystanders {
            device,
            device_data,
            host,
            host_data,
        }
    }

    fn check(&self, n: u64) {
        assert_eq!(
            self.device.to_vec().unwrap(),
            self.device_data,
            "N = {n}: a device buffer the sequence never touched changed"
        );
        assert_eq!(
            self.host.to_vec().unwrap(),
            self.host_data,
            "N = {n}: a host buffer the sequence never touched changed"
        );
    }
}

/// What the sequence saw: how many calls failed, and what failed first.
#[derive(Default)]
struct Outcome {
    failures: usize,
    first: Option<String>,
}

impl Outcome {
    /// Notes `result`; `Some` on success.
    fn step<T>(&mut self, what: &str, result: Result<T, Error>) -> Option<T> {
        match result {
            Ok(v) => Some(v),
            Err(e) => {
                // Only the injected failure is expected: running out of
                // memory, reported by the call that allocated or, for a
                // write-back in `Drop`, by the buffer's next operation.
                let out_of_memory = |e: &Error| matches!(e, Error::OutOfMemory { .. });
                let expected = match &e {
                    Error::Deferred(inner) => out_of_memory(inner),
                    e => out_of_memory(e),
                };
                assert!(
                    expected,
                    "{what}: an error other than the injected one: {e}"
                );
                // Where the size is not known, the message does not make one up.
                let message = e.to_string();
                assert!(!message.contains("needs 0 bytes"), "{what}: {message}");
                if self.first.is_none() {
                    self.first = Some(format!("{what}: {e}"));
                }
                self.failures += 1;
                None
            }
        }
    }
}

/// Compares a download with the model, where both are known.
fn expect<T: PartialEq + std::fmt::Debug>(
    n: u64,
    what: &str,
    got: Option<Vec<T>>,
    want: &Option<Vec<T>>,
) {
    if let (Some(got), Some(want)) = (got, want) {
        assert_eq!(&got, want, "N = {n}: {what}");
    }
}

/// Creates a buffer of `len` elements, fills it with `value` and reads it back.
fn fill_and_check<T: bytemuck::Pod + PartialEq + std::fmt::Debug>(
    ctx: &DeviceContext,
    out: &mut Outcome,
    n: u64,
    what: &str,
    len: usize,
    value: T,
) {
    let Some(buf) = out.step(
        &format!("create {what}"),
        ctx.enqueue_create_buffer::<T>(len),
    ) else {
        return;
    };
    let model = out
        .step(&format!("fill {what}"), buf.enqueue_fill(value))
        .map(|()| vec![value; len]);
    let got = out.step(&format!("download {what}"), buf.to_vec());
    expect(n, what, got, &model);
}

/// The model sequence. Every call may fail (a failure leaves what it
/// writes unknown to the model); every download that succeeds of a buffer
/// whose contents the model knows must match them.
fn sequence(ctx: &DeviceContext, config: Config, n: u64) -> Outcome {
    let mut out = Outcome::default();
    let mut rng = Rng::new(n ^ 0x5eed);
    let len = 1000usize;
    let av: Vec<f32> = (0..len).map(|i| i as f32 * 0.5).collect();
    let bv: Vec<f32> = (0..len).map(|_| rng.below(1000) as f32).collect();

    // Device buffers, uploads (direct or staged), a copy, a download.
    let a = out.step("create a", ctx.enqueue_create_buffer::<f32>(len));
    let mut a_model = None;
    if let Some(a) = &a {
        if out.step("upload a", a.enqueue_copy_from(&av)).is_some() {
            a_model = Some(av.clone());
        }
    }
    let b = out.step("create b", ctx.enqueue_create_buffer::<f32>(len));
    let mut b_model = None;
    if let Some(b) = &b {
        if out.step("upload b", b.enqueue_copy_from(&bv)).is_some() {
            b_model = Some(bv.clone());
        }
    }
    let c = out.step("create c", ctx.enqueue_create_buffer::<f32>(len));
    let mut c_model = None;
    if let (Some(a), Some(c)) = (&a, &c) {
        c_model = out
            .step("copy a to c", c.enqueue_copy_from(a))
            .and(a_model.clone());
        let got = out.step("download c", c.to_vec());
        expect(n, "c after the copy from a", got, &c_model);
    }

    // Pooled objects (command buffers, staging blocks, descriptor pools,
    // cached buffers) go, so that each phase allocates its own again.
    out.step("trim", ctx.trim());

    // Fills of every path: the fill kernel (u8 and u16 at odd lengths, u64
    // of distinct halves), vkCmdFillBuffer (u32), staged tiles ([u32; 3]).
    fill_and_check(ctx, &mut out, n, "u8", 1001, 0xa5u8);
    fill_and_check(ctx, &mut out, n, "u16", 333, 0xbeefu16);
    if let Some(b) = &b {
        let sub = out.step("sub-buffer of b", b.create_sub_buffer::<u32>(100, 50));
        if let Some(sub) = sub {
            match out.step("fill u32", sub.enqueue_fill(7)) {
                Some(()) => {
                    if let Some(model) = &mut b_model {
                        model[100..150].fill(f32::from_bits(7));
                    }
                }
                None => b_model = None,
            }
        }
    }
    fill_and_check(ctx, &mut out, n, "u64", 77, 0x0123_4567_89ab_cdefu64);
    fill_and_check(ctx, &mut out, n, "[u32; 3]", 50, [1u32, 2, 3]);

    out.step("trim", ctx.trim());

    // An idle buffer dropped goes to the device's cache of retired buffers:
    // a creation that then runs out of memory empties the cache and tries
    // again.
    drop(out.step(
        "create a buffer to retire",
        ctx.enqueue_create_buffer::<u8>(4096),
    ));

    // A host buffer written by the host and copied to a device buffer.
    let host = out.step("create host", ctx.enqueue_create_host_buffer::<f32>(len));
    if let (Some(host), Some(c)) = (&host, &c) {
        let written = out
            .step("host slice", host.as_mut_slice())
            .map(|mut s| s.copy_from_slice(&bv));
        if written.is_some() {
            c_model = out
                .step("copy host to c", c.enqueue_copy_from(host))
                .map(|()| bv.clone());
        } else {
            c_model = None;
        }
    }

    // A device buffer copied into the host buffer.
    if let (Some(host), Some(a)) = (&host, &a) {
        let model = out
            .step("copy a to host", a.enqueue_copy_to(host))
            .and(a_model.clone());
        let got = out.step("read host", host.to_vec());
        expect(n, "host after the copy from a", got, &model);
    }

    out.step("trim", ctx.trim());

    // Mappings of device buffers, changed and written back: by `finish`,
    // which reports a failed write-back, and by `Drop`, whose failure the
    // buffer's next operation reports.
    if let Some(b) = &b {
        if let Some(mut mapped) = out.step("map b", b.map_to_host()) {
            mapped[0] = 0.25;
            drop(mapped);
            if let Some(model) = &mut b_model {
                model[0] = 0.25;
            }
            let got = out.step("download b after its mapping", b.to_vec());
            if got.is_none() {
                b_model = None;
            }
            expect(n, "b after its mapping", got, &b_model);
        }
    }
    // (The write-back of `b` used the pooled staging blocks: trim, so that
    // the mapping of `a` and its write-back allocate their own.)
    out.step("trim", ctx.trim());
    if let Some(a) = &a {
        if let Some(mut mapped) = out.step("map a", a.map_to_host()) {
            mapped[3] = -1.0;
            mapped[999] = -2.0;
            match out.step("finish the mapping of a", mapped.finish()) {
                Some(()) => {
                    if let Some(model) = &mut a_model {
                        model[3] = -1.0;
                        model[999] = -2.0;
                    }
                }
                None => a_model = None,
            }
        }
    }

    out.step("trim", ctx.trim());

    // A kernel: loading it creates a pipeline; the dispatch binds buffers
    // (a descriptor set from a pool on the pooled path).
    let kernel = out.step(
        "load the kernel",
        Kernel::builder(shaders::VECTOR_ADD)
            .specialize(0, 32u32)
            .build(ctx),
    );
    if let (Some(kernel), Some(a), Some(b), Some(c)) = (&kernel, &a, &b, &c) {
        let args = [a.arg(), b.arg(), c.arg()];
        let groups = (len as u32).div_ceil(32);
        c_model = out
            .step(
                "dispatch",
                ctx.enqueue_function(kernel, groups, &args, &(len as u32)),
            )
            .and_then(|()| {
                let (a, b) = (a_model.as_ref()?, b_model.as_ref()?);
                Some(a.iter().zip(b).map(|(x, y)| x + y).collect())
            });
    }

    // A second stream (its own timeline and command pool) copies `a` into a
    // buffer it owns, ordered after this stream's work by a semaphore wait.
    if let Some(other) = out.step("new stream", ctx.new_stream()) {
        if let Some(d) = out.step("create d", other.enqueue_create_buffer::<f32>(len)) {
            if let Some(a) = &a {
                let model = out
                    .step("copy a to d", d.enqueue_copy_from(a))
                    .and(a_model.clone());
                expect(n, "d", out.step("download d", d.to_vec()), &model);
            }
        }
        out.step("synchronize the other stream", other.synchronize());
    }

    out.step("trim", ctx.trim());

    // Downloads of everything the model knows.
    for (what, buf, model) in [
        ("a", &a, &a_model),
        ("b", &b, &b_model),
        ("c", &c, &c_model),
    ] {
        if let Some(buf) = buf {
            let got = out.step("download", buf.to_vec());
            expect(n, what, got, model);
        }
    }

    // Transfers of several staging pieces, both ways.
    if config.long {
        let big_len = (9 << 20) / 4 + 3;
        let big_data: Vec<u32> = (0..big_len as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        if let Some(big) = out.step("create big", ctx.enqueue_create_buffer::<u32>(big_len)) {
            let model = out
                .step("upload big", big.enqueue_copy_from(&big_data))
                .map(|()| big_data.clone());
            expect(n, "big", out.step("download big", big.to_vec()), &model);
        }
    }

    out.step("synchronize", ctx.synchronize());
    out
}

/// Live objects, less the counter of commands recorded.
fn live(ctx: &DeviceContext) -> LiveObjects {
    LiveObjects {
        commands_recorded: 0,
        ..ctx.diagnostics().live_objects()
    }
}

/// Runs the sequence on each of `streams` at once, one thread each.
fn on_each_stream(streams: &[DeviceContext], config: Config, n: u64) -> Outcome {
    let outcomes: Vec<Outcome> = std::thread::scope(|scope| {
        let runs: Vec<_> = streams
            .iter()
            .map(|s| scope.spawn(move || sequence(s, config, n)))
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    Outcome {
        failures: outcomes.iter().map(|o| o.failures).sum(),
        first: outcomes.into_iter().find_map(|o| o.first),
    }
}

/// Runs the sequence with the Nth allocation failing, for N = 1, 2, ...
/// (every `config.step`th) until a run passes all its allocation points.
/// Returns the N values run.
fn every_n(config: Config) -> u64 {
    let mut n = 1;
    let mut runs = 0;
    loop {
        runs += 1;
        let options = common::options(config.path).push_descriptors(config.push_descriptors);
        let ctx = context_with(options);
        let log = ctx.diagnostics().validation_log();
        let mut rng = Rng::new(n);
        let bystanders = Bystanders::new(&ctx, &mut rng);
        let mut streams = vec![ctx.clone()];
        for _ in 1..config.threads {
            streams.push(ctx.new_stream().unwrap());
        }
        for s in &streams {
            s.trim().unwrap();
        }
        let objects: Vec<LiveObjects> = streams.iter().map(live).collect();
        let bytes = ctx.diagnostics().allocated_bytes();

        if config.sticky {
            testing::fail_allocations_from(&ctx, n);
        } else {
            testing::fail_allocation(&ctx, n);
        }
        let outcome = on_each_stream(&streams, config, n);
        let fired = testing::fault_injected(&ctx);
        let passed = testing::allocations_passed(&ctx);
        testing::fail_allocation(&ctx, 0);
        if verbose() {
            eprintln!(
                "N = {n}: {passed} allocation points, {} failed call(s), first: {:?}",
                outcome.failures, outcome.first
            );
        }
        assert!(
            fired || outcome.failures == 0,
            "N = {n}: no fault was injected, yet calls failed; first: {:?}",
            outcome.first
        );

        for s in &streams {
            s.synchronize()
                .unwrap_or_else(|e| panic!("N = {n}: synchronize after the faulty run: {e}"));
            s.trim()
                .unwrap_or_else(|e| panic!("N = {n}: trim after the faulty run: {e}"));
        }
        assert_eq!(
            streams.iter().map(live).collect::<Vec<_>>(),
            objects,
            "N = {n}: live objects after trim ({config:?})"
        );
        assert_eq!(
            ctx.diagnostics().allocated_bytes(),
            bytes,
            "N = {n}: allocated bytes after trim"
        );
        bystanders.check(n);

        // The context still works: the sequence again, without faults.
        let clean = on_each_stream(&streams, config, n);
        assert_eq!(
            clean.failures, 0,
            "N = {n}: the context is not usable after the fault: {:?}",
            clean.first
        );
        bystanders.check(n);
        drop(bystanders);
        for s in &streams {
            s.trim().unwrap();
        }
        drop((streams, ctx));
        assert_clean(&log, &format!("N = {n} ({config:?})"));
        assert!(
            passed > 0,
            "N = {n}: the sequence reached no allocation point"
        );
        if !fired {
            return runs;
        }
        n += config.step;
    }
}

fn long() -> bool {
    std::env::var("VKCOMPUTE_FAULT_LONG").is_ok_and(|v| v == "1")
}

/// `VKCOMPUTE_FAULT_VERBOSE=1` prints what failed for each N.
fn verbose() -> bool {
    std::env::var("VKCOMPUTE_FAULT_VERBOSE").is_ok_and(|v| v == "1")
}

fn run(path: Path, push_descriptors: bool, sticky: bool) {
    run_config(Config {
        path,
        push_descriptors,
        sticky,
        long: long(),
        threads: 1,
        step: 1,
    });
}

fn run_config(config: Config) {
    let start = std::time::Instant::now();
    let runs = every_n(config);
    eprintln!(
        "{config:?}: {runs} values of N in {:.1} s",
        start.elapsed().as_secs_f64()
    );
}

// Both memory paths and both descriptor paths are covered by the three
// tests `make test` runs: direct with push descriptors, staging with pooled
// sets, and exhausted memory on staging with push descriptors; the other
// combinations run with `VKCOMPUTE_FAULT_LONG=1`.

#[test]
fn every_allocation_failure_on_the_direct_path_with_push_descriptors() {
    run(Path::Direct, true, false);
    if long() {
        run(Path::Direct, false, false);
    }
}

#[test]
fn every_allocation_failure_on_the_staging_path_with_pooled_descriptors() {
    run(Path::Staging, false, false);
    if long() {
        run(Path::Staging, true, false);
    }
}

/// Memory stays exhausted from the Nth allocation on: the failure paths
/// must not depend on allocating.
#[test]
fn memory_exhausted_from_every_allocation_on() {
    run(Path::Staging, true, true);
    if long() {
        for (path, push) in [
            (Path::Staging, false),
            (Path::Direct, true),
            (Path::Direct, false),
        ] {
            run(path, push, true);
        }
    }
}

/// Two threads run the sequence at once on two streams of the device, so
/// the fault lands on either (the hook counts allocations device-wide,
/// whichever thread makes them). Every third N (every N with
/// `VKCOMPUTE_FAULT_LONG=1`), on the direct path with pooled sets.
#[test]
fn allocation_failures_while_two_threads_use_two_streams() {
    run_config(Config {
        path: Path::Direct,
        push_descriptors: false,
        sticky: false,
        long: false,
        threads: 2,
        step: if long() { 1 } else { 3 },
    });
}

/// A dispatch whose descriptor set cannot be allocated has bound its
/// pipeline already: the next dispatch of the kernel bound before it must
/// bind that kernel again, not run the failed one's pipeline.
#[test]
fn a_failed_dispatch_leaves_no_stale_pipeline_bound() {
    let ctx = context_with(common::options(Path::Direct).push_descriptors(false));
    let log = ctx.diagnostics().validation_log();
    let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
    let store = Kernel::new(&ctx, shaders::STORE, "main").unwrap();
    let n = 64u32;
    let data = ctx.enqueue_create_buffer::<u32>(n as usize).unwrap();
    data.enqueue_fill(0).unwrap();
    ctx.enqueue_function(&add_one, 1, &[data.arg()], &n)
        .unwrap();
    // The store's descriptor set is the next allocation point.
    testing::fail_allocation(&ctx, 1);
    let failed = ctx.enqueue_function(&store, 1, &[data.arg()], &[0u32, 777]);
    assert!(testing::fault_injected(&ctx));
    assert!(failed.is_err(), "{failed:?}");
    testing::fail_allocation(&ctx, 0);
    // Same kernel, buffers and push constants as the first dispatch.
    ctx.enqueue_function(&add_one, 1, &[data.arg()], &n)
        .unwrap();
    assert_eq!(data.to_vec().unwrap(), vec![2; n as usize]);
    drop((data, add_one, store, ctx));
    assert_clean(&log, "a dispatch after a failed one");
}
