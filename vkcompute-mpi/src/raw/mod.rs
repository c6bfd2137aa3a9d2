//! The raw layer: every call into MPI, libc and vkcompute's unchecked
//! entry points that this crate makes, and the only `unsafe` code in it.
//! Everything above it is safe Rust over the safe functions here.
//!
//! Each MPI call checks its return code (the communicator has
//! `MPI_ERRORS_RETURN`) and turns it into an [`Error::Mpi`], and splits a
//! byte range too large for one MPI count (a C `int`) into several
//! messages. Everything moves as `MPI_BYTE`-sized `uint8_t` elements; the
//! types are the callers' business. rsmpi's safe wrappers ignore MPI's
//! return codes (they rely on the default `MPI_ERRORS_ARE_FATAL`), so the
//! calls go through its `ffi` module here instead.
//!
//! Memory that MPI reads or writes while a transfer is under way is held
//! here until MPI lets go of it: borrowed memory only within one call
//! that returns once every transfer is over ([`blocking`], [`pieces`]),
//! owned memory in a [`Held`] buffer that leaks what it still lends to
//! MPI when dropped ([`held`]). A wait that passes the communicator's
//! timeout cancels, leaks or aborts ([`wait`]).
#![allow(
    unsafe_code,
    reason = "the raw layer: MPI, libc and vkcompute's unchecked calls"
)]

mod blocking;
mod comm;
mod device;
mod fd;
mod held;
mod pieces;
mod pinned;
mod reduce;
mod shm;
mod transfer;
mod wait;

pub(crate) use blocking::{
    allgather, barrier, broadcast, exchange_with_peers, recv, recv_all, send, send_all, sendrecv,
    sendrecv_pieces,
};
pub(crate) use comm::{
    duplicate, is_main_thread, node_leader, set_errors_return, thread_level, OwnedComm,
};
pub(crate) use device::{import_peer_memory, shipped_kernel, Shape, SHIPPED};
pub(crate) use fd::{random_bytes, recv_fd_now, send_fd, PeerFd};
pub(crate) use held::Held;
pub(crate) use pieces::{exchange_pieces, Landing, Source, Spare, Wire};
pub(crate) use pinned::{copy_part_ranges, PinnedSlot, COPY_PART_BYTES};
pub(crate) use reduce::{reduce_pieces, Reduction};
pub(crate) use shm::{create_shared_host, import_shared_host};
pub(crate) use wait::{
    pause, streaming, suspect_bound, Patience, PendingOp, Pollable, Ticket, WaitState,
};

use std::os::raw::c_int;
use std::sync::Arc;

use mpi::ffi;

use crate::error::{Error, Result};

/// The most bytes one MPI message of this crate carries (1 GiB, well under
/// `i32::MAX`); longer ranges travel as several messages in order.
pub(crate) const MAX_MESSAGE: usize = 1 << 30;

/// A raw communicator handle (`MPI_Comm`), valid while the
/// [`Communicator`](crate::Communicator) that holds its owner lives, and
/// the state its waits share: the timeout, and whether one passed.
#[derive(Clone)]
pub(crate) struct Comm {
    pub(crate) handle: ffi::MPI_Comm,
    pub(crate) state: Arc<WaitState>,
}

// SAFETY: an MPI handle is a plain value, which any thread may hold and
// pass to MPI; whether a thread may call MPI at all is the thread level's
// rule, which `Communicator` enforces before every call it makes
// (`Communicator::check_thread`).
unsafe impl Send for Comm {}
// SAFETY: as for `Send`: sharing the value is sharing an integer-like handle.
unsafe impl Sync for Comm {}

impl Comm {
    pub(crate) fn new(handle: ffi::MPI_Comm) -> Comm {
        Comm {
            handle,
            state: Arc::new(WaitState::default()),
        }
    }
}

pub(crate) fn byte_type() -> ffi::MPI_Datatype {
    // SAFETY: a constant handle that rsmpi's C shim initialises statically.
    unsafe { ffi::RSMPI_UINT8_T }
}

/// `MPI_Error_string` of `code`.
fn error_string(code: c_int) -> String {
    let mut text = vec![0u8; ffi::MPI_MAX_ERROR_STRING as usize + 1];
    let mut len: c_int = 0;
    // SAFETY: `text` holds MPI_MAX_ERROR_STRING characters and more, as the
    // call requires; `len` is a valid out-pointer.
    let rc = unsafe { ffi::MPI_Error_string(code, text.as_mut_ptr().cast(), &mut len) };
    if rc != 0 {
        return "(MPI_Error_string failed too)".into();
    }
    text.truncate(len.clamp(0, text.len() as c_int) as usize);
    String::from_utf8_lossy(&text).into_owned()
}

/// `Ok` for `MPI_SUCCESS`, else the error of `call` within `op`.
pub(crate) fn check(op: &'static str, call: &'static str, rc: c_int) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::Mpi {
            op,
            call,
            code: rc,
            message: error_string(rc),
        })
    }
}

/// The pieces of `len` bytes that travel as separate messages.
pub(crate) fn pieces(len: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..len.div_ceil(MAX_MESSAGE).max(1))
        .map(move |i| i * MAX_MESSAGE..((i + 1) * MAX_MESSAGE).min(len))
}

/// The received byte count of `status`.
fn received(op: &'static str, status: &ffi::MPI_Status) -> Result<usize> {
    let mut count: c_int = 0;
    // SAFETY: `status` was filled in by a completed receive.
    check(op, "MPI_Get_count", unsafe {
        ffi::MPI_Get_count(status, byte_type(), &mut count)
    })?;
    Ok(count.max(0) as usize)
}

fn truncated(op: &'static str, peer: i32, got: usize, want: usize) -> Error {
    Error::Protocol {
        op,
        peer,
        detail: format!("a message of {got} bytes arrived where {want} were due"),
    }
}
