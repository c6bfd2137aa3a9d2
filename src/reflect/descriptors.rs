//! The descriptors a module declares, read from the words alone (before
//! any validator or reflection library sees a module that may be hostile):
//! vkcompute binds storage and uniform buffers in descriptor set 0, and
//! says so by name for anything else.

use std::collections::HashMap;

use crate::spirv_words::*;

/// Checks that every descriptor of `words` is a storage buffer in set 0;
/// the error names the variable and what it is.
pub(crate) fn check_descriptors(words: &[u32]) -> Result<(), String> {
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut sets: HashMap<u32, u32> = HashMap::new();
    let mut bindings: HashMap<u32, u32> = HashMap::new();
    let mut variables = Vec::new();
    for (op, operands) in instructions(words) {
        match (op, operands) {
            (OP_NAME, [id, name @ ..]) => {
                names.insert(*id, literal_string(name));
            }
            (OP_DECORATE, [id, DECORATION_DESCRIPTOR_SET, set, ..]) => {
                sets.insert(*id, *set);
            }
            (OP_DECORATE, [id, DECORATION_BINDING, binding, ..]) => {
                bindings.insert(*id, *binding);
            }
            (OP_VARIABLE, [_, id, class, ..]) => variables.push((*id, *class)),
            _ => {}
        }
    }
    for (id, class) in variables {
        let described = || {
            let name = names.get(&id).filter(|n| !n.is_empty());
            let name = name.map_or_else(|| format!("%{id}"), |n| format!("`{n}`"));
            match bindings.get(&id) {
                Some(b) => format!("{name} (binding {b})"),
                None => name,
            }
        };
        if class == STORAGE_CLASS_UNIFORM_CONSTANT {
            return Err(format!(
                "{} is an image, sampler or other opaque descriptor: vkcompute binds storage and \
                 uniform buffers only",
                described()
            ));
        }
        let descriptor = class == STORAGE_CLASS_STORAGE_BUFFER || class == STORAGE_CLASS_UNIFORM;
        if let (true, Some(&set)) = (descriptor, sets.get(&id)) {
            if set != 0 {
                return Err(format!(
                    "{} is in descriptor set {set}: vkcompute binds set 0 only",
                    described()
                ));
            }
        }
    }
    Ok(())
}

/// The binding numbers of the runtime-sized arrays of buffers `words`
/// declares (`buffer B { ... } bufs[];`): storage or uniform variables
/// whose type is a runtime array.
pub(crate) fn runtime_descriptor_arrays(words: &[u32]) -> Vec<u32> {
    let mut runtime_arrays = Vec::new();
    let mut pointers = Vec::new();
    let mut variables = Vec::new();
    let mut bindings: HashMap<u32, u32> = HashMap::new();
    for (op, operands) in instructions(words) {
        match (op, operands) {
            (OP_TYPE_RUNTIME_ARRAY, [id, ..]) => runtime_arrays.push(*id),
            (OP_TYPE_POINTER, [id, class, pointee])
                if (*class == STORAGE_CLASS_STORAGE_BUFFER || *class == STORAGE_CLASS_UNIFORM)
                    && runtime_arrays.contains(pointee) =>
            {
                pointers.push(*id)
            }
            (OP_VARIABLE, [ty, id, ..]) if pointers.contains(ty) => variables.push(*id),
            (OP_DECORATE, [id, DECORATION_BINDING, binding, ..]) => {
                bindings.insert(*id, *binding);
            }
            _ => {}
        }
    }
    variables
        .iter()
        .filter_map(|v| bindings.get(v).copied())
        .collect()
}

/// Checks that `words` has a compute entry point named `entry`.
pub(crate) fn check_entry_point(words: &[u32], entry: &str) -> Result<(), String> {
    let mut names = Vec::new();
    for (op, operands) in instructions(words) {
        if let (OP_ENTRY_POINT, [model, _, name @ ..]) = (op, operands) {
            let name = literal_string(name);
            if name == entry {
                return match *model {
                    EXECUTION_MODEL_GL_COMPUTE => Ok(()),
                    other => Err(format!(
                        "entry point `{entry}` is not a compute shader (execution model {other})"
                    )),
                };
            }
            names.push(name);
        }
    }
    Err(format!(
        "it has no entry point `{entry}` (it has: {})",
        names.join(", ")
    ))
}
