//! `trace_overhead`: what tracing costs. `launches`' work (dependent
//! `ADD_ONE` dispatches on one 64-element buffer, then a wait; 10,000, or
//! 1,000 with `--quick`) on the bench's context and on two traced contexts
//! of the same device, in the same run: one times batches only
//! (`trace_commands(false)`: a host slice per command, a device slice per
//! batch), the other every command too (two device timestamps around each,
//! so commands merge no copies and batches do not grow past 4,096
//! commands). `trace_overhead_batches_ratio` and
//! `trace_overhead_commands_ratio` are traced time over untraced time,
//! reported with no target.

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
        let traced = |commands: bool, file: &str| {
            DeviceContext::with_options(
                ContextOptions::new()
                    .force_staging(self.staging)
                    .trace(path.with_file_name(file))
                    .trace_commands(commands),
            )
        };
        let batches = traced(false, "batches.json")?;
        let commands = traced(true, "commands.json")?;
        let mut rows: Vec<Timing> = Vec::new();
        for (case, ctx) in [
            ("trace_overhead_untraced", self.ctx),
            ("trace_overhead_batches", &batches),
            ("trace_overhead_commands", &commands),
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
            let launches = (warmups + reps) as u64 * u64::from(count);
            self.launches_check(case, &buf, &start, launches)?;
            let figure = Figure::PerSecond(f64::from(count), "launches/s");
            self.report(case, 0, &t, figure);
            rows.push(t);
        }
        for (case, row) in [
            ("trace_overhead_batches_ratio", &rows[1]),
            ("trace_overhead_commands_ratio", &rows[2]),
        ] {
            let ratio = row.median / rows[0].median.max(1e-12);
            self.report(case, 0, &Timing::ratio(ratio, row.reps), Figure::Ratio);
        }
        Ok(())
    }
}
