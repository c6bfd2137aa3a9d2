//! Leaks and growth, threads, and a machine without a Vulkan driver.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{run_with, Path};
use vkcompute::{shaders, DeviceBuffer, DeviceContext, Error, HostBuffer, Kernel};

/// Create/use/drop cycles; `VKCOMPUTE_LEAK_CYCLES` overrides the count.
fn cycles() -> usize {
    std::env::var("VKCOMPUTE_LEAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000)
}

#[test]
fn a_hundred_thousand_create_use_drop_cycles_return_to_the_baseline() {
    // Staging and pooled descriptors, so every pool is exercised.
    let options = common::options(Path::Staging).push_descriptors(false);
    run_with(options, "create/use/drop cycles", |ctx| {
        let keep = ctx.enqueue_create_buffer::<u16>(64).unwrap();
        let data: Vec<u16> = (1..=64).collect();
        let cycle = |i: usize| {
            let tmp = ctx.enqueue_create_buffer::<u16>(64 + i % 7).unwrap();
            tmp.create_sub_buffer::<u16>(0, 64)
                .unwrap()
                .enqueue_copy_from(&data)
                .unwrap();
            tmp.enqueue_fill(i as u16 | 1).unwrap(); // 16-bit: the fill kernel
            keep.enqueue_copy_from(&tmp.create_sub_buffer::<u16>(0, 64).unwrap())
                .unwrap();
            // `tmp` drops here with its work in flight.
        };
        for i in 0..100 {
            cycle(i);
        }
        ctx.trim().unwrap();
        let baseline_bytes = ctx.diagnostics().allocated_bytes();
        let baseline = ctx.diagnostics().live_objects();
        let n = cycles();
        let mut most_pending = 0;
        for i in 0..n {
            cycle(i);
            if i % 1000 == 0 {
                most_pending = most_pending.max(ctx.diagnostics().live_objects().pending_frees);
            }
        }
        // Never synchronized above: the stream reclaims as it goes.
        assert!(
            most_pending < 20_000,
            "dropped buffers piled up: {most_pending} pending"
        );
        assert_eq!(keep.to_vec().unwrap(), vec![(n - 1) as u16 | 1; 64]);
        ctx.trim().unwrap();
        let after = ctx.diagnostics().live_objects();
        assert_eq!(
            ctx.diagnostics().allocated_bytes(),
            baseline_bytes,
            "allocator usage returns to its baseline"
        );
        assert_eq!(after.pending_frees, 0);
        assert_eq!(after.batches_in_flight, 0);
        assert_eq!(
            after.command_buffers, baseline.command_buffers,
            "{after:?} vs {baseline:?}"
        );
        assert_eq!(
            after.staging_buffers, baseline.staging_buffers,
            "{after:?} vs {baseline:?}"
        );
        assert_eq!(
            after.descriptor_pools, baseline.descriptor_pools,
            "{after:?} vs {baseline:?}"
        );
        assert!(
            after.commands_recorded >= 3 * n as u64,
            "upload, fill and copy per cycle"
        );
    });
}

const fn assert_send_sync<T: Send + Sync>() {}
const _: () = {
    assert_send_sync::<DeviceContext>();
    assert_send_sync::<DeviceBuffer<f32>>();
    assert_send_sync::<HostBuffer<u8>>();
    assert_send_sync::<Kernel>();
    assert_send_sync::<Error>();
};

#[test]
fn threads_enqueue_on_one_context_and_on_separate_streams_at_once() {
    for path in common::PATHS {
        run_with(common::options(path), "threads", |ctx| {
            let store = Kernel::new(ctx, shaders::STORE, "main").unwrap();
            let shared_input = ctx.enqueue_create_buffer::<u32>(4096).unwrap();
            shared_input
                .enqueue_copy_from(&(0..4096).collect::<Vec<u32>>())
                .unwrap();
            std::thread::scope(|s| {
                for t in 0..6u32 {
                    // Threads 0-2 share the context; 3-5 each get a stream.
                    let ctx = if t < 3 {
                        ctx.clone()
                    } else {
                        ctx.new_stream().unwrap()
                    };
                    let (store, input) = (&store, &shared_input);
                    s.spawn(move || {
                        let own = ctx.enqueue_create_buffer::<u32>(4096).unwrap();
                        let host = ctx.enqueue_create_host_buffer::<u32>(4096).unwrap();
                        for round in 0..40u32 {
                            own.enqueue_copy_from(input).unwrap();
                            ctx.enqueue_function(store, 1, &[own.arg()], &[t, round])
                                .unwrap();
                            own.enqueue_copy_to(&host).unwrap();
                            let got = host.as_slice().unwrap();
                            assert_eq!(got[t as usize], round, "thread {t} round {round}");
                            assert_eq!(got[4095], 4095);
                            drop(got);
                            let fill = ctx.enqueue_create_buffer::<u8>(333).unwrap();
                            fill.enqueue_fill(t as u8).unwrap();
                            assert_eq!(fill.to_vec().unwrap(), vec![t as u8; 333]);
                        }
                        ctx.synchronize().unwrap();
                    });
                }
            });
            assert_eq!(
                shared_input.to_vec().unwrap(),
                (0..4096).collect::<Vec<u32>>()
            );
        });
    }
}

/// Runs one test of this binary in a child process with `env` set.
fn run_child(test: &str, env: &[(&str, &str)]) -> std::process::Output {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = std::process::Command::new(exe);
    cmd.args([test, "--exact", "--nocapture", "--test-threads=1"])
        .env("VKCOMPUTE_CHILD", "1")
        // The loader's own complaints about the missing driver are expected.
        .env_remove("VKCOMPUTE_VALIDATION");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().unwrap()
}

#[test]
fn without_a_driver_new_fails_with_what_to_install() {
    if std::env::var_os("VKCOMPUTE_CHILD").is_some() {
        // In the child: no driver is visible.
        match DeviceContext::new() {
            Err(e @ Error::NoDevice { .. }) => {
                let text = e.to_string();
                assert!(text.contains("mesa-vulkan-drivers"), "{text}");
                println!("CHILD-OK: {text}");
            }
            other => panic!(
                "expected NoDevice, got {:?}",
                other.map(|c| c.name().to_string())
            ),
        }
        assert!(matches!(
            DeviceContext::devices(),
            Err(Error::NoDevice { .. })
        ));
        return;
    }
    let out = run_child(
        "without_a_driver_new_fails_with_what_to_install",
        &[
            ("VK_DRIVER_FILES", "/nonexistent/icd.json"),
            ("VK_ICD_FILENAMES", "/nonexistent/icd.json"),
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("CHILD-OK"),
        "child failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
