//! The one reader of a SPIR-V module: its entry points and execution
//! modes, names, decorations (decoration groups applied), types, constants
//! (specialization expressions evaluated, `eval.rs`), global variables and
//! the call graph of its functions. Every fact vkcompute decides on is read
//! from a [`Module`], by the runtime from the words it hands to the driver
//! and by `vkcompute-build` from the words it ships.
//!
//! The reader is written against hostile input: it allocates in proportion
//! to the module, never recurses on the module's structure, and reports
//! what it cannot read as an error rather than a panic.

use std::collections::HashMap;
use std::sync::OnceLock;

use rspirv::grammar::{OperandKind, INSTRUCTION_TABLE};

use crate::eval::{self, Value};
use crate::words::*;

/// `OpDecorationGroup`, `OpGroupDecorate`, `OpGroupMemberDecorate`.
const OP_DECORATION_GROUP: u32 = 73;
const OP_GROUP_DECORATE: u32 = 74;
const OP_GROUP_MEMBER_DECORATE: u32 = 75;
/// `OpDecorateId`, `OpDecorateString`, `OpMemberDecorateString`.
const OP_DECORATE_ID: u32 = 332;
const OP_DECORATE_STRING: u32 = 5632;
const OP_MEMBER_DECORATE_STRING: u32 = 5633;
const OP_MEMBER_NAME: u32 = 6;
const OP_FUNCTION: u32 = 54;
const OP_FUNCTION_END: u32 = 56;
const OP_FUNCTION_CALL: u32 = 57;

/// The member index that stands for "the target itself" in decoration keys.
const WHOLE: u32 = u32::MAX;

/// The decorations of one target (or member): (decoration, literals).
type DecorationList = Vec<(u32, Vec<u32>)>;

/// An entry point.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryPoint {
    /// Its execution model (5 is `GLCompute`).
    pub model: u32,
    /// The id of its function.
    pub function: u32,
    /// Its name.
    pub name: String,
    /// The ids of its interface list.
    pub interface: Vec<u32>,
}

/// One `OpExecutionMode` or `OpExecutionModeId`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mode {
    /// The entry point's function.
    pub function: u32,
    /// The execution mode.
    pub mode: u32,
    /// Its operands: literals, or ids for `OpExecutionModeId`.
    pub operands: Vec<u32>,
    /// Whether it is an `OpExecutionModeId`.
    pub by_id: bool,
}

/// One instruction of the global section that defines an id: a type, a
/// constant, a global variable or an `OpUndef`.
#[derive(Clone, Debug)]
pub(crate) struct Global {
    pub(crate) op: u32,
    /// The result type, 0 where the instruction has none (types).
    pub(crate) ty: u32,
    /// The operands after the result id.
    pub(crate) operands: Vec<u32>,
}

/// One function: what the call graph and the memory limits need.
#[derive(Clone, Debug, Default)]
pub(crate) struct Function {
    pub(crate) id: u32,
    /// The functions it calls.
    pub(crate) calls: Vec<u32>,
    /// The pointer types of its `Function`-storage variables.
    pub(crate) variables: Vec<u32>,
}

/// A SPIR-V module as vkcompute reads it. See the module documentation.
#[derive(Clone, Debug, Default)]
pub struct Module {
    /// The version word of the header.
    pub version: u32,
    /// `OpCapability` operands.
    pub capabilities: Vec<u32>,
    /// The entry points.
    pub entry_points: Vec<EntryPoint>,
    /// The execution modes, of every entry point.
    pub modes: Vec<Mode>,
    names: HashMap<u32, String>,
    member_names: HashMap<(u32, u32), String>,
    /// (target, member or [`WHOLE`]) -> (decoration, literal operands).
    decorations: HashMap<(u32, u32), DecorationList>,
    pub(crate) globals: HashMap<u32, Global>,
    /// The ids `globals` defines, in module order.
    pub(crate) order: Vec<u32>,
    pub(crate) functions: Vec<Function>,
    /// The values of the constants whose value is known.
    pub(crate) values: HashMap<u32, Value>,
}

