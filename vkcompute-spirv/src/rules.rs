//! Rules of SPIR-V that SPIRV-Tools does not check but drivers rely on: a
//! module breaking one is invalid (VUID-VkShaderModuleCreateInfo-pCode-08737)
//! and is refused before it reaches the driver. Also the module as the
//! pipeline sees it, with its specialization constants frozen, for
//! validating again.

use std::collections::{HashMap, HashSet};

use crate::module::Module;
use crate::spec::SpecValue;
use crate::words::*;

/// `RowMajor`, `ColMajor` and `MatrixStride`.
const MATRIX_LAYOUT: [(u32, &str); 3] = [(4, "RowMajor"), (5, "ColMajor"), (7, "MatrixStride")];

/// Checks that the matrix-layout decorations (`RowMajor`, `ColMajor`,
/// `MatrixStride`) decorate only struct members that are matrices or
/// arrays of matrices, as the SPIR-V specification requires (lavapipe
/// fails on others).
pub fn check(words: &[u32]) -> Result<(), String> {
    let mut matrices = HashSet::new();
    let mut elements = HashMap::new();
    let mut members: HashMap<u32, &[u32]> = HashMap::new();
    let mut decorated = Vec::new();
    for (op, operands) in instructions(words) {
        match (op, operands) {
            (OP_TYPE_MATRIX, [id, ..]) => {
                matrices.insert(*id);
            }
            (OP_TYPE_ARRAY | OP_TYPE_RUNTIME_ARRAY, [id, element, ..]) => {
                elements.insert(*id, *element);
            }
            (OP_TYPE_STRUCT, [id, types @ ..]) => {
                members.insert(*id, types);
            }
            (OP_MEMBER_DECORATE, [structure, member, decoration, ..]) => {
                if let Some((_, name)) = MATRIX_LAYOUT.iter().find(|(d, _)| d == decoration) {
                    decorated.push((*structure, *member, *name));
                }
            }
            _ => {}
        }
    }
    for (structure, member, name) in decorated {
        let mut ty = members
            .get(&structure)
            .and_then(|types| types.get(member as usize).copied());
        // Arrays of arrays of matrices count: follow element types (a
        // bounded walk, since a malformed module may make a cycle).
        for _ in 0..elements.len() {
            match ty.and_then(|t| elements.get(&t)) {
                Some(&element) => ty = Some(element),
                None => break,
            }
        }
        if !ty.is_some_and(|t| matrices.contains(&t)) {
            return Err(format!(
                "member {member} of struct %{structure} is decorated {name} but is not a matrix \
                 or an array of matrices"
            ));
        }
    }
    Ok(())
}

/// The literal word of a constant of a `width`-bit integer type (at most
/// 32) whose value is the low bits of `value`: narrow literals are zero-
/// or sign-extended to a whole word, as SPIR-V requires.
pub fn literal_word(value: u32, width: u32, signed: bool) -> u32 {
    let unused = 32 - width.clamp(1, 32);
    if signed {
        (((value << unused) as i32) >> unused) as u32
    } else {
        (value << unused) >> unused
    }
}

/// `words` with its specialization constants frozen into constants: those
/// `specialization` sets (id, value bytes) to its values, the others to
/// their defaults, and their `SpecId` decorations removed. `model` is the
/// reading of `words` (`SpecId`s may come through decoration groups). This
/// is what the validation layer validates at pipeline creation (a module
/// valid with its defaults may not be with other values, e.g. an array
/// length that makes a block's members overlap:
/// VUID-VkPipelineShaderStageCreateInfo-pSpecializationInfo-06719).
/// `OpSpecConstantOp` stays unevaluated, and `OpSpecConstantComposite` as
/// it is (its parts may be such operations).
pub fn freeze(words: &[u32], model: &Module, specialization: &[(u32, Vec<u8>)]) -> Vec<u32> {
    rewrite_constants(words, model, specialization, true)
}

/// `words` with the defaults of the specialization constants `values`
/// names (by `SpecId`) set to those values: they stay specialization
/// constants. What vkcompute-build ships for a shader specialized at build
/// time. Each value is checked against its constant ([`SpecValue::check`]);
/// an id the module does not declare is an error.
pub fn set_defaults(
    words: &[u32],
    model: &Module,
    values: &[(u32, SpecValue)],
) -> Result<Vec<u32>, String> {
    let declared = model.spec_constants()?;
    for (id, value) in values {
        let constant = declared.iter().find(|s| s.id == *id).ok_or_else(|| {
            format!(
                "it declares no specialization constant {id} (it declares {:?})",
                declared.iter().map(|s| s.id).collect::<Vec<_>>()
            )
        })?;
        value
            .check(constant)
            .map_err(|e| format!("specialization constant {id}: {e}"))?;
    }
    let bytes: Vec<(u32, Vec<u8>)> = values.iter().map(|(id, v)| (*id, v.bytes())).collect();
    Ok(rewrite_constants(words, model, &bytes, false))
}

