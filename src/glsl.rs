//! GLSL at run time as real shader trees are written (feature `glsl`):
//! macro definitions, `#include` resolved through directories and a
//! callback for embedded sources, specialization constants, the target
//! environment and the optimization level, compiled with shaderc.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::kernel::{Kernel, KernelBuilder};
use vkcompute_spirv::glsl;

/// The file name a source compiles under unless `file_name` names one
/// (compiler messages name it; a kernel compiled under it gets no label).
const DEFAULT_FILE_NAME: &str = "kernel.comp";

/// The Vulkan environment GLSL is compiled for, which sets the SPIR-V
/// version (Vulkan 1.1: SPIR-V 1.3, 1.2: 1.5, 1.3: 1.6).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GlslTarget {
    /// Vulkan 1.1 (SPIR-V 1.3).
    Vulkan1_1,
    /// Vulkan 1.2 (SPIR-V 1.5), the default: what every vkcompute device runs.
    #[default]
    Vulkan1_2,
    /// Vulkan 1.3 (SPIR-V 1.6): only for devices of Vulkan 1.3.
    Vulkan1_3,
}

/// How much the SPIR-V is optimized.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum GlslOptimization {
    /// No optimization (the module as glslang emits it).
    None,
    /// For size.
    Size,
    /// For speed, the default (as the build-time helper compiles).
    #[default]
    Performance,
}

/// A callback resolving `#include`s to embedded sources: given the
/// requested name and the name of the including file, the source or `None`.
/// (`Sync`: the compiler runs on a thread of its own.)
type IncludeFn<'a> = dyn Fn(&str, &str) -> Option<String> + Sync + 'a;
type IncludeCallback<'a> = Box<IncludeFn<'a>>;

/// A GLSL compute-shader source and the compiler's options, compiled at
/// run time into a [`KernelBuilder`] by [`compile`](Self::compile): see
/// [`Kernel::glsl`].
///
/// ```
/// # fn main() -> vkcompute::Result<()> {
/// use vkcompute::{DeviceContext, Kernel};
/// let ctx = DeviceContext::new()?;
/// let source = r#"#version 450
/// #include "scale.glsl"
/// layout(local_size_x_id = 0) in;
/// layout(std430, binding = 0) buffer Data { float data[]; };
/// void main() { data[gl_GlobalInvocationID.x] = scale(data[gl_GlobalInvocationID.x]); }
/// "#;
/// let kernel = Kernel::glsl(source)
///     .define("FACTOR", "3.0")
///     .include_callback(|name, _from| {
///         (name == "scale.glsl").then(|| "float scale(float x) { return x * FACTOR; }".into())
///     })
///     .compile()
///     .specialize(0, 32u32)
///     .build(&ctx)?;
/// let data = ctx.enqueue_create_buffer::<f32>(64)?;
/// data.enqueue_fill(2.0)?;
/// ctx.enqueue_function(&kernel, 2, &[data.arg()], &())?;
/// assert_eq!(data.to_vec()?, vec![6.0; 64]);
/// # Ok(()) }
/// ```
pub struct GlslSource<'a> {
    source: &'a str,
    file_name: String,
    entry: String,
    defines: Vec<(String, Option<String>)>,
    include_dirs: Vec<PathBuf>,
    include_callback: Option<IncludeCallback<'a>>,
    target: GlslTarget,
    optimization: GlslOptimization,
    warnings_as_errors: bool,
}

impl Kernel {
    /// A builder that compiles GLSL compute-shader `source` at run time
    /// (feature `glsl`) with macro definitions, `#include` resolution,
    /// specialization constants, a target environment and an optimization
    /// level, then loads it like [`Kernel::builder`]. A compile error is
    /// [`Error::ShaderCompilation`] with the file names and line numbers
    /// of the compiler's messages (of an included file where the error is
    /// there).
    pub fn glsl(source: &str) -> GlslSource<'_> {
        GlslSource {
            source,
            file_name: DEFAULT_FILE_NAME.into(),
            entry: "main".into(),
            defines: Vec::new(),
            include_dirs: Vec::new(),
            include_callback: None,
            target: GlslTarget::default(),
            optimization: GlslOptimization::default(),
            warnings_as_errors: false,
        }
    }
}

impl<'a> GlslSource<'a> {
    /// The source's file name in messages, and the directory a
    /// `#include "..."` is looked up in first where it is a path (default
    /// `kernel.comp`). It is also the kernel's label, unless the
    /// [`KernelBuilder::label`] after [`compile`](Self::compile) sets one.
    pub fn file_name(mut self, name: impl Into<String>) -> Self {
        self.file_name = name.into();
        self
    }

    /// The name the source's `main` takes in the module (default `main`),
    /// and so the entry point the [`KernelBuilder`] from
    /// [`compile`](Self::compile) loads: set it here, before compiling.
    pub fn entry(mut self, name: &str) -> Self {
        self.entry = name.to_string();
        self
    }

    /// Defines macro `name` as `value` (`-D name=value`).
    pub fn define(mut self, name: &str, value: impl Into<String>) -> Self {
        self.defines.push((name.to_string(), Some(value.into())));
        self
    }

