//! Waits with a deadline: every MPI wait of this crate polls `MPI_Test`
//! until its transfers complete or the communicator's timeout passes.
//!
//! MPI itself has no timeout: a blocking call whose peer never comes waits
//! for ever, and what happens when a rank dies is up to the runtime (Open
//! MPI's `mpirun` terminates the whole job once a rank exits without
//! `MPI_Finalize`; see the crate documentation for the measured times).
//! With a timeout set, a wait that passes it returns [`Error::Timeout`],
//! and the communicator is marked broken, so that its later operations
//! fail at once ([`Error::Broken`]) instead of meeting the abandoned
//! messages.
//!
//! Returning early is sound only when MPI no longer touches the memory of
//! the transfers left unfinished, so a timeout does one of three things
//! ([`Abandon`]): cancels them (point to point) and, where MPI does not
//! give their memory back within [`CANCEL_GRACE`], aborts the job
//! (`MPI_Abort`); leaves them to MPI where their memory is leaked or
//! there is none; or aborts at once (a collective over borrowed memory,
//! which MPI cannot cancel).
use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::{Duration, Instant};

use mpi::ffi;

use super::transfer::Transfer;
use super::Comm;
use crate::error::{Error, Result};

/// How long cancelled transfers have to give their memory back after a
/// timeout before the job is aborted.
pub(crate) const CANCEL_GRACE: Duration = Duration::from_secs(1);

/// The exit code `MPI_Abort` is given when a timeout leaves MPI holding
/// memory (`EX_SOFTWARE`).
const ABORT_CODE: i32 = 70;

/// A non-blocking operation that every wait of its communicator moves on
/// while it polls (the communicator's pending requests: `message_op::Op`).
pub(crate) trait Pollable {
    /// Moves the operation on as far as it can go without blocking (its
    /// ordered step only once its [`Ticket`] has its turn).
    fn advance(&mut self);
    /// Whether MPI is done with the operation's memory.
    fn is_over(&self) -> bool;
}

/// The end of a message and its peer and tag: messages with the same key
/// take their ordered step (a receiver's answer, a sender's data) in the
/// order their headers were posted ([`Ticket`]).
pub(crate) type OrderKey = (bool, i32, i32);

/// A message end's place in MPI's matching order among those of its
/// [`OrderKey`], taken when its header is posted. MPI matches the headers
/// of one pair and tag in the order the receives were posted and
/// delivers them in the order they were sent; the answers, data and
/// trailers that follow a header pair up only if every end of one key
/// takes its step after the header in that order too, whether it is a
/// blocking call or a request. An end takes its step when its ticket
/// [`has the turn`](WaitState::has_turn), and gives the turn on when the
/// ticket drops (after the step, or when the end is over without one).
pub(crate) struct Ticket {
    state: Arc<WaitState>,
    key: OrderKey,
    number: u64,
}

impl Ticket {
    /// Whether every earlier end of this key has taken its step.
    pub(crate) fn has_turn(&self) -> bool {
        self.state.has_turn(self)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut turns = self
            .state
            .turns
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(line) = turns.get_mut(&self.key) {
            line.open.remove(&self.number);
        }
    }
}

/// The tickets of one key: the next number, and those not yet dropped.
#[derive(Default)]
struct Line {
    next: u64,
    open: BTreeSet<u64>,
}

/// A pending operation, owned by its request.
pub(crate) type PendingOp = Weak<Mutex<dyn Pollable + Send>>;

/// The state every wait on one communicator shares.
pub(crate) struct WaitState {
    /// The timeout in nanoseconds; `u64::MAX`: none.
    timeout_ns: AtomicU64,
    /// Whether a wait passed its timeout.
    broken: AtomicBool,
    /// The non-blocking operations under way, oldest first.
    pending: Mutex<Vec<PendingOp>>,
    /// The tickets of each order key ([`Ticket`]).
    turns: Mutex<HashMap<OrderKey, Line>>,
}

