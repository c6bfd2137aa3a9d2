//! What a compute module declares: its storage-buffer bindings, push-constant
//! size, workgroup size and specialization constants, read with `spirq`.
//!
//! The workgroup size is read here directly from the words, since it can
//! come from three places: `LocalSize`, `LocalSizeId`, or a constant
//! decorated `BuiltIn WorkgroupSize` (what glslang emits for
//! `local_size_x_id`), whose parts may be specialization constants.
#![deny(unsafe_code)]

use std::collections::{HashMap, HashSet};

use spirq::ty::{AccessType, DescriptorType, Type};
use spirq::var::Variable;
use spirq::ReflectConfig;

/// The largest binding number a kernel may use: drivers size descriptor
/// set layouts by the largest binding (lavapipe runs out of memory on one
/// near `u32::MAX`).
const MAX_BINDING: u32 = 4095;

/// The SPIR-V magic number, first word of every module.
pub(crate) const MAGIC: u32 = 0x0723_0203;

/// One storage-buffer binding of a kernel: one argument of a dispatch.
///
/// Several variables may be declared on one binding (a buffer loaded at
/// different widths, such as `float data[]` and `vec4 data4[]`); they are
/// one argument, and [`aliases`](Self::aliases) lists each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingInfo {
    /// The binding number (in descriptor set 0).
    pub binding: u32,
    /// The name of the binding's first variable, where the module keeps names.
    pub name: Option<String>,
    /// Whether the kernel only reads the buffer (`readonly` in GLSL): true
    /// only where every alias is read-only.
    pub read_only: bool,
    /// The array stride of the buffer's runtime array, where its block is
    /// one runtime array and every alias that has one agrees on it: the
    /// element size arguments must have. `None` where aliases differ (see
    /// [`aliases`](Self::aliases)).
    pub element_stride: Option<u32>,
    /// Every variable declared on this binding, in declaration order (one
    /// for most kernels).
    pub aliases: Vec<BindingAlias>,
}

/// One variable declared on a storage-buffer binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingAlias {
    /// The variable's name, where the module keeps names.
    pub name: Option<String>,
    /// Whether the kernel only reads the buffer through this variable.
    pub read_only: bool,
    /// The array stride of its runtime array, where its block is one
    /// runtime array.
    pub element_stride: Option<u32>,
}

