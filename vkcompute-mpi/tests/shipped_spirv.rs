//! The checked-in SPIR-V of the reduction kernels and of the training
//! example's kernels (`shaders/spv/`) is what their GLSL (`shaders/*.comp`)
//! compiles to, and valid: each module loads through vkcompute's validating
//! `Kernel::builder(..).build` (SPIRV-Tools' validator, feature `validate`),
//! a reduction kernel with every reduction (and `reduce3_*` with every
//! operand count it takes), on a context with the Khronos
//! validation layer, which reports nothing. This is what the `SAFETY`
//! comment of the crate's `build_unvalidated` call rests on.
//!
//! `VKCOMPUTE_REFRESH_SPIRV=1` rewrites the checked-in modules instead
//! (then rebuild, and commit `shaders/spv/`).

use std::path::PathBuf;

use vkcompute::{ContextOptions, DeviceContext, Kernel};
use vkcompute_mpi::ReduceOp;

/// The modules of `examples/train.rs`, which loads them itself.
const EXAMPLE_MODULES: [(&str, &[u8]); 2] = [
    (
        "train_gradient",
        include_bytes!("../shaders/spv/train_gradient.spv"),
    ),
    (
        "train_step",
        include_bytes!("../shaders/spv/train_step.spv"),
    ),
];

fn shader_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("shaders")
}

#[test]
fn shipped_spirv_is_the_compiled_glsl_and_valid() {
    let refresh = std::env::var_os("VKCOMPUTE_REFRESH_SPIRV").is_some_and(|v| v == "1");
    let mut shipped = vkcompute_mpi::shipped_spirv();
    shipped.extend(EXAMPLE_MODULES);
    // Every source has a module and every module a source.
    let mut sources: Vec<String> = std::fs::read_dir(shader_dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".comp").map(str::to_string)
        })
        .collect();
    sources.sort();
    let mut names: Vec<String> = shipped.iter().map(|(n, _)| n.to_string()).collect();
    names.sort();
    assert_eq!(
        sources, names,
        "shaders/*.comp and the crate's modules differ"
    );

    let ctx = DeviceContext::with_options(
        ContextOptions::new()
            .validation(true)
            .pipeline_cache_dir(None),
    )
    .expect("a validated context (lavapipe and the validation layers: run `make test`)");
    let log = ctx.diagnostics().validation_log();
    let mut stale = Vec::new();
    for (name, bytes) in &shipped {
        let source = std::fs::read_to_string(shader_dir().join(format!("{name}.comp"))).unwrap();
        let words = vkcompute::build::compile_glsl(&source, &format!("{name}.comp"), "main")
            .unwrap_or_else(|e| panic!("shaders/{name}.comp does not compile: {e}"));
        let compiled: &[u8] = bytemuck::cast_slice(&words);
        let path = shader_dir().join("spv").join(format!("{name}.spv"));
        if refresh {
            std::fs::write(&path, compiled).unwrap();
            continue;
        }
        // What the crate compiled in is the file on disk, and the GLSL's.
        assert_eq!(
            *bytes,
            std::fs::read(&path).unwrap().as_slice(),
            "{name}: rebuild"
        );
        if compiled != *bytes {
            stale.push(name.to_string());
            continue;
        }
        let module: Vec<u32> = bytes
            .chunks_exact(4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        if EXAMPLE_MODULES.iter().any(|(n, _)| n == name) {
            Kernel::builder(&module)
                .build(&ctx)
                .unwrap_or_else(|e| panic!("{name} does not load validated: {e}"));
            continue;
        }
        // `reduce3_*` with each operand count it is loaded with (its
        // specialization constant 1); the others have no constant 1.
        let counts = if name.starts_with("reduce3_") {
            1..=3
        } else {
            0..=0
        };
        for op in ReduceOp::ALL {
            let code = ReduceOp::ALL.iter().position(|o| *o == op).unwrap() as u32;
            for count in counts.clone() {
                let builder = Kernel::builder(&module).specialize(0, code);
                let builder = match count {
                    0 => builder,
                    c => builder.specialize(1, c),
                };
                builder.build(&ctx).unwrap_or_else(|e| {
                    panic!("{name} with {op:?}, count {count}, does not load validated: {e}")
                });
            }
        }
    }
    assert!(
        stale.is_empty(),
        "the checked-in SPIR-V of {stale:?} differs from its GLSL: run \
         `VKCOMPUTE_REFRESH_SPIRV=1 make mpi-spirv` and commit vkcompute-mpi/shaders/spv/"
    );
    ctx.synchronize().unwrap();
    let messages = log.messages();
    assert!(messages.is_empty(), "validation messages: {messages:?}");
}
