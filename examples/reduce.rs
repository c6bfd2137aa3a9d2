//! A parallel sum on the device in two passes, checked against the CPU.
//!
//!     cargo run --release --example reduce [-- N]
//!
//! Pass 1 runs `shaders/reduce_sum.comp` with many workgroups, each adding
//! up a strided share of the input into one partial sum; pass 2 runs the
//! same kernel with one workgroup over the partial sums. Both passes are
//! enqueued back to back: the stream orders them.

use vkcompute::{DeviceContext, Kernel, Result};

const GROUPS: u32 = 256;

fn main() -> Result<()> {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 22);
    let ctx = DeviceContext::new()?;
    let reduce = Kernel::new(&ctx, vkcompute::shaders::REDUCE_SUM, "main")?;

    let values: Vec<f32> = (0..n)
        .map(|i| ((i as u64 * 7919) % 1000) as f32 / 1000.0 + 0.5)
        .collect();
    let input = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    let partial = ctx.enqueue_create_buffer::<f32>(GROUPS as usize)?;
    let total = ctx.enqueue_create_buffer::<f32>(1)?;
    input.enqueue_copy_from(&values)?;

    ctx.enqueue_function(&reduce, GROUPS, &[input.arg(), partial.arg()], &n)?;
    ctx.enqueue_function(&reduce, 1, &[partial.arg(), total.arg()], &GROUPS)?;
    let device_sum = total.to_vec()?[0] as f64;

    let host_sum: f64 = values.iter().map(|&v| v as f64).sum();
    let relative = ((device_sum - host_sum) / host_sum).abs();
    println!("sum of {n} floats on {}: device {device_sum}, host {host_sum}, relative error {relative:.2e}", ctx.name());
    if relative > 1e-4 {
        eprintln!("reduce: the device's sum is off by more than 1e-4");
        std::process::exit(1);
    }
    Ok(())
}
