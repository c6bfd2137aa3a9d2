//! Graph replays with parameters (live operations): substituted buffers
//! and push constants, indirect dispatches made live, replays from two
//! threads and on another stream, drops with a replay in flight, fills at
//! odd offsets, mappings in the way, replays that fail part way, and
//! random graphs checked against a model. Every test runs under
//! validation; a validation message fails it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{assert_clean, context_with, on_each_context, options, store, Path, TempDir};
use vkcompute::{shaders, DeviceBuffer, DeviceContext, Error, GraphParams, Kernel};

/// An indirect dispatch inside a graph, made live by a push-constant
/// change (recorded straight into the stream through the StreamSink) and
/// by a substituted counts buffer at an odd offset view, both at once.
#[test]
fn indirect_dispatch_as_a_live_operation_of_a_parameterized_replay() {
    on_each_context(|ctx, what| {
        let st = Kernel::new(ctx, shaders::STORE, "main").unwrap();
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let n = 64 * 8;
        let data = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        data.enqueue_fill(0).unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        counts.enqueue_copy_from(&[2u32, 1, 1][..]).unwrap();
        let big = ctx.enqueue_create_buffer::<u32>(11).unwrap();
        big.enqueue_fill(9).unwrap();
        let other = big.create_sub_buffer::<u32>(5, 3).unwrap(); // byte 20
        store(ctx, &st, &big, 5, [4, 1, 1]);
        let mut g = ctx.capture_graph();
        let src3 = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        src3.enqueue_copy_from(&[2u32, 1, 1][..]).unwrap();
        g.enqueue_fill(&data, 0).unwrap(); // an op before: a segment
        g.enqueue_copy_to(&src3, &counts).unwrap(); // counts written in the graph
        let id = g
            .enqueue_function_indirect(&add_one, &counts, 0, &[data.arg()], &(n as u32))
            .unwrap();
        g.enqueue_fill(&big, 9).unwrap(); // an op after, touching the substitute's memory
        let graph = g.finish().unwrap();
        let mut want = vec![0u32; n];
        // Plain, then push changed (only 64 elements).
        ctx.enqueue_graph(&graph).unwrap();
        want[..128].iter_mut().for_each(|v| *v += 1);
        ctx.enqueue_graph_with(&graph, &GraphParams::new().push(id, &64u32))
            .unwrap();
        want.iter_mut().for_each(|v| *v = 0);
        want[..64].iter_mut().for_each(|v| *v += 1);
        assert_eq!(data.to_vec().unwrap(), want, "{what}: push");
        // Counts substituted by a view at byte 20: the copy writes it
        // ([2,1,1] from src3) and the dispatch reads it.
        let params = GraphParams::new().buffer(&counts, &other).unwrap();
        ctx.enqueue_graph_with(&graph, &params).unwrap();
        want.iter_mut().for_each(|v| *v = 0);
        want[..128].iter_mut().for_each(|v| *v += 1);
        assert_eq!(data.to_vec().unwrap(), want, "{what}: substituted counts");
        let params = GraphParams::new()
            .buffer(&counts, &other)
            .unwrap()
            .push(id, &100u32);
        ctx.enqueue_graph_with(&graph, &params).unwrap();
        want.iter_mut().for_each(|v| *v = 0);
        want[..100].iter_mut().for_each(|v| *v += 1);
        assert_eq!(data.to_vec().unwrap(), want, "{what}: both");
        assert_eq!(big.to_vec().unwrap(), vec![9; 11], "{what}");
        assert_eq!(counts.to_vec().unwrap(), [2, 1, 1], "{what}");
    });
}

/// One graph replayed with substitutes and push constants from two
/// threads at once, on one context and on two streams.
#[test]
fn a_graph_replayed_with_parameters_from_two_threads() {
    for streams in [false, true] {
        for push in [true, false] {
            let ctx = context_with(options(Path::Direct).push_descriptors(push));
            let log = ctx.diagnostics().validation_log();
            let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
            let n = 256;
            let x = ctx.enqueue_create_buffer::<u32>(n).unwrap();
            x.enqueue_fill(0).unwrap();
            let y = ctx.enqueue_create_buffer::<u32>(n).unwrap();
            y.enqueue_fill(0).unwrap();
            let mut g = ctx.capture_graph();
            g.enqueue_fill(&y, 5).unwrap();
            let id = g
                .enqueue_function(&add_one, 4, &[x.arg()], &(n as u32))
                .unwrap();
            g.enqueue_fill(&y, 6).unwrap();
            let graph = g.finish().unwrap();
            let outs: Vec<DeviceBuffer<u32>> = (0..2)
                .map(|_| {
                    let b = ctx.enqueue_create_buffer::<u32>(n).unwrap();
                    b.enqueue_fill(0).unwrap();
                    b
                })
                .collect();
            let reps = 40u32;
            std::thread::scope(|s| {
                for (t, out) in outs.iter().enumerate() {
                    let ctx2 = if streams {
                        ctx.new_stream().unwrap()
                    } else {
                        ctx.clone()
                    };
                    let graph = &graph;
                    let x = &x;
                    s.spawn(move || {
                        for r in 0..reps {
                            let limit = if (r + t as u32) % 2 == 0 {
                                n as u32
                            } else {
                                128
                            };
                            let params =
                                GraphParams::new().buffer(x, out).unwrap().push(id, &limit);
                            ctx2.enqueue_graph_with(graph, &params).unwrap();
                            if r % 7 == 0 {
                                ctx2.enqueue_graph(graph).unwrap();
                            }
                        }
                        ctx2.synchronize().unwrap();
                    });
                }
            });
            for (t, out) in outs.iter().enumerate() {
                let got = out.to_vec().unwrap();
                let high = (0..reps).filter(|r| (r + t as u32) % 2 == 0).count() as u32;
                assert_eq!(got[..128], vec![reps; 128][..], "streams {streams} t {t}");
                assert_eq!(got[128..], vec![high; 128][..], "streams {streams} t {t}");
            }
            let plain = (0..reps).filter(|r| r % 7 == 0).count() as u32 * 2;
            assert_eq!(x.to_vec().unwrap(), vec![plain; n], "streams {streams}");
            assert_eq!(y.to_vec().unwrap(), vec![6; n]);
            drop((graph, outs, x, y, add_one));
            ctx.synchronize().unwrap();
            drop(ctx);
            assert_clean(&log, &format!("streams {streams} push {push}"));
        }
    }
}

