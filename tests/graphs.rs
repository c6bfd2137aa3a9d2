//! Compute graphs: a random sequence captured and replayed N times gives
//! the same bytes as the same sequence enqueued N times, on both descriptor
//! paths and under synchronization validation, with buffers the user
//! dropped while the graph holds them; replays with parameters; ordering
//! against surrounding work and other streams; what cannot be captured.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{assert_clean, context_with, Rng, Saxpy};
use vkcompute::{
    shaders, ContextOptions, DeviceBuffer, DeviceContext, Error, GraphParams, Kernel, KernelArg,
};

const N: usize = 256;

fn options(push_descriptors: bool) -> ContextOptions {
    ContextOptions::new()
        .validation(true)
        .push_descriptors(push_descriptors)
}

/// One operation of a random sequence, on buffer indices.
#[derive(Clone, Debug)]
enum Step {
    /// A whole-buffer copy.
    Copy(usize, usize),
    /// A copy of a quarter of one buffer into a quarter of another.
    CopyQuarter(usize, usize, usize, usize),
    Fill(usize, u32),
    /// A fill of bytes at an odd offset (the fill kernel's masked words).
    FillBytes(usize, u8),
    /// A fill of 64-bit elements (the fill kernel).
    FillWide(usize, u64),
    /// A fill of 3-byte elements (copies of a tile).
    FillTriple(usize, [u8; 3]),
    /// `c = a + b` over the whole buffers.
    Add(usize, usize, usize),
}

fn random_steps(rng: &mut Rng, buffers: usize, len: usize) -> Vec<Step> {
    let pick = |rng: &mut Rng| rng.below(buffers as u64) as usize;
    (0..len)
        .map(|_| match rng.below(7) {
            0 => loop {
                let (a, b) = (pick(rng), pick(rng));
                if a != b {
                    break Step::Copy(a, b);
                }
            },
            1 => loop {
                let (a, b) = (pick(rng), pick(rng));
                let (qa, qb) = (rng.below(4) as usize, rng.below(4) as usize);
                if a != b || qa != qb {
                    break Step::CopyQuarter(a, qa, b, qb);
                }
            },
            2 => Step::Fill(pick(rng), rng.below(1000) as u32),
            3 => Step::FillBytes(pick(rng), rng.below(256) as u8),
            4 => Step::FillWide(pick(rng), rng.next_u64()),
            5 => {
                let v = rng.next_u64().to_le_bytes();
                Step::FillTriple(pick(rng), [v[0], v[1], v[2]])
            }
            _ => loop {
                let (a, b, c) = (pick(rng), pick(rng), pick(rng));
                if c != a && c != b {
                    break Step::Add(a, b, c);
                }
            },
        })
        .collect()
}

fn quarter(buf: &DeviceBuffer<u32>, q: usize) -> DeviceBuffer<u32> {
    buf.create_sub_buffer(q * N / 4, N / 4).unwrap()
}

/// The bytes of a buffer but its first 3 and last 2.
fn odd_bytes(buf: &DeviceBuffer<u32>) -> DeviceBuffer<u8> {
    buf.create_sub_buffer(3, 4 * N - 5).unwrap()
}

fn wide(buf: &DeviceBuffer<u32>) -> DeviceBuffer<u64> {
    buf.create_sub_buffer(0, N / 2).unwrap()
}

fn triples(buf: &DeviceBuffer<u32>) -> DeviceBuffer<[u8; 3]> {
    buf.create_sub_buffer(1, 4 * N / 3 - 1).unwrap()
}

/// Runs `steps` on `bufs` directly.
fn enqueue(ctx: &DeviceContext, add: &Kernel, bufs: &[DeviceBuffer<u32>], steps: &[Step]) {
    let map: Vec<usize> = (0..bufs.len()).collect();
    enqueue_mapped(ctx, add, bufs, &map, steps, &[N as u32; 64]);
}

/// The arguments of `Step::Add(a, b, c)`.
fn add_args(bufs: &[DeviceBuffer<u32>], a: usize, b: usize, c: usize) -> [KernelArg<'_>; 3] {
    [
        bufs[a].arg_reinterpret(),
        bufs[b].arg_reinterpret(),
        bufs[c].arg_reinterpret(),
    ]
}

