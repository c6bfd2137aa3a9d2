//! Uses the packaged vkcompute with default features: runs the shipped
//! saxpy kernel and checks it against the CPU, checks that user SPIR-V is
//! refused without the validator, and loads it through the unsafe loader.

use vkcompute::{DeviceContext, Error, Kernel};

fn main() {
    if let Err(e) = run() {
        eprintln!("downstream check FAILED: {e}");
        std::process::exit(1);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let ctx = DeviceContext::new()?;
    let saxpy = Kernel::new(&ctx, vkcompute::shaders::SAXPY, "main")?;
    let n: u32 = 100_000;
    let a = 2.5f32;
    let x_host: Vec<f32> = (0..n).map(|i| (i % 1000) as f32 * 0.5).collect();
    let y_host: Vec<f32> = (0..n).map(|i| (i % 777) as f32 + 1.0).collect();
    let x = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    let y = ctx.enqueue_create_buffer::<f32>(n as usize)?;
    x.enqueue_copy_from(&x_host[..])?;
    y.enqueue_copy_from(&y_host[..])?;
    let groups = n.div_ceil(saxpy.local_size()[0]);
    // Push constants `{ float a; uint n; }` as two words.
    ctx.enqueue_function(&saxpy, groups, &[x.arg(), y.arg()], &[a.to_bits(), n])?;
    let result = y.to_vec()?;
    let wrong = (0..n as usize)
        .filter(|&i| result[i] != a * x_host[i] + y_host[i])
        .count();
    if wrong > 0 {
        return Err(format!("saxpy: {wrong} of {n} elements wrong").into());
    }

    // A module that is not one of the shipped kernels: without feature
    // `validate` the safe loader must refuse it.
    let mut user = vkcompute::shaders::STORE.to_vec();
    user[2] = 0; // the header's generator word: still valid, but not shipped
    match Kernel::new(&ctx, &user, "main") {
        Err(Error::ValidatorUnavailable { .. }) => {}
        other => {
            return Err(format!(
                "user SPIR-V without `validate`: expected ValidatorUnavailable, got {other:?}"
            )
            .into())
        }
    }
    // SAFETY: `user` is the shipped STORE module (valid SPIR-V for Vulkan
    // 1.2 and 1.3) with generator id 0 ("unknown"), which any module may have.
    let store = unsafe { Kernel::new_unvalidated(&ctx, &user, "main") }?;
    let data = ctx.enqueue_create_buffer::<u32>(4)?;
    data.enqueue_fill(0)?;
    ctx.enqueue_function(&store, 1, &[data.arg()], &[2u32, 42u32])?;
    let stored = data.to_vec()?;
    if stored != [0, 0, 42, 0] {
        return Err(format!("new_unvalidated STORE wrote {stored:?}").into());
    }
    // vkcompute's own structural checks run before the validator gate, so
    // a module it cannot drive says why, even without the validator: STORE
    // with its buffer moved to descriptor set 40, past the 31 vkcompute
    // accepts (OpDecorate, 4 words, decoration DescriptorSet = 34).
    let mut set_forty = vkcompute::shaders::STORE.to_vec();
    let at = (5..set_forty.len() - 3)
        .find(|&i| set_forty[i] == 0x0004_0047 && set_forty[i + 2] == 34)
        .ok_or("STORE has no DescriptorSet decoration")?;
    set_forty[at + 3] = 40;
    match Kernel::new(&ctx, &set_forty, "main") {
        Err(Error::UnsupportedKernel { reason, .. }) if reason.contains("descriptor set 40") => {}
        other => {
            return Err(format!(
                "a module using set 40 without `validate`: expected the structural error, got \
                 {other:?}"
            )
            .into())
        }
    }
    // A `.spv` file's bytes at an odd address load through the same
    // unsafe loader (they are copied into words).
    let mut bytes = vec![0u8; 1];
    bytes.extend(user.iter().flat_map(|w| w.to_le_bytes()));
    // SAFETY: the same valid module as above.
    let from_bytes = unsafe { Kernel::new_unvalidated(&ctx, &bytes[1..], "main") }?;
    if !from_bytes.shares_pipeline_with(&store) {
        return Err("new_unvalidated of bytes loaded another pipeline".into());
    }
    println!(
        "downstream check: packaged vkcompute (default features) on {}: saxpy of {n} floats \
         correct; user SPIR-V refused without `validate`; new_unvalidated kernel ran; a \
         structural error reported without the validator; new_unvalidated of bytes loaded",
        ctx.name()
    );
    Ok(())
}