/// The graph, its captured buffers and the substitute all dropped right
/// after a parameterized replay is enqueued (nothing synchronized).
#[test]
fn dropping_everything_while_a_parameterized_replay_runs() {
    on_each_context(|ctx, what| {
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let n = 1 << 16;
        let keep = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        keep.enqueue_fill(1).unwrap();
        for round in 0..4 {
            let x = ctx.enqueue_create_buffer::<u32>(n).unwrap();
            let sub = ctx.enqueue_create_buffer::<u32>(n).unwrap();
            sub.enqueue_fill(0).unwrap();
            let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
            counts
                .enqueue_copy_from(&[(n / 64) as u32, 1, 1][..])
                .unwrap();
            let mut g = ctx.capture_graph();
            g.enqueue_fill(&x, 3).unwrap();
            let id = g
                .enqueue_function_indirect(&add_one, &counts, 0, &[x.arg()], &(n as u32))
                .unwrap();
            g.enqueue_copy_to(&x, &keep).unwrap();
            let graph = g.finish().unwrap();
            let nn = n as u32;
            let params = GraphParams::new().buffer(&x, &sub).unwrap().push(id, &nn);
            ctx.enqueue_graph_with(&graph, &params).unwrap();
            if round % 2 == 0 {
                drop(graph);
                drop(x);
                drop(counts);
                drop(sub);
            } else {
                drop(sub);
                drop(counts);
                drop(x);
                ctx.enqueue_graph_with(&graph, &GraphParams::new().push(id, &1u32))
                    .unwrap();
                drop(graph);
            }
            if std::env::var("REVIEW_DEBUG").is_ok() {
                let g = keep.to_vec().unwrap();
                eprintln!(
                    "{what} round {round}: keep[0] {} keep[n-1] {}",
                    g[0],
                    g[n - 1]
                );
            }
        }
        let got = keep.to_vec().unwrap();
        assert_eq!(got[0], 4, "{what}");
        assert_eq!(got[n - 1], 3, "{what}"); // round 3's last replay adds to x[0] only
    });
}

/// Substitutes that alias buffers the unchanged segments use.
#[test]
fn substitutes_that_alias_what_the_segments_use() {
    on_each_context(|ctx, what| {
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let n = 128;
        let a = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let b = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let c = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        for buf in [&a, &b, &c] {
            buf.enqueue_fill(0).unwrap();
        }
        let mut g = ctx.capture_graph();
        g.enqueue_fill(&a, 1).unwrap(); // 0
        g.enqueue_copy_to(&a, &b).unwrap(); // 1
        g.enqueue_function(&add_one, 2, &[c.arg()], &(n as u32))
            .unwrap(); // 2
        g.enqueue_copy_to(&b, &a).unwrap(); // 3
        let graph = g.finish().unwrap();
        // c -> b: the live dispatch writes what segment 0..2 wrote and 3 reads.
        ctx.enqueue_graph_with(&graph, &GraphParams::new().buffer(&c, &b).unwrap())
            .unwrap();
        assert_eq!(a.to_vec().unwrap(), vec![2; n], "{what}: a");
        assert_eq!(b.to_vec().unwrap(), vec![2; n], "{what}: b");
        assert_eq!(c.to_vec().unwrap(), vec![0; n], "{what}: c");
        // c -> a, and b -> c (b's uses become live: copies 1 and 3).
        let params = GraphParams::new()
            .buffer(&c, &a)
            .unwrap()
            .buffer(&b, &c)
            .unwrap();
        ctx.enqueue_graph_with(&graph, &params).unwrap();
        // fill a=1; copy a->c (c=1); a+=1 (a=2); copy c->a (a=1)
        assert_eq!(a.to_vec().unwrap(), vec![1; n], "{what}: a 2");
        assert_eq!(c.to_vec().unwrap(), vec![1; n], "{what}: c 2");
        assert_eq!(b.to_vec().unwrap(), vec![2; n], "{what}: b 2");
        // A substitute that is a view of a captured buffer at an aligned offset.
        let align = ctx.info().limits.min_storage_buffer_offset_alignment.max(4) as usize / 4;
        let big = ctx.enqueue_create_buffer::<u32>(n + align).unwrap();
        big.enqueue_fill(7).unwrap();
        let view = big.create_sub_buffer::<u32>(align, n).unwrap();
        ctx.enqueue_graph_with(&graph, &GraphParams::new().buffer(&c, &view).unwrap())
            .unwrap();
        let got = big.to_vec().unwrap();
        assert_eq!(got[..align], vec![7; align][..], "{what}: big head");
        assert_eq!(got[align..], vec![8; n][..], "{what}: big view");
        // A copy's substitute that overlaps its other end: refused, usable after.
        let e = ctx
            .enqueue_graph_with(&graph, &GraphParams::new().buffer(&b, &a).unwrap())
            .unwrap_err();
        assert!(matches!(e, Error::GraphParameter { .. }), "{what}: {e}");
        ctx.enqueue_graph(&graph).unwrap();
        assert_eq!(a.to_vec().unwrap(), vec![1; n], "{what}: after refusal");
    });
}

