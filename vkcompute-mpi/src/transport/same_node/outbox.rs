//! A sender's memory on the same-node path: its outboxes for each peer
//! (at most [`MAX_OUTBOXES`], each lent to one message until the receiver
//! answers: [`Lent`]) and its collective memory, each shared with the
//! peers (exported device memory or a `memfd`), its descriptor announced
//! over the socket once per generation.

use std::mem::size_of;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::Ordering;
use std::sync::{Arc, PoisonError};

use vkcompute::{sharing::MemoryHandleType, DeviceBuffer, Event};

use super::{
    SameNode, SameNodeMemory, ANNOUNCE_BYTES, COLLECTIVE_OUTBOX, MAX_OUTBOXES, MIN_SHARED_BYTES,
};
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw;
use crate::transport::place::Place;
use crate::wire::{LentOutbox, SharedMemory};

/// A sender's shared memory for one peer (one of its outboxes for that
/// peer, or its collective memory).
pub(super) struct Outbox {
    /// Which of the sender's memories it is: its outboxes for a peer count
    /// up from 0, the collective memory is [`COLLECTIVE_OUTBOX`].
    id: u32,
    generation: u32,
    memory: DeviceBuffer<u8>,
    /// The `memfd` of shared host memory (`None`: exported device memory).
    host: Option<OwnedFd>,
    /// The ranges of the memory released (to `VK_QUEUE_FAMILY_EXTERNAL`,
    /// or host memory to the host), which the receiver acquires and
    /// releases back as they are: this rank acquires them before it writes
    /// the memory again.
    released: Option<Layout>,
    /// Whether the peer has this generation's descriptor.
    announced: bool,
}

/// Ranges of an outbox handed over one by one: its first `bytes` in
/// pieces of `piece` (the last shorter).
#[derive(Clone, Copy, Debug)]
struct Layout {
    piece: usize,
    bytes: usize,
}

impl Layout {
    /// The whole of memory of `bytes`, in one range.
    fn whole(bytes: usize) -> Layout {
        Layout {
            piece: bytes.max(1),
            bytes,
        }
    }

    fn ranges(self) -> impl Iterator<Item = std::ops::Range<usize>> {
        let Layout { piece, bytes } = self;
        (0..bytes.div_ceil(piece)).map(move |i| i * piece..((i + 1) * piece).min(bytes))
    }
}

impl Outbox {
    /// Enqueues the acquire of whatever of the memory was released.
    fn acquire(&mut self) -> vkcompute::Result<()> {
        if let Some(layout) = self.released {
            for range in layout.ranges() {
                (self
                    .memory
                    .create_sub_buffer::<u8>(range.start, range.len()))?
                .enqueue_acquire_from_external()?;
            }
        }
        self.released = None;
        Ok(())
    }

    /// Where a header says the data is: this memory, new where its
    /// descriptor has not gone out yet.
    fn shared(&self) -> SharedMemory {
        SharedMemory {
            outbox: self.id,
            generation: self.generation,
            new: !self.announced,
        }
    }
}

/// A sender's outboxes for one peer: at most [`MAX_OUTBOXES`], each lent
/// to one message at a time.
#[derive(Default)]
pub(super) struct Outboxes {
    /// Those no message uses now.
    free: Vec<Outbox>,
    /// How many are lent to messages under way.
    lent: usize,
    /// The id of the next one made.
    next_id: u32,
}

/// An outbox lent to one message to `dest`, filled and announced
/// ([`SameNode::stage_out`]). It goes back to its peer's outboxes once
/// the receiver answered ([`answered`](Self::answered)); dropped without
/// an answer (an MPI error, a timeout), it is given up, since the
/// receiver may still read it: its memory is freed here (a receiver's
/// import keeps the memory alive) and a new outbox takes its place.
pub(crate) struct Lent {
    same_node: Arc<SameNode>,
    dest: i32,
    outbox: Option<Outbox>,
    shared: SharedMemory,
    /// Where the sender still writes the memory: the event after each
    /// piece's copy and release ([`SameNode::stage_out`]).
    pieces: Vec<Event>,
}

