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
//!
//! The device runs the same work before each untimed wait at both
//! lengths: the shorter graph's repetitions are followed by a filler
//! graph's plain replays (on a buffer of its own) up to the longer
//! graph's dispatches. On lavapipe the device is the host's own cores,
//! and the first command after a long device run costs 28-48 us whatever
//! it is (BENCHMARKS.md, "`replay_with_cost` alone"); with 100 dispatches
//! before the short graph's wait against 100,000 before the long one's,
//! the ratio measured that effect rather than the replay.

use vkcompute::{DeviceBuffer, Graph, GraphParams, Kernel};

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
        let longest = lengths[1];
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
            let filler = self.filler(&kernel, longest - dispatches)?;
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
                    || {
                        if let Some((filler, _)) = &filler {
                            for _ in 0..CALLS {
                                ctx.enqueue_graph(filler)?;
                            }
                        }
                        Ok(ctx.synchronize()?)
                    },
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

    /// A graph of `dispatches` `ADD_ONE` dispatches on a buffer of its own
    /// (returned with it, so that it outlives the graph's replays), or
    /// `None` for none.
    fn filler(
        &self,
        kernel: &Kernel,
        dispatches: u32,
    ) -> BenchResult<Option<(Graph, DeviceBuffer<u32>)>> {
        if dispatches == 0 {
            return Ok(None);
        }
        let buf = self.ctx.enqueue_create_buffer::<u32>(LAUNCH_LEN as usize)?;
        buf.enqueue_fill(0)?;
        let mut g = self.ctx.capture_graph();
        for _ in 0..dispatches {
            g.enqueue_function(kernel, 1u32, &[buf.arg()], &LAUNCH_LEN)?;
        }
        Ok(Some((g.finish()?, buf)))
    }
}