/// Captures `steps` on `bufs` into a graph.
fn capture(
    ctx: &DeviceContext,
    add: &Kernel,
    bufs: &[DeviceBuffer<u32>],
    steps: &[Step],
) -> vkcompute::Graph {
    capture_with_ids(ctx, add, bufs, steps).0
}

/// [`capture`], with the ids of the additions.
fn capture_with_ids(
    ctx: &DeviceContext,
    add: &Kernel,
    bufs: &[DeviceBuffer<u32>],
    steps: &[Step],
) -> (vkcompute::Graph, Vec<vkcompute::DispatchId>) {
    let mut ids = Vec::new();
    let mut g = ctx.capture_graph();
    for step in steps {
        match *step {
            Step::Copy(a, b) => {
                g.enqueue_copy_to(&bufs[a], &bufs[b]).unwrap();
            }
            Step::CopyQuarter(a, qa, b, qb) => {
                g.enqueue_copy_to(&quarter(&bufs[a], qa), &quarter(&bufs[b], qb))
                    .unwrap();
            }
            Step::Fill(a, v) => {
                g.enqueue_fill(&bufs[a], v).unwrap();
            }
            Step::FillBytes(a, v) => {
                g.enqueue_fill(&odd_bytes(&bufs[a]), v).unwrap();
            }
            Step::FillWide(a, v) => {
                g.enqueue_fill(&wide(&bufs[a]), v).unwrap();
            }
            Step::FillTriple(a, v) => {
                g.enqueue_fill(&triples(&bufs[a]), v).unwrap();
            }
            Step::Add(a, b, c) => {
                let id = g
                    .enqueue_function(add, (N / 64) as u32, &add_args(bufs, a, b, c), &(N as u32))
                    .unwrap();
                ids.push(id);
            }
        }
    }
    (g.finish().unwrap(), ids)
}

/// Buffers of small floats (as bits), the same on every call with `seed`.
fn buffers(ctx: &DeviceContext, count: usize, seed: u64) -> Vec<DeviceBuffer<u32>> {
    let mut rng = Rng::new(seed);
    (0..count)
        .map(|_| {
            let b = ctx.enqueue_create_buffer::<u32>(N).unwrap();
            let data: Vec<u32> = (0..N).map(|_| (rng.below(64) as f32).to_bits()).collect();
            b.enqueue_copy_from(&data).unwrap();
            b
        })
        .collect()
}

#[test]
fn replays_match_the_same_operations_enqueued_one_by_one() {
    for push_descriptors in [true, false] {
        let ctx = context_with(options(push_descriptors));
        let log = ctx.diagnostics().validation_log();
        let add = Kernel::new(&ctx, shaders::VECTOR_ADD, "main").unwrap();
        for seed in 0..12u64 {
            let mut rng = Rng::new(seed + 100);
            let count = 3 + rng.below(3) as usize;
            let len = 1 + rng.below(24) as usize;
            let steps = random_steps(&mut rng, count, len);
            let replays = 1 + rng.below(5) as usize;
            let direct = buffers(&ctx, count, seed);
            let mut captured = buffers(&ctx, count, seed);
            let graph = capture(&ctx, &add, &captured, &steps);
            // Drop the user's handles of all but the first buffer: the graph
            // keeps them alive; the results of the first are compared below,
            // the others through a copy the graph makes into a fresh buffer.
            let keep = captured.remove(0);
            drop(captured);
            for _ in 0..replays {
                enqueue(&ctx, &add, &direct, &steps);
                ctx.enqueue_graph(&graph).unwrap();
            }
            assert_eq!(
                keep.to_vec().unwrap(),
                direct[0].to_vec().unwrap(),
                "seed {seed} ({push_descriptors}): {steps:?} x{replays}"
            );
        }
        drop((add, ctx));
        assert_clean(&log, "graph replays");
    }
}

