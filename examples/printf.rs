//! A kernel that talks back: `debugPrintfEXT` lines on standard output,
//! and a failed `VK_ASSERT` as `Error::KernelAssert`, with no validation
//! layer (see the printf guide, `vkcompute::guide::printf`).
//!
//!     cargo run --example printf --features glsl

use vkcompute::{ContextOptions, DeviceContext, Error, Kernel, Result};

const SOURCE: &str = r#"#version 450
#include <vkcompute.glsl>
layout(local_size_x = 4) in;
layout(std430, binding = 0) buffer Data { float data[]; };
layout(push_constant) uniform Params { uint n; float scale; };

void main() {
    uint i = gl_GlobalInvocationID.x;
    VK_ASSERT2(i < n, "invocation %u is past n = %u", i, n);
    float before = data[i];
    data[i] = before * scale;
    debugPrintfEXT("data[%u]: %.2f -> %.2f", i, before, data[i]);
}
"#;

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    n: u32,
    scale: f32,
}

fn main() -> Result<()> {
    // Lines go to standard output (the default), with the invocation's
    // global id beside the kernel's label.
    let ctx = DeviceContext::with_options(ContextOptions::new().printf_invocation_ids(true))?;
    let kernel = Kernel::glsl(SOURCE)
        .file_name("scale.comp")
        .compile()
        .build(&ctx)?;
    let data = ctx.enqueue_create_buffer::<f32>(8)?;
    data.enqueue_copy_from(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0][..])?;

    // One workgroup of 4: four lines, printed once the dispatch completed.
    ctx.enqueue_function(&kernel, 1, &[data.arg()], &Params { n: 4, scale: 2.0 })?;
    ctx.synchronize()?;

    // Two workgroups with n = 6: invocations 6 and 7 fail the assertion
    // and stop; the others finish. The next wait reports it, once.
    ctx.enqueue_function(&kernel, 2, &[data.arg()], &Params { n: 6, scale: 10.0 })?;
    match ctx.synchronize() {
        Err(Error::KernelAssert(failed)) => println!("as expected: {failed}"),
        other => {
            eprintln!("expected a failed assertion, got {other:?}");
            std::process::exit(1);
        }
    }
    let got = data.to_vec()?;
    println!("data: {got:?}");
    assert_eq!(got, [20.0, 40.0, 60.0, 80.0, 50.0, 60.0, 7.0, 8.0]);
    Ok(())
}
