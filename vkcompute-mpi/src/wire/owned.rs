//! The [`Body`] of a request (`Communicator::isend` and `irecv`): the
//! message in pinned host buffers of the communicator's staging pool
//! (`raw::PinnedSlot`), lent to MPI while their transfers are under way
//! (`raw::Held`). A sender's buffer is in several slots, each filled by a
//! device copy enqueued at `isend` and sent once that copy is through, so
//! that the copies of the later slots overlap the transfers of the
//! earlier; a receiver's message lands in one, and from there in its
//! destination, once the whole message is here.

use std::mem::size_of;
use std::ops::Range;
use std::sync::Arc;

use vkcompute::{DeviceBuffer, Event, HostBuffer};

use super::op::Body;
use super::SharedMessages;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw::{Comm, Held, PinnedSlot};

/// Where a request's pinned buffers come from and go back to: the
/// communicator's staging pool (`transport::pool`), whose requests'
/// buffers are their own.
pub(crate) trait PinnedBuffers: Send + Sync {
    /// A buffer of at least `bytes` bytes with no device work under way on
    /// it (a kept one whose work is done, else a new one): taking one
    /// never waits.
    fn take(&self, op: &'static str, bytes: usize) -> Result<HostBuffer<u8>>;
    /// Gives back a buffer, with the event after the device work still
    /// under way on it, if any.
    fn keep(&self, buffer: HostBuffer<u8>, pending: Option<Event>);
}

/// Where a receive's elements go once they are all here.
pub(crate) enum Dest<T> {
    Device(DeviceBuffer<T>),
    Host(HostBuffer<T>),
}

/// One of a request's pinned buffers, and the event after the device
/// work on it that may still be under way: a sender's copy in, a
/// receiver's copy out.
struct Slot {
    held: Held<PinnedSlot>,
    pending: Option<Event>,
}

/// Where a sender's slots go: its MPI communicator, the receiver, the
/// data's tag and the piece size in bytes.
type Target = (Comm, i32, i32, usize);

/// A request's message in pinned memory (see the module documentation)
/// and a receiver's destination (a clone of the handle: it stays alive).
pub(crate) struct Owned<T: Element> {
    /// A sender's slots, its elements in order, each a whole number of
    /// pieces; a receiver's one slot, once it accepted the message.
    slots: Vec<Slot>,
    /// A sender's next slot to post, once its copy is through.
    next: usize,
    /// Where a sender's slots go, once the receiver accepted the message.
    target: Option<Target>,
    /// A sender's first slot whose copy failed (zeros went instead).
    failed: Option<Error>,
    /// Zeros sent in place of a slot whose copy failed.
    zeros: Vec<Held<Vec<u8>>>,
    len: usize,
    dest: Option<Dest<T>>,
    /// A receiver's piece size in bytes, from the sender's header.
    piece: usize,
    pool: Arc<dyn PinnedBuffers>,
}

impl<T: Element> Owned<T> {
    /// A sender's message in `slots`, each with the event after its copy
    /// in (none where the message travels in same-node memory instead),
    /// given back to `pool` once sent.
    pub(crate) fn sending(
        slots: Vec<(PinnedSlot, Option<Event>)>,
        len: usize,
        pool: &Arc<dyn PinnedBuffers>,
    ) -> Owned<T> {
        let slots = (slots.into_iter())
            .map(|(slot, pending)| Slot {
                held: Held::new(slot),
                pending,
            })
            .collect();
        Owned {
            slots,
            next: 0,
            target: None,
            failed: None,
            zeros: Vec::new(),
            len,
            dest: None,
            piece: 1,
            pool: Arc::clone(pool),
        }
    }

    /// A receiver of `len` elements into `dest`, in a buffer from `pool`
    /// once it accepts the message (given back once landed).
    pub(crate) fn receiving(len: usize, dest: Dest<T>, pool: &Arc<dyn PinnedBuffers>) -> Owned<T> {
        let mut owned = Owned::sending(Vec::new(), len, pool);
        owned.dest = Some(dest);
        owned
    }

    /// A receiver's slot for the whole message, from the pool (one with
    /// no device work under way: this does not wait).
    fn make_room(&mut self, op: &'static str) -> Result<()> {
        let bytes = self.len * size_of::<T>();
        if bytes == 0 || !self.slots.is_empty() {
            return Ok(());
        }
        let buffer = self.pool.take(op, bytes)?;
        self.slots.push(Slot {
            held: Held::new(PinnedSlot::new(op, buffer, bytes)?),
            pending: None,
        });
        Ok(())
    }

    /// A sender: posts its slots in order, each once its copy is through
    /// (asked without waiting); a slot whose copy failed goes as zeros.
    /// Stops at the first slot whose copy is still under way.
    fn post_ready(&mut self, op: &'static str) -> Result<()> {
        let Some((comm, dest, tag, piece)) = self.target.clone() else {
            return Ok(());
        };
        while let Some(slot) = self.slots.get_mut(self.next) {
            let through = (slot.pending.as_ref()).map_or(Ok(true), Event::is_complete);
            let settled = match through {
                Ok(false) => return Ok(()),
                Ok(true) => slot.held.settle(op),
                Err(e) => Err(Error::device(op)(e)),
            };
            let bytes = slot.held.get().map_or(0, PinnedSlot::len);
            let posted = match settled {
                Ok(()) => (slot.held).send((op, &comm), (0..bytes, piece), dest, tag),
                Err(e) => {
                    self.failed.get_or_insert(e);
                    let mut zeros = Held::new(vec![0u8; bytes]);
                    let posted = zeros.send((op, &comm), (0..bytes, piece), dest, tag);
                    self.zeros.push(zeros);
                    posted
                }
            };
            self.next += 1;
            if let Err(e) = Self::lent(op, dest, posted) {
                // The rest will not go: nothing waits for them.
                self.next = self.slots.len();
                return Err(e);
            }
        }
        Ok(())
    }

