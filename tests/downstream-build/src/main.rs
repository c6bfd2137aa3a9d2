//! Runs the build-time kernels on the packaged vkcompute (default
//! features) and checks them against the CPU.

use downstream_build::{layout, saxpy_typed, scaled};
use vkcompute::DeviceContext;

fn main() {
    if let Err(e) = run() {
        eprintln!("downstream-build check FAILED: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = DeviceContext::new()?;
    // saxpy_typed: FACTOR 2.0 (its own define over the global 1.0).
    let saxpy = saxpy_typed::Kernel::load(&ctx)?;
    let n = 1000u32;
    let x_host: Vec<f32> = (0..n).map(|i| (i % 13) as f32).collect();
    let x = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    let y = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    x.enqueue_copy_from(&x_host)?;
    y.enqueue_fill(1.0)?;
    let groups = n.div_ceil(saxpy_typed::LOCAL_SIZE[0]);
    saxpy.dispatch(&ctx, groups, &x, &y, &saxpy_typed::Params::new(0.5, n))?;
    let got = y.to_vec()?;
    for (i, (g, x)) in got.iter().zip(&x_host).enumerate() {
        if *g != 2.0 * 0.5 * x + 1.0 {
            return Err(format!("saxpy_typed: y[{i}] = {g}").into());
        }
    }
    // layout: the generated structs at the shader's offsets.
    let kernel = layout::Kernel::load(&ctx)?;
    let count = 5usize;
    let start: Vec<layout::Particle> = (0..count)
        .map(|i| layout::Particle::new([i as f32, 1.0, 2.0], 0.0))
        .collect();
    let dirs_host: Vec<layout::DirsElement> = (0..count)
        .map(|i| layout::DirsElement::new([1.0, i as f32, -1.0]))
        .collect();
    let particles = ctx.enqueue_create_buffer::<layout::Particle>(count)?;
    let dirs = ctx.enqueue_create_buffer::<layout::DirsElement>(count)?;
    particles.enqueue_copy_from(&start)?;
    dirs.enqueue_copy_from(&dirs_host)?;
    let offset = [10.0, 20.0, 30.0, 99.0];
    kernel.dispatch(&ctx, 1, &particles, &dirs, &layout::Step::new(count as u32, offset))?;
    let scale = 3.0; // the default build.rs set for SCALE
    for (i, p) in particles.to_vec()?.iter().enumerate() {
        let d = dirs_host[i].value;
        let want = [
            start[i].pos[0] + d[0] * scale + offset[0],
            start[i].pos[1] + d[1] * scale + offset[1],
            start[i].pos[2] + d[2] * scale + offset[2],
        ];
        let (pos, mass) = (p.pos, p.mass);
        if pos != want || mass != 2.0 * i as f32 {
            return Err(format!("layout: particle {i} is {p:?}, expected {want:?}, {}", 2 * i).into());
        }
    }
    // scaled: parameters in a uniform buffer of the generated std140 struct.
    let scaler = scaled::Kernel::load(&ctx)?;
    let data = ctx.enqueue_create_buffer::<f32>(100)?;
    data.enqueue_fill(3.0)?;
    let params = ctx.enqueue_create_buffer::<scaled::Scale>(1)?;
    params.enqueue_copy_from(&[scaled::Scale::new(2.0, [0.0, 0.0, 1.0], 90)])?;
    scaler.dispatch(&ctx, 2, &data, &params)?;
    let got = data.to_vec()?;
    if got[..90] != [7.0; 90] || got[90..] != [3.0; 10] {
        return Err(format!("scaled: {got:?}").into());
    }
    println!(
        "downstream-build check: build-time kernels `{}`, `{}` (constant {} set to 3 by build.rs) and \
         `{}` (a uniform block) ran on {} with vkcompute's default features and match \
         the CPU",
        saxpy.kernel().label(),
        kernel.kernel().label(),
        layout::SPEC_SCALE,
        scaler.kernel().label(),
        ctx.name()
    );
    Ok(())
}