impl Default for WaitState {
    fn default() -> Self {
        WaitState {
            timeout_ns: AtomicU64::new(u64::MAX),
            broken: AtomicBool::new(false),
            pending: Mutex::new(Vec::new()),
            turns: Mutex::new(HashMap::new()),
        }
    }
}

impl WaitState {
    /// Adds an operation for every later wait to move on.
    pub(crate) fn register(&self, op: PendingOp) {
        self.pending
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(op);
    }

    /// A ticket for an end of `key` whose header is being posted now.
    pub(crate) fn ticket(self: &Arc<Self>, key: OrderKey) -> Ticket {
        let mut turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        let line = turns.entry(key).or_default();
        let number = line.next;
        line.next += 1;
        line.open.insert(number);
        Ticket {
            state: Arc::clone(self),
            key,
            number,
        }
    }

    /// Whether no end of `key` is waiting for its turn or holding it: a
    /// new end's ticket would have its turn at once.
    pub(crate) fn is_clear(&self, key: OrderKey) -> bool {
        let turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        turns.get(&key).is_none_or(|line| line.open.is_empty())
    }

    fn has_turn(&self, ticket: &Ticket) -> bool {
        let turns = self.turns.lock().unwrap_or_else(PoisonError::into_inner);
        turns
            .get(&ticket.key)
            .and_then(|line| line.open.first())
            .is_none_or(|&first| first == ticket.number)
    }

    /// Moves every pending operation on as far as it goes without
    /// blocking, oldest first (so that one whose turn an older one gives
    /// on moves in the same pass); whether any is left. One in use
    /// elsewhere on the stack (a request being waited for or dropped) is
    /// skipped.
    pub(crate) fn progress(&self) -> bool {
        let ops: Vec<_> = {
            let mut pending = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
            pending.retain(|weak| {
                weak.upgrade()
                    .is_some_and(|op| op.try_lock().map_or(true, |op| !op.is_over()))
            });
            pending.iter().filter_map(Weak::upgrade).collect()
        };
        for op in &ops {
            if let Ok(mut op) = op.try_lock() {
                op.advance();
            }
        }
        !ops.is_empty()
    }