impl Lent {
    /// Where the header says the data is.
    pub(crate) fn shared(&self) -> SharedMemory {
        self.shared
    }

    /// The receiver answered the message: it is done with the memory,
    /// which goes back to the peer's outboxes. `refused`: the answer
    /// refused the message, maybe without importing the memory (an import
    /// that failed), so the next message in it sends its descriptor again
    /// and the receiver replaces whatever it holds.
    pub(crate) fn answered(mut self, refused: bool) {
        if let Some(mut outbox) = self.outbox.take() {
            outbox.announced &= !refused;
            self.same_node.give_back(self.dest, Some(outbox));
        }
    }
}

impl Drop for Lent {
    /// Gives up an outbox whose message was not answered (see the type).
    fn drop(&mut self) {
        if self.outbox.take().is_some() {
            self.same_node.give_back(self.dest, None);
        }
    }
}

impl LentOutbox for Lent {
    fn answered(self: Box<Self>, refused: bool) {
        Lent::answered(*self, refused);
    }

    fn pieces(&self) -> usize {
        self.pieces.len()
    }

    fn piece_written(&mut self, op: &'static str, index: usize) -> Result<()> {
        match self.pieces.get(index) {
            Some(event) => event.wait().map_err(Error::device(op)),
            None => Ok(()),
        }
    }
}

