//! GLSL compiled with shaderc (glslang, and SPIRV-Tools' optimizer) in a
//! way no source can take the process down (feature `glsl`): the runtime's
//! `Kernel::glsl` and `vkcompute-build` both compile through [`compile`].
//!
//! - glslang recurses once per term of an expression, on the caller's
//!   stack: a 20,000-term sum overflows an 8 MiB main thread. Compilation
//!   runs on a thread of its own with a [`STACK_BYTES`] stack, and a
//!   statement of more than [`MAX_STATEMENT_OPERATORS`] operators (after
//!   preprocessing, so macros count as expanded) is refused before glslang
//!   parses it: such a statement needs at most a quarter of that stack.
//! - SPIRV-Tools' optimizer folds a signed division of the most negative
//!   value by -1 with the host's trapping division (SIGFPE). A source whose
//!   unoptimized module has a signed division (`OpSDiv`, `OpSRem`,
//!   `OpSMod`) is not optimized: drivers optimize the module themselves,
//!   and SPIR-V leaves that one result undefined rather than trapping.
//! - A GLSL source without `#version` makes glslang print its built-in
//!   declarations to standard output before it fails: refused first.
//!
//! HLSL compute shaders ([`Language::Hlsl`]) go through glslang's HLSL
//! front end with the same limits; a register's space is its descriptor
//! set (`register(u0, space1)` is set 1, binding 0).

use std::path::PathBuf;

use crate::words::instructions;

/// The stack of the thread glslang runs on (reserved, not committed: the
/// pages a compile touches are what it costs).
pub const STACK_BYTES: usize = 256 << 20;

/// The most operator characters (`+ - * / % < > & | ^ = ! ? :`) one
/// statement may have after preprocessing. glslang's recursion per term
/// needs about 1.3 KiB of stack (200,000 terms compile in [`STACK_BYTES`]).
pub const MAX_STATEMENT_OPERATORS: usize = 50_000;

/// The opcodes of signed division: `OpSDiv`, `OpSRem`, `OpSMod`.
const SIGNED_DIVISION: [u32; 3] = [135, 138, 139];

/// How much shaderc optimizes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Optimization {
    /// Not at all.
    None,
    /// For size.
    Size,
    /// For speed.
    #[default]
    Performance,
}

/// Finds an `#include`: (name, whether it is `"relative"`, the including
/// file) to (resolved name, content), or a message.
pub type Include<'a> = dyn Fn(&str, bool, &str) -> Result<(String, String), String> + Sync + 'a;

/// The language of a source.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Language {
    /// GLSL (a compute shader, `#version` first).
    #[default]
    Glsl,
    /// HLSL (a compute shader: the function named by the job's entry,
    /// with `[numthreads(..)]`).
    Hlsl,
}

/// One compilation.
pub struct Job<'a> {
    /// The source.
    pub source: &'a str,
    /// Its language.
    pub language: Language,
    /// Its name in messages.
    pub file_name: &'a str,
    /// The entry point's name in the module (GLSL: the source's `main`;
    /// HLSL: the source's function of that name).
    pub entry: &'a str,
    /// `shaderc::EnvVersion` of the Vulkan version to compile for.
    pub vulkan_version: u32,
    /// How much to optimize.
    pub optimization: Optimization,
    /// Whether warnings fail the compilation.
    pub warnings_as_errors: bool,
    /// Whether the module keeps names (debug information).
    pub debug_info: bool,
    /// Macro definitions (`-D name=value`).
    pub defines: &'a [(String, Option<String>)],
    /// Where `#include`s are found.
    pub include: &'a Include<'a>,
}

/// What [`compile`] made.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// The module.
    pub words: Vec<u32>,
    /// Whether it was left unoptimized because it divides signed integers
    /// (see the module documentation).
    pub unoptimized_for_division: bool,
    /// The files `#include` brought in, where the include resolver named
    /// files.
    pub included: Vec<PathBuf>,
}

