//! A kernel's interface as vkcompute's public API shows it
//! ([`BindingInfo`], [`SpecConstantInfo`]), made from the kernel model's
//! reading of the module the driver gets (`vkcompute_spirv`): bindings
//! with their sets, push-constant size and specialization constants.

use vkcompute_spirv as model;

pub use model::BindingKind;

/// One buffer binding of a kernel: one argument of a dispatch.
///
/// Several variables may be declared on one binding (a buffer loaded at
/// different widths, such as `float data[]` and `vec4 data4[]`); they are
/// one argument, and [`aliases`](Self::aliases) lists each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingInfo {
    /// The descriptor set (GLSL `layout(set = n)`; 0 where none is given).
    pub set: u32,
    /// The binding number.
    pub binding: u32,
    /// For a binding that declares an array of `n` buffers (GLSL
    /// `buffer B { float d[]; } bufs[n];`, `n` of 2 or more), `Some(n)`: it
    /// takes a [`KernelArg::array`](crate::KernelArg::array) of `n` buffers.
    /// `None` for one buffer (an array of one buffer is one buffer), and
    /// for a runtime-sized array ([`runtime_sized`](Self::runtime_sized)).
    pub array_len: Option<u32>,
    /// Whether the binding declares a runtime-sized array of buffers (GLSL
    /// `buffer B { float d[]; } bufs[];`, which needs the device feature
    /// `runtimeDescriptorArray`): it takes a
    /// [`KernelArg::array`](crate::KernelArg::array) of any length from 1
    /// up to the device's limits, and each length a dispatch binds gets a
    /// pipeline of its own (built at the first dispatch of that length,
    /// then kept with the kernel).
    pub runtime_sized: bool,
    /// A storage or a uniform buffer.
    pub kind: BindingKind,
    /// For a uniform buffer, the bytes its block's members occupy, from
    /// the block's start to the end of its furthest member (not the
    /// block's padded size, which std140 rounds up): a buffer bound there
    /// must hold at least these.
    pub uniform_size: Option<u64>,
    /// The name of the binding's first variable, where the module keeps names.
    pub name: Option<String>,
    /// Whether the kernel only reads the buffer (`readonly` in GLSL): true
    /// only where every alias is read-only.
    pub read_only: bool,
    /// The array stride of the buffer's runtime array, where its block is
    /// one runtime array and every alias that has one agrees on it: the
    /// element size arguments must have. `None` where aliases differ (see
    /// [`aliases`](Self::aliases)).
    pub element_stride: Option<u32>,
    /// Every variable declared on this binding, in declaration order (one
    /// for most kernels).
    pub aliases: Vec<BindingAlias>,
}

/// One variable declared on a buffer binding (storage or uniform).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingAlias {
    /// The variable's name, where the module keeps names.
    pub name: Option<String>,
    /// Whether the kernel only reads the buffer through this variable.
    pub read_only: bool,
    /// The array stride of its runtime array, where its block is one
    /// runtime array.
    pub element_stride: Option<u32>,
    /// The element type of its runtime array as Rust spells it (`f32`,
    /// `u32`, `[f32; 4]`, `f16` for `float16_t`), where the block is one
    /// runtime array of numbers or vectors of numbers.
    pub element_type: Option<String>,
}

impl BindingInfo {
    /// Whether a buffer of `element_size`-byte elements and `byte_len`
    /// bytes may bind here: its element size is the stride of some alias,
    /// or its byte length is a whole number of elements of every alias.
    /// `Err` carries the strides the binding's aliases declare.
    pub(crate) fn accepts(&self, element_size: usize, byte_len: u64) -> Result<(), Vec<u32>> {
        let strides: Vec<u32> = self
            .aliases
            .iter()
            .filter_map(|a| a.element_stride)
            .collect();
        if strides.is_empty()
            || strides.iter().any(|&s| s as usize == element_size)
            || (strides.len() > 1 && strides.iter().all(|&s| byte_len % u64::from(s) == 0))
        {
            Ok(())
        } else {
            Err(strides)
        }
    }
}

/// One specialization constant of a kernel.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecConstantInfo {
    /// The `constant_id`.
    pub id: u32,
    /// The constant's name, where the module keeps names.
    pub name: Option<String>,
    /// Its size in bytes (4 or 8; booleans count 4).
    pub size: u32,
}

/// What a kernel's entry point declares, as the public API shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Interface {
    /// Buffer bindings in (set, binding) order.
    pub(crate) bindings: Vec<BindingInfo>,
    /// Bytes of push constants (0 if none).
    pub(crate) push_size: u32,
    pub(crate) spec_constants: Vec<SpecConstantInfo>,
}