#[test]
fn every_buffer_of_a_graph_matches_after_interleaved_work() {
    let ctx = context_with(options(true));
    let log = ctx.diagnostics().validation_log();
    let add = Kernel::new(&ctx, shaders::VECTOR_ADD, "main").unwrap();
    let mut rng = Rng::new(7);
    let steps = random_steps(&mut rng, 4, 30);
    let direct = buffers(&ctx, 4, 1);
    let captured = buffers(&ctx, 4, 1);
    let graph = capture(&ctx, &add, &captured, &steps);
    for round in 0..6u32 {
        // Ordinary work on the same buffers before and after each replay.
        direct[round as usize % 4].enqueue_fill(round).unwrap();
        captured[round as usize % 4].enqueue_fill(round).unwrap();
        enqueue(&ctx, &add, &direct, &steps);
        ctx.enqueue_graph(&graph).unwrap();
        direct[3].enqueue_copy_from(&direct[0]).unwrap();
        captured[3].enqueue_copy_from(&captured[0]).unwrap();
    }
    for (d, c) in direct.iter().zip(&captured) {
        assert_eq!(d.to_vec().unwrap(), c.to_vec().unwrap());
    }
    drop((graph, add, direct, captured, ctx));
    assert_clean(&log, "interleaved replays");
}

#[test]
fn replays_take_other_push_constants_and_buffers() {
    for push_descriptors in [true, false] {
        let ctx = context_with(options(push_descriptors));
        let log = ctx.diagnostics().validation_log();
        let saxpy = Kernel::new(&ctx, shaders::SAXPY, "main").unwrap();
        let n = 1024usize;
        let x = ctx.enqueue_create_buffer::<f32>(n).unwrap();
        let y = ctx.enqueue_create_buffer::<f32>(n).unwrap();
        let y2 = ctx.enqueue_create_buffer::<f32>(n).unwrap();
        x.enqueue_fill(1.0).unwrap();
        let mut g = ctx.capture_graph();
        g.enqueue_fill(&y, 0.0f32).unwrap();
        let step = g
            .enqueue_function(
                &saxpy,
                (n / 256) as u32,
                &[x.arg(), y.arg()],
                &Saxpy {
                    a: 2.0,
                    n: n as u32,
                },
            )
            .unwrap();
        let graph = g.finish().unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        assert_eq!(y.to_vec().unwrap(), vec![2.0; n]);
        let three = Saxpy {
            a: 3.0,
            n: n as u32,
        };
        let params = GraphParams::new()
            .push(step, &three)
            .buffer(&y, &y2)
            .unwrap();
        ctx.enqueue_graph_with(&graph, &params).unwrap();
        assert_eq!(y2.to_vec().unwrap(), vec![3.0; n]);
        assert_eq!(
            y.to_vec().unwrap(),
            vec![2.0; n],
            "the captured buffer is untouched"
        );
        // The plain replay is unchanged by a replay with parameters.
        y.enqueue_fill(9.0).unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        assert_eq!(y.to_vec().unwrap(), vec![2.0; n]);
        // Wrong substitutes are clear errors, and the graph still works.
        let short = ctx.enqueue_create_buffer::<f32>(n - 1).unwrap();
        let e = GraphParams::new().buffer(&y, &short).err().unwrap();
        assert!(matches!(e, Error::LengthMismatch { .. }), "{e}");
        let e = ctx
            .enqueue_graph_with(&graph, &GraphParams::new().push(step, &1u32))
            .unwrap_err();
        assert!(matches!(e, Error::PushConstantSize { .. }), "{e}");
        ctx.enqueue_graph(&graph).unwrap();
        assert_eq!(y.to_vec().unwrap(), vec![2.0; n]);
        drop((graph, saxpy, x, y, y2, short, ctx));
        assert_clean(&log, "replays with parameters");
    }
}

