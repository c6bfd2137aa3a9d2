//! The values of a module's constants: literals, nulls, composites and
//! specialization expressions (`OpSpecConstantOp`), evaluated as SPIR-V
//! defines them. Specialization constants count at the value the module
//! gives them (their default, or the value `rules::freeze` wrote in).
//!
//! Every operation Vulkan allows in `OpSpecConstantOp` (the `Shader`
//! capability's list: integer arithmetic, shifts and bit operations,
//! conversions between integer widths, comparisons, logical operations,
//! `Select`, `VectorShuffle`, `CompositeExtract` and `CompositeInsert`,
//! `QuantizeToF16`), on scalars and component-wise on vectors, at every
//! width up to 64 bits. An expression whose result SPIR-V leaves
//! undefined (a division by zero, the most negative value divided by -1, a
//! shift by the operand's width or more) is an error: drivers and layers
//! fold such expressions and may crash on them (SIGFPE in lavapipe). An
//! operation outside that list (the `Kernel` capability's float
//! arithmetic) leaves its result unknown.

use std::collections::HashMap;

use rspirv::spirv::Op;

use crate::module::Module;
use crate::words::*;

/// The most parts a composite constant may have for its value to be kept:
/// vectors and small arrays (what specialization expressions use); a
/// larger composite is left unknown rather than copied.
const MAX_PARTS: usize = 256;

/// The value of a constant.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// A boolean.
    Bool(bool),
    /// An integer: its bits, zero-extended from `width`, and the type's
    /// signedness.
    Int {
        /// The bits, zero-extended to 64.
        bits: u64,
        /// The type's width.
        width: u32,
        /// The type's signedness.
        signed: bool,
    },
    /// A float of `width` bits (16, 32 or 64): its bits.
    Float {
        /// The bits.
        bits: u64,
        /// The type's width.
        width: u32,
    },
    /// A vector, matrix, array or struct: its parts.
    Composite(Vec<Value>),
}

impl Value {
    /// The value as a count (an array length, an index, a size): an
    /// integer's unsigned bits.
    pub fn as_u64(&self) -> Option<u64> {
        match self {
            Value::Int { bits, .. } => Some(*bits),
            _ => None,
        }
    }

    /// An integer's bits read as a signed value (as SPIR-V's signed
    /// operations read them, whatever the type's signedness).
    fn signed(&self) -> Option<i64> {
        match *self {
            Value::Int { bits, width, .. } => Some(sign_extend(bits, width)),
            _ => None,
        }
    }
}

fn mask(width: u32) -> u64 {
    if width >= 64 {
        u64::MAX
    } else {
        (1u64 << width) - 1
    }
}

/// `bits` of a `width`-bit integer, sign-extended to 64 bits.
pub(crate) fn sign_extend(bits: u64, width: u32) -> i64 {
    let unused = 64 - width.clamp(1, 64);
    ((bits << unused) as i64) >> unused
}

/// What a type is, as far as constants go.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Scalar {
    Bool,
    Int { width: u32, signed: bool },
    Float { width: u32 },
}

impl Scalar {
    fn of(m: &Module, ty: u32) -> Option<Scalar> {
        let g = m.global(ty)?;
        match (g.op, g.operands.as_slice()) {
            (OP_TYPE_BOOL, []) => Some(Scalar::Bool),
            (OP_TYPE_INT, [width, signed]) => Some(Scalar::Int {
                width: *width,
                signed: *signed != 0,
            }),
            (OP_TYPE_FLOAT, [width, ..]) => Some(Scalar::Float { width: *width }),
            _ => None,
        }
    }

    /// The value of literal words `words` of this type.
    fn literal(self, words: &[u32]) -> Option<Value> {
        let bits = match words {
            [low] => u64::from(*low),
            [low, high] => u64::from(*low) | (u64::from(*high) << 32),
            _ => return None,
        };
        Some(match self {
            Scalar::Bool => return None,
            Scalar::Int { width, signed } => Value::Int {
                bits: bits & mask(width),
                width,
                signed,
            },
            Scalar::Float { width } => Value::Float {
                bits: bits & mask(width),
                width,
            },
        })
    }

    fn zero(self) -> Value {
        match self {
            Scalar::Bool => Value::Bool(false),
            Scalar::Int { width, signed } => Value::Int {
                bits: 0,
                width,
                signed,
            },
            Scalar::Float { width } => Value::Float { bits: 0, width },
        }
    }

