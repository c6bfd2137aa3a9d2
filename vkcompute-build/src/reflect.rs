//! What the generated code is made from: the entry point's storage-buffer
//! bindings (with their element types), its push-constant block and its
//! specialization constants, reflected with `spirq` as the runtime does.

use spirq::ty::{AccessType, DescriptorType, Type};
use spirq::var::Variable;
use spirq::ReflectConfig;

/// One argument of the kernel.
pub(crate) struct Binding {
    pub(crate) binding: u32,
    pub(crate) name: Option<String>,
    pub(crate) read_only: bool,
    /// The element type and array stride, where the buffer block is one
    /// runtime array (`T data[];`) and every variable on the binding agrees.
    pub(crate) element: Option<(Type, usize)>,
    /// A uniform buffer's block type (std140).
    pub(crate) uniform: Option<Type>,
}

/// One specialization constant.
pub(crate) struct SpecConstant {
    pub(crate) id: u32,
    pub(crate) name: Option<String>,
}

pub(crate) struct Reflected {
    /// The workgroup size, where the module fixes it (`LocalSize`, with no
    /// specialization constant for it).
    pub(crate) local_size: Option<[u32; 3]>,
    pub(crate) bindings: Vec<Binding>,
    /// The push-constant block's type and its extent in bytes.
    pub(crate) push: Option<(Type, usize)>,
    pub(crate) spec: Vec<SpecConstant>,
}

/// Reflects entry point `entry` of `words`.
pub(crate) fn reflect(words: &[u32], entry: &str) -> Result<Reflected, String> {
    let entry_points = ReflectConfig::new()
        .spv(words)
        .ref_all_rscs(true)
        .reflect()
        .map_err(|e| format!("the module could not be reflected: {e}"))?;
    let ep = entry_points
        .iter()
        .find(|e| e.name == entry)
        .ok_or_else(|| {
            let names: Vec<&str> = entry_points.iter().map(|e| e.name.as_str()).collect();
            format!(
                "it has no entry point `{entry}` (it has: {})",
                names.join(", ")
            )
        })?;
    if ep.exec_model != spirq::spirv::ExecutionModel::GLCompute {
        return Err(format!("entry point `{entry}` is not a compute shader"));
    }
    let mut bindings: Vec<Binding> = Vec::new();
    let mut push = None;
    let mut spec = Vec::new();
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
                let (access, uniform) = match desc_ty {
                    DescriptorType::StorageBuffer(access) => (*access, None),
                    DescriptorType::UniformBuffer() => (AccessType::ReadOnly, Some(ty.clone())),
                    other => {
                        return Err(format!(
                            "`{what}` (binding {}) is a {other:?}: vkcompute binds storage and \
                             uniform buffers only",
                            desc_bind.bind()
                        ))
                    }
                };
                if desc_bind.set() != 0 || *nbind != 1 {
                    return Err(format!(
                        "`{what}`: vkcompute binds one buffer per binding, in descriptor set 0"
                    ));
                }
                let element = uniform.is_none().then(|| runtime_element(ty)).flatten();
                // An anonymous block instance (`buffer A { float a[]; };`)
                // is named after its block.
                let name = name.clone().filter(|n| !n.is_empty()).or_else(|| match ty {
                    Type::Struct(s) => s.name.clone(),
                    _ => None,
                });
                let read_only = access == AccessType::ReadOnly;
                match bindings.iter_mut().find(|b| b.binding == desc_bind.bind()) {
                    Some(b) => {
                        b.read_only &= read_only;
                        if b.element.as_ref().map(|(_, s)| *s) != element.as_ref().map(|(_, s)| *s)
                            || b.element.as_ref().map(|(t, _)| t)
                                != element.as_ref().map(|(t, _)| t)
                        {
                            b.element = None;
                        }
                    }
                    None => bindings.push(Binding {
                        binding: desc_bind.bind(),
                        name,
                        read_only,
                        element,
                        uniform,
                    }),
                }
            }
            Variable::PushConstant { ty, .. } => {
                let size = extent(ty).ok_or("the push-constant block has no fixed size")?;
                push = Some((ty.clone(), size));
            }
            Variable::SpecConstant { name, spec_id, .. } => {
                if !spec.iter().any(|s: &SpecConstant| s.id == *spec_id) {
                    spec.push(SpecConstant {
                        id: *spec_id,
                        name: name.clone(),
                    });
                }
            }
            Variable::Input { .. } | Variable::Output { .. } => {}
        }
    }
    bindings.sort_by_key(|b| b.binding);
    spec.sort_by_key(|s| s.id);
    Ok(Reflected {
        local_size: fixed_local_size(words),
        bindings,
        push,
        spec,
    })
}