/// The capture's `enqueue_copy_from` takes the destination first, as a
/// buffer's does: the data goes from `src` into `dst`, never back, and a
/// length that differs is refused naming the call.
#[test]
fn a_captured_copy_from_goes_into_its_first_argument() {
    let ctx = context_with(options(true));
    let log = ctx.diagnostics().validation_log();
    let src = ctx.enqueue_create_buffer::<u32>(N).unwrap();
    let dst = ctx.enqueue_create_buffer::<u32>(N).unwrap();
    let data: Vec<u32> = (0..N as u32).collect();
    src.enqueue_copy_from(&data).unwrap();
    dst.enqueue_fill(7).unwrap();
    let mut g = ctx.capture_graph();
    g.enqueue_copy_from(&dst, &src).unwrap();
    let short = ctx.enqueue_create_buffer::<u32>(N - 1).unwrap();
    let refused = g.enqueue_copy_from(&short, &src).unwrap_err();
    assert!(
        refused.to_string().contains("enqueue_copy_from"),
        "{refused}"
    );
    let graph = g.finish().unwrap();
    ctx.enqueue_graph(&graph).unwrap();
    assert_eq!(dst.to_vec().unwrap(), data);
    assert_eq!(src.to_vec().unwrap(), data);
    drop((graph, src, dst, short, ctx));
    assert_clean(&log, "a captured enqueue_copy_from");
}

#[test]
fn a_graph_waits_for_another_stream_on_every_replay() {
    let ctx = context_with(options(true));
    let log = ctx.diagnostics().validation_log();
    let other = ctx.new_stream().unwrap();
    let src = other.enqueue_create_buffer::<u32>(N).unwrap();
    let dst = ctx.enqueue_create_buffer::<u32>(N).unwrap();
    let mut g = ctx.capture_graph();
    g.enqueue_wait_for(&other).unwrap();
    g.enqueue_copy_to(&src, &dst).unwrap();
    let graph = g.finish().unwrap();
    for round in 0..5u32 {
        src.enqueue_fill(round).unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        assert_eq!(dst.to_vec().unwrap(), vec![round; N]);
    }
    drop((graph, src, dst, other, ctx));
    assert_clean(&log, "a graph waiting on another stream");
}

#[test]
fn what_cannot_be_replayed_is_refused_at_capture() {
    let ctx = context_with(options(true));
    let log = ctx.diagnostics().validation_log();
    let buf = ctx.enqueue_create_buffer::<u32>(N).unwrap();
    let mut g = ctx.capture_graph();
    let e = g.enqueue_copy_to(&vec![1u32; N][..], &buf).err().unwrap();
    assert!(matches!(e, Error::NotCapturable { .. }), "{e}");
    // 12-byte elements are filled from a tile the graph keeps.
    let wide = ctx.enqueue_create_buffer::<[u32; 3]>(8).unwrap();
    g.enqueue_fill(&wide, [1, 2, 3]).unwrap();
    let add = Kernel::new(&ctx, shaders::VECTOR_ADD, "main").unwrap();
    let e = g
        .enqueue_function(&add, 1, &[buf.arg(), buf.arg()], &(N as u32))
        .unwrap_err();
    assert!(matches!(e, Error::ArgumentCount { .. }), "{e}");
    let other_device = context_with(ContextOptions::new().validation(true));
    let foreign = other_device.enqueue_create_buffer::<u32>(N).unwrap();
    let e = g.enqueue_copy_to(&foreign, &buf).err().unwrap();
    assert!(matches!(e, Error::DifferentDevice { .. }), "{e}");
    // What was captured still replays.
    g.enqueue_fill(&buf, 4).unwrap();
    let graph = g.finish().unwrap();
    ctx.enqueue_graph(&graph).unwrap();
    assert_eq!(buf.to_vec().unwrap(), vec![4; N]);
    assert_eq!(wide.to_vec().unwrap(), vec![[1, 2, 3]; 8]);
    // A replay on a mapped buffer is refused like any command.
    {
        let mapped = buf.map_to_host().unwrap();
        let e = ctx.enqueue_graph(&graph).unwrap_err();
        assert!(matches!(e, Error::BufferMapped { .. }), "{e}");
        drop(mapped);
    }
    let e = other_device.enqueue_graph(&graph).unwrap_err();
    assert!(matches!(e, Error::DifferentDevice { .. }), "{e}");
    drop((graph, add, buf, wide, foreign, other_device, ctx));
    assert_clean(&log, "refused captures");
}

