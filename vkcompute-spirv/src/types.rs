//! Types as trees, with their layout (offsets, strides, matrix layout):
//! what a binding's block, the push-constant block and a workgroup
//! variable are, and how many bytes each occupies.

use crate::eval::Value;
use crate::module::Module;
use crate::words::*;

/// The most nodes one type may have once written out as a tree: types nest
/// as a graph, and a few dozen structs of two of the one before describe a
/// tree of billions of members (`rules::check_type_nesting` refuses such
/// modules before they reach the driver).
pub const MAX_TYPE_NODES: usize = 1 << 16;

/// A type, as a tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Type {
    /// `bool`.
    Bool,
    /// An integer.
    Int {
        /// Its width in bits.
        width: u32,
        /// Whether it is signed.
        signed: bool,
    },
    /// A float.
    Float {
        /// Its width in bits.
        width: u32,
    },
    /// A vector.
    Vector {
        /// Its component type.
        component: Box<Type>,
        /// How many components.
        count: u32,
    },
    /// A matrix: `columns` vectors of type `column`.
    Matrix {
        /// The column type (a vector).
        column: Box<Type>,
        /// How many columns.
        columns: u32,
        /// `MatrixStride`, where its struct member gives one.
        stride: Option<u32>,
        /// `RowMajor` (else column-major).
        row_major: bool,
    },
    /// An array; `length` is `None` for a runtime array (`T data[]`).
    Array {
        /// The element type.
        element: Box<Type>,
        /// The length, `None` for a runtime array.
        length: Option<u64>,
        /// `ArrayStride`, where the module gives one.
        stride: Option<u32>,
    },
    /// A struct.
    Struct {
        /// Its name (`OpName` of the type), where the module keeps one.
        name: Option<String>,
        /// Its members, in declaration order.
        members: Vec<Member>,
    },
    /// A pointer (a `PhysicalStorageBuffer` reference in a block: 8
    /// bytes).
    Pointer,
    /// Anything else (an image, a sampler, ...), named.
    Other(String),
}

/// One member of a struct.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Member {
    /// Its name (`OpMemberName`), where the module keeps one.
    pub name: Option<String>,
    /// Its `Offset`, where the module gives one.
    pub offset: Option<u32>,
    /// Its type.
    pub ty: Type,
}

/// A matrix layout a struct member gives the matrices inside it.
#[derive(Clone, Copy, Default)]
struct Layout {
    stride: Option<u32>,
    row_major: bool,
}

impl Module {
    /// Type `id` as a tree; the error says what could not be read (an
    /// array length that is not a known constant, a tree of more than
    /// [`MAX_TYPE_NODES`] nodes).
    pub fn type_tree(&self, id: u32) -> Result<Type, String> {
        let mut budget = MAX_TYPE_NODES;
        self.tree(id, Layout::default(), &mut budget, 0)
    }