/// Zero-length buffers everywhere a graph or a dispatch takes one.
#[test]
fn zero_length_buffers() {
    on_each_context(|ctx, what| {
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let empty = ctx.enqueue_create_buffer::<u32>(0).unwrap();
        let empty2 = ctx.enqueue_create_buffer::<u32>(0).unwrap();
        let r = ctx.enqueue_function(&add_one, 1, &[empty.arg()], &0u32);
        eprintln!("{what}: dispatch on an empty buffer: {r:?}");
        let r = ctx.enqueue_function_indirect(&add_one, &empty, 0, &[empty.arg()], &0u32);
        assert!(r.is_err(), "{what}");
        let mut g = ctx.capture_graph();
        g.enqueue_fill(&empty, 1).unwrap();
        g.enqueue_copy_to(&empty, &empty2).unwrap();
        let r = g.enqueue_function(&add_one, 1, &[empty.arg()], &0u32);
        eprintln!("{what}: graph dispatch on an empty buffer: {r:?}");
        let graph = g.finish().unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        let r =
            ctx.enqueue_graph_with(&graph, &GraphParams::new().buffer(&empty, &empty2).unwrap());
        eprintln!("{what}: substituting an empty buffer: {r:?}");
        let m = common::resolve(empty.map_to_host_async()).unwrap();
        assert!(m.is_empty());
        drop(m);
        ctx.synchronize().unwrap();
    });
}

/// A live dispatch (direct or indirect) between two kept segments, its
/// buffer dropped by the caller after capture, with or without a replay
/// that substituted that buffer before: the graph keeps the buffer, and
/// the live push constant reaches the dispatch.
#[test]
fn a_live_dispatch_between_segments_after_its_buffer_is_dropped() {
    for drop_counts in [false, true] {
        for indirect in [false, true] {
            let ctx = context_with(options(Path::Direct));
            let log = ctx.diagnostics().validation_log();
            let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
            let n = 1 << 16;
            let keep = ctx.enqueue_create_buffer::<u32>(n).unwrap();
            keep.enqueue_fill(1).unwrap();
            let x = ctx.enqueue_create_buffer::<u32>(n).unwrap();
            let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
            counts
                .enqueue_copy_from(&[(n / 64) as u32, 1, 1][..])
                .unwrap();
            let mut g = ctx.capture_graph();
            g.enqueue_fill(&x, 3).unwrap();
            let id = if indirect {
                g.enqueue_function_indirect(&add_one, &counts, 0, &[x.arg()], &(n as u32))
                    .unwrap()
            } else {
                g.enqueue_function(&add_one, (n / 64) as u32, &[x.arg()], &(n as u32))
                    .unwrap()
            };
            g.enqueue_copy_to(&x, &keep).unwrap();
            let graph = g.finish().unwrap();
            let sub = ctx.enqueue_create_buffer::<u32>(n).unwrap();
            let nn = n as u32;
            if drop_counts {
                ctx.enqueue_graph_with(
                    &graph,
                    &GraphParams::new().buffer(&x, &sub).unwrap().push(id, &nn),
                )
                .unwrap();
            }
            drop(x);
            ctx.enqueue_graph_with(&graph, &GraphParams::new().push(id, &1u32))
                .unwrap();
            // The fill wrote 3 everywhere; the push constant 1 lets only
            // invocation 0 add one.
            let got = keep.to_vec().unwrap();
            let what = format!("substituted first {drop_counts}, indirect {indirect}");
            assert_eq!(got[0], 4, "{what}");
            assert!(got[1..].iter().all(|&v| v == 3), "{what}");
            drop((graph, keep, sub, counts));
            ctx.synchronize().unwrap();
            assert_clean(&log, &what);
        }
    }
}