    pub(crate) fn timeout(&self) -> Option<Duration> {
        match self.timeout_ns.load(Ordering::Relaxed) {
            u64::MAX => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    pub(crate) fn set_timeout(&self, timeout: Option<Duration>) {
        let ns = timeout.map_or(u64::MAX, |t| {
            u64::try_from(t.as_nanos()).map_or(u64::MAX - 1, |ns| ns.min(u64::MAX - 1))
        });
        self.timeout_ns.store(ns, Ordering::Relaxed);
    }

    /// [`Error::Broken`] once a wait has timed out.
    pub(crate) fn usable(&self, op: &'static str) -> Result<()> {
        if self.broken.load(Ordering::Relaxed) {
            return Err(Error::Broken { op });
        }
        Ok(())
    }

    /// Marks the communicator broken where an MPI error left messages of
    /// this crate unmatched (notes of a message in pieces that will not
    /// be received, or not all sent), which a later message of the same
    /// peer and tag would otherwise meet; returns `error`.
    pub(crate) fn lost_step(&self, op: &'static str, error: Error) -> Error {
        self.broken.store(true, Ordering::Relaxed);
        log::error!("vkcompute-mpi: {op}: the notes of a message in pieces lost step: {error}");
        error
    }

    /// Marks the communicator broken and makes the error of a wait for
    /// `call` that passed `after`.
    pub(crate) fn timed_out(&self, op: &'static str, call: &'static str, after: Duration) -> Error {
        self.broken.store(true, Ordering::Relaxed);
        let ns = u64::try_from(after.as_nanos()).unwrap_or(u64::MAX);
        SUSPECT_NS.fetch_max(ns.max(1), Ordering::Relaxed);
        log::error!("vkcompute-mpi: {op}: {call} timed out after {after:?}");
        Error::Timeout { op, call, after }
    }
}

/// The longest timeout that passed in this process, in nanoseconds (0:
/// none did). After a timeout MPI may hold messages nothing will match,
/// and Open MPI was once seen to hang in a later `MPI_Comm_dup` (in its
/// communicator-id agreement); the duplication of a new communicator is
/// then bounded by it ([`suspect_bound`]).
static SUSPECT_NS: AtomicU64 = AtomicU64::new(0);

/// The least a new communicator's duplication may take after a timeout
/// ([`suspect_bound`]): ranks that are merely late (still in their own
/// part of the operation that timed out elsewhere) join well within it.
pub(crate) const DUP_FLOOR: Duration = Duration::from_secs(5);

/// How long a new communicator's duplication may take: for ever (as
/// `MPI_Comm_dup`), or, once a wait of this process timed out, the
/// longest timeout that passed, at least [`DUP_FLOOR`].
pub(crate) fn suspect_bound() -> Option<Duration> {
    match SUSPECT_NS.load(Ordering::Relaxed) {
        0 => None,
        ns => Some(Duration::from_nanos(ns).max(DUP_FLOOR)),
    }
}

/// What a wait does with the transfers still unfinished when its timeout
/// passes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Abandon {
    /// Cancel them (point-to-point transfers), and abort the job where MPI
    /// has not finished them within [`CANCEL_GRACE`].
    Cancel,
    /// Leave them to MPI: they use no memory, or memory the caller leaks.
    Leak,
    /// Abort the job: MPI holds borrowed memory it cannot give back.
    Abort,
}

/// How long a wait polls `MPI_Test` back to back before it starts to sleep
/// between polls.
pub(crate) const SPIN: Duration = Duration::from_micros(200);
/// The sleep between polls after [`SPIN`].
pub(crate) const NAP: Duration = Duration::from_micros(100);

/// Gives the processor away between two polls of a wait that began at
/// `start`: a yield for the first [`SPIN`], then a sleep of [`NAP`]. MPI's
/// own blocking waits spin (Open MPI's `MPI_Wait` polls its progress loop),
/// which on a node with more ranks than cores (or with a device whose
/// kernels run on the same cores, as lavapipe's do) takes the cores from
/// the ranks that have work; a large transfer's waits here sleep instead,
/// at the cost of up to a `NAP` of latency on messages that take longer
/// than `SPIN`. Measured on the 2-core VM (`mpi_bench`, 4 ranks, 64 MiB):
/// see BENCHMARKS.md (vkcompute-mpi).
pub(crate) fn pause(start: Instant) {
    Patience::NAP.pause(start);
}

/// The slowest speed, in bytes per second, at which the data of a message
/// whose peer is already moving it is expected to arrive: see
/// [`streaming`].
const STREAM_FLOOR: u64 = 1 << 30;
/// The longest a [`streaming`] wait yields before it naps, whatever the
/// piece's size: a piece behind a long kernel on the sender's stream
/// (its copy waits for the kernel) would otherwise keep the receiver's
/// core busy for as long as the piece is large.
const STREAM_SPIN_MAX: Duration = Duration::from_millis(10);

/// How a wait gives the processor away between polls: a yield for the
/// first `spin` of the wait, then a sleep of [`NAP`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Patience {
    spin: Duration,
}

