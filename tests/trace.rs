//! The trace file (`ContextOptions::trace`): valid trace-event JSON with a
//! track per stream, one slice per recorded command in enqueue order (the
//! dispatch naming its kernel and grid), barrier instants between dependent
//! commands, cross-stream waits, and a device slice per submitted batch.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{assert_clean, context_with, Saxpy};
use serde_json::Value;
use vkcompute::{shaders, ContextOptions, Kernel};

#[test]
fn a_trace_holds_every_command_in_order_and_the_device_batches() {
    let dir = std::env::temp_dir().join(format!("vkcompute-trace-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    {
        let ctx = context_with(ContextOptions::new().validation(true).trace(&path));
        let log = ctx.diagnostics().validation_log();
        let saxpy = Kernel::new(&ctx, shaders::SAXPY, "main").unwrap();
        let n = 4096u32;
        let x = ctx
            .enqueue_create_buffer::<f32>(n as usize)
            .unwrap()
            .with_label("input \"x\"");
        let y = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
        x.enqueue_fill(1.0).unwrap();
        y.enqueue_fill(2.0).unwrap();
        ctx.enqueue_function(&saxpy, n / 256, &[x.arg(), y.arg()], &Saxpy { a: 3.0, n })
            .unwrap();
        ctx.synchronize().unwrap();
        // A second stream waits for the first.
        let other = ctx.new_stream().unwrap();
        let z = other.enqueue_create_buffer::<f32>(n as usize).unwrap();
        y.enqueue_fill(4.0).unwrap();
        z.enqueue_copy_from(&y).unwrap();
        assert_eq!(z.to_vec().unwrap(), vec![4.0; n as usize]);
        drop((x, y, z, saxpy, other));
        ctx.synchronize().unwrap();
        drop(ctx);
        assert_clean(&log, "a traced run");
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let events: Vec<Value> = serde_json::from_str(&text).expect("the trace is a JSON array");
    let names: Vec<(&str, &str, u64)> = events
        .iter()
        .filter(|e| e["ph"] == "X" || e["ph"] == "i")
        .map(|e| {
            (
                e["name"].as_str().unwrap(),
                e["ph"].as_str().unwrap(),
                e["tid"].as_u64().unwrap(),
            )
        })
        .collect();
    // The first stream's commands, in order, on one track.
    let first_track = events
        .iter()
        .find(|e| e["name"] == "DeviceBuffer::enqueue_fill")
        .unwrap()["tid"]
        .as_u64()
        .unwrap();
    let commands: Vec<&str> = names
        .iter()
        .filter(|(_, ph, tid)| *ph == "X" && *tid == first_track)
        .map(|(n, _, _)| *n)
        .collect();
    assert_eq!(
        commands[..3],
        [
            "DeviceBuffer::enqueue_fill",
            "DeviceBuffer::enqueue_fill",
            "DeviceContext::enqueue_function"
        ],
        "{commands:?}"
    );
    let dispatch = events
        .iter()
        .find(|e| e["name"] == "DeviceContext::enqueue_function")
        .unwrap();
    assert_eq!(dispatch["args"]["detail"], "kernel main grid [16, 1, 1]");
    // Buffers appear by label (escaped), or by handle and size.
    let ranges: Vec<&str> = dispatch["args"]["ranges"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(ranges[0], "read input \"x\" +0..+16384", "{ranges:?}");
    assert!(
        ranges[1].starts_with("write buffer 0x")
            && ranges[1].ends_with(" of 16384 bytes +0..+16384"),
        "{ranges:?}"
    );
    // The dispatch depends on both fills: a barrier before it.
    assert!(names
        .iter()
        .any(|(n, ph, tid)| *n == "barrier" && *ph == "i" && *tid == first_track));
    // The copy on the second stream waited for the first stream's fill.
    let copy = events
        .iter()
        .find(|e| e["name"] == "DeviceBuffer::enqueue_copy_from")
        .expect("the copy on the second stream");
    assert_ne!(copy["tid"].as_u64(), Some(first_track));
    assert!(names
        .iter()
        .any(|(n, _, tid)| *n == "wait" && Some(*tid) == copy["tid"].as_u64()));
    // Slices on a track are in time order.
    let times: Vec<f64> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["tid"].as_u64() == Some(first_track))
        .map(|e| e["ts"].as_f64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[0] <= w[1]), "{times:?}");
    // Device batches, measured, on their own tracks.
    let batches: Vec<&Value> = events.iter().filter(|e| e["name"] == "batch").collect();
    assert!(batches.len() >= 3, "{} batches", batches.len());
    assert!(batches
        .iter()
        .all(|b| b["dur"].as_f64().unwrap() >= 0.0 && b["tid"].as_u64() != Some(first_track)));
    assert!(batches
        .iter()
        .any(|b| b["args"]["commands"].as_u64().unwrap() >= 3));
    // Each command timed on the device too, by its label, on the device
    // track, inside a batch: the dispatch after the two fills.
    let device_track = batches[0]["tid"].as_u64();
    let timed: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["tid"].as_u64() == device_track && e["name"] != "batch")
        .collect();
    let labels: Vec<&str> = timed.iter().map(|e| e["name"].as_str().unwrap()).collect();
    let at = |name: &str| labels.iter().position(|l| *l == name);
    let dispatch_at = at("DeviceContext::enqueue_function: kernel main grid [16, 1, 1]")
        .unwrap_or_else(|| panic!("no device slice of the dispatch: {labels:?}"));
    let fills = labels[..dispatch_at]
        .iter()
        .filter(|l| **l == "DeviceBuffer::enqueue_fill")
        .count();
    assert!(fills >= 2, "{labels:?}");
    for command in &timed {
        let (ts, dur) = (
            command["ts"].as_f64().unwrap(),
            command["dur"].as_f64().unwrap(),
        );
        assert!(dur >= 0.0, "{command}");
        assert!(
            batches.iter().any(|b| {
                let (bts, bdur) = (b["ts"].as_f64().unwrap(), b["dur"].as_f64().unwrap());
                b["tid"].as_u64() == device_track && bts - 1.0 <= ts && ts + dur <= bts + bdur + 1.0
            }),
            "{command} lies in no batch"
        );
    }
    // Track names for a viewer.
    assert!(events.iter().any(|e| e["name"] == "thread_name"
        && e["args"]["name"]
            .as_str()
            .unwrap()
            .contains("device batches")));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_trace_file_that_cannot_be_created_is_a_clear_error() {
    let err = vkcompute::DeviceContext::with_options(
        ContextOptions::new().trace("/nonexistent-dir/for/sure/trace.json"),
    )
    .unwrap_err();
    assert!(err.to_string().contains("trace file"), "{err}");
}

/// Transfers on both memory paths appear in the trace: on the direct path
/// (the host copies through the mapping, no command) as a host slice whose
/// detail says so, with its range; through staging as recorded copies.
#[test]
fn transfers_on_both_paths_appear_in_the_trace() {
    for staging in [false, true] {
        let dir = std::env::temp_dir().join(format!(
            "vkcompute-trace-transfers-{}-{staging}",
            std::process::id()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("trace.json");
        {
            let options = ContextOptions::new()
                .validation(true)
                .force_staging(staging)
                .trace(&path);
            let ctx = context_with(options);
            let log = ctx.diagnostics().validation_log();
            let buf = ctx
                .enqueue_create_buffer::<u32>(1024)
                .unwrap()
                .with_label("weights");
            buf.enqueue_copy_from(&vec![7u32; 1024][..]).unwrap();
            assert_eq!(buf.to_vec().unwrap(), vec![7; 1024]);
            drop((buf, ctx));
            assert_clean(&log, "traced transfers");
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let events: Vec<Value> = serde_json::from_str(&text).unwrap();
        let slices: Vec<&Value> = events.iter().filter(|e| e["ph"] == "X").collect();
        let ranges = |e: &Value| -> Vec<String> {
            e["args"]["ranges"]
                .as_array()
                .map(|r| r.iter().map(|s| s.as_str().unwrap().to_string()).collect())
                .unwrap_or_default()
        };
        let direct: Vec<&&Value> = slices
            .iter()
            .filter(|e| {
                e["args"]["detail"]
                    .as_str()
                    .is_some_and(|d| d.starts_with("direct"))
            })
            .collect();
        let touches = |e: &Value, dir: &str| {
            ranges(e)
                .iter()
                .any(|r| *r == format!("{dir} weights +0..+4096"))
        };
        if staging {
            assert!(direct.is_empty(), "{direct:?}");
            // The staged upload and readback are copies into and out of
            // the buffer.
            assert!(slices.iter().any(|e| touches(e, "write")), "{slices:?}");
            assert!(slices.iter().any(|e| touches(e, "read")), "{slices:?}");
        } else {
            assert!(direct.iter().any(|e| touches(e, "write")), "{direct:?}");
            assert!(direct.iter().any(|e| touches(e, "read")), "{direct:?}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

/// `trace_commands(false)` times batches only: the device track holds
/// batch slices and no command's.
#[test]
fn a_trace_without_command_timing_has_batch_slices_only() {
    let dir = std::env::temp_dir().join(format!("vkcompute-trace-batches-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    {
        let options = ContextOptions::new()
            .validation(true)
            .trace(&path)
            .trace_commands(false);
        let ctx = context_with(options);
        let log = ctx.diagnostics().validation_log();
        let buf = ctx.enqueue_create_buffer::<u32>(4096).unwrap();
        buf.enqueue_fill(1).unwrap();
        buf.enqueue_fill(2).unwrap();
        ctx.synchronize().unwrap();
        drop((buf, ctx));
        assert_clean(&log, "a batches-only trace");
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let events: Vec<Value> = serde_json::from_str(&text).unwrap();
    let batches: Vec<&Value> = events.iter().filter(|e| e["name"] == "batch").collect();
    assert!(!batches.is_empty());
    let device_track = batches[0]["tid"].as_u64();
    let others: Vec<&Value> = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["tid"].as_u64() == device_track && e["name"] != "batch")
        .collect();
    assert!(others.is_empty(), "{others:?}");
    // The host track still has both fills.
    let fills = events
        .iter()
        .filter(|e| e["ph"] == "X" && e["name"] == "DeviceBuffer::enqueue_fill")
        .count();
    assert_eq!(fills, 2);
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Tracing without validation names objects too (`VK_EXT_debug_utils` is
/// enabled for the tools that read the trace beside it): labelled buffers,
/// kernels, graphs and streams work there, and the trace is written.
#[test]
fn a_trace_without_validation_names_objects_and_runs() {
    let dir = std::env::temp_dir().join(format!("vkcompute-trace-names-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("trace.json");
    {
        let ctx = vkcompute::DeviceContext::with_options(
            ContextOptions::new().validation(false).trace(&path),
        )
        .unwrap()
        .with_label("named stream");
        let saxpy = Kernel::new(&ctx, shaders::SAXPY, "main").unwrap();
        let x = ctx
            .enqueue_create_buffer::<f32>(256)
            .unwrap()
            .with_label("x");
        let y = ctx
            .enqueue_create_buffer::<f32>(256)
            .unwrap()
            .with_label("y");
        x.enqueue_fill(1.0).unwrap();
        y.enqueue_fill(0.0).unwrap();
        let mut g = ctx.capture_graph();
        g.label("named graph");
        g.enqueue_function(&saxpy, 1, &[x.arg(), y.arg()], &Saxpy { a: 2.0, n: 256 })
            .unwrap();
        ctx.enqueue_graph(&g.finish().unwrap()).unwrap();
        assert_eq!(y.to_vec().unwrap(), vec![2.0; 256]);
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let events: Vec<Value> = serde_json::from_str(&text).unwrap();
    assert!(events.iter().any(|e| e["name"]
        .as_str()
        .is_some_and(|n| n.contains("named graph"))));
    std::fs::remove_dir_all(&dir).unwrap();
}