/// Many distinct live sets from two threads at once (more than the four
/// kept splits, so they are evicted while the other thread replays).
#[test]
fn live_sets_churning_from_two_threads() {
    for push in [true, false] {
        let ctx = context_with(options(Path::Direct).push_descriptors(push));
        let log = ctx.diagnostics().validation_log();
        let st = Kernel::new(&ctx, shaders::STORE, "main").unwrap();
        let k = 6usize;
        let x = ctx.enqueue_create_buffer::<u32>(k).unwrap();
        x.enqueue_fill(0).unwrap();
        let mut g = ctx.capture_graph();
        let ids: Vec<_> = (0..k)
            .map(|i| {
                g.enqueue_function(&st, 1, &[x.arg()], &[i as u32, 1000 + i as u32])
                    .unwrap()
            })
            .collect();
        let graph = g.finish().unwrap();
        std::thread::scope(|s| {
            for t in 0..2u64 {
                let (ctx, graph, ids, x) = (ctx.clone(), &graph, &ids, &x);
                s.spawn(move || {
                    let out = ctx.enqueue_create_buffer::<u32>(k).unwrap();
                    let mut rng = common::Rng::new(t + 77);
                    for r in 0..60u32 {
                        let mask = rng.below(1 << k) as usize;
                        let values: Vec<[u32; 2]> = (0..k)
                            .map(|i| [i as u32, (t as u32 + 1) * 100_000 + r * 10 + i as u32])
                            .collect();
                        let mut params = GraphParams::new().buffer(x, &out).unwrap();
                        for i in 0..k {
                            if mask & (1 << i) != 0 {
                                params = params.push(ids[i], &values[i]);
                            }
                        }
                        ctx.enqueue_graph_with(graph, &params).unwrap();
                        let got = out.to_vec().unwrap();
                        for i in 0..k {
                            let want = if mask & (1 << i) != 0 {
                                values[i][1]
                            } else {
                                1000 + i as u32
                            };
                            assert_eq!(got[i], want, "t {t} r {r} mask {mask:b} i {i}");
                        }
                    }
                });
            }
        });
        assert_eq!(x.to_vec().unwrap(), vec![0; k]);
        drop(graph);
        ctx.synchronize().unwrap();
        drop(ctx);
        assert_clean(&log, &format!("push {push}"));
    }
}

/// Fills made live by a substitute at an offset that changes their plan
/// (word fill captured, kernel or tile fill replayed), of 1-, 2-, 3-, 8-
/// and 16-byte elements.
#[test]
fn live_fills_at_odd_offsets() {
    on_each_context(|ctx, what| {
        fn case<T: bytemuck::Pod + PartialEq + std::fmt::Debug>(
            ctx: &DeviceContext,
            what: &str,
            len: usize,
            value: T,
            at: usize,
        ) {
            let buf = ctx.enqueue_create_buffer::<T>(len).unwrap();
            let out = ctx.enqueue_create_buffer::<T>(len).unwrap();
            let mut g = ctx.capture_graph();
            g.enqueue_fill(&buf, value).unwrap();
            g.enqueue_copy_to(&buf, &out).unwrap();
            let graph = g.finish().unwrap();
            let big = ctx.enqueue_create_buffer::<T>(len + at + 3).unwrap();
            big.enqueue_fill(T::zeroed()).unwrap();
            let view = match big.create_sub_buffer::<T>(at, len) {
                Ok(v) => v,
                Err(e) => panic!("{what}: view at {at}: {e}"),
            };
            let r =
                ctx.enqueue_graph_with(&graph, &GraphParams::new().buffer(&buf, &view).unwrap());
            match r {
                Ok(()) => {
                    let got = big.to_vec().unwrap();
                    let mut want = vec![T::zeroed(); len + at + 3];
                    want[at..at + len].iter_mut().for_each(|v| *v = value);
                    assert_eq!(got, want, "{what}: {} at {at}", std::any::type_name::<T>());
                    assert_eq!(out.to_vec().unwrap(), vec![value; len], "{what}");
                }
                Err(e) => panic!("{what}: {} at {at}: {e}", std::any::type_name::<T>()),
            }
        }
        for at in [1, 2, 3, 5] {
            case::<u8>(ctx, what, 64, 0xab, at);
            case::<u8>(ctx, what, 7, 0xcd, at);
            case::<u16>(ctx, what, 33, 0x1234, at);
            case::<[u8; 3]>(ctx, what, 21, [1, 2, 3], at);
            case::<u64>(ctx, what, 9, 0x0102_0304_0506_0708, at);
            case::<[u32; 4]>(ctx, what, 5, [9, 8, 7, 6], at);
        }
    });
}

/// A graph captured on one context, the context dropped, the graph
/// replayed with parameters on another stream of the device.
#[test]
fn a_graph_outliving_its_context_replayed_on_another_stream() {
    for path in [Path::Direct, Path::Staging] {
        let ctx = context_with(options(path));
        let log = ctx.diagnostics().validation_log();
        let other = ctx.new_stream().unwrap();
        let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
        let x = ctx.enqueue_create_buffer::<u32>(256).unwrap();
        x.enqueue_fill(0).unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        counts.enqueue_copy_from(&[4u32, 1, 1][..]).unwrap();
        let mut g = ctx.capture_graph();
        let id = g
            .enqueue_function_indirect(&add_one, &counts, 0, &[x.arg()], &256u32)
            .unwrap();
        g.enqueue_wait_for(&other).unwrap();
        let graph = g.finish().unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        drop(counts);
        drop(add_one);
        drop(ctx);
        let sub = other.enqueue_create_buffer::<u32>(256).unwrap();
        sub.enqueue_fill(10).unwrap();
        for _ in 0..3 {
            other
                .enqueue_graph_with(&graph, &GraphParams::new().push(id, &128u32))
                .unwrap();
            other
                .enqueue_graph_with(&graph, &GraphParams::new().buffer(&x, &sub).unwrap())
                .unwrap();
        }
        drop(graph);
        let got = x.to_vec().unwrap();
        assert_eq!(got[..128], vec![4; 128][..], "{path:?}");
        assert_eq!(got[128..], vec![1; 128][..], "{path:?}");
        assert_eq!(sub.to_vec().unwrap(), vec![13; 256], "{path:?}");
        drop((x, sub));
        other.synchronize().unwrap();
        drop(other);
        assert_clean(&log, &format!("{path:?}"));
    }
}