/// Where the result type and result id of an instruction are, from the
/// SPIR-V grammar: (has a result type, has a result id); (false, false)
/// for an opcode the grammar does not know.
fn results(op: u32) -> (bool, bool) {
    static TABLE: OnceLock<HashMap<u32, (bool, bool)>> = OnceLock::new();
    let table = TABLE.get_or_init(|| {
        INSTRUCTION_TABLE
            .iter()
            .map(|inst| {
                let kinds: Vec<OperandKind> =
                    inst.operands.iter().take(2).map(|o| o.kind).collect();
                let shape = match kinds.as_slice() {
                    [OperandKind::IdResultType, OperandKind::IdResult] => (true, true),
                    [OperandKind::IdResult, ..] => (false, true),
                    _ => (false, false),
                };
                (inst.opcode as u32, shape)
            })
            .collect()
    });
    table.get(&op).copied().unwrap_or((false, false))
}

impl Module {
    /// Reads `words`, a module whose structure
    /// ([`check_structure`](crate::words::check_structure)) holds. The
    /// error names what makes the module unreadable (a decoration given
    /// twice with different values, a specialization expression whose
    /// result SPIR-V leaves undefined).
    pub fn read(words: &[u32]) -> Result<Module, String> {
        check_structure(words)?;
        let mut m = Module {
            version: words[1],
            ..Module::default()
        };
        // Decorations on decoration groups, and where groups apply them.
        let mut groups: Vec<u32> = Vec::new();
        let mut applied: Vec<(u32, u32, u32)> = Vec::new(); // (group, target, member)
        let mut raw: Vec<(u32, u32, u32, Vec<u32>)> = Vec::new(); // (target, member, decoration, literals)
        let mut function: Option<Function> = None;
        for (op, operands) in instructions(words) {
            if let Some(f) = function.as_mut() {
                match (op, operands) {
                    (OP_FUNCTION_END, _) => {
                        if let Some(f) = function.take() {
                            m.functions.push(f);
                        }
                    }
                    (OP_FUNCTION_CALL, [_, _, callee, ..]) => f.calls.push(*callee),
                    (OP_VARIABLE, [ty, _, STORAGE_CLASS_FUNCTION, ..]) => f.variables.push(*ty),
                    _ => {}
                }
                continue;
            }
            match (op, operands) {
                (OP_CAPABILITY, [c, ..]) => m.capabilities.push(*c),
                (OP_ENTRY_POINT, [model, f, rest @ ..]) => {
                    let name_words = (rest.iter().position(|w| w.to_le_bytes().contains(&0)))
                        .map_or(rest.len(), |i| i + 1);
                    m.entry_points.push(EntryPoint {
                        model: *model,
                        function: *f,
                        name: literal_string(rest),
                        interface: rest[name_words..].to_vec(),
                    });
                }
                (OP_EXECUTION_MODE | OP_EXECUTION_MODE_ID, [f, mode, rest @ ..]) => {
                    m.modes.push(Mode {
                        function: *f,
                        mode: *mode,
                        operands: rest.to_vec(),
                        by_id: op == OP_EXECUTION_MODE_ID,
                    })
                }
                (OP_NAME, [id, name @ ..]) => {
                    m.names.insert(*id, literal_string(name));
                }
                (OP_MEMBER_NAME, [id, member, name @ ..]) => {
                    m.member_names.insert((*id, *member), literal_string(name));
                }
                (OP_DECORATE | OP_DECORATE_ID | OP_DECORATE_STRING, [target, d, rest @ ..]) => {
                    raw.push((*target, WHOLE, *d, rest.to_vec()))
                }
                (
                    OP_MEMBER_DECORATE | OP_MEMBER_DECORATE_STRING,
                    [target, member, d, rest @ ..],
                ) => raw.push((*target, *member, *d, rest.to_vec())),
                (OP_DECORATION_GROUP, [group]) => groups.push(*group),
                (OP_GROUP_DECORATE, [group, targets @ ..]) => {
                    applied.extend(targets.iter().map(|t| (*group, *t, WHOLE)))
                }
                (OP_GROUP_MEMBER_DECORATE, [group, pairs @ ..]) => {
                    if pairs.len() % 2 != 0 {
                        return Err("an OpGroupMemberDecorate has an odd number of operands".into());
                    }
                    applied.extend(pairs.chunks(2).map(|p| (*group, p[0], p[1])))
                }
                (OP_FUNCTION, [_, id, ..]) => {
                    function = Some(Function {
                        id: *id,
                        ..Function::default()
                    })
                }
                _ => {
                    let (has_type, has_result) = results(op);
                    let (ty, id, rest) = match (has_type, has_result, operands) {
                        (true, true, [ty, id, rest @ ..]) => (*ty, *id, rest),
                        (false, true, [id, rest @ ..]) => (0, *id, rest),
                        _ => continue,
                    };
                    if m.globals.contains_key(&id) {
                        return Err(format!("id %{id} is defined twice"));
                    }
                    m.globals.insert(
                        id,
                        Global {
                            op,
                            ty,
                            operands: rest.to_vec(),
                        },
                    );
                    m.order.push(id);
                }
            }
        }
        // A group's own decorations go to every target it is applied to
        // (a member target takes them as member decorations).
        for (target, member, decoration, literals) in raw {
            if groups.contains(&target) {
                for &(_, t, mem) in applied.iter().filter(|(g, _, _)| *g == target) {
                    m.decorate(t, mem, decoration, literals.clone())?;
                }
            } else {
                m.decorate(target, member, decoration, literals)?;
            }
        }
        m.values = eval::evaluate(&m)?;
        Ok(m)
    }