impl BindingInfo {
    /// Whether a buffer of `element_size`-byte elements and `byte_len`
    /// bytes may bind here: its element size is the stride of some alias,
    /// or its byte length is a whole number of elements of every alias.
    /// `Err` carries the strides the binding's aliases declare.
    pub(crate) fn accepts(&self, element_size: usize, byte_len: u64) -> Result<(), Vec<u32>> {
        let strides: Vec<u32> = self
            .aliases
            .iter()
            .filter_map(|a| a.element_stride)
            .collect();
        if strides.is_empty()
            || strides.iter().any(|&s| s as usize == element_size)
            || (strides.len() > 1 && strides.iter().all(|&s| byte_len % u64::from(s) == 0))
        {
            Ok(())
        } else {
            Err(strides)
        }
    }
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
                let alias = BindingAlias {
                    name: name.clone(),
                    read_only: *access == AccessType::ReadOnly,
                    element_stride: runtime_array_stride(ty),
                };
                match bindings
                    .iter_mut()
                    .find(|b: &&mut BindingInfo| b.binding == desc_bind.bind())
                {
                    Some(b) => b.aliases.push(alias),
                    None => bindings.push(BindingInfo {
                        binding: desc_bind.bind(),
                        name: name.clone(),
                        read_only: true,
                        element_stride: None,
                        aliases: vec![alias],
                    }),
                }
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
    for b in &mut bindings {
        b.read_only = b.aliases.iter().all(|a| a.read_only);
        let mut strides = b.aliases.iter().filter_map(|a| a.element_stride);
        let first = strides.next();
        b.element_stride = first.filter(|s| strides.all(|t| t == *s));
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

const OP_CAPABILITY: u32 = 17;
const OP_EXTENSION: u32 = 10;
const OP_TYPE_INT: u32 = 21;
const STORAGE_CLASS_WORKGROUP: u32 = 4;
const OP_MEMORY_MODEL: u32 = 14;
const OP_TYPE_POINTER: u32 = 32;
const OP_TYPE_FORWARD_POINTER: u32 = 39;
const OP_VARIABLE: u32 = 59;
const OP_CONVERT_PTR_TO_U: u32 = 117;
const OP_CONVERT_U_TO_PTR: u32 = 120;
const OP_PTR_CAST_TO_GENERIC: u32 = 121;
const OP_GENERIC_CAST_TO_PTR: u32 = 122;
const OP_GENERIC_CAST_TO_PTR_EXPLICIT: u32 = 123;
const OP_BITCAST: u32 = 124;
const OP_SPEC_CONSTANT_OP: u32 = 52;
/// Instructions whose result (type operand 0, id operand 1) may be a
/// pointer: OpUndef, OpConstantNull, OpFunctionParameter, OpFunctionCall,
/// OpVariable, OpLoad, OpAccessChain, OpInBoundsAccessChain,
/// OpPtrAccessChain, OpInBoundsPtrAccessChain, OpCompositeExtract,
/// OpCopyObject, OpSelect, OpPhi.
const POINTER_RESULTS: &[u32] = &[1, 46, 55, 57, 59, 61, 65, 66, 67, 70, 81, 83, 169, 245];
const ADDRESSING_LOGICAL: u32 = 0;

/// The storage classes a kernel of the safe API may use: UniformConstant
/// (0) is absent since vkcompute binds no images or samplers; Input (1)
/// holds the compute built-ins; Uniform (2) is where SPIR-V before 1.3
/// puts storage buffers (`BufferBlock`); Workgroup (4), Private (6),
/// Function (7), PushConstant (9) and StorageBuffer (12).
const SAFE_STORAGE_CLASSES: &[u32] = &[1, 2, 4, 6, 7, 9, 12];

fn storage_class_name(class: u32) -> String {
    match class {
        0 => "UniformConstant".into(),
        3 => "Output".into(),
        5 => "CrossWorkgroup".into(),
        8 => "Generic".into(),
        10 => "AtomicCounter".into(),
        11 => "Image".into(),
        5349 => "PhysicalStorageBuffer".into(),
        other => format!("storage class {other}"),
    }
}

/// What a module declares that loading must check against the device.
#[derive(Debug, Default)]
pub(crate) struct ModuleUse {
    /// Its `OpCapability` operands.
    pub(crate) capabilities: Vec<u32>,
    /// Its `OpExtension` names.
    pub(crate) extensions: Vec<String>,
    /// Whether it declares a Workgroup variable with an initializer.
    pub(crate) initialized_workgroup: bool,
    /// Whether it uses the `LocalSizeId` execution mode.
    pub(crate) local_size_id: bool,
    /// Whether it has 64-bit integer atomics on memory other than
    /// Workgroup (buffers), and on Workgroup memory.
    pub(crate) int64_atomics_buffer: bool,
    pub(crate) int64_atomics_shared: bool,
    /// Its execution modes with one literal operand (mode, operand): the
    /// float-controls modes name a float width.
    pub(crate) float_modes: Vec<(u32, u32)>,
    /// How it addresses memory through pointers, where it does: the first
    /// construct found, named.
    pub(crate) pointers: Option<String>,
}

/// Reads the capabilities of `words` and looks for any way of addressing
/// memory through pointers, which the safe API cannot bound: the
/// `PhysicalStorageBufferAddresses` or `VariablePointers*` capabilities,
/// an addressing model other than `Logical`, integer/pointer conversions,
/// bitcasts to or from pointers, and storage classes outside
/// [`SAFE_STORAGE_CLASSES`].
pub(crate) fn module_use(words: &[u32]) -> ModuleUse {
    let mut found = ModuleUse::default();
    let mut pointer_types: HashSet<u32> = HashSet::new();
    let mut pointer_ids: HashSet<u32> = HashSet::new();
    // For 64-bit atomics: the 64-bit integer types, each pointer type's
    // (storage class, pointee), and each pointer value's type.
    let mut int64_types: HashSet<u32> = HashSet::new();
    let mut pointee: HashMap<u32, (u32, u32)> = HashMap::new();
    let mut pointer_value_types: HashMap<u32, u32> = HashMap::new();
    let note = |found: &mut ModuleUse, what: String| {
        found.pointers.get_or_insert(what);
    };
    for (op, operands) in instructions(words) {
        if POINTER_RESULTS.contains(&op)
            && operands.len() >= 2
            && pointer_types.contains(&operands[0])
        {
            pointer_ids.insert(operands[1]);
            pointer_value_types.insert(operands[1], operands[0]);
        }
        if let Some(pointer) = atomic_pointer(op, operands) {
            let class = pointer_value_types
                .get(&pointer)
                .and_then(|t| pointee.get(t))
                .filter(|(_, target)| int64_types.contains(target))
                .map(|(class, _)| *class);
            match class {
                Some(STORAGE_CLASS_WORKGROUP) => found.int64_atomics_shared = true,
                Some(_) => found.int64_atomics_buffer = true,
                None => {}
            }
        }
        match op {
            OP_TYPE_INT if operands.len() >= 2 && operands[1] == 64 => {
                int64_types.insert(operands[0]);
            }
            OP_CAPABILITY if !operands.is_empty() => {
                let capability = operands[0];
                found.capabilities.push(capability);
                let name = match capability {
                    4 => Some("Addresses"),
                    4441 => Some("VariablePointersStorageBuffer"),
                    4442 => Some("VariablePointers"),
                    5347 => Some("PhysicalStorageBufferAddresses"),
                    _ => None,
                };
                if let Some(name) = name {
                    note(&mut found, format!("the {name} capability"));
                }
            }
            OP_MEMORY_MODEL if !operands.is_empty() && operands[0] != ADDRESSING_LOGICAL => {
                let model = match operands[0] {
                    1 => "Physical32".to_string(),
                    2 => "Physical64".to_string(),
                    5348 => "PhysicalStorageBuffer64".to_string(),
                    other => format!("{other}"),
                };
                note(&mut found, format!("the {model} addressing model"));
            }
            OP_TYPE_POINTER | OP_TYPE_FORWARD_POINTER if operands.len() >= 2 => {
                pointer_types.insert(operands[0]);
                if let Some(&target) = operands.get(2) {
                    pointee.insert(operands[0], (operands[1], target));
                }
                if !SAFE_STORAGE_CLASSES.contains(&operands[1]) {
                    note(
                        &mut found,
                        format!(
                            "a pointer into the {} storage class",
                            storage_class_name(operands[1])
                        ),
                    );
                }
            }
            OP_EXTENSION => found.extensions.push(literal_string(operands)),
            OP_EXECUTION_MODE if operands.len() == 3 => {
                found.float_modes.push((operands[1], operands[2]));
            }
            OP_EXECUTION_MODE_ID if operands.len() >= 2 && operands[1] == MODE_LOCAL_SIZE_ID => {
                found.local_size_id = true;
            }
            OP_VARIABLE if operands.len() >= 4 && operands[2] == STORAGE_CLASS_WORKGROUP => {
                found.initialized_workgroup = true;
            }
            OP_VARIABLE if operands.len() >= 3 && !SAFE_STORAGE_CLASSES.contains(&operands[2]) => {
                note(
                    &mut found,
                    format!(
                        "a variable in the {} storage class",
                        storage_class_name(operands[2])
                    ),
                );
            }
            OP_CONVERT_PTR_TO_U => note(&mut found, "OpConvertPtrToU".into()),
            OP_CONVERT_U_TO_PTR => note(&mut found, "OpConvertUToPtr".into()),
            OP_PTR_CAST_TO_GENERIC | OP_GENERIC_CAST_TO_PTR | OP_GENERIC_CAST_TO_PTR_EXPLICIT => {
                note(
                    &mut found,
                    "a cast between generic and typed pointers".into(),
                )
            }
            OP_BITCAST
                if operands.len() >= 3
                    && (pointer_types.contains(&operands[0])
                        || pointer_ids.contains(&operands[2])) =>
            {
                note(
                    &mut found,
                    "an OpBitcast between a pointer and a value".into(),
                )
            }
            // A conversion folded into a specialization constant.
            OP_SPEC_CONSTANT_OP
                if operands.len() >= 3
                    && (matches!(operands[2], OP_CONVERT_PTR_TO_U | OP_CONVERT_U_TO_PTR)
                        || (operands[2] == OP_BITCAST && pointer_types.contains(&operands[0]))) =>
            {
                note(
                    &mut found,
                    "a pointer conversion in OpSpecConstantOp".into(),
                )
            }
            _ => {}
        }
    }
    found
}

/// The pointer operand of an atomic instruction (OpAtomicLoad 227 to
/// OpAtomicXor 242; OpAtomicStore, 228, has no result).
fn atomic_pointer(op: u32, operands: &[u32]) -> Option<u32> {
    match op {
        228 => operands.first().copied(),
        227..=242 => operands.get(2).copied(),
        _ => None,
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Instructions as (opcode, operands).
    type Instructions<'a> = &'a [(u32, &'a [u32])];

    /// A module header followed by `instructions` (opcode, operands); only
    /// the scan of [`module_use`] reads it, so it need not be valid.
    fn module(instructions: Instructions<'_>) -> Vec<u32> {
        let mut words = vec![MAGIC, 0x0001_0500, 0, 100, 0];
        for (op, operands) in instructions {
            words.push(((operands.len() as u32 + 1) << 16) | op);
            words.extend_from_slice(operands);
        }
        words
    }

    /// `OpCapability Shader`, `OpMemoryModel Logical GLSL450`, a uint type
    /// (%1) and a StorageBuffer pointer to it (%2).
    const SAFE_PRELUDE: Instructions<'static> = &[
        (OP_CAPABILITY, &[1]),
        (OP_MEMORY_MODEL, &[ADDRESSING_LOGICAL, 1]),
        (21, &[1, 32, 0]),
        (OP_TYPE_POINTER, &[2, 12, 1]),
        (OP_VARIABLE, &[2, 3, 12]),
    ];

    fn found(extra: Instructions<'_>) -> Option<String> {
        let mut all = SAFE_PRELUDE.to_vec();
        all.extend_from_slice(extra);
        module_use(&module(&all)).pointers
    }

    #[test]
    fn the_shipped_kernels_address_no_memory_through_pointers() {
        for (name, words) in [
            ("saxpy", crate::shaders::SAXPY),
            ("vector_add", crate::shaders::VECTOR_ADD),
            ("reduce_sum", crate::shaders::REDUCE_SUM),
            ("store", crate::shaders::STORE),
            ("fill", crate::shaders::FILL),
        ] {
            assert_eq!(module_use(words).pointers, None, "{name}");
        }
        assert_eq!(found(&[]), None);
    }

    #[cfg(feature = "glsl")]
    #[test]
    fn sixty_four_bit_atomics_are_told_apart_by_the_memory_they_use() {
        let kernel = |body: &str| {
            let source = format!(
                "#version 450\n#extension GL_EXT_shader_atomic_int64 : require\n\
                 #extension GL_EXT_shader_explicit_arithmetic_types_int64 : require\n\
                 layout(local_size_x = 8) in;\n\
                 layout(std430, binding = 0) buffer B {{ uint64_t b[8]; uint c[8]; }};\n\
                 shared uint64_t s[8];\nshared uint t[8];\n\
                 void main() {{ uint i = gl_LocalInvocationID.x; {body} }}\n"
            );
            let words = crate::shader_build::compile_glsl(&source, "atomics.comp", "main").unwrap();
            let found = module_use(&words);
            (found.int64_atomics_buffer, found.int64_atomics_shared)
        };
        assert_eq!(kernel("atomicAdd(b[i], 1ul);"), (true, false));
        assert_eq!(
            kernel("s[i] = 0ul; barrier(); atomicAdd(s[i], 1ul); b[i] = s[i];"),
            (false, true)
        );
        assert_eq!(
            kernel("t[i] = 0u; barrier(); atomicAdd(t[i], 1u); c[i] = atomicAdd(c[i], t[i]);"),
            (false, false)
        );
    }

    #[test]
    fn each_way_of_addressing_memory_through_pointers_is_found() {
        let cases: &[(Instructions<'_>, &str)] = &[
            (
                &[(OP_CAPABILITY, &[5347])],
                "PhysicalStorageBufferAddresses",
            ),
            (&[(OP_CAPABILITY, &[4442])], "VariablePointers"),
            (&[(OP_CAPABILITY, &[4441])], "VariablePointersStorageBuffer"),
            (&[(OP_MEMORY_MODEL, &[5348, 3])], "PhysicalStorageBuffer64"),
            (&[(OP_MEMORY_MODEL, &[2, 1])], "Physical64"),
            (&[(OP_TYPE_POINTER, &[9, 5349, 1])], "PhysicalStorageBuffer"),
            (
                &[(OP_TYPE_FORWARD_POINTER, &[9, 5349])],
                "PhysicalStorageBuffer",
            ),
            (&[(OP_VARIABLE, &[2, 9, 5])], "CrossWorkgroup"),
            (&[(OP_CONVERT_U_TO_PTR, &[2, 9, 4])], "OpConvertUToPtr"),
            (&[(OP_CONVERT_PTR_TO_U, &[1, 9, 3])], "OpConvertPtrToU"),
            (&[(OP_GENERIC_CAST_TO_PTR, &[2, 9, 3])], "generic"),
            // To a pointer type, and from a pointer (the variable %3).
            (&[(OP_BITCAST, &[2, 9, 4])], "OpBitcast"),
            (&[(OP_BITCAST, &[1, 9, 3])], "OpBitcast"),
            (
                &[(OP_SPEC_CONSTANT_OP, &[2, 9, OP_CONVERT_U_TO_PTR, 4])],
                "OpSpecConstantOp",
            ),
        ];
        for (extra, name) in cases {
            let what = found(extra).unwrap_or_else(|| panic!("{name} was not found"));
            assert!(what.contains(name), "{name}: found {what:?}");
        }
        // A bitcast between plain values is no pointer use.
        assert_eq!(found(&[(OP_BITCAST, &[1, 9, 4])]), None);
    }
}