#[derive(Clone, Debug)]
enum ROp {
    Fill(usize, u32),
    Copy(usize, usize),
    Add(usize, u32),
    /// add_one over counts[c] groups on buffer b with n
    AddIndirect(usize, usize, u32),
}

/// Random graphs of fills, copies, direct and indirect dispatches,
/// replayed with random substitutes and push constants, against a model,
/// traced, on both memory and descriptor paths.
#[test]
fn random_graphs_with_indirect_dispatches_and_parameters() {
    for push_descriptors in [true, false] {
        for path in [Path::Direct, Path::Staging] {
            let dir = TempDir::new(&format!("review2-rand-{push_descriptors}-{path:?}"));
            let opts = options(path)
                .push_descriptors(push_descriptors)
                .trace(dir.0.join("t.json"));
            let ctx = context_with(opts);
            let log = ctx.diagnostics().validation_log();
            let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
            let len = 128usize;
            let nb = 6usize; // 4 captured + 2 spares
            let bufs: Vec<DeviceBuffer<u32>> = (0..nb)
                .map(|_| ctx.enqueue_create_buffer::<u32>(len).unwrap())
                .collect();
            // Two counts buffers, views of one memory at odd element offsets.
            let cmem = ctx.enqueue_create_buffer::<u32>(16).unwrap();
            cmem.enqueue_copy_from(&[0, 1, 1, 1, 2, 1, 1, 9, 9, 9, 9, 9, 9, 9, 9, 9][..])
                .unwrap();
            let counts = [
                cmem.create_sub_buffer::<u32>(1, 3).unwrap(), // [1,1,1]
                cmem.create_sub_buffer::<u32>(4, 3).unwrap(), // [2,1,1]
            ];
            let groups = [1u32, 2];
            let mut model: Vec<Vec<u32>> = vec![vec![0; len]; nb];
            for b in &bufs {
                b.enqueue_fill(0).unwrap();
            }
            let apply = |model: &mut Vec<Vec<u32>>, ops: &[ROp], map: &[usize], ns: &[u32]| {
                let mut d = 0;
                for op in ops {
                    match *op {
                        ROp::Fill(b, v) => model[map[b]].iter_mut().for_each(|x| *x = v),
                        ROp::Copy(s, t) => {
                            let src = model[map[s]].clone();
                            model[map[t]] = src;
                        }
                        ROp::Add(b, _) => {
                            let n = ns[d] as usize;
                            d += 1;
                            model[map[b]]
                                .iter_mut()
                                .take(n.min(len))
                                .for_each(|x| *x += 1);
                        }
                        ROp::AddIndirect(b, c, _) => {
                            let n = (ns[d] as usize).min(64 * groups[c] as usize);
                            d += 1;
                            model[map[b]]
                                .iter_mut()
                                .take(n.min(len))
                                .for_each(|x| *x += 1);
                        }
                    }
                }
            };
            let mut replays = 0;
            let mut refused = 0;
            for seed in 0..12u64 {
                let mut rng = common::Rng::new(seed * 31 + 5);
                let count = 3 + rng.below(5) as usize;
                let mut ops = Vec::new();
                for _ in 0..count {
                    let b = rng.below(4) as usize;
                    ops.push(match rng.below(4) {
                        0 => ROp::Fill(b, rng.below(100) as u32),
                        1 => {
                            let t = (b + 1 + rng.below(3) as usize) % 4;
                            ROp::Copy(b, t)
                        }
                        2 => ROp::Add(b, 1 + rng.below(len as u64) as u32),
                        _ => ROp::AddIndirect(
                            b,
                            rng.below(2) as usize,
                            1 + rng.below(len as u64) as u32,
                        ),
                    });
                }
                let mut g = ctx.capture_graph();
                let mut ids = Vec::new();
                let mut default_ns = Vec::new();
                for op in &ops {
                    match *op {
                        ROp::Fill(b, v) => {
                            g.enqueue_fill(&bufs[b], v).unwrap();
                        }
                        ROp::Copy(s, t) => {
                            g.enqueue_copy_to(&bufs[s], &bufs[t]).unwrap();
                        }
                        ROp::Add(b, n) => {
                            ids.push(
                                g.enqueue_function(&add_one, 2, &[bufs[b].arg()], &n)
                                    .unwrap(),
                            );
                            default_ns.push(n);
                        }
                        ROp::AddIndirect(b, c, n) => {
                            ids.push(
                                g.enqueue_function_indirect(
                                    &add_one,
                                    &counts[c],
                                    0,
                                    &[bufs[b].arg()],
                                    &n,
                                )
                                .unwrap(),
                            );
                            default_ns.push(n);
                        }
                    }
                }
                let graph = g.finish().unwrap();
                for rep in 0..5 {
                    let mut map: Vec<usize> = (0..nb).collect();
                    let mut params = GraphParams::new();
                    if rep > 0 {
                        for i in 0..4 {
                            if rng.below(3) == 0 {
                                let with = rng.below(nb as u64) as usize;
                                if with != i {
                                    map[i] = with;
                                    params = params.buffer(&bufs[i], &bufs[with]).unwrap();
                                }
                            }
                        }
                    }
                    let mut ns = default_ns.clone();
                    let pushed: Vec<u32> = (0..ids.len())
                        .map(|_| 1 + rng.below(len as u64) as u32)
                        .collect();
                    for (i, id) in ids.iter().enumerate() {
                        if rep > 0 && rng.below(2) == 0 {
                            ns[i] = pushed[i];
                            params = params.push(*id, &pushed[i]);
                        }
                    }
                    // Substituting a counts view by the other.
                    if rep > 0 && rng.below(3) == 0 {
                        params = params.buffer(&counts[0], &counts[1]).unwrap();
                        // model: counts[0] users see groups of counts[1]
                        let mut model_ops = ops.clone();
                        for op in &mut model_ops {
                            if let ROp::AddIndirect(_, c, _) = op {
                                *c = 1;
                            }
                        }
                        match ctx.enqueue_graph_with(&graph, &params) {
                            Ok(()) => {
                                apply(&mut model, &model_ops, &map, &ns);
                                replays += 1;
                            }
                            Err(Error::GraphParameter { .. }) => refused += 1,
                            Err(e) => panic!("seed {seed}: {e}"),
                        }
                        continue;
                    }
                    match ctx.enqueue_graph_with(&graph, &params) {
                        Ok(()) => {
                            apply(&mut model, &ops, &map, &ns);
                            replays += 1;
                        }
                        Err(Error::GraphParameter { .. }) => refused += 1,
                        Err(e) => panic!("seed {seed}: {e}"),
                    }
                }
                for (i, b) in bufs.iter().enumerate() {
                    assert_eq!(
                        b.to_vec().unwrap(),
                        model[i],
                        "seed {seed} buffer {i} ({push_descriptors}, {path:?}): {ops:?}"
                    );
                }
            }
            eprintln!("{push_descriptors} {path:?}: {replays} replays, {refused} refused");
            assert_eq!(
                cmem.to_vec().unwrap(),
                [0, 1, 1, 1, 2, 1, 1, 9, 9, 9, 9, 9, 9, 9, 9, 9]
            );
            drop((bufs, counts, cmem));
            ctx.synchronize().unwrap();
            drop(ctx);
            assert_clean(&log, &format!("{push_descriptors} {path:?}"));
        }
    }
}

