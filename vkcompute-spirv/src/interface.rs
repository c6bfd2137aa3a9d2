//! What an entry point declares, read from a [`Module`]: its buffer
//! bindings (set, binding, kind, array length, block layout), its
//! push-constant block, workgroup size, workgroup memory, specialization
//! constants, and the limits on what it asks of the driver (call depth,
//! private and function memory).

use crate::module::{EntryPoint, Module};
use crate::types::Type;
use crate::words::*;

/// The largest binding number a kernel may use: drivers size descriptor
/// set layouts by the largest binding (lavapipe runs out of memory on one
/// near `u32::MAX`).
pub const MAX_BINDING: u32 = 4095;

/// The largest descriptor set number a kernel may use (the pipeline layout
/// has every set up to it; `maxBoundDescriptorSets` is the device's own
/// limit, checked at load, and is at least 4).
pub const MAX_SET: u32 = 31;

/// The deepest chain of function calls a kernel may have. Drivers inline
/// calls recursively; a chain of 20,000 took lavapipe 53 s to compile.
/// Optimised GLSL has none, and hand-written code a few levels.
pub const MAX_CALL_DEPTH: u32 = 64;

/// The most bytes of private and function memory (`Private` and
/// `Function` variables, each counted once) an invocation may use. Drivers
/// keep such memory in registers or scratch space per invocation; lavapipe
/// compiles a kernel indexing a function-local `uint a[65536]` dynamically
/// for 36 s, and one of `1 << 20` for minutes and gigabytes. 64 KiB is a
/// `float[16384]` (CUDA allows 512 KiB of local memory per thread, but GPU
/// drivers spill such arrays to memory much more slowly than shared memory).
pub const MAX_PRIVATE_BYTES: u64 = 64 * 1024;

/// What a binding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BindingKind {
    /// A storage buffer (`buffer` in GLSL, std430): read and written.
    StorageBuffer,
    /// A uniform buffer (`uniform` in GLSL, std140): read only.
    UniformBuffer,
}

/// How many buffers a binding takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Count {
    /// One buffer.
    One,
    /// A fixed-length array of buffers (`bufs[n]`).
    Array(u32),
    /// A runtime-sized array of buffers (`bufs[]`).
    Runtime,
}

/// One variable declared on a binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Alias {
    /// The variable's name, or its block's where the instance is
    /// anonymous.
    pub name: Option<String>,
    /// Whether the kernel only reads the buffer through it (`NonWritable`
    /// on the variable or on every member of its block; always for
    /// uniform blocks).
    pub read_only: bool,
    /// The block's type.
    pub block: Type,
}

/// One buffer binding: one argument of a dispatch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binding {
    /// The descriptor set.
    pub set: u32,
    /// The binding number.
    pub binding: u32,
    /// Storage or uniform.
    pub kind: BindingKind,
    /// One buffer, or an array of them.
    pub count: Count,
    /// Every variable declared on it, in module order.
    pub aliases: Vec<Alias>,
}

impl Binding {
    /// Whether every alias only reads.
    pub fn read_only(&self) -> bool {
        self.aliases.iter().all(|a| a.read_only)
    }

    /// For a uniform buffer, the bytes its blocks occupy (the furthest of
    /// its aliases): a buffer bound there must hold them.
    pub fn uniform_extent(&self) -> Option<u64> {
        (self.kind == BindingKind::UniformBuffer)
            .then(|| self.aliases.iter().filter_map(|a| a.block.extent()).max())
            .flatten()
    }
}

/// One workgroup variable and its size.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WorkgroupVariable {
    /// Its name where the module keeps one, else `%id`.
    pub name: String,
    /// Its type, GLSL-like (`uint32_t[16]`).
    pub ty: String,
    /// Bytes, or `None` where they overflow 64 bits.
    pub bytes: Option<u64>,
}

