//! GPU compute over Vulkan: typed device buffers, asynchronous copies and
//! fills, host mapping and kernel dispatch, on NVIDIA, AMD, Intel and Apple
//! GPUs and on lavapipe (Mesa's CPU driver).
//!
//! The model is Mojo's `DeviceContext` / `DeviceBuffer`: a [`DeviceContext`]
//! is one device plus one in-order stream of work; buffers are created on
//! it, and every `enqueue_*` call returns at once while its work runs after
//! everything enqueued before it.
//!
//! ```
//! use vkcompute::DeviceContext;
//!
//! # fn main() -> vkcompute::Result<()> {
//! let ctx = DeviceContext::new()?;
//! let x = ctx.enqueue_create_buffer::<f32>(1024)?;
//! let host: Vec<f32> = (0..1024).map(|i| i as f32).collect();
//! x.enqueue_copy_from(&host[..])?; // staged at once: `host` is free again
//! let y = ctx.enqueue_create_buffer::<f32>(1024)?;
//! y.enqueue_fill(1.0)?;
//! y.enqueue_copy_from(&x)?;
//! assert_eq!(y.to_vec()?, host);
//! # Ok(()) }
//! ```
//!
//! The [`guide`] has a page per topic: your own kernels, memory, streams
//! and events, graphs, sharing, tracing, errors.
//!
//! # Names
//!
//! One rule names the whole API; Mojo's names stay where Mojo has them
//! (`enqueue_create_buffer`, `enqueue_copy_to`/`_from`, `enqueue_fill`,
//! `enqueue_function`, `enqueue_wait_for`, `map_to_host`, `synchronize`,
//! `create_sub_buffer`, `reassign_ownership_to`).
//!
//! - **`enqueue_`** means *stream-ordered*: the call checks its arguments,
//!   records the work on the context's stream and returns; the work runs
//!   on the device after everything enqueued before it on that stream
//!   (`enqueue_record_event` too: its event is reached in that order). A
//!   method without `enqueue_` either blocks the host until what it needs
//!   is done (`synchronize`, `map_to_host`, `to_vec`, `Event::wait`) or
//!   touches host state only (`new_stream`, `label`, `capture_graph`). A
//!   blocking call's `_async` twin returns a future instead of blocking
//!   (`to_vec_async`, `map_to_host_async`), its `_timeout` twin gives up
//!   after a time (`synchronize_timeout`, `Event::wait_timeout`).
//! - **`enqueue_wait_*`** is the stream waiting *on the device* for
//!   something: another stream (`enqueue_wait_for`), an event
//!   (`enqueue_wait_event`), a semaphore value (`enqueue_wait_semaphore`),
//!   a sync file (`enqueue_wait_sync_fd`). The host never blocks in one;
//!   the host waits for a stream with its `synchronize`, for an event or
//!   a semaphore with its `wait`.
//! - **One verb per concept.** A graph captures the stream's operations
//!   under the stream's names and argument order, the stream method's
//!   receiver first (`GraphCapture::enqueue_fill(&buffer, value)` captures
//!   `buffer.enqueue_fill(value)`). Sharing is `export_<what>_<handle>` and
//!   `import_<what>_<handle>`: what is shared, then the platform's
//!   handle (`import_buffer_fd`, `export_semaphore_win32`,
//!   `ExportedMemoryFd`), `<what>` left out where it is the receiver
//!   (`DeviceBuffer::export_fd`), as a typed kernel of `vkcompute-build`
//!   is enqueued with `kernel.enqueue(&ctx, ..)`, the stream's
//!   `enqueue_function` with the kernel as receiver.
//! - **Builders and options** take and return `self` by value. A builder
//!   ends in `build(..)` (`KernelBuilder`); options are handed to the call
//!   that uses them (`ContextOptions` to
//!   `DeviceContext::with_options`, `GraphParams` to `enqueue_graph_with`).
//!   A `GraphCapture` is no builder but a recording: its `enqueue_*` take
//!   `&mut self` and `finish()` ends it.
//! - **Kernels**: one loader per source, SPIR-V (words or `.spv` bytes)
//!   or GLSL: `Kernel::new` and `Kernel::from_glsl`, and one builder for
//!   the loading options, `KernelBuilder`: `Kernel::builder(spirv)`, or
//!   for GLSL `Kernel::glsl(source)` (a `GlslSource`: the compiler's
//!   options) then `.compile()`. What skips a check is the `unsafe` twin
//!   of the checked form (`new_unvalidated`, `build_unvalidated`).
//! - **Labels**: `label()` returns a `String` on every type. `with_label`
//!   (on contexts, device and host buffers) labels the object itself, so
//!   every clone and view shows the new label; kernels and graphs are
//!   labelled when made (`label` on a kernel builder or a graph capture)
//!   and keep it.
//! - **Diagnostics and raw handles** are grouped away from the model:
//!   `ctx.diagnostics()` (validation messages, live objects, memory
//!   held, the pipeline cache) and `ctx.raw()` (the `ash` handles, the
//!   queue family, the raw limits).
//! - **No aliases**: every public item has one path, and no old name is
//!   kept beside a new one.

