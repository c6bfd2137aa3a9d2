//! The kernels vkcompute-build generated from `shaders/`.
//!
//! The generated types make wrong launches compile errors. This compiles:
//!
//! ```no_run
//! # fn f(ctx: &vkcompute::DeviceContext) -> vkcompute::Result<()> {
//! use downstream_build::saxpy_typed;
//! let k = saxpy_typed::Kernel::load(ctx)?;
//! let x = ctx.enqueue_create_buffer::<f32>(4)?;
//! let y = ctx.enqueue_create_buffer::<f32>(4)?;
//! k.enqueue(ctx, 1, &x, &y, &saxpy_typed::Params::new(1.0, 4))
//! # }
//! ```
//!
//! A buffer of the wrong element type does not:
//!
//! ```compile_fail,E0308
//! # fn f(ctx: &vkcompute::DeviceContext) -> vkcompute::Result<()> {
//! use downstream_build::saxpy_typed;
//! let k = saxpy_typed::Kernel::load(ctx)?;
//! let x = ctx.enqueue_create_buffer::<u32>(4)?;
//! let y = ctx.enqueue_create_buffer::<f32>(4)?;
//! k.enqueue(ctx, 1, &x, &y, &saxpy_typed::Params::new(1.0, 4))
//! # }
//! ```
//!
//! Nor does a missing buffer:
//!
//! ```compile_fail,E0061
//! # fn f(ctx: &vkcompute::DeviceContext) -> vkcompute::Result<()> {
//! use downstream_build::saxpy_typed;
//! let k = saxpy_typed::Kernel::load(ctx)?;
//! let y = ctx.enqueue_create_buffer::<f32>(4)?;
//! k.enqueue(ctx, 1, &y, &saxpy_typed::Params::new(1.0, 4))
//! # }
//! ```
//!
//! Nor another shader's push constants:
//!
//! ```compile_fail,E0308
//! # fn f(ctx: &vkcompute::DeviceContext) -> vkcompute::Result<()> {
//! use downstream_build::{layout, saxpy_typed};
//! let k = saxpy_typed::Kernel::load(ctx)?;
//! let x = ctx.enqueue_create_buffer::<f32>(4)?;
//! let y = ctx.enqueue_create_buffer::<f32>(4)?;
//! k.enqueue(ctx, 1, &x, &y, &layout::Step::new(4, [0.0; 4]))
//! # }
//! ```
//!
//! Nor a buffer of `u32` where the shader declares a fixed-size storage
//! block (`hist::Counters`):
//!
//! ```compile_fail,E0308
//! # fn f(ctx: &vkcompute::DeviceContext) -> vkcompute::Result<()> {
//! use downstream_build::hist;
//! let k = hist::Kernel::load(ctx)?;
//! let values = ctx.enqueue_create_buffer::<u32>(4)?;
//! let counters = ctx.enqueue_create_buffer::<u32>(17)?;
//! k.enqueue(ctx, 1, &values, &counters, &hist::Push::new(4))
//! # }
//! ```
//!
//! A kernel specialized at load keeps its typed `enqueue`:
//!
//! ```no_run
//! # fn f(ctx: &vkcompute::DeviceContext) -> vkcompute::Result<()> {
//! use downstream_build::weighted;
//! let spec = weighted::Spec { taps: 2, ..weighted::Spec::default() };
//! let k = weighted::Kernel::load_with(ctx, &spec)?;
//! let out = ctx.enqueue_create_buffer::<f32>(64)?;
//! let w = ctx.enqueue_create_buffer::<weighted::Weights>(1)?;
//! k.enqueue(ctx, 1, &out, &w)
//! # }
//! ```
//!
//! and takes its own kernel's `Spec` only:
//!
//! ```compile_fail,E0308
//! # fn f(ctx: &vkcompute::DeviceContext) -> vkcompute::Result<()> {
//! use downstream_build::{layout, weighted};
//! let k = weighted::Kernel::load_with(ctx, &layout::Spec::default())?;
//! # Ok(()) }
//! ```

include!(concat!(env!("OUT_DIR"), "/vkcompute_kernels.rs"));
