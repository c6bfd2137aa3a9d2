//! What a compute module declares: its storage-buffer bindings, push-constant
//! size, workgroup size and specialization constants, read with `spirq`.
//!
//! The workgroup size is read here directly from the words, since it can
//! come from three places: `LocalSize`, `LocalSizeId`, or a constant
//! decorated `BuiltIn WorkgroupSize` (what glslang emits for
//! `local_size_x_id`), whose parts may be specialization constants.
#![deny(unsafe_code)]

use std::collections::HashMap;

use spirq::ty::{AccessType, DescriptorType, Type};
use spirq::var::Variable;
use spirq::ReflectConfig;

/// The largest binding number a kernel may use: drivers size descriptor
/// set layouts by the largest binding (lavapipe runs out of memory on one
/// near `u32::MAX`).
const MAX_BINDING: u32 = 4095;

/// The SPIR-V magic number, first word of every module.
pub(crate) const MAGIC: u32 = 0x0723_0203;

/// One storage-buffer binding of a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingInfo {
    /// The binding number (in descriptor set 0).
    pub binding: u32,
    /// The variable's name, where the module keeps names.
    pub name: Option<String>,
    /// Whether the kernel only reads the buffer (`readonly` in GLSL).
    pub read_only: bool,
    /// The array stride of the buffer's runtime array, where its block is
    /// one runtime array: the element size arguments must have.
    pub element_stride: Option<u32>,
}

/// One specialization constant of a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecConstantInfo {
    /// The `constant_id`.
    pub id: u32,
    /// The constant's name, where the module keeps names.
    pub name: Option<String>,
    /// Its size in bytes (4 or 8; booleans count 4).
    pub size: u32,
}

/// What a kernel's entry point declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Interface {
    /// Storage-buffer bindings in binding order.
    pub(crate) bindings: Vec<BindingInfo>,
    /// Bytes of push constants (0 if none).
    pub(crate) push_size: u32,
    pub(crate) spec_constants: Vec<SpecConstantInfo>,
}

/// Reflects entry point `entry` of `words`; the error says what is wrong.
pub(crate) fn reflect(words: &[u32], entry: &str) -> Result<Interface, String> {
    let entry_points = ReflectConfig::new()
        .spv(words)
        .ref_all_rscs(true)
        .reflect()
        .map_err(|e| format!("the module could not be parsed: {e}"))?;
    let Some(ep) = entry_points.iter().find(|e| e.name == entry) else {
        let names: Vec<&str> = entry_points.iter().map(|e| e.name.as_str()).collect();
        return Err(format!(
            "it has no entry point `{entry}` (it has: {})",
            names.join(", ")
        ));
    };
    if ep.exec_model != spirq::spirv::ExecutionModel::GLCompute {
        return Err(format!(
            "entry point `{entry}` is not a compute shader ({:?})",
            ep.exec_model
        ));
    }
    let mut bindings = Vec::new();
    let mut push_size = 0u32;
    let mut spec_constants = Vec::new();
    for var in &ep.vars {
        match var {
            Variable::Descriptor {
                name,
                desc_bind,
                desc_ty,
                ty,
                nbind,
            } => {
                let what = name
                    .clone()
                    .unwrap_or_else(|| format!("binding {}", desc_bind.bind()));
                let DescriptorType::StorageBuffer(access) = desc_ty else {
                    return Err(format!(
                        "`{what}` (set {}, binding {}) is a {desc_ty:?}: vkcompute binds storage buffers only",
                        desc_bind.set(),
                        desc_bind.bind()
                    ));
                };
                if desc_bind.set() != 0 {
                    return Err(format!(
                        "`{what}` is in descriptor set {}: vkcompute binds set 0 only",
                        desc_bind.set()
                    ));
                }
                if desc_bind.bind() > MAX_BINDING {
                    return Err(format!(
                        "`{what}` has binding number {}: vkcompute accepts binding numbers up to {MAX_BINDING}",
                        desc_bind.bind()
                    ));
                }
                if *nbind != 1 {
                    return Err(format!(
                        "`{what}` is an array of {nbind} buffers: bind one buffer per binding"
                    ));
                }
                bindings.push(BindingInfo {
                    binding: desc_bind.bind(),
                    name: name.clone(),
                    read_only: *access == AccessType::ReadOnly,
                    element_stride: runtime_array_stride(ty),
                });
            }
            Variable::PushConstant { ty, .. } => {
                push_size = extent(ty)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| "the push-constant block has no fixed size".to_string())?;
            }
            Variable::SpecConstant { name, spec_id, ty } => spec_constants.push(SpecConstantInfo {
                id: *spec_id,
                name: name.clone(),
                size: ty.nbyte().map_or(4, |n| n.max(4) as u32),
            }),
            Variable::Input { .. } | Variable::Output { .. } => {}
        }
    }
    bindings.sort_by_key(|b| b.binding);
    if let Some(pair) = bindings.windows(2).find(|w| w[0].binding == w[1].binding) {
        return Err(format!("two variables share binding {}", pair[0].binding));
    }
    spec_constants.sort_by_key(|s| s.id);
    spec_constants.dedup_by_key(|s| s.id);
    Ok(Interface {
        bindings,
        push_size,
        spec_constants,
    })
}

