//! One shader's module: GLSL compiled with shaderc (defines, includes,
//! entry point, target, optimization), or a `.spv` file taken as it is;
//! then its specialization defaults set.

use std::path::{Path, PathBuf};

use crate::{Optimization, ShaderOptions, Target};

/// What compiling one shader needs beside its options.
pub(crate) struct Job<'a> {
    pub(crate) path: &'a Path,
    /// The name in messages (relative to the shader root).
    pub(crate) name: &'a str,
    pub(crate) options: &'a ShaderOptions,
    pub(crate) include_dirs: &'a [PathBuf],
    pub(crate) target: Target,
    pub(crate) optimization: Optimization,
    pub(crate) warnings_as_errors: bool,
}

/// The module of `job`, and every file it read (for `rerun-if-changed`).
pub(crate) fn module(job: &Job<'_>) -> Result<(Vec<u32>, Vec<PathBuf>), String> {
    let is_spv = job.path.extension().is_some_and(|e| e == "spv");
    let (mut words, read) = if is_spv {
        let bytes = std::fs::read(job.path).map_err(|e| format!("{}: {e}", job.name))?;
        (
            words_from_bytes(&bytes).map_err(|e| format!("{}: {e}", job.name))?,
            vec![],
        )
    } else {
        glsl(job)?
    };
    if !job.options.specialization.is_empty() {
        let model =
            vkcompute_spirv::Module::read(&words).map_err(|e| format!("{}: {e}", job.name))?;
        words = vkcompute_spirv::rules::set_defaults(&words, &model, &job.options.specialization)
            .map_err(|e| format!("{}: {e}", job.name))?;
    }
    Ok((words, read))
}

fn words_from_bytes(bytes: &[u8]) -> Result<Vec<u32>, String> {
    if bytes.len() % 4 != 0 || bytes.len() < 20 {
        return Err(format!(
            "{} bytes is not a SPIR-V module (whole 32-bit words, a 5-word header)",
            bytes.len()
        ));
    }
    let mut words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if words[0] == 0x0723_0203u32.swap_bytes() {
        words.iter_mut().for_each(|w| *w = w.swap_bytes());
    }
    if words[0] != 0x0723_0203 {
        return Err("no SPIR-V magic number".into());
    }
    Ok(words)
}

fn glsl(job: &Job<'_>) -> Result<(Vec<u32>, Vec<PathBuf>), String> {
    let source = std::fs::read_to_string(job.path).map_err(|e| format!("{}: {e}", job.name))?;
    let dirs = job.include_dirs;
    let own_dir = job.path.parent().map(Path::to_path_buf);
    let include = |name: &str, relative: bool, from: &str| -> Result<(String, String), String> {
        let from_dir = relative
            .then(|| {
                Path::new(from)
                    .parent()
                    .map(Path::to_path_buf)
                    .filter(|d| !d.as_os_str().is_empty())
                    .or_else(|| own_dir.clone())
            })
            .flatten();
        for dir in from_dir.iter().chain(dirs) {
            let candidate = dir.join(name);
            if let Ok(content) = std::fs::read_to_string(&candidate) {
                return Ok((candidate.display().to_string(), content));
            }
        }
        Err(format!(
            "`{name}` was not found (looked in {})",
            from_dir
                .iter()
                .chain(dirs)
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    let file_name = job.path.display().to_string();
    let compiled = vkcompute_spirv::glsl::compile(&vkcompute_spirv::glsl::Job {
        source: &source,
        file_name: &file_name,
        entry: job.options.entry.as_deref().unwrap_or("main"),
        vulkan_version: match job.target {
            Target::Vulkan1_2 => shaderc::EnvVersion::Vulkan1_2,
            Target::Vulkan1_3 => shaderc::EnvVersion::Vulkan1_3,
        } as u32,
        optimization: match job.optimization {
            Optimization::None => vkcompute_spirv::glsl::Optimization::None,
            Optimization::Size => vkcompute_spirv::glsl::Optimization::Size,
            Optimization::Performance => vkcompute_spirv::glsl::Optimization::Performance,
        },
        warnings_as_errors: job.warnings_as_errors,
        // Names survive optimization only with debug information; the
        // generated code is named after them.
        debug_info: true,
        defines: &job.options.defines,
        include: &include,
    })?;
    Ok((compiled.words, compiled.included))
}
