//! SPIRV-Tools' validator, which `shaderc-sys` links (its combined library
//! holds SPIRV-Tools). The same calls as the runtime's `src/vk/spirv_val.rs`:
//! this crate cannot depend on the runtime, whose build it must not repeat.

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

/// The Vulkan versions the runtime runs on, with their `spv_target_env`.
pub(crate) const VULKAN_VERSIONS: [(&str, c_int); 2] = [("1.2", 23), ("1.3", 25)];
/// `SPV_SUCCESS`.
const SUCCESS: c_int = 0;

/// Validates `words` for the environment `env` of [`VULKAN_VERSIONS`]; the
/// error is the validator's message.
pub(crate) fn validate(words: &[u32], env: c_int) -> Result<(), String> {
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
    let message = (!diagnostic.is_null()).then(|| {
        // SAFETY: a diagnostic from the library, whose `error` is a C string
        // (or null); destroyed right after reading.
        unsafe {
            let d = &*diagnostic;
            let text = (!d.error.is_null())
                .then(|| CStr::from_ptr(d.error).to_string_lossy().into_owned());
            spvDiagnosticDestroy(diagnostic);
            text
        }
    });
    // SAFETY: created above, destroyed once.
    unsafe { spvContextDestroy(context) };
    if result == SUCCESS {
        Ok(())
    } else {
        Err(message
            .flatten()
            .unwrap_or_else(|| format!("SPIRV-Tools returned error code {result}")))
    }
}
