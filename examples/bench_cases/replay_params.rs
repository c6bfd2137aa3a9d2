//! `replay_with_cost`: the host time of one `enqueue_graph_with` call that
//! changes the push constants of the graph's first dispatch and puts
//! another buffer in place of the one its last operation writes, for
//! graphs of 10 and 10,000 dispatches (`dispatches`; with `--quick` 10 and
//! 1,000). The dispatches are `enqueue_cost`'s (`ADD_ONE` on one
//! 64-element buffer, each depending on the one before); the last
//! operation copies the buffer into one of two outputs, alternately.
//! Issue 22's target, in one run: the longer graph costs at most 2x the
//! shorter one (`replay_with_cost_ratio`). The first replay of each graph,
//! which records the graph around the changed operations, is a warm-up.
//!
//! Each repetition times 10 calls (per call). Between repetitions,
//! untimed: the device runs the same work at both lengths (the shorter
//! graph's calls are followed by a filler graph's plain replays, on a
//! buffer of its own, up to the longer graph's dispatches), a wait, and
//! one more call, which opens the stream's next batch. On lavapipe the
//! device is the host's own cores, and the first command after a long
//! device run costs 28-48 us whatever it is (BENCHMARKS.md,
//! "`replay_with_cost` alone"): timed, that constant made the ratio
//! measure the device's run before the wait (100 dispatches at one
//! length, 100,000 at the other), or, with equal runs, hid the replay's
//! own cost under it.

use std::cell::Cell;

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
            let replays = Cell::new(0usize);
            // The same push constants, through the parameter path, and
            // the other output.
            let call = || -> BenchResult<()> {
                let out = &outs[1 + replays.get() % 2];
                replays.set(replays.get() + 1);
                let params = GraphParams::new()
                    .push(first, &LAUNCH_LEN)
                    .buffer(&outs[0], out)?;
                Ok(ctx.enqueue_graph_with(&graph, &params)?)
            };
            call()?;
            let t = self
                .time_host(
                    "replay_with_cost",
                    reps,
                    || (0..CALLS).try_for_each(|_| call()),
                    || {
                        if let Some((filler, _)) = &filler {
                            for _ in 0..CALLS {
                                ctx.enqueue_graph(filler)?;
                            }
                        }
                        ctx.synchronize()?;
                        call()
                    },
                )?
                .per(CALLS as u32);
            let replay = replays.get();
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
