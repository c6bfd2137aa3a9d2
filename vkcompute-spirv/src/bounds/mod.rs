//! Bounds on a kernel's own memory: every module the safe API loads is
//! instrumented, after specialization and before it reaches the driver, so
//! that no index leaves the array, vector or matrix it indexes.
//!
//! `robustBufferAccess` (which every vkcompute device enables) bounds
//! accesses to storage buffers only. Dynamic indices into workgroup,
//! function, private and push-constant arrays, and dynamic vector or matrix
//! components, are undefined behaviour in SPIR-V where they are out of
//! range, and on lavapipe a workgroup index out of range writes outside the
//! driver's allocation. So, as WebGPU implementations do (naga's `Restrict`
//! policy, Tint's robustness transform in its clamp mode), each such index
//! is clamped into range: `index` becomes `UMin(index, length - 1)`,
//! computed on the index's own type, so that a read out of range reads the
//! last element and a write out of range writes it. Negative indices (as
//! signed values) clamp to the last element too.
//!
//! What is clamped: every index of `OpAccessChain` and
//! `OpInBoundsAccessChain` (and the indices after the element of
//! `OpPtrAccessChain`) that steps into an array of fixed length, a vector
//! or a matrix, whatever its storage class, unless it is a constant in
//! range; and the index of `OpVectorExtractDynamic` and
//! `OpVectorInsertDynamic`. Runtime arrays (`T data[]`, the last member of
//! a storage buffer) are left to `robustBufferAccess`, which bounds them to
//! the bound range at no cost here; a runtime-sized array of buffers
//! (`bufs[]`) is first given the length its dispatch binds
//! (`arrays.rs`: one pipeline per length), and then clamped as any array.
//! Array lengths are the specialized ones (the module's specialization
//! constants are frozen first, and specialization expressions evaluated),
//! so a length set by a specialization constant bounds its array at the
//! length the pipeline has.
//!
//! The pass is written on `rspirv`'s data representation (load, edit,
//! assemble) rather than on raw words: inserting instructions and ids into
//! a module by hand means rewriting word counts, the id bound and section
//! order, which `rspirv` keeps right. Non-semantic instructions (debug
//! information, which `rspirv` cannot place in the global section) are
//! stripped first; by definition they do not change what a module does.

mod arrays;
mod clamp;
mod entry;

// The pass's tests validate what it makes: they live with the validator's
// caller, vkcompute's src/spirv_check/bounds_tests.rs.

use std::collections::HashMap;

use rspirv::binary::Assemble;
use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::Op;

use crate::eval::Value;
use crate::interface::Interface;
use crate::words::{
    instructions, literal_string, OP_CAPABILITY, OP_ENTRY_POINT, OP_EXECUTION_MODE,
    OP_EXECUTION_MODE_ID, OP_EXTENSION, OP_EXT_INST, OP_EXT_INST_IMPORT, OP_MEMORY_MODEL,
};

/// A module made ready for the driver, and what it declares.
#[derive(Clone, Debug)]
pub struct Prepared {
    /// The module to create the pipeline from.
    pub words: Vec<u32>,
    /// How many indices were clamped.
    pub clamped: usize,
    /// The interface of its entry point, read from `words`.
    pub interface: Interface,
    /// The runtime-sized arrays of buffers it gave a length: (set,
    /// binding, length).
    pub sized: Vec<(u32, u32, u32)>,
    /// Where its `debugPrintfEXT` calls write, and their formats, where it
    /// has calls (see `printf`): the interface lists the record buffer's
    /// binding among the others.
    pub printf: Option<crate::printf::Printf>,
}