/// The patience of a wait for `bytes` of a message that the peer is
/// already moving (a staged message's pieces, once its header was
/// answered): yields for [`SPIN`] plus the time the bytes take at
/// [`STREAM_FLOOR`] (2.2 ms for a piece of 2 MiB; at most
/// [`STREAM_SPIN_MAX`]), so that the receiver of
/// a piece that is on its way stays runnable. A rank that sleeps there
/// between pieces, on a node with more ranks than cores, comes back only
/// after the ranks spinning beside it; measured on the 2-core VM
/// (`mpi_bench --staging`, 4 ranks, 64 MiB send/recv; BENCHMARKS.md):
/// the naps of [`pause`] made the pipeline stall piece after piece.
pub(crate) fn streaming(bytes: usize) -> Patience {
    let nanos = bytes as u128 * 1_000_000_000 / u128::from(STREAM_FLOOR);
    let moving = Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX));
    Patience {
        spin: (SPIN + moving).min(STREAM_SPIN_MAX),
    }
}

impl Patience {
    /// [`pause`]'s: the wait's end may be far (a peer that has not reached
    /// the call yet, or whose kernels must run first).
    pub(crate) const NAP: Patience = Patience { spin: SPIN };

    pub(crate) fn pause(self, start: Instant) {
        if start.elapsed() < self.spin {
            std::thread::yield_now();
        } else {
            std::thread::sleep(NAP);
        }
    }
}

/// Waits for every transfer of `transfers` (those of one `call`; `posted`
/// is the result of posting them) within the communicator's timeout, and
/// returns the first error among posting and the transfers.
///
/// Returns only once MPI no longer touches the memory of any of them,
/// except with [`Error::Timeout`] under [`Abandon::Leak`]: then the ones
/// unfinished are left to MPI.
///
/// The wait polls `MPI_Test` (see [`pause`] for what it does between
/// polls), and while the communicator has non-blocking requests under way
/// it moves them on meanwhile (so a blocking call whose peer waits for one
/// of them completes).
pub(crate) fn finish(
    op: &'static str,
    comm: &Comm,
    call: &'static str,
    posted: Result<()>,
    transfers: &mut [Transfer],
    abandon: Abandon,
) -> Result<()> {
    finish_with(op, comm, call, posted, transfers, (abandon, Patience::NAP))
}

/// [`finish`], giving the processor away between polls as `patience`
/// says.
pub(crate) fn finish_with(
    op: &'static str,
    comm: &Comm,
    call: &'static str,
    posted: Result<()>,
    transfers: &mut [Transfer],
    (abandon, patience): (Abandon, Patience),
) -> Result<()> {
    let mut first = posted.err();
    let timeout = comm.state.timeout();
    let start = Instant::now();
    let mut open: Vec<usize> = (0..transfers.len()).collect();
    loop {
        open.retain(|&i| match transfers[i].test(op) {
            Ok(done) => !done,
            Err(e) => {
                first.get_or_insert(e);
                false
            }
        });
        if open.is_empty() {
            return first.map_or(Ok(()), Err);
        }
        comm.state.progress();
        match timeout {
            None => patience.pause(start),
            Some(after) if start.elapsed() >= after => {
                let error = comm.state.timed_out(op, call, after);
                match abandon {
                    Abandon::Leak => {}
                    Abandon::Cancel => cancel_or_abort(op, comm, transfers, &open, &error),
                    Abandon::Abort => abort(comm, &error),
                }
                return Err(error);
            }
            Some(_) => patience.pause(start),
        }
    }
}

/// Waits until no transfer of `transfers` whose index is in `until` is
/// still in `open` (the indices of those unfinished, which this keeps up
/// to date), within the communicator's timeout, and returns the first
/// error among them (an error finishes a transfer too). Where the timeout
/// passes, every transfer still open is cancelled (the job is aborted
/// where MPI does not finish them within [`CANCEL_GRACE`]; at once under
/// [`Abandon::Abort`], for collectives, which MPI cannot cancel) and
/// `open` is left empty: MPI no longer touches their memory (but under
/// [`Abandon::Leak`], which leaves them to MPI, as [`finish`] does).
///
/// With `until` covering all of `transfers` it returns only once `open`
/// is empty, as [`finish`] does.
///
/// The timeout and the spin of [`pause`] count from `start`, when the
/// transfers were posted, not from this call: the waits for a step's
/// pieces one after the other are one wait (restarting the spin at each
/// piece was measured to take the cores from ranks with work; see
/// BENCHMARKS.md, vkcompute-mpi).
pub(crate) fn finish_until(
    op: &'static str,
    comm: &Comm,
    call: &'static str,
    waits: (&mut [Transfer], &mut Vec<usize>),
    until: std::ops::Range<usize>,
    (start, abandon): (Instant, Abandon),
) -> Result<()> {
    finish_until_since(op, comm, call, waits, until, (start, start, abandon))
}

