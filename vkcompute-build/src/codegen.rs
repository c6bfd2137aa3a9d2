//! The Rust generated for one shader: its SPIR-V, `#[repr(C)]` `Pod`
//! structs for the push constants and buffer elements at the shader's
//! offsets (with size and offset assertions), and a kernel type whose
//! `load` and `enqueue` take exactly the arguments the shader declares.

use std::collections::BTreeMap;
use std::fmt::Write;

use vkcompute_spirv::{BindingKind, SpecKind, Type, Value};

use crate::reflect::{Reflected, SpecConstant};

/// What the generated module of one shader is made from.
pub(crate) struct Shader<'a> {
    pub(crate) module: &'a str,
    /// The file, relative to the shader root (the kernel's label).
    pub(crate) label: &'a str,
    pub(crate) entry: &'a str,
    pub(crate) words: &'a [u32],
    pub(crate) reflected: &'a Reflected,
    /// The Vulkan versions it was validated for.
    pub(crate) validated_for: &'a [&'a str],
}

/// The structs a module needs, by name: (definition, layout).
#[derive(Default)]
struct Structs {
    defs: BTreeMap<String, (String, String)>,
}

/// A Rust type for a SPIR-V type: its spelling, size and alignment.
struct Rust {
    spelling: String,
    size: usize,
    align: usize,
}

const RESERVED: &[&str] = &[
    "as", "break", "const", "continue", "crate", "else", "enum", "extern", "false", "fn", "for",
    "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut", "pub", "ref", "return",
    "self", "Self", "static", "struct", "super", "trait", "true", "type", "unsafe", "use", "where",
    "while", "async", "await", "dyn", "abstract", "become", "box", "do", "final", "macro",
    "override", "priv", "typeof", "unsized", "virtual", "yield", "try", "gen",
    // The generated functions' own parameter names.
    "ctx", "grid", "push",
];

/// `name` as a snake-case Rust identifier (`fallback` where it has no
/// letters or digits).
pub(crate) fn snake(name: &str, fallback: &str) -> String {
    let mut out = String::new();
    let mut previous_lower = false;
    let chars: Vec<char> = name.chars().collect();
    for (i, &c) in chars.iter().enumerate() {
        if c.is_ascii_uppercase() {
            // A word starts at an upper-case letter after a lower-case one
            // or a digit, or before a lower-case one (`WElement`: `w_element`).
            let previous_upper = i > 0 && chars[i - 1].is_ascii_uppercase();
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_ascii_lowercase());
            if previous_lower || (previous_upper && next_lower) {
                out.push('_');
            }
            out.push(c.to_ascii_lowercase());
            previous_lower = false;
        } else if c.is_ascii_alphanumeric() {
            out.push(c);
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        } else {
            if !out.ends_with('_') {
                out.push('_');
            }
            previous_lower = false;
        }
    }
    let out = out.trim_matches('_').to_string();
    let out = if out.is_empty() {
        fallback.to_string()
    } else if out.starts_with(|c: char| c.is_ascii_digit()) {
        format!("n{out}")
    } else {
        out
    };
    if RESERVED.contains(&out.as_str()) {
        format!("{out}_")
    } else {
        out
    }
}

