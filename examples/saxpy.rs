//! y = a * x + y on the device, checked against the CPU.
//!
//!     cargo run --release --example saxpy [-- N]
//!
//! The kernel is `shaders/saxpy.comp` (256 invocations per workgroup). Grids
//! are limited to 65,535 workgroups per dimension on many devices, so long
//! vectors use a 2D grid: the kernel numbers elements row by row.

use vkcompute::{DeviceContext, Kernel, Result};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    a: f32,
    n: u32,
}

/// The workgroup grid covering `n` elements with `local` invocations per
/// workgroup and at most `max_x` workgroups in x.
fn grid_for(n: u32, local: u32, max_x: u32) -> (u32, u32) {
    let groups = n.div_ceil(local).max(1);
    if groups <= max_x {
        (groups, 1)
    } else {
        (max_x, groups.div_ceil(max_x))
    }
}

fn main() -> Result<()> {
    let n: u32 = std::env::args()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1 << 24);
    let ctx = DeviceContext::new()?;
    let saxpy = Kernel::new(&ctx, vkcompute::shaders::SAXPY, "main")?;

    let x_host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5 + 1.0).collect();
    let y_host: Vec<f32> = (0..n).map(|i| (i % 777) as f32 * 0.25 + 2.0).collect();
    let x = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    let y = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    x.enqueue_copy_from(&x_host)?;
    y.enqueue_copy_from(&y_host)?;

    let a = 2.0f32;
    let max_x = ctx.info().limits.max_workgroup_count[0].min(65_535);
    let grid = grid_for(n, saxpy.local_size()[0], max_x);
    ctx.enqueue_function(&saxpy, grid, &[x.arg(), y.arg()], &Params { a, n })?;
    let result = y.to_vec()?;

    let wrong = (0..n as usize)
        .filter(|&i| result[i] != a * x_host[i] + y_host[i])
        .count();
    println!(
        "saxpy of {n} floats on {} with grid {grid:?}: {wrong} wrong",
        ctx.name()
    );
    if wrong > 0 {
        std::process::exit(1);
    }
    Ok(())
}
