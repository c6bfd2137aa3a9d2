// (The crate's documentation is its README: what it generates, how to
// depend on it, and a walkthrough from zero to a running kernel.)
#![doc = include_str!("../README.md")]
// The README shows `build.rs` as the whole file a user writes, `fn main`
// included.
#![allow(clippy::needless_doctest_main)]

mod codegen;
mod compile;
mod reflect;

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

/// The Vulkan version a shader is compiled for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Target {
    /// Vulkan 1.2 (SPIR-V 1.5): runs on every device vkcompute supports.
    #[default]
    Vulkan1_2,
    /// Vulkan 1.3 (SPIR-V 1.6): only on Vulkan 1.3 devices.
    Vulkan1_3,
}

/// The optimization level of GLSL and HLSL compilation.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Optimization {
    /// None.
    None,
    /// For size.
    Size,
    /// For speed (the default).
    #[default]
    Performance,
}

/// A specialization constant's default, set at build time (the same type
/// the runtime's `Kernel::builder(..).specialize` takes).
pub use vkcompute_spirv::SpecValue;

/// Options of one shader (or of all: [`Kernels`] holds the defaults).
#[derive(Clone, Debug, Default)]
pub struct ShaderOptions {
    defines: Vec<(String, Option<String>)>,
    entry: Option<String>,
    specialization: Vec<(u32, SpecValue)>,
}

impl ShaderOptions {
    /// Defines macro `name` as `value` (`-D name=value`).
    pub fn define(mut self, name: &str, value: impl Into<String>) -> Self {
        self.defines.push((name.into(), Some(value.into())));
        self
    }

    /// Defines macro `name` with no value (`-D name`).
    pub fn define_flag(mut self, name: &str) -> Self {
        self.defines.push((name.into(), None));
        self
    }

    /// The entry point's name in the module (default `main`): for HLSL the
    /// function of that name; GLSL's function is always `main`.
    pub fn entry(mut self, name: &str) -> Self {
        self.entry = Some(name.into());
        self
    }

    /// Sets the default of specialization constant `id` (`constant_id`):
    /// the value the generated kernel runs with (`Kernel::load`, and
    /// `Spec::default()`), and `LOCAL_SIZE` where it sets the workgroup
    /// size.
    pub fn specialize(mut self, id: u32, value: impl Into<SpecValue>) -> Self {
        self.specialization.retain(|(i, _)| *i != id);
        self.specialization.push((id, value.into()));
        self
    }

    /// These options over `defaults`: defines added to the defaults',
    /// entry point and specialization values overriding theirs.
    fn over(&self, defaults: &ShaderOptions) -> ShaderOptions {
        let mut merged = defaults.clone();
        merged.defines.extend(self.defines.iter().cloned());
        if self.entry.is_some() {
            merged.entry.clone_from(&self.entry);
        }
        for (id, v) in &self.specialization {
            merged = merged.specialize(*id, *v);
        }
        merged
    }
}

/// The shaders of one folder tree, compiled, validated and turned into
/// Rust: see the [crate documentation](crate).
#[derive(Debug)]
pub struct Kernels {
    root: PathBuf,
    defaults: ShaderOptions,
    per_shader: BTreeMap<String, ShaderOptions>,
    include_dirs: Vec<PathBuf>,
    target: Target,
    optimization: Optimization,
    warnings_as_errors: bool,
    out_file: String,
    /// The crate's folder (in a build script): how messages name included
    /// files outside the shader root.
    manifest: Option<PathBuf>,
}

/// Why the shaders could not be built: one `file:line: message` (or
/// `file: message`) per problem, the file relative to the shader root
/// (an included file outside it, relative to the crate); `Display` writes
/// one a line.
pub struct Error {
    diagnostics: Vec<String>,
}

