//! Full SPIR-V validation with SPIRV-Tools (`spirv-val`'s library), linked
//! through `shaderc-sys` (feature `validate`): a module that is invalid for
//! the device's Vulkan version is an error here, not a driver crash. The
//! runtime and vkcompute-build both validate through this one binding.
#![allow(unsafe_code, reason = "the FFI calls into SPIRV-Tools")]

use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{mpsc, Mutex, OnceLock};

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

/// One validation asked of the validator's thread, and where its answer goes.
struct Job {
    words: Vec<u32>,
    vulkan_1_3: bool,
    answer: mpsc::Sender<Result<(), String>>,
}

/// The validator's thread, started on first use and kept for the process:
/// a thread a validation (a spawned one cost a 64 MiB stack's mapping and
/// up to milliseconds on a loaded machine), with one SPIRV-Tools context
/// per environment made once. Validations from several threads take turns.
fn worker() -> Result<mpsc::Sender<Job>, String> {
    static WORKER: OnceLock<Mutex<Option<mpsc::Sender<Job>>>> = OnceLock::new();
    let slot = WORKER.get_or_init(|| Mutex::new(None));
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(sender) = slot.as_ref() {
        return Ok(sender.clone());
    }
    let (sender, jobs) = mpsc::channel::<Job>();
    std::thread::Builder::new()
        .name("vkcompute-spirv-val".into())
        .stack_size(STACK_BYTES)
        .spawn(move || {
            let mut contexts = Contexts::default();
            for job in jobs {
                let result = contexts.validate(&job.words, job.vulkan_1_3);
                let _ = job.answer.send(result);
            }
        })
        .map_err(|e| format!("could not start the validator's thread: {e}"))?;
    *slot = Some(sender.clone());
    Ok(sender)
}

/// Validates `words` for Vulkan 1.3 (`vulkan_1_3`) or 1.2, on the
/// validator's thread (a [`STACK_BYTES`] stack, whatever the caller's);
/// the error is the validator's message. Inputs whose validation grows
/// without bound are refused before (`words::check_structure`'s size,
/// `rules::check_type_nesting`'s depth).
pub fn validate(words: &[u32], vulkan_1_3: bool) -> Result<(), String> {
    let (answer, answered) = mpsc::channel();
    let job = Job {
        words: words.to_vec(),
        vulkan_1_3,
        answer,
    };
    worker()?
        .send(job)
        .map_err(|_| "the validator's thread has stopped".to_string())?;
    answered
        .recv()
        .map_err(|_| "the validator's thread has stopped".to_string())?
}

/// The SPIRV-Tools contexts of the validator's thread, made on first use.
#[derive(Default)]
struct Contexts {
    vulkan_1_2: Option<Context>,
    vulkan_1_3: Option<Context>,
}

/// A `spv_context`, destroyed when dropped.
struct Context(*mut c_void);

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: created by spvContextCreate, destroyed once.
        unsafe { spvContextDestroy(self.0) };
    }
}

impl Contexts {
    fn validate(&mut self, words: &[u32], vulkan_1_3: bool) -> Result<(), String> {
        let (slot, env) = if vulkan_1_3 {
            (&mut self.vulkan_1_3, ENV_VULKAN_1_3)
        } else {
            (&mut self.vulkan_1_2, ENV_VULKAN_1_2)
        };
        if slot.is_none() {
            // SAFETY: a context for a valid environment, kept in `Context`.
            let context = unsafe { spvContextCreate(env) };
            if context.is_null() {
                return Err("SPIRV-Tools could not create a validation context".into());
            }
            *slot = Some(Context(context));
        }
        let context = slot.as_ref().map_or(std::ptr::null_mut(), |c| c.0);
        let mut diagnostic: *mut Diagnostic = std::ptr::null_mut();
        // SAFETY: `context` is live; `words` is a live slice of
        // `words.len()` words; `diagnostic` receives a pointer the library
        // allocates (or null).
        let result =
            unsafe { spvValidateBinary(context, words.as_ptr(), words.len(), &mut diagnostic) };
        let message = if diagnostic.is_null() {
            None
        } else {
            // SAFETY: a diagnostic from the library, whose `error` is a C
            // string (or null); destroyed right after reading.
            let text = unsafe {
                let d = &*diagnostic;
                let text = (!d.error.is_null())
                    .then(|| CStr::from_ptr(d.error).to_string_lossy().into_owned());
                spvDiagnosticDestroy(diagnostic);
                text
            };
            text
        };
        if result == SUCCESS {
            Ok(())
        } else {
            Err(message.unwrap_or_else(|| format!("SPIRV-Tools returned error code {result}")))
        }
    }
}
