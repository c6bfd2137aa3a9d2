//! A user's own kernels at run time (issue 20): labels in errors and
//! `Debug`, the loader of unvalidated bytes, and the bugs of the issue (a
//! length error counted in bytes, a storage image called pointer
//! addressing, glslang's built-ins printed when `#version` is missing).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]
#![cfg(feature = "glsl")]

mod common;

use common::{run_with, Path};
use vkcompute::{Error, Kernel};

#[test]
fn a_copy_of_the_wrong_length_counts_elements() {
    run_with(common::options(Path::Direct), "length", |ctx| {
        let buffer = ctx.enqueue_create_buffer::<u32>(4096).unwrap();
        match buffer.enqueue_copy_from(&[1u32; 40][..]) {
            Err(Error::LengthMismatch {
                dst_len, src_len, ..
            }) => assert_eq!((dst_len, src_len), (4096, 40)),
            other => panic!("{other:?}"),
        }
        let small = ctx.enqueue_create_buffer::<u64>(3).unwrap();
        let other = ctx.enqueue_create_buffer::<u64>(5).unwrap();
        let message = small.enqueue_copy_from(&other).unwrap_err().to_string();
        assert!(
            message.contains("holds 3 elements, the source 5"),
            "{message}"
        );
        let mut out = [0u64; 2];
        let message = small.copy_to_slice(&mut out).unwrap_err().to_string();
        assert!(
            message.contains("holds 2 elements, the source 3"),
            "{message}"
        );
    });
}

#[test]
fn a_storage_image_is_refused_as_an_image_not_as_pointer_addressing() {
    run_with(common::options(Path::Direct), "image", |ctx| {
        let source = "#version 450\nlayout(local_size_x = 1) in;\n\
            layout(binding = 0, r32f) uniform writeonly image2D img;\n\
            void main() { imageStore(img, ivec2(0), vec4(1.0)); }\n";
        match Kernel::from_glsl(ctx, source, "main") {
            Err(Error::UnsupportedKernel { reason, .. }) => {
                assert!(reason.contains("`img`"), "{reason}");
                assert!(
                    reason.contains("storage and uniform buffers only"),
                    "{reason}"
                );
            }
            other => panic!("{other:?}"),
        }
    });
}

/// Runs `f` with the process's standard output sent to a file, and
/// returns what was written there.
fn stdout_of(f: impl FnOnce()) -> String {
    use std::io::{Read, Seek, Write};
    use std::os::fd::AsRawFd;
    let _ = std::io::stdout().flush();
    let mut file = tempfile();
    // SAFETY: duplicating and redirecting the process's own descriptor 1,
    // restored below; the test binary runs its tests one at a time.
    let saved = unsafe { libc::dup(1) };
    assert!(saved >= 0);
    // SAFETY: as above; `file` stays open until after the restore.
    assert!(unsafe { libc::dup2(file.as_raw_fd(), 1) } >= 0);
    f();
    let _ = std::io::stdout().flush();
    // SAFETY: restores the saved descriptor, then closes the copy.
    unsafe {
        libc::dup2(saved, 1);
        libc::close(saved);
    }
    let mut written = String::new();
    file.rewind().unwrap();
    file.read_to_string(&mut written).unwrap();
    written
}

fn tempfile() -> std::fs::File {
    let path = std::env::temp_dir().join(format!("vkcompute-stdout-{}", std::process::id()));
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&path)
        .unwrap();
    let _ = std::fs::remove_file(&path);
    file
}

