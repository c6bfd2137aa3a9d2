//! Full SPIR-V validation with SPIRV-Tools (`spirv-val`'s library), linked
//! through `shaderc-sys` (feature `validate`): a module that is invalid for
//! the device's Vulkan version is an error here, not a driver crash. The
//! runtime and vkcompute-build both validate through this one binding.
#![allow(unsafe_code, reason = "the FFI calls into SPIRV-Tools")]

use std::ffi::{c_char, c_int, c_void, CStr};

#[repr(C)]
struct Position {
    line: usize,
    column: usize,
    index: usize,
}

/// `spv_diagnostic_t` of `libspirv.h`.
#[repr(C)]
struct Diagnostic {
    position: Position,
    error: *mut c_char,
    is_text_source: bool,
}

extern "C" {
    fn spvContextCreate(env: c_int) -> *mut c_void;
    fn spvContextDestroy(context: *mut c_void);
    fn spvValidateBinary(
        context: *const c_void,
        words: *const u32,
        num_words: usize,
        diagnostic: *mut *mut Diagnostic,
    ) -> c_int;
    fn spvDiagnosticDestroy(diagnostic: *mut Diagnostic);
}

/// `SPV_ENV_VULKAN_1_2` and `SPV_ENV_VULKAN_1_3` of `spv_target_env`.
const ENV_VULKAN_1_2: c_int = 23;
const ENV_VULKAN_1_3: c_int = 25;
/// `SPV_SUCCESS`.
const SUCCESS: c_int = 0;

/// The stack of the thread the validator runs on: its checks recurse over
/// some structures of the module, whatever the caller's stack (a spawned
/// Rust thread has 2 MiB). Reserved, not committed.
pub const STACK_BYTES: usize = 64 << 20;

/// Validates `words` for Vulkan 1.3 (`vulkan_1_3`) or 1.2, on a thread of
/// its own with a [`STACK_BYTES`] stack; the error is the validator's
/// message. Inputs whose validation grows without bound are refused before
/// (`words::check_structure`'s size, `rules::check_type_nesting`'s depth).
pub fn validate(words: &[u32], vulkan_1_3: bool) -> Result<(), String> {
    std::thread::scope(|scope| {
        std::thread::Builder::new()
            .name("vkcompute-spirv-val".into())
            .stack_size(STACK_BYTES)
            .spawn_scoped(scope, || validate_here(words, vulkan_1_3))
            .map_err(|e| format!("could not start the validator's thread: {e}"))?
            .join()
            .map_err(|_| "the validator panicked".to_string())?
    })
}

fn validate_here(words: &[u32], vulkan_1_3: bool) -> Result<(), String> {
    let env = if vulkan_1_3 {
        ENV_VULKAN_1_3
    } else {
        ENV_VULKAN_1_2
    };
    // SAFETY: a context for a valid environment; destroyed below.
    let context = unsafe { spvContextCreate(env) };
    if context.is_null() {
        return Err("SPIRV-Tools could not create a validation context".into());
    }
    let mut diagnostic: *mut Diagnostic = std::ptr::null_mut();
    // SAFETY: `words` is a live slice of `words.len()` words; `diagnostic`
    // receives a pointer the library allocates (or null).
    let result =
        unsafe { spvValidateBinary(context, words.as_ptr(), words.len(), &mut diagnostic) };
    let message = if diagnostic.is_null() {
        None
    } else {
        // SAFETY: a diagnostic from the library, whose `error` is a C string
        // (or null); destroyed right after reading.
        let text = unsafe {
            let d = &*diagnostic;
            let text = (!d.error.is_null())
                .then(|| CStr::from_ptr(d.error).to_string_lossy().into_owned());
            spvDiagnosticDestroy(diagnostic);
            text
        };
        text
    };
    // SAFETY: created above, destroyed once.
    unsafe { spvContextDestroy(context) };
    if result == SUCCESS {
        Ok(())
    } else {
        Err(message.unwrap_or_else(|| format!("SPIRV-Tools returned error code {result}")))
    }
}
