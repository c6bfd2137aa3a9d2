//! Calls on communicators and the thread: the node a rank is on, the
//! error handler, the thread level and the main thread, and the rsmpi
//! communicator a [`Communicator`](crate::Communicator) owns.

use std::mem::ManuallyDrop;
use std::os::raw::c_int;
use std::time::{Duration, Instant};

use mpi::ffi;
use mpi::raw::FromRaw;
use mpi::topology::SimpleCommunicator;
use mpi::Threading;

use super::wait::pause;
use super::{check, Comm};
use crate::error::{Error, Result};

/// `MPI_Comm_dup` of `parent` (a collective call), as an `MPI_Comm_idup`
/// polled within `bound` (`None`: for ever, as `MPI_Comm_dup` waits).
/// Past `bound` it is [`Error::Timeout`], and the request is left to MPI
/// with the memory it writes the new handle to (leaked).
pub(crate) fn duplicate(
    op: &'static str,
    parent: &impl mpi::traits::Communicator,
    bound: Option<Duration>,
) -> Result<SimpleCommunicator> {
    // SAFETY: a null handle is a valid out-value for MPI to replace.
    let mut handle: Box<ffi::MPI_Comm> = Box::new(unsafe { ffi::RSMPI_COMM_NULL });
    // SAFETY: as above.
    let mut request = unsafe { ffi::RSMPI_REQUEST_NULL };
    // SAFETY: `parent` is live; `handle` is a heap location that stays put
    // until the request completes (it is leaked where this returns before);
    // `request` is a valid out-pointer.
    check(op, "MPI_Comm_idup", unsafe {
        ffi::MPI_Comm_idup(parent.as_raw(), &mut *handle, &mut request)
    })?;
    let start = Instant::now();
    loop {
        let mut flag: c_int = 0;
        // SAFETY: a zeroed status is a valid out-value for MPI to fill in.
        let mut status: ffi::MPI_Status = unsafe { std::mem::zeroed() };
        // SAFETY: `request` is the request posted above, not yet complete;
        // `flag` and `status` are valid out-pointers.
        check(op, "MPI_Test", unsafe {
            ffi::MPI_Test(&mut request, &mut flag, &mut status)
        })?;
        if flag != 0 {
            // SAFETY: the duplication completed: `handle` is a new
            // communicator that nothing else owns, which the rsmpi value
            // frees when dropped.
            return Ok(unsafe { SimpleCommunicator::from_raw(*handle) });
        }
        if let Some(after) = bound.filter(|&after| start.elapsed() >= after) {
            // MPI may still write the handle: its memory goes to MPI.
            Box::leak(handle);
            log::error!("vkcompute-mpi: {op}: MPI_Comm_idup did not complete within {after:?}");
            return Err(Error::Timeout {
                op,
                call: "MPI_Comm_idup",
                after,
            });
        }
        pause(start);
    }
}

/// The lowest rank of `comm` among those that share memory with this one
/// (`MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)`, keyed by `rank`): the
/// same number on every rank of one node, so it names the node. A
/// collective call (like the split, it has no non-blocking form in MPI
/// 3.1, so the communicator's timeout does not bound it); the node's
/// communicator is freed before this returns.
pub(crate) fn node_leader(op: &'static str, comm: &Comm, rank: i32) -> Result<i32> {
    comm.state.usable(op)?;
    // SAFETY: a null handle is a valid out-value for MPI to replace.
    let mut node = unsafe { ffi::RSMPI_COMM_NULL };
    // SAFETY: `comm` is live; the split type and the null info are MPI's
    // constants (statics of rsmpi's C shim); `node` is a valid out-pointer.
    check(op, "MPI_Comm_split_type", unsafe {
        ffi::MPI_Comm_split_type(
            comm.handle,
            ffi::RSMPI_COMM_TYPE_SHARED,
            rank,
            ffi::RSMPI_INFO_NULL,
            &mut node,
        )
    })?;
    let leader = first_rank_in(op, node, comm);
    // SAFETY: `node` is the communicator the split just made, freed once.
    let freed = check(op, "MPI_Comm_free", unsafe {
        ffi::MPI_Comm_free(&mut node)
    });
    let leader = leader?;
    freed?;
    Ok(leader)
}