fn camel(name: &str) -> String {
    snake(name, "value")
        .split('_')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

impl Structs {
    /// The Rust type of `ty`; `hint` names a struct made for it.
    fn rust(&mut self, ty: &Type, hint: &str) -> Result<Rust, String> {
        Ok(match ty {
            Type::Int { .. } | Type::Float { .. } | Type::Bool => scalar(ty)?,
            Type::Vector { component, count } => {
                let s = scalar(component)?;
                Rust {
                    spelling: format!("[{}; {count}]", s.spelling),
                    size: s.size * *count as usize,
                    align: s.align,
                }
            }
            Type::Matrix {
                stride, row_major, ..
            } => {
                let (lines, per_line, component) = ty
                    .matrix_lines()
                    .ok_or("a matrix whose columns are not vectors")?;
                let line = self.rust(
                    &Type::Vector {
                        component: Box::new(component.clone()),
                        count: per_line,
                    },
                    hint,
                )?;
                let stride = stride.ok_or("a matrix without a stride")? as usize;
                let suffix = if *row_major { "Row" } else { "Column" };
                let line = self.padded(line, stride, &format!("{hint}{suffix}"))?;
                Rust {
                    spelling: format!("[{}; {lines}]", line.spelling),
                    size: line.size * lines as usize,
                    align: line.align,
                }
            }
            Type::Array {
                element,
                length,
                stride,
            } => {
                let n = length.ok_or("a runtime array where a fixed size is needed")?;
                let stride = stride.ok_or("an array without a stride")? as usize;
                let element_rust = self.rust(element, &format!("{hint}Element"))?;
                let element_rust = self.padded(element_rust, stride, &format!("{hint}Element"))?;
                Rust {
                    spelling: format!("[{}; {n}]", element_rust.spelling),
                    size: element_rust.size * n as usize,
                    align: element_rust.align,
                }
            }
            Type::Struct { name, members } => {
                let name = camel(name.as_deref().unwrap_or(hint));
                let mut fields = Vec::new();
                let mut ordered: Vec<_> = members.iter().enumerate().collect();
                ordered.sort_by_key(|(_, m)| m.offset);
                let mut used = Vec::new();
                for (i, m) in ordered {
                    let offset = m.offset.ok_or("a struct member without an offset")? as usize;
                    let mut field = snake(m.name.as_deref().unwrap_or(""), &format!("member{i}"));
                    while used.contains(&field) {
                        field.push('_');
                    }
                    used.push(field.clone());
                    let ty = self.rust(&m.ty, &format!("{name}{}", camel(&field)))?;
                    fields.push((field, offset, ty));
                }
                let size = ty.extent().ok_or("a struct of no fixed size")? as usize;
                self.define(&name, &fields, size)?
            }
            other => {
                return Err(format!(
                    "a {} cannot be shared with the host",
                    other.describe()
                ))
            }
        })
    }

    /// `inner` padded to `stride` bytes (itself where it is that size).
    fn padded(&mut self, inner: Rust, stride: usize, name: &str) -> Result<Rust, String> {
        if stride == inner.size {
            return Ok(inner);
        }
        if stride < inner.size {
            return Err(format!(
                "a stride of {stride} bytes is less than its element's {}",
                inner.size
            ));
        }
        let fields = vec![("value".to_string(), 0, inner)];
        self.define(&camel(name), &fields, stride)
    }

    /// Defines struct `name` of `fields` (name, offset, type) over `size`
    /// bytes, with padding fields between; a name already taken by
    /// another layout gets a number.
    fn define(
        &mut self,
        name: &str,
        fields: &[(String, usize, Rust)],
        size: usize,
    ) -> Result<Rust, String> {
        // A block that ends in an array of padded elements (std140's
        // `float w[3]`) spans less than its Rust type, whose last element
        // has its padding too: the struct is the larger.
        let end = fields.iter().map(|(_, o, t)| o + t.size).max().unwrap_or(0);
        let size = size.max(end);
        let align = fields.iter().map(|(_, _, t)| t.align).max().unwrap_or(1);
        // repr(C) places each field at its offset where every offset is a
        // multiple of the field's alignment and the size of the whole;
        // otherwise the struct is packed (its fields are still at the
        // shader's offsets: the padding is explicit).
        let natural = size % align == 0 && fields.iter().all(|(_, o, t)| o % t.align == 0);
        let repr = if natural { "C" } else { "C, packed" };
        let mut body = String::new();
        let mut asserts = String::new();
        let mut params = Vec::new();
        // The initializer of `new`: every member, then every padding
        // field zeroed.
        let mut inits: Vec<String> = fields.iter().map(|(f, _, _)| f.clone()).collect();
        let pad = |body: &mut String, inits: &mut Vec<String>, bytes: usize| {
            let n = inits.len() - fields.len();
            let _ = writeln!(body, "    #[doc(hidden)]\n    pub _pad{n}: [u8; {bytes}],");
            inits.push(format!("_pad{n}: [0; {bytes}]"));
        };
        let mut at = 0;
        for (field, offset, ty) in fields {
            if *offset < at {
                return Err(format!("members of `{name}` overlap at byte {offset}"));
            }
            if *offset > at {
                pad(&mut body, &mut inits, offset - at);
            }
            let _ = writeln!(
                body,
                "    /// Byte offset {offset} in the shader's layout.\n    pub {field}: {},",
                ty.spelling
            );
            let _ = writeln!(
                asserts,
                "    assert!(::core::mem::offset_of!({name}, {field}) == {offset});"
            );
            params.push(format!("{field}: {}", ty.spelling));
            at = offset + ty.size;
        }
        if size > at {
            pad(&mut body, &mut inits, size - at);
        }
        let definition = format!(
            "/// `{name}` as the shader lays it out ({size} bytes).\n\
             #[repr({repr})]\n\
             #[derive(Clone, Copy, Debug, vkcompute::bytemuck::Pod, vkcompute::bytemuck::Zeroable)]\n\
             #[bytemuck(crate = \"vkcompute::bytemuck\")]\n\
             pub struct {name} {{\n{body}}}\n\n\
             impl {name} {{\n    /// Every member, the padding zeroed.\n    #[allow(clippy::too_many_arguments)]\n    pub fn new({}) -> Self {{\n        {name} {{ {} }}\n    }}\n}}\n\n\
             const _: () = {{\n    assert!(::core::mem::size_of::<{name}>() == {size});\n{asserts}}};\n",
            params.join(", "),
            inits.join(", ")
        );
        let layout = definition.clone();
        let mut chosen = name.to_string();
        let mut n = 1;
        loop {
            match self.defs.get(&chosen) {
                Some((_, l)) if *l == layout.replace(name, &chosen) => break,
                Some(_) => {
                    n += 1;
                    chosen = format!("{name}{n}");
                }
                None => {
                    let definition = definition.replace(name, &chosen);
                    self.defs
                        .insert(chosen.clone(), (definition, layout.replace(name, &chosen)));
                    break;
                }
            }
        }
        Ok(Rust {
            spelling: chosen,
            size,
            align: if natural { align } else { 1 },
        })
    }
}

fn scalar(ty: &Type) -> Result<Rust, String> {
    let (spelling, size) = match ty {
        Type::Int { width, signed } => match width {
            8 | 16 | 32 | 64 => (
                format!("{}{width}", if *signed { "i" } else { "u" }),
                *width as usize / 8,
            ),
            other => return Err(format!("a {other}-bit integer has no Rust type")),
        },
        Type::Float { width } => match width {
            16 => ("vkcompute::half::f16".to_string(), 2),
            32 => ("f32".to_string(), 4),
            64 => ("f64".to_string(), 8),
            other => return Err(format!("a {other}-bit float has no Rust type")),
        },
        Type::Bool => return Err("a boolean cannot be shared with the host".into()),
        other => return Err(format!("{} has no Rust type", other.describe())),
    };
    Ok(Rust {
        spelling,
        size,
        align: size,
    })
}

/// The generated module of `shader`.
pub(crate) fn module(shader: &Shader<'_>) -> Result<String, String> {
    let mut structs = Structs::default();
    let r = shader.reflected;
    let push = match &r.push {
        Some((ty, size)) => {
            let rust = structs.rust(ty, "Push")?;
            if rust.size != *size as usize {
                return Err(format!(
                    "the push constants span {size} bytes but their Rust type {}",
                    rust.size
                ));
            }
            Some(rust.spelling)
        }
        None => None,
    };
    let mut params = Vec::new();
    let mut args = Vec::new();
    let mut docs = String::new();
    let mut names = Vec::new();
    for b in &r.bindings {
        let (fallback, place) = if b.set == 0 {
            (
                format!("binding{}", b.binding),
                format!("binding {}", b.binding),
            )
        } else {
            (
                format!("set{}_binding{}", b.set, b.binding),
                format!("set {}, binding {}", b.set, b.binding),
            )
        };
        let mut name = snake(b.name.as_deref().unwrap_or(""), &fallback);
        while names.contains(&name) {
            name.push('_');
        }
        names.push(name.clone());
        let access = if b.read_only { "read only" } else { "written" };
        let ty = match (&b.block, &b.element) {
            (Some(block), _) => {
                let rust = structs.rust(block, &camel(&name))?;
                let what = match b.kind {
                    BindingKind::UniformBuffer => "a uniform buffer holding one".to_string(),
                    BindingKind::StorageBuffer => {
                        format!("a storage buffer ({access}) holding one")
                    }
                };
                let layout = match b.kind {
                    BindingKind::UniformBuffer => "std140",
                    BindingKind::StorageBuffer => "std430",
                };
                let _ = writeln!(
                    docs,
                    "        /// - `{name}`: {place}, {what} `{}` ({layout});",
                    rust.spelling
                );
                params.push(format!(
                    "{name}: &vkcompute::DeviceBuffer<{}>",
                    rust.spelling
                ));
                format!("{name}.arg()")
            }
            (None, Some((element, stride))) => {
                let rust = structs.rust(element, &camel(&format!("{name}_element")))?;
                let rust =
                    structs.padded(rust, *stride as usize, &format!("{}Element", camel(&name)))?;
                let _ = writeln!(
                    docs,
                    "        /// - `{name}`: {place}, elements of `{}`, {access};",
                    rust.spelling
                );
                params.push(format!(
                    "{name}: &vkcompute::DeviceBuffer<{}>",
                    rust.spelling
                ));
                format!("{name}.arg()")
            }
            (None, None) => {
                let _ = writeln!(
                    docs,
                    "        /// - `{name}`: {place}, {access}: a block of fixed members and a \
                     runtime array, which has no Rust\n        ///   type: a `KernelArg` of any \
                     buffer whose bytes follow the block's std430 layout;"
                );
                params.push(format!("{name}: vkcompute::KernelArg<'_>"));
                name.clone()
            }
        };
        args.push(ty);
    }
    if let Some(p) = &push {
        params.push(format!("push: &{p}"));
        let _ = writeln!(docs, "        /// - `push`: the push constants, a `{p}`.");
    }
    let push_arg = if push.is_some() { "push" } else { "&()" };
    let mut out = String::new();
    let versions = shader.validated_for.join(" and ");
    let _ = writeln!(
        out,
        "/// `{label}`, compiled and validated by vkcompute-build (SPIRV-Tools, Vulkan \
         {versions}).\n#[allow(dead_code, missing_docs)]\npub mod {module} {{",
        label = shader.label,
        module = shader.module
    );
    let _ = writeln!(
        out,
        "    /// The module's SPIR-V, as validated.\n    pub static SPIRV: &[u32] = &{:?};\n\
         \x20   /// The entry point.\n    pub const ENTRY: &str = {:?};\n\
         \x20   /// The kernel's label in errors and traces: the shader's file.\n    pub const LABEL: &str = {:?};",
        shader.words, shader.entry, shader.label
    );
    let [x, y, z] = r.local_size;
    let from_spec: Vec<String> = r
        .local_size_ids
        .iter()
        .zip(["x", "y", "z"])
        .filter_map(|(id, axis)| id.map(|id| format!("{axis} from `constant_id = {id}`")))
        .collect();
    let specialized = if from_spec.is_empty() {
        String::new()
    } else {
        format!(
            "\n    ///\n    /// The values built in ({}): `Kernel::load_with` with others \
             runs another\n    /// size (`kernel().local_size()` says which).",
            from_spec.join(", ")
        )
    };
    let _ = writeln!(
        out,
        "    /// The workgroup size (invocations in x, y and z).{specialized}\n    pub const LOCAL_SIZE: [u32; 3] = [{x}, {y}, {z}];"
    );
    let spec_names = spec_names(r);
    for (s, name) in r.spec.iter().zip(&spec_names) {
        let what = match (&s.name, local_size_axis(r, s)) {
            (Some(n), _) => format!("specialization constant `{n}`"),
            (None, Some(axis)) => format!(
                "the unnamed specialization constant that sets the workgroup size in {axis}"
            ),
            (None, None) => "the unnamed specialization constant".to_string(),
        };
        let set_by = if spec_field(s)?.is_some() {
            format!("the id `Spec::{name}` sets (and")
        } else {
            format!("not in `Spec` ({}; the id", kind_name(s.kind))
        };
        let _ = writeln!(
            out,
            "    /// The `constant_id` of {what}:\n    /// {set_by} \
             `vkcompute::KernelBuilder::specialize` takes).\n    pub const SPEC_{}: u32 = {};",
            name.to_uppercase(),
            s.id
        );
    }
    let (spec_struct, specialize) = spec_struct(r, &spec_names)?;
    out.push_str(&spec_struct);
    for (definition, _) in structs.defs.values() {
        for line in definition.lines() {
            let _ = writeln!(out, "    {line}");
        }
    }
    let _ = writeln!(
        out,
        "    /// The kernel of `{label}`, loaded on one device.\n\
         \x20   #[derive(Clone, Debug)]\n    pub struct Kernel(vkcompute::Kernel);\n\n\
         \x20   impl Kernel {{\n\
         \x20       /// Loads the kernel on `ctx`'s device with the specialization built in\n\
         \x20       /// (`Spec::default()`), through the checks of every load: structure,\n\
         \x20       /// capabilities, limits, index bounds.\n\
         \x20       pub fn load(ctx: &vkcompute::DeviceContext) -> vkcompute::Result<Kernel> {{\n\
         \x20           Kernel::load_with(ctx, &Spec::default())\n\
         \x20       }}\n\n\
         \x20       /// Loads the kernel on `ctx`'s device with the specialization constants\n\
         \x20       /// `spec`, through the same checks, read from the module as specialized:\n\
         \x20       /// a value that makes an array empty or block members overlap, or the\n\
         \x20       /// workgroup size or memory exceed the device's limits, is an error.\n\
         \x20       pub fn load_with(ctx: &vkcompute::DeviceContext, spec: &Spec) -> vkcompute::Result<Kernel> {{\n\
         \x20           let {spec_pattern} = *spec;\n\
         \x20           // SAFETY: SPIRV was validated by vkcompute-build with SPIRV-Tools for\n\
         \x20           // Vulkan {versions} with its specialization defaults (the runtime\n\
         \x20           // refuses a SPIR-V version the device's Vulkan version lacks). Other\n\
         \x20           // values change only the specialization constants `Spec` lists (of\n\
         \x20           // their declared types), and what they can make invalid in a module\n\
         \x20           // valid with its defaults the runtime refuses, reading the module as\n\
         \x20           // specialized: arrays of length 0 and block members that overlap\n\
         \x20           // (VUID-VkPipelineShaderStageCreateInfo-pSpecializationInfo-06719),\n\
         \x20           // specialization expressions whose result is undefined, and a\n\
         \x20           // workgroup size or memory beyond the device's limits.\n\
         \x20           let kernel = unsafe {{\n\
         \x20               vkcompute::Kernel::builder(SPIRV)\n\
         \x20                   .entry(ENTRY)\n\
         \x20                   .label(LABEL)\n{specialize}\
         \x20                   .build_unvalidated(ctx)\n\
         \x20           }}?;\n\
         \x20           Ok(Kernel(kernel))\n\
         \x20       }}\n\n\
         \x20       /// The loaded `vkcompute::Kernel` (for graphs and timing).\n\
         \x20       pub fn kernel(&self) -> &vkcompute::Kernel {{\n            &self.0\n        }}\n\n\
         \x20       /// Enqueues the kernel on `ctx`'s stream over `grid` workgroups (its\n        /// `vkcompute::DeviceContext::enqueue_function`, typed), with:\n{docs}\
         \x20       #[allow(clippy::too_many_arguments)]\n\
         \x20       pub fn enqueue(\n            &self,\n            ctx: &vkcompute::DeviceContext,\n\
         \x20           grid: impl Into<vkcompute::Grid>,\n{}\n        ) -> vkcompute::Result<()> {{\n\
         \x20           ctx.enqueue_function(&self.0, grid, &[{}], {push_arg})\n        }}\n    }}\n}}",
        params
            .iter()
            .map(|p| format!("            {p},"))
            .collect::<Vec<_>>()
            .join("\n"),
        args.join(", "),
        label = shader.label,
        spec_pattern = spec_pattern(r, &spec_names),
    );
    Ok(out)
}

/// The Rust name of each specialization constant (snake case): its own,
/// or for an unnamed one that sets the workgroup size `local_size_x` (y,
/// z), else `n<id>`; made unique.
fn spec_names(r: &Reflected) -> Vec<String> {
    let mut names: Vec<String> = Vec::new();
    for s in &r.spec {
        let fallback = local_size_axis(r, s)
            .map_or_else(|| format!("n{}", s.id), |axis| format!("local_size_{axis}"));
        let mut name = snake(s.name.as_deref().unwrap_or(""), &fallback);
        while names.contains(&name) {
            name.push('_');
        }
        names.push(name);
    }
    names
}

/// The axis (`x`, `y` or `z`) of the workgroup size `s` sets, if any.
fn local_size_axis(r: &Reflected, s: &SpecConstant) -> Option<&'static str> {
    r.local_size_ids
        .iter()
        .position(|id| *id == Some(s.id))
        .map(|i| ["x", "y", "z"][i])
}