/// Prepares `words` (a module with its specialization constants frozen,
/// `rules::freeze`; `model` its reading) for entry point `entry`: keeps that entry point alone
/// (other entry points, the functions and the variables only they use are
/// taken out), gives each runtime-sized array of buffers the length
/// `lengths` names for its (set, binding) (1 where none), folds the
/// specialization expressions it can evaluate into constants and, where
/// `clamp` is set, bounds its indices. Then reads the result's interface
/// (`Module::interface`): what the driver gets is what is checked. The
/// error says what could not be analysed.
pub fn prepare(
    words: &[u32],
    model: &crate::Module,
    entry: &str,
    clamp: bool,
    lengths: &[(u32, u32, u32)],
) -> Result<Prepared, String> {
    let mut values = model.values.clone();
    let (stripped, changed) = strip_non_semantic(words);
    // rspirv's loader does not place OpExecutionModeId: set aside, and put
    // back after the execution modes once assembled.
    let (stripped, mut modes_by_id) = take_out(&stripped, |op, _| op == OP_EXECUTION_MODE_ID);
    let loaded = std::panic::catch_unwind(|| rspirv::dr::load_words(&stripped));
    let mut module = match loaded {
        Ok(Ok(module)) => module,
        Ok(Err(e)) => return Err(format!("the module could not be parsed: {e}")),
        Err(_) => return Err("the module could not be parsed".into()),
    };
    let sized = arrays::size_runtime_arrays(&mut module, model, lengths, &mut fresh_id)?;
    for s in &sized {
        values.insert(
            s.constant,
            Value::Int {
                bits: u64::from(s.length),
                width: 32,
                signed: false,
            },
        );
    }
    let pruned = entry::keep_only(&mut module, entry, &mut modes_by_id)?;
    let folded = fold(&mut module, &values);
    let clamped = if clamp {
        clamp::Clamp::new(&mut module, &values).run()?
    } else {
        0
    };
    // Printf: after the clamps (its own indices into the record buffer are
    // bounded by construction), into a binding after the kernel's last.
    let prints = module
        .ext_inst_imports
        .iter()
        .any(|i| matches!(i.operands.first(), Some(Operand::LiteralString(s)) if s == PRINTF_SET));
    let printf = if prints {
        let bindings = model.bindings()?;
        let set = bindings.iter().map(|b| b.set).max().unwrap_or(0);
        let binding = bindings
            .iter()
            .filter(|b| b.set == set)
            .map(|b| b.binding + 1)
            .max()
            .unwrap_or(0);
        if binding > crate::interface::MAX_BINDING {
            return Err(format!(
                "the kernel calls debugPrintfEXT, whose record buffer takes the binding after                  the kernel's last in set {set}, and that one is {}, the highest binding                  number vkcompute accepts: number the kernel's bindings lower",
                binding - 1
            ));
        }
        crate::printf::instrument(&mut module, set, binding)?
    } else {
        None
    };
    let words = if clamped > 0 || changed || pruned || folded > 0 || !sized.is_empty() || prints {
        put_back(module.assemble(), &modes_by_id)
    } else {
        words.to_vec()
    };
    let interface = crate::Module::read(&words)?.interface(entry)?;
    Ok(Prepared {
        words,
        clamped,
        interface,
        sized: sized.iter().map(|s| (s.set, s.binding, s.length)).collect(),
        printf,
    })
}

/// A new id of `module` (its bound raised by one).
pub(crate) fn fresh_id(module: &mut Module) -> Result<u32, String> {
    let header = module
        .header
        .as_mut()
        .ok_or_else(|| "the module has no header".to_string())?;
    let id = header.bound;
    header.bound = id
        .checked_add(1)
        .ok_or_else(|| "the module's id bound is exhausted".to_string())?;
    Ok(id)
}

/// Replaces each specialization expression whose value is known by a
/// constant of that value (the module's specialization constants are
/// frozen, so every one over integers and booleans evaluates): the validation layer sizes arrays of
/// constant length only (a push-constant block whose array length is an
/// expression fails VUID-VkComputePipelineCreateInfo-layout-00703).
/// Returns how many were replaced.
fn fold(module: &mut Module, values: &HashMap<u32, Value>) -> usize {
    let ints = int_types(module);
    let mut folded = 0;
    for inst in &mut module.types_global_values {
        if inst.class.opcode != Op::SpecConstantOp {
            continue;
        }
        let (Some(id), Some(ty)) = (inst.result_id, inst.result_type) else {
            continue;
        };
        let replacement = match values.get(&id) {
            Some(Value::Bool(b)) => Instruction::new(
                if *b {
                    Op::ConstantTrue
                } else {
                    Op::ConstantFalse
                },
                Some(ty),
                Some(id),
                vec![],
            ),
            Some(Value::Int { bits, .. }) => {
                let literal = match ints.get(&ty) {
                    Some((width, _)) if *width > 32 => Operand::LiteralBit64(*bits),
                    Some((width, signed)) => Operand::LiteralBit32(crate::rules::literal_word(
                        *bits as u32,
                        *width,
                        *signed,
                    )),
                    None => continue,
                };
                Instruction::new(Op::Constant, Some(ty), Some(id), vec![literal])
            }
            Some(Value::Float { bits, width }) => {
                let literal = if *width > 32 {
                    Operand::LiteralBit64(*bits)
                } else {
                    Operand::LiteralBit32(*bits as u32)
                };
                Instruction::new(Op::Constant, Some(ty), Some(id), vec![literal])
            }
            // A vector or composite result stays an expression, which the
            // driver evaluates as `eval.rs` does.
            Some(Value::Composite(_)) | None => continue,
        };
        *inst = replacement;
        folded += 1;
    }
    folded
}