    /// Defines macro `name` with no value (`-D name`).
    pub fn define_flag(mut self, name: &str) -> Self {
        self.defines.push((name.to_string(), None));
        self
    }

    /// Adds a directory `#include`s are looked up in (`-I dir`), after the
    /// including file's own directory for `#include "..."`; directories are
    /// searched in the order added, then the callback is asked.
    pub fn include_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        self.include_dirs.push(dir.into());
        self
    }

    /// Resolves `#include`s the directories do not have, for sources
    /// embedded in the program: `f(name, including_file)` returns the
    /// source, or `None` where it has none.
    pub fn include_callback(
        mut self,
        f: impl Fn(&str, &str) -> Option<String> + Sync + 'a,
    ) -> Self {
        self.include_callback = Some(Box::new(f));
        self
    }

    /// The Vulkan environment to compile for (default Vulkan 1.2).
    pub fn target(mut self, target: GlslTarget) -> Self {
        self.target = target;
        self
    }

    /// The optimization level (default: performance).
    pub fn optimization(mut self, level: GlslOptimization) -> Self {
        self.optimization = level;
        self
    }

    /// Makes compiler warnings errors (default: off).
    pub fn warnings_as_errors(mut self, on: bool) -> Self {
        self.warnings_as_errors = on;
        self
    }

    /// Compiles the source now and hands the module to a [`KernelBuilder`],
    /// which sets what loading takes (specialization constants, a label, a
    /// subgroup size, pointer addressing) and loads it with
    /// [`build`](KernelBuilder::build). A compile error
    /// ([`Error::ShaderCompilation`]) is returned by that `build`, or by
    /// [`KernelBuilder::into_words`] where only the SPIR-V is wanted.
    ///
    /// The kernel's label is the [`file_name`](Self::file_name) where one
    /// was given, else the entry point's name; its entry point is
    /// [`entry`](Self::entry)'s.
    ///
    /// The compiler runs on a thread of its own with a large stack, and a
    /// statement of more than 50,000 operators is refused before it
    /// parses; a source that divides signed integers is not optimized
    /// (SPIRV-Tools' optimizer traps on one of its folds): see the crate's
    /// own-kernels guide.
    #[must_use = "a compile error is returned by the builder's build or into_words"]
    pub fn compile(self) -> KernelBuilder<'static> {
        let words = self.words();
        let builder = KernelBuilder::compiled(words).entry(&self.entry);
        if self.file_name == DEFAULT_FILE_NAME {
            builder
        } else {
            builder.label(self.file_name)
        }
    }

    fn words(&self) -> Result<Vec<u32>> {
        let failed = |message: String| Error::ShaderCompilation { message };
        let optimization = match self.optimization {
            GlslOptimization::None => glsl::Optimization::None,
            GlslOptimization::Size => glsl::Optimization::Size,
            GlslOptimization::Performance => glsl::Optimization::Performance,
        };
        let env = match self.target {
            GlslTarget::Vulkan1_1 => shaderc::EnvVersion::Vulkan1_1,
            GlslTarget::Vulkan1_2 => shaderc::EnvVersion::Vulkan1_2,
            GlslTarget::Vulkan1_3 => shaderc::EnvVersion::Vulkan1_3,
        };
        let dirs = &self.include_dirs;
        let callback = self.include_callback.as_deref();
        let include = |name: &str, relative: bool, from: &str| {
            resolve_include(name, relative, from, dirs, callback)
        };
        let job = glsl::Job {
            source: self.source,
            language: glsl::Language::Glsl,
            file_name: &self.file_name,
            entry: &self.entry,
            vulkan_version: env as u32,
            optimization,
            warnings_as_errors: self.warnings_as_errors,
            // Names survive optimization only with debug information;
            // errors of the loaded kernel use them.
            debug_info: true,
            defines: &self.defines,
            include: &include,
        };
        glsl::compile(&job).map(|c| c.words).map_err(failed)
    }
}

/// Finds `#include` `name` of file `from`: `"name"` in `from`'s directory
/// first, then in `dirs`, then through `callback`.
fn resolve_include(
    name: &str,
    relative: bool,
    from: &str,
    dirs: &[PathBuf],
    callback: Option<&IncludeFn<'_>>,
) -> Result<(String, String), String> {
    let own_dir = relative
        .then(|| Path::new(from).parent())
        .flatten()
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(Path::to_path_buf);
    let candidates = own_dir.iter().chain(dirs).map(|dir| dir.join(name));
    for path in candidates {
        if let Ok(content) = std::fs::read_to_string(&path) {
            return Ok((path.to_string_lossy().into_owned(), content));
        }
    }
    if let Some(content) = callback.and_then(|f| f(name, from)) {
        return Ok((name.to_string(), content));
    }
    let searched: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "`{name}` (included from {from}) was not found in the include directories [{}]{}",
        searched.join(", "),
        if callback.is_some() {
            " nor by the include callback"
        } else {
            ""
        }
    ))
}
