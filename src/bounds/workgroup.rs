//! The workgroup memory an entry point uses: its `Workgroup` variables,
//! found through the functions it calls, with their sizes once
//! specialized (what `maxComputeSharedMemorySize` limits).

use std::collections::{HashMap, HashSet};

use rspirv::dr::{Module, Operand};
use rspirv::spirv::{Decoration, ExecutionModel, Op, StorageClass};

use super::constants::Value;

/// One workgroup variable and its size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct WorkgroupVariable {
    /// Its name where the module keeps one, else `%id`.
    pub(crate) name: String,
    /// Its type, as GLSL would write it (`uint[16]`).
    pub(crate) ty: String,
    /// Bytes, or `None` where they overflow 64 bits.
    pub(crate) bytes: Option<u64>,
}

/// The workgroup variables that entry point `entry` of `module` uses.
pub(crate) fn variables(
    module: &Module,
    values: &HashMap<u32, Value>,
    entry: &str,
) -> Result<Vec<WorkgroupVariable>, String> {
    let function = module
        .entry_points
        .iter()
        .find_map(|e| match e.operands.as_slice() {
            [Operand::ExecutionModel(ExecutionModel::GLCompute), Operand::IdRef(f), Operand::LiteralString(name), ..]
                if name == entry =>
            {
                Some(*f)
            }
            _ => None,
        })
        .ok_or_else(|| format!("it has no compute entry point `{entry}`"))?;
    let used = used_ids(module, function);
    let names: HashMap<u32, &str> = module
        .debug_names
        .iter()
        .filter(|i| i.class.opcode == Op::Name)
        .filter_map(|i| match i.operands.as_slice() {
            [Operand::IdRef(id), Operand::LiteralString(name)] => Some((*id, name.as_str())),
            _ => None,
        })
        .collect();
    let sizes = Sizes::new(module, values);
    let mut found = Vec::new();
    for inst in &module.types_global_values {
        let (Op::Variable, Some(id), Some(ty)) =
            (inst.class.opcode, inst.result_id, inst.result_type)
        else {
            continue;
        };
        if inst.operands.first() != Some(&Operand::StorageClass(StorageClass::Workgroup))
            || !used.contains(&id)
        {
            continue;
        }
        let name = names
            .get(&id)
            .filter(|n| !n.is_empty())
            .map_or_else(|| format!("%{id}"), |n| n.to_string());
        let (bytes, ty) = match sizes.pointee(ty) {
            Some(pointee) => (sizes.size(pointee, 0), sizes.describe(pointee, 0)),
            None => (None, "?".into()),
        };
        found.push(WorkgroupVariable { name, ty, bytes });
    }
    Ok(found)
}

/// Every id that the functions `entry` calls (itself included, directly
/// or not) refer to.
fn used_ids(module: &Module, entry: u32) -> HashSet<u32> {
    let by_id: HashMap<u32, usize> = module
        .functions
        .iter()
        .enumerate()
        .filter_map(|(i, f)| Some((f.def.as_ref()?.result_id?, i)))
        .collect();
    let mut used = HashSet::new();
    let mut seen = HashSet::new();
    let mut todo = vec![entry];
    while let Some(f) = todo.pop() {
        if !seen.insert(f) {
            continue;
        }
        let Some(&index) = by_id.get(&f) else {
            continue;
        };
        for inst in module.functions[index].all_inst_iter() {
            for operand in &inst.operands {
                if let Operand::IdRef(id) = operand {
                    used.insert(*id);
                }
            }
            if inst.class.opcode == Op::FunctionCall {
                if let Some(Operand::IdRef(callee)) = inst.operands.first() {
                    todo.push(*callee);
                }
            }
        }
    }
    used
}

/// Byte sizes of a module's types.
struct Sizes<'a> {
    module: &'a Module,
    values: &'a HashMap<u32, Value>,
    /// `ArrayStride` and member `Offset` decorations.
    strides: HashMap<u32, u64>,
    offsets: HashMap<(u32, u32), u64>,
    types: HashMap<u32, usize>,
    /// Sizes computed so far: types nest as a graph, which a walk without
    /// memory would take exponential time over.
    known: std::cell::RefCell<HashMap<u32, Option<u64>>>,
}

