//! A dispatch's arguments: placed at their bindings (in order, or where
//! each says), arrays of buffers opened, element types checked against
//! what the kernel declares, and written arguments checked for overlap.

use std::sync::Arc;

use smallvec::SmallVec;

use super::{ArgKind, BufferArg, KernelArg};
use crate::error::{Error, Result};
use crate::view::View;
use crate::vk::pipeline::DESCRIPTORS_PER_POOL;

/// How an argument is named in errors: its buffer's label and type, else
/// its type.
pub(super) fn arg_name(arg: &BufferArg<'_>) -> String {
    match arg.view.memory.label() {
        Some(label) => format!("`{label}` ({})", (arg.type_name)()),
        None => (arg.type_name)(),
    }
}

/// Every buffer of `args`, arrays and nested arrays opened.
pub(super) fn flatten_any<'a>(args: &[KernelArg<'a>]) -> impl Iterator<Item = &'a View> {
    let mut stack: Vec<KernelArg<'a>> = args.iter().rev().copied().collect();
    std::iter::from_fn(move || loop {
        match stack.pop()?.kind {
            ArgKind::Buffer(b) => return Some(b.view),
            ArgKind::Array(elements) => stack.extend(elements.iter().rev().copied()),
        }
    })
}

/// Refuses a buffer of numbers whose element type is not the one the
/// binding declares (a `u32` buffer for a `float[]`), unless it was passed
/// with `arg_reinterpret`.
pub(super) fn check_element_type(
    arg: &BufferArg<'_>,
    binding: &crate::reflect::BindingInfo,
) -> Result<(), String> {
    if arg.reinterpret {
        return Ok(());
    }
    let given = (arg.element)();
    if !crate::reflect::is_number_type(given) {
        return Ok(());
    }
    let mut declared = binding
        .aliases
        .iter()
        .filter_map(|a| a.element_type.as_deref())
        .peekable();
    if declared.peek().is_none() || declared.any(|d| crate::reflect::spells_element(given, d)) {
        return Ok(());
    }
    let declared: Vec<&str> = binding
        .aliases
        .iter()
        .filter_map(|a| a.element_type.as_deref())
        .collect();
    let given = crate::reflect::element_spelling(given);
    Err(format!(
        "{} has `{given}` elements but the kernel reads the binding as `{}`; pass a buffer of \
         that type, or `arg_reinterpret()` to bind the bytes as they are",
        arg_name(arg),
        declared.join("` or `")
    ))
}

/// One buffer a dispatch binds: argument `index` (element `element` of
/// it, where the argument is an array of buffers) at `binding`.
pub(super) struct Bound<'b, 'a> {
    pub(super) index: usize,
    pub(super) element: Option<usize>,
    pub(super) arg: &'b BufferArg<'a>,
    pub(super) binding: &'a crate::reflect::BindingInfo,
}

impl Bound<'_, '_> {
    /// How errors name it: "argument 2" or "element 1 of argument 2".
    fn position(&self) -> String {
        match self.element {
            Some(e) => format!("element {e} of argument {}", self.index),
            None => format!("argument {}", self.index),
        }
    }
}

