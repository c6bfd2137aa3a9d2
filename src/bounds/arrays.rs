//! Runtime-sized arrays of buffers (`buffer B { ... } bufs[];`) given a
//! length: each descriptor variable whose type is a runtime array becomes
//! an array of the length a dispatch binds (`OpTypeRuntimeArray %block`
//! becomes `OpTypeArray %block %n`, with a pointer type of its own), so
//! that the clamping pass bounds its index like any array of fixed length,
//! and the pipeline's set layout has that many descriptors.

use std::collections::HashMap;

use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::{Decoration, Op, StorageClass};

/// Gives every runtime-sized descriptor array of `module` the length
/// `lengths` names for its binding (1 where it names none); returns how
/// many variables changed. `fresh` makes new ids.
pub(super) fn size_runtime_arrays(
    module: &mut Module,
    lengths: &[(u32, u32)],
    fresh: &mut dyn FnMut(&mut Module) -> Result<u32, String>,
) -> Result<usize, String> {
    let mut binding_of = HashMap::new();
    for inst in &module.annotations {
        if let (
            Op::Decorate,
            [Operand::IdRef(id), Operand::Decoration(Decoration::Binding), Operand::LiteralBit32(b)],
        ) = (inst.class.opcode, inst.operands.as_slice())
        {
            binding_of.insert(*id, *b);
        }
    }
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
        return Ok(0);
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
    for (var, class, element) in &todo {
        let n = binding_of
            .get(var)
            .and_then(|b| lengths.iter().find(|(binding, _)| binding == b))
            .map_or(1, |&(_, n)| n);
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
    }
    Ok(todo.len())
}