#[test]
fn a_graph_and_its_buffers_dropped_while_its_replay_runs() {
    let ctx = context_with(options(false));
    let log = ctx.diagnostics().validation_log();
    let add = Kernel::new(&ctx, shaders::VECTOR_ADD, "main").unwrap();
    for round in 0..20u64 {
        let bufs = buffers(&ctx, 3, round);
        let mut g = ctx.capture_graph();
        g.enqueue_fill(&bufs[0], 1.5f32.to_bits()).unwrap();
        // A fill from a tile the graph owns, which must outlive the replays.
        g.enqueue_fill(&triples(&bufs[1]), [1, 2, 3]).unwrap();
        g.enqueue_function(
            &add,
            (N / 64) as u32,
            &[
                bufs[0].arg_reinterpret(),
                bufs[1].arg_reinterpret(),
                bufs[2].arg_reinterpret(),
            ],
            &(N as u32),
        )
        .unwrap();
        let graph = g.finish().unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        // The last handles go while the replays may still run: the batch
        // that completes them frees the graph's recording and the buffers.
        drop((graph, bufs));
        if round % 2 == 0 {
            ctx.synchronize().unwrap();
        }
    }
    ctx.synchronize().unwrap();
    assert_eq!(ctx.diagnostics().live_objects().pending_frees, 0);
    drop((add, ctx));
    assert_clean(&log, "graphs dropped during their replays");
}

#[test]
fn substitutes_that_would_break_a_capture_check_are_refused() {
    let ctx = context_with(options(true));
    let log = ctx.diagnostics().validation_log();
    let add = Kernel::new(&ctx, shaders::VECTOR_ADD, "main").unwrap();
    let bufs = buffers(&ctx, 3, 9);
    let whole = ctx.enqueue_create_buffer::<u32>(2 * N).unwrap();
    let (low, high) = (
        whole.create_sub_buffer::<u32>(0, N).unwrap(),
        whole.create_sub_buffer::<u32>(N, N).unwrap(),
    );
    let mut g = ctx.capture_graph();
    g.enqueue_copy_to(&bufs[0], &bufs[1]).unwrap();
    let step = g
        .enqueue_function(
            &add,
            (N / 64) as u32,
            &[
                bufs[0].arg_reinterpret(),
                bufs[1].arg_reinterpret(),
                bufs[2].arg_reinterpret(),
            ],
            &(N as u32),
        )
        .unwrap();
    let graph = g.finish().unwrap();
    // The id of a second dispatch, which this graph does not have.
    let mut other = ctx.capture_graph();
    for _ in 0..2 {
        other
            .enqueue_function(
                &add,
                1,
                &[
                    bufs[0].arg_reinterpret(),
                    bufs[1].arg_reinterpret(),
                    bufs[2].arg_reinterpret(),
                ],
                &0u32,
            )
            .unwrap();
    }
    let missing = other
        .enqueue_function(
            &add,
            1,
            &[
                bufs[0].arg_reinterpret(),
                bufs[1].arg_reinterpret(),
                bufs[2].arg_reinterpret(),
            ],
            &0u32,
        )
        .unwrap();
    drop(other);
    let refused = |params: GraphParams<'_>| {
        let e = ctx.enqueue_graph_with(&graph, &params).unwrap_err();
        assert!(
            matches!(e, Error::GraphParameter { .. } | Error::Misaligned { .. }),
            "{e}"
        );
    };
    // The copy's ends in one range; the dispatch writing what it reads.
    refused(GraphParams::new().buffer(&bufs[1], &bufs[0]).unwrap());
    refused(GraphParams::new().buffer(&bufs[2], &bufs[0]).unwrap());
    // A buffer the graph does not use.
    refused(
        GraphParams::new()
            .buffer(&whole.create_sub_buffer(0, N).unwrap(), &low)
            .unwrap(),
    );
    // A binding offset the device cannot bind (4 bytes into a buffer).
    let odd = whole.create_sub_buffer::<u32>(1, N).unwrap();
    refused(GraphParams::new().buffer(&bufs[2], &odd).unwrap());
    // A push constant of the wrong size, a dispatch that does not exist.
    let e = ctx
        .enqueue_graph_with(&graph, &GraphParams::new().push(step, &[0u8; 3]))
        .unwrap_err();
    assert!(matches!(e, Error::PushConstantSize { .. }), "{e}");
    refused(GraphParams::new().push(missing, &0u32));
    // Two halves of one buffer are fine: they do not overlap.
    ctx.enqueue_graph_with(
        &graph,
        &GraphParams::new()
            .buffer(&bufs[0], &low)
            .unwrap()
            .buffer(&bufs[1], &high)
            .unwrap(),
    )
    .unwrap();
    ctx.enqueue_graph(&graph).unwrap();
    ctx.synchronize().unwrap();
    drop((graph, add, bufs, low, high, odd, whole, ctx));
    assert_clean(&log, "refused substitutes");
}

