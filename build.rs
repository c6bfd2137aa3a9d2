//! Compiles `shaders/*.comp` into SPIR-V (`$OUT_DIR/shaders.rs`), with the
//! same code the `build` feature offers to other crates.

#[allow(dead_code)]
#[path = "src/shader_build.rs"]
mod shader_build;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=src/shader_build.rs");
    let manifest =
        std::path::PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let out_dir = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo"));
    if let Err(e) = shader_build::compile_shaders(&manifest.join("shaders"), &out_dir) {
        eprintln!("error: {e}");
        std::process::exit(1);
    }
}