/// `words` with the scalar specialization constants `values` names set:
/// frozen into constants (`SpecId`s removed, every one taken at its value
/// or default) where `freeze`, else given those values as defaults.
fn rewrite_constants(
    words: &[u32],
    model: &Module,
    values: &[(u32, Vec<u8>)],
    freeze: bool,
) -> Vec<u32> {
    // Integer types narrower than 32 bits: (width, signed).
    let mut narrow = HashMap::new();
    for (op, operands) in instructions(words) {
        if let (OP_TYPE_INT, [id, width, signed, ..]) = (op, operands) {
            if *width < 32 {
                narrow.insert(*id, (*width, *signed != 0));
            }
        }
    }
    let value = |target: u32| {
        let id = &model.decoration_value(target, DECORATION_SPEC_ID)?;
        let (_, bytes) = values.iter().find(|(i, _)| i == id)?;
        let words: Vec<u32> = bytes
            .chunks(4)
            .map(|c| c.iter().rev().fold(0, |w, &b| (w << 8) | u32::from(b)))
            .collect();
        Some(words)
    };
    let (on, off, constant) = if freeze {
        (OP_CONSTANT_TRUE, OP_CONSTANT_FALSE, OP_CONSTANT)
    } else {
        (
            OP_SPEC_CONSTANT_TRUE,
            OP_SPEC_CONSTANT_FALSE,
            OP_SPEC_CONSTANT,
        )
    };
    let mut out = words[..5.min(words.len())].to_vec();
    for (op, operands) in instructions(words) {
        let (op, operands) = match (op, operands) {
            (OP_DECORATE, [_, DECORATION_SPEC_ID, ..]) if freeze => continue,
            (OP_SPEC_CONSTANT_TRUE | OP_SPEC_CONSTANT_FALSE, [ty, id]) => {
                let set = match value(*id) {
                    Some(v) => v.iter().any(|&w| w != 0),
                    None => op == OP_SPEC_CONSTANT_TRUE,
                };
                (if set { on } else { off }, vec![*ty, *id])
            }
            (OP_SPEC_CONSTANT, [ty, id, default @ ..]) => {
                let mut literal = value(*id).unwrap_or_else(|| default.to_vec());
                literal.resize(default.len(), 0);
                if let (Some(&(width, signed)), [w]) = (narrow.get(ty), literal.as_mut_slice()) {
                    *w = literal_word(*w, width, signed);
                }
                let mut operands = vec![*ty, *id];
                operands.extend(literal);
                (constant, operands)
            }
            _ => (op, operands.to_vec()),
        };
        out.push(((operands.len() as u32 + 1) << 16) | op);
        out.extend(operands);
    }
    out
}

/// A type an access chain can index.
enum Indexed<'a> {
    /// An array (length from a constant id), a vector or a matrix (a
    /// literal count): the element type and the number of elements.
    Elements(u32, Option<u64>),
    /// A runtime array: the element type.
    Unbounded(u32),
    /// A struct: its member types.
    Members(&'a [u32]),
}

