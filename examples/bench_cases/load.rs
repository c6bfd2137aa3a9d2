//! `load_small` and `load_large`: what loading a kernel through the safe
//! API costs against the unsafe load that skips the checks
//! (`build_unvalidated` with `unchecked_indices`: no validator, no bounds
//! instrumentation; the reader, the limits and the pipeline remain). Each
//! load specializes a constant to a value no earlier load used, on a
//! context without a pipeline cache on disk, so no cache answers. The
//! small kernel is `VECTOR_ADD` (its workgroup size specialized), the
//! large one `load_large.comp` (a bitonic sort, a histogram and a scan in
//! shared memory, its SALT specialized). A `*_ratio` row gives safe /
//! unchecked load time against the target of 2. With feature `validate`
//! the safe load runs SPIRV-Tools on every module; without it only the
//! shipped kernels load safely, so `load_large` needs the feature.

use std::cell::Cell;

use vkcompute::{ContextOptions, DeviceContext, Kernel};

use super::{check, Bench, BenchResult, Figure, Timing};

/// The SPIR-V of `load_large.comp` (see its header).
const LARGE: &[u8] = include_bytes!("load_large.spv");

/// Target: the safe load at most this many times the unchecked one.
const TARGET: f64 = 2.0;

impl Bench<'_> {
    pub(super) fn load(&self) -> BenchResult<()> {
        let ctx = DeviceContext::with_options(
            ContextOptions::new()
                .force_staging(self.ctx.is_staging_forced())
                .pipeline_cache_dir(None),
        )?;
        let max_x = ctx.info().limits.max_workgroup_size[0].min(1024);
        // Workgroup sizes 1 to max_x, each used once.
        let next = Cell::new(0u32);
        let small = |checked: bool| {
            let size = next.get() % max_x + 1;
            next.set(next.get() + 1);
            load(&ctx, vkcompute::shaders::VECTOR_ADD, 0, size, checked)
        };
        let reps = self.reps(40);
        let warmups = self.warmups(reps);
        let runs = 2 * (warmups + reps);
        check(
            runs as u32 <= max_x,
            "load_small: more loads than workgroup sizes",
        )?;
        let pair = self.time_pair(
            ["load_small", "load_small_unchecked"],
            0,
            warmups,
            reps,
            || small(true).map(drop),
            || small(false).map(drop),
        )?;
        self.report_load("load_small", pair);
        // The last loads run right.
        let add = small(true)?;
        let (a, b) = (
            ctx.enqueue_create_buffer::<f32>(64)?,
            ctx.enqueue_create_buffer::<f32>(64)?,
        );
        a.enqueue_copy_from(&(0..64).map(|i| i as f32).collect::<Vec<_>>())?;
        b.enqueue_fill(0.5f32)?;
        let c = ctx.enqueue_create_buffer::<f32>(64)?;
        let groups = 64u32.div_ceil(add.local_size()[0]);
        ctx.enqueue_function(&add, groups, &[a.arg(), b.arg(), c.arg()], &64u32)?;
        let got = c.to_vec()?;
        check(
            got.iter().enumerate().all(|(i, &x)| x == i as f32 + 0.5),
            "load_small: the loaded kernel added wrong",
        )?;
        if !cfg!(feature = "validate") {
            eprintln!("bench: load_large needs feature `validate` (the safe load of a module vkcompute does not ship)");
            return Ok(());
        }
        let words: Vec<u32> = LARGE
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect();
        let salt = Cell::new(1u32);
        let large = |checked: bool| {
            salt.set(salt.get() + 1);
            load(&ctx, &words, 1, salt.get(), checked)
        };
        let reps = self.reps(20);
        let pair = self.time_pair(
            ["load_large", "load_large_unchecked"],
            0,
            self.warmups(reps),
            reps,
            || large(true).map(drop),
            || large(false).map(drop),
        )?;
        self.report_load("load_large", pair);
        // The last load sorts.
        let sort = large(true)?;
        let keys_host: Vec<u32> = (0..1024u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let keys = ctx.enqueue_create_buffer::<u32>(1024)?;
        keys.enqueue_copy_from(&keys_host)?;
        let offsets = ctx.enqueue_create_buffer::<u32>(256)?;
        ctx.enqueue_function(&sort, 1, &[keys.arg(), offsets.arg()], &())?;
        let mut want: Vec<u32> = keys_host.iter().map(|k| k ^ salt.get()).collect();
        want.sort_unstable();
        check(
            keys.to_vec()? == want,
            "load_large: the loaded kernel sorted wrong",
        )?;
        Ok(())
    }

    /// Reports a safe / unchecked pair and its ratio against [`TARGET`].
    fn report_load(&self, case: &str, (safe, unchecked): (Timing, Timing)) {
        self.report(case, 0, &safe, Figure::Milliseconds);
        self.report(
            &format!("{case}_unchecked"),
            0,
            &unchecked,
            Figure::Milliseconds,
        );
        self.report_ratio(&format!("{case}_ratio"), &safe, &unchecked, TARGET);
    }
}

/// Loads `words` with specialization constant `id` set to `value`, safely
/// (`checked`) or without checks.
fn load(
    ctx: &DeviceContext,
    words: &[u32],
    id: u32,
    value: u32,
    checked: bool,
) -> BenchResult<Kernel> {
    let builder = Kernel::builder(words).specialize(id, value);
    Ok(if checked {
        builder.build(ctx)?
    } else {
        // SAFETY: a module validated for Vulkan 1.2 when it was compiled
        // (VECTOR_ADD by build.rs, load_large.spv by spirv-val), whose
        // indices stay in range (VECTOR_ADD indexes only its buffers; the
        // sort's shared indices are below 1024 and its bins below 256).
        unsafe { builder.unchecked_indices().build_unvalidated(ctx)? }
    })
}
