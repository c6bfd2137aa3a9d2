//! Run-time GLSL (feature `glsl`): compiling, compile errors with line
//! numbers, and descriptor types vkcompute does not bind.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]
#![cfg(feature = "glsl")]

mod common;

use common::{run_with, Path};
use vkcompute::{Error, Kernel};

const DOUBLE: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Data { uint data[]; };
layout(push_constant) uniform P { uint n; } p;
void main() {
    uint i = gl_GlobalInvocationID.x;
    if (i < p.n) data[i] *= 2u;
}
"#;

#[test]
fn glsl_compiles_at_run_time_and_runs() {
    run_with(common::options(Path::Direct), "run-time GLSL", |ctx| {
        let kernel = Kernel::from_glsl(ctx, DOUBLE, "main").unwrap();
        let data = ctx.enqueue_create_buffer::<u32>(100).unwrap();
        data.enqueue_copy_from(&(0..100).collect::<Vec<u32>>())
            .unwrap();
        ctx.enqueue_function(&kernel, 2, &[data.arg()], &100u32)
            .unwrap();
        assert_eq!(
            data.to_vec().unwrap(),
            (0..100).map(|i| i * 2).collect::<Vec<u32>>()
        );
    });
}

#[test]
fn a_compile_error_carries_the_line_number() {
    run_with(common::options(Path::Direct), "GLSL error", |ctx| {
        let broken = "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {\n    undefined_thing = 1;\n}\n";
        match Kernel::from_glsl(ctx, broken, "main") {
            Err(Error::ShaderCompilation { message }) => {
                assert!(message.contains(":4:"), "{message}");
                assert!(message.contains("undefined_thing"), "{message}");
            }
            other => panic!("expected ShaderCompilation, got {other:?}"),
        }
    });
}

#[test]
fn unsupported_descriptor_types_are_rejected_at_load() {
    run_with(
        common::options(Path::Direct),
        "unsupported descriptors",
        |ctx| {
            let sampler = "#version 450\nlayout(local_size_x = 1) in;\nlayout(binding = 0) uniform sampler2D tex;\nlayout(std430, binding = 1) buffer D { float d[]; };\nvoid main() { d[0] = textureLod(tex, vec2(0.0), 0.0).x; }\n";
            match Kernel::from_glsl(ctx, sampler, "main") {
                Err(e @ Error::UnsupportedKernel { .. }) => {
                    assert!(
                        e.to_string().contains("storage and uniform buffers only"),
                        "{e}"
                    )
                }
                other => panic!("expected UnsupportedKernel, got {other:?}"),
            }
            // A set beyond the device's maxBoundDescriptorSets (at
            // least 4, at most what vkcompute accepts) is refused by name.
            let far = "#version 450\nlayout(local_size_x = 1) in;\nlayout(std430, set = 31, binding = 0) buffer D { uint d[]; };\nvoid main() { d[0] = 1u; }\n";
            match Kernel::from_glsl(ctx, far, "main") {
                Err(e @ Error::UnsupportedKernel { .. }) => {
                    assert!(e.to_string().contains("set 31"), "{e}")
                }
                Ok(k) => assert!(
                    ctx.info().limits.max_bound_descriptor_sets > 31,
                    "set 31 loaded: {k:?}"
                ),
                other => panic!("expected UnsupportedKernel, got {other:?}"),
            }
        },
    );
}
