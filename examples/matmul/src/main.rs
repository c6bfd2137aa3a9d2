//! Your own kernel, end to end: `shaders/matmul.comp` is compiled and
//! validated by vkcompute-build in `build.rs`, which generates the typed
//! `matmul::Kernel` and `matmul::Dims` used here; the product is checked
//! against the CPU.

// The generated modules: one per shader (`matmul`).
include!(concat!(env!("OUT_DIR"), "/vkcompute_kernels.rs"));

use vkcompute::DeviceContext;

/// The tile edge `build.rs` defines, as the generated workgroup size says.
const TILE: u32 = matmul::LOCAL_SIZE[0];

fn main() {
    if let Err(e) = run() {
        eprintln!("matmul FAILED: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = DeviceContext::new()?;
    let kernel = matmul::Kernel::load(&ctx)?;
    // Sizes that are not multiples of the tile: the edges are padded.
    let (m, n, k) = (100u32, 72u32, 130u32);
    let alpha = 0.5f32;
    // Small integers: every product and sum is exact in f32.
    let a_host: Vec<f32> = (0..m * k).map(|i| (i % 7) as f32 - 3.0).collect();
    let b_host: Vec<f32> = (0..k * n).map(|i| (i % 5) as f32 - 2.0).collect();
    let a = ctx.enqueue_create_buffer::<f32>((m * k) as usize)?;
    let b = ctx.enqueue_create_buffer::<f32>((k * n) as usize)?;
    let c = ctx.enqueue_create_buffer::<f32>((m * n) as usize)?;
    a.enqueue_copy_from(&a_host)?;
    b.enqueue_copy_from(&b_host)?;
    // The generated `enqueue` takes exactly the shader's three f32 buffers
    // and its push-constant block: other types do not compile.
    kernel.enqueue(
        &ctx,
        (n.div_ceil(TILE), m.div_ceil(TILE)),
        &a,
        &b,
        &c,
        &matmul::Dims::new(m, n, k, alpha),
    )?;
    let got = c.to_vec()?;
    let (m, n, k) = (m as usize, n as usize, k as usize);
    for row in 0..m {
        for col in 0..n {
            let want: f32 = alpha
                * (0..k)
                    .map(|i| a_host[row * k + i] * b_host[i * n + col])
                    .sum::<f32>();
            let at = row * n + col;
            if got[at] != want {
                return Err(format!("C[{row}][{col}] is {}, the CPU says {want}", got[at]).into());
            }
        }
    }
    println!(
        "matmul: {m}x{k} times {k}x{n} on {} with the kernel `{}` built by vkcompute-build \
         ({} indices bounded): matches the CPU",
        ctx.name(),
        kernel.kernel().label(),
        kernel.kernel().clamped_indices()
    );
    Ok(())
}
