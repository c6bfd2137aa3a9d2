//! Runs the build-time kernels on the packaged vkcompute (default
//! features) and checks them against the CPU.

use std::sync::{Arc, Mutex};

use downstream_build::{hist, hlsl_scale, layout, saxpy_typed, scaled, talk, weighted};
use vkcompute::{ContextOptions, DeviceContext, Error, PrintfOutput};

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
    saxpy.enqueue(&ctx, groups, &x, &y, &saxpy_typed::Params::new(0.5, n))?;
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
    kernel.enqueue(
        &ctx,
        1,
        &particles,
        &dirs,
        &layout::Step::new(count as u32, offset),
    )?;
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
            return Err(format!(
                "layout: particle {i} is {p:?}, expected {want:?}, {}",
                2 * i
            )
            .into());
        }
    }
    // scaled: parameters in a uniform buffer of the generated std140
    // struct, `float weights[3]` as padded elements.
    let scaler = scaled::Kernel::load(&ctx)?;
    let data = ctx.enqueue_create_buffer::<f32>(100)?;
    data.enqueue_fill(3.0)?;
    let params = ctx.enqueue_create_buffer::<scaled::Scale>(1)?;
    let weights = [10.0, 20.0, 30.0].map(scaled::ScaleWeightsElement::new);
    params.enqueue_copy_from(&[scaled::Scale::new(2.0, [0.0, 0.0, 1.0], 90, weights)])?;
    scaler.enqueue(&ctx, 2, &data, &params)?;
    let got = data.to_vec()?;
    let want: Vec<f32> = (0..100)
        .map(|i| {
            if i < 90 {
                7.0 + [10.0, 20.0, 30.0][i % 3]
            } else {
                3.0
            }
        })
        .collect();
    if got != want {
        return Err(format!("scaled: {got:?}").into());
    }
    check_hist(&ctx)?;
    check_weighted(&ctx)?;
    check_hlsl(&ctx)?;
    check_talk()?;
    println!(
        "downstream-build check: build-time kernels `{}`, `{}` (constant {} set to 3 by build.rs), \
         `{}` (a uniform block), `hist.comp` (a fixed-size storage block), `weighted.comp` \
         (specialized at load), `hlsl_scale.hlsl` (HLSL, two descriptor sets) and `talk.comp` \
         (printf and VK_ASSERT) ran on {} \
         with vkcompute's default features and match the CPU",
        saxpy.kernel().label(),
        kernel.kernel().label(),
        layout::SPEC_SCALE,
        scaler.kernel().label(),
        ctx.name()
    );
    Ok(())
}

/// talk: a build-time kernel's debugPrintfEXT lines reach the context's
/// callback, and its failed VK_ASSERT is the next wait's error.
fn check_talk() -> Result<(), Box<dyn std::error::Error>> {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    let ctx = DeviceContext::with_options(ContextOptions::new().printf(PrintfOutput::callback(
        move |line| {
            if let Ok(mut lines) = sink.lock() {
                lines.push(line.text.to_string());
            }
        },
    )))?;
    let kernel = talk::Kernel::load(&ctx)?;
    let data = ctx.enqueue_create_buffer::<u32>(4)?;
    data.enqueue_copy_from(&[1u32, 2, 3, 4][..])?;
    kernel.enqueue(&ctx, 1, &data, &talk::Params::new(100))?;
    ctx.synchronize()?;
    let mut printed = lines.lock().map_err(|_| "talk: lines poisoned")?.clone();
    printed.sort();
    let want = [
        "data[0] doubled to 2",
        "data[1] doubled to 4",
        "data[2] doubled to 6",
        "data[3] doubled to 8",
    ];
    if printed != want {
        return Err(format!("talk: printed {printed:?}, expected {want:?}").into());
    }
    // Now [2, 4, 6, 8]: invocations 2 and 3 fail the assertion and stop.
    kernel.enqueue(&ctx, 1, &data, &talk::Params::new(6))?;
    match ctx.synchronize() {
        Err(Error::KernelAssert(failed))
            if failed.line == 10 && failed.message.ends_with("is at the limit") => {}
        other => return Err(format!("talk: expected a failed assertion, got {other:?}").into()),
    }
    let got = data.to_vec()?;
    if got != [4, 8, 6, 8] {
        return Err(format!("talk: {got:?}, expected [4, 8, 6, 8]").into());
    }
    Ok(())
}

