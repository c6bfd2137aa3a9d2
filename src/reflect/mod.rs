//! What a compute module declares: its storage-buffer bindings, push-constant
//! size, workgroup size and specialization constants, read with `spirq`.
//!
//! The workgroup size is read directly from the words (`local_size.rs`),
//! since it can come from three places: `LocalSize`, `LocalSizeId`, or a
//! constant decorated `BuiltIn WorkgroupSize` (what glslang emits for
//! `local_size_x_id`), whose parts may be specialization constants. What
//! a module uses that loading checks against the device (capabilities,
//! pointers) is in `module_use.rs`; the instruction stream itself in
//! `crate::spirv_words`.

mod descriptors;
mod local_size;
mod module_use;

use spirq::ty::{AccessType, DescriptorType, Type};
use spirq::var::Variable;
use spirq::ReflectConfig;

use descriptors::runtime_descriptor_arrays;
pub(crate) use descriptors::{check_descriptors, check_entry_point};
pub(crate) use local_size::local_size;
pub(crate) use module_use::module_use;

/// The largest binding number a kernel may use: drivers size descriptor
/// set layouts by the largest binding (lavapipe runs out of memory on one
/// near `u32::MAX`).
const MAX_BINDING: u32 = 4095;

/// What a binding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingKind {
    /// A storage buffer (`buffer` in GLSL, std430): read and written.
    StorageBuffer,
    /// A uniform buffer (`uniform` in GLSL, std140): read only, of a fixed
    /// size ([`BindingInfo::uniform_size`]), bound at a multiple of
    /// `minUniformBufferOffsetAlignment`.
    UniformBuffer,
}

/// One buffer binding of a kernel: one argument of a dispatch.
///
/// Several variables may be declared on one binding (a buffer loaded at
/// different widths, such as `float data[]` and `vec4 data4[]`); they are
/// one argument, and [`aliases`](Self::aliases) lists each.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BindingInfo {
    /// The binding number (in descriptor set 0).
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
    /// For a uniform buffer, the bytes its block spans: a buffer bound
    /// there must hold at least these.
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

/// One variable declared on a storage-buffer binding.
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

/// What a kernel's entry point declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Interface {
    /// Storage-buffer bindings in binding order.
    pub(crate) bindings: Vec<BindingInfo>,
    /// Bytes of push constants (0 if none).
    pub(crate) push_size: u32,
    pub(crate) spec_constants: Vec<SpecConstantInfo>,
}