/// Compiles `job` (see the module documentation). The error is the
/// compiler's messages, one a line, each `file:line: error: message`
/// (without shaderc's `N compilation errors:` header), or says which limit
/// a source broke.
pub fn compile(job: &Job<'_>) -> Result<Compiled, String> {
    if job.language == Language::Glsl {
        check_version(job.source, job.file_name)?;
    }
    let result = std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("vkcompute-glsl".into())
            .stack_size(STACK_BYTES)
            .spawn_scoped(scope, || compile_here(job))
            .map_err(|e| format!("could not start the compiler's thread: {e}"))?
            .join()
            .map_err(|_| "the GLSL compiler panicked".to_string())?
    });
    result
}

/// [`compile`] on the current thread.
fn compile_here(job: &Job<'_>) -> Result<Compiled, String> {
    let compiler = shaderc::Compiler::new().map_err(|e| format!("shaderc could not start: {e}"))?;
    let included = std::sync::Mutex::new(Vec::new());
    let options =
        |level: shaderc::OptimizationLevel| -> Result<shaderc::CompileOptions<'_>, String> {
            let mut options = shaderc::CompileOptions::new()
                .map_err(|e| format!("shaderc options could not be made: {e}"))?;
            options.set_optimization_level(level);
            options.set_target_env(shaderc::TargetEnv::Vulkan, job.vulkan_version);
            if job.language == Language::Hlsl {
                options.set_source_language(shaderc::SourceLanguage::HLSL);
                // SPIR-V 1.3, whatever the Vulkan version: the HLSL front
                // end of glslang before 12.1 (Debian 12's, Ubuntu 24.04's
                // shaderc) decorates storage buffers `BufferBlock`, which
                // SPIR-V 1.4 removed (glslang pull request 3121). Every
                // Vulkan 1.2 and 1.3 device takes SPIR-V 1.3.
                options.set_target_spirv(shaderc::SpirvVersion::V1_3);
                // `register(u0, space1)`: set 1, binding 0.
                options.set_hlsl_io_mapping(true);
                options.set_hlsl_offsets(true);
            }
            if job.warnings_as_errors {
                options.set_warnings_as_errors();
            }
            if job.debug_info {
                options.set_generate_debug_info();
            }
            for (name, value) in job.defines {
                options.add_macro_definition(name, value.as_deref());
            }
            let included = &included;
            options.set_include_callback(move |name, kind, from, _depth| {
                let relative = kind == shaderc::IncludeType::Relative;
                // `vkcompute.glsl` (printf and assertions) where the
                // caller's folders and callback have no file of that name.
                let (resolved_name, content) = match (job.include)(name, relative, from) {
                    Err(_) if name == crate::printf::INCLUDE_NAME => {
                        (name.to_string(), crate::printf::INCLUDE.to_string())
                    }
                    found => found?,
                };
                if let Ok(mut files) = included.lock() {
                    files.push(PathBuf::from(&resolved_name));
                }
                Ok(shaderc::ResolvedInclude {
                    resolved_name,
                    content,
                })
            });
            Ok(options)
        };
    let run = |level: shaderc::OptimizationLevel| -> Result<Vec<u32>, String> {
        compiler
            .compile_into_spirv(
                job.source,
                shaderc::ShaderKind::Compute,
                job.file_name,
                job.entry,
                Some(&options(level)?),
            )
            .map(|artifact| artifact.as_binary().to_vec())
            .map_err(message)
    };
    let expanded = compiler
        .preprocess(
            job.source,
            job.file_name,
            job.entry,
            Some(&options(shaderc::OptimizationLevel::Zero)?),
        )
        .map_err(message)?
        .as_text();
    check_statements(&expanded, job.file_name)?;
    if job.language == Language::Hlsl && !calls_or_defines(&expanded, job.entry) {
        // glslang makes an empty kernel of an HLSL source without the
        // entry point's function, without a word.
        return Err(format!(
            "{}: the HLSL source defines no function `{}`, the entry point",
            job.file_name, job.entry
        ));
    }
    let level = match job.optimization {
        Optimization::None => None,
        Optimization::Size => Some(shaderc::OptimizationLevel::Size),
        Optimization::Performance => Some(shaderc::OptimizationLevel::Performance),
    };
    let divides = expanded.contains(['/', '%']);
    let (words, unoptimized_for_division) = match level {
        Some(level) if divides => {
            let plain = run(shaderc::OptimizationLevel::Zero)?;
            if has_signed_division(&plain) {
                (plain, true)
            } else {
                (run(level)?, false)
            }
        }
        Some(level) => (run(level)?, false),
        None => (run(shaderc::OptimizationLevel::Zero)?, false),
    };
    let mut included = included.into_inner().unwrap_or_default();
    included.sort();
    included.dedup();
    Ok(Compiled {
        words,
        unoptimized_for_division,
        included,
    })
}

