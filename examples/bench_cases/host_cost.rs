//! `record_raw`, `scale_buffers` and `scale_inflight`: the host cost of one
//! `enqueue_function` call (the dispatch `enqueue_cost` times: `ADD_ONE` on
//! one 64-element buffer, each dispatch depending on the one before),
//! against the same dispatch recorded by hand, and as the work around it
//! grows. Issue 22's targets, each in one run: `enqueue_cost` at most 4x
//! `record_raw`; the largest `scale_*` point at most 2x the smallest. Each
//! `*_ratio` row gives the ratio as its value, with `target` and `met`.
//!
//! - `record_raw`: 10,000 of those dispatches recorded by minimal `ash`
//!   into one command buffer, each with what it needs of its own: the
//!   barrier after the dispatch before, bind pipeline, push descriptor
//!   (binding a written descriptor set where the runtime pushes none),
//!   push constants, dispatch; host time from begin to end of the command
//!   buffer, per command. Its repetitions alternate with those of
//!   `enqueue_cost`'s 10,000 calls (`record_raw_enqueue`), and
//!   `record_raw_ratio` is enqueue / raw.
//! - `scale_buffers`: `enqueue_cost` with 1, 1,000 and 100,000 live buffers
//!   of 64 `u32` (`live`, the dispatch's own buffer included; each other
//!   buffer was filled once); with `--quick` 1, 100 and 1,000.
//! - `scale_inflight`: `enqueue_cost` (10,000 calls, per call) made once
//!   10, 1,000 and 100,000 commands have been recorded since the last wait
//!   (`inflight`; the prefix is enqueued untimed after a wait, in every
//!   repetition); with `--quick` 1,000 calls after 10, 100 and 1,000.

use std::time::Instant;

use vkcompute::ash::{self, vk};
use vkcompute::{DeviceBuffer, DeviceContext};

use super::{
    barrier_before, barrier_between, check, enqueue_launches, summarize, vk_err, Bench,
    BenchResult, Figure, RawDispatch, Timing, LAUNCHES, LAUNCH_LEN,
};

/// Whether the runtime pushes descriptors on `ctx`'s device: the device
/// has `VK_KHR_push_descriptor` and `VKCOMPUTE_PUSH_DESCRIPTORS` does not
/// turn it off (the runtime's default is on).
fn runtime_pushes_descriptors(ctx: &DeviceContext) -> BenchResult<bool> {
    // SAFETY: the physical device is the context's, of its live instance.
    let extensions = unsafe {
        ctx.raw()
            .instance()
            .enumerate_device_extension_properties(ctx.raw().physical_device())
    }
    .map_err(vk_err("vkEnumerateDeviceExtensionProperties"))?;
    let supported = extensions
        .iter()
        .any(|e| e.extension_name_as_c_str() == Ok(ash::khr::push_descriptor::NAME));
    let off = std::env::var("VKCOMPUTE_PUSH_DESCRIPTORS").is_ok_and(|v| {
        !matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        )
    });
    Ok(supported && !off)
}

impl RawDispatch {
    /// Records the command buffer again with `count` dispatches of the
    /// pipeline, each with its barrier and binds.
    fn record_launches(&self, count: u32, push: &[u8]) -> BenchResult<()> {
        let d = &self.device;
        let cb = self.command_buffer;
        let (before, between) = (barrier_before(), barrier_between());
        // SAFETY: the pool's one command buffer is not pending: every
        // submission of it was waited for.
        unsafe { d.reset_command_pool(self.command_pool, vk::CommandPoolResetFlags::empty()) }
            .map_err(vk_err("vkResetCommandPool"))?;
        let info = vk::CommandBufferBeginInfo::default()
            .flags(vk::CommandBufferUsageFlags::ONE_TIME_SUBMIT);
        // SAFETY: `cb` was reset with its pool, which only this thread uses.
        unsafe { d.begin_command_buffer(cb, &info) }.map_err(vk_err("vkBeginCommandBuffer"))?;
        for i in 0..count {
            let (src, barrier) = if i == 0 {
                (vk::PipelineStageFlags::ALL_COMMANDS, &before)
            } else {
                (vk::PipelineStageFlags::COMPUTE_SHADER, &between)
            };
            // SAFETY: `cb` is recording; the barrier is well formed; the
            // binds match the pipeline (`record_binds`).
            unsafe {
                d.cmd_pipeline_barrier(
                    cb,
                    src,
                    vk::PipelineStageFlags::COMPUTE_SHADER,
                    vk::DependencyFlags::empty(),
                    barrier,
                    &[],
                    &[],
                );
                self.record_binds(cb, push);
                d.cmd_dispatch(cb, 1, 1, 1);
            }
        }
        // SAFETY: `cb` is recording.
        unsafe { self.record_end(cb) }
    }
}

