//! The trace file (`ContextOptions::trace`): valid trace-event JSON with a
//! track per stream, one slice per recorded command in enqueue order (the
//! dispatch naming its kernel and grid), barrier instants between dependent
//! commands, cross-stream waits, and a device slice per submitted batch;
//! still valid with faults injected inside traced commands, long batches,
//! streams dropped with work in flight, and four threads writing.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{assert_clean, context_with, options, Path, Saxpy, TempDir};
use serde_json::Value;
use vkcompute::{shaders, ContextOptions, DeviceBuffer, GraphParams, Kernel};

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

/// Allocation failures injected at every point of an indirect dispatch and
/// of a parameterized replay on a traced context with pooled descriptors:
/// each is an error, the context stays usable, validation stays clean
/// (timestamps of a failed command's slot are not written twice).
#[cfg(feature = "fault-injection")]
#[test]
fn faults_inside_traced_indirect_and_live_replays() {
    for push in [false, true] {
        let dir = TempDir::new(&format!("review2-trace-{push}"));
        let opts = options(Path::Direct)
            .push_descriptors(push)
            .trace(dir.0.join("t.json"))
            .trace_commands(true);
        let ctx = context_with(opts);
        let log = ctx.diagnostics().validation_log();
        let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
        let data = ctx.enqueue_create_buffer::<u32>(64).unwrap();
        data.enqueue_fill(0).unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        counts.enqueue_copy_from(&[1u32, 1, 1][..]).unwrap();
        let mut g = ctx.capture_graph();
        let id = g
            .enqueue_function_indirect(&add_one, &counts, 0, &[data.arg()], &64u32)
            .unwrap();
        g.enqueue_function(&add_one, 1, &[data.arg()], &64u32)
            .unwrap();
        let graph = g.finish().unwrap();
        let mut want = 0u32;
        let mut failures = 0;
        for nth in 1..12u64 {
            for which in 0..2 {
                ctx.synchronize().unwrap();
                vkcompute::testing::fail_allocation(&ctx, nth);
                let r = if which == 0 {
                    ctx.enqueue_function_indirect(&add_one, &counts, 0, &[data.arg()], &64u32)
                } else {
                    ctx.enqueue_graph_with(&graph, &GraphParams::new().push(id, &64u32))
                };
                let fired = vkcompute::testing::fault_injected(&ctx);
                vkcompute::testing::fail_allocation(&ctx, 0);
                match r {
                    Ok(()) => want += if which == 0 { 1 } else { 2 },
                    Err(e) => {
                        assert!(fired, "an error without a fault: {e}");
                        failures += 1;
                    }
                }
                // Usable after: a plain dispatch and a readback.
                ctx.enqueue_function(&add_one, 1, &[data.arg()], &64u32)
                    .unwrap();
                want += 1;
                let got = data.to_vec();
                match got {
                    Ok(v) => {
                        // A failed live replay may have run part of itself:
                        // report rather than assume.
                        if v[0] != want {
                            eprintln!(
                                "push {push} nth {nth} which {which}: got {} want {want}",
                                v[0]
                            );
                            want = v[0];
                        }
                    }
                    Err(e) => panic!("push {push} nth {nth} which {which}: readback {e}"),
                }
            }
        }
        eprintln!("push {push}: {failures} injected failures");
        drop(graph);
        ctx.synchronize().unwrap();
        drop(ctx);
        assert_clean(&log, &format!("push descriptors {push}"));
    }
}

