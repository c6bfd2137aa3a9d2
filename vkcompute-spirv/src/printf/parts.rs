//! What the printf rewriting adds to a module: the types and constants it
//! needs (found where the module declares them, since SPIR-V forbids a
//! second declaration of most types), the record buffer, the global
//! invocation id, and the instructions it emits.

use std::collections::HashMap;

use rspirv::dr::{Instruction, Module, Operand};
use rspirv::spirv::{BuiltIn, Decoration, Op, StorageClass};

/// The rewriting's state: the module and the ids it made or found.
pub(super) struct Rewrite<'m> {
    pub(super) module: &'m mut Module,
    pub(super) made_constants: HashMap<u32, u32>,
    pub(super) uint: u32,
    pub(super) bool_: Option<u32>,
    pub(super) int: Option<u32>,
    pub(super) float: Option<u32>,
    pub(super) uvec2: Option<u32>,
    pub(super) uvec3: Option<u32>,
    pub(super) uvec4: Option<u32>,
}

pub(super) fn id(o: &Operand) -> Option<u32> {
    match o {
        Operand::IdRef(i) => Some(*i),
        _ => None,
    }
}

impl Rewrite<'_> {
    pub(super) fn fresh(&mut self) -> Result<u32, String> {
        crate::bounds::fresh_id(self.module)
    }

    /// A type made of `op` and `operands`: the module's where it has one
    /// (SPIR-V forbids declaring a non-aggregate type twice), else a new
    /// one at the end of the global section.
    fn find_or_make_type(&mut self, op: Op, operands: Vec<Operand>) -> Result<u32, String> {
        if let Some(found) = self
            .module
            .types_global_values
            .iter()
            .find(|i| i.class.opcode == op && i.operands == operands)
            .and_then(|i| i.result_id)
        {
            return Ok(found);
        }
        let result = self.fresh()?;
        self.module
            .types_global_values
            .push(Instruction::new(op, None, Some(result), operands));
        Ok(result)
    }

    pub(super) fn constant(&mut self, value: u32) -> Result<u32, String> {
        if let Some(&c) = self.made_constants.get(&value) {
            return Ok(c);
        }
        let result = self.fresh()?;
        self.module.types_global_values.push(Instruction::new(
            Op::Constant,
            Some(self.uint),
            Some(result),
            vec![Operand::LiteralBit32(value)],
        ));
        self.made_constants.insert(value, result);
        Ok(result)
    }

    pub(super) fn bool_type(&mut self) -> Result<u32, String> {
        if let Some(t) = self.bool_ {
            return Ok(t);
        }
        let t = self.find_or_make_type(Op::TypeBool, vec![])?;
        self.bool_ = Some(t);
        Ok(t)
    }

    pub(super) fn int_type(&mut self) -> Result<u32, String> {
        if let Some(t) = self.int {
            return Ok(t);
        }
        let t = self.find_or_make_type(
            Op::TypeInt,
            vec![Operand::LiteralBit32(32), Operand::LiteralBit32(1)],
        )?;
        self.int = Some(t);
        Ok(t)
    }

    pub(super) fn float_type(&mut self) -> Result<u32, String> {
        if let Some(t) = self.float {
            return Ok(t);
        }
        let t = self.find_or_make_type(Op::TypeFloat, vec![Operand::LiteralBit32(32)])?;
        self.float = Some(t);
        Ok(t)
    }

    /// The vector of `n` (2 to 4) 32-bit unsigned integers.
    pub(super) fn uvec(&mut self, n: u32) -> Result<u32, String> {
        let cached = match n {
            2 => self.uvec2,
            3 => self.uvec3,
            _ => self.uvec4,
        };
        if let Some(t) = cached {
            return Ok(t);
        }
        let t = self.find_or_make_type(
            Op::TypeVector,
            vec![Operand::IdRef(self.uint), Operand::LiteralBit32(n)],
        )?;
        match n {
            2 => self.uvec2 = Some(t),
            3 => self.uvec3 = Some(t),
            _ => self.uvec4 = Some(t),
        }
        Ok(t)
    }
}

/// Appends an instruction of `op` with a new result of type `ty` to `out`;
/// the result.
pub(super) fn emit(
    rw: &mut Rewrite<'_>,
    out: &mut Vec<Instruction>,
    op: Op,
    ty: u32,
    operands: Vec<Operand>,
) -> Result<u32, String> {
    let result = rw.fresh()?;
    out.push(Instruction::new(op, Some(ty), Some(result), operands));
    Ok(result)
}

/// [`emit`] of an instruction whose operands are all the ids `ids`.
pub(super) fn emit_ids(
    rw: &mut Rewrite<'_>,
    out: &mut Vec<Instruction>,
    op: Op,
    ty: u32,
    ids: &[u32],
) -> Result<u32, String> {
    emit(
        rw,
        out,
        op,
        ty,
        ids.iter().map(|&i| Operand::IdRef(i)).collect(),
    )
}

/// The record buffer: its variable, and the pointer types to a word of
/// its header and to a `uvec4` of its slots.
pub(super) struct Buffer {
    pub(super) variable: u32,
    pub(super) word_pointer: u32,
    pub(super) unit_pointer: u32,
}

