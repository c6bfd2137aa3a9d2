//! Rules of SPIR-V that SPIRV-Tools does not check but drivers rely on: a
//! module breaking one is invalid (VUID-VkShaderModuleCreateInfo-pCode-08737)
//! and is refused before it reaches the driver.
#![deny(unsafe_code)]

use std::collections::{HashMap, HashSet};

use crate::reflect::instructions;

const OP_TYPE_MATRIX: u32 = 24;
const OP_TYPE_ARRAY: u32 = 28;
const OP_TYPE_RUNTIME_ARRAY: u32 = 29;
const OP_TYPE_STRUCT: u32 = 30;
const OP_MEMBER_DECORATE: u32 = 72;
/// `RowMajor`, `ColMajor` and `MatrixStride`.
const MATRIX_LAYOUT: [(u32, &str); 3] = [(4, "RowMajor"), (5, "ColMajor"), (7, "MatrixStride")];

/// Checks that the matrix-layout decorations (`RowMajor`, `ColMajor`,
/// `MatrixStride`) decorate only struct members that are matrices or
/// arrays of matrices, as the SPIR-V specification requires (lavapipe
/// fails on others).
pub(crate) fn check(words: &[u32]) -> Result<(), String> {
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