/// A `DispatchId` belongs to its graph: given with another graph whose
/// dispatch takes push constants of the same size, it is refused with an
/// error that names both graphs, and neither graph's buffers change.
/// (Before issue 34 the other graph's dispatch ran with the values.)
#[test]
fn a_dispatch_id_of_one_graph_is_refused_by_another() {
    let ctx = context_with(options(true));
    let log = ctx.diagnostics().validation_log();
    let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
    let (a, b) = (
        ctx.enqueue_create_buffer::<u32>(64).unwrap(),
        ctx.enqueue_create_buffer::<u32>(64).unwrap(),
    );
    a.enqueue_fill(10).unwrap();
    b.enqueue_fill(20).unwrap();
    let capture = |buf: &DeviceBuffer<u32>, label: &str| {
        let mut g = ctx.capture_graph();
        let id = g
            .enqueue_function(&add_one, 1, &[buf.arg()], &64u32)
            .unwrap();
        g.label(label);
        (g.finish().unwrap(), id)
    };
    let (graph_a, id_a) = capture(&a, "graph a");
    let (graph_b, id_b) = capture(&b, "graph b");
    assert_ne!(graph_a.id(), graph_b.id());
    assert_eq!((id_a.graph(), id_b.graph()), (graph_a.id(), graph_b.id()));
    // The same dispatch index and push size in both graphs.
    let e = ctx
        .enqueue_graph_with(&graph_b, &GraphParams::new().push(id_a, &32u32))
        .unwrap_err();
    let message = e.to_string();
    assert!(matches!(e, Error::GraphParameter { .. }), "{e}");
    for name in [
        format!("graph {}", graph_a.id()),
        format!("graph {} (`graph b`)", graph_b.id()),
    ] {
        assert!(message.contains(&name), "{name:?} not in: {message}");
    }
    // A clone of a graph is the same graph.
    ctx.enqueue_graph_with(&graph_b.clone(), &GraphParams::new().push(id_b, &32u32))
        .unwrap();
    ctx.enqueue_graph_with(&graph_a, &GraphParams::new().push(id_a, &64u32))
        .unwrap();
    let (mut want_a, mut want_b) = (vec![11u32; 64], vec![20u32; 64]);
    want_b[..32].iter_mut().for_each(|v| *v += 1);
    assert_eq!(a.to_vec().unwrap(), want_a, "graph a");
    assert_eq!(b.to_vec().unwrap(), want_b, "graph b: only its own replay");
    ctx.enqueue_graph(&graph_a).unwrap();
    want_a.iter_mut().for_each(|v| *v += 1);
    assert_eq!(a.to_vec().unwrap(), want_a, "graph a after the refusal");
    drop((graph_a, graph_b, add_one, a, b, ctx));
    assert_clean(&log, "a DispatchId given to another graph");
}