// Unsafe code lives in `vk` (the Vulkan objects and mapped memory) and in
// the few public raw entry points, each allowed where it stands.
#![deny(unsafe_code)]
// Feature badges on docs.rs (`--cfg docsrs`, nightly rustdoc).
#![cfg_attr(docsrs, feature(doc_cfg))]

// The modules that add `DeviceContext` methods, in the reading order of
// its documentation (rustdoc lists a type's `impl` blocks in module order):
// contexts and streams, buffers, host buffers, kernels, indirect dispatch,
// events, graphs, sharing, then `trim` and the accessors of diagnostics
// and raw handles.
mod context;

mod buffer;

mod host;

mod kernel;

mod indirect;

mod event;

mod graph;

mod external;

mod introspect;

// The rest.
mod batch_pool;
mod capabilities;
mod display;
mod enqueue;
mod error;
mod fill;
mod garbage;
#[cfg(feature = "glsl")]
mod glsl;
pub mod guide;
mod hazard;
mod interop;
mod options;
mod recorder;
mod reflect;
mod resource;
mod spirv_check;
#[cfg(any(feature = "build", feature = "glsl"))]
#[cfg_attr(not(feature = "build"), allow(dead_code))]
mod spirv_source;
mod staging;
mod stream;
mod trace;
mod transfer;
mod view;
#[allow(
    unsafe_code,
    reason = "the layer of raw Vulkan calls and mapped memory"
)]
mod vk;

/// The SPIR-V of the kernels that ship with vkcompute (`shaders/*.comp`,
/// compiled and validated ahead of time into `shaders/spv/`, which the
/// package carries), each ready for [`Kernel::new`] with entry
/// point `main`: `SAXPY` (`y = a * x + y`, 2D grids), `VECTOR_ADD`
/// (workgroup size set by specialization constant 0), `REDUCE_SUM` (one
/// pass of a parallel sum), `STORE` (writes one element), `ADD_ONE` (adds 1
/// to each of `n` `u32`s, 64 per workgroup), `MATMUL` (`C = A * B` of
/// row-major `n` x `n` `f32` matrices, `n` a multiple of 16, in 16 x 16
/// shared-memory tiles; `(n / 16, n / 16)` workgroups), `FILL` (the kernel behind
/// `enqueue_fill`) and `CLAMP_GROUPS` (the guard before every indirect
/// dispatch: see [`DeviceContext::enqueue_function_indirect`]).
pub mod shaders {
    include!(concat!(env!("OUT_DIR"), "/shaders.rs"));
}

#[cfg(any(feature = "build", feature = "glsl"))]
#[cfg_attr(not(feature = "build"), allow(dead_code))]
mod shader_build;

