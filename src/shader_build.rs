//! Compiling GLSL compute shaders with shaderc: used by this crate's own
//! `build.rs`, by [`Kernel::from_glsl`](crate::Kernel::from_glsl) (feature
//! `glsl`), and offered to other crates' build scripts (feature `build`).
//!
//! A crate with its own shaders compiles them the way vkcompute does. In
//! `Cargo.toml`:
//!
//! ```toml
//! [build-dependencies]
//! vkcompute = { version = "0.1", features = ["build"] }
//! ```
//!
//! In `build.rs`:
//!
//! ```ignore
//! fn main() {
//!     let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").unwrap());
//!     if let Err(e) = vkcompute::build::compile_shaders("shaders".as_ref(), &out) {
//!         eprintln!("{e}");
//!         std::process::exit(1);
//!     }
//! }
//! ```
//!
//! and in the crate, `include!(concat!(env!("OUT_DIR"), "/shaders.rs"));`
//! defines one `pub static NAME: &[u32]` per `shaders/name.comp`, ready for
//! `Kernel::new(&ctx, NAME, "main")`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// Compiles GLSL compute-shader `source` (named `file_name` in messages)
/// to SPIR-V for Vulkan 1.2, optimised for speed, with `entry` as the
/// entry point's name. The error is the compiler's message, with file and
/// line numbers.
pub fn compile_glsl(source: &str, file_name: &str, entry: &str) -> Result<Vec<u32>, String> {
    let compiler = shaderc::Compiler::new().map_err(|e| format!("shaderc could not start: {e}"))?;
    let mut options = shaderc::CompileOptions::new()
        .map_err(|e| format!("shaderc options could not be made: {e}"))?;
    options.set_optimization_level(shaderc::OptimizationLevel::Performance);
    options.set_target_env(
        shaderc::TargetEnv::Vulkan,
        shaderc::EnvVersion::Vulkan1_2 as u32,
    );
    options.set_warnings_as_errors();
    compiler
        .compile_into_spirv(
            source,
            shaderc::ShaderKind::Compute,
            file_name,
            entry,
            Some(&options),
        )
        .map(|artifact| artifact.as_binary().to_vec())
        .map_err(|e| e.to_string())
}

/// Compiles every `*.comp` in `shader_dir` and writes `out_dir/shaders.rs`,
/// holding each module as `pub static NAME: &[u32]` (word-aligned by
/// construction), named after its file: `saxpy.comp` becomes `SAXPY`. Tells
/// cargo to re-run the build script when a shader changes. The error names
/// the file and line of the first shader that does not compile.
pub fn compile_shaders(shader_dir: &Path, out_dir: &Path) -> Result<(), String> {
    println!("cargo:rerun-if-changed={}", shader_dir.display());
    let mut sources: Vec<PathBuf> = std::fs::read_dir(shader_dir)
        .map_err(|e| format!("cannot read {}: {e}", shader_dir.display()))?
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|ext| ext == "comp"))
        .collect();
    sources.sort();
    let mut generated = String::from(
        "// Generated from the shaders' GLSL by vkcompute's shader build. Do not edit.\n",
    );
    for path in &sources {
        println!("cargo:rerun-if-changed={}", path.display());
        let source = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        let file = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let shown = format!(
            "{}/{file}",
            shader_dir.file_name().unwrap_or_default().to_string_lossy()
        );
        let words = compile_glsl(&source, &shown, "main")
            .map_err(|e| format!("shader compilation failed:\n{e}"))?;
        let name: String = path
            .file_stem()
            .unwrap_or_default()
            .to_string_lossy()
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        // Writing to a String cannot fail.
        let _ = writeln!(generated, "/// SPIR-V of `{shown}`.");
        let _ = writeln!(generated, "pub static {name}: &[u32] = &[");
        for chunk in words.chunks(8) {
            let line: Vec<String> = chunk.iter().map(|w| format!("{w:#010x}")).collect();
            let _ = writeln!(generated, "    {},", line.join(", "));
        }
        let _ = writeln!(generated, "];");
    }
    let target = out_dir.join("shaders.rs");
    std::fs::write(&target, generated)
        .map_err(|e| format!("cannot write {}: {e}", target.display()))
}
