//! Build script: makes the SPIRV-Tools and glslang that shaderc-sys links
//! complete where a distribution ships them split (feature `validate`).
//!
//! Debian 12's and Ubuntu 24.04's `libshaderc_combined.a` hold shaderc's
//! own objects only, without glslang and SPIRV-Tools: linked as it is,
//! every program that uses it fails with undefined `glslang::` and
//! `spvtools::` symbols. Their `libshaderc-dev`, `glslang-dev` and
//! `spirv-tools` packages hold the static libraries that complete it.
//! Where neither `SHADERC_LIB_DIR` nor `VULKAN_SDK` chooses a shaderc,
//! shaderc-sys (with its `prefer-static-linking`, which this crate turns
//! on) links the distribution's `libshaderc_combined.a`; where that
//! archive defines no glslang symbol (read from its symbol index), this
//! script adds glslang's and SPIRV-Tools' static libraries from the same
//! folder. Rust's default
//! linker on x86-64 Linux (rust-lld, since Rust 1.90) resolves them in any
//! order; elsewhere, set `SHADERC_LIB_DIR` (see the message below).
//! Where those packages are missing, the build stops with one message
//! that says what to install.

use std::path::{Path, PathBuf};

/// glslang's and SPIRV-Tools' static libraries, in link order; those a
/// distribution does not ship (newer glslang merges some) are skipped.
const COMPLETING: [&str; 10] = [
    "glslang",
    "MachineIndependent",
    "GenericCodeGen",
    "OSDependent",
    "OGLCompiler",
    "SPIRV",
    "HLSL",
    "glslang-default-resource-limits",
    "SPIRV-Tools-opt",
    "SPIRV-Tools",
];

/// Symbols shaderc calls that a complete `libshaderc_combined.a` defines
/// (out-of-line functions of glslang and SPIRV-Tools' optimizer; weak
/// inline members of glslang's headers would not tell).
const COMPLETE_DEFINES: [&[u8]; 2] = [
    b"_ZN7glslang17InitializeProcessEv",
    b"_ZN8spvtools9OptimizerC1E14spv_target_env",
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    for var in [
        "SHADERC_LIB_DIR",
        "VULKAN_SDK",
        "DOCS_RS",
        "VKCOMPUTE_SHADERC_CHECK",
    ] {
        println!("cargo:rerun-if-env-changed={var}");
    }
    let set = |var: &str| std::env::var_os(var).is_some();
    if !set("CARGO_FEATURE_VALIDATE")
        || set("DOCS_RS")
        || set("SHADERC_LIB_DIR")
        || set("VULKAN_SDK")
        // For a shaderc built another way (shaderc's `build-from-source`).
        || std::env::var_os("VKCOMPUTE_SHADERC_CHECK").is_some_and(|v| v == "0")
        || std::env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("linux")
    {
        return;
    }
    let arch = std::env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let arch = if arch == "x86" {
        "i386".to_string()
    } else {
        arch
    };
    let dir = PathBuf::from(format!("/usr/lib/{arch}-linux-gnu"));
    let combined = dir.join("libshaderc_combined.a");
    let shared = dir.join("libshaderc.so");
    println!("cargo:rerun-if-changed={}", combined.display());
    // What shaderc-sys links: the combined archive where there is one (a
    // complete one defines what shaderc calls of glslang and SPIRV-Tools),
    // else the shared library.
    let incomplete = match archive_defines(&combined, &COMPLETE_DEFINES) {
        Some(complete) => !complete,
        None if combined.exists() => {
            println!(
                "cargo:warning=vkcompute-spirv: could not read the symbol index of {}; \
                 judging from {} whether it holds glslang",
                combined.display(),
                shared.display()
            );
            shared.exists() && lacks_glslang(&shared)
        }
        None => shared.exists() && lacks_glslang(&shared),
    };
    if !incomplete {
        return;
    }
    let linked = if combined.exists() {
        &combined
    } else {
        &shared
    };
    let missing: Vec<&str> = [
        "shaderc_combined",
        "glslang",
        "SPIRV-Tools-opt",
        "SPIRV-Tools",
    ]
    .into_iter()
    .filter(|l| !dir.join(format!("lib{l}.a")).exists())
    .collect();
    let lld = arch == "x86_64";
    if missing.is_empty() && lld {
        println!("cargo:rustc-link-search=native={}", dir.display());
        for lib in COMPLETING {
            if dir.join(format!("lib{lib}.a")).exists() {
                println!("cargo:rustc-link-lib=static={lib}");
            }
        }
        return;
    }
    let dir_s = dir.display();
    let install = if missing.is_empty() {
        String::new()
    } else {
        format!(
            "the static libraries that complete it are missing (lib{}.a); install them:\n\n    \
             sudo apt-get install libshaderc-dev glslang-dev spirv-tools\n\nor ",
            missing.join(".a, lib")
        )
    };
    let mut addlibs = format!("addlib {dir_s}/libshaderc_combined.a\\n");
    for lib in COMPLETING {
        addlibs.push_str(&format!("addlib {dir_s}/lib{lib}.a\\n"));
    }
    eprintln!(
        "error: vkcompute's SPIR-V validator and GLSL compiler link shaderc, and with neither \
         SHADERC_LIB_DIR nor VULKAN_SDK set, shaderc-sys links {}, which this distribution built \
         without glslang and SPIRV-Tools: {install}merge the distribution's static libraries into one archive \
         and point SHADERC_LIB_DIR at its folder (or set VULKAN_SDK to an installed Vulkan \
         SDK):\n\n    \
         mkdir -p \"$HOME/.local/lib/shaderc-merged\"\n    \
         printf 'create %s/libshaderc_combined.a\\n{addlibs}save\\nend\\n' \
         \"$HOME/.local/lib/shaderc-merged\" | ar -M\n    \
         export SHADERC_LIB_DIR=\"$HOME/.local/lib/shaderc-merged\"\n    \
         cargo clean -p shaderc-sys   # shaderc-sys does not notice a new SHADERC_LIB_DIR by itself\n\n\
         then build again (keep SHADERC_LIB_DIR set for every build, e.g. in \
         .cargo/config.toml's [env]). If shaderc is built from source instead (shaderc's \
         `build-from-source` feature), set VKCOMPUTE_SHADERC_CHECK=0 to skip this check.",
        linked.display()
    );
    std::process::exit(1);
}