    /// `value` as a value of this type: integer bits masked to its width
    /// and given its signedness; `None` where the kinds differ.
    fn cast(self, value: Value) -> Option<Value> {
        match (self, value) {
            (Scalar::Bool, Value::Bool(b)) => Some(Value::Bool(b)),
            (Scalar::Int { width, signed }, Value::Int { bits, .. }) => Some(Value::Int {
                bits: bits & mask(width),
                width,
                signed,
            }),
            (Scalar::Float { width }, Value::Float { bits, .. }) => Some(Value::Float {
                bits: bits & mask(width),
                width,
            }),
            _ => None,
        }
    }
}

/// The zero of type `ty` (`OpConstantNull`), where it is small enough to
/// keep.
fn zero(m: &Module, ty: u32, depth: u32) -> Option<Value> {
    if depth > 8 {
        return None;
    }
    if let Some(s) = Scalar::of(m, ty) {
        return Some(s.zero());
    }
    let g = m.global(ty)?;
    let (part, count) = match (g.op, g.operands.as_slice()) {
        (OP_TYPE_VECTOR | OP_TYPE_MATRIX, [part, count]) => (*part, u64::from(*count)),
        (OP_TYPE_ARRAY, [part, length]) => (*part, m.value(*length)?.as_u64()?),
        (OP_TYPE_STRUCT, members) if members.len() <= MAX_PARTS => {
            let parts: Option<Vec<Value>> =
                members.iter().map(|t| zero(m, *t, depth + 1)).collect();
            return parts.map(Value::Composite);
        }
        _ => return None,
    };
    if count > MAX_PARTS as u64 {
        return None;
    }
    let one = zero(m, part, depth + 1)?;
    Some(Value::Composite(vec![one; count as usize]))
}

/// Every constant of `m` whose value is known; the error names the first
/// specialization expression whose result SPIR-V leaves undefined.
pub(crate) fn evaluate(m: &Module) -> Result<HashMap<u32, Value>, String> {
    let mut values: HashMap<u32, Value> = HashMap::new();
    for &id in &m.order {
        let g = &m.globals[&id];
        let value = match (g.op, g.operands.as_slice()) {
            (OP_CONSTANT | OP_SPEC_CONSTANT, literal) => {
                Scalar::of(m, g.ty).and_then(|s| s.literal(literal))
            }
            (OP_CONSTANT_TRUE | OP_SPEC_CONSTANT_TRUE, []) => Some(Value::Bool(true)),
            (OP_CONSTANT_FALSE | OP_SPEC_CONSTANT_FALSE, []) => Some(Value::Bool(false)),
            (OP_CONSTANT_NULL, []) => zero(m, g.ty, 0),
            (OP_CONSTANT_COMPOSITE | OP_SPEC_CONSTANT_COMPOSITE, parts)
                if parts.len() <= MAX_PARTS =>
            {
                let parts: Option<Vec<Value>> =
                    parts.iter().map(|p| values.get(p).cloned()).collect();
                parts.map(Value::Composite)
            }
            (OP_SPEC_CONSTANT_OP, [op, args @ ..]) => {
                let mut m_values = |id: u32| values.get(&id).cloned();
                operation(m, g.ty, *op, args, &mut m_values).map_err(|why| {
                    format!(
                        "specialization constant {} ({}) is undefined: {why}",
                        m.describe(id),
                        op_name(*op)
                    )
                })?
            }
            _ => None,
        };
        if let Some(value) = value {
            values.insert(id, value);
        }
    }
    Ok(values)
}

fn op_name(op: u32) -> String {
    Op::from_u32(op).map_or_else(|| format!("opcode {op}"), |o| format!("{o:?}"))
}

