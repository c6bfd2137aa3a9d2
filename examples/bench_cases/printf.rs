//! `printf_unreached`, `printf_reached` and `printf_floor`: what
//! `debugPrintfEXT` costs a kernel. The same saxpy over 16 Mi elements
//! (`printf_saxpy.comp`), built four ways, dispatches in turn over the same
//! buffers in one run: without a call (`printf_plain`), with a call no
//! invocation reaches, with one that one invocation reaches each dispatch
//! (one record, read back when the dispatch completes), and with an
//! unreached atomic add and store in the call's place. A `*_ratio` row
//! gives plain / other throughput: the unreached call's target is at
//! least 0.95; the others have none (the reached call adds a record buffer
//! and its read per dispatch).
//! A kernel without a call is the module as it was: the rewriting leaves
//! it alone.
//!
//! What an unreached call costs depends on whether the driver branches
//! around code no invocation runs. GPUs do, and so does Mesa 25's
//! lavapipe (measured: 0.98-0.99); Mesa 22's lavapipe runs every branch
//! with its lanes masked off, so there the append's memory operations (an
//! atomic add and two 16-byte stores here) run for every invocation,
//! masked (measured: 0.68-0.75). `printf_floor` bounds what any append can
//! cost there (measured: 0.82-0.83): the same saxpy with, in the printf's
//! place, the least an append does, an atomic add and one word's store,
//! that no invocation reaches (`printf_saxpy_floor.spv`; no target).

use vkcompute::{ContextOptions, DeviceContext, Kernel, PrintfOutput};

use super::{check_saxpy, grid_2d, Bench, BenchResult, Figure, Timing};

const PLAIN: &[u8] = include_bytes!("printf_saxpy_plain.spv");
const UNREACHED: &[u8] = include_bytes!("printf_saxpy_unreached.spv");
const REACHED: &[u8] = include_bytes!("printf_saxpy_reached.spv");
const FLOOR: &[u8] = include_bytes!("printf_saxpy_floor.spv");

/// Target: the plain kernel at most this much faster than the one with an
/// unreached call.
const TARGET: f64 = 0.95;

fn load(ctx: &DeviceContext, bytes: &[u8]) -> BenchResult<Kernel> {
    // SAFETY: printf_saxpy_*.spv are valid SPIR-V for Vulkan 1.2
    // (spirv-val, when they were compiled); their indices are bounded like
    // any kernel's (this load clamps them).
    Ok(unsafe { Kernel::new_unvalidated(ctx, bytes, "main") }?)
}

impl Bench<'_> {
    pub(super) fn printf(&self) -> BenchResult<()> {
        const N: u32 = 1 << 24;
        // Lines go to the log (not the table on stdout).
        let ctx = DeviceContext::with_options(
            ContextOptions::new()
                .force_staging(self.ctx.is_staging_forced())
                .printf(PrintfOutput::Log),
        )?;
        let ctx = &ctx;
        let x = ctx.enqueue_create_buffer::<f32>(N as usize)?;
        let y = ctx.enqueue_create_buffer::<f32>(N as usize)?;
        let x_host: Vec<f32> = (0..N).map(|i| (i % 1000) as f32 * 0.5 + 1.0).collect();
        x.enqueue_copy_from(&x_host)?;
        y.enqueue_fill(2.0f32)?;
        let plain = load(ctx, PLAIN)?;
        let unreached = load(ctx, UNREACHED)?;
        let reached = load(ctx, REACHED)?;
        let floor = load(ctx, FLOOR)?;
        let cursor = ctx.enqueue_create_buffer::<u32>(65)?;
        cursor.enqueue_fill(0)?;
        let grid = grid_2d(N.div_ceil(256), ctx.info().limits.max_workgroup_count[0]);
        let push = super::SaxpyParams { a: 0.5, n: N };
        let run = |kernel: &Kernel| -> BenchResult<()> {
            // The floor kernel binds the buffer its atomic would write.
            let args = [x.arg(), y.arg(), cursor.arg()];
            let bound = kernel.bindings().len();
            ctx.enqueue_function(kernel, grid, &args[..bound.min(args.len())], &push)?;
            ctx.synchronize()?;
            Ok(())
        };
        let reps = self.reps(20);
        let warmups = self.warmups(reps);
        let figure = Figure::GigabytesPerSecond(12.0 * f64::from(N));
        for (case, printing) in [
            ("printf_unreached", &unreached),
            ("printf_reached", &reached),
            ("printf_floor", &floor),
        ] {
            let pair = self.time_pair(
                [case, "printf_plain"],
                N as usize * 4,
                warmups,
                reps,
                || run(printing),
                || run(&plain),
            )?;
            let (printing_t, plain_t) = pair;
            self.report(case, N as usize * 4, &printing_t, figure);
            self.report("printf_plain", N as usize * 4, &plain_t, figure);
            let ratio = plain_t.median / printing_t.median.max(1e-12);
            let row = Timing::ratio(ratio, printing_t.reps);
            if case == "printf_unreached" {
                self.report_with(
                    &format!("{case}_ratio"),
                    N as usize * 4,
                    &row,
                    Figure::Ratio,
                    &[
                        ("target", format!("{TARGET}")),
                        ("met", format!("{}", ratio >= TARGET)),
                    ],
                );
            } else {
                self.report(
                    &format!("{case}_ratio"),
                    N as usize * 4,
                    &row,
                    Figure::Ratio,
                );
            }
        }
        let runs = 6 * (warmups + reps);
        check_saxpy("printf", &y, &x_host, runs)?;
        let floor_words = cursor.to_vec()?;
        super::check(
            floor_words.iter().all(|&w| w == 0),
            "printf_floor: the unreached append ran",
        )
    }
}
