//! What a module uses that loading must check against the device: its
//! capabilities, extensions and feature-dependent constructs, and any way
//! it addresses memory through pointers.

use std::collections::{HashMap, HashSet};

use crate::words::*;
use crate::FloatAtomicOp;

/// Instructions whose result (type operand 0, id operand 1) may be a
/// pointer: OpUndef, OpConstantNull, OpFunctionParameter, OpFunctionCall,
/// OpVariable, OpLoad, OpAccessChain, OpInBoundsAccessChain,
/// OpPtrAccessChain, OpInBoundsPtrAccessChain, OpCompositeExtract,
/// OpCopyObject, OpSelect, OpPhi.
const POINTER_RESULTS: &[u32] = &[1, 46, 55, 57, 59, 61, 65, 66, 67, 70, 81, 83, 169, 245];

/// The storage classes that are not pointer addressing: UniformConstant (0,
/// images and samplers) and Image (11, texel pointers) are descriptors,
/// which reflection refuses by their type (vkcompute binds no images: the
/// error should say so, not speak of pointers); Input (1) holds the compute
/// built-ins; Uniform (2) is where SPIR-V before 1.3 puts storage buffers
/// (`BufferBlock`); Workgroup (4), Private (6), Function (7), PushConstant
/// (9) and StorageBuffer (12).
pub const SAFE_STORAGE_CLASSES: &[u32] = &[0, 1, 2, 4, 6, 7, 9, 11, 12];

fn storage_class_name(class: u32) -> String {
    match class {
        3 => "Output".into(),
        5 => "CrossWorkgroup".into(),
        8 => "Generic".into(),
        10 => "AtomicCounter".into(),
        5349 => "PhysicalStorageBuffer".into(),
        other => format!("storage class {other}"),
    }
}

/// What a module declares that loading must check against the device.
#[derive(Debug, Default)]
pub struct ModuleUse {
    /// Its `OpCapability` operands.
    pub capabilities: Vec<u32>,
    /// Its `OpExtension` names.
    pub extensions: Vec<String>,
    /// Whether it declares a Workgroup variable with an initializer.
    pub initialized_workgroup: bool,
    /// Whether it uses the `LocalSizeId` execution mode.
    pub local_size_id: bool,
    /// Whether it has 64-bit integer atomics on memory other than
    /// Workgroup (buffers).
    pub int64_atomics_buffer: bool,
    /// Whether it has 64-bit integer atomics on Workgroup memory.
    pub int64_atomics_shared: bool,
    /// Its float atomics: (width, what it does, whether on Workgroup
    /// memory), each once.
    pub float_atomics: Vec<(u32, FloatAtomicOp, bool)>,
    /// Its execution modes with one literal operand (mode, operand): the
    /// float-controls modes name a float width.
    pub float_modes: Vec<(u32, u32)>,
    /// How it addresses memory through pointers, where it does: the first
    /// construct found, named.
    pub pointers: Option<String>,
}

/// Reads the capabilities of `words` and looks for any way of addressing
/// memory through pointers, which the safe API cannot bound: the
/// `PhysicalStorageBufferAddresses` or `VariablePointers*` capabilities,
/// an addressing model other than `Logical`, integer/pointer conversions,
/// bitcasts to or from pointers, and storage classes outside
/// [`SAFE_STORAGE_CLASSES`].
pub fn module_use(words: &[u32]) -> ModuleUse {
    let mut found = ModuleUse::default();
    let mut pointer_types: HashSet<u32> = HashSet::new();
    let mut pointer_ids: HashSet<u32> = HashSet::new();
    // For 64-bit atomics: the 64-bit integer types, each pointer type's
    // (storage class, pointee), and each pointer value's type.
    let mut int64_types: HashSet<u32> = HashSet::new();
    let mut float_types: HashMap<u32, u32> = HashMap::new();
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
            let target = pointer_value_types
                .get(&pointer)
                .and_then(|t| pointee.get(t));
            if let Some((class, ty)) = target {
                if let Some(&width) = float_types.get(ty) {
                    let what = match op {
                        OP_ATOMIC_FADD => FloatAtomicOp::Add,
                        OP_ATOMIC_FMIN | OP_ATOMIC_FMAX => FloatAtomicOp::MinMax,
                        _ => FloatAtomicOp::Exchange,
                    };
                    let atomic = (width, what, *class == STORAGE_CLASS_WORKGROUP);
                    if !found.float_atomics.contains(&atomic) {
                        found.float_atomics.push(atomic);
                    }
                }
            }
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
            OP_TYPE_FLOAT if operands.len() >= 2 => {
                float_types.insert(operands[0], operands[1]);
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
        227..=242 | OP_ATOMIC_FADD | OP_ATOMIC_FMIN | OP_ATOMIC_FMAX => operands.get(2).copied(),
        _ => None,
    }
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
    fn a_module_without_pointers_has_none() {
        assert_eq!(found(&[]), None);
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
