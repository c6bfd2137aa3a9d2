//! The module as one entry point sees it: other entry points, the
//! functions only they call and the workgroup variables only they use are
//! taken out, so that what reaches the driver holds the workgroup memory
//! of this kernel alone (the validation layer counts every workgroup
//! variable of a module against `maxComputeSharedMemorySize`).

use std::collections::HashSet;

use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::{Op, StorageClass};

fn ids(inst: &Instruction) -> impl Iterator<Item = u32> + '_ {
    inst.result_type
        .into_iter()
        .chain(inst.operands.iter().filter_map(|o| match o {
            Operand::IdRef(id) => Some(*id),
            _ => None,
        }))
}

/// Keeps entry point `entry` of `module` alone; whether anything was taken
/// out.
pub(super) fn keep_only(module: &mut Module, entry: &str) -> bool {
    if module.entry_points.len() < 2 {
        return false;
    }
    let kept = module
        .entry_points
        .iter()
        .find_map(|e| match e.operands.as_slice() {
            [_, Operand::IdRef(f), Operand::LiteralString(name), ..] if name == entry => Some(*f),
            _ => None,
        });
    let Some(kept) = kept else {
        return false;
    };
    // The functions the entry point calls, directly or not.
    let mut reachable = HashSet::from([kept]);
    let mut todo = vec![kept];
    while let Some(f) = todo.pop() {
        let Some(function) = module
            .functions
            .iter()
            .find(|func| func.def.as_ref().and_then(|d| d.result_id) == Some(f))
        else {
            continue;
        };
        for inst in function.all_inst_iter() {
            if let (Op::FunctionCall, Some(Operand::IdRef(callee))) =
                (inst.class.opcode, inst.operands.first())
            {
                if reachable.insert(*callee) {
                    todo.push(*callee);
                }
            }
        }
    }
    let mut removed: HashSet<u32> = HashSet::new();
    module
        .entry_points
        .retain(|e| matches!(e.operands.get(1), Some(Operand::IdRef(f)) if *f == kept));
    module
        .execution_modes
        .retain(|m| matches!(m.operands.first(), Some(Operand::IdRef(f)) if *f == kept));
    module.functions.retain(|f| {
        let id = f.def.as_ref().and_then(|d| d.result_id).unwrap_or(0);
        let keep = reachable.contains(&id);
        if !keep {
            removed.insert(id);
        }
        keep
    });
    // Workgroup variables nothing left refers to.
    let used: HashSet<u32> = module
        .functions
        .iter()
        .flat_map(|f| f.all_inst_iter())
        .chain(&module.entry_points)
        .chain(&module.types_global_values)
        .flat_map(ids)
        .collect();
    module.types_global_values.retain(|inst| {
        let workgroup = inst.class.opcode == Op::Variable
            && inst.operands.first() == Some(&Operand::StorageClass(StorageClass::Workgroup));
        let id = inst.result_id.unwrap_or(0);
        if workgroup && !used.contains(&id) {
            removed.insert(id);
            return false;
        }
        true
    });
    // Names and decorations of what is gone.
    let targets_removed = |inst: &Instruction| matches!(inst.operands.first(), Some(Operand::IdRef(id)) if removed.contains(id));
    module.debug_names.retain(|i| !targets_removed(i));
    module.annotations.retain(|i| !targets_removed(i));
    for inst in &mut module.annotations {
        if inst.class.opcode == Op::GroupDecorate {
            inst.operands
                .retain(|o| !matches!(o, Operand::IdRef(id) if removed.contains(id)));
        }
    }
    module
        .annotations
        .retain(|i| i.class.opcode != Op::GroupDecorate || i.operands.len() > 1);
    true
}