/// How docs name a constant's type: `a 16-bit float`.
fn kind_name(kind: SpecKind) -> String {
    match kind {
        SpecKind::Bool => "a bool".into(),
        SpecKind::Int { width, signed } => format!(
            "a {width}-bit {} integer",
            if signed { "signed" } else { "unsigned" }
        ),
        SpecKind::Float { width } => format!("a {width}-bit float"),
    }
}

/// The Rust type of a specialization constant's value, and its default
/// as a Rust expression; `None` for the types no `SpecValue` sets (8- and
/// 16-bit integers and floats are left out of `Spec`).
fn spec_field(s: &SpecConstant) -> Result<Option<(&'static str, String)>, String> {
    let ty = match s.kind {
        SpecKind::Bool => "bool",
        SpecKind::Int {
            width: 32,
            signed: false,
        } => "u32",
        SpecKind::Int {
            width: 32,
            signed: true,
        } => "i32",
        SpecKind::Int {
            width: 64,
            signed: false,
        } => "u64",
        SpecKind::Int {
            width: 64,
            signed: true,
        } => "i64",
        SpecKind::Float { width: 32 } => "f32",
        SpecKind::Float { width: 64 } => "f64",
        _ => return Ok(None),
    };
    let unknown = || {
        format!(
            "the default of specialization constant {} is not known",
            s.id
        )
    };
    let value = match (ty, s.default.as_ref().ok_or_else(unknown)?) {
        ("bool", Value::Bool(b)) => b.to_string(),
        ("u32", Value::Int { bits, .. }) => (*bits as u32).to_string(),
        ("i32", Value::Int { bits, .. }) => (*bits as u32 as i32).to_string(),
        ("u64", Value::Int { bits, .. }) => bits.to_string(),
        ("i64", Value::Int { bits, .. }) => (*bits as i64).to_string(),
        ("f32", Value::Float { bits, .. }) => {
            let v = f32::from_bits(*bits as u32);
            if v.is_finite() {
                format!("{v:?}")
            } else {
                format!("f32::from_bits({bits:#x})")
            }
        }
        ("f64", Value::Float { bits, .. }) => {
            let v = f64::from_bits(*bits);
            if v.is_finite() {
                format!("{v:?}")
            } else {
                format!("f64::from_bits({bits:#x})")
            }
        }
        _ => return Err(unknown()),
    };
    Ok(Some((ty, value)))
}

