//! Host waits with a time limit: `DeviceContext::synchronize_timeout` and
//! `Event::wait_timeout` return `Error::Timeout` when the work outlasts
//! the limit, change nothing (the work stays submitted and runs on), and a
//! later wait waits for it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::time::{Duration, Instant};

use common::{run_with, Path};
use vkcompute::{Error, Kernel};

/// Each invocation spins `steps` steps of a linear congruential generator
/// (at most 65,535: Mesa 22's lavapipe stops a loop after that many
/// iterations), each reading the buffer (`volatile`: the compiler may not
/// hoist or fold the loop); invocation 0 then writes the state, and every
/// one counts itself in `d[1]`. Long work is many workgroups.
const SPIN: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) volatile buffer D { uint d[]; };
layout(push_constant) uniform P { uint steps; } p;
void main() {
    uint x = gl_GlobalInvocationID.x;
    for (uint i = 0u; i < p.steps; i++) {
        x = x * 1664525u + 1013904223u + d[2];
    }
    if (gl_GlobalInvocationID.x == 0u) d[0] = x;
    atomicAdd(d[1], 1u);
}
"#;

#[test]
fn a_wait_with_a_limit_times_out_changes_nothing_and_a_later_wait_sees_the_end() {
    run_with(common::options(Path::Direct), "bounded waits", |ctx| {
        let spin = Kernel::from_glsl(ctx, SPIN, "main").unwrap();
        let d = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        d.enqueue_fill(0).unwrap();
        // Calibrate: double the workgroups until a dispatch takes 0.3 s,
        // then take five times as many (about 1.5 s).
        let time = |groups: u32| {
            ctx.synchronize().unwrap();
            let start = Instant::now();
            ctx.enqueue_function(&spin, groups, &[d.arg()], &60_000u32)
                .unwrap();
            ctx.synchronize().unwrap();
            start.elapsed()
        };
        let max_x = ctx.info().limits.max_workgroup_count[0];
        let mut groups = 1u32;
        while time(groups) < Duration::from_millis(300) && groups < max_x / 10 {
            groups *= 2;
        }
        let groups = (groups * 5).min(max_x);
        d.enqueue_fill(0).unwrap();
        ctx.enqueue_function(&spin, groups, &[d.arg()], &60_000u32)
            .unwrap();
        let event = ctx.enqueue_record_event().unwrap();
        let start = Instant::now();
        match ctx.synchronize_timeout(Duration::from_millis(50)) {
            Err(Error::Timeout { op, waited }) => {
                assert_eq!(op, "DeviceContext::synchronize_timeout");
                assert_eq!(waited, Duration::from_millis(50));
            }
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(
            start.elapsed() < Duration::from_millis(1000),
            "{:?}",
            start.elapsed()
        );
        match event.wait_timeout(Duration::from_millis(10)) {
            Err(Error::Timeout { .. }) => {}
            other => panic!("expected a timeout, got {other:?}"),
        }
        // The context still takes work, ordered after the spin.
        let e = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        e.enqueue_fill(9).unwrap();
        // A later wait waits for the end; the spin ran whole.
        ctx.synchronize_timeout(Duration::from_secs(600)).unwrap();
        event.wait_timeout(Duration::from_secs(1)).unwrap();
        assert_eq!(d.to_vec().unwrap()[1], groups * 64, "every invocation ran");
        assert_eq!(e.to_vec().unwrap(), [9; 4]);
    });
}