/// Host borrows in the way of a parameterized replay and an indirect
/// dispatch: a mapped segment buffer, a mapped substitute, mapped counts.
/// Each is refused with nothing half-recorded, and the context stays usable.
#[test]
fn mappings_in_the_way_of_live_replays_and_indirect_counts() {
    on_each_context(|ctx, what| {
        let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
        let n = 64;
        let a = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let b = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let s = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        counts.enqueue_copy_from(&[1u32, 1, 1][..]).unwrap();
        for x in [&a, &b, &s] {
            x.enqueue_fill(0).unwrap();
        }
        let mut g = ctx.capture_graph();
        g.enqueue_fill(&a, 5).unwrap();
        let id = g
            .enqueue_function_indirect(&add_one, &counts, 0, &[b.arg()], &(n as u32))
            .unwrap();
        g.enqueue_copy_to(&a, &b).unwrap();
        g.enqueue_function(&add_one, 1, &[b.arg()], &(n as u32))
            .unwrap();
        let graph = g.finish().unwrap();
        // A segment's buffer mapped.
        {
            let m = common::resolve(a.map_to_host_async()).unwrap();
            let recorded = ctx.diagnostics().live_objects().commands_recorded;
            let e = ctx
                .enqueue_graph_with(&graph, &GraphParams::new().push(id, &1u32))
                .unwrap_err();
            assert!(matches!(e, Error::BufferMapped { .. }), "{what}: {e}");
            assert_eq!(
                ctx.diagnostics().live_objects().commands_recorded,
                recorded,
                "{what}"
            );
            drop(m);
        }
        // The substitute mapped.
        {
            let m = s.map_to_host().unwrap();
            let recorded = ctx.diagnostics().live_objects().commands_recorded;
            let e = ctx
                .enqueue_graph_with(&graph, &GraphParams::new().buffer(&b, &s).unwrap())
                .unwrap_err();
            assert!(matches!(e, Error::BufferMapped { .. }), "{what}: {e}");
            assert_eq!(
                ctx.diagnostics().live_objects().commands_recorded,
                recorded,
                "{what}"
            );
            drop(m);
        }
        // The counts mapped and written: the indirect dispatch reads them.
        {
            let mut m = common::resolve(counts.map_to_host_async()).unwrap();
            m[0] = 0; // no workgroups
            let r = ctx.enqueue_function_indirect(&add_one, &counts, 0, &[b.arg()], &(n as u32));
            let r2 = ctx.enqueue_graph(&graph);
            eprintln!("{what}: indirect with mapped counts: {r:?}; replay: {r2:?}");
            assert!(r.is_err() == r2.is_err(), "{what}: {r:?} {r2:?}");
            drop(m);
        }
        assert_eq!(counts.to_vec().unwrap(), [0, 1, 1], "{what}");
        ctx.enqueue_graph_with(&graph, &GraphParams::new().buffer(&b, &s).unwrap())
            .unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        // graph: a=5; b+=0 (counts 0); b=a; b+=1 -> 6
        assert_eq!(b.to_vec().unwrap(), vec![6; n], "{what}: b");
        assert_eq!(s.to_vec().unwrap(), vec![6; n], "{what}: s");
    });
}

