//! MPI for [vkcompute]: device buffers sent, received,
//! broadcast, gathered and reduced across the ranks of an MPI job.
//!
//! No MPI implementation knows Vulkan memory, so this crate brings the
//! device side: MPI (rsmpi over the system's MPI, Open MPI 4.1 on Debian
//! 12) moves bytes between pinned host buffers, vkcompute copies them to
//! and from the device, and the arithmetic of the reductions runs as
//! kernels on the device.
//!
//! ```no_run
//! use vkcompute::DeviceContext;
//! use vkcompute_mpi::{Communicator, ReduceOp};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! let (universe, _threading) = mpi::initialize_with_threading(mpi::Threading::Funneled)
//!     .ok_or("MPI was initialised already")?;
//! let ctx = DeviceContext::new()?;
//! let comm = Communicator::new(&universe.world(), &ctx)?;
//! let grads = ctx.enqueue_create_buffer::<f32>(1 << 20)?;
//! grads.enqueue_fill(comm.rank() as f32)?;
//! comm.allreduce(&grads, ReduceOp::Sum)?; // on every rank: 0 + 1 + ... + (size - 1)
//! # Ok(()) }
//! ```
//!
//! What goes where: every operation stages device memory through pinned
//! host memory ([`vkcompute::HostBuffer`]); nothing goes GPU to GPU
//! directly yet. Point-to-point messages travel in pieces
//! ([`Communicator::piece_bytes`]) whose device-to-host (or host-to-device)
//! copies overlap the MPI transfer of the piece before.
//!
//! Non-blocking messages: [`Communicator::isend`] and
//! [`Communicator::irecv`] return a [`Request`] (`wait`, `test`) over the
//! same protocol as `send` and `recv`; see [`Request`] for progress and for
//! what dropping an unfinished one does.
//!
//! Threads: MPI is the application's to initialise (`mpi::initialize` or
//! `initialize_with_threading`). A [`Communicator`] is used from the thread
//! that made it (it holds an rsmpi communicator, which is neither `Send`
//! nor `Sync`).

mod collective;
mod communicator;
mod element;
mod error;
mod header;
mod kernels;
mod raw;
mod request;

pub use communicator::{Buffer, Communicator, Place, DEFAULT_PIECE_BYTES, MAX_TAG};
pub use element::{Element, ElementType, KernelTypeToken, ReduceOp, Reducible};
pub use error::{Error, Result};
pub use request::Request;

/// The checked-in SPIR-V of the reduction kernels, by the name of the GLSL
/// file (`shaders/<name>.comp`) each comes from, for the test that checks
/// them (`tests/shipped_spirv.rs`).
#[doc(hidden)]
pub fn shipped_spirv() -> Vec<(&'static str, &'static [u8])> {
    kernels::MODULES
        .iter()
        .map(|(_, name, bytes)| (*name, *bytes))
        .collect()
}