impl Bench<'_> {
    /// Reports `larger / smaller` as row `case`, against `target`.
    pub(super) fn report_ratio(&self, case: &str, larger: &Timing, smaller: &Timing, target: f64) {
        let ratio = larger.median / smaller.median.max(1e-12);
        let row = Timing::ratio(ratio, larger.reps);
        let extra = [
            ("target", format!("{target}")),
            ("met", format!("{}", ratio <= target)),
        ];
        self.report_with(case, 0, &row, Figure::Ratio, &extra);
    }

    pub(super) fn record_raw(&self) -> BenchResult<()> {
        let ctx = self.ctx;
        let (kernel, buf, start) = self.launch_setup()?;
        let push = bytemuck::bytes_of(&LAUNCH_LEN);
        let pushes = runtime_pushes_descriptors(ctx)?;
        let raw = RawDispatch::new(
            ctx,
            vkcompute::shaders::ADD_ONE,
            &[buf.raw()],
            push,
            [1, 1, 1],
            1,
            pushes,
        )?;
        let reps = self.reps(10);
        let warmups = self.warmups(reps);
        eprintln!(
            "bench: [{:7.1} s] record_raw and record_raw_enqueue, alternating: {warmups} warm-up \
             + {reps} timed each (host time only; push descriptors: {pushes})",
            self.start.elapsed().as_secs_f64(),
        );
        let (mut raw_times, mut enqueue_times) = (Vec::new(), Vec::new());
        for i in 0..warmups + reps {
            let t0 = Instant::now();
            raw.record_launches(LAUNCHES, push)?;
            let raw_time = t0.elapsed().as_secs_f64();
            let t0 = Instant::now();
            enqueue_launches(ctx, &kernel, &buf, LAUNCHES)?;
            let enqueue_time = t0.elapsed().as_secs_f64();
            ctx.synchronize()?;
            if i >= warmups {
                raw_times.push(raw_time);
                enqueue_times.push(enqueue_time);
            }
        }
        // The last raw recording runs once (the runtime is idle), so that
        // the check covers it too.
        raw.run()?;
        drop(raw);
        self.launch_check("record_raw", &buf, &start, warmups + reps + 1)?;
        let raw_t = summarize(raw_times)?.per(LAUNCHES);
        let enqueue_t = summarize(enqueue_times)?.per(LAUNCHES);
        let descriptors = [("push_descriptors", format!("{pushes}"))];
        self.report_with("record_raw", 0, &raw_t, Figure::Nanoseconds, &descriptors);
        self.report("record_raw_enqueue", 0, &enqueue_t, Figure::Nanoseconds);
        self.report_ratio("record_raw_ratio", &enqueue_t, &raw_t, 4.0);
        Ok(())
    }

    pub(super) fn scale_buffers(&self) -> BenchResult<()> {
        let ctx = self.ctx;
        let (kernel, buf, start) = self.launch_setup()?;
        let points: [usize; 3] = if self.quick {
            [1, 100, 1_000]
        } else {
            [1, 1_000, 100_000]
        };
        let mut others: Vec<DeviceBuffer<u32>> = Vec::new();
        let fill_value = |i: usize| i as u32 * 7 + 1;
        let mut runs = 0;
        let mut rows = Vec::new();
        for live in points {
            eprintln!(
                "bench: [{:7.1} s] scale_buffers: making {} live buffers",
                self.start.elapsed().as_secs_f64(),
                live
            );
            while others.len() + 1 < live {
                let b = ctx.enqueue_create_buffer::<u32>(LAUNCH_LEN as usize)?;
                b.enqueue_fill(fill_value(others.len()))?;
                others.push(b);
            }
            ctx.synchronize()?;
            let (t, reps) = self.time_enqueue_cost("scale_buffers", &kernel, &buf)?;
            runs += reps;
            rows.push((live, t));
        }
        self.launch_check("scale_buffers", &buf, &start, runs)?;
        for i in [0, others.len() / 2, others.len().saturating_sub(1)] {
            if let Some(b) = others.get(i) {
                let want = fill_value(i);
                check(
                    b.to_vec()?.iter().all(|&v| v == want),
                    &format!("scale_buffers: live buffer {i} filled with {want} reads otherwise"),
                )?;
            }
        }
        for (live, t) in &rows {
            let extra = [("live", live.to_string())];
            self.report_with("scale_buffers", 0, t, Figure::Nanoseconds, &extra);
        }
        self.report_ratio("scale_buffers_ratio", &rows[2].1, &rows[0].1, 2.0);
        Ok(())
    }

    pub(super) fn scale_inflight(&self) -> BenchResult<()> {
        let ctx = self.ctx;
        let (kernel, buf, start) = self.launch_setup()?;
        let (points, window): ([u32; 3], u32) = if self.quick {
            ([10, 100, 1_000], 1_000)
        } else {
            ([10, 1_000, 100_000], LAUNCHES)
        };
        let reps = self.reps(5);
        let warmups = self.warmups(reps);
        let mut launches = 0u64;
        let mut rows = Vec::new();
        for inflight in points {
            eprintln!(
                "bench: [{:7.1} s] scale_inflight: {warmups} warm-up + {reps} timed: {window} \
                 calls after {inflight} (host time only)",
                self.start.elapsed().as_secs_f64(),
            );
            let mut times = Vec::new();
            for rep in 0..warmups + reps {
                ctx.synchronize()?;
                enqueue_launches(ctx, &kernel, &buf, inflight)?;
                let t0 = Instant::now();
                enqueue_launches(ctx, &kernel, &buf, window)?;
                let t = t0.elapsed().as_secs_f64();
                if rep >= warmups {
                    times.push(t);
                }
                launches += u64::from(inflight + window);
            }
            rows.push((inflight, summarize(times)?.per(window)));
        }
        ctx.synchronize()?;
        self.launches_check("scale_inflight", &buf, &start, launches)?;
        for (inflight, t) in &rows {
            let extra = [("inflight", inflight.to_string())];
            self.report_with("scale_inflight", 0, t, Figure::Nanoseconds, &extra);
        }
        self.report_ratio("scale_inflight_ratio", &rows[2].1, &rows[0].1, 2.0);
        Ok(())
    }
}
