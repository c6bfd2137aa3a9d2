//! The SPIR-V instruction stream: the opcodes and operand values read
//! from it, its structure, and literal strings.

/// The SPIR-V magic number, first word of every module.
pub(crate) const MAGIC: u32 = 0x0723_0203;

pub(super) const OP_DECORATE: u32 = 71;
pub(super) const OP_EXECUTION_MODE: u32 = 16;
pub(super) const OP_EXECUTION_MODE_ID: u32 = 331;
pub(super) const OP_ENTRY_POINT: u32 = 15;
pub(super) const OP_CONSTANT: u32 = 43;
pub(super) const OP_CONSTANT_COMPOSITE: u32 = 44;
pub(super) const OP_SPEC_CONSTANT: u32 = 50;
pub(super) const OP_SPEC_CONSTANT_COMPOSITE: u32 = 51;
pub(super) const DECORATION_SPEC_ID: u32 = 1;
pub(super) const DECORATION_BUILT_IN: u32 = 11;
pub(super) const BUILT_IN_WORKGROUP_SIZE: u32 = 25;
pub(super) const MODE_LOCAL_SIZE: u32 = 17;
pub(super) const MODE_LOCAL_SIZE_ID: u32 = 38;
pub(super) const OP_CAPABILITY: u32 = 17;
pub(super) const OP_EXTENSION: u32 = 10;
pub(super) const OP_TYPE_INT: u32 = 21;
pub(super) const STORAGE_CLASS_WORKGROUP: u32 = 4;
pub(super) const OP_MEMORY_MODEL: u32 = 14;
pub(super) const OP_TYPE_POINTER: u32 = 32;
pub(super) const OP_TYPE_FORWARD_POINTER: u32 = 39;
pub(super) const OP_VARIABLE: u32 = 59;
pub(super) const OP_CONVERT_PTR_TO_U: u32 = 117;
pub(super) const OP_CONVERT_U_TO_PTR: u32 = 120;
pub(super) const OP_PTR_CAST_TO_GENERIC: u32 = 121;
pub(super) const OP_GENERIC_CAST_TO_PTR: u32 = 122;
pub(super) const OP_GENERIC_CAST_TO_PTR_EXPLICIT: u32 = 123;
pub(super) const OP_BITCAST: u32 = 124;
pub(super) const OP_SPEC_CONSTANT_OP: u32 = 52;

/// Checks that `words` is a well-formed SPIR-V module: a valid header and
/// an instruction stream whose word counts add up exactly. (A truncated or
/// corrupted module must not reach the driver, which may crash on it.)
pub(crate) fn check_structure(words: &[u32]) -> Result<(), String> {
    if words.len() < 5 {
        return Err(format!(
            "{} words is shorter than the 5-word header",
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
pub(crate) fn instructions(words: &[u32]) -> impl Iterator<Item = (u32, &[u32])> {
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
pub(crate) fn literal_string(words: &[u32]) -> String {
    let bytes: Vec<u8> = words
        .iter()
        .flat_map(|w| w.to_le_bytes())
        .take_while(|&b| b != 0)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}
