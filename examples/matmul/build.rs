//! Compiles `shaders/` into typed kernels (`$OUT_DIR/vkcompute_kernels.rs`).

fn main() {
    let built = vkcompute_build::Kernels::new("shaders")
        // The tile edge, as a macro the shader's sizes use.
        .define("TILE", "16")
        .build();
    if let Err(e) = built {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