/// Declares the record buffer at (`set`, `binding`): a block of four
/// words and a runtime array of `uvec4`s, a storage buffer (`Uniform` with
/// `BufferBlock` before SPIR-V 1.3).
pub(super) fn declare_buffer(
    rw: &mut Rewrite<'_>,
    version: (u8, u8),
    set: u32,
    binding: u32,
) -> Result<Buffer, String> {
    let uint = rw.uint;
    let uvec4 = rw.uvec(4)?;
    let modern = version >= (1, 3);
    let class = if modern {
        StorageClass::StorageBuffer
    } else {
        StorageClass::Uniform
    };
    let units = rw.fresh()?;
    let block = rw.fresh()?;
    let pointer = rw.fresh()?;
    let word_pointer = rw.fresh()?;
    let unit_pointer = rw.fresh()?;
    let variable = rw.fresh()?;
    let m = &mut *rw.module;
    m.types_global_values.extend([
        Instruction::new(
            Op::TypeRuntimeArray,
            None,
            Some(units),
            vec![Operand::IdRef(uvec4)],
        ),
        Instruction::new(
            Op::TypeStruct,
            None,
            Some(block),
            vec![Operand::IdRef(uint); 4]
                .into_iter()
                .chain([Operand::IdRef(units)])
                .collect(),
        ),
        Instruction::new(
            Op::TypePointer,
            None,
            Some(pointer),
            vec![Operand::StorageClass(class), Operand::IdRef(block)],
        ),
        Instruction::new(
            Op::TypePointer,
            None,
            Some(word_pointer),
            vec![Operand::StorageClass(class), Operand::IdRef(uint)],
        ),
        Instruction::new(
            Op::TypePointer,
            None,
            Some(unit_pointer),
            vec![Operand::StorageClass(class), Operand::IdRef(uvec4)],
        ),
        Instruction::new(
            Op::Variable,
            Some(pointer),
            Some(variable),
            vec![Operand::StorageClass(class)],
        ),
    ]);
    let decorate = |target: u32, d: Decoration, value: Option<u32>| {
        let mut ops = vec![Operand::IdRef(target), Operand::Decoration(d)];
        ops.extend(value.map(Operand::LiteralBit32));
        Instruction::new(Op::Decorate, None, None, ops)
    };
    m.annotations
        .push(decorate(units, Decoration::ArrayStride, Some(16)));
    for member in 0..5u32 {
        m.annotations.push(Instruction::new(
            Op::MemberDecorate,
            None,
            None,
            vec![
                Operand::IdRef(block),
                Operand::LiteralBit32(member),
                Operand::Decoration(Decoration::Offset),
                Operand::LiteralBit32(4 * member),
            ],
        ));
    }
    m.annotations.push(decorate(
        block,
        if modern {
            Decoration::Block
        } else {
            Decoration::BufferBlock
        },
        None,
    ));
    m.annotations
        .push(decorate(variable, Decoration::DescriptorSet, Some(set)));
    m.annotations
        .push(decorate(variable, Decoration::Binding, Some(binding)));
    m.debug_names.push(Instruction::new(
        Op::Name,
        None,
        None,
        vec![
            Operand::IdRef(variable),
            Operand::LiteralString("vkcompute_printf".into()),
        ],
    ));
    // From SPIR-V 1.4 an entry point lists every global variable it uses.
    if version >= (1, 4) {
        for e in &mut m.entry_points {
            e.operands.push(Operand::IdRef(variable));
        }
    }
    Ok(Buffer {
        variable,
        word_pointer,
        unit_pointer,
    })
}

/// The module's `GlobalInvocationId` input, declared where it has none.
pub(super) fn global_invocation_id(rw: &mut Rewrite<'_>) -> Result<u32, String> {
    let found = rw.module.annotations.iter().find_map(|a| {
        match (a.class.opcode, a.operands.as_slice()) {
            (Op::Decorate, [Operand::IdRef(t), Operand::Decoration(Decoration::BuiltIn), Operand::BuiltIn(BuiltIn::GlobalInvocationId)]) => Some(*t),
            _ => None,
        }
    });
    if let Some(variable) = found {
        return Ok(variable);
    }
    let uvec3 = rw.uvec(3)?;
    let pointer = rw.fresh()?;
    let variable = rw.fresh()?;
    let m = &mut *rw.module;
    m.types_global_values.extend([
        Instruction::new(
            Op::TypePointer,
            None,
            Some(pointer),
            vec![
                Operand::StorageClass(StorageClass::Input),
                Operand::IdRef(uvec3),
            ],
        ),
        Instruction::new(
            Op::Variable,
            Some(pointer),
            Some(variable),
            vec![Operand::StorageClass(StorageClass::Input)],
        ),
    ]);
    m.annotations.push(Instruction::new(
        Op::Decorate,
        None,
        None,
        vec![
            Operand::IdRef(variable),
            Operand::Decoration(Decoration::BuiltIn),
            Operand::BuiltIn(BuiltIn::GlobalInvocationId),
        ],
    ));
    // Input variables are in every version's interface list.
    for e in &mut m.entry_points {
        e.operands.push(Operand::IdRef(variable));
    }
    Ok(variable)
}

/// Takes out the `NonSemantic.DebugPrintf` import, and the extension for
/// non-semantic instructions where no other such import is left.
pub(super) fn remove_import(module: &mut Module, printf_set: u32) {
    module
        .ext_inst_imports
        .retain(|i| i.result_id != Some(printf_set));
    let other = module.ext_inst_imports.iter().any(|i| {
        matches!(i.operands.first(), Some(Operand::LiteralString(s)) if s.starts_with("NonSemantic."))
    });
    if !other {
        module.extensions.retain(|e| {
            !matches!(e.operands.first(), Some(Operand::LiteralString(s)) if s == "SPV_KHR_non_semantic_info")
        });
    }
}
