//! The pinned host memory the staged transport moves data through, kept
//! between calls: whole staging buffers (point-to-point pieces, the
//! unpipelined collectives), the pieces' slots of the pipelined
//! collectives, and the requests' memory (`wire::owned`).

use vkcompute::{DeviceContext, Event, HostBuffer};

use crate::error::{Error, Result};
use crate::kept::Kept;
use crate::wire::PinnedBuffers;

/// The most whole staging buffers a communicator keeps between calls.
const KEPT_STAGING: usize = 4;
/// The most piece buffers a communicator keeps between pipelined
/// collectives (four sets of `plan::MAX_PIECES`).
const KEPT_PIECE_SLOTS: usize = 4 * crate::plan::MAX_PIECES;
/// The most buffers of requests a communicator keeps (two 64 MiB
/// `isend`s' slots).
const KEPT_REQUEST_BUFFERS: usize = 32;
/// The most bytes of each kind a communicator keeps: a 64 MiB collective
/// keeps all its buffers (2 ranks: 32 piece slots of 4 MiB); a larger
/// one gives some back to the system after it.
const MAX_KEPT_BYTES: usize = 256 << 20;

/// A communicator's pinned host buffers, kept for reuse (each kind at
/// most [`MAX_KEPT_BYTES`], the oldest given back first).
pub(crate) struct StagingPool {
    ctx: DeviceContext,
    /// Pinned host buffers kept for reuse between calls.
    staging: Kept<HostBuffer<u8>>,
    /// The pinned host buffers of a pipelined collective's pieces, kept
    /// for reuse between calls.
    piece_slots: Kept<HostBuffer<u8>>,
    /// The requests' buffers, each with the event after the device work
    /// still under way on it (a receive's copy out): a request takes only
    /// one whose work is done, so that it never waits for the device in a
    /// `test` (the blocking calls' buffers may come back with copies
    /// queued behind the user's work, which a host borrow would wait for).
    requests: Kept<(HostBuffer<u8>, Option<Event>)>,
}

/// `buffer`'s length where it holds `bytes`.
fn holds(bytes: usize) -> impl Fn(&HostBuffer<u8>) -> Option<usize> {
    move |buffer| (buffer.len() >= bytes).then_some(buffer.len())
}

impl StagingPool {
    pub(crate) fn new(ctx: &DeviceContext) -> StagingPool {
        StagingPool {
            ctx: ctx.clone(),
            staging: Kept::new(KEPT_STAGING, MAX_KEPT_BYTES),
            piece_slots: Kept::new(KEPT_PIECE_SLOTS, MAX_KEPT_BYTES),
            requests: Kept::new(KEPT_REQUEST_BUFFERS, MAX_KEPT_BYTES),
        }
    }

    /// A new pinned host buffer of `bytes` bytes (at least one).
    fn create(&self, bytes: usize) -> vkcompute::Result<HostBuffer<u8>> {
        self.ctx.enqueue_create_host_buffer::<u8>(bytes.max(1))
    }

    /// A pinned host buffer of at least `bytes` bytes, from those kept
    /// between calls where one is large enough.
    pub(crate) fn staging(&self, op: &'static str, bytes: usize) -> Result<HostBuffer<u8>> {
        match self.staging.take(holds(bytes)) {
            Some(buffer) => Ok(buffer),
            None => self.create(bytes).map_err(Error::device(op)),
        }
    }

    /// Keeps `buffer` for a later call.
    pub(crate) fn keep_staging(&self, buffer: HostBuffer<u8>) {
        self.staging.keep(buffer.len(), buffer);
    }

    /// `count` pinned host buffers of at least `bytes` bytes each for the
    /// pieces of a pipelined collective, from those kept between calls
    /// where large enough.
    pub(crate) fn piece_slots(
        &self,
        op: &'static str,
        bytes: usize,
        count: usize,
    ) -> Result<Vec<HostBuffer<u8>>> {
        let mut slots = Vec::with_capacity(count);
        while slots.len() < count {
            let slot = match self.piece_slots.take(holds(bytes)) {
                Some(slot) => Ok(slot),
                None => self.create(bytes),
            };
            match slot {
                Ok(slot) => slots.push(slot),
                Err(e) => {
                    self.keep_piece_slots(slots);
                    return Err(Error::device(op)(e));
                }
            }
        }
        Ok(slots)
    }

    /// Keeps `slots` for a later pipelined collective.
    pub(crate) fn keep_piece_slots(&self, slots: Vec<HostBuffer<u8>>) {
        for slot in slots {
            self.piece_slots.keep(slot.len(), slot);
        }
    }
}

impl PinnedBuffers for StagingPool {
    fn take(&self, op: &'static str, bytes: usize) -> Result<HostBuffer<u8>> {
        let idle = |(buffer, pending): &(HostBuffer<u8>, Option<Event>)| {
            let done = pending
                .as_ref()
                .is_none_or(|e| e.is_complete().unwrap_or(false));
            (done && buffer.len() >= bytes).then_some(buffer.len())
        };
        match self.requests.take(idle) {
            Some((buffer, _)) => Ok(buffer),
            None => self.create(bytes).map_err(Error::device(op)),
        }
    }

    fn keep(&self, buffer: HostBuffer<u8>, pending: Option<Event>) {
        self.requests.keep(buffer.len(), (buffer, pending));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkcompute::ContextOptions;

    /// Large buffers given back are kept only up to the bytes bound (the
    /// pool once kept the four largest staging buffers and 32 piece slots
    /// whatever their size: after a few 2 GiB collectives, gigabytes of
    /// pinned memory); the smallest that fits is reused.
    #[test]
    fn the_pool_keeps_a_bounded_number_of_bytes() {
        let ctx = DeviceContext::with_options(ContextOptions::new().pipeline_cache_dir(None))
            .expect("a context (lavapipe: run `make test`)");
        let pool = StagingPool::new(&ctx);
        let big = MAX_KEPT_BYTES / 2 + 1;
        let staging: Vec<_> = (0..3).map(|_| pool.staging("t", big).unwrap()).collect();
        for b in staging {
            pool.keep_staging(b);
        }
        assert_eq!(pool.staging.sizes(), [big]);
        let slots = pool.piece_slots("t", big, 3).unwrap();
        pool.keep_piece_slots(slots);
        assert_eq!(pool.piece_slots.sizes(), [big]);
        // Small ones: the smallest that holds the request comes back.
        let pool = StagingPool::new(&ctx);
        let small: Vec<_> = [64, 16, 32].map(|b| pool.staging("t", b).unwrap()).into();
        for b in small {
            pool.keep_staging(b);
        }
        let taken = pool.staging("t", 20).unwrap();
        assert_eq!(taken.len(), 32);
        assert_eq!(pool.staging.sizes(), [64, 16]);
    }
}
