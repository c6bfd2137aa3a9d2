//! A trace of the device work to open in a viewer: a few rounds of saxpy and
//! a two-pass reduction on two streams, written as Chrome / Perfetto
//! trace-event JSON.
//!
//!     cargo run --release --example trace [-- PATH]
//!
//! Open the file (default `vkcompute-trace.json`) in https://ui.perfetto.dev
//! or chrome://tracing: each stream has a track of commands at their host
//! enqueue times (dispatches name their kernel and grid; barriers and waits
//! are instants) and a track of device batches timed with timestamp
//! queries. Setting `VKCOMPUTE_TRACE=PATH` traces any program the same way.

use vkcompute::{shaders, ContextOptions, DeviceContext, Kernel, Result};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Saxpy {
    a: f32,
    n: u32,
}

fn main() -> Result<()> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "vkcompute-trace.json".into());
    let ctx = DeviceContext::with_options(ContextOptions::new().trace(&path))?;
    let saxpy = Kernel::new(&ctx, shaders::SAXPY, "main")?;
    let reduce = Kernel::new(&ctx, shaders::REDUCE_SUM, "main")?;
    let n = 1u32 << 20;
    let x = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    let y = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    x.enqueue_copy_from(&vec![1.0f32; n as usize])?;
    y.enqueue_fill(0.0)?;
    let groups = n / saxpy.local_size()[0];
    for _ in 0..4 {
        ctx.enqueue_function(&saxpy, groups, &[x.arg(), y.arg()], &Saxpy { a: 0.5, n })?;
    }
    // The reduction runs on a second stream, which waits for the first.
    let second = ctx.new_stream()?;
    let groups_2 = 256u32;
    let partial = second.enqueue_create_buffer::<f32>(groups_2 as usize)?;
    let total = second.enqueue_create_buffer::<f32>(1)?;
    second.enqueue_function(&reduce, groups_2, &[y.arg(), partial.arg()], &n)?;
    second.enqueue_function(&reduce, 1, &[partial.arg(), total.arg()], &groups_2)?;
    let sum = total.to_vec()?[0];
    let want = n as f32 * 2.0;
    println!(
        "saxpy x4 and a two-pass sum of {n} floats on {}: {sum} (want {want}); trace in {path}",
        ctx.name()
    );
    if sum != want {
        std::process::exit(1);
    }
    Ok(())
}
