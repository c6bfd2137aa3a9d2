//! Runtime-sized arrays of buffers (`buffer B { ... } bufs[];`) given a
//! length: each descriptor variable whose type is a runtime array becomes
//! an array of the length a dispatch binds (`OpTypeRuntimeArray %block`
//! becomes `OpTypeArray %block %n`, with a pointer type of its own), so
//! that the clamping pass bounds its index like any array of fixed length,
//! and the pipeline's set layout has that many descriptors.

use std::collections::HashMap;

use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::{Op, StorageClass};

/// One runtime-sized array of buffers given a length.
pub(super) struct Sized {
    pub(super) set: u32,
    pub(super) binding: u32,
    pub(super) length: u32,
    /// The id of the constant made for the length.
    pub(super) constant: u32,
}

/// Gives every runtime-sized descriptor array of `module` the length
/// `lengths` names for its (set, binding) (1 where it names none); returns
/// what changed. `fresh` makes new ids. The set and binding come from
/// `model`, the module's reading (decoration groups applied).
pub(super) fn size_runtime_arrays(
    module: &mut Module,
    model: &crate::Module,
    lengths: &[(u32, u32, u32)],
    fresh: &mut dyn FnMut(&mut Module) -> Result<u32, String>,
) -> Result<Vec<Sized>, String> {
    use crate::words::{DECORATION_BINDING, DECORATION_DESCRIPTOR_SET};
    let opcode_of: HashMap<u32, (Op, Vec<Operand>)> = module
        .types_global_values
        .iter()
        .filter_map(|i| Some((i.result_id?, (i.class.opcode, i.operands.clone()))))
        .collect();
    // (variable, storage class, element type of its runtime array)
    let mut todo = Vec::new();
    for inst in &module.types_global_values {
        let (Op::Variable, Some(var), Some(ptr)) =
            (inst.class.opcode, inst.result_id, inst.result_type)
        else {
            continue;
        };
        let Some(&StorageClass::StorageBuffer | &StorageClass::Uniform) =
            inst.operands.first().and_then(|o| match o {
                Operand::StorageClass(c) => Some(c),
                _ => None,
            })
        else {
            continue;
        };
        let Some((Op::TypePointer, ops)) = opcode_of.get(&ptr) else {
            continue;
        };
        let (Some(Operand::StorageClass(class)), Some(Operand::IdRef(pointee))) =
            (ops.first(), ops.get(1))
        else {
            continue;
        };
        if let Some((Op::TypeRuntimeArray, arr)) = opcode_of.get(pointee) {
            if let Some(Operand::IdRef(element)) = arr.first() {
                todo.push((var, *class, *element));
            }
        }
    }
    if todo.is_empty() {
        return Ok(Vec::new());
    }
    let uint = match module.types_global_values.iter().find(|i| {
        i.class.opcode == Op::TypeInt
            && i.operands == [Operand::LiteralBit32(32), Operand::LiteralBit32(0)]
    }) {
        Some(i) => i.result_id.ok_or("an OpTypeInt without a result id")?,
        None => {
            let id = fresh(module)?;
            let ty = Instruction::new(
                Op::TypeInt,
                None,
                Some(id),
                vec![Operand::LiteralBit32(32), Operand::LiteralBit32(0)],
            );
            // Before every other type: it depends on nothing.
            module.types_global_values.insert(0, ty);
            id
        }
    };
    let mut sized = Vec::with_capacity(todo.len());
    for (var, class, element) in &todo {
        let set = model
            .decoration_value(*var, DECORATION_DESCRIPTOR_SET)
            .unwrap_or(0);
        let binding = model
            .decoration_value(*var, DECORATION_BINDING)
            .unwrap_or(0);
        let n = lengths
            .iter()
            .find(|(s, b, _)| (*s, *b) == (set, binding))
            .map_or(1, |&(_, _, n)| n);
        let (len, array, pointer) = (fresh(module)?, fresh(module)?, fresh(module)?);
        let made = [
            Instruction::new(
                Op::Constant,
                Some(uint),
                Some(len),
                vec![Operand::LiteralBit32(n)],
            ),
            Instruction::new(
                Op::TypeArray,
                None,
                Some(array),
                vec![Operand::IdRef(*element), Operand::IdRef(len)],
            ),
            Instruction::new(
                Op::TypePointer,
                None,
                Some(pointer),
                vec![Operand::StorageClass(*class), Operand::IdRef(array)],
            ),
        ];
        let at = module
            .types_global_values
            .iter()
            .position(|i| i.result_id == Some(*var))
            .ok_or("a descriptor variable went missing")?;
        module.types_global_values[at].result_type = Some(pointer);
        module.types_global_values.splice(at..at, made);
        sized.push(Sized {
            set,
            binding,
            length: n,
            constant: len,
        });
    }
    Ok(sized)
}