impl Interface {
    /// The public view of `prepared`, the interface read from the module
    /// the driver gets, whose runtime-sized arrays of buffers `sized`
    /// lists (set, binding, the length this pipeline has), and of
    /// `declared`, the specialization constants the user's module declares.
    pub(crate) fn new(
        prepared: &model::Interface,
        sized: &[(u32, u32, u32)],
        declared: &[model::SpecConstant],
        printf: Option<(u32, u32)>,
    ) -> Interface {
        let bindings = prepared
            .bindings
            .iter()
            // The printf record buffer is vkcompute's, bound by itself.
            .filter(|b| Some((b.set, b.binding)) != printf)
            .map(|b| {
                let runtime_sized = sized.iter().any(|&(s, n, _)| (s, n) == (b.set, b.binding));
                let array_len = match b.count {
                    model::Count::Array(n) if !runtime_sized => Some(n),
                    _ => None,
                };
                let aliases: Vec<BindingAlias> = b
                    .aliases
                    .iter()
                    .map(|a| {
                        let element = a.block.runtime_element();
                        BindingAlias {
                            name: a.name.clone(),
                            read_only: a.read_only,
                            element_stride: element.map(|(_, stride)| stride),
                            element_type: element.and_then(|(ty, _)| ty.number_spelling()),
                        }
                    })
                    .collect();
                let mut strides = aliases.iter().filter_map(|a| a.element_stride);
                let first = strides.next();
                BindingInfo {
                    set: b.set,
                    binding: b.binding,
                    array_len,
                    runtime_sized,
                    kind: b.kind,
                    uniform_size: b.uniform_extent(),
                    name: b.aliases.first().and_then(|a| a.name.clone()),
                    read_only: b.read_only(),
                    element_stride: first.filter(|s| strides.all(|t| t == *s)),
                    aliases,
                }
            })
            .collect();
        Interface {
            bindings,
            push_size: prepared.push.as_ref().map_or(0, |(_, size)| *size),
            spec_constants: declared
                .iter()
                .map(|s| SpecConstantInfo {
                    id: s.id,
                    name: s.name.clone(),
                    size: s.size,
                })
                .collect(),
        }
    }
}

/// The `half` crate's paths in `type_name`s, which
/// [`BindingAlias::element_type`] leaves out (`half::binary16::f16` is `f16`).
const HALF_PATHS: [&str; 2] = ["half::binary16::", "half::bfloat::"];

/// Whether `type_name` (of `std::any::type_name`) is a number or an array
/// of numbers: the element types checked against kernels (a struct of the
/// user's is checked by its size only). Allocates nothing: it runs for
/// every argument of every dispatch.
pub(crate) fn is_number_type(type_name: &str) -> bool {
    let inner = type_name
        .strip_prefix('[')
        .and_then(|s| s.split_once("; "))
        .map_or(type_name, |(element, _)| element);
    let inner = HALF_PATHS
        .iter()
        .find_map(|p| inner.strip_prefix(p))
        .unwrap_or(inner);
    [
        "u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f16", "bf16", "f32", "f64",
    ]
    .contains(&inner)
}

/// Whether `type_name` spells `declared` (an [`BindingAlias::element_type`])
/// once the `half` crate's paths are left out. Allocates nothing.
pub(crate) fn spells_element(type_name: &str, declared: &str) -> bool {
    let mut rest = declared;
    for piece in type_name
        .split(HALF_PATHS[0])
        .flat_map(|p| p.split(HALF_PATHS[1]))
    {
        match rest.strip_prefix(piece) {
            Some(r) => rest = r,
            None => return false,
        }
    }
    rest.is_empty()
}

/// `type_name` without the `half` crate's paths, for messages.
pub(crate) fn element_spelling(type_name: &str) -> String {
    HALF_PATHS
        .iter()
        .fold(type_name.to_string(), |name, p| name.replace(p, ""))
}

#[cfg(test)]
mod element_tests {
    use super::*;

    #[test]
    fn number_types_and_their_spellings() {
        let f16 = std::any::type_name::<half::f16>();
        let f16x2 = std::any::type_name::<[half::f16; 2]>();
        assert!(is_number_type("u32") && is_number_type("[f32; 4]"));
        assert!(is_number_type(f16) && is_number_type(f16x2));
        assert!(!is_number_type("my_crate::Particle") && !is_number_type("[my::P; 2]"));
        assert!(spells_element(f16, "f16") && spells_element(f16x2, "[f16; 2]"));
        assert!(spells_element("[f32; 4]", "[f32; 4]"));
        assert!(!spells_element("u32", "f32") && !spells_element("[f32; 2]", "[f32; 4]"));
        assert!(!spells_element(std::any::type_name::<half::bf16>(), "f16"));
        assert_eq!(element_spelling(f16x2), "[f16; 2]");
    }
}