/// The value of specialization operation `op` of result type `ty` on
/// `args`: `Ok(None)` where an argument is unknown or the operation is not
/// one this evaluator knows, `Err` where SPIR-V leaves the result undefined.
fn operation(
    m: &Module,
    ty: u32,
    op: u32,
    args: &[u32],
    value: &mut dyn FnMut(u32) -> Option<Value>,
) -> Result<Option<Value>, String> {
    macro_rules! known {
        ($e:expr) => {
            match $e {
                Some(v) => v,
                None => return Ok(None),
            }
        };
    }
    let Some(op) = Op::from_u32(op) else {
        return Ok(None);
    };
    // The result type: a scalar, or a vector of them.
    let result = result_shape(m, ty);
    match op {
        Op::CompositeExtract => {
            let (first, indices) = known!(args.split_first());
            let mut v = known!(value(*first));
            for &i in indices {
                v = match v {
                    Value::Composite(mut parts) if (i as usize) < parts.len() => {
                        parts.swap_remove(i as usize)
                    }
                    _ => return Ok(None),
                };
            }
            return Ok(Some(v));
        }
        Op::CompositeInsert => {
            let [object, composite, indices @ ..] = args else {
                return Ok(None);
            };
            let object = known!(value(*object));
            let mut whole = known!(value(*composite));
            let mut at = &mut whole;
            for &i in indices {
                at = match at {
                    Value::Composite(parts) => known!(parts.get_mut(i as usize)),
                    _ => return Ok(None),
                };
            }
            *at = object;
            return Ok(Some(whole));
        }
        Op::VectorShuffle => {
            let [a, b, components @ ..] = args else {
                return Ok(None);
            };
            let (Value::Composite(a), Value::Composite(b)) = (known!(value(*a)), known!(value(*b)))
            else {
                return Ok(None);
            };
            let mut out = Vec::with_capacity(components.len());
            for &c in components {
                let c = c as usize;
                // 0xFFFFFFFF (an undefined component) has no value.
                out.push(known!(a.get(c).or_else(|| b.get(c.wrapping_sub(a.len())))).clone());
            }
            return Ok(Some(Value::Composite(out)));
        }
        Op::Select => {
            let [condition, a, b] = args else {
                return Ok(None);
            };
            let (c, a, b) = (
                known!(value(*condition)),
                known!(value(*a)),
                known!(value(*b)),
            );
            return Ok(match (c, a, b) {
                (Value::Bool(c), a, b) => Some(if c { a } else { b }),
                // A vector condition selects each component.
                (Value::Composite(c), Value::Composite(a), Value::Composite(b))
                    if c.len() == a.len() && a.len() == b.len() =>
                {
                    let parts: Option<Vec<Value>> = c
                        .into_iter()
                        .zip(a.into_iter().zip(b))
                        .map(|(c, (a, b))| match c {
                            Value::Bool(c) => Some(if c { a } else { b }),
                            _ => None,
                        })
                        .collect();
                    parts.map(Value::Composite)
                }
                _ => None,
            });
        }
        _ => {}
    }
    let operands: Vec<Value> = {
        let mut out = Vec::with_capacity(args.len());
        for a in args {
            out.push(known!(value(*a)));
        }
        out
    };
    let Some((scalar, count)) = result else {
        return Ok(None);
    };
    // Component-wise over vectors: operand `k`'s component `i`.
    let lanes = |v: &Value| -> Option<Vec<Value>> {
        match (v, count) {
            (Value::Composite(parts), Some(n)) if parts.len() == n => Some(parts.clone()),
            (Value::Composite(_), _) => None,
            (scalar, None) => Some(vec![scalar.clone()]),
            (_, Some(_)) => None,
        }
    };
    let per_lane: Option<Vec<Vec<Value>>> = operands.iter().map(lanes).collect();
    let per_lane = known!(per_lane);
    let n = count.unwrap_or(1);
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let lane: Vec<&Value> = per_lane.iter().map(|v| &v[i]).collect();
        let v = known!(scalar_op(op, scalar, &lane)?);
        out.push(known!(scalar.cast(v)));
    }
    Ok(Some(match count {
        Some(_) => Value::Composite(out),
        None => out.swap_remove(0),
    }))
}

/// A result type: its scalar and, for a vector, its component count.
fn result_shape(m: &Module, ty: u32) -> Option<(Scalar, Option<usize>)> {
    if let Some(s) = Scalar::of(m, ty) {
        return Some((s, None));
    }
    match m.global(ty) {
        Some(g) if g.op == OP_TYPE_VECTOR => {
            let [component, count] = g.operands.as_slice() else {
                return None;
            };
            Some((Scalar::of(m, *component)?, Some(*count as usize)))
        }
        _ => None,
    }
}

