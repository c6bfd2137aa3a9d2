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
    let compiler = shaderc::Compiler::new().map_err(|e| format!("shaderc could not start: {e}"))?;
    let mut options = shaderc::CompileOptions::new()
        .map_err(|e| format!("shaderc options could not be made: {e}"))?;
    options.set_target_env(
        shaderc::TargetEnv::Vulkan,
        match job.target {
            Target::Vulkan1_2 => shaderc::EnvVersion::Vulkan1_2,
            Target::Vulkan1_3 => shaderc::EnvVersion::Vulkan1_3,
        } as u32,
    );
    options.set_optimization_level(match job.optimization {
        Optimization::None => shaderc::OptimizationLevel::Zero,
        Optimization::Size => shaderc::OptimizationLevel::Size,
        Optimization::Performance => shaderc::OptimizationLevel::Performance,
    });
    // Names survive optimization only with debug information; the
    // generated code is named after them.
    options.set_generate_debug_info();
    if job.warnings_as_errors {
        options.set_warnings_as_errors();
    }
    for (name, value) in &job.options.defines {
        options.add_macro_definition(name, value.as_deref());
    }
    let read = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let dirs = job.include_dirs.to_vec();
    let own_dir = job.path.parent().map(Path::to_path_buf);
    let found = read.clone();
    options.set_include_callback(move |name, kind, from, _depth| {
        let from_dir = match kind {
            shaderc::IncludeType::Relative => Path::new(from)
                .parent()
                .map(Path::to_path_buf)
                .filter(|d| !d.as_os_str().is_empty())
                .or_else(|| own_dir.clone()),
            shaderc::IncludeType::Standard => None,
        };
        for dir in from_dir.iter().chain(&dirs) {
            let candidate = dir.join(name);
            if let Ok(content) = std::fs::read_to_string(&candidate) {
                if let Ok(mut read) = found.lock() {
                    read.push(candidate.clone());
                }
                return Ok(shaderc::ResolvedInclude {
                    resolved_name: candidate.display().to_string(),
                    content,
                });
            }
        }
        Err(format!(
            "`{name}` was not found (looked in {})",
            from_dir
                .iter()
                .chain(&dirs)
                .map(|d| d.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    });
    let entry = job.options.entry.as_deref().unwrap_or("main");
    let artifact = compiler
        .compile_into_spirv(
            &source,
            shaderc::ShaderKind::Compute,
            &job.path.display().to_string(),
            entry,
            Some(&options),
        )
        .map_err(|e| e.to_string())?;
    drop(options);
    let read = read.lock().map(|r| r.clone()).unwrap_or_default();
    Ok((artifact.as_binary().to_vec(), read))
}
