//! `bounds_saxpy` and `bounds_matmul`: what bounding a kernel's indices
//! costs. The same shipped module is loaded twice, through the safe API
//! (its dynamic indices into shared memory, function and private arrays,
//! vectors and matrices clamped) and through the unsafe path that skips
//! the clamps (`KernelBuilder::unchecked_indices` with `build_unvalidated`),
//! and the two dispatch in turn over the same buffers in one run. Each
//! reports its throughput; `*_unchecked` rows are the uninstrumented kernel,
//! and a `bounds_*_ratio` row gives instrumented / uninstrumented
//! throughput (target: at least 0.95).

use vkcompute::{DeviceContext, Kernel};

use super::{check, check_saxpy, grid_2d, Bench, BenchResult, Figure, Timing};

/// The safe kernel and the same module without bounds.
fn both(ctx: &DeviceContext, words: &[u32]) -> BenchResult<(Kernel, Kernel)> {
    let checked = Kernel::new(ctx, words, "main")?;
    // SAFETY: a shipped kernel, validated when it was compiled (build.rs),
    // whose indices stay in range (saxpy indexes only its buffers; matmul
    // indexes its 16 x 16 tiles with its 16 x 16 invocation ids and a loop
    // counter below 16).
    let unchecked = unsafe {
        Kernel::builder(words)
            .unchecked_indices()
            .build_unvalidated(ctx)
    }?;
    Ok((checked, unchecked))
}

impl Bench<'_> {
    /// Reports a pair and its ratio (throughput of the first over the second).
    fn report_bounds(&self, case: &str, bytes: usize, pair: (Timing, Timing), figure: Figure) {
        let (checked, unchecked) = pair;
        self.report(case, bytes, &checked, figure);
        self.report(&format!("{case}_unchecked"), bytes, &unchecked, figure);
        let ratio = unchecked.median / checked.median.max(1e-12);
        let row = Timing::ratio(ratio, checked.reps);
        self.report(&format!("{case}_ratio"), bytes, &row, Figure::Ratio);
    }

    pub(super) fn bounds(&self) -> BenchResult<()> {
        self.bounds_saxpy()?;
        self.bounds_matmul()
    }

    fn bounds_saxpy(&self) -> BenchResult<()> {
        const N: u32 = 1 << 22;
        let ctx = self.ctx;
        let x = ctx.enqueue_create_buffer::<f32>(N as usize)?;
        let y = ctx.enqueue_create_buffer::<f32>(N as usize)?;
        let x_host: Vec<f32> = (0..N).map(|i| (i % 1000) as f32 * 0.5 + 1.0).collect();
        x.enqueue_copy_from(&x_host)?;
        y.enqueue_fill(2.0f32)?;
        let (checked, unchecked) = both(ctx, vkcompute::shaders::SAXPY)?;
        let push = super::SaxpyParams { a: 0.5, n: N };
        let grid = grid_2d(N.div_ceil(256), ctx.info().limits.max_workgroup_count[0]);
        let run = |kernel: &Kernel| -> BenchResult<()> {
            ctx.enqueue_function(kernel, grid, &[x.arg(), y.arg()], &push)?;
            ctx.synchronize()?;
            Ok(())
        };
        let reps = self.reps(20);
        let pair = self.time_pair(
            ["bounds_saxpy", "bounds_saxpy_unchecked"],
            N as usize * 4,
            self.warmups(reps),
            reps,
            || run(&checked),
            || run(&unchecked),
        )?;
        let runs = 2 * (self.warmups(reps) + reps);
        check_saxpy("bounds_saxpy", &y, &x_host, runs)?;
        self.report_bounds(
            "bounds_saxpy",
            N as usize * 4,
            pair,
            Figure::GigabytesPerSecond(12.0 * f64::from(N)),
        );
        Ok(())
    }

    fn bounds_matmul(&self) -> BenchResult<()> {
        let n: u32 = if self.quick { 128 } else { 256 };
        let ctx = self.ctx;
        let len = (n * n) as usize;
        // Small integers: every product and sum is exact in f32.
        let a_host: Vec<f32> = (0..len).map(|i| (i % 7) as f32 - 3.0).collect();
        let b_host: Vec<f32> = (0..len).map(|i| (i % 5) as f32 - 2.0).collect();
        let a = ctx.enqueue_create_buffer::<f32>(len)?;
        let b = ctx.enqueue_create_buffer::<f32>(len)?;
        let c = ctx.enqueue_create_buffer::<f32>(len)?;
        a.enqueue_copy_from(&a_host)?;
        b.enqueue_copy_from(&b_host)?;
        let (checked, unchecked) = both(ctx, vkcompute::shaders::MATMUL)?;
        let run = |kernel: &Kernel| -> BenchResult<()> {
            ctx.enqueue_function(kernel, (n / 16, n / 16), &[a.arg(), b.arg(), c.arg()], &n)?;
            ctx.synchronize()?;
            Ok(())
        };
        let reps = self.reps(10);
        let pair = self.time_pair(
            ["bounds_matmul", "bounds_matmul_unchecked"],
            len * 4,
            self.warmups(reps),
            reps,
            || run(&checked),
            || run(&unchecked),
        )?;
        let got = c.to_vec()?;
        let n = n as usize;
        let wrong = (0..n)
            .step_by(7)
            .flat_map(|r| (0..n).step_by(5).map(move |col| (r, col)))
            .filter(|&(r, col)| {
                let want: f32 = (0..n)
                    .map(|k| a_host[r * n + k] * b_host[k * n + col])
                    .sum();
                got[r * n + col] != want
            })
            .count();
        check(
            wrong == 0,
            &format!("bounds_matmul: {wrong} sampled elements wrong"),
        )?;
        let flops = 2.0 * (n as f64).powi(3);
        self.report_bounds(
            "bounds_matmul",
            len * 4,
            pair,
            Figure::PerSecond(flops / 1e9, "GFLOP/s"),
        );
        Ok(())
    }
}