/// Operation `op` on one lane of scalar arguments; the result is cast to
/// `result` by the caller.
fn scalar_op(op: Op, result: Scalar, args: &[&Value]) -> Result<Option<Value>, String> {
    let int = |bits: u64| Value::Int {
        bits,
        width: 64,
        signed: false,
    };
    Ok(Some(match (op, args) {
        (Op::LogicalNot, [Value::Bool(a)]) => Value::Bool(!a),
        (Op::LogicalAnd, [Value::Bool(a), Value::Bool(b)]) => Value::Bool(*a && *b),
        (Op::LogicalOr, [Value::Bool(a), Value::Bool(b)]) => Value::Bool(*a || *b),
        (Op::LogicalEqual, [Value::Bool(a), Value::Bool(b)]) => Value::Bool(a == b),
        (Op::LogicalNotEqual, [Value::Bool(a), Value::Bool(b)]) => Value::Bool(a != b),
        (Op::UConvert, [Value::Int { bits, .. }]) => int(*bits),
        (Op::SConvert, [v @ Value::Int { .. }]) => int(v.signed().unwrap_or(0) as u64),
        (Op::SNegate, [Value::Int { bits, .. }]) => int(bits.wrapping_neg()),
        (Op::Not, [Value::Int { bits, .. }]) => int(!bits),
        (Op::QuantizeToF16, [Value::Float { bits, width: 32 }]) => {
            let f = f32::from_bits(*bits as u32);
            Value::Float {
                bits: u64::from(half::f16::from_f32(f).to_f32().to_bits()),
                width: 32,
            }
        }
        (Op::FConvert, [Value::Float { bits, width }]) => {
            let f = match width {
                16 => half::f16::from_bits(*bits as u16).to_f64(),
                32 => f64::from(f32::from_bits(*bits as u32)),
                _ => f64::from_bits(*bits),
            };
            let Scalar::Float { width: to } = result else {
                return Ok(None);
            };
            let bits = match to {
                16 => u64::from(half::f16::from_f64(f).to_bits()),
                32 => u64::from((f as f32).to_bits()),
                _ => f.to_bits(),
            };
            Value::Float { bits, width: to }
        }
        (op, [a @ Value::Int { width, .. }, b @ Value::Int { bits: bb, .. }]) => {
            let Value::Int { bits: ab, .. } = a else {
                return Ok(None);
            };
            let (ab, bb, w) = (*ab, *bb, *width);
            let (sa, sb) = (a.signed().unwrap_or(0), b.signed().unwrap_or(0));
            let divides = matches!(op, Op::UDiv | Op::UMod | Op::SDiv | Op::SRem | Op::SMod);
            if divides && bb == 0 {
                return Err("a division by zero".into());
            }
            let most_negative = sign_extend(1u64 << (w.clamp(1, 64) - 1), w);
            if matches!(op, Op::SDiv | Op::SRem | Op::SMod) && sa == most_negative && sb == -1 {
                return Err(format!("{sa} divided by -1 overflows {w} bits"));
            }
            let shifts = matches!(
                op,
                Op::ShiftLeftLogical | Op::ShiftRightLogical | Op::ShiftRightArithmetic
            );
            if shifts && bb >= u64::from(w) {
                return Err(format!("a shift by {bb} of a {w}-bit value"));
            }
            match op {
                Op::IAdd => int(ab.wrapping_add(bb)),
                Op::ISub => int(ab.wrapping_sub(bb)),
                Op::IMul => int(ab.wrapping_mul(bb)),
                Op::UDiv => int(ab / bb),
                Op::UMod => int(ab % bb),
                Op::SDiv => int(sa.wrapping_div(sb) as u64),
                Op::SRem => int(sa.wrapping_rem(sb) as u64),
                Op::SMod => {
                    let r = sa.wrapping_rem(sb);
                    int(if r != 0 && (r < 0) != (sb < 0) {
                        r.wrapping_add(sb)
                    } else {
                        r
                    } as u64)
                }
                Op::ShiftLeftLogical => int(ab << bb),
                Op::ShiftRightLogical => int(ab >> bb),
                Op::ShiftRightArithmetic => int((sa >> bb) as u64),
                Op::BitwiseAnd => int(ab & bb),
                Op::BitwiseOr => int(ab | bb),
                Op::BitwiseXor => int(ab ^ bb),
                Op::IEqual => Value::Bool(ab == bb),
                Op::INotEqual => Value::Bool(ab != bb),
                Op::ULessThan => Value::Bool(ab < bb),
                Op::ULessThanEqual => Value::Bool(ab <= bb),
                Op::UGreaterThan => Value::Bool(ab > bb),
                Op::UGreaterThanEqual => Value::Bool(ab >= bb),
                Op::SLessThan => Value::Bool(sa < sb),
                Op::SLessThanEqual => Value::Bool(sa <= sb),
                Op::SGreaterThan => Value::Bool(sa > sb),
                Op::SGreaterThanEqual => Value::Bool(sa >= sb),
                _ => return Ok(None),
            }
        }
        _ => return Ok(None),
    }))
}