/// The bytes `ty` spans: for a struct the end of its furthest member (its
/// members' offsets need not increase, so this is not spirq's `nbyte`,
/// which ends at the last member); `None` if it has no fixed size.
fn extent(ty: &Type) -> Option<u64> {
    match ty {
        Type::Struct(block) => block.members.iter().try_fold(0u64, |end, member| {
            let offset = u64::try_from(member.offset?).ok()?;
            Some(end.max(offset.checked_add(extent(&member.ty)?)?))
        }),
        Type::Array(array) => {
            let n = u64::from(array.nelement?);
            let stride = u64::try_from(array.stride?).ok()?;
            let last = (n.checked_sub(1)?)
                .checked_mul(stride)?
                .checked_add(extent(&array.element_ty)?)?;
            Some(last.max(n.checked_mul(stride)?))
        }
        _ => ty.nbyte().and_then(|n| u64::try_from(n).ok()),
    }
}

/// The stride of a block that is one runtime array (`T data[];`).
fn runtime_array_stride(ty: &Type) -> Option<u32> {
    let Type::Struct(block) = ty else { return None };
    let [member] = block.members.as_slice() else {
        return None;
    };
    match &member.ty {
        Type::Array(array) if array.nelement.is_none() => {
            array.stride.and_then(|s| u32::try_from(s).ok())
        }
        _ => None,
    }
}

const OP_DECORATE: u32 = 71;
const OP_EXECUTION_MODE: u32 = 16;
const OP_EXECUTION_MODE_ID: u32 = 331;
const OP_ENTRY_POINT: u32 = 15;
const OP_CONSTANT: u32 = 43;
const OP_CONSTANT_COMPOSITE: u32 = 44;
const OP_SPEC_CONSTANT: u32 = 50;
const OP_SPEC_CONSTANT_COMPOSITE: u32 = 51;
const DECORATION_SPEC_ID: u32 = 1;
const DECORATION_BUILT_IN: u32 = 11;
const BUILT_IN_WORKGROUP_SIZE: u32 = 25;
const MODE_LOCAL_SIZE: u32 = 17;
const MODE_LOCAL_SIZE_ID: u32 = 38;

/// The workgroup size of entry point `entry`, with the specialization
/// values `spec` (id -> value) applied where the size depends on them.
pub(crate) fn local_size(words: &[u32], entry: &str, spec: &HashMap<u32, u32>) -> Option<[u32; 3]> {
    let mut entry_id = None;
    let mut local_size = None;
    let mut local_size_ids = None;
    let mut workgroup_builtin = None;
    let mut spec_ids: HashMap<u32, u32> = HashMap::new();
    let mut scalars: HashMap<u32, u32> = HashMap::new();
    let mut composites: HashMap<u32, [u32; 3]> = HashMap::new();
    for (op, operands) in instructions(words) {
        match op {
            OP_ENTRY_POINT if operands.len() >= 3 && literal_string(&operands[2..]) == entry => {
                entry_id = Some(operands[1]);
            }
            OP_EXECUTION_MODE | OP_EXECUTION_MODE_ID
                if operands.len() >= 5 && Some(operands[0]) == entry_id =>
            {
                let xyz = [operands[2], operands[3], operands[4]];
                match (op, operands[1]) {
                    (OP_EXECUTION_MODE, MODE_LOCAL_SIZE) => local_size = Some(xyz),
                    (OP_EXECUTION_MODE_ID, MODE_LOCAL_SIZE_ID) => local_size_ids = Some(xyz),
                    _ => {}
                }
            }
            OP_DECORATE if operands.len() >= 3 => match operands[1] {
                DECORATION_SPEC_ID => {
                    spec_ids.insert(operands[0], operands[2]);
                }
                DECORATION_BUILT_IN if operands[2] == BUILT_IN_WORKGROUP_SIZE => {
                    workgroup_builtin = Some(operands[0]);
                }
                _ => {}
            },
            OP_CONSTANT | OP_SPEC_CONSTANT if operands.len() >= 3 => {
                scalars.insert(operands[1], operands[2]);
            }
            OP_CONSTANT_COMPOSITE | OP_SPEC_CONSTANT_COMPOSITE if operands.len() >= 5 => {
                composites.insert(operands[1], [operands[2], operands[3], operands[4]]);
            }
            _ => {}
        }
    }
    let value = |id: u32| -> Option<u32> {
        match spec_ids.get(&id).and_then(|sid| spec.get(sid)) {
            Some(v) => Some(*v),
            None => scalars.get(&id).copied(),
        }
    };
    let from_ids = |ids: [u32; 3]| -> Option<[u32; 3]> {
        Some([value(ids[0])?, value(ids[1])?, value(ids[2])?])
    };
    if let Some(ids) = workgroup_builtin.and_then(|id| composites.get(&id)) {
        return from_ids(*ids);
    }
    if let Some(ids) = local_size_ids {
        return from_ids(ids);
    }
    local_size
}

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
