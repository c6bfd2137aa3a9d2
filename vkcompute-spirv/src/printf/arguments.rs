//! A printf argument: what the host reads of it (its `ArgType`), and the
//! instructions that turn it into 32-bit words of a record.

use std::collections::HashMap;

use rspirv::dr::{Instruction, Operand};
use rspirv::spirv::Op;

use super::format::{ArgKind, ArgType};
use super::parts::{emit, emit_ids, id, Rewrite};

/// What one argument is and how its words are made.
#[derive(Clone, Copy)]
pub(super) struct Plan {
    pub(super) ty: ArgType,
    /// The argument's scalar: (kind, width in the module).
    pub(super) source_width: u32,
}

/// How an argument of type `ty` is printed, or why it cannot be.
pub(super) fn plan(defs: &HashMap<u32, (Op, Vec<Operand>)>, ty: u32) -> Result<Plan, String> {
    let scalar = |t: u32| -> Result<(ArgKind, u32), String> {
        match defs.get(&t) {
            Some((Op::TypeInt, ops)) => match ops.as_slice() {
                [Operand::LiteralBit32(w), Operand::LiteralBit32(s)] => Ok((
                    if *s != 0 {
                        ArgKind::Signed
                    } else {
                        ArgKind::Unsigned
                    },
                    *w,
                )),
                _ => Err("is an integer of no width".into()),
            },
            Some((Op::TypeFloat, ops)) => match ops.first() {
                Some(Operand::LiteralBit32(w)) => Ok((ArgKind::Float, *w)),
                _ => Err("is a float of no width".into()),
            },
            Some((Op::TypeBool, _)) => {
                Err("is a bool, which printf does not take: pass uint(b)".into())
            }
            _ => Err("is not a number or a vector of numbers".into()),
        }
    };
    let (component, components) = match defs.get(&ty) {
        Some((Op::TypeVector, ops)) => match ops.as_slice() {
            [Operand::IdRef(c), Operand::LiteralBit32(n)] if (2..=4).contains(n) => (*c, *n),
            _ => return Err("is a vector of more than 4 components".into()),
        },
        _ => (ty, 1),
    };
    let (kind, width) = scalar(component)?;
    if !matches!(width, 8 | 16 | 32 | 64) {
        return Err(format!("is {width} bits wide"));
    }
    Ok(Plan {
        ty: ArgType {
            kind,
            width: if width == 64 { 64 } else { 32 },
            components,
        },
        source_width: width,
    })
}

/// Appends to `words` the ids of the 32-bit words of `value`, converting
/// as `plan` says (narrow numbers widened to 32 bits, 64-bit ones split).
pub(super) fn value_words(
    rw: &mut Rewrite<'_>,
    out: &mut Vec<Instruction>,
    value: u32,
    plan: &Plan,
    type_of: &HashMap<u32, u32>,
    words: &mut Vec<u32>,
) -> Result<(), String> {
    let uint = rw.uint;
    let ty = type_of.get(&value).copied().unwrap_or(0);
    let scalar_ty = match rw
        .module
        .types_global_values
        .iter()
        .find(|i| i.result_id == Some(ty))
    {
        Some(i) if i.class.opcode == Op::TypeVector => {
            i.operands.first().and_then(id).unwrap_or(ty)
        }
        _ => ty,
    };
    for c in 0..plan.ty.components {
        let scalar = if plan.ty.components > 1 {
            emit(
                rw,
                out,
                Op::CompositeExtract,
                scalar_ty,
                vec![Operand::IdRef(value), Operand::LiteralBit32(c)],
            )?
        } else {
            value
        };
        match (plan.ty.kind, plan.source_width) {
            (ArgKind::Unsigned, 32) => words.push(scalar),
            (ArgKind::Signed, 32) | (ArgKind::Float, 32) => {
                words.push(emit_ids(rw, out, Op::Bitcast, uint, &[scalar])?)
            }
            (ArgKind::Unsigned, 8 | 16) => {
                words.push(emit_ids(rw, out, Op::UConvert, uint, &[scalar])?)
            }
            // Widened to 32 bits (a signed integer with its sign, a half
            // to a float), then the word's bits.
            (kind @ (ArgKind::Signed | ArgKind::Float), 8 | 16) => {
                let (op, wide_ty) = if kind == ArgKind::Signed {
                    (Op::SConvert, rw.int_type()?)
                } else {
                    (Op::FConvert, rw.float_type()?)
                };
                let wide = emit_ids(rw, out, op, wide_ty, &[scalar])?;
                words.push(emit_ids(rw, out, Op::Bitcast, uint, &[wide])?)
            }
            (_, 64) => {
                let uvec2 = rw.uvec(2)?;
                let pair = emit_ids(rw, out, Op::Bitcast, uvec2, &[scalar])?;
                for half in 0..2 {
                    words.push(emit(
                        rw,
                        out,
                        Op::CompositeExtract,
                        uint,
                        vec![Operand::IdRef(pair), Operand::LiteralBit32(half)],
                    )?);
                }
            }
            (_, w) => return Err(format!("an argument of {w} bits")),
        }
    }
    Ok(())
}
