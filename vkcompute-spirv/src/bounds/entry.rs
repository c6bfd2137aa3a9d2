//! The module as one entry point sees it: other entry points, the
//! functions only they call, and the global variables no function left
//! refers to (workgroup, private, push-constant, input and output) are
//! taken out. What reaches the driver then declares the workgroup memory
//! and the one push-constant block of this kernel alone: the validation
//! layer counts every workgroup variable of a module against
//! `maxComputeSharedMemorySize`, and a second entry point's push-constant
//! block left in the module crashed it. Descriptor variables stay: they
//! are the kernel's arguments, whichever function uses them.

use std::collections::HashSet;

use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::{ExecutionModel, Op, StorageClass};

fn ids(inst: &Instruction) -> impl Iterator<Item = u32> + '_ {
    inst.result_type
        .into_iter()
        .chain(inst.operands.iter().filter_map(|o| match o {
            Operand::IdRef(id) => Some(*id),
            _ => None,
        }))
}

/// The storage classes whose unreferenced variables are taken out.
const PRUNED: [StorageClass; 5] = [
    StorageClass::Workgroup,
    StorageClass::Private,
    StorageClass::PushConstant,
    StorageClass::Input,
    StorageClass::Output,
];

/// Keeps compute entry point `entry` of `module` alone (see the module
/// documentation), and the `OpExecutionModeId` instructions of
/// `modes_by_id` (words set aside, since rspirv does not place them) that
/// name its function; whether anything was taken out.
pub(super) fn keep_only(
    module: &mut Module,
    entry: &str,
    modes_by_id: &mut Vec<u32>,
) -> Result<bool, String> {
    let kept = module
        .entry_points
        .iter()
        .find_map(|e| match e.operands.as_slice() {
            [Operand::ExecutionModel(ExecutionModel::GLCompute), Operand::IdRef(f), Operand::LiteralString(name), ..]
                if name == entry =>
            {
                Some(*f)
            }
            _ => None,
        })
        .ok_or_else(|| format!("it has no compute entry point `{entry}`"))?;
    let mut changed = false;
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
    let before = module.entry_points.len();
    module.entry_points.retain(|e| {
        matches!(e.operands.as_slice(),
            [Operand::ExecutionModel(ExecutionModel::GLCompute), Operand::IdRef(f), Operand::LiteralString(name), ..]
                if *f == kept && name == entry)
    });
    changed |= module.entry_points.len() != before;
    let before = module.execution_modes.len();
    module
        .execution_modes
        .retain(|m| matches!(m.operands.first(), Some(Operand::IdRef(f)) if *f == kept));
    changed |= module.execution_modes.len() != before;
    let mut removed: HashSet<u32> = HashSet::new();
    // What the functions taken out refer to: another entry point's
    // variables.
    let theirs: HashSet<u32> = module
        .functions
        .iter()
        .filter(|f| !reachable.contains(&f.def.as_ref().and_then(|d| d.result_id).unwrap_or(0)))
        .flat_map(|f| f.all_inst_iter())
        .flat_map(ids)
        .collect();
    module.functions.retain(|f| {
        let id = f.def.as_ref().and_then(|d| d.result_id).unwrap_or(0);
        let keep = reachable.contains(&id);
        if !keep {
            removed.insert(id);
        }
        keep
    });
    // Variables nothing left refers to (the entry point's interface list
    // does not count: it only lists them). A push-constant block no
    // function uses stays where the kernel has no other: it is what the
    // caller passes push constants for, used or not; one that another
    // entry point uses, or beside the kernel's own, goes.
    let used: HashSet<u32> = module
        .functions
        .iter()
        .flat_map(|f| f.all_inst_iter())
        .chain(&module.types_global_values)
        .flat_map(ids)
        .collect();
    let is_push = |inst: &Instruction| {
        inst.class.opcode == Op::Variable
            && inst.operands.first() == Some(&Operand::StorageClass(StorageClass::PushConstant))
    };
    let own_push = module
        .types_global_values
        .iter()
        .any(|i| is_push(i) && i.result_id.is_some_and(|id| used.contains(&id)));
    module.types_global_values.retain(|inst| {
        let prunable = inst.class.opcode == Op::Variable
            && matches!(inst.operands.first(), Some(Operand::StorageClass(c)) if PRUNED.contains(c));
        let id = inst.result_id.unwrap_or(0);
        let kept_push = is_push(inst) && !own_push && !theirs.contains(&id);
        if prunable && !used.contains(&id) && !kept_push {
            removed.insert(id);
            return false;
        }
        true
    });
    if removed.is_empty() {
        filter_modes(modes_by_id, kept, &mut changed);
        return Ok(changed);
    }
    changed = true;
    for e in &mut module.entry_points {
        e.operands
            .retain(|o| !matches!(o, Operand::IdRef(id) if removed.contains(id)));
    }
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
    filter_modes(modes_by_id, kept, &mut changed);
    Ok(changed)
}

/// Keeps the `OpExecutionModeId` instructions of `words` (instructions
/// without a header) that name function `kept`.
fn filter_modes(words: &mut Vec<u32>, kept: u32, changed: &mut bool) {
    let mut out = Vec::with_capacity(words.len());
    let mut at = 0;
    while at < words.len() {
        let count = ((words[at] >> 16) as usize).max(1).min(words.len() - at);
        let inst = &words[at..at + count];
        if inst.get(1) == Some(&kept) {
            out.extend_from_slice(inst);
        } else {
            *changed = true;
        }
        at += count;
    }
    *words = out;
}