/// `Spec` (a field per specialization constant a load can set, `Default`
/// the values built in), and the builder calls that set them.
fn spec_struct(r: &Reflected, names: &[String]) -> Result<(String, String), String> {
    let mut fields = String::new();
    let mut defaults = Vec::new();
    let mut specialize = String::new();
    let mut left_out = Vec::new();
    for (s, name) in r.spec.iter().zip(names) {
        let mut declared = match &s.name {
            Some(n) => format!("`{n}`, `constant_id = {}`", s.id),
            None => format!("`constant_id = {}`", s.id),
        };
        if let Some(axis) = local_size_axis(r, s) {
            declared.push_str(&format!(", the workgroup size in {axis}"));
        }
        match spec_field(s)? {
            Some((ty, value)) => {
                let _ = writeln!(
                    fields,
                    "        /// {declared} (built in: `{value}`).\n        pub {name}: {ty},"
                );
                defaults.push(format!("{name}: {value}"));
                let _ = writeln!(
                    specialize,
                    "                    .specialize(SPEC_{}, {name})",
                    name.to_uppercase()
                );
            }
            None => left_out.push(format!("{declared} ({})", kind_name(s.kind))),
        }
    }
    let left_out = if left_out.is_empty() {
        String::new()
    } else {
        format!(
            "\n    ///\n    /// Not here, keeping their built-in values (no value type of the \
             runtime sets\n    /// 8- and 16-bit constants): {}.",
            left_out.join(", ")
        )
    };
    let code = format!(
        "    /// The specialization constants `Kernel::load_with` sets, one field each\n\
         \x20   /// (named as the `SPEC_*` ids); `Default` is the values built in (the\n\
         \x20   /// shader's, or what `build.rs` set), which `Kernel::load` uses.{left_out}\n\
         \x20   #[derive(Clone, Copy, Debug, PartialEq)]\n\
         \x20   pub struct Spec {{\n{fields}    }}\n\n\
         \x20   #[allow(clippy::derivable_impls)]\n\
         \x20   impl Default for Spec {{\n\
         \x20       fn default() -> Self {{\n\
         \x20           Spec {{ {} }}\n\
         \x20       }}\n\
         \x20   }}\n",
        defaults.join(", ")
    );
    Ok((code, specialize))
}

/// The pattern that takes `Spec` apart: `Spec { n, scale }`.
fn spec_pattern(r: &Reflected, names: &[String]) -> String {
    let fields: Vec<&str> = r
        .spec
        .iter()
        .zip(names)
        .filter(|(s, _)| spec_field(s).is_ok_and(|f| f.is_some()))
        .map(|(_, n)| n.as_str())
        .collect();
    format!("Spec {{ {} }}", fields.join(", "))
}