#[test]
fn one_graph_replayed_from_two_threads_on_two_streams_beside_a_mapping() {
    let ctx = context_with(options(true));
    let log = ctx.diagnostics().validation_log();
    let second = ctx.new_stream().unwrap();
    let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main").unwrap();
    let buf = ctx.enqueue_create_buffer::<u32>(64).unwrap();
    buf.enqueue_fill(0).unwrap();
    let mut g = ctx.capture_graph();
    g.enqueue_function(&add_one, 1, &[buf.arg()], &64u32)
        .unwrap();
    let graph = g.finish().unwrap();
    let replays = 25u32;
    let mappings = 5u32;
    std::thread::scope(|scope| {
        for stream in [&ctx, &second] {
            let graph = &graph;
            scope.spawn(move || {
                let mut done = 0;
                while done < replays {
                    match stream.enqueue_graph(graph) {
                        Ok(()) => done += 1,
                        // The third thread maps the buffer meanwhile.
                        Err(Error::BufferMapped { .. }) => std::thread::yield_now(),
                        Err(e) => panic!("replay: {e}"),
                    }
                }
                stream.synchronize().unwrap();
            });
        }
        let buf = &buf;
        scope.spawn(move || {
            let mut done = 0;
            while done < mappings {
                match buf.map_to_host() {
                    Ok(mut m) => {
                        m.iter_mut().for_each(|v| *v += 1000);
                        m.finish().unwrap();
                        done += 1;
                    }
                    Err(Error::BufferMapped { .. }) => std::thread::yield_now(),
                    Err(e) => panic!("map: {e}"),
                }
            }
        });
    });
    // Every replay and every mapping counted once: none lost, none torn.
    assert_eq!(
        buf.to_vec().unwrap(),
        vec![2 * replays + 1000 * mappings; 64]
    );
    drop((graph, add_one, buf, second, ctx));
    assert_clean(&log, "one graph replayed from two threads");
}

#[test]
fn a_fill_replayed_on_a_substitute_at_another_offset_is_planned_for_that_offset() {
    // A fill captured at byte 0 (one vkCmdFillBuffer) replayed on views at
    // bytes 1, 2 and 3 (u8) and 2 (u16), where no 4-byte fill can start:
    // every replay fills exactly the substitute's bytes.
    for push in [true, false] {
        let ctx = context_with(options(push));
        let log = ctx.diagnostics().validation_log();
        let len = 1000usize;
        let whole = ctx.enqueue_create_buffer::<u8>(len + 16).unwrap();
        let a = ctx.enqueue_create_buffer::<u8>(len).unwrap();
        let mut g = ctx.capture_graph();
        g.enqueue_fill(&a, 0xab).unwrap();
        let graph = g.finish().unwrap();
        for at in [1usize, 2, 3, 4, 7] {
            whole.enqueue_fill(0).unwrap();
            let view = whole.create_sub_buffer::<u8>(at, len).unwrap();
            ctx.enqueue_graph_with(&graph, &GraphParams::new().buffer(&a, &view).unwrap())
                .unwrap();
            let mut expected = vec![0u8; len + 16];
            expected[at..at + len].fill(0xab);
            assert_eq!(whole.to_vec().unwrap(), expected, "a u8 view at byte {at}");
        }
        let words = whole.create_sub_buffer::<u16>(0, (len + 16) / 2).unwrap();
        let b = ctx.enqueue_create_buffer::<u16>(len / 2).unwrap();
        let mut g = ctx.capture_graph();
        g.enqueue_fill(&b, 0x1234).unwrap();
        let graph16 = g.finish().unwrap();
        for at in [1usize, 3] {
            words.enqueue_fill(0).unwrap();
            let view = whole.create_sub_buffer::<u16>(at, len / 2).unwrap();
            ctx.enqueue_graph_with(&graph16, &GraphParams::new().buffer(&b, &view).unwrap())
                .unwrap();
            let mut expected = vec![0u16; (len + 16) / 2];
            expected[at..at + len / 2].fill(0x1234);
            assert_eq!(
                words.to_vec().unwrap(),
                expected,
                "a u16 view at element {at}"
            );
        }
        // The captured recording still fills the captured buffer.
        ctx.enqueue_graph(&graph).unwrap();
        assert_eq!(a.to_vec().unwrap(), vec![0xab; len]);
        ctx.synchronize().unwrap();
        drop((graph, graph16, a, b, words, whole, ctx));
        assert_clean(&log, &format!("substitute fills, push descriptors {push}"));
    }
}

