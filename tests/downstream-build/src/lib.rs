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
//! k.dispatch(ctx, 1, &x, &y, &saxpy_typed::Params::new(1.0, 4))
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
//! k.dispatch(ctx, 1, &x, &y, &saxpy_typed::Params::new(1.0, 4))
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
//! k.dispatch(ctx, 1, &y, &saxpy_typed::Params::new(1.0, 4))
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
//! k.dispatch(ctx, 1, &x, &y, &layout::Step::new(4, [0.0; 4]))
//! # }
//! ```

include!(concat!(env!("OUT_DIR"), "/vkcompute_kernels.rs"));
