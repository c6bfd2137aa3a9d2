//! What the generated code is made from, read by the kernel model the
//! runtime loads with (`vkcompute_spirv`), from the module the runtime will
//! hand the driver: the shipped words specialized with their defaults and
//! prepared (one entry point, indices bounded). The build time and the run
//! time see one kernel.

use vkcompute_spirv::{bounds, rules, BindingKind, Count, Module, SpecKind, Type, Value};

/// One argument of the kernel.
pub(crate) struct Binding {
    pub(crate) set: u32,
    pub(crate) binding: u32,
    pub(crate) kind: BindingKind,
    pub(crate) name: Option<String>,
    pub(crate) read_only: bool,
    /// The element type and array stride, where the buffer block is one
    /// runtime array (`T data[];`) and every variable on the binding agrees.
    pub(crate) element: Option<(Type, u32)>,
    /// The block type, where the buffer holds one block of fixed size: a
    /// uniform block (std140), or a storage block with no runtime array
    /// (std430) on which every variable of the binding agrees.
    pub(crate) block: Option<Type>,
}

/// One specialization constant.
pub(crate) struct SpecConstant {
    pub(crate) id: u32,
    pub(crate) name: Option<String>,
    pub(crate) kind: SpecKind,
    /// Its value in the shipped module (its default, as `build.rs` set it).
    pub(crate) default: Option<Value>,
}

pub(crate) struct Reflected {
    /// The workgroup size with the build-time specialization (defaults).
    pub(crate) local_size: [u32; 3],
    /// The specialization constants the workgroup size comes from, where
    /// it does (x, y, z).
    pub(crate) local_size_ids: [Option<u32>; 3],
    pub(crate) bindings: Vec<Binding>,
    /// The push-constant block's type and the bytes it occupies.
    pub(crate) push: Option<(Type, u32)>,
    pub(crate) spec: Vec<SpecConstant>,
}

/// Reads entry point `entry` of `words`.
pub(crate) fn reflect(words: &[u32], entry: &str) -> Result<Reflected, String> {
    let declared = Module::read(words)?;
    let local_size_ids = declared.interface(entry)?.local_size_ids;
    let spec = declared
        .spec_constants()?
        .into_iter()
        .map(|s| SpecConstant {
            id: s.id,
            default: declared.value(s.constant).cloned(),
            name: s.name,
            kind: s.kind,
        })
        .collect();
    let frozen = rules::freeze(words, &declared, &[]);
    let prepared = bounds::prepare(&frozen, &Module::read(&frozen)?, entry, true, &[])?;
    let iface = prepared.interface;
    // The printf record buffer (a kernel that calls debugPrintfEXT) is
    // the runtime's, bound by itself.
    let printf = prepared.printf.as_ref().map(|p| (p.set, p.binding));
    let mut bindings = Vec::new();
    for b in iface.bindings {
        if Some((b.set, b.binding)) == printf {
            continue;
        }
        let sized = prepared
            .sized
            .iter()
            .any(|&(s, n, _)| (s, n) == (b.set, b.binding));
        if sized || b.count != Count::One {
            return Err(format!(
                "set {}, binding {} is an array of buffers, which vkcompute-build does not \
                 generate yet: load the module with vkcompute::Kernel and pass \
                 `KernelArg::array`",
                b.set, b.binding
            ));
        }
        let read_only = b.read_only();
        let first = &b.aliases[0];
        let name = first.name.clone();
        let (element, block) = match b.kind {
            BindingKind::UniformBuffer => (None, Some(first.block.clone())),
            BindingKind::StorageBuffer => {
                let elements: Vec<Option<(&Type, u32)>> = b
                    .aliases
                    .iter()
                    .map(|a| a.block.runtime_element())
                    .collect();
                let agreed = elements
                    .windows(2)
                    .all(|w| w[0] == w[1])
                    .then(|| elements[0].map(|(t, s)| (t.clone(), s)))
                    .flatten();
                // A block of fixed size (`buffer Counters { uint total;
                // uint bins[16]; }`), the same on every variable.
                let fixed = (!first.block.has_runtime_array()
                    && b.aliases.iter().all(|a| a.block == first.block))
                .then(|| first.block.clone());
                (agreed, fixed)
            }
        };
        bindings.push(Binding {
            set: b.set,
            binding: b.binding,
            kind: b.kind,
            name,
            read_only,
            element,
            block,
        });
    }
    Ok(Reflected {
        local_size: iface.local_size,
        local_size_ids,
        bindings,
        push: iface.push,
        spec,
    })
}