/// Whether the static archive at `path` defines every symbol of `names`,
/// read from the symbol index GNU `ar` writes (its `/` or `/SYM64/`
/// member lists the defined symbols only); `None` where the file is no
/// archive with such an index (a thin archive, a BSD index, none).
fn archive_defines(path: &Path, names: &[&[u8]]) -> Option<bool> {
    let bytes = std::fs::read(path).ok()?;
    let rest = bytes.strip_prefix(b"!<arch>\n")?;
    let header = rest.get(..60)?;
    let name = std::str::from_utf8(&header[..16]).ok()?.trim_end();
    let size: usize = std::str::from_utf8(&header[48..58])
        .ok()?
        .trim()
        .parse()
        .ok()?;
    let width = match name {
        "/" => 4,
        "/SYM64/" => 8,
        _ => return None,
    };
    let table = rest.get(60..60usize.checked_add(size)?)?;
    let count = table
        .get(..width)?
        .iter()
        .fold(0usize, |n, b| n.wrapping_shl(8) | usize::from(*b));
    let strings = table.get(count.checked_add(1)?.checked_mul(width)?..)?;
    let defined: Vec<&[u8]> = strings.split(|b| *b == 0).collect();
    Some(names.iter().all(|name| defined.contains(name)))
}

/// Whether the shared library refers to glslang symbols it does not define
/// and does not get from a library it depends on (Debian's build).
fn lacks_glslang(shared: &Path) -> bool {
    // `nm -D` lists its dynamic symbols; `U` marks the undefined ones.
    if let Ok(out) = std::process::Command::new("nm")
        .args(["-D", "--undefined-only"])
        .arg(shared)
        .output()
    {
        if out.status.success() {
            let undefined = String::from_utf8_lossy(&out.stdout);
            return undefined.contains("_ZN7glslang") && !has_shared_glslang(shared);
        }
    }
    // Without `nm`: Debian's library names glslang symbols and no folder
    // beside it holds a shared glslang.
    std::fs::read(shared).is_ok_and(|bytes| {
        bytes.windows(11).any(|w| w == b"_ZN7glslang") && !has_shared_glslang(shared)
    })
}

/// Whether a shared glslang library sits beside `shared` (which a working
/// build would depend on).
fn has_shared_glslang(shared: &Path) -> bool {
    shared.parent().is_some_and(|dir| {
        std::fs::read_dir(dir).is_ok_and(|entries| {
            entries.filter_map(|e| e.ok()).any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with("libglslang.so")
            })
        })
    })
}
