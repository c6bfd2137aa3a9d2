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
//! defines one `pub static NAME: &[u32]` per `shaders/name.comp`. Those
//! load with `Kernel::new` where the application has feature `validate`;
//! on default features the safe loaders take only vkcompute's shipped
//! kernels, so a crate's own shaders are better built with the companion
//! crate `vkcompute-build`, whose generated kernels load on default
//! features (its module documentation has the walkthrough).

use std::path::{Path, PathBuf};

use crate::spirv_source::{append_static, static_name};

/// Compiles GLSL compute-shader `source` (named `file_name` in messages)
/// to SPIR-V for Vulkan 1.2, optimised for speed, with `entry` as the
/// entry point's name. The error is the compiler's message, with file and
/// line numbers.
pub fn compile_glsl(source: &str, file_name: &str, entry: &str) -> Result<Vec<u32>, String> {
    let include = |name: &str, _: bool, from: &str| -> Result<(String, String), String> {
        Err(format!(
            "`{name}` (included from {from}): `compile_glsl` resolves no includes; use \
             `Kernel::glsl` or vkcompute-build"
        ))
    };
    let job = vkcompute_spirv::glsl::Job {
        source,
        language: vkcompute_spirv::glsl::Language::Glsl,
        file_name,
        entry,
        vulkan_version: shaderc::EnvVersion::Vulkan1_2 as u32,
        optimization: vkcompute_spirv::glsl::Optimization::Performance,
        warnings_as_errors: true,
        debug_info: false,
        defines: &[],
        include: &include,
    };
    vkcompute_spirv::glsl::compile(&job).map(|c| c.words)
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
        let name = static_name(&path.file_stem().unwrap_or_default().to_string_lossy());
        append_static(&mut generated, &name, &shown, &words);
    }
    let target = out_dir.join("shaders.rs");
    std::fs::write(&target, generated)
        .map_err(|e| format!("cannot write {}: {e}", target.display()))
}

/// The shipped SPIR-V (`shaders/spv/`, what the default build loads) is
/// what `shaders/*.comp` compile to, and valid for Vulkan 1.2 and 1.3.
/// `VKCOMPUTE_REFRESH_SPIRV=1` (`make spirv`) rewrites it instead.
#[cfg(all(test, feature = "shader-compiler"))]
mod shipped_spirv {
    use std::path::Path;

    #[test]
    fn shipped_spirv_matches_the_sources() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"));
        let shader_dir = root.join("shaders");
        let spv_dir = shader_dir.join("spv");
        let refresh = std::env::var_os("VKCOMPUTE_REFRESH_SPIRV").is_some_and(|v| v == "1");
        let mut sources: Vec<_> = std::fs::read_dir(&shader_dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|ext| ext == "comp"))
            .collect();
        sources.sort();
        assert!(
            !sources.is_empty(),
            "no shaders in {}",
            shader_dir.display()
        );
        let mut drifted = Vec::new();
        for path in &sources {
            let stem = path.file_stem().unwrap().to_string_lossy();
            let shown = format!("shaders/{stem}.comp");
            let source = std::fs::read_to_string(path).unwrap();
            let words = super::compile_glsl(&source, &shown, "main")
                .unwrap_or_else(|e| panic!("{shown} does not compile:\n{e}"));
            for vulkan_1_3 in [false, true] {
                if let Err(e) = vkcompute_spirv::validate::validate(&words, vulkan_1_3) {
                    panic!("SPIRV-Tools rejects {shown} (Vulkan 1.3: {vulkan_1_3}): {e}");
                }
            }
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
            let spv = spv_dir.join(format!("{stem}.spv"));
            if refresh {
                std::fs::create_dir_all(&spv_dir).unwrap();
                std::fs::write(&spv, &bytes).unwrap();
                eprintln!("wrote {}", spv.display());
            } else if std::fs::read(&spv).ok().as_deref() != Some(&bytes[..]) {
                drifted.push(format!("shaders/spv/{stem}.spv"));
            }
        }
        assert!(
            drifted.is_empty(),
            "the shipped SPIR-V differs from what shaders/*.comp compile to (or is missing): {}; \
             run `make spirv` to recompile shaders/*.comp into shaders/spv/, then commit \
             shaders/spv/",
            drifted.join(", ")
        );
    }
}
