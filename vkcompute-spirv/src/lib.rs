//! The kernel model of [vkcompute](https://docs.rs/vkcompute): one reader of
//! SPIR-V compute modules and the rewriting that makes a module safe to
//! hand to a Vulkan driver. The vkcompute runtime loads every kernel
//! through it, and `vkcompute-build` generates its typed kernels from it,
//! so the build time and the run time see one kernel. Nothing here touches
//! Vulkan.
//!
//! A kernel goes through it in this order (the runtime's loader does each
//! step, with the device's limits in between):
//!
//! 1. [`words::check_structure`], [`rules::check`] and
//!    [`rules::check_type_nesting`]: what must hold before anything else
//!    reads the module;
//! 2. [`Module::read`]: the reading (decoration groups applied,
//!    specialization expressions evaluated), and from it
//!    [`Module::interface`]: bindings with their sets, push constants,
//!    workgroup size and memory, specialization constants, call depth,
//!    private memory; [`uses::module_use`]: capabilities and pointer use;
//! 3. [`rules::freeze`]: the specialization written into the module, then
//!    [`rules::check_constant_indices`] on the result;
//! 4. [`bounds::prepare`]: one entry point kept, runtime-sized arrays of
//!    buffers sized, specialization expressions folded, indices clamped,
//!    printf calls rewritten; then the interface read again from the
//!    result, which is what the driver gets and what every check looks
//!    at;
//! 5. `validate::validate` (feature `validate`): SPIRV-Tools, once, on
//!    the prepared module (the original and the frozen one only where it
//!    fails, to say whose error it is).
//!
//! This crate is vkcompute's own; its API follows vkcompute's needs and
//! versions with it.

#![deny(unsafe_code)]

pub mod bounds;
mod eval;
#[cfg(feature = "glsl")]
pub mod glsl;
pub mod interface;
mod module;
pub mod printf;
pub mod rules;
mod spec;
mod types;
pub mod uses;
#[cfg(feature = "validate")]
pub mod validate;
pub mod words;

pub use eval::Value;
pub use interface::{
    Alias, Binding, BindingKind, Count, Interface, SpecConstant, SpecKind, WorkgroupVariable,
};
pub use module::{EntryPoint, Mode, Module};
pub use spec::SpecValue;
pub use types::{Member, Type, MAX_TYPE_NODES};

// Linked for its native library (SPIRV-Tools inside shaderc), which
// `validate` calls; no Rust item of the crate is used.
#[cfg(feature = "validate")]
extern crate shaderc_sys;

/// What a float atomic does, for the device feature it needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FloatAtomicOp {
    /// A load, store or exchange.
    Exchange,
    /// `OpAtomicFAddEXT`.
    Add,
    /// `OpAtomicFMinEXT` or `OpAtomicFMaxEXT`.
    MinMax,
}

#[cfg(test)]
mod tests;