/// Runs `steps` directly as a replay with parameters runs them: buffer `i`
/// of the steps is `bufs[map[i]]` where the operation uses the whole
/// buffer's bytes (a substitute replaces exactly the captured view: its
/// memory, offset and length), and the `k`th addition covers `ns[k]`
/// elements.
fn enqueue_mapped(
    ctx: &DeviceContext,
    add: &Kernel,
    bufs: &[DeviceBuffer<u32>],
    map: &[usize],
    steps: &[Step],
    ns: &[u32],
) {
    let mut dispatch = 0;
    let whole = |i: usize| &bufs[map[i]];
    for step in steps {
        match *step {
            Step::Copy(a, b) => whole(b).enqueue_copy_from(whole(a)).unwrap(),
            // Views of part of a buffer are not the captured whole buffer.
            Step::CopyQuarter(a, qa, b, qb) => quarter(&bufs[b], qb)
                .enqueue_copy_from(&quarter(&bufs[a], qa))
                .unwrap(),
            Step::Fill(a, v) => whole(a).enqueue_fill(v).unwrap(),
            Step::FillBytes(a, v) => odd_bytes(&bufs[a]).enqueue_fill(v).unwrap(),
            // Its view spans the whole buffer: the same view.
            Step::FillWide(a, v) => wide(whole(a)).enqueue_fill(v).unwrap(),
            Step::FillTriple(a, v) => triples(&bufs[a]).enqueue_fill(v).unwrap(),
            Step::Add(a, b, c) => {
                let n = ns[dispatch];
                dispatch += 1;
                let (a, b, c) = (map[a], map[b], map[c]);
                ctx.enqueue_function(add, (N / 64) as u32, &add_args(bufs, a, b, c), &n)
                    .unwrap()
            }
        }
    }
}

/// Replays that change random push constants and put random buffers (spare
/// ones, or other buffers of the graph, which makes independent operations
/// depend on each other) in place of captured ones give the bytes of the
/// same operations enqueued one by one, or are refused with nothing run
/// where a substitute would break a capture check. Each replay records
/// only the changed operations (the rest runs as recorded segments), so
/// this checks the barriers between the pieces.
#[test]
fn replays_with_random_parameters_match_the_operations_enqueued_one_by_one() {
    for push_descriptors in [true, false] {
        let ctx = context_with(options(push_descriptors));
        let log = ctx.diagnostics().validation_log();
        let add = Kernel::new(&ctx, shaders::VECTOR_ADD, "main").unwrap();
        let (mut replays, mut refused) = (0, 0);
        for seed in 0..10u64 {
            let mut rng = Rng::new(seed + 500);
            let count = 4;
            let len = 2 + rng.below(30) as usize;
            let steps = random_steps(&mut rng, count, len);
            // The graph's buffers, then two spares.
            let graph_bufs = buffers(&ctx, count + 2, seed);
            let direct = buffers(&ctx, count + 2, seed);
            let (graph, ids) = capture_with_ids(&ctx, &add, &graph_bufs[..count], &steps);
            for _ in 0..4 {
                let mut map: Vec<usize> = (0..count).collect();
                let mut params = GraphParams::new();
                for i in 0..count {
                    if rng.below(3) == 0 {
                        let with = rng.below(count as u64 + 2) as usize;
                        if with != i {
                            map[i] = with;
                            params = params.buffer(&graph_bufs[i], &graph_bufs[with]).unwrap();
                        }
                    }
                }
                let ns: Vec<u32> = (0..ids.len())
                    .map(|_| {
                        if rng.below(2) == 0 {
                            1 + rng.below(N as u64) as u32
                        } else {
                            N as u32
                        }
                    })
                    .collect();
                for (id, n) in ids.iter().zip(&ns) {
                    if *n != N as u32 {
                        params = params.push(*id, n);
                    }
                }
                match ctx.enqueue_graph_with(&graph, &params) {
                    Ok(()) => {
                        enqueue_mapped(&ctx, &add, &direct, &map, &steps, &ns);
                        replays += 1;
                    }
                    Err(Error::GraphParameter { .. }) => refused += 1,
                    Err(e) => panic!("seed {seed}: {e}"),
                }
            }
            for (i, (g, d)) in graph_bufs.iter().zip(&direct).enumerate() {
                assert_eq!(
                    g.to_vec().unwrap(),
                    d.to_vec().unwrap(),
                    "seed {seed} ({push_descriptors}), buffer {i}: {steps:?}"
                );
            }
        }
        assert!(
            replays > 20 && refused > 0,
            "{replays} replays, {refused} refused"
        );
        drop((add, ctx));
        assert_clean(&log, "replays with random parameters");
    }
}
