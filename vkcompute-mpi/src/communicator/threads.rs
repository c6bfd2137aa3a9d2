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

use std::thread::{self, ThreadId};

use mpi::Threading;

use crate::error::{Error, Result};
use crate::raw;

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
        let level = raw::thread_level();
        if matches!(level, Threading::Single | Threading::Funneled) && !raw::is_main_thread(op)? {
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

// A communicator can move to another thread (where its rule allows using
// it there); it is not `Sync`.
const _: fn() = || {
    fn send<T: Send>() {}
    send::<super::Communicator>();
};