/// Checks that every constant index of an access chain into an array,
/// vector or matrix of known size is in bounds. SPIRV-Tools accepts
/// `data[0xffffffff]` into a `uint data[4]`; the validation layer of
/// Debian 12 (1.3.239) crashes on it in `vkCreateShaderModule`, and
/// executing it would be undefined behaviour anyway.
pub fn check_constant_indices(words: &[u32], model: &Module) -> Result<(), String> {
    let constant = |id: &u32| model.value(*id).and_then(|v| v.as_u64());
    let mut types: HashMap<u32, Indexed<'_>> = HashMap::new();
    let mut pointees: HashMap<u32, u32> = HashMap::new();
    let mut pointer_types: HashMap<u32, u32> = HashMap::new();
    for (op, operands) in instructions(words) {
        match (op, operands) {
            (OP_TYPE_ARRAY, [id, element, length]) => {
                types.insert(*id, Indexed::Elements(*element, constant(length)));
            }
            (OP_TYPE_VECTOR | OP_TYPE_MATRIX, [id, element, count]) => {
                types.insert(*id, Indexed::Elements(*element, Some(u64::from(*count))));
            }
            (OP_TYPE_RUNTIME_ARRAY, [id, element]) => {
                types.insert(*id, Indexed::Unbounded(*element));
            }
            (OP_TYPE_STRUCT, [id, members @ ..]) => {
                types.insert(*id, Indexed::Members(members));
            }
            (OP_TYPE_POINTER, [id, _, pointee]) => {
                pointees.insert(*id, *pointee);
            }
            (OP_VARIABLE | OP_FUNCTION_PARAMETER, [ty, id, ..]) => {
                pointer_types.insert(*id, *ty);
            }
            (OP_ACCESS_CHAIN | OP_IN_BOUNDS_ACCESS_CHAIN, [ty, id, base, indexes @ ..]) => {
                pointer_types.insert(*id, *ty);
                let mut current = pointer_types
                    .get(base)
                    .and_then(|p| pointees.get(p))
                    .copied();
                for index in indexes {
                    let known = constant(index);
                    current = match (current.and_then(|t| types.get(&t)), known) {
                        (Some(Indexed::Elements(_, Some(n))), Some(i)) if i >= *n => {
                            return Err(format!(
                                "access chain %{id} indexes element {i} of a composite of {n}"
                            ));
                        }
                        (Some(Indexed::Elements(element, _) | Indexed::Unbounded(element)), _) => {
                            Some(*element)
                        }
                        (Some(Indexed::Members(members)), Some(i)) => usize::try_from(i)
                            .ok()
                            .and_then(|i| members.get(i))
                            .copied(),
                        _ => None,
                    };
                }
            }
            _ => {}
        }
    }
    Ok(())
}

/// The most members a type may have once nested types are written out.
pub const MAX_EXPANDED_TYPE: u64 = 1 << 16;

/// The deepest a type may nest (an array of arrays of ..., a struct in a
/// struct in ...). SPIRV-Tools' validator takes time and memory growing
/// with the square of the depth: 12,000 nested one-element arrays (a
/// 187 KB module) made it throw `std::bad_alloc` through the FFI, which
/// aborts the process. Real kernels nest a few levels.
pub const MAX_TYPE_DEPTH: u32 = 256;

/// Checks that no type, written out as a tree (a struct of two structs
/// counts each twice), has more than [`MAX_EXPANDED_TYPE`] parts, or nests
/// deeper than [`MAX_TYPE_DEPTH`]. Types nest as a graph, so a module of a
/// few dozen structs, each holding two of the one before, describes a type
/// of billions of members; code that walks types as trees would take
/// exponential time and memory on it.
pub fn check_type_nesting(words: &[u32]) -> Result<(), String> {
    let mut size: HashMap<u32, (u64, u32)> = HashMap::new();
    for (op, operands) in instructions(words) {
        let (id, parts): (u32, &[u32]) = match (op, operands) {
            (OP_TYPE_STRUCT, [id, members @ ..]) => (*id, members),
            (OP_TYPE_ARRAY, [id, element, _]) | (OP_TYPE_RUNTIME_ARRAY, [id, element]) => {
                (*id, std::slice::from_ref(element))
            }
            (OP_TYPE_VECTOR | OP_TYPE_MATRIX, [id, element, _]) => {
                (*id, std::slice::from_ref(element))
            }
            (OP_TYPE_POINTER, [id, _, pointee]) => (*id, std::slice::from_ref(pointee)),
            (OP_TYPE_FUNCTION, [id, types @ ..]) => (*id, types),
            _ => continue,
        };
        // Types are declared before use (forward pointers aside, which
        // count 1 here): every part's size and depth are known.
        let (mut total, mut depth) = (1u64, 1u32);
        for part in parts {
            let (n, d) = size.get(part).copied().unwrap_or((1, 0));
            total = total.saturating_add(n);
            depth = depth.max(d.saturating_add(1));
        }
        if total > MAX_EXPANDED_TYPE {
            return Err(format!(
                "type %{id} nests more than {MAX_EXPANDED_TYPE} members once written out (a \
                 struct of structs that repeat); vkcompute refuses it rather than reflect it"
            ));
        }
        if depth > MAX_TYPE_DEPTH {
            return Err(format!(
                "type %{id} nests more than {MAX_TYPE_DEPTH} levels deep; vkcompute refuses it \
                 (the validator's time and memory grow with the square of the depth)"
            ));
        }
        size.insert(id, (total, depth));
    }
    Ok(())
}