    /// Gives the slots MPI is done with back to the pool, with the device
    /// work still under way on them (those MPI holds stay, and are leaked
    /// if the request is dropped).
    fn give_back(&mut self) {
        for slot in std::mem::take(&mut self.slots) {
            let mut slot = slot;
            match slot.held.take() {
                Some(buffer) => self.pool.keep(buffer.into_host(), slot.pending.take()),
                None => self.slots.push(slot),
            }
        }
        self.zeros.retain_mut(|zeros| zeros.take().is_none());
    }

    /// `Ok` where the memory was lent to MPI.
    fn lent(op: &'static str, peer: i32, posted: Result<bool>) -> Result<()> {
        match posted? {
            true => Ok(()),
            false => Err(Error::Protocol {
                op,
                peer,
                detail: "a message's data posted twice".into(),
            }),
        }
    }
}

impl<T: Element> Drop for Owned<T> {
    fn drop(&mut self) {
        self.give_back();
    }
}

impl<T: Element> Body for Owned<T> {
    /// Posts the slots whose copies are through (the copies were enqueued
    /// at `isend`); the others go as theirs complete ([`send_rest`]), so
    /// that nothing here waits for the device.
    ///
    /// [`send_rest`]: Body::send_rest
    fn send(
        &mut self,
        (op, comm): (&'static str, &Comm),
        (dest, tag): (i32, i32),
        piece: usize,
    ) -> Result<Option<Error>> {
        self.target = Some((comm.clone(), dest, tag, piece));
        self.post_ready(op)?;
        Ok(None)
    }

    fn send_rest(&mut self, op: &'static str) -> Result<Option<Option<Error>>> {
        self.post_ready(op)?;
        Ok((self.next == self.slots.len()).then(|| self.failed.take()))
    }

    fn accept(&mut self, op: &'static str, piece: usize) -> Result<()> {
        self.piece = piece;
        self.make_room(op)
    }

    fn recv(&mut self, (op, comm): (&'static str, &Comm), (source, tag): (i32, i32)) -> Result<()> {
        let bytes = self.len * size_of::<T>();
        let Some(slot) = self.slots.first_mut() else {
            return Ok(());
        };
        let posted = (slot.held).recv((op, comm), (0..bytes, self.piece), source, tag);
        Self::lent(op, source, posted)
    }

    fn take(
        &mut self,
        op: &'static str,
        shared: &dyn SharedMessages,
        from: (i32, &DeviceBuffer<u8>),
        (range, own): (Range<usize>, Range<usize>),
    ) -> Result<Option<Error>> {
        // Without room the message is refused, as over MPI.
        self.make_room(op)?;
        let inbox = from.1;
        let mut slot = self.slots.first_mut().and_then(|s| s.held.get_mut());
        let mut write = || match slot.as_deref_mut() {
            Some(slot) => {
                let part = inbox.create_sub_buffer::<T>(range.start, range.len())?;
                slot.fill_from_at(range.start * size_of::<T>(), &part)
            }
            None => Ok(()),
        };
        shared.take_part(op, from, own, &mut write)
    }

    fn poll(&mut self, op: &'static str, error: &mut Option<Error>) -> bool {
        // A sender's slots not yet posted are still to go.
        let mut idle = self.target.is_none() || self.next == self.slots.len();
        for slot in &mut self.slots {
            idle &= slot.held.poll(op, error);
        }
        for zeros in &mut self.zeros {
            idle &= zeros.poll(op, error);
        }
        idle
    }

    fn local_error(&mut self) -> Option<Error> {
        None
    }

    /// Copies the message to its destination: an ordinary copy enqueued
    /// on a device buffer's stream (later work on it sees the message), or
    /// a host write.
    fn land(&mut self, op: &'static str) -> Result<()> {
        let landed = match (self.slots.first_mut(), &self.dest) {
            (Some(slot), Some(Dest::Device(buf))) => match slot.held.get_mut() {
                Some(pinned) => pinned.drain_to(buf).and_then(|()| {
                    // The slot goes back with the copy out of it, which
                    // the pool's next request will not wait for.
                    slot.pending = Some(buf.context().enqueue_record_event()?);
                    Ok(())
                }),
                None => Ok(()),
            },
            (Some(slot), Some(Dest::Host(host))) => match slot.held.get() {
                Some(pinned) => host
                    .as_mut_slice()
                    .and_then(|mut dst| pinned.read(bytemuck::cast_slice_mut(&mut dst))),
                None => Ok(()),
            },
            _ => Ok(()),
        };
        self.give_back();
        landed.map_err(Error::device(op))
    }

    /// A sender's slots go back to the pool once the message is over (a
    /// receiver's stay until they land).
    fn release(&mut self) {
        if self.dest.is_none() {
            self.give_back();
        }
    }
}
