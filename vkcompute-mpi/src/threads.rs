//! Which threads may use a communicator: MPI's thread levels, as the
//! running MPI provides them (`MPI_Query_thread`), turned into a check
//! before every MPI call of a [`Communicator`](crate::Communicator).
//!
//! - `MPI_THREAD_MULTIPLE`: any thread may call MPI at any time, so a
//!   communicator may be moved to any thread and used there (it is `Send`;
//!   it is not `Sync`: one thread at a time uses one communicator, since
//!   the messages of one operation pair up by order).
//! - `MPI_THREAD_SERIALIZED`: any thread may call MPI, but never two at
//!   once, which this crate cannot know of the application's other calls;
//!   so a communicator is used only on the thread that made it.
//! - `MPI_THREAD_FUNNELED` and `MPI_THREAD_SINGLE`: only the main thread
//!   calls MPI; a communicator is made there and used only there.
//!
//! Elsewhere every operation is [`Error::WrongThread`], before any MPI
//! call; a communicator dropped on a thread that may not call MPI leaves
//! its MPI communicator unfreed (a small leak, not a call MPI forbids).
#![allow(
    unsafe_code,
    reason = "MPI_Is_thread_main, and Send for the rsmpi communicator"
)]

use std::mem::ManuallyDrop;
use std::os::raw::c_int;
use std::thread::{self, ThreadId};

use mpi::ffi;
use mpi::topology::SimpleCommunicator;
use mpi::Threading;

use crate::error::{Error, Result};
use crate::raw;

/// The thread level MPI provides (`MPI_Query_thread`).
pub(crate) fn provided() -> Threading {
    mpi::environment::threading_support()
}

/// Whether this thread is MPI's main thread (`MPI_Is_thread_main`).
fn is_main(op: &'static str) -> Result<bool> {
    let mut flag: c_int = 0;
    // SAFETY: MPI is initialised (a communicator exists); `flag` is a
    // valid out-pointer. MPI allows this call on any thread.
    raw::check(op, "MPI_Is_thread_main", unsafe {
        ffi::MPI_Is_thread_main(&mut flag)
    })?;
    Ok(flag != 0)
}

/// The rule of one communicator: its MPI's thread level and the thread
/// that made it.
#[derive(Debug)]
pub(crate) struct ThreadRule {
    level: Threading,
    owner: ThreadId,
}

impl ThreadRule {
    /// The rule for a communicator made on this thread; below
    /// `MPI_THREAD_SERIALIZED`, this must be MPI's main thread.
    pub(crate) fn here(op: &'static str) -> Result<ThreadRule> {
        let level = provided();
        if matches!(level, Threading::Single | Threading::Funneled) && !is_main(op)? {
            return Err(Error::WrongThread { op, level });
        }
        Ok(ThreadRule {
            level,
            owner: thread::current().id(),
        })
    }

    pub(crate) fn level(&self) -> Threading {
        self.level
    }

    /// Whether this thread may call MPI for the communicator.
    pub(crate) fn allows_this_thread(&self) -> bool {
        self.level == Threading::Multiple || thread::current().id() == self.owner
    }

    /// [`Error::WrongThread`] unless this thread may call MPI for the
    /// communicator.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        if self.allows_this_thread() {
            Ok(())
        } else {
            Err(Error::WrongThread {
                op,
                level: self.level,
            })
        }
    }
}

/// The rsmpi communicator a [`Communicator`](crate::Communicator) owns,
/// freed (`MPI_Comm_free`, by rsmpi's drop) only on a thread that may call
/// MPI for it.
pub(crate) struct OwnedComm {
    comm: ManuallyDrop<SimpleCommunicator>,
}

// SAFETY: the value is an MPI handle; the communicator that owns it calls
// MPI with it only on threads its `ThreadRule` allows (every operation
// checks first, and `drop_on` frees it only there), so moving it to
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

    /// Frees the communicator where `rule` allows this thread to, and
    /// leaves it unfreed otherwise.
    pub(crate) fn drop_on(&mut self, rule: &ThreadRule) {
        if rule.allows_this_thread() {
            // SAFETY: called once, from the owner's `Drop`; `comm` is not
            // used afterwards.
            unsafe { ManuallyDrop::drop(&mut self.comm) };
        } else {
            log::warn!(
                "vkcompute-mpi: a communicator dropped on a thread that may not call MPI \
                 ({:?}) is left unfreed",
                rule.level
            );
        }
    }
}

// A communicator can move to another thread (where its rule allows using
// it there); it is not `Sync`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<crate::Communicator>();
};