impl Error {
    /// Each problem, with its file (and line where the compiler gave one).
    pub fn diagnostics(&self) -> &[String] {
        &self.diagnostics
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.diagnostics.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl std::error::Error for Error {}

impl Kernels {
    /// The shaders under `root` (relative to the crate's manifest
    /// directory in a build script): every `*.comp` (GLSL), `*.hlsl`
    /// (HLSL) and `*.spv` (SPIR-V, taken as it is), in sub-folders too.
    pub fn new(root: impl Into<PathBuf>) -> Kernels {
        Kernels {
            root: root.into(),
            defaults: ShaderOptions::default(),
            per_shader: BTreeMap::new(),
            include_dirs: Vec::new(),
            target: Target::default(),
            optimization: Optimization::default(),
            warnings_as_errors: false,
            out_file: "vkcompute_kernels.rs".into(),
            manifest: None,
        }
    }

    /// Defines macro `name` as `value` for every shader.
    pub fn define(mut self, name: &str, value: impl Into<String>) -> Self {
        self.defaults = self.defaults.define(name, value);
        self
    }

    /// Defines macro `name` (no value) for every shader.
    pub fn define_flag(mut self, name: &str) -> Self {
        self.defaults = self.defaults.define_flag(name);
        self
    }

    /// The entry point's name for every shader (default `main`).
    pub fn entry(mut self, name: &str) -> Self {
        self.defaults = self.defaults.entry(name);
        self
    }

    /// A folder `#include` looks in (after the including file's own).
    pub fn include_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.include_dirs.push(dir.into());
        self
    }

    /// The Vulkan version to compile for (default 1.2).
    pub fn target(mut self, target: Target) -> Self {
        self.target = target;
        self
    }

    /// The optimization level (default [`Optimization::Performance`]).
    pub fn optimization(mut self, level: Optimization) -> Self {
        self.optimization = level;
        self
    }

    /// Whether compiler warnings fail the build (default no).
    pub fn warnings_as_errors(mut self, on: bool) -> Self {
        self.warnings_as_errors = on;
        self
    }

    /// Options for the one shader at `path` (relative to the root, `/`
    /// between folders), over the defaults: its own defines, entry point
    /// and specialization defaults.
    pub fn shader(
        mut self,
        path: &str,
        options: impl FnOnce(ShaderOptions) -> ShaderOptions,
    ) -> Self {
        let current = self.per_shader.remove(path).unwrap_or_default();
        self.per_shader.insert(path.to_string(), options(current));
        self
    }

    /// The file written in `$OUT_DIR` (default `vkcompute_kernels.rs`).
    pub fn out_file(mut self, name: &str) -> Self {
        self.out_file = name.into();
        self
    }

    /// In a build script: builds every shader into `$OUT_DIR/<out_file>`,
    /// the root taken relative to `CARGO_MANIFEST_DIR`, and tells cargo
    /// to run the script again when a shader or an included file changes.
    pub fn build(self) -> Result<PathBuf, Error> {
        let env = |name: &str| {
            std::env::var_os(name)
                .map(PathBuf::from)
                .ok_or_else(|| Error {
                    diagnostics: vec![format!(
                        "{name} is not set: call build() from a build script"
                    )],
                })
        };
        let manifest = env("CARGO_MANIFEST_DIR")?;
        let out_dir = env("OUT_DIR")?;
        let root = manifest.join(&self.root);
        let include_dirs: Vec<PathBuf> =
            self.include_dirs.iter().map(|d| manifest.join(d)).collect();
        let built = Kernels {
            root,
            include_dirs,
            manifest: Some(manifest),
            ..self
        }
        .generate(&out_dir)?;
        for file in &built.read {
            println!("cargo:rerun-if-changed={}", file.display());
        }
        Ok(built.path)
    }

    /// Builds every shader into `out_dir/<out_file>` (outside a build
    /// script: nothing is printed for cargo).
    pub fn generate(&self, out_dir: &Path) -> Result<Built, Error> {
        let mut files = Vec::new();
        find_shaders(&self.root, &self.root, &mut files).map_err(|e| Error {
            diagnostics: vec![format!("{}: {e}", self.root.display())],
        })?;
        files.sort();
        let mut diagnostics = Vec::new();
        let mut read = vec![self.root.clone()];
        let mut modules: BTreeMap<String, String> = BTreeMap::new();
        for path in &self.per_shader {
            if !files.iter().any(|(_, rel)| rel == path.0) {
                diagnostics.push(format!(
                    "{}: options were given for this shader, but there is no such file under {}",
                    path.0,
                    self.root.display()
                ));
            }
        }
        for (path, rel) in &files {
            read.push(path.clone());
            match self.one(path, rel, &mut read) {
                Ok((module, code)) => {
                    if let Some(other) = modules.insert(module.clone(), code) {
                        let _ = other;
                        diagnostics.push(format!(
                            "{rel}: its module name `{module}` is another shader's too: rename one"
                        ));
                    }
                }
                Err(e) => diagnostics.extend(e),
            }
        }
        if !diagnostics.is_empty() {
            return Err(Error { diagnostics });
        }
        let mut out = String::from(
            "// Generated by vkcompute-build from the crate's shaders. Do not edit.\n",
        );
        for code in modules.values() {
            out.push_str(code);
            out.push('\n');
        }
        let path = out_dir.join(&self.out_file);
        std::fs::write(&path, out).map_err(|e| Error {
            diagnostics: vec![format!("{}: {e}", path.display())],
        })?;
        Ok(Built { path, read })
    }

    /// Compiles, validates, reflects and generates shader `rel`.
    fn one(
        &self,
        path: &Path,
        rel: &str,
        read: &mut Vec<PathBuf>,
    ) -> Result<(String, String), Vec<String>> {
        let options = self
            .per_shader
            .get(rel)
            .map_or_else(|| self.defaults.clone(), |o| o.over(&self.defaults));
        let job = compile::Job {
            path,
            name: rel,
            root: &self.root,
            base: self.manifest.as_deref(),
            options: &options,
            include_dirs: &self.include_dirs,
            target: self.target,
            optimization: self.optimization,
            warnings_as_errors: self.warnings_as_errors,
        };
        let (words, included) = compile::module(&job)?;
        read.extend(included);
        // SPIR-V 1.6 is Vulkan 1.3's alone.
        let version = words.get(1).copied().unwrap_or(0);
        let mut validated_for = Vec::new();
        for (name, vulkan_1_3) in [("1.2", false), ("1.3", true)] {
            if version >= 0x0001_0600 && !vulkan_1_3 {
                continue;
            }
            vkcompute_spirv::validate::validate(&words, vulkan_1_3)
                .map_err(|e| vec![format!("{rel}: SPIRV-Tools (Vulkan {name}): {e}")])?;
            validated_for.push(name);
        }
        let entry = options.entry.as_deref().unwrap_or("main");
        let reflected = reflect::reflect(&words, entry).map_err(|e| vec![format!("{rel}: {e}")])?;
        let stem = rel.rsplit_once('.').map_or(rel, |(s, _)| s);
        let module = codegen::snake(stem, "shader");
        let code = codegen::module(&codegen::Shader {
            module: &module,
            label: rel,
            entry,
            words: &words,
            reflected: &reflected,
            validated_for: &validated_for,
        })
        .map_err(|e| vec![format!("{rel}: {e}")])?;
        Ok((module, code))
    }
}

/// What [`Kernels::generate`] wrote, and every file it read.
#[derive(Debug)]
pub struct Built {
    /// The generated file.
    pub path: PathBuf,
    /// The shader files, folders and included files read.
    pub read: Vec<PathBuf>,
}

/// Every `*.comp` and `*.spv` under `dir`, with its path relative to `root`
/// (`/` between folders).
fn find_shaders(root: &Path, dir: &Path, out: &mut Vec<(PathBuf, String)>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        if path.is_dir() {
            find_shaders(root, &path, out)?;
        } else if path
            .extension()
            .is_some_and(|e| e == "comp" || e == "hlsl" || e == "spv")
        {
            let rel = path
                .strip_prefix(root)
                .unwrap_or(&path)
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join("/");
            out.push((path, rel));
        }
    }
    Ok(())
}