/// The element type and stride of a block that is one runtime array.
fn runtime_element(ty: &Type) -> Option<(Type, usize)> {
    let Type::Struct(block) = ty else { return None };
    let [member] = block.members.as_slice() else {
        return None;
    };
    match &member.ty {
        Type::Array(array) if array.nelement.is_none() => {
            Some(((*array.element_ty).clone(), array.stride?))
        }
        _ => None,
    }
}

/// The bytes `ty` spans (a struct: to the end of its furthest member).
pub(crate) fn extent(ty: &Type) -> Option<usize> {
    match ty {
        Type::Struct(s) => s.members.iter().try_fold(0usize, |end, m| {
            Some(end.max(m.offset?.checked_add(extent(&m.ty)?)?))
        }),
        Type::Array(a) => {
            let n = a.nelement? as usize;
            let stride = a.stride?;
            Some(((n.checked_sub(1)?) * stride + extent(&a.element_ty)?).max(n * stride))
        }
        Type::Matrix(m) => {
            Some(m.stride? * (m.nvector as usize - 1) + extent(&Type::Vector(m.vector_ty.clone()))?)
        }
        _ => ty.nbyte(),
    }
}

const OP_EXECUTION_MODE: u32 = 16;
const OP_DECORATE: u32 = 71;
const OP_CONSTANT: u32 = 43;
const OP_CONSTANT_COMPOSITE: u32 = 44;
const MODE_LOCAL_SIZE: u32 = 17;
const DECORATION_BUILT_IN: u32 = 11;
const BUILT_IN_WORKGROUP_SIZE: u32 = 25;

/// The workgroup size where the module fixes it: the constant decorated
/// `BuiltIn WorkgroupSize` where there is one (it takes precedence) and it
/// is not a specialization constant, else the `LocalSize` execution mode.
fn fixed_local_size(words: &[u32]) -> Option<[u32; 3]> {
    let mut mode = None;
    let mut builtin = None;
    let mut constants = std::collections::HashMap::new();
    let mut composites = std::collections::HashMap::new();
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        if count == 0 || at + count > words.len() {
            return None;
        }
        let inst = &words[at..at + count];
        match (inst[0] & 0xffff, &inst[1..]) {
            (OP_EXECUTION_MODE, [_, MODE_LOCAL_SIZE, x, y, z]) => mode = Some([*x, *y, *z]),
            (OP_DECORATE, [target, DECORATION_BUILT_IN, BUILT_IN_WORKGROUP_SIZE]) => {
                builtin = Some(*target)
            }
            (OP_CONSTANT, [_, id, value]) => {
                constants.insert(*id, *value);
            }
            (OP_CONSTANT_COMPOSITE, [_, id, x, y, z]) => {
                composites.insert(*id, [*x, *y, *z]);
            }
            _ => {}
        }
        at += count;
    }
    match builtin {
        None => mode,
        Some(id) => {
            let parts = composites.get(&id)?;
            Some([
                *constants.get(&parts[0])?,
                *constants.get(&parts[1])?,
                *constants.get(&parts[2])?,
            ])
        }
    }
}
