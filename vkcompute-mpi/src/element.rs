//! The element types that travel between ranks, those that can be reduced,
//! and the reductions.

use bytemuck::Pod;

mod sealed {
    pub trait Sealed {}
}

/// An element type's identity on the wire: the same number on every rank
/// whatever the program, so that the header of a message can say what it
/// carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ElementType {
    /// `u8`.
    U8,
    /// `i8`.
    I8,
    /// `u16`.
    U16,
    /// `i16`.
    I16,
    /// `half::f16`.
    F16,
    /// `half::bf16`.
    Bf16,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
    /// `i32`.
    I32,
    /// `u32`.
    U32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
}

impl ElementType {
    /// The number that stands for the type in a header.
    pub(crate) fn code(self) -> u32 {
        match self {
            ElementType::U8 => 1,
            ElementType::I8 => 2,
            ElementType::U16 => 3,
            ElementType::I16 => 4,
            ElementType::F16 => 5,
            ElementType::Bf16 => 6,
            ElementType::F32 => 7,
            ElementType::F64 => 8,
            ElementType::I32 => 9,
            ElementType::U32 => 10,
            ElementType::I64 => 11,
            ElementType::U64 => 12,
        }
    }

    /// The type a header's number stands for.
    pub(crate) fn from_code(code: u32) -> Option<ElementType> {
        ElementType::ALL.into_iter().find(|t| t.code() == code)
    }

    const ALL: [ElementType; 12] = [
        ElementType::U8,
        ElementType::I8,
        ElementType::U16,
        ElementType::I16,
        ElementType::F16,
        ElementType::Bf16,
        ElementType::F32,
        ElementType::F64,
        ElementType::I32,
        ElementType::U32,
        ElementType::I64,
        ElementType::U64,
    ];

    /// The type's name in messages (`f32`, `u64`...).
    pub fn name(self) -> &'static str {
        match self {
            ElementType::U8 => "u8",
            ElementType::I8 => "i8",
            ElementType::U16 => "u16",
            ElementType::I16 => "i16",
            ElementType::F16 => "f16",
            ElementType::Bf16 => "bf16",
            ElementType::F32 => "f32",
            ElementType::F64 => "f64",
            ElementType::I32 => "i32",
            ElementType::U32 => "u32",
            ElementType::I64 => "i64",
            ElementType::U64 => "u64",
        }
    }

    /// The size of one element in bytes.
    pub fn size(self) -> usize {
        match self {
            ElementType::U8 | ElementType::I8 => 1,
            ElementType::U16 | ElementType::I16 | ElementType::F16 | ElementType::Bf16 => 2,
            ElementType::F32 | ElementType::I32 | ElementType::U32 => 4,
            ElementType::F64 | ElementType::I64 | ElementType::U64 => 8,
        }
    }
}

impl std::fmt::Display for ElementType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// An element type that can be sent, received, broadcast and gathered.
/// Implemented for the integer and float types of [`ElementType`]; sealed.
pub trait Element: Pod + Send + Sync + sealed::Sealed {
    /// The type's identity on the wire.
    const TYPE: ElementType;
}

/// The GLSL type behind a reducible element, selecting its kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum KernelType {
    F32,
    F64,
    I32,
    U32,
    I64,
    U64,
}

/// An element type that can be reduced (sum, product, minimum, maximum)
/// by a kernel on the device: `f32`, `f64`, `i32`, `u32`, `i64`, `u64`.
/// Sealed.
pub trait Reducible: Element {
    /// Which kernel does the arithmetic.
    #[doc(hidden)]
    const KERNEL: KernelTypeToken;
}

/// Opaque: which of this crate's kernels reduces a [`Reducible`] type.
#[derive(Clone, Copy, Debug)]
pub struct KernelTypeToken(pub(crate) KernelType);

macro_rules! element {
    ($t:ty, $variant:ident) => {
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const TYPE: ElementType = ElementType::$variant;
        }
    };
    ($t:ty, $variant:ident, reducible) => {
        element!($t, $variant);
        impl Reducible for $t {
            const KERNEL: KernelTypeToken = KernelTypeToken(KernelType::$variant);
        }
    };
}

element!(u8, U8);
element!(i8, I8);
element!(u16, U16);
element!(i16, I16);
element!(vkcompute::half::f16, F16);
element!(vkcompute::half::bf16, Bf16);
element!(f32, F32, reducible);
element!(f64, F64, reducible);
element!(i32, I32, reducible);
element!(u32, U32, reducible);
element!(i64, I64, reducible);
element!(u64, U64, reducible);

/// A reduction: what [`allreduce`](crate::Communicator::allreduce) and the
/// other reducing collectives compute element by element.
///
/// Integer sums and products wrap (two's complement), as in C and in MPI
/// implementations. For floats the order of the operations is the
/// algorithm's, so sums may differ in the last bits from a sequential sum
/// (every rank gets the same bits); the minimum and maximum of a NaN are
/// unspecified (GLSL's `min` and `max`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ReduceOp {
    /// `a + b`.
    Sum,
    /// `a * b`.
    Product,
    /// The smaller of the two.
    Min,
    /// The larger of the two.
    Max,
}

impl ReduceOp {
    /// The value of the kernels' specialization constant 0, and of the
    /// header's field.
    pub(crate) fn code(self) -> u32 {
        match self {
            ReduceOp::Sum => 0,
            ReduceOp::Product => 1,
            ReduceOp::Min => 2,
            ReduceOp::Max => 3,
        }
    }

    /// The operation a header's number stands for.
    pub(crate) fn from_code(code: u32) -> Option<ReduceOp> {
        ReduceOp::ALL.into_iter().find(|op| op.code() == code)
    }

    /// Every reduction.
    pub const ALL: [ReduceOp; 4] = [
        ReduceOp::Sum,
        ReduceOp::Product,
        ReduceOp::Min,
        ReduceOp::Max,
    ];
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn element_type_codes_round_trip_and_sizes_match_rust() {
        for t in ElementType::ALL {
            assert_eq!(ElementType::from_code(t.code()), Some(t));
        }
        assert_eq!(ElementType::from_code(0), None);
        assert_eq!(f64::TYPE.size(), std::mem::size_of::<f64>());
        assert_eq!(vkcompute::half::bf16::TYPE.size(), 2);
        assert_eq!(u8::TYPE.size(), 1);
    }

    #[test]
    fn reduce_op_codes_round_trip() {
        for op in ReduceOp::ALL {
            assert_eq!(ReduceOp::from_code(op.code()), Some(op));
        }
        assert_eq!(ReduceOp::from_code(4), None);
    }
}