/// A parameterized replay that fails part-way (an allocation of its live
/// dispatch's descriptor set, pooled descriptors) after a segment before
/// it was recorded: is the error all-or-nothing?
///
/// Was a FINDING, fixed (a piece after the first that runs out of memory
/// is recorded again in a new batch once the device is idle,
/// `Stream::restart_batch`). It failed with push_descriptors(false), in
/// the second loop once the split is kept: `enqueue_graph_with` returned `Err(OutOfMemory
/// "vkAllocateDescriptorSets")` yet part of the graph runs: x,y,z =
/// [2,1,2] where [1,1,2] was expected (segment 0 ran, live op 1 did not),
/// then [3,2,3] (segments and the first live op ran, the second live
/// indirect dispatch's guard allocation failed), then [4,3,4] (the guard
/// ran, its dispatch did not). Cause: src/graph/params.rs `enqueue_with`
/// records the pieces straight into the open batch inside
/// `record_sequence`; `record_op` (src/graph/recording.rs) can fail in the
/// descriptor allocation of `record_dispatch_into` after earlier pieces
/// were recorded, and nothing rolls them back (the batch is submitted
/// with them). The same holds for `enqueue_function_indirect`
/// (src/indirect.rs): the guard is recorded, the dispatch fails (harmless
/// there: only the slot is written). Ordering stays sound (a full barrier
/// precedes every live piece: see the next test, which passes).
#[cfg(feature = "fault-injection")]
#[test]
fn a_live_replay_that_fails_part_way_is_all_or_nothing() {
    for push in [false, true] {
        let ctx = context_with(options(Path::Direct).push_descriptors(push));
        let log = ctx.diagnostics().validation_log();
        let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
        let x = ctx.enqueue_create_buffer::<u32>(64).unwrap();
        let y = ctx.enqueue_create_buffer::<u32>(64).unwrap();
        let z = ctx.enqueue_create_buffer::<u32>(64).unwrap();
        let counts = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        counts.enqueue_copy_from(&[1u32, 1, 1][..]).unwrap();
        for b in [&x, &y, &z] {
            b.enqueue_fill(0).unwrap();
        }
        let mut g = ctx.capture_graph();
        g.enqueue_function(&add_one, 1, &[x.arg()], &64u32).unwrap(); // segment
        let id = g.enqueue_function(&add_one, 1, &[y.arg()], &64u32).unwrap(); // live
        g.enqueue_function_indirect(&add_one, &counts, 0, &[z.arg()], &64u32)
            .unwrap(); // segment
        let id2 = g
            .enqueue_function_indirect(&add_one, &counts, 0, &[z.arg()], &64u32)
            .unwrap(); // live
        let graph = g.finish().unwrap();
        let mut want = [0u32; 3];
        let mut failures = Vec::new();
        for nth in (1..12u64).chain(1..12u64) {
            // the second run with the split kept
            ctx.synchronize().unwrap();
            vkcompute::testing::fail_allocation(&ctx, nth);
            let r = ctx.enqueue_graph_with(
                &graph,
                &GraphParams::new().push(id, &64u32).push(id2, &64u32),
            );
            let passed = vkcompute::testing::allocations_passed(&ctx);
            vkcompute::testing::fail_allocation(&ctx, 0);
            if std::env::var("REVIEW_DEBUG").is_ok() {
                eprintln!("push {push} nth {nth}: {r:?} (points passed {passed})");
            }
            if r.is_ok() {
                want[0] += 1;
                want[1] += 1;
                want[2] += 2;
            }
            let got = [
                x.to_vec().unwrap()[0],
                y.to_vec().unwrap()[0],
                z.to_vec().unwrap()[0],
            ];
            if got != want {
                failures.push(format!(
                    "push {push} nth {nth}: the replay returned {r:?} yet ran part of itself: x,y,z = {got:?}, want {want:?}"
                ));
                want = got;
            }
        }
        drop(graph);
        ctx.synchronize().unwrap();
        drop(ctx);
        assert_clean(&log, &format!("push {push}"));
        assert!(failures.is_empty(), "FINDING:\n{}", failures.join("\n"));
    }
}