/// Compiling a crate's own GLSL shaders in its `build.rs` (feature `build`):
/// a flat folder of `*.comp` into `$OUT_DIR/shaders.rs`.
///
/// For your own kernels, prefer the companion crate `vkcompute-build` (a
/// build-dependency that does not compile this runtime a second time): it
/// takes a tree of shaders with defines, includes, entry points, targets and
/// specialization defaults, validates each module, and generates typed
/// kernels that load on default features. This module stays for crates that
/// want only the SPIR-V:
///
/// ```no_run
/// // build.rs, with `vkcompute = { features = ["build"] }` as a build-dependency
/// let out = std::path::PathBuf::from(std::env::var("OUT_DIR").unwrap());
/// vkcompute::build::compile_shaders("shaders".as_ref(), &out).unwrap();
/// // then, in the crate: include!(concat!(env!("OUT_DIR"), "/shaders.rs"));
/// ```
#[cfg(feature = "build")]
#[cfg_attr(docsrs, doc(cfg(feature = "build")))]
pub mod build {
    pub use crate::shader_build::{compile_glsl, compile_shaders};
}

/// Test hooks (feature `fault-injection`); not part of the supported API.
#[cfg(feature = "fault-injection")]
#[doc(hidden)]
pub mod testing;

pub use buffer::{DeviceBuffer, OwnedRawBuffer};
pub use context::{DeviceContext, RawContext};
pub use error::{Error, KernelAssertion, Result};
pub use event::Event;
/// Sharing memory and semaphores with other devices, processes and APIs:
/// the types of `DeviceContext`'s sharing methods (see the
/// [sharing guide](crate::guide::sharing)).
pub mod sharing {
    pub use crate::external::{
        AlignedHostMemory, ExportedMemoryWin32, ExportedSemaphoreWin32, ExternalMemoryInfo,
        ExternalSemaphore, MemoryHandleType, SharedAliases, EXTERNAL_MEMORY_INFO_BYTES,
    };
    #[cfg(unix)]
    pub use crate::external::{ExportedMemoryFd, ExportedSemaphoreFd};
    pub use crate::vk::Win32Handle;
}

/// What a device offers, beside [`DeviceInfo`] at the
/// root: its kind, limits, kernel features and memory, and how a context
/// chooses one.
pub mod device {
    pub use crate::vk::{
        ComputeLimits, DeviceKind, DeviceSelector, FreeMemorySource, KernelFeatures, MemoryInfo,
        SubgroupInfo,
    };
}

/// The validation layers' messages, as a context collects them.
pub mod validation {
    pub use crate::vk::{Severity, ValidationLog, ValidationMessage};
}

/// A kernel's interface, as vkcompute reads it from its SPIR-V.
pub mod reflection {
    pub use crate::reflect::{BindingAlias, BindingInfo, BindingKind, SpecConstantInfo};
}
#[cfg(feature = "glsl")]
#[cfg_attr(docsrs, doc(cfg(feature = "glsl")))]
pub use glsl::{GlslOptimization, GlslSource, GlslTarget};
pub use graph::{DispatchId, Graph, GraphCapture, GraphParams};
pub use host::{HostBuffer, HostSlice, HostSliceMut, MappedBuffer};
pub use kernel::{Grid, Kernel, KernelArg, KernelBuilder, SpecValue, Spirv};
pub use options::ContextOptions;
pub use stream::printf::{PrintfLine, PrintfOutput};
/// The text of `vkcompute.glsl` (`#include <vkcompute.glsl>`: printf and
/// `VK_ASSERT`), which vkcompute's own GLSL compilation finds by itself;
/// write it beside your shaders for another compiler. See the
/// [printf guide](crate::guide::printf).
pub const GLSL_INCLUDE: &str = vkcompute_spirv::printf::INCLUDE;
pub use introspect::{Diagnostics, RawHandles};
pub use stream::batches::LiveObjects;
pub use view::{CopyDestination, CopySource, RawBufferRef};
pub use vk::DeviceInfo;

/// Half-precision floats (`f16`, `bf16`) from the `half` crate, usable as
/// buffer elements.
pub use half;

/// The `ash` crate this version of vkcompute is built on, for raw handles.
pub use ash;

/// The `bytemuck` crate whose `Pod` push constants and elements are, for
/// code generated by `vkcompute-build` (`#[bytemuck(crate = "vkcompute::bytemuck")]`).
pub use bytemuck;