/// A traced stream with more commands in one batch than the timing slots
/// (batches must not grow), indirect dispatches and parameterized replays
/// among them.
#[test]
fn a_traced_stream_with_long_batches() {
    let dir = TempDir::new("review2-trace-long");
    let opts: ContextOptions = options(Path::Direct).trace(dir.0.join("t.json"));
    let ctx = context_with(opts);
    let log = ctx.diagnostics().validation_log();
    let st = Kernel::new(&ctx, shaders::STORE, "main").unwrap();
    let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
    let b = ctx.enqueue_create_buffer::<u32>(64).unwrap();
    b.enqueue_fill(0).unwrap();
    let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
    counts.enqueue_copy_from(&[1u32, 1, 1][..]).unwrap();
    let mut g = ctx.capture_graph();
    let id = g.enqueue_function(&add_one, 1, &[b.arg()], &64u32).unwrap();
    let graph = g.finish().unwrap();
    let other = ctx.new_stream().unwrap();
    for i in 0..9000u32 {
        match i % 5 {
            0 => ctx
                .enqueue_function_indirect(&add_one, &counts, 0, &[b.arg()], &64u32)
                .unwrap(),
            1 => ctx
                .enqueue_graph_with(&graph, &GraphParams::new().push(id, &64u32))
                .unwrap(),
            2 => ctx.enqueue_graph(&graph).unwrap(),
            _ => ctx
                .enqueue_function(&st, 1, &[counts.arg()], &[1u32, 1u32])
                .unwrap(),
        }
        if i == 4500 {
            other.enqueue_wait_for(&ctx).unwrap();
        }
    }
    let v = b.to_vec().unwrap();
    assert_eq!(v[0], 9000 / 5 * 3, "adds");
    drop((graph, b, counts, other));
    ctx.synchronize().unwrap();
    drop(ctx);
    assert_clean(&log, "long traced batches");
    let text = std::fs::read_to_string(dir.0.join("t.json")).unwrap();
    assert!(
        text.trim_end().ends_with(']') || text.trim_end().ends_with('}'),
        "trace file ends badly"
    );
}

/// Traced streams made and dropped with work in flight (their timestamp
/// pools must outlive their batches), with indirect dispatches and live
/// replays on them, and a graph captured on one replayed on the others.
#[test]
fn traced_streams_dropped_with_work_in_flight() {
    for commands in [true, false] {
        let dir = TempDir::new(&format!("review2-streams-{commands}"));
        let opts = options(Path::Direct)
            .trace(dir.0.join("t.json"))
            .trace_commands(commands);
        let ctx = context_with(opts);
        let log = ctx.diagnostics().validation_log();
        let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
        let n = 1 << 16;
        let x = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        x.enqueue_fill(0).unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        counts
            .enqueue_copy_from(&[(n / 64) as u32, 1, 1][..])
            .unwrap();
        let mut g = ctx.capture_graph();
        let id = g
            .enqueue_function_indirect(&add_one, &counts, 0, &[x.arg()], &(n as u32))
            .unwrap();
        let graph = g.finish().unwrap();
        for _ in 0..12 {
            let s = ctx.new_stream().unwrap();
            s.enqueue_function_indirect(&add_one, &counts, 0, &[x.arg()], &(n as u32))
                .unwrap();
            s.enqueue_graph_with(&graph, &GraphParams::new().push(id, &(n as u32)))
                .unwrap();
            s.enqueue_graph(&graph).unwrap();
            let ev = s.enqueue_record_event().unwrap();
            s.flush().unwrap();
            drop(s);
            ctx.enqueue_wait_event(&ev).unwrap();
        }
        assert_eq!(x.to_vec().unwrap()[n - 1], 36);
        drop((graph, x, counts));
        ctx.synchronize().unwrap();
        drop(ctx);
        assert_clean(&log, &format!("commands {commands}"));
        let text = std::fs::read_to_string(dir.0.join("t.json")).unwrap();
        assert!(
            text.contains("indirect"),
            "the trace names the indirect dispatches"
        );
    }
}

