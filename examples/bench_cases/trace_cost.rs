//! `trace_overhead`: what tracing costs. `launches`' work (dependent
//! `ADD_ONE` dispatches on one 64-element buffer, then a wait; 10,000, or
//! 1,000 with `--quick`) on the bench's context and on a traced context of
//! the same device, in the same run: `trace_overhead_ratio` is traced time
//! over untraced time. A traced stream writes a host slice for every
//! command, a device slice for every batch and, around each of a batch's
//! first 64 commands, two device timestamps (so those commands merge no
//! copies). The ratio is reported, with no target.

use vkcompute::{ContextOptions, DeviceContext, Kernel};

use super::{enqueue_launches, word_pattern, Bench, BenchResult, Figure, Timing, LAUNCH_LEN};

impl Bench<'_> {
    pub(super) fn trace_overhead(&self) -> BenchResult<()> {
        let dir =
            std::env::temp_dir().join(format!("vkcompute-bench-trace-{}", std::process::id()));
        std::fs::create_dir_all(&dir)?;
        let result = self.trace_overhead_in(&dir.join("trace.json"));
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    fn trace_overhead_in(&self, path: &std::path::Path) -> BenchResult<()> {
        let count = if self.quick { 1_000 } else { 10_000 };
        let traced = DeviceContext::with_options(
            ContextOptions::new()
                .force_staging(self.staging)
                .trace(path),
        )?;
        let mut rows: Vec<Timing> = Vec::new();
        for (case, ctx) in [
            ("trace_overhead_untraced", self.ctx),
            ("trace_overhead_traced", &traced),
        ] {
            let kernel = Kernel::new(ctx, vkcompute::shaders::ADD_ONE, "main")?;
            let start = word_pattern(LAUNCH_LEN as usize);
            let buf = ctx.enqueue_create_buffer::<u32>(LAUNCH_LEN as usize)?;
            buf.enqueue_copy_from(&start[..])?;
            ctx.synchronize()?;
            let reps = self.reps(10);
            let warmups = self.warmups(reps);
            let t = self.time(case, 0, warmups, reps, || {
                enqueue_launches(ctx, &kernel, &buf, count)?;
                ctx.synchronize()?;
                Ok(())
            })?;
            self.launches_check(
                case,
                &buf,
                &start,
                (warmups + reps) as u64 * u64::from(count),
            )?;
            self.report(
                case,
                0,
                &t,
                Figure::PerSecond(f64::from(count), "launches/s"),
            );
            rows.push(t);
        }
        let ratio = rows[1].median / rows[0].median.max(1e-12);
        self.report(
            "trace_overhead_ratio",
            0,
            &Timing::ratio(ratio, rows[1].reps),
            Figure::Ratio,
        );
        Ok(())
    }
}
