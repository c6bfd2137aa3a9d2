//! Kernels that talk back: `debugPrintfEXT` lines and `VK_ASSERT`
//! failures (from `#include <vkcompute.glsl>`), made by vkcompute's
//! rewriting of the module, not by a validation layer: each conversion,
//! vectors, many invocations in order, overflow, loops and functions,
//! several streams, indirect dispatch, assertions, and refusals.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::sync::{Arc, Mutex};

use common::{assert_clean, context_with, Path};
use vkcompute::{
    ContextOptions, DeviceContext, Error, GlslOptimization, GlslTarget, GraphParams, Kernel,
    PrintfOutput,
};

/// A printed line as the callback saw it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Line {
    kernel: String,
    invocation: [u32; 3],
    text: String,
}

type Lines = Arc<Mutex<Vec<Line>>>;

/// A validated context on `path` whose printf lines land in the returned
/// list; `options` adds to the test's options.
fn collecting(
    path: Path,
    options: impl FnOnce(ContextOptions) -> ContextOptions,
) -> (DeviceContext, Lines) {
    let lines: Lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let options = options(common::options(path)).printf(PrintfOutput::callback(move |l| {
        sink.lock().unwrap().push(Line {
            kernel: l.kernel.to_string(),
            invocation: l.invocation,
            text: l.text.to_string(),
        })
    }));
    (context_with(options), lines)
}

fn texts(lines: &Lines) -> Vec<String> {
    lines
        .lock()
        .unwrap()
        .iter()
        .map(|l| l.text.clone())
        .collect()
}

/// A kernel of `body` (inside `main`, with `i` the global invocation
/// index, `d` a `uint` buffer at binding 0 and `p.n` a push constant),
/// `local` invocations a workgroup.
fn kernel(ctx: &DeviceContext, local: u32, body: &str) -> vkcompute::Result<Kernel> {
    let source = format!(
        "#version 450\n#include <vkcompute.glsl>\n\
         #extension GL_EXT_shader_explicit_arithmetic_types : require\n\
         layout(local_size_x = {local}) in;\n\
         layout(std430, binding = 0) buffer D {{ uint d[]; }};\n\
         layout(push_constant) uniform P {{ uint n; }} p;\n\
         void main() {{ uint i = gl_GlobalInvocationID.x; {body} }}\n"
    );
    Kernel::glsl(&source).compile().label("k").build(ctx)
}

fn run(ctx: &DeviceContext, k: &Kernel, groups: u32, n: u32) -> vkcompute::Result<()> {
    let d = ctx.enqueue_create_buffer::<u32>(4096)?;
    d.enqueue_fill(0)?;
    ctx.enqueue_function(k, groups, &[d.arg()], &n)?;
    ctx.synchronize()
}

#[test]
fn each_conversion_prints_as_rust_formats_the_same_values() {
    let (ctx, lines) = collecting(Path::Direct, |o| o);
    let body = r#"if (i == 0u) {
        debugPrintfEXT("%d|%i|%u|%x|%X|%o|%c", -5, 42, 4000000000u, 48879u, 48879u, 8u, 65);
        debugPrintfEXT("%f|%.2f|%e|%g|%a", 1.5, -2.25, 1234.5, 0.0001, 1.0);
        debugPrintfEXT("%5d|%-5d|%05d|%+d|%.3d", -5, 42, -5, 42, 7);
        debugPrintfEXT("%v2d|%v3f|%v4u", ivec2(-1, 1), vec3(0.5, 1.5, 2.5), uvec4(1u, 2u, 3u, 4u));
        debugPrintfEXT("%lu|%ld|%f", 18446744073709551614ul, -3000000000l, double(0.125));
        debugPrintfEXT("%f|%d|%u", float16_t(0.5), int16_t(-7), uint8_t(200));
        debugPrintfEXT("%s=%d%%", "ratio", 50);
    }"#;
    let k = kernel(&ctx, 1, body).unwrap();
    run(&ctx, &k, 1, 0).unwrap();
    let want = [
        format!(
            "{}|{}|{}|{:x}|{:X}|{:o}|{}",
            -5, 42, 4_000_000_000u32, 48879, 48879, 8, 'A'
        ),
        format!("{:.6}|{:.2}|1.234500e+03|0.0001|0x1p+0", 1.5, -2.25),
        format!("{:>5}|{:<5}|{:05}|{:+}|007", -5, 42, -5, 42),
        "-1, 1|0.500000, 1.500000, 2.500000|1, 2, 3, 4".to_string(),
        format!("{}|{}|{:.6}", u64::MAX - 1, -3_000_000_000i64, 0.125),
        format!("{:.6}|{}|{}", 0.5, -7, 200),
        "ratio=50%".to_string(),
    ];
    assert_eq!(texts(&lines), want);
}