/// The rank in `comm` of rank 0 of `part`, a communicator of some of
/// `comm`'s processes (local: group calls only).
fn first_rank_in(op: &'static str, part: ffi::MPI_Comm, comm: &Comm) -> Result<i32> {
    // SAFETY: null handles are valid out-values for MPI to replace.
    let (mut part_group, mut group) = unsafe { (ffi::RSMPI_GROUP_NULL, ffi::RSMPI_GROUP_NULL) };
    // SAFETY: `part` is live; `part_group` is a valid out-pointer.
    check(op, "MPI_Comm_group", unsafe {
        ffi::MPI_Comm_group(part, &mut part_group)
    })?;
    // SAFETY: `comm` is live; `group` is a valid out-pointer.
    let mut result = check(op, "MPI_Comm_group", unsafe {
        ffi::MPI_Comm_group(comm.handle, &mut group)
    });
    let first: c_int = 0;
    let mut translated: c_int = -1;
    if result.is_ok() {
        // SAFETY: both groups are live; one rank in, one out, each a
        // valid pointer to one c_int.
        result = check(op, "MPI_Group_translate_ranks", unsafe {
            ffi::MPI_Group_translate_ranks(part_group, 1, &first, group, &mut translated)
        });
        // SAFETY: `group` was made above and is freed once.
        let freed = check(op, "MPI_Group_free", unsafe {
            ffi::MPI_Group_free(&mut group)
        });
        result = result.and(freed);
    }
    // SAFETY: `part_group` was made above and is freed once.
    let freed = check(op, "MPI_Group_free", unsafe {
        ffi::MPI_Group_free(&mut part_group)
    });
    result.and(freed)?;
    Ok(translated)
}

/// Makes MPI return error codes on `comm` instead of aborting the job.
pub(crate) fn set_errors_return(op: &'static str, comm: &Comm) -> Result<()> {
    // SAFETY: `comm` is live; the handler is MPI's predefined constant.
    check(op, "MPI_Comm_set_errhandler", unsafe {
        ffi::MPI_Comm_set_errhandler(comm.handle, ffi::RSMPI_ERRORS_RETURN)
    })
}

/// The thread level MPI provides (`MPI_Query_thread`).
pub(crate) fn thread_level() -> Threading {
    mpi::environment::threading_support()
}

/// Whether this thread is MPI's main thread (`MPI_Is_thread_main`).
pub(crate) fn is_main_thread(op: &'static str) -> Result<bool> {
    let mut flag: c_int = 0;
    // SAFETY: MPI is initialised (a communicator exists); `flag` is a
    // valid out-pointer. MPI allows this call on any thread.
    check(op, "MPI_Is_thread_main", unsafe {
        ffi::MPI_Is_thread_main(&mut flag)
    })?;
    Ok(flag != 0)
}

/// The rsmpi communicator a [`Communicator`](crate::Communicator) owns,
/// freed (`MPI_Comm_free`, by rsmpi's drop) only where the owner says
/// this thread may call MPI for it ([`free_or_leak`](Self::free_or_leak)).
pub(crate) struct OwnedComm {
    comm: ManuallyDrop<SimpleCommunicator>,
}

// SAFETY: the value is an MPI handle; the communicator that owns it calls
// MPI with it only on threads its thread rule allows (every operation
// checks first, and `free_or_leak` frees it only there), so moving it to
// another thread lets no thread call MPI that may not.
unsafe impl Send for OwnedComm {}

impl OwnedComm {
    pub(crate) fn new(comm: SimpleCommunicator) -> OwnedComm {
        OwnedComm {
            comm: ManuallyDrop::new(comm),
        }
    }

    pub(crate) fn get(&self) -> &SimpleCommunicator {
        &self.comm
    }

    /// Frees the communicator where `allowed` (this thread may call MPI
    /// for it), and leaves it unfreed otherwise (a small leak, not a call
    /// MPI forbids). Called once, from the owner's `Drop`.
    pub(crate) fn free_or_leak(&mut self, allowed: bool) {
        if allowed {
            // SAFETY: called once, from the owner's `Drop`; `comm` is not
            // used afterwards.
            unsafe { ManuallyDrop::drop(&mut self.comm) };
        }
    }
}
