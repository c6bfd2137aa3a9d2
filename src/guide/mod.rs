//! The guide: how vkcompute is used, topic by topic. Every example here is
//! a doctest that `make test` runs on lavapipe. The API reference is the
//! rest of this documentation; ARCHITECTURE.md in the repository has the
//! code layout, the invariants and the design decisions.
//!
//! - [`own_kernels`]: your GLSL or SPIR-V, loaded safely, and what is checked.
//! - [`memory`]: buffers, views, copies and fills, mapping, the two memory
//!   paths, and the order work runs in.
//! - [`streams_and_events`]: several streams, events, device timing and
//!   `async`.
//! - [`graphs`]: record once, replay with parameters.
//! - [`sharing`]: memory exported to other contexts, processes and APIs.
//! - [`tracing`]: trace files and labels.
//! - [`printf`]: printing and asserting from a kernel.
//! - [`errors`]: what goes wrong, and what stays usable.
//! - [`building`]: cargo features and what each needs at build time.

#[doc = include_str!("own_kernels.md")]
pub mod own_kernels {}
#[doc = include_str!("memory.md")]
pub mod memory {}
#[doc = include_str!("streams_and_events.md")]
pub mod streams_and_events {}
#[doc = include_str!("graphs.md")]
pub mod graphs {}
#[doc = include_str!("sharing.md")]
pub mod sharing {}
#[doc = include_str!("tracing.md")]
pub mod tracing {}
#[doc = include_str!("printf.md")]
pub mod printf {}
#[doc = include_str!("errors.md")]
pub mod errors {}
#[doc = include_str!("building.md")]
pub mod building {}