impl SameNode {
    /// Copies the `len` elements of `place` into an outbox for `dest` (a
    /// free one, made or grown first where none holds them) and releases
    /// it; sends the descriptor of a new generation over the socket. With
    /// `piece` (elements), copies and releases it in pieces of that many,
    /// each with an event after it (`Lent`'s `piece_written`), and returns
    /// without waiting; else waits for the device. Returns the outbox,
    /// lent to this message until the receiver answers, or `None` where
    /// [`MAX_OUTBOXES`] are lent to messages under way (the message then
    /// travels over MPI). Where this fails no header has gone out: the
    /// caller sends a failed one (the outbox is back with the others, its
    /// descriptor to be sent again where it may not have gone out whole).
    pub(crate) fn stage_out<T: Element>(
        self: &Arc<Self>,
        op: &'static str,
        (place, len): (Place<'_, T>, usize),
        dest: i32,
        piece: Option<usize>,
    ) -> Result<Option<Lent>> {
        let Some(mut outbox) = self.lend(op, dest, len * size_of::<T>())? else {
            return Ok(None);
        };
        let shared = outbox.shared();
        let mut pieces = Vec::new();
        let staged = match piece {
            Some(piece) => self.fill_in_pieces(op, &mut outbox, (place, len), piece),
            None => (self.fill(op, &mut outbox, len, |part| {
                place.copy_range_to(0, len, part)
            }))
            .map(|()| Vec::new()),
        }
        .and_then(|events| {
            pieces = events;
            self.announce(op, &mut outbox, dest)
        });
        if let Err(e) = staged {
            self.give_back(dest, Some(outbox));
            return Err(e);
        }
        self.sends.fetch_add(1, Ordering::Relaxed);
        if !pieces.is_empty() {
            self.noted_sends.fetch_add(1, Ordering::Relaxed);
        }
        Ok(Some(Lent {
            same_node: Arc::clone(self),
            dest,
            outbox: Some(outbox),
            shared,
            pieces,
        }))
    }

    /// An outbox for a message of `bytes` to `dest`, counted as lent: the
    /// smallest free one that holds it, else the largest free one grown (a
    /// new generation), else a new one where fewer than [`MAX_OUTBOXES`]
    /// are lent; `None` where that many are.
    fn lend(&self, op: &'static str, dest: i32, bytes: usize) -> Result<Option<Outbox>> {
        let (kept, id) = {
            let mut pools = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
            let pool = pools.entry(dest).or_default();
            let len = |i: &(usize, &Outbox)| i.1.memory.len();
            let free = || pool.free.iter().enumerate();
            let fitting = free().filter(|i| len(i) >= bytes).min_by_key(len);
            let chosen = fitting.or_else(|| free().max_by_key(len)).map(|(i, _)| i);
            let kept = match chosen {
                Some(i) => Some(pool.free.swap_remove(i)),
                None if pool.lent < MAX_OUTBOXES => None,
                None => return Ok(None),
            };
            let id = kept.as_ref().map_or(pool.next_id, |o| o.id);
            if kept.is_none() {
                pool.next_id = (pool.next_id + 1) % COLLECTIVE_OUTBOX;
            }
            pool.lent += 1;
            (kept, id)
        };
        let kind = self.memory_with(dest).unwrap_or(SameNodeMemory::Device);
        let made = self.at_least(op, (kept, kind), bytes, id);
        if made.is_err() {
            self.give_back(dest, None);
        }
        made.map(Some)
    }

    /// Takes back an outbox lent to a message to `dest`: `Some` to lend
    /// again, `None` where it is given up (a new one may take its place).
    fn give_back(&self, dest: i32, outbox: Option<Outbox>) {
        let mut pools = self.outboxes.lock().unwrap_or_else(PoisonError::into_inner);
        let pool = pools.entry(dest).or_default();
        pool.lent = pool.lent.saturating_sub(1);
        pool.free.extend(outbox);
    }

    /// `kept` where it holds `bytes`, else new shared memory of `kind`
    /// of the next generation (a power of two, at least
    /// [`MIN_SHARED_BYTES`]), as outbox `id`.
    fn at_least(
        &self,
        op: &'static str,
        (kept, kind): (Option<Outbox>, SameNodeMemory),
        bytes: usize,
        id: u32,
    ) -> Result<Outbox> {
        let generation = match kept {
            Some(outbox) if outbox.memory.len() >= bytes => return Ok(outbox),
            old => old.map_or(1, |o| o.generation.wrapping_add(1)),
        };
        let len = bytes.next_power_of_two().max(MIN_SHARED_BYTES);
        let (memory, host) = match kind {
            SameNodeMemory::Host => {
                raw::create_shared_host(&self.ctx, len).map(|(m, fd)| (m, Some(fd)))
            }
            _ => self
                .ctx
                .enqueue_create_exportable_buffer_as::<u8>(len, &[MemoryHandleType::OpaqueFd])
                .map(|m| (m, None)),
        }
        .map_err(Error::device(op))?;
        Ok(Outbox {
            id,
            generation,
            memory,
            host,
            released: None,
            announced: false,
        })
    }

    /// Writes the first `len` elements (of `T`) of `outbox` with `write`
    /// (given a view of them) between an acquire (where it was released)
    /// and a release of the memory, and waits for the device.
    fn fill<T: Element>(
        &self,
        op: &'static str,
        outbox: &mut Outbox,
        len: usize,
        write: impl FnOnce(&DeviceBuffer<T>) -> vkcompute::Result<()>,
    ) -> Result<()> {
        outbox.acquire().map_err(Error::device(op))?;
        let memory = &outbox.memory;
        let part = memory
            .create_sub_buffer::<T>(0, len)
            .map_err(Error::device(op))?;
        write(&part).map_err(Error::device(op))?;
        (memory.enqueue_release_to_external()).map_err(Error::device(op))?;
        outbox.released = Some(Layout::whole(memory.len()));
        self.ctx.synchronize().map_err(Error::device(op))
    }

    /// Enqueues the copy of the `len` elements of `place` into the first
    /// bytes of `outbox` in pieces of `piece` elements, each released to
    /// the receiver after its copy and followed by an event, and submits
    /// them (after the acquire of what was released before); returns the
    /// events, in order.
    fn fill_in_pieces<T: Element>(
        &self,
        op: &'static str,
        outbox: &mut Outbox,
        (place, len): (Place<'_, T>, usize),
        piece: usize,
    ) -> Result<Vec<Event>> {
        outbox.acquire().map_err(Error::device(op))?;
        let size = size_of::<T>();
        let layout = Layout {
            piece: piece.max(1) * size,
            bytes: len * size,
        };
        let mut events = Vec::new();
        for range in layout.ranges() {
            let (start, n) = (range.start / size, range.len() / size);
            let part = (outbox
                .memory
                .create_sub_buffer::<u8>(range.start, range.len()))
            .map_err(Error::device(op))?;
            (part.create_sub_buffer::<T>(0, n))
                .and_then(|to| place.copy_range_to(start, n, &to))
                .and_then(|()| part.enqueue_release_to_external())
                .map_err(Error::device(op))?;
            // What is released so far, as the receiver acquires it.
            outbox.released = Some(Layout {
                bytes: range.end,
                ..layout
            });
            let event = (self.ctx.enqueue_record_event())
                .and_then(|event| self.ctx.flush().map(|()| event))
                .map_err(Error::device(op))?;
            events.push(event);
        }
        Ok(events)
    }

    /// Sends the descriptor of `outbox` to `dest` where it has not had
    /// this generation yet; whether it did.
    fn announce(&self, op: &'static str, outbox: &mut Outbox, dest: i32) -> Result<bool> {
        self.announce_to(op, outbox, dest..dest + 1)
    }

    /// Sends the descriptor of `outbox` to every rank of `peers` (but this
    /// one) where they have not had this generation yet, with the
    /// outbox's id and generation; whether it did.
    fn announce_to(
        &self,
        op: &'static str,
        outbox: &mut Outbox,
        peers: std::ops::Range<i32>,
    ) -> Result<bool> {
        if outbox.announced {
            return Ok(false);
        }
        let mut payload = [0u8; ANNOUNCE_BYTES];
        payload[..4].copy_from_slice(&outbox.id.to_le_bytes());
        payload[4..8].copy_from_slice(&outbox.generation.to_le_bytes());
        let exported;
        let fd = match &outbox.host {
            Some(fd) => {
                payload[8..12].copy_from_slice(&1u32.to_le_bytes());
                fd.as_fd()
            }
            None => {
                exported = (outbox.memory)
                    .export_fd(MemoryHandleType::OpaqueFd)
                    .map_err(Error::device(op))?;
                payload[12..].copy_from_slice(&exported.info.to_bytes());
                exported.fd.as_fd()
            }
        };
        for dest in peers.filter(|&p| self.is_peer(p)) {
            raw::send_fd(self.socket(op, dest)?, fd, &payload).map_err(|e| Error::SameNode {
                op,
                peer: dest,
                detail: format!("passing the shared memory over the node-local socket: {e}"),
            })?;
        }
        outbox.announced = true;
        Ok(true)
    }

    /// Writes the first `len` elements (of `T`) of this rank's collective
    /// memory (made, or grown, first) with `write` (given a view of them),
    /// between an acquire and a release, and waits for the device. Returns
    /// the memory and where it is for the header; a new generation goes to
    /// the peers with
    /// [`announce_collective`](Self::announce_collective) once the ranks
    /// agree.
    pub(crate) fn fill_collective<T: Element>(
        &self,
        op: &'static str,
        len: usize,
        write: impl FnOnce(&DeviceBuffer<T>) -> vkcompute::Result<()>,
    ) -> Result<(DeviceBuffer<u8>, SharedMemory)> {
        let kept = self
            .shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let bytes = len * size_of::<T>();
        let kind = self.collective_memory;
        let mut outbox = self.at_least(op, (kept, kind), bytes, COLLECTIVE_OUTBOX)?;
        let filled = self.fill(op, &mut outbox, len, write);
        let announced = outbox.shared();
        let memory = outbox.memory.clone();
        *self.shared.lock().unwrap_or_else(PoisonError::into_inner) = Some(outbox);
        filled.map(|()| (memory, announced))
    }

    /// Sends this rank's collective memory to every peer where it is a new
    /// generation (`size` ranks).
    pub(crate) fn announce_collective(&self, op: &'static str, size: i32) -> Result<()> {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        match shared.as_mut() {
            Some(outbox) => self.announce_to(op, outbox, 0..size).map(|_| ()),
            None => Ok(()),
        }
    }
}
