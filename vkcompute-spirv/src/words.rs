//! The SPIR-V instruction stream: the one home of the opcodes and operand
//! values vkcompute reads and writes (every other module names them from
//! here), the stream's structure, and literal strings.
#![allow(
    missing_docs,
    reason = "opcodes and operand values named as the SPIR-V specification names them"
)]

/// The SPIR-V magic number, first word of every module.
pub const MAGIC: u32 = 0x0723_0203;

// Opcodes.
pub const OP_NAME: u32 = 5;
pub const OP_EXTENSION: u32 = 10;
pub const OP_EXT_INST_IMPORT: u32 = 11;
pub const OP_EXT_INST: u32 = 12;
pub const OP_MEMORY_MODEL: u32 = 14;
pub const OP_ENTRY_POINT: u32 = 15;
pub const OP_EXECUTION_MODE: u32 = 16;
pub const OP_CAPABILITY: u32 = 17;
pub const OP_TYPE_BOOL: u32 = 20;
pub const OP_TYPE_INT: u32 = 21;
pub const OP_TYPE_FLOAT: u32 = 22;
pub const OP_TYPE_VECTOR: u32 = 23;
pub const OP_TYPE_MATRIX: u32 = 24;
pub const OP_TYPE_ARRAY: u32 = 28;
pub const OP_TYPE_RUNTIME_ARRAY: u32 = 29;
pub const OP_TYPE_STRUCT: u32 = 30;
pub const OP_TYPE_POINTER: u32 = 32;
pub const OP_TYPE_FUNCTION: u32 = 33;
pub const OP_TYPE_FORWARD_POINTER: u32 = 39;
pub const OP_CONSTANT_TRUE: u32 = 41;
pub const OP_CONSTANT_FALSE: u32 = 42;
pub const OP_CONSTANT: u32 = 43;
pub const OP_CONSTANT_COMPOSITE: u32 = 44;
pub const OP_CONSTANT_NULL: u32 = 46;
pub const OP_SPEC_CONSTANT_TRUE: u32 = 48;
pub const OP_SPEC_CONSTANT_FALSE: u32 = 49;
pub const OP_SPEC_CONSTANT: u32 = 50;
pub const OP_SPEC_CONSTANT_COMPOSITE: u32 = 51;
pub const OP_SPEC_CONSTANT_OP: u32 = 52;
pub const OP_FUNCTION_PARAMETER: u32 = 55;
pub const OP_VARIABLE: u32 = 59;
pub const OP_ACCESS_CHAIN: u32 = 65;
pub const OP_IN_BOUNDS_ACCESS_CHAIN: u32 = 66;
pub const OP_DECORATE: u32 = 71;
pub const OP_MEMBER_DECORATE: u32 = 72;
pub const OP_CONVERT_PTR_TO_U: u32 = 117;
pub const OP_CONVERT_U_TO_PTR: u32 = 120;
pub const OP_PTR_CAST_TO_GENERIC: u32 = 121;
pub const OP_GENERIC_CAST_TO_PTR: u32 = 122;
pub const OP_GENERIC_CAST_TO_PTR_EXPLICIT: u32 = 123;
pub const OP_BITCAST: u32 = 124;
pub const OP_EXECUTION_MODE_ID: u32 = 331;
/// `OpAtomicFMinEXT`, `OpAtomicFMaxEXT`, `OpAtomicFAddEXT`.
pub const OP_ATOMIC_FMIN: u32 = 5614;
pub const OP_ATOMIC_FMAX: u32 = 5615;
pub const OP_ATOMIC_FADD: u32 = 6035;