#[test]
fn lines_come_in_dispatch_order_and_in_append_order_within_one() {
    let (ctx, lines) = collecting(Path::Direct, |o| o);
    let body = r#"
        for (uint k = 0u; k < 3u; k++) {
            if (k == p.n) debugPrintfEXT("dispatch %u invocation %u", p.n, i);
        }
        d[i] = i;"#;
    let k = kernel(&ctx, 64, body).unwrap();
    let d = ctx.enqueue_create_buffer::<u32>(256).unwrap();
    for n in 0..3u32 {
        ctx.enqueue_function(&k, 4, &[d.arg()], &n).unwrap();
    }
    ctx.synchronize().unwrap();
    let got = lines.lock().unwrap().clone();
    assert_eq!(got.len(), 3 * 256);
    for (n, chunk) in got.chunks(256).enumerate() {
        // Every invocation of dispatch n printed once, with its own id.
        let mut ids: Vec<u32> = chunk.iter().map(|l| l.invocation[0]).collect();
        for l in chunk {
            assert_eq!(
                l.text,
                format!("dispatch {n} invocation {}", l.invocation[0])
            );
            assert_eq!(l.kernel, "k");
        }
        ids.sort_unstable();
        assert_eq!(ids, (0..256).collect::<Vec<_>>());
    }
}

#[test]
fn a_full_buffer_drops_the_rest_and_says_how_many() {
    // 64 bytes of records: a record here is 4 + 1 words, so its slot 8
    // words (whole uvec4s), and two slots fit.
    let (ctx, lines) = collecting(Path::Staging, |o| o.printf_buffer_bytes(64));
    let k = kernel(&ctx, 8, r#"debugPrintfEXT("%u", i);"#).unwrap();
    run(&ctx, &k, 1, 0).unwrap();
    let got = texts(&lines);
    assert_eq!(got.len(), 3, "{got:?}");
    assert_eq!(got[2], "6 printf record(s) dropped: the dispatch's record buffer (64 bytes) was full (ContextOptions::printf_buffer_bytes)");
    let mut printed: Vec<u32> = got[..2].iter().map(|t| t.parse().unwrap()).collect();
    printed.sort_unstable();
    printed.dedup();
    assert_eq!(printed.len(), 2);
    assert!(printed.iter().all(|&i| i < 8), "{printed:?}");
    // The next dispatch has a buffer of its own.
    lines.lock().unwrap().clear();
    let one = kernel(&ctx, 1, r#"debugPrintfEXT("again %u", p.n);"#).unwrap();
    run(&ctx, &one, 1, 9).unwrap();
    assert_eq!(texts(&lines), ["again 9"]);
}

#[test]
fn calls_of_different_sizes_share_the_buffer_and_drops_are_counted() {
    // Two calls: a record of 4 + 1 words and one of 4 + 11; every record
    // of the kernel takes the larger's slot (16 words, 64 bytes).
    let body = r#"debugPrintfEXT("s%u", i);
        debugPrintfEXT("l%u %v4u %v4u %lu", i, uvec4(i, 1u, 2u, 3u), uvec4(i + 1u), uint64_t(i) * 3000000000ul);"#;
    let expected = |i: u32| {
        [
            format!("s{i}"),
            format!(
                "l{i} {i}, 1, 2, 3 {j}, {j}, {j}, {j} {}",
                u64::from(i) * 3_000_000_000,
                j = i + 1
            ),
        ]
    };
    for (bytes, printed) in [(1 << 18, 128), (640, 10)] {
        let (ctx, lines) = collecting(Path::Direct, |o| o.printf_buffer_bytes(bytes));
        let k = kernel(&ctx, 64, body).unwrap();
        run(&ctx, &k, 1, 0).unwrap();
        let got = lines.lock().unwrap().clone();
        let records = &got[..printed];
        for l in records {
            assert!(expected(l.invocation[0]).contains(&l.text), "{l:?}");
        }
        let mut distinct: Vec<&str> = records.iter().map(|l| l.text.as_str()).collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), printed, "{got:?}");
        if printed == 128 {
            assert_eq!(got.len(), 128);
        } else {
            assert_eq!(got.len(), printed + 1, "{got:?}");
            assert_eq!(
                got[printed].text,
                format!(
                    "{} printf record(s) dropped: the dispatch's record buffer (640 bytes) was \
                     full (ContextOptions::printf_buffer_bytes)",
                    128 - printed
                )
            );
        }
    }
}