    fn tree(
        &self,
        id: u32,
        layout: Layout,
        budget: &mut usize,
        depth: u32,
    ) -> Result<Type, String> {
        *budget = budget.checked_sub(1).ok_or_else(|| {
            format!("a type has more than {MAX_TYPE_NODES} parts once written out")
        })?;
        if depth > 512 {
            return Err("types nest more than 512 deep".into());
        }
        let g = self
            .global(id)
            .ok_or_else(|| format!("type %{id} is not defined"))?;
        let ops = g.operands.as_slice();
        let sub = |t: u32, l: Layout, budget: &mut usize| self.tree(t, l, budget, depth + 1);
        Ok(match (g.op, ops) {
            (OP_TYPE_BOOL, _) => Type::Bool,
            (OP_TYPE_INT, [width, signed]) => Type::Int {
                width: *width,
                signed: *signed != 0,
            },
            (OP_TYPE_FLOAT, [width, ..]) => Type::Float { width: *width },
            (OP_TYPE_VECTOR, [component, count]) => Type::Vector {
                component: Box::new(sub(*component, layout, budget)?),
                count: *count,
            },
            (OP_TYPE_MATRIX, [column, columns]) => Type::Matrix {
                column: Box::new(sub(*column, layout, budget)?),
                columns: *columns,
                stride: layout.stride,
                row_major: layout.row_major,
            },
            (OP_TYPE_ARRAY, [element, length]) => {
                let n = self.array_length(id, *length)?.ok_or_else(|| {
                    format!(
                        "the length of array type %{id} is not a constant vkcompute can evaluate"
                    )
                })?;
                Type::Array {
                    element: Box::new(sub(*element, layout, budget)?),
                    length: Some(n),
                    stride: self.decoration_value(id, DECORATION_ARRAY_STRIDE),
                }
            }
            (OP_TYPE_RUNTIME_ARRAY, [element]) => Type::Array {
                element: Box::new(sub(*element, layout, budget)?),
                length: None,
                stride: self.decoration_value(id, DECORATION_ARRAY_STRIDE),
            },
            (OP_TYPE_STRUCT, members) => {
                let mut out = Vec::with_capacity(members.len());
                for (i, &t) in members.iter().enumerate() {
                    let i = i as u32;
                    let layout = Layout {
                        stride: self
                            .member_decoration(id, i, DECORATION_MATRIX_STRIDE)
                            .and_then(|l| l.first().copied()),
                        row_major: self
                            .member_decoration(id, i, DECORATION_ROW_MAJOR)
                            .is_some(),
                    };
                    out.push(Member {
                        name: self.member_name(id, i).map(str::to_string),
                        offset: self
                            .member_decoration(id, i, DECORATION_OFFSET)
                            .and_then(|l| l.first().copied()),
                        ty: sub(t, layout, budget)?,
                    });
                }
                Type::Struct {
                    name: self.name(id).map(str::to_string),
                    members: out,
                }
            }
            (OP_TYPE_POINTER, _) => Type::Pointer,
            (op, _) => Type::Other(format!("type opcode {op}")),
        })
    }
}

impl Module {
    /// The length of array type `id` (whose length operand is `length`):
    /// `None` where it is not known, an error where it is 0 or negative.
    /// SPIR-V requires at least 1, which SPIRV-Tools checks on the
    /// defaults; a specialization constant can still set 0 (or a negative
    /// value of a signed type), and drivers take such an array for one of
    /// 2^32 elements or crash on it.
    fn array_length(&self, id: u32, length: u32) -> Result<Option<u64>, String> {
        let Some(value) = self.value(length) else {
            return Ok(None);
        };
        let Value::Int {
            bits,
            width,
            signed,
        } = *value
        else {
            return Ok(None);
        };
        let negative = signed && width > 0 && width <= 64 && (bits >> (width - 1)) & 1 == 1;
        if bits == 0 || negative {
            let shown = if negative {
                format!("{}", crate::eval::sign_extend(bits, width))
            } else {
                "0".to_string()
            };
            return Err(format!(
                "array type %{id} has length {shown} (its length constant is {}); an array has at \
                 least one element: a specialization constant that sets the length must be 1 or \
                 more",
                self.describe(length)
            ));
        }
        Ok(Some(bits))
    }

    /// Checks the length of every array type of the module, used or not
    /// (see `array_length`).
    pub(crate) fn check_array_lengths(&self) -> Result<(), String> {
        for &id in &self.order {
            let g = &self.globals[&id];
            if let (OP_TYPE_ARRAY, [_, length]) = (g.op, g.operands.as_slice()) {
                self.array_length(id, *length)?;
            }
        }
        Ok(())
    }
}