// Operand values.
pub const ADDRESSING_LOGICAL: u32 = 0;
pub const EXECUTION_MODEL_GL_COMPUTE: u32 = 5;
pub const MODE_LOCAL_SIZE: u32 = 17;
pub const MODE_LOCAL_SIZE_ID: u32 = 38;
pub const DECORATION_SPEC_ID: u32 = 1;
pub const DECORATION_BUFFER_BLOCK: u32 = 3;
pub const DECORATION_ROW_MAJOR: u32 = 4;
pub const DECORATION_ARRAY_STRIDE: u32 = 6;
pub const DECORATION_MATRIX_STRIDE: u32 = 7;
pub const DECORATION_BUILT_IN: u32 = 11;
pub const DECORATION_NON_WRITABLE: u32 = 24;
pub const DECORATION_BINDING: u32 = 33;
pub const DECORATION_DESCRIPTOR_SET: u32 = 34;
pub const DECORATION_OFFSET: u32 = 35;
pub const BUILT_IN_WORKGROUP_SIZE: u32 = 25;
pub const STORAGE_CLASS_UNIFORM_CONSTANT: u32 = 0;
pub const STORAGE_CLASS_UNIFORM: u32 = 2;
pub const STORAGE_CLASS_WORKGROUP: u32 = 4;
pub const STORAGE_CLASS_PRIVATE: u32 = 6;
pub const STORAGE_CLASS_FUNCTION: u32 = 7;
pub const STORAGE_CLASS_PUSH_CONSTANT: u32 = 9;
pub const STORAGE_CLASS_STORAGE_BUFFER: u32 = 12;
/// GLSL.std.450's `UMin` (an extended instruction number).
pub const GLSL_UMIN: u32 = 38;

/// The most words a module may have: 16 Mi (64 MiB). The largest real
/// compute kernels are a few MiB; the validator's and the driver's time
/// grow with the size.
pub const MAX_WORDS: usize = 1 << 24;

/// Checks that `words` is a well-formed SPIR-V module: a valid header and
/// an instruction stream whose word counts add up exactly. (A truncated or
/// corrupted module must not reach the driver, which may crash on it.)
pub fn check_structure(words: &[u32]) -> Result<(), String> {
    if words.len() < 5 {
        return Err(format!(
            "{} words is shorter than the 5-word header",
            words.len()
        ));
    }
    if words.len() > MAX_WORDS {
        return Err(format!(
            "{} words is more than the {MAX_WORDS} (64 MiB) vkcompute accepts",
            words.len()
        ));
    }
    if words[0] != MAGIC {
        return Err(format!(
            "the first word is {:#010x}, not the magic number 0x07230203",
            words[0]
        ));
    }
    let version = words[1];
    let (major, minor) = (version >> 16, (version >> 8) & 0xff);
    if major != 1 || minor > 6 || version & 0xff00_00ff != 0 {
        return Err(format!(
            "version word {version:#010x} is not SPIR-V 1.0 to 1.6"
        ));
    }
    if words[3] == 0 {
        return Err("the id bound is 0".into());
    }
    // SPIRV-Tools ignores the reserved schema word; Mesa rejects the module.
    if words[4] != 0 {
        return Err(format!(
            "the reserved schema word (word 4) is {:#x}, not 0",
            words[4]
        ));
    }
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        if count == 0 {
            return Err(format!(
                "the instruction at word {at} has a word count of 0"
            ));
        }
        if at + count > words.len() {
            return Err(format!(
                "the instruction at word {at} needs {count} words but the module ends after {} (truncated?)",
                words.len() - at
            ));
        }
        at += count;
    }
    Ok(())
}

/// The instructions after the header: (opcode, operands).
pub fn instructions(words: &[u32]) -> impl Iterator<Item = (u32, &[u32])> {
    let mut rest = words.get(5..).unwrap_or(&[]);
    std::iter::from_fn(move || {
        let first = *rest.first()?;
        let count = (first >> 16) as usize;
        if count == 0 || count > rest.len() {
            return None;
        }
        let (inst, tail) = rest.split_at(count);
        rest = tail;
        Some((first & 0xffff, &inst[1..]))
    })
}

/// A SPIR-V literal string (UTF-8, nul-terminated, packed in words).
pub fn literal_string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