/// The kind of a specialization constant's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SpecKind {
    /// `bool`.
    Bool,
    /// An integer of `width` bits.
    Int {
        /// Its width.
        width: u32,
        /// Whether it is signed.
        signed: bool,
    },
    /// A float of `width` bits.
    Float {
        /// Its width.
        width: u32,
    },
}

/// One specialization constant (one `SpecId`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecConstant {
    /// The `SpecId` (GLSL `constant_id`).
    pub id: u32,
    /// Its name, where the module keeps one.
    pub name: Option<String>,
    /// The kind of value it takes.
    pub kind: SpecKind,
    /// Its size in bytes in `VkSpecializationInfo` (4 or 8; `bool` 4).
    pub size: u32,
    /// The id of the constant (the first `OpSpecConstant*` with this
    /// `SpecId`): [`Module::value`] of it is its default.
    pub constant: u32,
}

/// What an entry point declares.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    /// Its buffer bindings, in (set, binding) order.
    pub bindings: Vec<Binding>,
    /// Its push-constant block and the bytes it occupies, where it has one.
    pub push: Option<(Type, u32)>,
    /// Its workgroup size.
    pub local_size: [u32; 3],
    /// Whether the workgroup size comes from specialization constants
    /// (`local_size_x_id`): the spec ids of x, y and z, where they do.
    pub local_size_ids: [Option<u32>; 3],
    /// The module's workgroup variables.
    pub workgroup: Vec<WorkgroupVariable>,
    /// The module's specialization constants, by id.
    pub spec_constants: Vec<SpecConstant>,
    /// The deepest chain of calls from the entry point (1: none).
    pub call_depth: u32,
    /// Bytes of private and function memory per invocation, `None` past
    /// 2^64 or unknown.
    pub private_bytes: Option<u64>,
}

impl Module {
    /// The compute entry point `entry`.
    pub fn compute_entry(&self, entry: &str) -> Result<&EntryPoint, String> {
        let named: Vec<&EntryPoint> = self
            .entry_points
            .iter()
            .filter(|e| e.name == entry)
            .collect();
        if named.is_empty() {
            let names: Vec<&str> = self.entry_points.iter().map(|e| e.name.as_str()).collect();
            return Err(format!(
                "it has no entry point `{entry}` (it has: {})",
                names.join(", ")
            ));
        }
        named
            .iter()
            .find(|e| e.model == EXECUTION_MODEL_GL_COMPUTE)
            .copied()
            .ok_or_else(|| {
                format!(
                    "entry point `{entry}` is not a compute shader (execution model {})",
                    named[0].model
                )
            })
    }