impl Type {
    /// Checks the explicit layout of a block (a buffer binding's or the
    /// push constants'): no two members of a struct overlap, at any depth,
    /// and no array's elements overlap (its stride is at least the bytes
    /// each element spans). Vulkan requires this of the module the
    /// pipeline is made from, after specialization
    /// (VUID-VkPipelineShaderStageCreateInfo-pSpecializationInfo-06719):
    /// SPIRV-Tools checks the defaults, but a specialization constant
    /// that sets an array's length moves where the array ends, not the
    /// offsets of the members after it. A runtime array counts from its
    /// offset only (it is the last member).
    pub fn check_layout(&self) -> Result<(), String> {
        match self {
            Type::Struct { members, .. } => {
                // (offset, end, member index), in offset order.
                let mut spans: Vec<(u64, u64, usize)> = Vec::with_capacity(members.len());
                for (i, m) in members.iter().enumerate() {
                    m.ty.check_layout()?;
                    let Some(offset) = m.offset else { continue };
                    let offset = u64::from(offset);
                    let bytes = if m.ty.has_runtime_array() {
                        0
                    } else {
                        m.ty.extent().unwrap_or(0)
                    };
                    spans.push((offset, offset.saturating_add(bytes), i));
                }
                spans.sort_by_key(|&(offset, _, _)| offset);
                let mut furthest: Option<(u64, usize)> = None;
                for &(offset, end, i) in &spans {
                    if let Some((before_end, j)) = furthest.filter(|&(e, _)| offset < e) {
                        let name = |k: usize| match &members[k].name {
                            Some(n) => format!("`{n}`"),
                            None => format!("member {k}"),
                        };
                        return Err(format!(
                            "in {}, {} (up to byte {before_end}) and {} (from byte {offset}) \
                             overlap; Vulkan requires the members of a block not to \
                             (VUID-VkPipelineShaderStageCreateInfo-pSpecializationInfo-06719): \
                             a specialization constant that sets an array's length can make \
                             the array reach past the member after it",
                            match self {
                                Type::Struct { name: Some(n), .. } => format!("struct `{n}`"),
                                _ => "a struct".to_string(),
                            },
                            name(j),
                            name(i)
                        ));
                    }
                    if furthest.is_none_or(|(e, _)| end > e) {
                        furthest = Some((end, i));
                    }
                }
                Ok(())
            }
            Type::Array {
                element,
                length,
                stride,
            } => {
                element.check_layout()?;
                let (Some(n), Some(stride)) = (*length, *stride) else {
                    return Ok(());
                };
                match element.extent() {
                    Some(each) if n > 1 && each > u64::from(stride) => Err(format!(
                        "the elements of {} overlap: each spans {each} bytes but they are \
                         {stride} bytes apart (VUID-VkPipelineShaderStageCreateInfo-\
                         pSpecializationInfo-06719)",
                        self.describe()
                    )),
                    _ => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// The bytes a value of this type occupies in a block with explicit
    /// layout, from its first byte to the end of its last member: a struct
    /// ends at its furthest member (members need not be in offset order),
    /// an array at the end of its last element, not at a whole stride, and
    /// a matrix at the end of its last column (row for `RowMajor`). What a
    /// kernel can read through a uniform block, and so what a buffer bound
    /// there must hold. `None` for a runtime array, or a layout the type
    /// does not give.
    pub fn extent(&self) -> Option<u64> {
        match self {
            Type::Bool | Type::Other(_) => None,
            Type::Pointer => Some(8),
            Type::Int { width, .. } | Type::Float { width } => Some(u64::from(*width).div_ceil(8)),
            Type::Vector { component, count } => component.extent()?.checked_mul(u64::from(*count)),
            Type::Matrix { stride, .. } => {
                let (lines, per_line, component) = self.matrix_lines()?;
                let stride = u64::from((*stride)?);
                u64::from(lines.checked_sub(1)?)
                    .checked_mul(stride)?
                    .checked_add(u64::from(per_line).checked_mul(component.extent()?)?)
            }
            Type::Array {
                element,
                length,
                stride,
            } => {
                let n = (*length)?;
                if n == 0 {
                    return Some(0);
                }
                let stride = u64::from((*stride)?);
                (n - 1).checked_mul(stride)?.checked_add(element.extent()?)
            }
            Type::Struct { members, .. } => members.iter().try_fold(0u64, |end, m| {
                let offset = u64::from(m.offset?);
                Some(end.max(offset.checked_add(m.ty.extent()?)?))
            }),
        }
    }

    /// The bytes a variable of this type takes where no layout is given
    /// (workgroup, private and function memory), as the validation layer
    /// counts them: scalars at their width (`bool` 4 bytes), arrays as
    /// their length times their stride (or their element's size), structs
    /// as the sum of their members (or the end of the furthest, where
    /// offsets are given and reach further). `None` past 2^64 bytes or for
    /// a runtime array.
    pub fn natural_size(&self) -> Option<u64> {
        match self {
            Type::Bool => Some(4),
            Type::Pointer | Type::Other(_) => Some(8),
            Type::Int { width, .. } | Type::Float { width } => Some(u64::from(*width).div_ceil(8)),
            Type::Vector { component, count } => {
                component.natural_size()?.checked_mul(u64::from(*count))
            }
            Type::Matrix {
                column, columns, ..
            } => column.natural_size()?.checked_mul(u64::from(*columns)),
            Type::Array {
                element,
                length,
                stride,
            } => {
                let each = match stride {
                    Some(s) => u64::from(*s),
                    None => element.natural_size()?,
                };
                (*length)?.checked_mul(each)
            }
            Type::Struct { members, .. } => {
                let (mut sum, mut end) = (0u64, 0u64);
                for m in members {
                    let size = m.ty.natural_size()?;
                    sum = sum.checked_add(size)?;
                    if let Some(offset) = m.offset {
                        end = end.max(u64::from(offset).checked_add(size)?);
                    }
                }
                Some(sum.max(end))
            }
        }
    }

    /// How a matrix lies in memory: (lines, scalars per line, the scalar
    /// type), lines `MatrixStride` apart: `columns` columns of the column
    /// vector's components, or for `RowMajor` as many rows of `columns`
    /// scalars each. `None` for any other type.
    pub fn matrix_lines(&self) -> Option<(u32, u32, &Type)> {
        let Type::Matrix {
            column,
            columns,
            row_major,
            ..
        } = self
        else {
            return None;
        };
        let Type::Vector { component, count } = column.as_ref() else {
            return None;
        };
        Some(if *row_major {
            (*count, *columns, component)
        } else {
            (*columns, *count, component)
        })
    }

    /// The element type and stride of a block that is one runtime array
    /// (`buffer B { T data[]; }`).
    pub fn runtime_element(&self) -> Option<(&Type, u32)> {
        let Type::Struct { members, .. } = self else {
            return None;
        };
        let [member] = members.as_slice() else {
            return None;
        };
        match &member.ty {
            Type::Array {
                element,
                length: None,
                stride: Some(stride),
            } => Some((element, *stride)),
            _ => None,
        }
    }

    /// Whether a runtime array is anywhere in the type (a block whose size
    /// is set by the buffer bound to it).
    pub fn has_runtime_array(&self) -> bool {
        match self {
            Type::Array { length: None, .. } => true,
            Type::Array { element, .. } => element.has_runtime_array(),
            Type::Struct { members, .. } => members.iter().any(|m| m.ty.has_runtime_array()),
            _ => false,
        }
    }

    /// A number or a vector of numbers as Rust spells it (`u32`, `f16`,
    /// `[f32; 4]`); `None` for any other type.
    pub fn number_spelling(&self) -> Option<String> {
        let scalar = |t: &Type| match t {
            Type::Int { width, signed } if matches!(width, 8 | 16 | 32 | 64) => {
                Some(format!("{}{width}", if *signed { "i" } else { "u" }))
            }
            Type::Float { width } if matches!(width, 16 | 32 | 64) => Some(format!("f{width}")),
            _ => None,
        };
        match self {
            Type::Vector { component, count } => Some(format!("[{}; {count}]", scalar(component)?)),
            other => scalar(other),
        }
    }

    /// How messages write the type, GLSL-like (`uint32_t[16]`, `struct`).
    pub fn describe(&self) -> String {
        match self {
            Type::Bool => "bool".into(),
            Type::Int { width, signed } => {
                format!("{}int{width}_t", if *signed { "" } else { "u" })
            }
            Type::Float { width } => format!("float{width}_t"),
            Type::Vector { component, count } => format!("{}x{count}", component.describe()),
            Type::Matrix {
                column, columns, ..
            } => format!("({})x{columns}", column.describe()),
            Type::Array {
                element, length, ..
            } => match length {
                Some(n) => format!("{}[{n}]", element.describe()),
                None => format!("{}[]", element.describe()),
            },
            Type::Struct { name, .. } => match name {
                Some(n) => format!("struct {n}"),
                None => "struct".into(),
            },
            Type::Pointer => "pointer".into(),
            Type::Other(what) => what.clone(),
        }
    }
}
