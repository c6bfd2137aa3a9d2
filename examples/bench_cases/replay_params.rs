//! `replay_with_cost`: the host time of one `enqueue_graph_with` call that
//! changes the push constants of the graph's first dispatch and puts
//! another buffer in place of the one its last operation writes, for
//! graphs of 10 and 10,000 dispatches (`dispatches`; with `--quick` 10 and
//! 1,000). The dispatches are `enqueue_cost`'s (`ADD_ONE` on one
//! 64-element buffer, each depending on the one before); the last
//! operation copies the buffer into one of two outputs, alternately.
//! Each repetition times 10 calls (per call; a wait after them, untimed),
//! as `enqueue_cost` times 10,000: the first command after a wait also
//! opens the stream's next batch.
//! Issue 22's target, in one run: the longer graph costs at most 2x the
//! shorter one (`replay_with_cost_ratio`). The first replay of each graph,
//! which records the graph around the changed operations, is a warm-up.

use vkcompute::{DeviceBuffer, GraphParams};

use super::{check_words, Bench, BenchResult, Figure, LAUNCH_LEN};

/// Replay calls per timed repetition (one wait after them, untimed).
const CALLS: usize = 10;

impl Bench<'_> {
    pub(super) fn replay_with_cost(&self) -> BenchResult<()> {
        let ctx = self.ctx;
        let lengths: [u32; 2] = if self.quick {
            [10, 1_000]
        } else {
            [10, 10_000]
        };
        let mut rows = Vec::new();
        for dispatches in lengths {
            let (kernel, buf, start) = self.launch_setup()?;
            let outs: Vec<DeviceBuffer<u32>> = (0..3)
                .map(|_| ctx.enqueue_create_buffer::<u32>(LAUNCH_LEN as usize))
                .collect::<Result<_, _>>()?;
            outs[0].enqueue_fill(7)?;
            let mut g = ctx.capture_graph();
            let first = g.enqueue_function(&kernel, 1u32, &[buf.arg()], &LAUNCH_LEN)?;
            for _ in 1..dispatches {
                g.enqueue_function(&kernel, 1u32, &[buf.arg()], &LAUNCH_LEN)?;
            }
            g.enqueue_copy_to(&buf, &outs[0])?;
            let graph = g.finish()?;
            let reps = self.reps(10);
            let mut replay = 0;
            let t = self
                .time_host(
                    "replay_with_cost",
                    reps,
                    || {
                        for _ in 0..CALLS {
                            // The same push constants, through the parameter path.
                            let out = &outs[1 + replay % 2];
                            replay += 1;
                            let params = GraphParams::new()
                                .push(first, &LAUNCH_LEN)
                                .buffer(&outs[0], out)?;
                            ctx.enqueue_graph_with(&graph, &params)?;
                        }
                        Ok(())
                    },
                    || Ok(ctx.synchronize()?),
                )?
                .per(CALLS as u32);
            let added = (replay as u32).wrapping_mul(dispatches);
            let want: Vec<u32> = start.iter().map(|&v| v.wrapping_add(added)).collect();
            check_words("replay_with_cost", &buf.to_vec()?, &want)?;
            // The last replay wrote the output it was given.
            check_words(
                "replay_with_cost",
                &outs[1 + (replay - 1) % 2].to_vec()?,
                &want,
            )?;
            // The captured output is untouched.
            check_words(
                "replay_with_cost",
                &outs[0].to_vec()?,
                &vec![7; start.len()],
            )?;
            rows.push((dispatches, t));
        }
        for (dispatches, t) in &rows {
            let extra = [("dispatches", dispatches.to_string())];
            self.report_with("replay_with_cost", 0, t, Figure::Microseconds, &extra);
        }
        self.report_ratio("replay_with_cost_ratio", &rows[1].1, &rows[0].1, 2.0);
        Ok(())
    }
}