    /// The interface of compute entry point `entry`. Every descriptor,
    /// push-constant and workgroup variable of the module counts (a module
    /// prepared for the driver holds those of its one entry point only).
    ///
    /// Read from a specialized module, it also refuses what only a
    /// specialization can break in a module SPIRV-Tools accepted with its
    /// defaults: an array of length 0 (or negative), and members of a
    /// buffer or push-constant block that overlap
    /// ([`Type::check_layout`]).
    pub fn interface(&self, entry: &str) -> Result<Interface, String> {
        let ep = self.compute_entry(entry)?;
        self.check_array_lengths()?;
        let (local_size, local_size_ids) = self.local_size(ep)?;
        let (reached, call_depth) = self.call_tree(ep.function)?;
        let bindings = self.bindings()?;
        let mut push: Option<(Type, u32)> = None;
        let mut workgroup = Vec::new();
        let mut private_bytes = Some(0u64);
        let add = |total: Option<u64>, ty: &Type| total?.checked_add(ty.natural_size()?);
        for (id, pointer, class) in self.variables() {
            let pointee = self
                .pointee(pointer)
                .ok_or_else(|| format!("variable %{id} does not have a pointer type"))?;
            match class {
                STORAGE_CLASS_PUSH_CONSTANT => {
                    if push.is_some() {
                        return Err(
                            "it declares more than one push-constant block for entry point \
                             `{entry}` (a kernel has at most one)"
                                .replace("{entry}", entry),
                        );
                    }
                    let block = self.type_tree(pointee)?;
                    block
                        .check_layout()
                        .map_err(|e| format!("the push-constant block: {e}"))?;
                    let size = block
                        .extent()
                        .and_then(|n| u32::try_from(n).ok())
                        .ok_or("the push-constant block has no fixed size")?;
                    push = Some((block, size));
                }
                STORAGE_CLASS_WORKGROUP => {
                    let ty = self.type_tree(pointee)?;
                    workgroup.push(WorkgroupVariable {
                        name: self
                            .name(id)
                            .map_or_else(|| format!("%{id}"), str::to_string),
                        ty: ty.describe(),
                        bytes: ty.natural_size(),
                    });
                }
                STORAGE_CLASS_PRIVATE => {
                    private_bytes = add(private_bytes, &self.type_tree(pointee)?)
                }
                _ => {}
            }
        }
        for f in self.functions.iter().filter(|f| reached.contains(&f.id)) {
            for &pointer in &f.variables {
                let pointee = self
                    .pointee(pointer)
                    .ok_or("a function variable without a pointer type")?;
                private_bytes = add(private_bytes, &self.type_tree(pointee)?);
            }
        }
        Ok(Interface {
            bindings,
            push,
            local_size,
            local_size_ids,
            workgroup,
            spec_constants: self.spec_constants()?,
            call_depth,
            private_bytes,
        })
    }

    /// The buffer bindings of every descriptor variable of the module, in
    /// (set, binding) order; an image, sampler or other opaque descriptor,
    /// a set or binding number past vkcompute's limits, or one binding
    /// declared as two kinds, is an error.
    pub fn bindings(&self) -> Result<Vec<Binding>, String> {
        let mut bindings: Vec<Binding> = Vec::new();
        for (id, pointer, class) in self.variables() {
            match class {
                STORAGE_CLASS_STORAGE_BUFFER | STORAGE_CLASS_UNIFORM => {
                    let pointee = self
                        .pointee(pointer)
                        .ok_or_else(|| format!("variable %{id} does not have a pointer type"))?;
                    self.add_binding(&mut bindings, id, pointee, class)?
                }
                STORAGE_CLASS_UNIFORM_CONSTANT => {
                    return Err(format!(
                        "{} is an image, sampler or other opaque descriptor: vkcompute binds \
                         storage and uniform buffers only",
                        self.described_binding(id)
                    ))
                }
                _ => {}
            }
        }
        bindings.sort_by_key(|b| (b.set, b.binding));
        Ok(bindings)
    }

    /// How messages name a descriptor variable: its name and binding.
    fn described_binding(&self, id: u32) -> String {
        match (
            self.decoration_value(id, DECORATION_DESCRIPTOR_SET),
            self.decoration_value(id, DECORATION_BINDING),
        ) {
            (Some(s), Some(b)) => format!("{} (set {s}, binding {b})", self.describe(id)),
            (None, Some(b)) => format!("{} (binding {b})", self.describe(id)),
            _ => self.describe(id),
        }
    }