/// Every buffer `args` bind, in descriptor order: an array argument gives
/// one per element. Refuses an array where the binding takes one buffer,
/// one buffer where it takes an array, and an array of the wrong length.
pub(super) fn flatten<'b, 'a>(
    label: &str,
    bindings: &'a [crate::reflect::BindingInfo],
    args: &'b [(usize, KernelArg<'a>)],
) -> Result<SmallVec<[Bound<'b, 'a>; 8]>> {
    let mut out = SmallVec::with_capacity(args.len());
    for ((index, arg), binding) in args.iter().zip(bindings) {
        let index = *index;
        let bad = |reason: String| Error::Argument {
            kernel: label.to_string(),
            index,
            binding: binding.binding,
            reason,
        };
        let wanted = binding.array_len.unwrap_or(1) as usize;
        match (&arg.kind, binding.array_len) {
            (ArgKind::Array([]), _) if binding.runtime_sized => {
                return Err(bad(
                    "an empty array was given; a runtime-sized array binds at least one buffer"
                        .into(),
                ))
            }
            // Refused before any check that grows with the length.
            (ArgKind::Array(elements), _)
                if binding.runtime_sized && elements.len() > DESCRIPTORS_PER_POOL as usize =>
            {
                return Err(bad(format!(
                    "an array of {} buffers was given; vkcompute binds at most \
                     {DESCRIPTORS_PER_POOL} buffers of one kind in a kernel",
                    elements.len()
                )))
            }
            (ArgKind::Buffer(arg), None) => out.push(Bound {
                index,
                element: None,
                arg,
                binding,
            }),
            (ArgKind::Buffer(_), Some(n)) => {
                return Err(bad(format!(
                    "the binding is an array of {n} buffers; pass `KernelArg::array` of {n} \
                     buffers"
                )))
            }
            (ArgKind::Array(elements), _) if elements.len() != wanted && !binding.runtime_sized => {
                return Err(bad(format!(
                    "an array of {} buffers was given but the binding takes {}",
                    elements.len(),
                    match binding.array_len {
                        Some(n) => format!("an array of {n}"),
                        None => "one buffer (or an array of one)".into(),
                    }
                )))
            }
            (ArgKind::Array(elements), _) => {
                for (element, e) in elements.iter().enumerate() {
                    let ArgKind::Buffer(arg) = &e.kind else {
                        return Err(bad(format!(
                            "element {element} is itself an array; an array argument holds \
                             buffers"
                        )));
                    };
                    out.push(Bound {
                        index,
                        element: Some(element),
                        arg,
                        binding,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// How errors list a kernel's bindings: `[0, 1]`, or `[(0, 0), (1, 2)]`
/// (set, binding) where it uses several sets.
pub(super) fn binding_list(bindings: &[crate::reflect::BindingInfo]) -> String {
    if bindings
        .iter()
        .all(|b| b.set == bindings[0].set && b.set == 0)
    {
        format!(
            "{:?}",
            bindings.iter().map(|b| b.binding).collect::<Vec<_>>()
        )
    } else {
        format!(
            "{:?} (set, binding)",
            bindings
                .iter()
                .map(|b| (b.set, b.binding))
                .collect::<Vec<_>>()
        )
    }
}

/// `args` in the order of `bindings`: as given, or, where they say where
/// they go ([`KernelArg::at`]), placed there. Each keeps the position the
/// caller gave it, for errors.
pub(super) fn in_binding_order<'a>(
    label: &str,
    bindings: &[crate::reflect::BindingInfo],
    args: &[KernelArg<'a>],
) -> Result<SmallVec<[(usize, KernelArg<'a>); 8]>> {
    let placed = args.iter().filter(|a| a.at.is_some()).count();
    if placed == 0 {
        return Ok(args.iter().copied().enumerate().collect());
    }
    let bad = |index: usize, binding: u32, reason: String| Error::Argument {
        kernel: label.to_string(),
        index,
        binding,
        reason,
    };
    if placed < args.len() {
        let index = args.iter().position(|a| a.at.is_none()).unwrap_or(0);
        return Err(bad(
            index,
            bindings.get(index).map_or(0, |b| b.binding),
            format!(
                "it does not say where it goes, but {placed} other argument(s) do                  (`KernelArg::at`): give every argument its (set, binding), or none"
            ),
        ));
    }
    let mut out: SmallVec<[(usize, KernelArg<'a>); 8]> = SmallVec::with_capacity(args.len());
    for b in bindings {
        let mut at = args
            .iter()
            .enumerate()
            .filter(|(_, a)| a.at == Some((b.set, b.binding)));
        match (at.next(), at.next()) {
            (Some((index, arg)), None) => out.push((index, *arg)),
            (Some(_), Some((index, _))) => {
                return Err(bad(
                    index,
                    b.binding,
                    format!("set {}, binding {} is given twice", b.set, b.binding),
                ))
            }
            (None, _) => {
                // Some argument names a place the kernel does not have.
                let (index, stray) = args
                    .iter()
                    .enumerate()
                    .find(|(_, a)| !bindings.iter().any(|b| a.at == Some((b.set, b.binding))))
                    .map_or((0, None), |(i, a)| (i, a.at));
                let (set, binding) = stray.unwrap_or((b.set, b.binding));
                return Err(bad(
                    index,
                    binding,
                    format!(
                        "the kernel has no binding {binding} in set {set}, or set {}, binding {} \
                         is not given; its bindings are {}",
                        b.set,
                        b.binding,
                        binding_list(bindings)
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// Refuses two bound buffers whose byte ranges overlap in one buffer where
/// the kernel writes at least one of their bindings.
pub(super) fn check_aliasing(label: &str, bound: &[Bound<'_, '_>]) -> Result<()> {
    let range = |b: &Bound<'_, '_>| b.arg.view.offset..b.arg.view.offset + b.arg.view.bytes;
    for (first, a) in bound.iter().enumerate() {
        for b in &bound[first + 1..] {
            let (a_read, b_read) = (a.binding.read_only, b.binding.read_only);
            if a_read && b_read {
                continue;
            }
            let (ra, rb) = (range(a), range(b));
            if Arc::ptr_eq(&a.arg.view.memory, &b.arg.view.memory)
                && ra.start < rb.end
                && rb.start < ra.end
            {
                let written = match (a_read, b_read) {
                    (false, false) => "both".to_string(),
                    (false, true) => a.position(),
                    _ => b.position(),
                };
                return Err(Error::AliasedArguments {
                    kernel: label.to_string(),
                    first: a.index,
                    second: b.index,
                    detail: format!(
                        "{} (bytes {ra:?}) and {} (bytes {rb:?}) share one buffer, and the \
                         kernel writes {written}",
                        a.position(),
                        b.position()
                    ),
                });
            }
        }
    }
    Ok(())
}