impl<'a> Sizes<'a> {
    fn new(module: &'a Module, values: &'a HashMap<u32, Value>) -> Sizes<'a> {
        let mut strides = HashMap::new();
        let mut offsets = HashMap::new();
        for inst in &module.annotations {
            match (inst.class.opcode, inst.operands.as_slice()) {
                (
                    Op::Decorate,
                    [Operand::IdRef(id), Operand::Decoration(Decoration::ArrayStride), Operand::LiteralBit32(s)],
                ) => {
                    strides.insert(*id, u64::from(*s));
                }
                (
                    Op::MemberDecorate,
                    [Operand::IdRef(id), Operand::LiteralBit32(member), Operand::Decoration(Decoration::Offset), Operand::LiteralBit32(o)],
                ) => {
                    offsets.insert((*id, *member), u64::from(*o));
                }
                _ => {}
            }
        }
        let types = module
            .types_global_values
            .iter()
            .enumerate()
            .filter_map(|(i, inst)| Some((inst.result_id?, i)))
            .collect();
        Sizes {
            module,
            values,
            strides,
            offsets,
            types,
            known: Default::default(),
        }
    }

    /// The type pointer type `pointer` points to.
    fn pointee(&self, pointer: u32) -> Option<u32> {
        let inst = &self.module.types_global_values[*self.types.get(&pointer)?];
        match inst.operands.as_slice() {
            [_, Operand::IdRef(pointee)] => Some(*pointee),
            _ => None,
        }
    }

    /// Type `ty` as GLSL would write it, for messages.
    fn describe(&self, ty: u32, depth: u32) -> String {
        let Some(inst) = self
            .types
            .get(&ty)
            .map(|&i| &self.module.types_global_values[i])
        else {
            return format!("%{ty}");
        };
        let ops = inst.operands.as_slice();
        let (id, literal) = (
            |i: usize| match ops.get(i) {
                Some(Operand::IdRef(id)) => *id,
                _ => 0,
            },
            |i: usize| match ops.get(i) {
                Some(Operand::LiteralBit32(v)) => *v,
                _ => 0,
            },
        );
        if depth > 8 {
            return "...".into();
        }
        match (inst.class.opcode, ops.get(1)) {
            (Op::TypeInt, Some(Operand::LiteralBit32(0))) => format!("uint{}_t", literal(0)),
            (Op::TypeInt, _) => format!("int{}_t", literal(0)),
            (Op::TypeFloat, _) => format!("float{}_t", literal(0)),
            (Op::TypeBool, _) => "bool".into(),
            (Op::TypeVector, _) => format!("{}x{}", self.describe(id(0), depth + 1), literal(1)),
            (Op::TypeMatrix, _) => format!("({})x{}", self.describe(id(0), depth + 1), literal(1)),
            (Op::TypeArray, _) => {
                let length = self.values.get(&id(1)).and_then(|v| v.as_u64());
                let length = length.map_or_else(|| "?".into(), |n| n.to_string());
                format!("{}[{length}]", self.describe(id(0), depth + 1))
            }
            (Op::TypeStruct, _) => "struct".into(),
            _ => format!("%{ty}"),
        }
    }

    /// The size of type `ty` (nesting `depth`, bounded: a malformed module
    /// may nest types in a cycle). Sizes are natural (no padding) where the
    /// module gives no explicit layout, as the validation layer counts.
    fn size(&self, ty: u32, depth: u32) -> Option<u64> {
        if depth > 64 {
            return None;
        }
        if let Some(&known) = self.known.borrow().get(&ty) {
            return known;
        }
        let size = self.size_of(ty, depth);
        self.known.borrow_mut().insert(ty, size);
        size
    }

    fn size_of(&self, ty: u32, depth: u32) -> Option<u64> {
        let inst = &self.module.types_global_values[*self.types.get(&ty)?];
        let ops = inst.operands.as_slice();
        let id = |i: usize| match ops.get(i) {
            Some(Operand::IdRef(id)) => Some(*id),
            _ => None,
        };
        let literal = |i: usize| match ops.get(i) {
            Some(Operand::LiteralBit32(v)) => Some(u64::from(*v)),
            _ => None,
        };
        match inst.class.opcode {
            Op::TypeInt | Op::TypeFloat => Some(literal(0)?.div_ceil(8)),
            Op::TypeBool => Some(4),
            Op::TypePointer => Some(8),
            Op::TypeVector | Op::TypeMatrix => {
                literal(1)?.checked_mul(self.size(id(0)?, depth + 1)?)
            }
            Op::TypeArray => {
                let length = self.values.get(&id(1)?)?.as_u64()?;
                let stride = match self.strides.get(&ty) {
                    Some(&s) => s,
                    None => self.size(id(0)?, depth + 1)?,
                };
                length.checked_mul(stride)
            }
            Op::TypeStruct => {
                let mut end = 0u64;
                let mut sum = 0u64;
                for (member, _) in ops.iter().enumerate() {
                    let size = self.size(id(member)?, depth + 1)?;
                    sum = sum.checked_add(size)?;
                    if let Some(&offset) = self.offsets.get(&(ty, member as u32)) {
                        end = end.max(offset.checked_add(size)?);
                    }
                }
                Some(sum.max(end))
            }
            _ => Some(0),
        }
    }
}