    /// Records one decoration, refusing one given twice with different
    /// operands (SPIR-V forbids a decoration twice on one target; where the
    /// values differ, drivers and checks would read different ones).
    fn decorate(
        &mut self,
        target: u32,
        member: u32,
        decoration: u32,
        literals: Vec<u32>,
    ) -> Result<(), String> {
        let on = || {
            if member == WHOLE {
                format!("%{target}")
            } else {
                format!("member {member} of %{target}")
            }
        };
        if matches!(
            decoration,
            DECORATION_ARRAY_STRIDE | DECORATION_MATRIX_STRIDE
        ) && literals == [0]
        {
            // Every element at one address: drivers refuse it when they
            // compile (Mesa: "ArrayStride must be non-zero").
            return Err(format!(
                "{} is decorated {} 0: its elements would share one address",
                on(),
                decoration_name(decoration)
            ));
        }
        let list = self.decorations.entry((target, member)).or_default();
        if let Some((_, earlier)) = list.iter().find(|(d, _)| *d == decoration) {
            if *earlier != literals {
                let on = on();
                return Err(format!(
                    "{on} is decorated {} twice, with {earlier:?} and {literals:?}",
                    decoration_name(decoration)
                ));
            }
            return Ok(());
        }
        list.push((decoration, literals));
        Ok(())
    }

    /// The literal operands of decoration `decoration` on `target`.
    pub fn decoration(&self, target: u32, decoration: u32) -> Option<&[u32]> {
        self.member_decoration(target, WHOLE, decoration)
    }

    /// The literal operands of decoration `decoration` on member `member`
    /// of struct type `target`.
    pub fn member_decoration(&self, target: u32, member: u32, decoration: u32) -> Option<&[u32]> {
        self.decorations
            .get(&(target, member))?
            .iter()
            .find(|(d, _)| *d == decoration)
            .map(|(_, l)| l.as_slice())
    }

    /// The first literal of decoration `decoration` on `target`.
    pub fn decoration_value(&self, target: u32, decoration: u32) -> Option<u32> {
        self.decoration(target, decoration)
            .and_then(|l| l.first().copied())
    }

