//! The workgroup size of an entry point, from `LocalSize`, `LocalSizeId`
//! or a `WorkgroupSize` built-in, with specialization applied.

use std::collections::HashMap;

use crate::spirv_words::*;

/// The workgroup size of entry point `entry`, with the specialization
/// values `spec` (id -> value) applied where the size depends on them.
pub(crate) fn local_size(words: &[u32], entry: &str, spec: &HashMap<u32, u32>) -> Option<[u32; 3]> {
    let mut entry_id = None;
    let mut local_size = None;
    let mut local_size_ids = None;
    let mut workgroup_builtin = None;
    let mut spec_ids: HashMap<u32, u32> = HashMap::new();
    let mut scalars: HashMap<u32, u32> = HashMap::new();
    let mut composites: HashMap<u32, [u32; 3]> = HashMap::new();
    for (op, operands) in instructions(words) {
        match op {
            OP_ENTRY_POINT if operands.len() >= 3 && literal_string(&operands[2..]) == entry => {
                entry_id = Some(operands[1]);
            }
            OP_EXECUTION_MODE | OP_EXECUTION_MODE_ID
                if operands.len() >= 5 && Some(operands[0]) == entry_id =>
            {
                let xyz = [operands[2], operands[3], operands[4]];
                match (op, operands[1]) {
                    (OP_EXECUTION_MODE, MODE_LOCAL_SIZE) => local_size = Some(xyz),
                    (OP_EXECUTION_MODE_ID, MODE_LOCAL_SIZE_ID) => local_size_ids = Some(xyz),
                    _ => {}
                }
            }
            OP_DECORATE if operands.len() >= 3 => match operands[1] {
                DECORATION_SPEC_ID => {
                    spec_ids.insert(operands[0], operands[2]);
                }
                DECORATION_BUILT_IN if operands[2] == BUILT_IN_WORKGROUP_SIZE => {
                    workgroup_builtin = Some(operands[0]);
                }
                _ => {}
            },
            OP_CONSTANT | OP_SPEC_CONSTANT if operands.len() >= 3 => {
                scalars.insert(operands[1], operands[2]);
            }
            OP_CONSTANT_COMPOSITE | OP_SPEC_CONSTANT_COMPOSITE if operands.len() >= 5 => {
                composites.insert(operands[1], [operands[2], operands[3], operands[4]]);
            }
            _ => {}
        }
    }
    let value = |id: u32| -> Option<u32> {
        match spec_ids.get(&id).and_then(|sid| spec.get(sid)) {
            Some(v) => Some(*v),
            None => scalars.get(&id).copied(),
        }
    };
    let from_ids = |ids: [u32; 3]| -> Option<[u32; 3]> {
        Some([value(ids[0])?, value(ids[1])?, value(ids[2])?])
    };
    if let Some(ids) = workgroup_builtin.and_then(|id| composites.get(&id)) {
        return from_ids(*ids);
    }
    if let Some(ids) = local_size_ids {
        return from_ids(ids);
    }
    local_size
}
