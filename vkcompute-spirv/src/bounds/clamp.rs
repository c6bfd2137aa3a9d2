//! The clamping pass: each dynamic index into an array of fixed length,
//! a vector or a matrix becomes `UMin(index, length - 1)` (see the module
//! documentation of `bounds`).

use std::collections::HashMap;

use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::Op;

use crate::eval::Value;
use crate::words::GLSL_UMIN;

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
pub(super) struct Clamp<'a> {
    module: &'a mut Module,
    values: &'a HashMap<u32, Value>,
    types: HashMap<u32, Ty>,
    /// The type of every id that has one.
    type_of: HashMap<u32, u32>,
    /// Constants made for bounds: (type, value) -> id.
    made: HashMap<(u32, u64), u32>,
    glsl: Option<u32>,
    clamped: usize,
    /// The module's global variables.
    variables: std::collections::HashSet<u32>,
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
    pub(super) fn new(module: &'a mut Module, values: &'a HashMap<u32, Value>) -> Clamp<'a> {
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
        super::fresh_id(self.module)
    }

    /// Clamps every index that needs it; returns how many.
    pub(super) fn run(mut self) -> Result<usize, String> {
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
        // A narrow index (8 or 16 bits) is widened to 32 bits first, zero
        // extended: the unsigned reading, what GLSL's uint8_t/uint16_t
        // indices mean, reaches every element of an array longer than the
        // type's signed range.
        let (index, ty, width) = if width < 32 {
            let wide = self.uint32()?;
            let widened = self.fresh_id()?;
            out.push(Instruction::new(
                Op::UConvert,
                Some(wide),
                Some(widened),
                vec![Operand::IdRef(index)],
            ));
            self.type_of.insert(widened, wide);
            (widened, wide, 32)
        } else {
            (index, ty, width)
        };
        // Below the largest value the index's type holds as a signed
        // integer, so that either reading of it is in range.
        let largest = (1u64 << (width - 1)) - 1;
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

    /// The module's 32-bit unsigned integer type, declared where it has none.
    fn uint32(&mut self) -> Result<u32, String> {
        let found = self.module.types_global_values.iter().find_map(|i| {
            (i.class.opcode == Op::TypeInt
                && i.operands == [Operand::LiteralBit32(32), Operand::LiteralBit32(0)])
            .then_some(i.result_id)
            .flatten()
        });
        if let Some(id) = found {
            return Ok(id);
        }
        let result = self.fresh_id()?;
        // Types come before the constants and variables that use them: the
        // new type goes first in the section.
        self.module.types_global_values.insert(
            0,
            Instruction::new(
                Op::TypeInt,
                None,
                Some(result),
                vec![Operand::LiteralBit32(32), Operand::LiteralBit32(0)],
            ),
        );
        self.types.insert(result, Ty::Int { width: 32 });
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