    /// Every target decorated `decoration` (not members), with its literals.
    pub fn decorated(&self, decoration: u32) -> impl Iterator<Item = (u32, &[u32])> + '_ {
        self.decorations.iter().filter_map(move |((t, m), list)| {
            if *m != WHOLE {
                return None;
            }
            list.iter()
                .find(|(d, _)| *d == decoration)
                .map(|(_, l)| (*t, l.as_slice()))
        })
    }

    /// The name `OpName` gives `id`, where it gives a non-empty one.
    pub fn name(&self, id: u32) -> Option<&str> {
        self.names
            .get(&id)
            .map(String::as_str)
            .filter(|n| !n.is_empty())
    }

    /// The name `OpMemberName` gives member `member` of `id`.
    pub fn member_name(&self, id: u32, member: u32) -> Option<&str> {
        self.member_names
            .get(&(id, member))
            .map(String::as_str)
            .filter(|n| !n.is_empty())
    }

    /// How messages name `id`: `` `name` `` or `%id`.
    pub fn describe(&self, id: u32) -> String {
        match self.name(id) {
            Some(n) => format!("`{n}`"),
            None => format!("%{id}"),
        }
    }

    pub(crate) fn global(&self, id: u32) -> Option<&Global> {
        self.globals.get(&id)
    }

    /// The value of constant `id`, where it is known.
    pub fn value(&self, id: u32) -> Option<&Value> {
        self.values.get(&id)
    }

    /// The global variables, in module order: (id, pointer type, storage
    /// class).
    pub(crate) fn variables(&self) -> impl Iterator<Item = (u32, u32, u32)> + '_ {
        self.order.iter().filter_map(|id| {
            let g = &self.globals[id];
            match (g.op, g.operands.first()) {
                (OP_VARIABLE, Some(class)) => Some((*id, g.ty, *class)),
                _ => None,
            }
        })
    }

    /// The type pointer type `pointer` points to.
    pub(crate) fn pointee(&self, pointer: u32) -> Option<u32> {
        match self.global(pointer) {
            Some(Global {
                op: OP_TYPE_POINTER,
                operands,
                ..
            }) => operands.get(1).copied(),
            _ => None,
        }
    }

    /// The functions `function` calls, directly or not, itself included,
    /// and the deepest chain of calls from it (1 for a function that calls
    /// none); `Err` where the calls make a cycle (recursion, which Vulkan
    /// forbids).
    pub(crate) fn call_tree(&self, function: u32) -> Result<(Vec<u32>, u32), String> {
        let index: HashMap<u32, &Function> = self.functions.iter().map(|f| (f.id, f)).collect();
        // Depth-first, without recursion: (function, next callee to visit).
        let mut depth_of: HashMap<u32, u32> = HashMap::new();
        let mut on_path: Vec<u32> = Vec::new();
        let mut stack: Vec<(u32, usize)> = vec![(function, 0)];
        let mut reached = Vec::new();
        while let Some(&mut (f, ref mut next)) = stack.last_mut() {
            if *next == 0 {
                on_path.push(f);
                reached.push(f);
            }
            let callees = index.get(&f).map_or(&[][..], |f| f.calls.as_slice());
            if let Some(&callee) = callees.get(*next) {
                *next += 1;
                if on_path.contains(&callee) {
                    return Err(format!(
                        "function {} calls itself through {} (recursion, which Vulkan forbids)",
                        self.describe(callee),
                        self.describe(f)
                    ));
                }
                if !depth_of.contains_key(&callee) {
                    stack.push((callee, 0));
                }
                continue;
            }
            let depth = 1 + callees
                .iter()
                .filter_map(|c| depth_of.get(c))
                .max()
                .copied()
                .unwrap_or(0);
            depth_of.insert(f, depth);
            on_path.pop();
            stack.pop();
        }
        Ok((reached, depth_of.get(&function).copied().unwrap_or(1)))
    }
}

/// The name of a decoration in messages.
fn decoration_name(d: u32) -> String {
    match d {
        DECORATION_SPEC_ID => "SpecId".into(),
        DECORATION_BUILT_IN => "BuiltIn".into(),
        DECORATION_BINDING => "Binding".into(),
        DECORATION_DESCRIPTOR_SET => "DescriptorSet".into(),
        DECORATION_OFFSET => "Offset".into(),
        DECORATION_ARRAY_STRIDE => "ArrayStride".into(),
        DECORATION_MATRIX_STRIDE => "MatrixStride".into(),
        other => format!("{other}"),
    }
}
