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
//! the bound range at no cost here; a runtime array of descriptors is
//! refused. Array lengths are the specialized ones (the module's
//! specialization constants are frozen first, and specialization
//! expressions evaluated), so a length set by a specialization constant
//! bounds its array at the length the pipeline has.
//!
//! The pass is written on `rspirv`'s data representation (load, edit,
//! assemble) rather than on raw words: inserting instructions and ids into
//! a module by hand means rewriting word counts, the id bound and section
//! order, which `rspirv` keeps right. Non-semantic instructions (debug
//! information, which `rspirv` cannot place in the global section) are
//! stripped first; by definition they do not change what a module does.

mod constants;
mod workgroup;

// The pass's tests validate what it makes: they live with the validator's
// caller, src/spirv_check/bounds_tests.rs.

use std::collections::HashMap;

use rspirv::binary::Assemble;
use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::Op;

pub(crate) use workgroup::WorkgroupVariable;

/// GLSL.std.450's `UMin`.
const GLSL_UMIN: u32 = 38;

/// A module made ready for the driver.
pub(crate) struct Prepared {
    /// The module to create the pipeline from.
    pub(crate) words: Vec<u32>,
    /// How many indices were clamped.
    pub(crate) clamped: usize,
    /// The workgroup variables entry point `entry` uses, with their sizes.
    pub(crate) workgroup: Vec<WorkgroupVariable>,
}

/// Prepares `words` (a module with its specialization constants frozen)
/// for entry point `entry`: measures its workgroup memory and, where
/// `clamp` is set, bounds its indices. The error says what could not be
/// analysed.
pub(crate) fn prepare(words: &[u32], entry: &str, clamp: bool) -> Result<Prepared, String> {
    let (stripped, changed) = strip_non_semantic(words);
    // rspirv's loader does not place OpExecutionModeId: set aside, and put
    // back after the execution modes once assembled.
    let (stripped, modes_by_id) = take_out(&stripped, OP_EXECUTION_MODE_ID);
    let loaded = std::panic::catch_unwind(|| rspirv::dr::load_words(&stripped));
    let mut module = match loaded {
        Ok(Ok(module)) => module,
        Ok(Err(e)) => return Err(format!("the module could not be parsed: {e}")),
        Err(_) => return Err("the module could not be parsed".into()),
    };
    let values = constants::evaluate(&module);
    let workgroup = workgroup::variables(&module, &values, entry)?;
    let clamped = if clamp {
        Clamp::new(&mut module, &values).run()?
    } else {
        0
    };
    let words = if clamped > 0 || changed {
        put_back(module.assemble(), &modes_by_id)
    } else {
        words.to_vec()
    };
    Ok(Prepared {
        words,
        clamped,
        workgroup,
    })
}

pub(crate) const OP_EXT_INST_IMPORT: u32 = 11;
const OP_EXT_INST: u32 = 12;
pub(crate) const OP_EXECUTION_MODE_ID: u32 = 331;
/// The opcodes of the sections before and including the execution modes:
/// capabilities, extensions, imports, memory model, entry points, modes.
const PREAMBLE: [u32; 7] = [17, 10, 11, 14, 15, 16, OP_EXECUTION_MODE_ID];