    /// Adds descriptor variable `id` (of type `pointee`, storage class
    /// `class`) to `bindings`.
    fn add_binding(
        &self,
        bindings: &mut Vec<Binding>,
        id: u32,
        pointee: u32,
        class: u32,
    ) -> Result<(), String> {
        let what = self.described_binding(id);
        let (Some(set), Some(binding)) = (
            self.decoration_value(id, DECORATION_DESCRIPTOR_SET),
            self.decoration_value(id, DECORATION_BINDING),
        ) else {
            return Err(format!(
                "{what} has no DescriptorSet or no Binding decoration"
            ));
        };
        if set > MAX_SET {
            return Err(format!(
                "{what} is in descriptor set {set}: vkcompute accepts sets up to {MAX_SET}"
            ));
        }
        if binding > MAX_BINDING {
            return Err(format!(
                "{what} has binding number {binding}: vkcompute accepts binding numbers up to \
                 {MAX_BINDING}"
            ));
        }
        // An array of blocks, or one block.
        let g = self
            .global(pointee)
            .ok_or("a descriptor of undefined type")?;
        let (count, block_id) =
            match (g.op, g.operands.as_slice()) {
                (OP_TYPE_ARRAY, [element, length]) => {
                    let n = self.value(*length).and_then(|v| v.as_u64()).ok_or_else(|| {
                    format!("{what} is an array of buffers whose length vkcompute cannot evaluate")
                })?;
                    let n = u32::try_from(n)
                        .map_err(|_| format!("{what} is an array of {n} buffers"))?;
                    (if n == 1 { Count::One } else { Count::Array(n) }, *element)
                }
                (OP_TYPE_RUNTIME_ARRAY, [element]) => (Count::Runtime, *element),
                _ => (Count::One, pointee),
            };
        let block_global = self
            .global(block_id)
            .ok_or("a descriptor of undefined type")?;
        if block_global.op != OP_TYPE_STRUCT {
            return Err(format!(
                "{what} is not a block (a struct) or a one-dimensional array of blocks"
            ));
        }
        let buffer_block = self.decoration(block_id, DECORATION_BUFFER_BLOCK).is_some();
        let kind = match class {
            STORAGE_CLASS_STORAGE_BUFFER => BindingKind::StorageBuffer,
            _ if buffer_block => BindingKind::StorageBuffer,
            _ => BindingKind::UniformBuffer,
        };
        let block = self.type_tree(block_id)?;
        block
            .check_layout()
            .map_err(|e| format!("the block of {what}: {e}"))?;
        if kind == BindingKind::UniformBuffer && block.extent().is_none() {
            return Err(format!("the uniform block {what} has no fixed size"));
        }
        let members = block_global.operands.len() as u32;
        let read_only = kind == BindingKind::UniformBuffer
            || self.decoration(id, DECORATION_NON_WRITABLE).is_some()
            || (members > 0
                && (0..members).all(|m| {
                    self.member_decoration(block_id, m, DECORATION_NON_WRITABLE)
                        .is_some()
                }));
        let alias = Alias {
            name: self
                .name(id)
                .or_else(|| self.name(block_id))
                .map(str::to_string),
            read_only,
            block,
        };
        match bindings
            .iter_mut()
            .find(|b| b.set == set && b.binding == binding)
        {
            Some(b) if b.kind != kind => Err(format!(
                "set {set}, binding {binding} is declared both as a storage and as a uniform \
                 buffer"
            )),
            Some(b) if b.count != count => Err(format!(
                "set {set}, binding {binding} is declared as arrays of different lengths \
                 ({:?} and {count:?})",
                b.count
            )),
            Some(b) => {
                b.aliases.push(alias);
                Ok(())
            }
            None => {
                bindings.push(Binding {
                    set,
                    binding,
                    kind,
                    count,
                    aliases: vec![alias],
                });
                Ok(())
            }
        }
    }