/// Reflects entry point `entry` of `words`; the error says what is wrong.
pub(crate) fn reflect(words: &[u32], entry: &str) -> Result<Interface, String> {
    let entry_points = ReflectConfig::new()
        .spv(words)
        .ref_all_rscs(true)
        .reflect()
        .map_err(|e| format!("the module could not be parsed: {e}"))?;
    let Some(ep) = entry_points.iter().find(|e| e.name == entry) else {
        let names: Vec<&str> = entry_points.iter().map(|e| e.name.as_str()).collect();
        return Err(format!(
            "it has no entry point `{entry}` (it has: {})",
            names.join(", ")
        ));
    };
    if ep.exec_model != spirq::spirv::ExecutionModel::GLCompute {
        return Err(format!(
            "entry point `{entry}` is not a compute shader ({:?})",
            ep.exec_model
        ));
    }
    let runtime = runtime_descriptor_arrays(words);
    let mut bindings = Vec::new();
    let mut push_size = 0u32;
    let mut spec_constants = Vec::new();
    for var in &ep.vars {
        match var {
            Variable::Descriptor {
                name,
                desc_bind,
                desc_ty,
                ty,
                nbind,
            } => {
                let what = name
                    .clone()
                    .unwrap_or_else(|| format!("binding {}", desc_bind.bind()));
                let (kind, access, uniform_size) = match desc_ty {
                    DescriptorType::StorageBuffer(access) => {
                        (BindingKind::StorageBuffer, *access, None)
                    }
                    DescriptorType::UniformBuffer() => (
                        BindingKind::UniformBuffer,
                        AccessType::ReadOnly,
                        Some(extent(ty).ok_or_else(|| {
                            format!("the uniform block `{what}` has no fixed size")
                        })?),
                    ),
                    other => {
                        return Err(format!(
                            "`{what}` (set {}, binding {}) is a {other:?}: vkcompute binds storage \
                             and uniform buffers only",
                            desc_bind.set(),
                            desc_bind.bind()
                        ))
                    }
                };
                if desc_bind.set() != 0 {
                    return Err(format!(
                        "`{what}` is in descriptor set {}: vkcompute binds set 0 only",
                        desc_bind.set()
                    ));
                }
                if desc_bind.bind() > MAX_BINDING {
                    return Err(format!(
                        "`{what}` has binding number {}: vkcompute accepts binding numbers up to {MAX_BINDING}",
                        desc_bind.bind()
                    ));
                }
                let runtime_sized = runtime.contains(&desc_bind.bind());
                if *nbind == 0 && !runtime_sized {
                    return Err(format!(
                        "`{what}` is an array of buffers whose length vkcompute cannot evaluate"
                    ));
                }
                let array_len = (*nbind > 1).then_some(*nbind);
                let alias = BindingAlias {
                    name: name.clone(),
                    read_only: access == AccessType::ReadOnly,
                    element_stride: runtime_array_stride(ty),
                    element_type: runtime_array_element(ty),
                };
                match bindings
                    .iter_mut()
                    .find(|b: &&mut BindingInfo| b.binding == desc_bind.bind())
                {
                    Some(b) if b.kind != kind => {
                        return Err(format!(
                            "binding {} is declared both as a storage and as a uniform buffer",
                            b.binding
                        ))
                    }
                    Some(b) if b.array_len != array_len || b.runtime_sized != runtime_sized => {
                        return Err(format!(
                            "binding {} is declared as arrays of different lengths ({} and {})",
                            b.binding,
                            b.array_len.unwrap_or(1),
                            array_len.unwrap_or(1)
                        ))
                    }
                    Some(b) => {
                        b.uniform_size = b.uniform_size.max(uniform_size);
                        b.aliases.push(alias)
                    }
                    None => bindings.push(BindingInfo {
                        binding: desc_bind.bind(),
                        array_len,
                        runtime_sized,
                        kind,
                        uniform_size,
                        name: name.clone(),
                        read_only: true,
                        element_stride: None,
                        aliases: vec![alias],
                    }),
                }
            }
            Variable::PushConstant { ty, .. } => {
                push_size = extent(ty)
                    .and_then(|n| u32::try_from(n).ok())
                    .ok_or_else(|| "the push-constant block has no fixed size".to_string())?;
            }
            Variable::SpecConstant { name, spec_id, ty } => spec_constants.push(SpecConstantInfo {
                id: *spec_id,
                name: name.clone(),
                size: ty.nbyte().map_or(4, |n| n.max(4) as u32),
            }),
            Variable::Input { .. } | Variable::Output { .. } => {}
        }
    }
    bindings.sort_by_key(|b| b.binding);
    for b in &mut bindings {
        b.read_only = b.aliases.iter().all(|a| a.read_only);
        let mut strides = b.aliases.iter().filter_map(|a| a.element_stride);
        let first = strides.next();
        b.element_stride = first.filter(|s| strides.all(|t| t == *s));
    }
    spec_constants.sort_by_key(|s| s.id);
    spec_constants.dedup_by_key(|s| s.id);
    Ok(Interface {
        bindings,
        push_size,
        spec_constants,
    })
}

/// The bytes `ty` spans: for a struct the end of its furthest member (its
/// members' offsets need not increase, so this is not spirq's `nbyte`,
/// which ends at the last member); `None` if it has no fixed size.
fn extent(ty: &Type) -> Option<u64> {
    match ty {
        Type::Struct(block) => block.members.iter().try_fold(0u64, |end, member| {
            let offset = u64::try_from(member.offset?).ok()?;
            Some(end.max(offset.checked_add(extent(&member.ty)?)?))
        }),
        Type::Array(array) => {
            let n = u64::from(array.nelement?);
            let stride = u64::try_from(array.stride?).ok()?;
            let last = (n.checked_sub(1)?)
                .checked_mul(stride)?
                .checked_add(extent(&array.element_ty)?)?;
            Some(last.max(n.checked_mul(stride)?))
        }
        _ => ty.nbyte().and_then(|n| u64::try_from(n).ok()),
    }
}

/// The element type of a block that is one runtime array of numbers or
/// vectors, as Rust spells it.
fn runtime_array_element(ty: &Type) -> Option<String> {
    let Type::Struct(block) = ty else { return None };
    let [member] = block.members.as_slice() else {
        return None;
    };
    let Type::Array(array) = &member.ty else {
        return None;
    };
    if array.nelement.is_some() {
        return None;
    }
    let scalar = |s: &spirq::ty::ScalarType| match s {
        spirq::ty::ScalarType::Integer { bits, is_signed } => {
            Some(format!("{}{bits}", if *is_signed { "i" } else { "u" }))
        }
        spirq::ty::ScalarType::Float { bits: 16 } => Some("f16".into()),
        spirq::ty::ScalarType::Float { bits } => Some(format!("f{bits}")),
        _ => None,
    };
    match &*array.element_ty {
        Type::Scalar(s) => scalar(s),
        Type::Vector(v) => Some(format!("[{}; {}]", scalar(&v.scalar_ty)?, v.nscalar)),
        _ => None,
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

/// The stride of a block that is one runtime array (`T data[];`).
fn runtime_array_stride(ty: &Type) -> Option<u32> {
    let Type::Struct(block) = ty else { return None };
    let [member] = block.members.as_slice() else {
        return None;
    };
    match &member.ty {
        Type::Array(array) if array.nelement.is_none() => {
            array.stride.and_then(|s| u32::try_from(s).ok())
        }
        _ => None,
    }
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