/// `words` without its instructions of opcode `op`, and those
/// instructions' words.
fn take_out(words: &[u32], op: u32) -> (Vec<u32>, Vec<u32>) {
    let mut kept = words[..5.min(words.len())].to_vec();
    let mut taken = Vec::new();
    let mut at = 5;
    for (opcode, operands) in crate::reflect::instructions(words) {
        let inst = &words[at..at + operands.len() + 1];
        if opcode == op {
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
    for (op, operands) in crate::reflect::instructions(&words) {
        if !PREAMBLE.contains(&op) {
            break;
        }
        at += operands.len() + 1;
    }
    words.splice(at..at, taken.iter().copied());
    words
}

/// `words` without its non-semantic instruction sets and their
/// instructions, and whether there were any.
pub(crate) fn strip_non_semantic(words: &[u32]) -> (Vec<u32>, bool) {
    let mut sets = Vec::new();
    for (op, operands) in crate::reflect::instructions(words) {
        if let (OP_EXT_INST_IMPORT, [id, name @ ..]) = (op, operands) {
            if crate::reflect::literal_string(name).starts_with("NonSemantic.") {
                sets.push(*id);
            }
        }
    }
    if sets.is_empty() {
        return (words.to_vec(), false);
    }
    let mut out = words[..5].to_vec();
    let mut at = 5;
    for (op, operands) in crate::reflect::instructions(words) {
        let inst = &words[at..at + operands.len() + 1];
        let drop = match (op, operands) {
            (OP_EXT_INST_IMPORT, [id, ..]) => sets.contains(id),
            (OP_EXT_INST, [_, _, set, ..]) => sets.contains(set),
            _ => false,
        };
        if !drop {
            out.extend_from_slice(inst);
        }
        at += inst.len();
    }
    (out, true)
}

/// A type an index can step into.
#[derive(Clone)]
enum Ty {
    Int {
        width: u32,
    },
    /// An array (length from a constant id).
    Array {
        element: u32,
        length: u32,
    },
    /// A vector or matrix: the component or column type and the count.
    Fixed {
        element: u32,
        count: u32,
    },
    Runtime {
        element: u32,
    },
    Struct(Vec<u32>),
    Pointer {
        pointee: u32,
    },
    Other,
}

/// The clamping pass over one module.
struct Clamp<'a> {
    module: &'a mut Module,
    values: &'a HashMap<u32, crate::bounds::constants::Value>,
    types: HashMap<u32, Ty>,
    /// The type of every id that has one.
    type_of: HashMap<u32, u32>,
    /// Constants made for bounds: (type, value) -> id.
    made: HashMap<(u32, u64), u32>,
    glsl: Option<u32>,
    clamped: usize,
    /// The module's global variables.
    variables: Vec<u32>,
}

fn id(operand: &Operand) -> Option<u32> {
    match operand {
        Operand::IdRef(id) => Some(*id),
        _ => None,
    }
}

fn literal(operand: &Operand) -> Option<u32> {
    match operand {
        Operand::LiteralBit32(v) => Some(*v),
        _ => None,
    }
}

impl<'a> Clamp<'a> {
    fn new(
        module: &'a mut Module,
        values: &'a HashMap<u32, crate::bounds::constants::Value>,
    ) -> Clamp<'a> {
        let mut types = HashMap::new();
        for inst in &module.types_global_values {
            let Some(result) = inst.result_id else {
                continue;
            };
            let ops = &inst.operands;
            let ty = match inst.class.opcode {
                Op::TypeInt => ops.first().and_then(literal).map(|width| Ty::Int { width }),
                Op::TypeArray => match (ops.first().and_then(id), ops.get(1).and_then(id)) {
                    (Some(element), Some(length)) => Some(Ty::Array { element, length }),
                    _ => None,
                },
                Op::TypeVector | Op::TypeMatrix => {
                    match (ops.first().and_then(id), ops.get(1).and_then(literal)) {
                        (Some(element), Some(count)) => Some(Ty::Fixed { element, count }),
                        _ => None,
                    }
                }
                Op::TypeRuntimeArray => ops
                    .first()
                    .and_then(id)
                    .map(|element| Ty::Runtime { element }),
                Op::TypeStruct => Some(Ty::Struct(ops.iter().filter_map(id).collect())),
                Op::TypePointer => ops
                    .get(1)
                    .and_then(id)
                    .map(|pointee| Ty::Pointer { pointee }),
                _ => None,
            };
            types.insert(result, ty.unwrap_or(Ty::Other));
        }
        let mut type_of = HashMap::new();
        for inst in module.all_inst_iter() {
            if let (Some(result), Some(ty)) = (inst.result_id, inst.result_type) {
                type_of.insert(result, ty);
            }
        }
        let variables = module
            .types_global_values
            .iter()
            .filter(|i| i.class.opcode == Op::Variable)
            .filter_map(|i| i.result_id)
            .collect();
        let glsl = module.ext_inst_imports.iter().find_map(|i| {
            matches!(i.operands.first(), Some(Operand::LiteralString(s)) if s == "GLSL.std.450")
                .then_some(i.result_id)
                .flatten()
        });
        Clamp {
            module,
            values,
            types,
            type_of,
            made: HashMap::new(),
            glsl,
            clamped: 0,
            variables,
        }
    }

    fn fresh_id(&mut self) -> Result<u32, String> {
        let header = self
            .module
            .header
            .as_mut()
            .ok_or_else(|| "the module has no header".to_string())?;
        let id = header.bound;
        header.bound = id
            .checked_add(1)
            .ok_or_else(|| "the module's id bound is exhausted".to_string())?;
        Ok(id)
    }

    /// Clamps every index that needs it; returns how many.
    fn run(mut self) -> Result<usize, String> {
        let mut functions = std::mem::take(&mut self.module.functions);
        let result = functions.iter_mut().try_for_each(|f| {
            f.blocks.iter_mut().try_for_each(|block| {
                let old = std::mem::take(&mut block.instructions);
                let mut new = Vec::with_capacity(old.len());
                for mut inst in old {
                    self.bound(&mut inst, &mut new)?;
                    new.push(inst);
                }
                block.instructions = new;
                Ok::<(), String>(())
            })
        });
        self.module.functions = functions;
        result?;
        Ok(self.clamped)
    }

    /// Bounds the indices of `inst`, pushing the clamps it needs to `out`.
    fn bound(&mut self, inst: &mut Instruction, out: &mut Vec<Instruction>) -> Result<(), String> {
        let what = inst.result_id.unwrap_or(0);
        match inst.class.opcode {
            Op::AccessChain
            | Op::InBoundsAccessChain
            | Op::PtrAccessChain
            | Op::InBoundsPtrAccessChain => {
                let first = match inst.class.opcode {
                    Op::PtrAccessChain | Op::InBoundsPtrAccessChain => 2,
                    _ => 1,
                };
                let base = inst
                    .operands
                    .first()
                    .and_then(id)
                    .ok_or_else(|| bad(what))?;
                let mut current = self.pointee(base).ok_or_else(|| bad(what))?;
                for (position, operand) in inst.operands.iter_mut().enumerate().skip(first) {
                    let index = id(operand).ok_or_else(|| bad(what))?;
                    current = match self.types.get(&current).cloned() {
                        Some(Ty::Struct(members)) => {
                            let member = self.constant(index).ok_or_else(|| bad(what))?;
                            *usize::try_from(member)
                                .ok()
                                .and_then(|m| members.get(m))
                                .ok_or_else(|| bad(what))?
                        }
                        Some(Ty::Array { element, length }) => {
                            let length = self.constant(length).ok_or_else(|| {
                                format!(
                                    "access chain %{what} indexes an array whose length \
                                     (%{length}) is not a constant vkcompute can evaluate"
                                )
                            })?;
                            *operand = Operand::IdRef(self.clamp(index, length, out)?);
                            element
                        }
                        Some(Ty::Fixed { element, count }) => {
                            *operand = Operand::IdRef(self.clamp(index, u64::from(count), out)?);
                            element
                        }
                        Some(Ty::Runtime { element })
                            if position > first || !self.variables.contains(&base) =>
                        {
                            element
                        }
                        Some(Ty::Runtime { .. }) => {
                            return Err(format!(
                                "access chain %{what} indexes a runtime array of descriptors, \
                                 which vkcompute does not bind"
                            ))
                        }
                        _ => return Err(bad(what)),
                    };
                }
            }
            Op::VectorExtractDynamic | Op::VectorInsertDynamic => {
                let vector = inst
                    .operands
                    .first()
                    .and_then(id)
                    .ok_or_else(|| bad(what))?;
                let count = match self.type_of.get(&vector).and_then(|t| self.types.get(t)) {
                    Some(Ty::Fixed { count, .. }) => *count,
                    _ => return Err(bad(what)),
                };
                let last = inst.operands.last_mut().ok_or_else(|| bad(what))?;
                let index = id(last).ok_or_else(|| bad(what))?;
                *last = Operand::IdRef(self.clamp(index, u64::from(count), out)?);
            }
            _ => {}
        }
        Ok(())
    }

    /// The type a pointer id points to.
    fn pointee(&self, pointer: u32) -> Option<u32> {
        match self.types.get(self.type_of.get(&pointer)?)? {
            Ty::Pointer { pointee } => Some(*pointee),
            _ => None,
        }
    }

    fn constant(&self, id: u32) -> Option<u64> {
        self.values.get(&id).and_then(|v| v.as_u64())
    }

    /// `index` bounded to `0..length`: itself where it is a constant in
    /// range, else a new `UMin(index, length - 1)` pushed to `out`.
    fn clamp(
        &mut self,
        index: u32,
        length: u64,
        out: &mut Vec<Instruction>,
    ) -> Result<u32, String> {
        if length == 0 {
            return Err("an array has length 0".into());
        }
        if self.constant(index).is_some_and(|i| i < length) {
            return Ok(index);
        }
        let ty = *self
            .type_of
            .get(&index)
            .ok_or_else(|| format!("index %{index} has no type"))?;
        let Some(Ty::Int { width }) = self.types.get(&ty).cloned() else {
            return Err(format!("index %{index} is not an integer"));
        };
        // Below the largest value the index's type holds as a signed
        // integer, so that either reading of it is in range.
        let largest = (1u64 << (width.clamp(2, 64) - 1)) - 1;
        let max = self.make_constant(ty, width, (length - 1).min(largest))?;
        let glsl = self.glsl()?;
        let result = self.fresh_id()?;
        out.push(Instruction::new(
            Op::ExtInst,
            Some(ty),
            Some(result),
            vec![
                Operand::IdRef(glsl),
                Operand::LiteralExtInstInteger(GLSL_UMIN),
                Operand::IdRef(index),
                Operand::IdRef(max),
            ],
        ));
        self.type_of.insert(result, ty);
        self.clamped += 1;
        Ok(result)
    }

    /// A constant of integer type `ty` with value `value`.
    fn make_constant(&mut self, ty: u32, width: u32, value: u64) -> Result<u32, String> {
        if let Some(&made) = self.made.get(&(ty, value)) {
            return Ok(made);
        }
        let result = self.fresh_id()?;
        let literal = if width > 32 {
            Operand::LiteralBit64(value)
        } else {
            Operand::LiteralBit32(value as u32)
        };
        self.module.types_global_values.push(Instruction::new(
            Op::Constant,
            Some(ty),
            Some(result),
            vec![literal],
        ));
        self.type_of.insert(result, ty);
        self.made.insert((ty, value), result);
        Ok(result)
    }

    /// The id of the module's GLSL.std.450 import, added where it has none.
    fn glsl(&mut self) -> Result<u32, String> {
        if let Some(glsl) = self.glsl {
            return Ok(glsl);
        }
        let result = self.fresh_id()?;
        self.module.ext_inst_imports.push(Instruction::new(
            Op::ExtInstImport,
            None,
            Some(result),
            vec![Operand::LiteralString("GLSL.std.450".into())],
        ));
        self.glsl = Some(result);
        Ok(result)
    }
}

fn bad(id: u32) -> String {
    format!("the indices of %{id} do not follow the type it indexes")
}