#[test]
fn a_source_without_version_is_a_clear_error_and_prints_nothing() {
    run_with(common::options(Path::Direct), "no #version", |ctx| {
        let source = "layout(local_size_x = 1) in;\nvoid main() {}\n";
        let mut result = None;
        let printed = stdout_of(|| result = Some(Kernel::from_glsl(ctx, source, "main")));
        assert_eq!(printed, "", "the compiler wrote to standard output");
        match result.unwrap() {
            Err(Error::ShaderCompilation { message }) => {
                assert!(message.contains("#version"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        let built = Kernel::glsl(source)
            .file_name("mine.comp")
            .compile()
            .into_words();
        assert!(
            matches!(&built, Err(Error::ShaderCompilation { message }) if message.starts_with("mine.comp")),
            "{built:?}"
        );
        // Comments before the directive are fine.
        let commented = "// a kernel\n/* with\n a comment */\n  #  version 450\n\
            layout(local_size_x = 1) in;\nvoid main() {}\n";
        Kernel::from_glsl(ctx, commented, "main").unwrap();
    });
}

const WIDE: &str = "#version 450\nlayout(local_size_x = 1) in;\n\
    layout(std430, binding = 0) buffer D { uint d[]; };\n\
    layout(push_constant) uniform P { uint v; } p;\n\
    void main() { d[0] = p.v; }\n";

#[test]
fn kernels_are_named_by_their_labels_in_errors_and_debug() {
    run_with(common::options(Path::Direct), "labels", |ctx| {
        let data = ctx.enqueue_create_buffer::<u32>(1).unwrap();
        // Default: the entry point; GLSL with a file name: the file name.
        let plain = Kernel::from_glsl(ctx, WIDE, "main").unwrap();
        assert_eq!(plain.label(), "main");
        let named = Kernel::glsl(WIDE)
            .file_name("store_one.comp")
            .compile()
            .build(ctx)
            .unwrap();
        assert_eq!(named.label(), "store_one.comp");
        let labelled = Kernel::glsl(WIDE)
            .compile()
            .label("writer")
            .build(ctx)
            .unwrap();
        assert_eq!(labelled.label(), "writer");
        // One module under two labels is one pipeline.
        let words = Kernel::glsl(WIDE).compile().into_words().unwrap();
        let first = Kernel::builder(&words).label("first").build(ctx).unwrap();
        let second = Kernel::builder(&words).label("second").build(ctx).unwrap();
        assert!(first.shares_pipeline_with(&second));
        assert_eq!(
            (first.label(), second.label()),
            ("first".into(), "second".into())
        );
        assert!(format!("{second:?}").contains("\"second\""));
        for (kernel, label) in [(&named, "store_one.comp"), (&labelled, "writer")] {
            let e = ctx
                .enqueue_function(kernel, 1, &[data.arg()], &[1u32, 2u32])
                .unwrap_err();
            assert!(e.to_string().contains(&format!("`{label}`")), "{e}");
            let e = ctx.enqueue_function(kernel, 1, &[], &1u32).unwrap_err();
            assert!(e.to_string().contains(&format!("`{label}`")), "{e}");
        }
        // Load errors carry the label too.
        let too_big = "#version 450\nlayout(local_size_x = 1) in;\n\
            layout(std430, binding = 0) buffer D { uint d[]; };\n\
            shared uint s[1048576];\n\
            void main() { s[0] = 1u; barrier(); d[0] = s[0]; }\n";
        let e = Kernel::glsl(too_big)
            .file_name("huge_shared.comp")
            .compile()
            .build(ctx)
            .unwrap_err();
        assert!(e.to_string().contains("`huge_shared.comp`"), "{e}");
        let e = Kernel::builder(&words)
            .label("from words")
            .specialize(9, 1u32)
            .build(ctx)
            .unwrap_err();
        assert!(e.to_string().contains("`from words`"), "{e}");
        ctx.enqueue_function(&labelled, 1, &[data.arg()], &7u32)
            .unwrap();
        assert_eq!(data.to_vec().unwrap(), [7]);
    });
}

#[test]
fn spirv_bytes_load_unvalidated_from_any_alignment() {
    run_with(common::options(Path::Direct), "bytes", |ctx| {
        let words = Kernel::glsl(WIDE).compile().into_words().unwrap();
        let mut bytes = vec![0u8; 3];
        bytes.extend(words.iter().flat_map(|w| w.to_le_bytes()));
        // SAFETY: shaderc's output for Vulkan 1.2, valid on this device.
        let kernel = unsafe { Kernel::new_unvalidated(ctx, &bytes[3..], "main") }.unwrap();
        let data = ctx.enqueue_create_buffer::<u32>(1).unwrap();
        ctx.enqueue_function(&kernel, 1, &[data.arg()], &9u32)
            .unwrap();
        assert_eq!(data.to_vec().unwrap(), [9]);
        // Bytes that are not whole words are still an error.
        // SAFETY: refused before anything reaches the driver.
        let short = unsafe { Kernel::new_unvalidated(ctx, &bytes[3..bytes.len() - 1], "main") };
        assert!(
            matches!(short, Err(Error::InvalidSpirv { .. })),
            "{short:?}"
        );
    });
}

const FLOATS: &str = "#version 450\nlayout(local_size_x = 4) in;\n\
    layout(std430, binding = 0) buffer D { float d[]; };\n\
    layout(std430, binding = 1) buffer V { vec2 v[]; };\n\
    void main() { uint i = gl_GlobalInvocationID.x; d[i] = d[i] * 2.0; v[i] = v[i] + 1.0; }\n";

#[test]
fn a_buffer_of_another_number_type_is_refused_unless_reinterpreted() {
    run_with(common::options(Path::Direct), "element types", |ctx| {
        let kernel = Kernel::from_glsl(ctx, FLOATS, "main").unwrap();
        assert_eq!(
            kernel.bindings()[0].aliases[0].element_type.as_deref(),
            Some("f32")
        );
        assert_eq!(
            kernel.bindings()[1].aliases[0].element_type.as_deref(),
            Some("[f32; 2]")
        );
        let floats = ctx.enqueue_create_buffer::<f32>(4).unwrap();
        let bits = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        let pairs = ctx.enqueue_create_buffer::<[f32; 2]>(4).unwrap();
        floats.enqueue_copy_from(&[1.0f32, 2.0, 3.0, 4.0]).unwrap();
        bits.enqueue_copy_from(&[1.0f32.to_bits(); 4]).unwrap();
        pairs.enqueue_fill([0.5, 1.5]).unwrap();
        // A u32 buffer where the kernel reads floats: the same size, so
        // only the type tells.
        match ctx.enqueue_function(&kernel, 1, &[bits.arg(), pairs.arg()], &()) {
            Err(Error::Argument {
                index: 0, reason, ..
            }) => {
                assert!(
                    reason.contains("`u32`") && reason.contains("`f32`"),
                    "{reason}"
                );
                assert!(reason.contains("arg_reinterpret"), "{reason}");
            }
            other => panic!("{other:?}"),
        }
        // The pairs as u64: refused too (the size matches a vec2).
        let wide = ctx.enqueue_create_buffer::<u64>(4).unwrap();
        assert!(ctx
            .enqueue_function(&kernel, 1, &[floats.arg(), wide.arg()], &())
            .is_err());
        // Matching types run; so do reinterpreted bytes.
        ctx.enqueue_function(&kernel, 1, &[floats.arg(), pairs.arg()], &())
            .unwrap();
        ctx.enqueue_function(&kernel, 1, &[bits.arg_reinterpret(), pairs.arg()], &())
            .unwrap();
        assert_eq!(floats.to_vec().unwrap(), [2.0, 4.0, 6.0, 8.0]);
        assert_eq!(bits.to_vec().unwrap(), [2.0f32.to_bits(); 4]);
        assert_eq!(pairs.to_vec().unwrap(), [[2.5, 3.5]; 4]);
        // A struct of the user's is not a number type: its size decides.
        #[repr(C)]
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
        struct Pair {
            x: f32,
            y: f32,
        }
        let mine = ctx.enqueue_create_buffer::<Pair>(4).unwrap();
        mine.enqueue_fill(Pair { x: 0.0, y: 0.0 }).unwrap();
        ctx.enqueue_function(&kernel, 1, &[floats.arg(), mine.arg()], &())
            .unwrap();
        let got = mine.to_vec().unwrap();
        assert!(got.iter().all(|p| p.x == 1.0 && p.y == 1.0));
    });
}

/// Parameters in a uniform block (std140: `offset` at 16).
const UNIFORM: &str = "#version 450\nlayout(local_size_x = 4) in;\n\
    layout(std430, binding = 0) buffer D { float d[]; };\n\
    layout(std140, binding = 1) uniform Params { float scale; vec3 offset; uint n; } params;\n\
    void main() { uint i = gl_GlobalInvocationID.x;\n\
    if (i < params.n) d[i] = d[i] * params.scale + params.offset.y; }\n";

/// `Params` as std140 lays it out.
#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    scale: f32,
    _pad: [f32; 3],
    offset: [f32; 3],
    n: u32,
}

#[test]
fn uniform_buffers_bind_as_arguments_with_their_size_and_alignment_checked() {
    common::on_each_descriptor_path(|ctx| {
        let kernel = Kernel::from_glsl(ctx, UNIFORM, "main").unwrap();
        let b = &kernel.bindings()[1];
        assert_eq!(b.kind, vkcompute::reflection::BindingKind::UniformBuffer);
        assert_eq!(b.uniform_size, Some(32));
        assert!(b.read_only);
        let data = ctx.enqueue_create_buffer::<f32>(8).unwrap();
        data.enqueue_copy_from(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])
            .unwrap();
        let params = ctx.enqueue_create_buffer::<Params>(1).unwrap();
        params
            .enqueue_copy_from(&[Params {
                scale: 2.0,
                _pad: [0.0; 3],
                offset: [0.0, 0.5, 0.0],
                n: 6,
            }])
            .unwrap();
        ctx.enqueue_function(&kernel, 2, &[data.arg(), params.arg()], &())
            .unwrap();
        assert_eq!(
            data.to_vec().unwrap(),
            [2.5, 4.5, 6.5, 8.5, 10.5, 12.5, 7.0, 8.0]
        );
        // A later write of the parameters is ordered after the dispatch
        // that reads them.
        params.enqueue_fill(Params::zeroed_with_n(8)).unwrap();
        ctx.enqueue_function(&kernel, 2, &[data.arg(), params.arg()], &())
            .unwrap();
        assert_eq!(data.to_vec().unwrap(), [0.0; 8]);
        // Too small for the block: refused.
        let short = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        match ctx.enqueue_function(&kernel, 2, &[data.arg(), short.arg()], &()) {
            Err(Error::Argument {
                index: 1, reason, ..
            }) => {
                assert!(reason.contains("spans 32"), "{reason}")
            }
            other => panic!("{other:?}"),
        }
        // At an offset the device does not allow for uniform buffers.
        let align = ctx.raw().limits().min_uniform_buffer_offset_alignment as usize;
        let words = ctx
            .enqueue_create_buffer::<u32>(align / 4 * 2 + 16)
            .unwrap();
        if align > 4 {
            let odd = words.create_sub_buffer::<u32>(1, 8).unwrap();
            assert!(matches!(
                ctx.enqueue_function(&kernel, 2, &[data.arg(), odd.arg()], &()),
                Err(Error::Misaligned { .. })
            ));
        }
        let aligned = words.create_sub_buffer::<u32>(align / 4, 8).unwrap();
        aligned.enqueue_fill(0).unwrap();
        ctx.enqueue_function(&kernel, 2, &[data.arg(), aligned.arg()], &())
            .unwrap();
    });
}

impl Params {
    fn zeroed_with_n(n: u32) -> Params {
        Params {
            scale: 0.0,
            _pad: [0.0; 3],
            offset: [0.0; 3],
            n,
        }
    }
}

#[test]
fn a_graph_replays_a_uniform_buffer_and_checks_substitutes_at_the_uniform_alignment() {
    run_with(common::options(Path::Direct), "uniform graph", |ctx| {
        let kernel = Kernel::from_glsl(ctx, UNIFORM, "main").unwrap();
        let data = ctx.enqueue_create_buffer::<f32>(8).unwrap();
        data.enqueue_fill(1.0).unwrap();
        let limits = ctx.raw().limits();
        let (uniform, storage) = (
            limits.min_uniform_buffer_offset_alignment as usize,
            limits.min_storage_buffer_offset_alignment as usize,
        );
        // Parameters at offset 0 and at the uniform alignment, in one buffer.
        let slot = uniform.max(std::mem::size_of::<Params>()) / 4;
        let words = ctx.enqueue_create_buffer::<u32>(slot * 3).unwrap();
        let first = words.create_sub_buffer::<Params>(0, 1).unwrap();
        let second = words.create_sub_buffer::<Params>(slot * 4 / std::mem::size_of::<Params>(), 1);
        first.enqueue_fill(Params::zeroed_with_n(8)).unwrap();
        let mut g = ctx.capture_graph();
        g.enqueue_function(&kernel, 2, &[data.arg(), first.arg()], &())
            .unwrap();
        let graph = g.finish().unwrap();
        ctx.enqueue_graph(&graph).unwrap();
        assert_eq!(data.to_vec().unwrap(), [0.0; 8]);
        if let Ok(second) = second {
            let mut doubled = Params::zeroed_with_n(8);
            doubled.offset = [0.0, 3.0, 0.0];
            second.enqueue_fill(doubled).unwrap();
            let params = vkcompute::GraphParams::new()
                .buffer(&first, &second)
                .unwrap();
            ctx.enqueue_graph_with(&graph, &params).unwrap();
            assert_eq!(data.to_vec().unwrap(), [3.0; 8]);
        }
        // A substitute aligned for storage buffers but not for uniform ones.
        if uniform > storage && storage % std::mem::size_of::<f32>() == 0 {
            let whole = ctx.enqueue_create_buffer::<u8>(uniform * 2 + 64).unwrap();
            let base = whole.create_sub_buffer::<Params>(0, 1);
            let off = whole.create_sub_buffer::<Params>(storage / std::mem::size_of::<Params>(), 1);
            if let (Ok(base), Ok(off)) = (base, off) {
                let mut g = ctx.capture_graph();
                g.enqueue_function(&kernel, 2, &[data.arg(), base.arg()], &())
                    .unwrap();
                let graph = g.finish().unwrap();
                let params = vkcompute::GraphParams::new().buffer(&base, &off).unwrap();
                assert!(matches!(
                    ctx.enqueue_graph_with(&graph, &params),
                    Err(Error::Misaligned { .. })
                ));
            }
        }
    });
}