/// hist: a shared-memory histogram added into a fixed-size storage block,
/// a typed `DeviceBuffer<hist::Counters>` (std430).
fn check_hist(ctx: &DeviceContext) -> Result<(), Box<dyn std::error::Error>> {
    let kernel = hist::Kernel::load(ctx)?;
    let n = 1000u32;
    let values_host: Vec<u32> = (0..n).map(|i| (i * 7 + i / 3) % 97).collect();
    let values = ctx.enqueue_create_buffer::<u32>(n as usize)?;
    values.enqueue_copy_from(&values_host)?;
    let counters = ctx.enqueue_create_buffer::<hist::Counters>(1)?;
    // `total` starts at 5: the kernel adds to what is there.
    counters.enqueue_copy_from(&[hist::Counters::new(5, [0; 16])])?;
    let groups = n.div_ceil(hist::LOCAL_SIZE[0]);
    kernel.enqueue(ctx, groups, &values, &counters, &hist::Push::new(n))?;
    let got = counters.to_vec()?[0];
    let mut bins = [0u32; 16];
    for v in &values_host {
        bins[(v % 16) as usize] += 1;
    }
    let (total, got_bins) = (got.total, got.bins);
    if total != 5 + n || got_bins != bins {
        return Err(format!("hist: {got:?}, expected total {} and bins {bins:?}", 5 + n).into());
    }
    Ok(())
}

/// weighted: specialization constants set at load (`load_with`), the
/// typed `enqueue` kept; a value that makes block members overlap is
/// refused by the load.
fn check_weighted(ctx: &DeviceContext) -> Result<(), Box<dyn std::error::Error>> {
    let n = 128usize;
    let out = ctx.enqueue_create_buffer::<f32>(n)?;
    let weights = ctx.enqueue_create_buffer::<weighted::Weights>(1)?;
    weights.enqueue_copy_from(&[weighted::Weights::new([1.0, 2.0, 4.0], 0.5)])?;
    let run = |kernel: &weighted::Kernel| -> Result<Vec<f32>, Box<dyn std::error::Error>> {
        out.enqueue_fill(-1.0)?;
        let groups = n as u32 / kernel.kernel().local_size()[0];
        kernel.enqueue(ctx, groups, &out, &weights)?;
        Ok(out.to_vec()?)
    };
    let expect = |s: f32| -> Vec<f32> { (0..n).map(|i| s + i as f32).collect() };
    // The values built in: the workgroup size 64 (build.rs), TAPS 3, no gain.
    let built_in = weighted::Kernel::load(ctx)?;
    if weighted::LOCAL_SIZE != [64, 1, 1] || built_in.kernel().local_size() != [64, 1, 1] {
        return Err(format!("weighted: LOCAL_SIZE {:?}", weighted::LOCAL_SIZE).into());
    }
    let got = run(&built_in)?;
    if got != expect(7.5) {
        return Err(format!("weighted (built in): {got:?}").into());
    }
    let spec = weighted::Spec {
        local_size_x: 32,
        taps: 2,
        use_gain: true,
        gain: 3.0,
    };
    let specialized = weighted::Kernel::load_with(ctx, &spec)?;
    if specialized.kernel().local_size() != [32, 1, 1] {
        return Err(format!("weighted: {:?}", specialized.kernel().local_size()).into());
    }
    let got = run(&specialized)?;
    if got != expect(3.0 * (0.5 + 1.0 + 2.0)) {
        return Err(format!("weighted (specialized): {got:?}").into());
    }
    // Four taps reach byte 16, past `bias` at 12.
    let overlapping = weighted::Spec { taps: 4, ..spec };
    match weighted::Kernel::load_with(ctx, &overlapping) {
        Err(Error::UnsupportedKernel { reason, .. }) if reason.contains("overlap") => {}
        other => return Err(format!("weighted, TAPS 4: {other:?}").into()),
    }
    let empty = weighted::Spec { taps: 0, ..spec };
    match weighted::Kernel::load_with(ctx, &empty) {
        Err(Error::UnsupportedKernel { reason, .. }) if reason.contains("length 0") => {}
        other => return Err(format!("weighted, TAPS 0: {other:?}").into()),
    }
    Ok(())
}

/// hlsl_scale: an HLSL kernel whose buffers are in sets 0 and 1.
fn check_hlsl(ctx: &DeviceContext) -> Result<(), Box<dyn std::error::Error>> {
    let kernel = hlsl_scale::Kernel::load(ctx)?;
    let bindings: Vec<(u32, u32)> = kernel
        .kernel()
        .bindings()
        .iter()
        .map(|b| (b.set, b.binding))
        .collect();
    if bindings != [(0, 0), (1, 0)] {
        return Err(format!("hlsl_scale: bindings {bindings:?}").into());
    }
    let n = 200u32;
    let x_host: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    x.enqueue_copy_from(&x_host)?;
    let y = ctx.enqueue_create_buffer::<f32>(n as usize + 10)?;
    y.enqueue_fill(1.0)?;
    let groups = n.div_ceil(hlsl_scale::LOCAL_SIZE[0]);
    kernel.enqueue(ctx, groups, &x, &y, &hlsl_scale::Params::new(2.5, n))?;
    let got = y.to_vec()?;
    let want: Vec<f32> = (0..n as usize + 10)
        .map(|i| {
            if i < n as usize {
                2.5 * i as f32 + 1.0
            } else {
                1.0
            }
        })
        .collect();
    if got != want {
        return Err(format!("hlsl_scale: {got:?}").into());
    }
    Ok(())
}