/// Integer types by id: (width, signed).
fn int_types(module: &Module) -> HashMap<u32, (u32, bool)> {
    module
        .types_global_values
        .iter()
        .filter(|i| i.class.opcode == Op::TypeInt)
        .filter_map(|i| match (i.result_id, i.operands.as_slice()) {
            (Some(id), [Operand::LiteralBit32(w), Operand::LiteralBit32(s)]) => {
                Some((id, (*w, *s != 0)))
            }
            _ => None,
        })
        .collect()
}

/// The opcodes of the sections before and including the execution modes:
/// capabilities, extensions, imports, memory model, entry points, modes.
const PREAMBLE: [u32; 7] = [
    OP_CAPABILITY,
    OP_EXTENSION,
    OP_EXT_INST_IMPORT,
    OP_MEMORY_MODEL,
    OP_ENTRY_POINT,
    OP_EXECUTION_MODE,
    OP_EXECUTION_MODE_ID,
];

/// `words` without the instructions `take` picks (by opcode and
/// operands), and those instructions' words.
fn take_out(words: &[u32], take: impl Fn(u32, &[u32]) -> bool) -> (Vec<u32>, Vec<u32>) {
    let mut kept = words[..5.min(words.len())].to_vec();
    let mut taken = Vec::new();
    let mut at = 5;
    for (opcode, operands) in instructions(words) {
        let inst = &words[at..at + operands.len() + 1];
        if take(opcode, operands) {
            taken.extend_from_slice(inst);
        } else {
            kept.extend_from_slice(inst);
        }
        at += inst.len();
    }
    (kept, taken)
}

/// `words` with the instructions `taken` put back after its execution
/// modes.
fn put_back(mut words: Vec<u32>, taken: &[u32]) -> Vec<u32> {
    if taken.is_empty() {
        return words;
    }
    let mut at = 5;
    for (op, operands) in instructions(&words) {
        if !PREAMBLE.contains(&op) {
            break;
        }
        at += operands.len() + 1;
    }
    words.splice(at..at, taken.iter().copied());
    words
}

/// The instruction set of `debugPrintfEXT`, which the printf pass rewrites.
const PRINTF_SET: &str = "NonSemantic.DebugPrintf";

/// `words` without its non-semantic instruction sets and their
/// instructions (debug information, which rspirv cannot place), and
/// whether there were any; `NonSemantic.DebugPrintf` stays, for the printf
/// pass (its instructions live in functions).
pub fn strip_non_semantic(words: &[u32]) -> (Vec<u32>, bool) {
    let mut sets = Vec::new();
    for (op, operands) in instructions(words) {
        if let (OP_EXT_INST_IMPORT, [id, name @ ..]) = (op, operands) {
            let name = literal_string(name);
            if name.starts_with("NonSemantic.") && name != PRINTF_SET {
                sets.push(*id);
            }
        }
    }
    if sets.is_empty() {
        return (words.to_vec(), false);
    }
    let (kept, _) = take_out(words, |op, operands| match (op, operands) {
        (OP_EXT_INST_IMPORT, [id, ..]) => sets.contains(id),
        (OP_EXT_INST, [_, _, set, ..]) => sets.contains(set),
        _ => false,
    });
    (kept, true)
}
