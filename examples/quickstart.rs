//! The first five minutes: open the default device, fill and copy buffers,
//! read them back, check the result against the host.
//!
//!     cargo run --example quickstart

use vkcompute::{DeviceContext, Result};

fn main() -> Result<()> {
    for info in DeviceContext::devices()? {
        println!("found   {info}");
    }
    let ctx = DeviceContext::new()?;
    println!("using   {}", ctx.name());

    let n = 1 << 20;
    let host: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 + 1.0).collect();

    // Upload: the slice is copied (or staged) before the call returns.
    let x = ctx.enqueue_create_buffer::<f32>(n)?;
    x.enqueue_copy_from(&host[..])?;

    // A fill, then a device-to-device copy over part of it, in stream order.
    let y = ctx.enqueue_create_buffer::<f32>(n)?;
    y.enqueue_fill(3.0)?;
    let z = ctx.enqueue_create_buffer::<f32>(n)?;
    z.enqueue_copy_from(&x)?;

    // 16-bit elements use the fill kernel where a 32-bit fill cannot do it.
    let h = ctx.enqueue_create_buffer::<u16>(7)?;
    h.enqueue_fill(0xbeef)?;

    ctx.synchronize()?;
    let y_back = y.to_vec()?;
    let z_back = z.to_vec()?;
    let h_back = h.to_vec()?;

    let ok = y_back.iter().all(|&v| v == 3.0) && z_back == host && h_back == [0xbeef; 7];
    println!("fill    {:?} ... {:?}", &y_back[..3], &y_back[n - 3..]);
    println!("copy    {:?} ... {:?}", &z_back[..3], &z_back[n - 3..]);
    println!("u16     {h_back:x?}");
    if !ok {
        eprintln!("quickstart: MISMATCH between device results and the host");
        std::process::exit(1);
    }
    println!(
        "checked: {} floats copied and filled on {}, all equal to the host's",
        2 * n,
        ctx.name()
    );
    Ok(())
}