/// After a parameterized replay fails part-way with memory exhausted for
/// good (the retry of the test above fails too), the pieces it recorded
/// stay in the batch, but the replay's uses are not noted in the stream's
/// recorder (`sink.stream.note(hazards)` is skipped by the `?`): the next
/// command on what a recorded segment wrote must still get a barrier (the
/// failed replay records a full one). Sync validation and the copied
/// values tell.
#[cfg(feature = "fault-injection")]
#[test]
fn the_command_after_a_failed_live_replay_is_ordered_after_its_pieces() {
    let ctx = context_with(options(Path::Direct).push_descriptors(false));
    let log = ctx.diagnostics().validation_log();
    let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
    let n = 1 << 16;
    let x = ctx.enqueue_create_buffer::<u32>(n).unwrap();
    let y = ctx.enqueue_create_buffer::<u32>(64).unwrap();
    let w = ctx.enqueue_create_buffer::<u32>(n).unwrap();
    for b in [&x, &w] {
        b.enqueue_fill(0).unwrap();
    }
    y.enqueue_fill(0).unwrap();
    let mut g = ctx.capture_graph();
    g.enqueue_function(&add_one, (n / 64) as u32, &[x.arg()], &(n as u32))
        .unwrap(); // segment
    let id = g.enqueue_function(&add_one, 1, &[y.arg()], &64u32).unwrap(); // live
    let graph = g.finish().unwrap();
    // Keep the split recorded.
    ctx.enqueue_graph_with(&graph, &GraphParams::new().push(id, &64u32))
        .unwrap();
    ctx.synchronize().unwrap();
    let mut found = None;
    for nth in 1..6u64 {
        // An open batch first, so the failing replay is recorded into it.
        y.enqueue_fill(0).unwrap();
        vkcompute::testing::fail_allocations_from(&ctx, nth);
        let r = ctx.enqueue_graph_with(&graph, &GraphParams::new().push(id, &64u32));
        vkcompute::testing::fail_allocation(&ctx, 0);
        if r.is_err() {
            // Straight after, in the same batch: read what the segment wrote.
            w.enqueue_copy_from(&x).unwrap();
            ctx.enqueue_function(&add_one, (n / 64) as u32, &[x.arg()], &(n as u32))
                .unwrap();
            let (xv, wv) = (x.to_vec().unwrap(), w.to_vec().unwrap());
            found = Some((nth, r, xv[n - 1], wv[n - 1]));
            break;
        }
        ctx.synchronize().unwrap();
    }
    let (nth, r, xl, wl) = found.expect("no injected failure inside the replay");
    eprintln!("nth {nth}: {r:?}; x[n-1] {xl}, w[n-1] {wl}");
    drop(graph);
    ctx.synchronize().unwrap();
    let messages = log.messages();
    drop(ctx);
    assert!(
        messages.is_empty(),
        "FINDING: {} validation message(s) after a failed live replay:\n{}",
        messages.len(),
        messages
            .iter()
            .map(|m| m.to_string())
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert_eq!(
        wl + 1,
        xl,
        "the copy saw the segment's write and the add came after it"
    );
}

/// Fills of 8- and 16-byte elements whose alignment is smaller than their
/// size ([u16; 4], [u32; 4], [u8; 16]), captured at byte 0 and replayed
/// with substitutes at byte offsets that are not multiples of the size.
#[test]
fn live_fills_of_wide_elements_at_offsets_below_their_size() {
    on_each_context(|ctx, what| {
        fn case<T: bytemuck::Pod + PartialEq + std::fmt::Debug>(
            ctx: &DeviceContext,
            what: &str,
            len: usize,
            value: T,
            byte_at: usize,
        ) {
            let buf = ctx.enqueue_create_buffer::<T>(len).unwrap();
            let mut g = ctx.capture_graph();
            g.enqueue_fill(&buf, value).unwrap();
            let graph = g.finish().unwrap();
            let total = len * size_of::<T>() + 64;
            let raw = ctx.enqueue_create_buffer::<u8>(total).unwrap();
            raw.enqueue_fill(0).unwrap();
            let view = match raw
                .create_sub_buffer::<u8>(byte_at, len * size_of::<T>())
                .and_then(|v| v.create_sub_buffer::<T>(0, len))
            {
                Ok(v) => v,
                Err(e) => {
                    eprintln!(
                        "{what}: {} at byte {byte_at}: no view: {e}",
                        std::any::type_name::<T>()
                    );
                    return;
                }
            };
            let r =
                ctx.enqueue_graph_with(&graph, &GraphParams::new().buffer(&buf, &view).unwrap());
            match r {
                Ok(()) => {
                    let got = raw.to_vec().unwrap();
                    let mut want = vec![0u8; total];
                    for i in 0..len {
                        let at = byte_at + i * size_of::<T>();
                        want[at..at + size_of::<T>()].copy_from_slice(bytemuck::bytes_of(&value));
                    }
                    assert_eq!(
                        got,
                        want,
                        "{what}: {} at byte {byte_at}",
                        std::any::type_name::<T>()
                    );
                }
                Err(e) => panic!(
                    "{what}: {} at byte {byte_at}: {e}",
                    std::any::type_name::<T>()
                ),
            }
        }
        for at in [1, 2, 3, 4, 6, 8, 12] {
            case::<[u16; 4]>(ctx, what, 9, [1, 2, 3, 4], at);
            case::<[u16; 4]>(ctx, what, 8, [7, 7, 7, 7], at);
            case::<[u32; 4]>(ctx, what, 5, [9, 8, 7, 6], at);
            case::<[u32; 4]>(ctx, what, 6, [5, 5, 5, 5], at);
            case::<[u8; 16]>(ctx, what, 3, [3; 16], at);
            case::<[u8; 8]>(ctx, what, 7, [1, 2, 3, 4, 5, 6, 7, 8], at);
            case::<u32>(ctx, what, 11, 0xdead_beef, at);
        }
    });
}
