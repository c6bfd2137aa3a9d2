//! One shader's module: GLSL or HLSL compiled with shaderc (defines,
//! includes, entry point, target, optimization), or a `.spv` file taken as
//! it is; then its specialization defaults set.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::{Optimization, ShaderOptions, Target};

/// What compiling one shader needs beside its options.
pub(crate) struct Job<'a> {
    pub(crate) path: &'a Path,
    /// The name in messages (relative to the shader root).
    pub(crate) name: &'a str,
    /// The shader root, and the crate's folder where known: how messages
    /// name included files.
    pub(crate) root: &'a Path,
    pub(crate) base: Option<&'a Path>,
    pub(crate) options: &'a ShaderOptions,
    pub(crate) include_dirs: &'a [PathBuf],
    pub(crate) target: Target,
    pub(crate) optimization: Optimization,
    pub(crate) warnings_as_errors: bool,
}

/// The module of `job`, and every file it read (for `rerun-if-changed`).
/// The error is one `file:line: message` (or `file: message`) a problem.
pub(crate) fn module(job: &Job<'_>) -> Result<(Vec<u32>, Vec<PathBuf>), Vec<String>> {
    let one = |e: String| vec![format!("{}: {e}", job.name)];
    let (mut words, read) = match job.path.extension().and_then(|e| e.to_str()) {
        Some("spv") => {
            let bytes = std::fs::read(job.path).map_err(|e| one(e.to_string()))?;
            (words_from_bytes(&bytes).map_err(one)?, vec![])
        }
        Some("hlsl") => compile(job, vkcompute_spirv::glsl::Language::Hlsl)?,
        _ => compile(job, vkcompute_spirv::glsl::Language::Glsl)?,
    };
    if !job.options.specialization.is_empty() {
        let model = vkcompute_spirv::Module::read(&words).map_err(one)?;
        words = vkcompute_spirv::rules::set_defaults(&words, &model, &job.options.specialization)
            .map_err(one)?;
    }
    Ok((words, read))
}

/// How messages name `path`: relative to the shader root where it lies
/// under it, else to the crate's folder, else as it is; `/` between
/// folders.
fn shown(path: &Path, root: &Path, base: Option<&Path>) -> String {
    let relative = path
        .strip_prefix(root)
        .ok()
        .or_else(|| base.and_then(|b| path.strip_prefix(b).ok()));
    match relative {
        Some(r) => r
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join("/"),
        None => path.display().to_string(),
    }
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

fn compile(
    job: &Job<'_>,
    language: vkcompute_spirv::glsl::Language,
) -> Result<(Vec<u32>, Vec<PathBuf>), Vec<String>> {
    let source =
        std::fs::read_to_string(job.path).map_err(|e| vec![format!("{}: {e}", job.name)])?;
    let dirs = job.include_dirs;
    // Each file by the name messages give it (what shaderc passes back as
    // the including file): the shader itself, and every file included.
    let files: Mutex<HashMap<String, PathBuf>> = Mutex::new(HashMap::from([(
        job.name.to_string(),
        job.path.to_path_buf(),
    )]));
    let include = |name: &str, relative: bool, from: &str| -> Result<(String, String), String> {
        let from_dir = relative
            .then(|| {
                let files = files.lock().ok()?;
                files.get(from)?.parent().map(Path::to_path_buf)
            })
            .flatten();
        for dir in from_dir.iter().chain(dirs) {
            let candidate = dir.join(name);
            if let Ok(content) = std::fs::read_to_string(&candidate) {
                let shown = shown(&candidate, job.root, job.base);
                if let Ok(mut files) = files.lock() {
                    files.insert(shown.clone(), candidate);
                }
                return Ok((shown, content));
            }
        }
        Err(format!(
            "`{name}` was not found (looked in {})",
            from_dir
                .iter()
                .chain(dirs)
                .map(|d| shown(d, job.root, job.base))
                .collect::<Vec<_>>()
                .join(", ")
        ))
    };
    let compiled = vkcompute_spirv::glsl::compile(&vkcompute_spirv::glsl::Job {
        source: &source,
        language,
        file_name: job.name,
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
    })
    // The compiler's messages, one a line, each naming its file.
    .map_err(|e| e.lines().map(str::to_string).collect::<Vec<_>>())?;
    let mut included: Vec<PathBuf> = files
        .into_inner()
        .map(|f| f.into_values().filter(|p| p != job.path).collect())
        .unwrap_or_default();
    included.sort();
    Ok((compiled.words, included))
}