    /// The workgroup size of `ep`, from a constant decorated `BuiltIn
    /// WorkgroupSize` (which takes precedence), else its one `LocalSize`
    /// or `LocalSizeId` mode; and the spec ids it comes from.
    fn local_size(&self, ep: &EntryPoint) -> Result<([u32; 3], [Option<u32>; 3]), String> {
        let modes: Vec<_> = self
            .modes
            .iter()
            .filter(|m| m.function == ep.function)
            .filter(|m| {
                (!m.by_id && m.mode == MODE_LOCAL_SIZE) || (m.by_id && m.mode == MODE_LOCAL_SIZE_ID)
            })
            .collect();
        if modes.len() > 1 {
            return Err(format!(
                "entry point `{}` declares its workgroup size {} times (LocalSize or \
                 LocalSizeId); SPIR-V allows one",
                ep.name,
                modes.len()
            ));
        }
        let builtins: Vec<u32> = self
            .decorated(DECORATION_BUILT_IN)
            .filter(|(_, l)| l.first() == Some(&BUILT_IN_WORKGROUP_SIZE))
            .map(|(t, _)| t)
            .collect();
        if builtins.len() > 1 {
            return Err("more than one constant is decorated BuiltIn WorkgroupSize".into());
        }
        let spec_id = |id: u32| self.decoration_value(id, DECORATION_SPEC_ID);
        let from_ids = |ids: &[u32]| -> Result<([u32; 3], [Option<u32>; 3]), String> {
            let [x, y, z] = ids else {
                return Err("a workgroup size without three parts".into());
            };
            let mut size = [0u32; 3];
            for (s, id) in size.iter_mut().zip([x, y, z]) {
                *s = self
                    .value(*id)
                    .and_then(|v| v.as_u64())
                    .and_then(|v| u32::try_from(v).ok())
                    .ok_or("its workgroup size is not a constant vkcompute can evaluate")?;
            }
            Ok((size, [spec_id(*x), spec_id(*y), spec_id(*z)]))
        };
        if let Some(&id) = builtins.first() {
            let parts = match self.global(id) {
                Some(g) if matches!(g.op, OP_CONSTANT_COMPOSITE | OP_SPEC_CONSTANT_COMPOSITE) => {
                    g.operands.clone()
                }
                _ => return Err("the WorkgroupSize built-in is not a constant composite".into()),
            };
            return from_ids(&parts);
        }
        match modes.first() {
            Some(m) if m.by_id => from_ids(&m.operands),
            Some(m) => match m.operands.as_slice() {
                [x, y, z] => Ok(([*x, *y, *z], [None; 3])),
                _ => Err("a LocalSize without three sizes".into()),
            },
            None => Err(format!(
                "entry point `{}` declares no workgroup size",
                ep.name
            )),
        }
    }

    /// The specialization constants: scalar `OpSpecConstant*` decorated
    /// `SpecId`, once per id.
    pub fn spec_constants(&self) -> Result<Vec<SpecConstant>, String> {
        let mut out: Vec<SpecConstant> = Vec::new();
        for &id in &self.order {
            let g = &self.globals[&id];
            if !matches!(
                g.op,
                OP_SPEC_CONSTANT | OP_SPEC_CONSTANT_TRUE | OP_SPEC_CONSTANT_FALSE
            ) {
                continue;
            }
            let Some(spec_id) = self.decoration_value(id, DECORATION_SPEC_ID) else {
                continue;
            };
            let ty = self.global(g.ty).ok_or("a constant of undefined type")?;
            let kind = match (ty.op, ty.operands.as_slice()) {
                (OP_TYPE_BOOL, _) => SpecKind::Bool,
                (OP_TYPE_INT, [width, signed]) => SpecKind::Int {
                    width: *width,
                    signed: *signed != 0,
                },
                (OP_TYPE_FLOAT, [width, ..]) => SpecKind::Float { width: *width },
                _ => return Err(format!("specialization constant {spec_id} is not a scalar")),
            };
            let size = match kind {
                SpecKind::Bool => 4,
                SpecKind::Int { width, .. } | SpecKind::Float { width } => width.div_ceil(8).max(4),
            };
            match out.iter().find(|s| s.id == spec_id) {
                Some(s) if s.kind != kind => {
                    return Err(format!(
                        "two specialization constants of different types have SpecId {spec_id}"
                    ))
                }
                Some(_) => {}
                None => out.push(SpecConstant {
                    id: spec_id,
                    name: self.name(id).map(str::to_string),
                    kind,
                    size,
                    constant: id,
                }),
            }
        }
        out.sort_by_key(|s| s.id);
        Ok(out)
    }
}