#[test]
fn a_buffer_smaller_than_one_record_still_holds_one() {
    // A record of 4 + 13 words makes every slot 80 bytes, more than the
    // 64 asked for: the buffer holds one all the same, so the assertion
    // is not lost.
    let (ctx, lines) = collecting(Path::Direct, |o| o.printf_buffer_bytes(64));
    let body = r#"if (p.n == 99u) {
            debugPrintfEXT("%u %u %u %u %u %u %u %u %u %u %u %u %u", i, i, i, i, i, i, i, i, i, i, i, i, i);
        }
        VK_ASSERT1(i != 2u, "i = %u", i);"#;
    let k = kernel(&ctx, 4, body).unwrap();
    match run(&ctx, &k, 1, 0) {
        Err(Error::KernelAssert(a)) => assert_eq!(a.message, "i = 2"),
        other => panic!("{other:?}"),
    }
    assert_eq!(texts(&lines), ["i = 2"]);
}

#[test]
fn a_buffer_larger_than_one_binding_is_cut_to_it() {
    // 1 GiB asked for: more than a binding covers on most devices
    // (maxStorageBufferRange); the buffer is cut to the limit, and the
    // validated context sees no range past it, on a stream or in a graph.
    let (ctx, lines) = collecting(Path::Direct, |o| o.printf_buffer_bytes(1 << 30));
    let log = ctx.diagnostics().validation_log();
    let k = kernel(&ctx, 8, r#"debugPrintfEXT("%u", i);"#).unwrap();
    run(&ctx, &k, 1, 0).unwrap();
    let d = ctx.enqueue_create_buffer::<u32>(8).unwrap();
    let mut g = ctx.capture_graph();
    g.enqueue_function(&k, 1, &[d.arg()], &0u32).unwrap();
    ctx.enqueue_graph(&g.finish().unwrap()).unwrap();
    ctx.synchronize().unwrap();
    let mut got: Vec<u32> = texts(&lines).iter().map(|t| t.parse().unwrap()).collect();
    got.sort_unstable();
    let expected: Vec<u32> = (0..8).flat_map(|i| [i, i]).collect();
    assert_eq!(got, expected);
    drop((k, d, ctx));
    assert_clean(&log, "a printf buffer of 1 GiB");
}

#[test]
fn the_record_buffer_counts_against_the_storage_buffer_limits() {
    // A kernel binding an array of `n` storage buffers, printing or not.
    let (ctx, _lines) = collecting(Path::Direct, |o| o);
    let load = |n: u32, print: bool| {
        let call = if print {
            r#"debugPrintfEXT("%u", b[0].x);"#
        } else {
            ""
        };
        let source = format!(
            "#version 450\n#extension GL_EXT_debug_printf : enable\n\
             layout(local_size_x = 1) in;\n\
             layout(std430, binding = 0) buffer B {{ uint x; }} b[{n}];\n\
             void main() {{ b[{n} - 1].x = b[0].x + 1u; {call} }}\n"
        );
        Kernel::glsl(&source).compile().build(&ctx)
    };
    // The most the device (and vkcompute's pools) let a kernel bind,
    // found by loading: the limits decide, not the device's name.
    let (mut fits, mut refused) = (1u32, 4097u32);
    assert!(load(fits, false).is_ok());
    assert!(
        load(refused, false).is_err(),
        "more than 4096 storage buffers bound"
    );
    while refused - fits > 1 {
        let mid = (fits + refused) / 2;
        if load(mid, false).is_ok() {
            fits = mid;
        } else {
            refused = mid;
        }
    }
    // With the record buffer, one fewer fits, and the error says why.
    match load(fits, true) {
        Err(Error::UnsupportedKernel { reason, .. }) => {
            assert!(reason.contains("printf record buffer"), "{reason}")
        }
        other => panic!("{fits} buffers and printf: {other:?}"),
    }
    load(fits - 1, true).unwrap();
}

#[test]
fn an_assertion_is_not_lost_to_a_full_buffer() {
    // Every invocation prints, then invocation 63 fails an assertion: the
    // two slots of 64 bytes are taken by then, and the assertion's record
    // takes the assertion slot, on a stream and in a graph.
    let (ctx, lines) = collecting(Path::Direct, |o| o.printf_buffer_bytes(64));
    let k = kernel(
        &ctx,
        64,
        r#"debugPrintfEXT("%u", i); barrier(); VK_ASSERT1(i != 63u, "i = %u", i); d[i] = 1u;"#,
    )
    .unwrap();
    let d = ctx.enqueue_create_buffer::<u32>(64).unwrap();
    let mut g = ctx.capture_graph();
    g.enqueue_function(&k, 1, &[d.arg()], &0u32).unwrap();
    let graph = g.finish().unwrap();
    for replay in [false, true] {
        lines.lock().unwrap().clear();
        d.enqueue_fill(0).unwrap();
        if replay {
            ctx.enqueue_graph(&graph).unwrap();
        } else {
            ctx.enqueue_function(&k, 1, &[d.arg()], &0u32).unwrap();
        }
        match ctx.synchronize() {
            Err(Error::KernelAssert(a)) => {
                assert_eq!((a.message.as_str(), a.invocation), ("i = 63", [63, 0, 0]))
            }
            other => panic!("replay {replay}: {other:?}"),
        }
        let got = texts(&lines);
        assert_eq!(got.len(), 4, "{got:?}");
        assert_eq!(got[2], "i = 63");
        // 64 prints and the assertion asked for 65 records: 2 written, the
        // assertion kept, 62 dropped.
        assert!(got[3].starts_with("62 printf record(s) dropped"), "{got:?}");
        let v = d.to_vec().unwrap();
        assert_eq!(v.iter().sum::<u32>(), 63, "invocation 63 stopped");
    }
}

#[test]
fn futures_emit_lines_and_report_assertions_as_waits_do() {
    let (ctx, lines) = collecting(Path::Direct, |o| o);
    let k = kernel(
        &ctx,
        8,
        r#"VK_ASSERT1(i != 5u, "i = %u", i); d[i] = i + 1u;"#,
    )
    .unwrap();
    let d = ctx.enqueue_create_buffer::<u32>(8).unwrap();
    d.enqueue_fill(0).unwrap();
    // A read as a future.
    ctx.enqueue_function(&k, 1, &[d.arg()], &0u32).unwrap();
    let (read, _) = common::block_on(d.to_vec_async());
    match read {
        Err(Error::KernelAssert(a)) => assert_eq!(a.message, "i = 5"),
        other => panic!("to_vec_async: {other:?}"),
    }
    assert_eq!(texts(&lines), ["i = 5"]);
    ctx.synchronize().unwrap();
    // An event awaited.
    lines.lock().unwrap().clear();
    ctx.enqueue_function(&k, 1, &[d.arg()], &0u32).unwrap();
    let event = ctx.enqueue_record_event().unwrap();
    match common::block_on(event).0 {
        Err(Error::KernelAssert(a)) => assert_eq!(a.invocation, [5, 0, 0]),
        other => panic!("event: {other:?}"),
    }
    assert_eq!(texts(&lines), ["i = 5"]);
    ctx.synchronize().unwrap();
    assert_eq!(d.to_vec().unwrap(), [1, 2, 3, 4, 5, 0, 7, 8]);
}

#[test]
fn two_threads_waiting_at_once_get_an_assertion_once_and_every_line_once() {
    // One failing dispatch, two threads waiting on it at once, one through
    // an awaited event and one through synchronize: the assertion is
    // returned to exactly one of them, and its line is emitted once.
    let (ctx, lines) = collecting(Path::Direct, |o| o);
    let k = kernel(&ctx, 8, r#"VK_ASSERT1(i != 3u, "i = %u", i); d[i] = 1u;"#).unwrap();
    let d = ctx.enqueue_create_buffer::<u32>(8).unwrap();
    for _ in 0..20 {
        lines.lock().unwrap().clear();
        ctx.enqueue_function(&k, 1, &[d.arg()], &0u32).unwrap();
        let event = ctx.enqueue_record_event().unwrap();
        let (a, b) = std::thread::scope(|s| {
            let a = s.spawn(|| common::block_on(event).0);
            let b = s.spawn(|| ctx.synchronize());
            (a.join().unwrap(), b.join().unwrap())
        });
        let asserted = [&a, &b]
            .iter()
            .filter(|r| matches!(r, Err(Error::KernelAssert(_))))
            .count();
        assert_eq!(asserted, 1, "{a:?} {b:?}");
        assert!(a.is_ok() || b.is_ok(), "{a:?} {b:?}");
        ctx.synchronize().unwrap();
        assert_eq!(texts(&lines), ["i = 3"]);
    }
}

#[test]
fn printf_in_functions_and_loops_and_unreached_printf() {
    let (ctx, lines) = collecting(Path::Direct, |o| o);
    let source = r#"#version 450
        #include <vkcompute.glsl>
        layout(local_size_x = 2) in;
        layout(std430, binding = 0) buffer D { uint d[]; };
        uint twice(uint x) { debugPrintfEXT("twice(%u)", x); return 2u * x; }
        void main() {
            uint i = gl_GlobalInvocationID.x;
            uint s = 0u;
            for (uint k = 0u; k < 2u; k++) { s += twice(k + 10u * i); }
            if (d[0] == 12345u) debugPrintfEXT("never");
            d[i] = s;
        }"#;
    let k = Kernel::glsl(source).compile().build(&ctx).unwrap();
    let d = ctx.enqueue_create_buffer::<u32>(2).unwrap();
    d.enqueue_fill(0).unwrap();
    ctx.enqueue_function(&k, 1, &[d.arg()], &()).unwrap();
    assert_eq!(d.to_vec().unwrap(), [2, 42]);
    let mut got = texts(&lines);
    got.sort();
    assert_eq!(got, ["twice(0)", "twice(1)", "twice(10)", "twice(11)"]);
    // The kernel's bindings are the shader's own: the record buffer's
    // cannot be given an argument.
    assert_eq!(k.bindings().len(), 1);
    let other = ctx.enqueue_create_buffer::<u32>(64).unwrap();
    for args in [
        vec![d.arg(), other.arg()],
        vec![d.arg(), other.arg().at(0, 1)],
    ] {
        let e = ctx.enqueue_function(&k, 1, &args, &()).unwrap_err();
        assert!(
            matches!(e, Error::ArgumentCount { .. } | Error::Argument { .. }),
            "{e:?}"
        );
    }
    ctx.enqueue_function(&k, 1, &[d.arg()], &()).unwrap();
    ctx.synchronize().unwrap();
    assert_eq!(lines.lock().unwrap().len(), 8);
}

#[test]
fn a_kernel_without_printf_is_loaded_as_before() {
    let (ctx, lines) = collecting(Path::Direct, |o| o);
    let plain = kernel(&ctx, 1, "d[0] = p.n;").unwrap();
    let store = Kernel::new(&ctx, vkcompute::shaders::STORE, "main").unwrap();
    assert_eq!(plain.bindings().len(), 1);
    assert_eq!(store.bindings().len(), 1);
    run(&ctx, &plain, 1, 3).unwrap();
    assert!(texts(&lines).is_empty());
}

#[test]
fn a_failed_assertion_is_an_error_of_the_next_wait_once() {
    let (ctx, lines) = collecting(Path::Direct, |o| o);
    let source = r#"#version 450
        #include <vkcompute.glsl>
        layout(local_size_x = 8) in;
        layout(std430, binding = 0) buffer D { uint d[]; };
        layout(push_constant) uniform P { uint n; } p;
        void main() {
            uint i = gl_GlobalInvocationID.x;
            VK_ASSERT1(i < p.n, "i=%u out of range", i);
            d[i] = i + 1u;
        }"#;
    let kernel = Kernel::glsl(source)
        .file_name("bounds.comp")
        .compile()
        .build(&ctx)
        .unwrap();
    let d = ctx.enqueue_create_buffer::<u32>(8).unwrap();
    d.enqueue_fill(0).unwrap();
    ctx.enqueue_function(&kernel, 1, &[d.arg()], &7u32).unwrap();
    match ctx.synchronize() {
        Err(Error::KernelAssert(a)) => {
            assert_eq!(a.kernel, "bounds.comp");
            assert!(a.file.ends_with("bounds.comp"), "{}", a.file);
            assert_eq!(a.line, 8);
            assert_eq!(a.message, "i=7 out of range");
            assert_eq!(a.invocation, [7, 0, 0]);
            assert!(a.to_string().contains("line 8"), "{a}");
        }
        other => panic!("{other:?}"),
    }
    // Once: the context goes on; the failing invocation stopped, the
    // others finished.
    ctx.synchronize().unwrap();
    assert_eq!(d.to_vec().unwrap(), [1, 2, 3, 4, 5, 6, 7, 0]);
    assert_eq!(texts(&lines), ["i=7 out of range"]);
    // A read that waits for the dispatch returns it too.
    ctx.enqueue_function(&kernel, 1, &[d.arg()], &0u32).unwrap();
    match d.to_vec() {
        Err(Error::KernelAssert(a)) => assert_eq!(a.message, "i=0 out of range"),
        other => panic!("{other:?}"),
    }
    assert_eq!(d.to_vec().unwrap(), [1, 2, 3, 4, 5, 6, 7, 0]);
}

#[test]
fn a_second_stream_and_indirect_dispatch_print_and_assert() {
    let (ctx, lines) = collecting(Path::Direct, |o| o);
    let second = ctx.new_stream().unwrap();
    let k = kernel(
        &ctx,
        1,
        r#"debugPrintfEXT("n=%u", p.n); VK_ASSERT(p.n != 5u, "five");"#,
    )
    .unwrap();
    let d = second.enqueue_create_buffer::<u32>(4).unwrap();
    second.enqueue_function(&k, 1, &[d.arg()], &3u32).unwrap();
    second.synchronize().unwrap();
    let counts = second.enqueue_create_buffer::<u32>(3).unwrap();
    counts.enqueue_copy_from(&[2u32, 1, 1][..]).unwrap();
    second
        .enqueue_function_indirect(&k, &counts, 0, &[d.arg()], &5u32)
        .unwrap();
    match second.synchronize() {
        Err(Error::KernelAssert(a)) => assert_eq!(a.message, "five"),
        other => panic!("{other:?}"),
    }
    // The first stream has nothing to report.
    ctx.synchronize().unwrap();
    // Dispatch order, then the indirect dispatch's two workgroups in the
    // order their records were appended, which the driver's threads
    // decide (each workgroup's print before its assertion).
    let got = texts(&lines);
    assert_eq!(got[..2], ["n=3", "n=5"], "{got:?}");
    let mut rest = got[1..].to_vec();
    rest.sort();
    assert_eq!(rest, ["five", "five", "n=5", "n=5"], "{got:?}");
}

#[test]
fn formats_arguments_do_not_suit_are_refused_at_load() {
    let ctx = context_with(common::options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    for (body, why) in [
        (r#"debugPrintfEXT("%d %d", 1);"#, "fewer"),
        (r#"debugPrintfEXT("%d", 1.5);"#, "does not suit"),
        (r#"debugPrintfEXT("%q", 1);"#, "not one printf knows"),
        (r#"debugPrintfEXT("%u", true);"#, "a bool"),
    ] {
        match kernel(&ctx, 1, body) {
            Err(e @ Error::UnsupportedKernel { .. }) => {
                assert!(e.to_string().contains(why), "{body}: {e}");
                // The call by number and by place (the source's line 7).
                assert!(
                    e.to_string().contains("debugPrintfEXT call 1 (")
                        && e.to_string().contains(", line 7)"),
                    "{body}: {e}"
                );
            }
            other => panic!("{body}: {other:?}"),
        }
    }
    // The record buffer needs a binding after the kernel's last.
    let last = "#version 450\n#extension GL_EXT_debug_printf : enable\n\
                layout(local_size_x = 1) in;\n\
                layout(std430, binding = 4095) buffer D { uint d[]; };\n\
                void main() { d[0] = 1u; debugPrintfEXT(\"x\"); }\n";
    match Kernel::glsl(last).compile().build(&ctx) {
        Err(e @ Error::UnsupportedKernel { .. }) => {
            assert!(
                e.to_string().contains("number the kernel's bindings lower"),
                "{e}"
            )
        }
        other => panic!("{other:?}"),
    }
    drop(ctx);
    assert_clean(&log, "refused formats");
}

#[test]
fn graphs_print_on_every_replay_and_assert() {
    let (ctx, lines) = collecting(Path::Direct, |o| o.printf_buffer_bytes(64));
    let a = kernel(&ctx, 1, r#"debugPrintfEXT("a n=%u", p.n);"#).unwrap();
    let b = kernel(
        &ctx,
        1,
        r#"d[0] += 1u; debugPrintfEXT("b d0=%u", d[0]); VK_ASSERT(p.n != 9u, "nine");"#,
    )
    .unwrap();
    let d = ctx.enqueue_create_buffer::<u32>(4).unwrap();
    d.enqueue_fill(0).unwrap();
    let mut g = ctx.capture_graph();
    let first = g.enqueue_function(&a, 1, &[d.arg()], &1u32).unwrap();
    let second = g.enqueue_function(&b, 1, &[d.arg()], &2u32).unwrap();
    let graph = g.finish().unwrap();
    // Replays in flight together (one batch): each prints its own lines,
    // in the order of its dispatches.
    for _ in 0..3 {
        ctx.enqueue_graph(&graph).unwrap();
    }
    ctx.synchronize().unwrap();
    assert_eq!(
        texts(&lines),
        ["a n=1", "b d0=1", "a n=1", "b d0=2", "a n=1", "b d0=3"]
    );
    lines.lock().unwrap().clear();
    // With parameters, and on a second stream.
    ctx.enqueue_graph_with(&graph, &GraphParams::new().push(first, &7u32))
        .unwrap();
    let other = ctx.new_stream().unwrap();
    other.enqueue_wait_for(&ctx).unwrap();
    other.enqueue_graph(&graph).unwrap();
    // Lines come when the stream that printed them completes its work.
    ctx.synchronize().unwrap();
    other.synchronize().unwrap();
    assert_eq!(texts(&lines), ["a n=7", "b d0=4", "a n=1", "b d0=5"]);
    lines.lock().unwrap().clear();
    // A failed assertion in a replay: once, at the next wait; the next
    // replays go on.
    ctx.enqueue_graph_with(&graph, &GraphParams::new().push(second, &9u32))
        .unwrap();
    ctx.enqueue_graph(&graph).unwrap();
    match ctx.synchronize() {
        Err(Error::KernelAssert(e)) => {
            assert_eq!(e.message, "nine");
            assert_eq!(e.kernel, "k");
        }
        other => panic!("{other:?}"),
    }
    ctx.synchronize().unwrap();
    assert_eq!(
        texts(&lines),
        ["a n=1", "b d0=6", "nine", "a n=1", "b d0=7"]
    );
    lines.lock().unwrap().clear();
    // A full record buffer (64 bytes: two slots of 32) drops the rest,
    // per replay: 2 of the 32 records printed, 30 dropped, each time.
    let many = kernel(&ctx, 8, r#"debugPrintfEXT("m %u", i);"#).unwrap();
    let mut g = ctx.capture_graph();
    g.enqueue_function(&many, 4, &[d.arg()], &0u32).unwrap();
    let graph = g.finish().unwrap();
    ctx.enqueue_graph(&graph).unwrap();
    ctx.enqueue_graph(&graph).unwrap();
    ctx.synchronize().unwrap();
    let got = texts(&lines);
    assert_eq!(got.len(), 6, "{got:?}");
    for replay in got.chunks(3) {
        for t in &replay[..2] {
            let i: u32 = t.strip_prefix("m ").unwrap().parse().unwrap();
            assert!(i < 32, "{got:?}");
        }
        assert_ne!(replay[0], replay[1]);
        assert_eq!(
            replay[2],
            "30 printf record(s) dropped: the dispatch's record buffer (64 bytes) was full \
             (ContextOptions::printf_buffer_bytes)"
        );
    }
}

#[test]
fn every_spirv_version_and_optimization_prints() {
    let (ctx, lines) = collecting(Path::Direct, |o| o);
    let version = &ctx.info().api_version;
    let vulkan13 = version.starts_with("1.3") || version.starts_with("1.4");
    // A call in a function called from a loop, and an assertion.
    let source = r#"#version 450
        #include <vkcompute.glsl>
        layout(local_size_x = 1) in;
        layout(std430, binding = 0) buffer D { uint d[]; };
        uint twice(uint x) { debugPrintfEXT("twice %u", x); return 2u * x; }
        void main() {
            uint i = gl_GlobalInvocationID.x;
            for (uint k = 0u; k < 2u; k++) { d[i] += twice(k + i); }
            VK_ASSERT1(d[i] != 2u, "d=%u", d[i]);
            d[i] += 100u;
        }"#;
    let d = ctx.enqueue_create_buffer::<u32>(1).unwrap();
    for target in [
        GlslTarget::Vulkan1_1,
        GlslTarget::Vulkan1_2,
        GlslTarget::Vulkan1_3,
    ] {
        if target == GlslTarget::Vulkan1_3 && !vulkan13 {
            continue;
        }
        for level in [GlslOptimization::None, GlslOptimization::Performance] {
            let kernel = Kernel::glsl(source)
                .target(target)
                .optimization(level)
                .compile()
                .build(&ctx)
                .unwrap();
            d.enqueue_fill(0).unwrap();
            ctx.enqueue_function(&kernel, 1, &[d.arg()], &()).unwrap();
            match ctx.synchronize() {
                Err(Error::KernelAssert(e)) => assert_eq!(e.message, "d=2"),
                other => panic!("{target:?} {level:?}: {other:?}"),
            }
            assert_eq!(d.to_vec().unwrap(), [2], "{target:?} {level:?}");
            let printed = std::mem::take(&mut *lines.lock().unwrap());
            let printed: Vec<&str> = printed.iter().map(|l| l.text.as_str()).collect();
            assert_eq!(
                printed,
                ["twice 0", "twice 1", "d=2"],
                "{target:?} {level:?}"
            );
        }
    }
    // SPIR-V 1.0 (buffers as Uniform BufferBlock), from another compiler.
    let words = std::fs::read(format!(
        "{}/tests/spirv/printf_spirv10.spv",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let kernel = Kernel::new(&ctx, &words, "main").unwrap();
    let d = ctx.enqueue_create_buffer::<u32>(2).unwrap();
    ctx.enqueue_function(&kernel, 1, &[d.arg()], &()).unwrap();
    ctx.synchronize().unwrap();
    let mut printed = texts(&lines);
    printed.sort();
    assert_eq!(
        printed,
        ["spirv 1.0: i=0 d=0 v=0, 9", "spirv 1.0: i=1 d=7 v=1, 9"]
    );
}

#[test]
fn a_trace_shows_each_line_as_an_instant_on_the_device_track() {
    let dir = common::TempDir::new("printf-trace");
    let path = dir.0.join("trace.json");
    let (ctx, lines) = collecting(Path::Direct, |o| o.trace(&path));
    let k = kernel(&ctx, 2, r#"debugPrintfEXT("hello \"%u\"", i);"#).unwrap();
    run(&ctx, &k, 1, 0).unwrap();
    drop((k, ctx));
    let text = std::fs::read_to_string(&path).unwrap();
    let events: Vec<serde_json::Value> = serde_json::from_str(&text).unwrap();
    let mut printed: Vec<String> = events
        .iter()
        .filter(|e| e["name"] == "printf" && e["ph"] == "i")
        .map(|e| {
            assert_eq!(e["args"]["kernel"], "k");
            e["args"]["text"].as_str().unwrap().to_string()
        })
        .collect();
    printed.sort();
    assert_eq!(printed, ["hello \"0\"", "hello \"1\""]);
    assert_eq!(lines.lock().unwrap().len(), 2);
}
