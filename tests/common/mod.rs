//! The test harness: every test runs on a context with the Khronos
//! validation layer and synchronization validation enabled, and fails if the
//! layer reports anything, including at device destruction.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]
#![allow(dead_code)]

use vkcompute::{validation::ValidationLog, ContextOptions, DeviceContext};

/// The two memory paths every host-side test runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Path {
    /// Host copies go straight to host-visible device memory where they can.
    Direct,
    /// Every host copy goes through staging buffers (what a discrete GPU does).
    Staging,
}

pub const PATHS: [Path; 2] = [Path::Direct, Path::Staging];

/// Options of a validated context on the memory path `path`.
/// No test writes the user's pipeline cache: those that test it give a
/// directory of their own.
pub fn options(path: Path) -> ContextOptions {
    ContextOptions::new()
        .validation(true)
        .force_staging(path == Path::Staging)
        .pipeline_cache_dir(None)
}

/// A validated context; a missing device or layer fails the test.
pub fn context_with(options: ContextOptions) -> DeviceContext {
    match DeviceContext::with_options(options) {
        Ok(ctx) => {
            assert!(ctx.diagnostics().is_validation_enabled());
            ctx
        }
        Err(e) => panic!("no usable Vulkan device with validation (run `make test`, which installs lavapipe and the layers): {e}"),
    }
}

/// Fails the test if `log` holds any message.
pub fn assert_clean(log: &ValidationLog, what: &str) {
    let messages = log.messages();
    if !messages.is_empty() {
        let list: Vec<String> = messages.iter().map(|m| m.to_string()).collect();
        panic!(
            "{} validation message(s) during {what}:\n{}",
            list.len(),
            list.join("\n")
        );
    }
}

/// Runs `test` on a fresh validated context, then synchronizes and drops
/// the context and fails on any validation message.
pub fn run_with(options: ContextOptions, what: &str, test: impl FnOnce(&DeviceContext)) {
    let ctx = context_with(options);
    let log = ctx.diagnostics().validation_log();
    test(&ctx);
    ctx.synchronize().expect("synchronize after the test");
    drop(ctx);
    assert_clean(&log, what);
}

/// Runs `test` once on each memory path.
pub fn on_each_path(test: impl Fn(&DeviceContext, Path)) {
    for path in PATHS {
        run_with(options(path), &format!("the {path:?} path"), |ctx| {
            test(ctx, path)
        });
    }
}

/// Runs `test` on both descriptor paths (push descriptors and pooled
/// sets), each on a fresh validated context.
pub fn on_each_descriptor_path(test: impl Fn(&DeviceContext)) {
    for push in [true, false] {
        let options = options(Path::Direct).push_descriptors(push);
        run_with(options, &format!("push descriptors {push}"), &test);
    }
}

/// Runs `test` on both descriptor paths on both memory paths, each on a
/// fresh validated context; `test` gets a description of the context.
pub fn on_each_context(mut test: impl FnMut(&DeviceContext, &str)) {
    for push in [true, false] {
        for path in PATHS {
            let what = format!("push descriptors {push}, {path:?}");
            run_with(options(path).push_descriptors(push), &what, |ctx| {
                test(ctx, &what)
            });
        }
    }
}

/// Polls `f` to completion on this thread, parking until its waker wakes
/// it (at most 5 s at a time; the future must resolve within 60 s).
/// Returns the output and how many polls it took.
pub fn block_on<F: std::future::Future>(f: F) -> (F::Output, usize) {
    use std::task::{Context, Poll, Wake, Waker};
    use std::time::{Duration, Instant};
    struct Unpark(std::thread::Thread);
    impl Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(std::sync::Arc::new(Unpark(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut polls = 0;
    loop {
        polls += 1;
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return (v, polls);
        }
        std::thread::park_timeout(Duration::from_secs(5));
        assert!(Instant::now() < deadline, "never resolved");
    }
}

/// [`block_on`], without the count of polls.
pub fn resolve<F: std::future::Future>(f: F) -> F::Output {
    block_on(f).0
}

/// A fresh directory under the system's temporary directory, removed
/// when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let dir =
            std::env::temp_dir().join(format!("vkcompute-test-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("a temporary directory");
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Whether SPIR-V `words` declare a Workgroup variable with an initializer
/// (what needs `shaderZeroInitializeWorkgroupMemory`): an `OpVariable`
/// (opcode 59) of five words in storage class Workgroup (4).
pub fn has_initialized_workgroup_variable(words: &[u32]) -> bool {
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        if count == 0 {
            return false;
        }
        if words[at] & 0xffff == 59 && count == 5 && words.get(at + 3) == Some(&4) {
            return true;
        }
        at += count;
    }
    false
}

/// Deterministic pseudo-random numbers (xorshift64*), never all zero.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    pub fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| (self.next_u64() >> 56) as u8).collect()
    }
}

/// The push constants of `shaders/saxpy.comp`.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
pub struct Saxpy {
    pub a: f32,
    pub n: u32,
}

/// Writes `values` into `counts` at `at..` with the `STORE` kernel, one
/// dispatch per element: counts written on the device.
pub fn store(
    ctx: &DeviceContext,
    kernel: &vkcompute::Kernel,
    counts: &vkcompute::DeviceBuffer<u32>,
    at: usize,
    values: [u32; 3],
) {
    for (i, v) in values.into_iter().enumerate() {
        ctx.enqueue_function(kernel, 1, &[counts.arg()], &[(at + i) as u32, v])
            .unwrap();
    }
}