/// A compiler error as its messages: shaderc's `N compilation errors:`
/// header dropped, each message on a line of its own.
fn message(e: shaderc::Error) -> String {
    match e {
        shaderc::Error::CompilationError(_, reason) if !reason.trim().is_empty() => {
            reason.trim_end().to_string()
        }
        other => other.to_string(),
    }
}

/// Whether `name` followed by `(` is in `source` as a whole word.
fn calls_or_defines(source: &str, name: &str) -> bool {
    let word = |c: char| c.is_ascii_alphanumeric() || c == '_';
    source.match_indices(name).any(|(at, _)| {
        let before = source[..at].chars().next_back();
        let after = source[at + name.len()..].trim_start().chars().next();
        !before.is_some_and(word) && after == Some('(')
    })
}

/// Whether `words` divides signed integers.
fn has_signed_division(words: &[u32]) -> bool {
    instructions(words).any(|(op, _)| SIGNED_DIVISION.contains(&op))
}

/// Refuses a statement of more than [`MAX_STATEMENT_OPERATORS`] operator
/// characters in `expanded` (preprocessed GLSL, comments gone).
fn check_statements(expanded: &str, file_name: &str) -> Result<(), String> {
    let mut count = 0usize;
    let mut line = 1usize;
    let mut start_line = 1usize;
    for c in expanded.chars() {
        match c {
            ';' | '{' | '}' => {
                count = 0;
                start_line = line;
            }
            '+' | '-' | '*' | '/' | '%' | '<' | '>' | '&' | '|' | '^' | '=' | '!' | '?' | ':' => {
                count += 1;
                if count > MAX_STATEMENT_OPERATORS {
                    return Err(format!(
                        "{file_name}: a statement (from line {start_line} of the preprocessed \
                         source) has more than {MAX_STATEMENT_OPERATORS} operators; vkcompute \
                         refuses it rather than let the compiler recurse that deep: split it \
                         into several statements"
                    ));
                }
            }
            '\n' => line += 1,
            _ => {}
        }
    }
    Ok(())
}

/// Checks that GLSL `source` (named `file_name`) starts with a `#version`
/// directive, after comments and white space only. Without one, glslang
/// takes the source for ES 1.00, and before it fails it prints its built-in
/// declarations (thousands of lines) to the process's standard output.
pub fn check_version(source: &str, file_name: &str) -> Result<(), String> {
    let mut rest = source;
    loop {
        rest = rest.trim_start();
        if let Some(comment) = rest.strip_prefix("//") {
            rest = comment.split_once('\n').map_or("", |(_, after)| after);
        } else if let Some(comment) = rest.strip_prefix("/*") {
            rest = comment.split_once("*/").map_or("", |(_, after)| after);
        } else {
            break;
        }
    }
    let directive = rest
        .strip_prefix('#')
        .map(|d| d.trim_start_matches([' ', '\t']));
    if directive.is_some_and(|d| d.starts_with("version")) {
        Ok(())
    } else {
        Err(format!(
            "{file_name}: the source does not start with a `#version` directive (only comments \
             may come before it); GLSL compute shaders need one: add `#version 450` as the first \
             line"
        ))
    }
}
