//! The README's short tour, kept compiling and checked by `make test`.
//!
//!     cargo run --example tour

use vkcompute::{shaders, DeviceContext, Kernel};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Params {
    a: f32,
    n: u32,
}

fn main() -> vkcompute::Result<()> {
    let ctx = DeviceContext::new()?; // the default device
    let n = 1 << 20;
    let host: Vec<f32> = (0..n).map(|i| i as f32).collect();

    let x = ctx.enqueue_create_buffer::<f32>(n)?;
    x.enqueue_copy_from(&host[..])?; // staged at once: `host` is free again
    let y = ctx.enqueue_create_buffer::<f32>(n)?;
    y.enqueue_fill(1.0)?;

    let saxpy = Kernel::new(&ctx, shaders::SAXPY, "main")?; // reflected: 2 buffers, 8 bytes of push constants
    let params = Params {
        a: 2.0,
        n: n as u32,
    };
    ctx.enqueue_function(&saxpy, (n as u32 / 256, 1), &[x.arg(), y.arg()], &params)?;

    {
        let mut h = y.map_to_host()?; // waits for y's pending work only
        h[0] = 42.0;
    } // the change goes back to the device
    println!("{y}"); // DeviceBuffer([42.0, 3.0, 5.0, ..., 2097147.0, 2097149.0, 2097151.0])
    ctx.synchronize()?;

    let printed = y.to_string();
    if printed != "DeviceBuffer([42.0, 3.0, 5.0, ..., 2097147.0, 2097149.0, 2097151.0])" {
        eprintln!("tour: unexpected result {printed}");
        std::process::exit(1);
    }
    Ok(())
}
