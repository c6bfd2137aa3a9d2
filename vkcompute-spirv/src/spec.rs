//! Values for specialization constants, checked against what a module
//! declares.

use crate::interface::{SpecConstant, SpecKind};

/// A value for a specialization constant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SpecValue {
    /// A `bool` constant (4 bytes in SPIR-V).
    Bool(bool),
    /// A 32-bit unsigned constant.
    U32(u32),
    /// A 32-bit signed constant.
    I32(i32),
    /// A 32-bit float constant.
    F32(f32),
    /// A 64-bit unsigned constant.
    U64(u64),
    /// A 64-bit signed constant.
    I64(i64),
    /// A 64-bit float constant.
    F64(f64),
}

impl SpecValue {
    /// Its bytes as `VkSpecializationInfo` carries them (little-endian; a
    /// `bool` as a 32-bit 0 or 1).
    pub fn bytes(self) -> Vec<u8> {
        match self {
            SpecValue::Bool(b) => u32::from(b).to_le_bytes().to_vec(),
            SpecValue::U32(v) => v.to_le_bytes().to_vec(),
            SpecValue::I32(v) => v.to_le_bytes().to_vec(),
            SpecValue::F32(v) => v.to_le_bytes().to_vec(),
            SpecValue::U64(v) => v.to_le_bytes().to_vec(),
            SpecValue::I64(v) => v.to_le_bytes().to_vec(),
            SpecValue::F64(v) => v.to_le_bytes().to_vec(),
        }
    }

    /// How it is written in messages: `U32(8)`, `F64(2.5)`.
    fn kind_name(self) -> &'static str {
        match self {
            SpecValue::Bool(_) => "a bool",
            SpecValue::U32(_) | SpecValue::I32(_) => "a 32-bit integer",
            SpecValue::F32(_) => "a 32-bit float",
            SpecValue::U64(_) | SpecValue::I64(_) => "a 64-bit integer",
            SpecValue::F64(_) => "a 64-bit float",
        }
    }

    /// Checks that it can set `constant`: a `bool` for a `bool`, an
    /// integer of the constant's width (of either signedness, whose bits
    /// are taken as they are) for an integer, a float of its width for a
    /// float. The error says what the constant is and what was given.
    pub fn check(self, constant: &SpecConstant) -> Result<(), String> {
        // A narrow integer takes a 32-bit value that fits its width.
        let fits_width = |v: i64, width: u32, signed: bool| {
            if signed {
                let half = 1i64 << (width - 1);
                (-half..half).contains(&v)
            } else {
                (0..(1i64 << width)).contains(&v)
            }
        };
        let fits = match (constant.kind, self) {
            (SpecKind::Bool, SpecValue::Bool(_)) => true,
            (SpecKind::Int { width: 32, .. }, SpecValue::U32(_) | SpecValue::I32(_)) => true,
            (SpecKind::Int { width, signed }, SpecValue::U32(v)) if width < 32 => {
                fits_width(i64::from(v), width, signed)
            }
            (SpecKind::Int { width, signed }, SpecValue::I32(v)) if width < 32 => {
                fits_width(i64::from(v), width, signed)
            }
            (SpecKind::Int { width: 64, .. }, SpecValue::U64(_) | SpecValue::I64(_)) => true,
            (SpecKind::Float { width: 32 }, SpecValue::F32(_)) => true,
            (SpecKind::Float { width: 64 }, SpecValue::F64(_)) => true,
            _ => false,
        };
        if fits {
            return Ok(());
        }
        let declared = match constant.kind {
            SpecKind::Bool => "a bool".to_string(),
            SpecKind::Int { width, signed } => {
                format!(
                    "a {width}-bit {} integer",
                    if signed { "signed" } else { "unsigned" }
                )
            }
            SpecKind::Float { width } => format!("a {width}-bit float"),
        };
        let name = constant
            .name
            .as_deref()
            .map_or_else(String::new, |n| format!(" (`{n}`)"));
        let hint = match constant.kind {
            SpecKind::Float { width: 16 } => "; no SpecValue sets a 16-bit float",
            SpecKind::Int { width, .. } if width < 32 => "; the value must fit its width",
            _ => "",
        };
        Err(format!(
            "it is declared {declared}{name}, {} bytes wide, but {} was given ({self:?}){hint}",
            constant.size,
            self.kind_name()
        ))
    }
}

macro_rules! spec_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for SpecValue {
            fn from(v: $t) -> Self {
                SpecValue::$v(v)
            }
        }
    )*};
}
spec_from!(bool => Bool, u32 => U32, i32 => I32, f32 => F32, u64 => U64, i64 => I64, f64 => F64);
