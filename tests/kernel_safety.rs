//! Kernel soundness (issue 10): kernels without buffers on both
//! descriptor paths.
#![cfg(all(feature = "glsl", feature = "build"))]

mod common;

use common::{run_with, Path};
use vkcompute::{DeviceContext, Kernel};

/// Both descriptor paths (push descriptors and pooled sets), validated.
fn on_each_descriptor_path(test: impl Fn(&DeviceContext, bool)) {
    for push in [true, false] {
        let options = common::options(Path::Direct).push_descriptors(push);
        run_with(options, &format!("push descriptors {push}"), |ctx| {
            test(ctx, push)
        });
    }
}

/// A normal dispatch after an error: the context is intact.
fn still_works(ctx: &DeviceContext) {
    let store = Kernel::new(ctx, vkcompute::shaders::STORE, "main").unwrap();
    let data = ctx.enqueue_create_buffer::<u32>(4).unwrap();
    data.enqueue_fill(0).unwrap();
    ctx.enqueue_function(&store, 1, &[data.arg()], &[1u32, 99u32])
        .unwrap();
    assert_eq!(data.to_vec().unwrap(), [0, 99, 0, 0]);
}

/// No storage buffers (and no push constants): shared memory only.
const NO_BUFFERS: &str = r#"#version 450
layout(local_size_x = 64) in;
shared uint scratch[64];
void main() {
    scratch[gl_LocalInvocationID.x] = gl_LocalInvocationID.x;
    barrier();
}
"#;

#[test]
fn kernels_without_buffers_dispatch_on_both_descriptor_paths() {
    on_each_descriptor_path(|ctx, push| {
        let kernel = Kernel::from_glsl(ctx, NO_BUFFERS, "main").unwrap();
        assert!(kernel.bindings().is_empty());
        let pools = ctx.live_objects().descriptor_pools;
        for _ in 0..3 {
            ctx.enqueue_function(&kernel, 4, &[], &()).unwrap();
        }
        ctx.synchronize().unwrap();
        // The pooled path allocates no (empty) descriptor set for it.
        assert_eq!(
            ctx.live_objects().descriptor_pools,
            pools,
            "push descriptors {push}: a kernel without buffers took a descriptor pool"
        );
        still_works(ctx);
    });
}