/// A traced context used from four threads on two streams (indirect
/// dispatches, live replays, events, readback futures), one stream made
/// and dropped meanwhile: the trace is valid JSON, every device slice of
/// a command lies inside its batch's slice, no slice has a negative or
/// absurd duration.
#[test]
fn a_trace_written_from_four_threads_is_valid() {
    let dir = TempDir::new("review2-trace-threads");
    let path = dir.0.join("t.json");
    {
        let ctx = context_with(options(Path::Direct).trace(&path));
        let log = ctx.diagnostics().validation_log();
        let other = ctx.new_stream().unwrap();
        let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        counts.enqueue_copy_from(&[2u32, 1, 1][..]).unwrap();
        let bufs: Vec<DeviceBuffer<u32>> = (0..4)
            .map(|i| {
                let b = ctx
                    .enqueue_create_buffer::<u32>(256)
                    .unwrap()
                    .with_label(format!("buf \"{i}\"\n\\"));
                b.enqueue_fill(0).unwrap();
                b
            })
            .collect();
        let mut g = ctx.capture_graph();
        g.label("graph \"quoted\"");
        let id = g
            .enqueue_function_indirect(&add_one, &counts, 0, &[bufs[0].arg()], &256u32)
            .unwrap();
        let graph = g.finish().unwrap();
        std::thread::scope(|s| {
            for t in 0..4usize {
                let stream = if t % 2 == 0 {
                    ctx.clone()
                } else {
                    other.clone()
                };
                let (bufs, counts, graph, add_one) = (&bufs, &counts, &graph, &add_one);
                s.spawn(move || {
                    for i in 0..300u32 {
                        let b = &bufs[t];
                        match i % 4 {
                            0 => stream
                                .enqueue_function_indirect(add_one, counts, 0, &[b.arg()], &256u32)
                                .unwrap(),
                            1 => stream
                                .enqueue_graph_with(
                                    graph,
                                    &GraphParams::new().buffer(&bufs[0], b).unwrap().push(id, &i),
                                )
                                .unwrap(),
                            2 => {
                                let _ = common::resolve(b.to_vec_async()).unwrap();
                            }
                            _ => {
                                let e = stream.enqueue_record_event().unwrap();
                                if t == 3 && i % 40 == 3 {
                                    let tmp = stream.new_stream().unwrap();
                                    tmp.enqueue_wait_event(&e).unwrap();
                                    tmp.enqueue_function(add_one, 4, &[b.arg()], &256u32)
                                        .unwrap();
                                    drop(tmp);
                                }
                            }
                        }
                    }
                });
            }
        });
        drop((graph, bufs, counts, other));
        ctx.synchronize().unwrap();
        drop(ctx);
        assert_clean(&log, "traced threads");
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let events: serde_json::Value = match serde_json::from_str(&text) {
        Ok(v) => v,
        Err(e) => panic!("FINDING: the trace is not valid JSON: {e}"),
    };
    let events = events.as_array().expect("an array of events");
    let mut batches = std::collections::HashMap::<u64, Vec<(f64, f64)>>::new();
    let mut commands = Vec::new();
    for ev in events {
        if ev["ph"] != "X" {
            continue;
        }
        let tid = ev["tid"].as_u64().unwrap();
        let (ts, dur) = (ev["ts"].as_f64().unwrap(), ev["dur"].as_f64().unwrap());
        assert!((0.0..600e6).contains(&dur), "absurd duration {dur} in {ev}");
        if ev["name"] == "batch" {
            batches.entry(tid).or_default().push((ts, ts + dur));
        } else if ev["args"]["index"].is_u64() {
            commands.push((tid, ts, ts + dur, ev.clone()));
        }
    }
    assert!(!commands.is_empty(), "timed commands in the trace");
    let mut outside = 0;
    for (tid, start, end, ev) in &commands {
        let inside = batches
            .get(tid)
            .is_some_and(|bs| bs.iter().any(|(s, e)| *start >= s - 1.0 && *end <= e + 1.0));
        if !inside {
            outside += 1;
            if outside < 5 {
                eprintln!("command slice outside every batch of its track: {ev}");
            }
        }
    }
    assert_eq!(
        outside,
        0,
        "FINDING: {outside} of {} command slices lie outside their batches",
        commands.len()
    );
}