/// [`finish_until`] whose timeout counts from `since` (the last progress
/// of a stream of pieces, say) while its spin counts from `start`.
pub(crate) fn finish_until_since(
    op: &'static str,
    comm: &Comm,
    call: &'static str,
    (transfers, open): (&mut [Transfer], &mut Vec<usize>),
    until: std::ops::Range<usize>,
    (start, since, abandon): (Instant, Instant, Abandon),
) -> Result<()> {
    let mut first = None;
    let timeout = comm.state.timeout();
    loop {
        open.retain(|&i| match transfers[i].test(op) {
            Ok(done) => !done,
            Err(e) => {
                first.get_or_insert(e);
                false
            }
        });
        if !open.iter().any(|i| until.contains(i)) {
            return first.map_or(Ok(()), Err);
        }
        comm.state.progress();
        match timeout {
            Some(after) if since.elapsed() >= after => {
                let error = comm.state.timed_out(op, call, after);
                match abandon {
                    Abandon::Leak => {}
                    Abandon::Cancel => cancel_or_abort(op, comm, transfers, open, &error),
                    Abandon::Abort => abort(comm, &error),
                }
                open.clear();
                return Err(error);
            }
            _ => pause(start),
        }
    }
}

/// Cancels the transfers `open` of `transfers` and waits up to
/// [`CANCEL_GRACE`] for MPI to finish them; aborts the job otherwise.
fn cancel_or_abort(
    op: &'static str,
    comm: &Comm,
    transfers: &mut [Transfer],
    open: &[usize],
    error: &Error,
) {
    let mut open = open.to_vec();
    for &i in &open {
        if transfers[i].request_cancel(op).is_err() {
            abort(comm, error);
        }
    }
    let start = Instant::now();
    while !open.is_empty() {
        // A transfer that completes, cancelled or not, or fails, is over.
        open.retain(|&i| matches!(transfers[i].test(op), Ok(false)));
        if start.elapsed() >= CANCEL_GRACE {
            abort(comm, error);
        }
        std::thread::yield_now();
    }
}

/// Ends the job (`MPI_Abort`), saying why: MPI holds memory that this
/// process cannot take back, so returning is not sound.
fn abort(comm: &Comm, error: &Error) -> ! {
    eprintln!(
        "vkcompute-mpi: {error}; MPI still holds memory of the transfers under way and cannot \
         give it back, so the job is aborted (MPI_Abort)"
    );
    // SAFETY: `comm` is live; MPI_Abort ends every process of the job.
    unsafe { ffi::MPI_Abort(comm.handle, ABORT_CODE) };
    // MPI_Abort does not return; should it, this process still must not.
    std::process::abort()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spin(patience: Patience) -> Duration {
        patience.spin
    }

    #[test]
    fn streaming_spins_for_the_piece_up_to_a_bound() {
        assert_eq!(spin(streaming(0)), SPIN);
        let two_mib = spin(streaming(2 << 20));
        assert_eq!(two_mib, SPIN + Duration::from_nanos(1_953_125));
        assert!(spin(streaming(4 << 20)) > two_mib);
        assert_eq!(spin(streaming(1 << 30)), STREAM_SPIN_MAX);
        assert_eq!(spin(streaming(usize::MAX)), STREAM_SPIN_MAX);
    }
}
