//! The crate's one error type.

/// The result type of every fallible call in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in vkcompute-mpi.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A vkcompute call on this rank failed (a mapped buffer, a device
    /// error, an allocation that did not fit...).
    #[error("{op}: {source}")]
    Device {
        /// The communicator operation.
        op: &'static str,
        /// vkcompute's error.
        #[source]
        source: vkcompute::Error,
    },

    /// An MPI call returned an error code (the communicator uses
    /// `MPI_ERRORS_RETURN`, so MPI errors come back instead of aborting).
    #[error("{op}: {call} failed with MPI error {code}: {message}")]
    Mpi {
        /// The communicator operation.
        op: &'static str,
        /// The MPI function.
        call: &'static str,
        /// The MPI error code.
        code: i32,
        /// `MPI_Error_string`'s text for it.
        message: String,
    },

    /// The ranks taking part in one operation disagree on its shape: the
    /// element type, the length, the reduction or the root. Every rank
    /// taking part gets this error (the ranks exchange a small header
    /// before any data), and no data moved.
    #[error("{op} on rank {rank}: the ranks disagree: {detail}")]
    Mismatch {
        /// The communicator operation.
        op: &'static str,
        /// This rank.
        rank: i32,
        /// Which ranks asked for what.
        detail: String,
    },

    /// Another rank failed its part of the operation before any data moved
    /// (its own call returned the cause); this rank's part was abandoned.
    #[error("{op} on rank {rank}: rank {failed} failed its part ({reason}); no data moved")]
    RemoteFailure {
        /// The communicator operation.
        op: &'static str,
        /// This rank.
        rank: i32,
        /// The rank that failed.
        failed: i32,
        /// What kind of failure that rank reported.
        reason: &'static str,
    },

    /// A rank number outside the communicator.
    #[error("{op}: rank {given} does not exist: the communicator has ranks 0 to {last}")]
    InvalidRank {
        /// The communicator operation.
        op: &'static str,
        /// The rank asked for.
        given: i32,
        /// The communicator's last rank.
        last: i32,
    },

    /// A message from a rank to itself, which this crate does not support
    /// (a blocking one could never complete).
    #[error("{op}: rank {rank} is this rank: messages to oneself are not supported (a blocking one could never complete)")]
    SelfMessage {
        /// The communicator operation.
        op: &'static str,
        /// This rank.
        rank: i32,
    },

    /// A tag outside the range this crate leaves to the user.
    #[error(
        "{op}: tag {given} is outside 0..={max} (higher tags carry vkcompute-mpi's own messages)"
    )]
    InvalidTag {
        /// The communicator operation.
        op: &'static str,
        /// The tag asked for.
        given: i32,
        /// The largest user tag.
        max: i32,
    },

    /// A buffer's length does not suit the operation on this rank (before
    /// any rank was asked anything).
    #[error("{op}: {detail}")]
    InvalidLength {
        /// The communicator operation.
        op: &'static str,
        /// What was given and what was needed.
        detail: String,
    },

    /// A message that arrived does not follow vkcompute-mpi's protocol
    /// (another program on the communicator, or a different version).
    #[error("{op}: from rank {peer}: {detail}")]
    Protocol {
        /// The communicator operation.
        op: &'static str,
        /// The rank the message came from.
        peer: i32,
        /// What was wrong with it.
        detail: String,
    },

    /// The same-node path to a peer failed under way: its node-local
    /// socket, or the exported memory passed over it
    /// ([`Path::SameNode`](crate::Path::SameNode)). The peer hears of it
    /// as [`Error::RemoteFailure`] where the message's header had not
    /// gone out yet.
    #[error("{op}: the same-node path to rank {peer}: {detail}")]
    SameNode {
        /// The communicator operation.
        op: &'static str,
        /// The peer.
        peer: i32,
        /// What went wrong.
        detail: String,
    },

    /// An MPI wait passed the communicator's timeout
    /// ([`Communicator::set_timeout`](crate::Communicator::set_timeout)):
    /// a rank did not take its part in time (it died, hung, or is busy
    /// elsewhere). The communicator takes no more operations afterwards
    /// ([`Error::Broken`]).
    #[error(
        "{op}: {call} did not complete within {after:?}: a rank did not take its part in time \
         (it may have died or hung); this communicator takes no more operations"
    )]
    Timeout {
        /// The communicator operation.
        op: &'static str,
        /// The MPI call waited for.
        call: &'static str,
        /// The timeout that passed.
        after: std::time::Duration,
    },

    /// An earlier operation on the communicator timed out (or an MPI error
    /// left the notes of a same-node message in pieces unmatched):
    /// messages of it may still be under way, so the communicator takes
    /// no more operations (make a new one from a healthy communicator, or
    /// end).
    #[error(
        "{op}: an earlier operation on this communicator timed out, and its messages may still \
         be under way; the communicator takes no more operations"
    )]
    Broken {
        /// The communicator operation.
        op: &'static str,
    },

    /// The communicator was used (or made) on a thread that MPI's thread
    /// level does not let call MPI for it: below `MPI_THREAD_MULTIPLE`,
    /// only the thread that made it, and below `MPI_THREAD_SERIALIZED`
    /// only MPI's main thread (see the crate documentation on threads).
    #[error(
        "{op}: this thread may not use the communicator: MPI provides thread level {level:?}, \
         under which only MPI_THREAD_MULTIPLE lets a communicator move to another thread (and \
         FUNNELED or SINGLE ask for the main thread)"
    )]
    WrongThread {
        /// The communicator operation.
        op: &'static str,
        /// The thread level MPI provides.
        level: mpi::Threading,
    },
}

impl Error {
    /// Wraps a vkcompute error of operation `op`.
    pub(crate) fn device(op: &'static str) -> impl FnOnce(vkcompute::Error) -> Error {
        move |source| Error::Device { op, source }
    }

    /// Whether this is vkcompute's error for a buffer mapped to the host
    /// (which the other ranks learn as such; see `header::Failure`).
    pub(crate) fn is_mapped_buffer(&self) -> bool {
        matches!(
            self,
            Error::Device {
                source: vkcompute::Error::BufferMapped { .. },
                ..
            }
        )
    }
}
