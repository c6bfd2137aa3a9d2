//! The values of a module's integer and boolean constants, specialization
//! expressions (`OpSpecConstantOp`) included: what array lengths are once
//! the module is specialized.

use std::collections::HashMap;

use rspirv::dr::{Module, Operand};
use rspirv::spirv::Op;

/// An integer or boolean constant's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Value {
    /// The bits, zero-extended from `width`, and the type's signedness.
    Int {
        bits: u64,
        width: u32,
        signed: bool,
    },
    Bool(bool),
}

impl Value {
    /// The value as a count (an array length or an index): integers as
    /// their unsigned bits.
    pub(crate) fn as_u64(self) -> Option<u64> {
        match self {
            Value::Int { bits, .. } => Some(bits),
            Value::Bool(_) => None,
        }
    }
}

/// Integer types by id: (width, signed).
pub(crate) fn int_types(module: &Module) -> HashMap<u32, (u32, bool)> {
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

fn mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// `bits` of a `width`-bit integer, sign-extended to 64 bits.
fn signed(bits: u64, width: u32) -> i64 {
    let unused = 64 - width.clamp(1, 64);
    ((bits << unused) as i64) >> unused
}

/// Every integer and boolean constant of `module` whose value is known,
/// or the first specialization expression whose result SPIR-V leaves
/// undefined (a division by zero, the most negative value divided by -1,
/// a shift by the operand's width or more): drivers and layers fold such
/// expressions and may crash on them (SIGFPE in lavapipe and the layer).
/// Known:
/// literals, nulls, and specialization expressions over known values (the
/// integer and logical operations the `Shader` capability allows, and
/// extraction from constant composites). The module's specialization
/// constants must be frozen first (`spirv_rules::freeze`); those left are
/// taken at their defaults.
pub(crate) fn evaluate(module: &Module) -> Result<HashMap<u32, Value>, String> {
    let ints = int_types(module);
    let bools: Vec<u32> = module
        .types_global_values
        .iter()
        .filter(|i| i.class.opcode == Op::TypeBool)
        .filter_map(|i| i.result_id)
        .collect();
    let mut values: HashMap<u32, Value> = HashMap::new();
    let mut composites: HashMap<u32, Vec<u32>> = HashMap::new();
    for inst in &module.types_global_values {
        let (Some(id), Some(ty)) = (inst.result_id, inst.result_type) else {
            continue;
        };
        let int = |bits: u64| {
            ints.get(&ty).map(|&(width, signed)| Value::Int {
                bits: bits & mask(width),
                width,
                signed,
            })
        };
        let value = match (inst.class.opcode, inst.operands.as_slice()) {
            (Op::Constant | Op::SpecConstant, [Operand::LiteralBit32(v)]) => int(u64::from(*v)),
            (Op::Constant | Op::SpecConstant, [Operand::LiteralBit64(v)]) => int(*v),
            (Op::ConstantTrue | Op::SpecConstantTrue, []) => Some(Value::Bool(true)),
            (Op::ConstantFalse | Op::SpecConstantFalse, []) => Some(Value::Bool(false)),
            (Op::ConstantNull, []) if bools.contains(&ty) => Some(Value::Bool(false)),
            (Op::ConstantNull, []) => int(0),
            (Op::ConstantComposite | Op::SpecConstantComposite, parts) => {
                let ids: Option<Vec<u32>> = parts.iter().map(id_ref).collect();
                if let Some(ids) = ids {
                    composites.insert(id, ids);
                }
                None
            }
            (Op::SpecConstantOp, [Operand::LiteralSpecConstantOpInteger(op), args @ ..]) => {
                operation(*op, args, &values, &composites)
                    .map_err(|why| {
                        format!("specialization constant %{id} ({op:?}) is undefined: {why}")
                    })?
                    .and_then(|v| match v {
                        Value::Int { bits, .. } => int(bits),
                        Value::Bool(b) => bools.contains(&ty).then_some(Value::Bool(b)),
                    })
            }
            _ => None,
        };
        if let Some(value) = value {
            values.insert(id, value);
        }
    }
    Ok(values)
}

fn id_ref(operand: &Operand) -> Option<u32> {
    match operand {
        Operand::IdRef(id) => Some(*id),
        _ => None,
    }
}

/// The value of specialization operation `op` on `args`, where every
/// argument is known and the operation is one this evaluator knows
/// (`Ok(None)` otherwise); `Err` where SPIR-V leaves the result undefined.
/// An integer result carries its bits unmasked: the caller masks them to
/// the result type.
fn operation(
    op: Op,
    args: &[Operand],
    values: &HashMap<u32, Value>,
    composites: &HashMap<u32, Vec<u32>>,
) -> Result<Option<Value>, String> {
    macro_rules! known {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return Ok(None),
            }
        };
    }
    if op == Op::CompositeExtract {
        // A composite, then literal indices.
        let (first, indices) = known!(args.split_first());
        let mut id = known!(id_ref(first));
        for index in indices {
            let Operand::LiteralBit32(i) = index else {
                return Ok(None);
            };
            id = *known!(composites.get(&id).and_then(|c| c.get(*i as usize)));
        }
        return Ok(values.get(&id).copied());
    }
    let known: Option<Vec<Value>> = args
        .iter()
        .map(|a| id_ref(a).and_then(|id| values.get(&id).copied()))
        .collect();
    let known = known!(known);
    let int = |bits: u64| Value::Int {
        bits,
        width: 64,
        signed: false,
    };
    let boolean = Value::Bool;
    Ok(Some(match (op, known.as_slice()) {
        (Op::Select, [Value::Bool(c), a, b]) => {
            if *c {
                *a
            } else {
                *b
            }
        }
        (Op::LogicalNot, [Value::Bool(a)]) => boolean(!a),
        (Op::LogicalAnd, [Value::Bool(a), Value::Bool(b)]) => boolean(*a && *b),
        (Op::LogicalOr, [Value::Bool(a), Value::Bool(b)]) => boolean(*a || *b),
        (Op::LogicalEqual, [Value::Bool(a), Value::Bool(b)]) => boolean(a == b),
        (Op::LogicalNotEqual, [Value::Bool(a), Value::Bool(b)]) => boolean(a != b),
        (Op::UConvert, [Value::Int { bits, .. }]) => int(*bits),
        (Op::SConvert, [Value::Int { bits, width, .. }]) => int(signed(*bits, *width) as u64),
        (Op::SNegate, [Value::Int { bits, .. }]) => int(bits.wrapping_neg()),
        (Op::Not, [Value::Int { bits, .. }]) => int(!bits),
        (
            op,
            [Value::Int {
                bits: a, width: w, ..
            }, Value::Int { bits: b, .. }],
        ) => {
            let (sa, sb) = (signed(*a, *w), signed(*b, *w));
            let divides = matches!(op, Op::UDiv | Op::UMod | Op::SDiv | Op::SRem | Op::SMod);
            if divides && *b == 0 {
                return Err("a division by zero".into());
            }
            let most_negative = signed(1u64 << ((*w).clamp(1, 64) - 1), *w);
            if matches!(op, Op::SDiv | Op::SRem | Op::SMod) && sa == most_negative && sb == -1 {
                return Err(format!("{sa} divided by -1 overflows {w} bits"));
            }
            let shifts = matches!(
                op,
                Op::ShiftLeftLogical | Op::ShiftRightLogical | Op::ShiftRightArithmetic
            );
            if shifts && *b >= u64::from(*w) {
                return Err(format!("a shift by {b} of a {w}-bit value"));
            }
            match op {
                Op::IAdd => int(a.wrapping_add(*b)),
                Op::ISub => int(a.wrapping_sub(*b)),
                Op::IMul => int(a.wrapping_mul(*b)),
                Op::UDiv => int(a / b),
                Op::UMod => int(a % b),
                Op::SDiv => int(sa.wrapping_div(sb) as u64),
                Op::SRem => int(sa.wrapping_rem(sb) as u64),
                Op::SMod => {
                    let r = sa.wrapping_rem(sb);
                    int(if r != 0 && (r < 0) != (sb < 0) {
                        r + sb
                    } else {
                        r
                    } as u64)
                }
                Op::ShiftLeftLogical => int(a << b),
                Op::ShiftRightLogical => int(a >> b),
                Op::ShiftRightArithmetic => int((sa >> b) as u64),
                Op::BitwiseAnd => int(a & b),
                Op::BitwiseOr => int(a | b),
                Op::BitwiseXor => int(a ^ b),
                Op::IEqual => boolean(a == b),
                Op::INotEqual => boolean(a != b),
                Op::ULessThan => boolean(a < b),
                Op::ULessThanEqual => boolean(a <= b),
                Op::UGreaterThan => boolean(a > b),
                Op::UGreaterThanEqual => boolean(a >= b),
                Op::SLessThan => boolean(sa < sb),
                Op::SLessThanEqual => boolean(sa <= sb),
                Op::SGreaterThan => boolean(sa > sb),
                Op::SGreaterThanEqual => boolean(sa >= sb),
                _ => return Ok(None),
            }
        }
        _ => return Ok(None),
    }))
}
