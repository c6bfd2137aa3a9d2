//! The [`Body`] of a request (`Communicator::isend` and `irecv`): the
//! message in pinned host buffers of the communicator's staging pool
//! (`raw::PinnedSlot`), lent to MPI while their transfers are under way
//! (`raw::Held`). A sender's buffer is in several slots, each filled by a
//! device copy enqueued at `isend` and sent once that copy is through, so
//! that the copies of the later slots overlap the transfers of the
//! earlier; a receiver's message lands in one, and from there in its
//! destination, once the whole message is here.

use std::mem::size_of;
use std::sync::Arc;

use vkcompute::{DeviceBuffer, HostBuffer};

use super::op::Body;
use super::SharedMessages;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw::{Comm, Held, PinnedSlot};

/// Where a request's pinned buffers come from and go back to: the
/// communicator's staging pool (`transport::pool`).
pub(crate) trait PinnedBuffers: Send + Sync {
    /// A buffer of at least `bytes` bytes (a receiver's message).
    fn staging(&self, op: &'static str, bytes: usize) -> Result<HostBuffer<u8>>;
    /// Gives back a buffer of [`staging`](Self::staging).
    fn keep_staging(&self, buffer: HostBuffer<u8>);
    /// Gives back a sender's slots.
    fn keep_slots(&self, slots: Vec<HostBuffer<u8>>);
}

/// Where a receive's elements go once they are all here.
pub(crate) enum Dest<T> {
    Device(DeviceBuffer<T>),
    Host(HostBuffer<T>),
}

/// A request's message in pinned memory (see the module documentation)
/// and a receiver's destination (a clone of the handle: it stays alive).
pub(crate) struct Owned<T: Element> {
    /// A sender's slots, its elements in order, each a whole number of
    /// pieces; a receiver's one slot, once it accepted the message.
    slots: Vec<Held<PinnedSlot>>,
    /// Zeros sent in place of a slot whose copy failed.
    zeros: Vec<Held<Vec<u8>>>,
    len: usize,
    dest: Option<Dest<T>>,
    /// A receiver's piece size in bytes, from the sender's header.
    piece: usize,
    pool: Arc<dyn PinnedBuffers>,
}

impl<T: Element> Owned<T> {
    /// A sender's message in `slots` (none where it travels in same-node
    /// memory instead), given back to `pool` once sent.
    pub(crate) fn sending(
        slots: Vec<PinnedSlot>,
        len: usize,
        pool: &Arc<dyn PinnedBuffers>,
    ) -> Owned<T> {
        Owned {
            slots: slots.into_iter().map(Held::new).collect(),
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
        Owned {
            slots: Vec::new(),
            zeros: Vec::new(),
            len,
            dest: Some(dest),
            piece: 1,
            pool: Arc::clone(pool),
        }
    }

    /// A receiver's slot for the whole message, from the pool.
    fn make_room(&mut self, op: &'static str) -> Result<()> {
        let bytes = self.len * size_of::<T>();
        if bytes == 0 || !self.slots.is_empty() {
            return Ok(());
        }
        let buffer = self.pool.staging(op, bytes)?;
        self.slots
            .push(Held::new(PinnedSlot::new(op, buffer, bytes)?));
        Ok(())
    }

    /// Gives the slots MPI is done with back to the pool (those it still
    /// holds stay, and are leaked if the request is dropped).
    fn give_back(&mut self) {
        let mut back = Vec::new();
        self.slots.retain_mut(|slot| match slot.take() {
            Some(slot) => {
                back.push(slot.into_host());
                false
            }
            None => true,
        });
        match self.dest {
            Some(_) => back.into_iter().for_each(|b| self.pool.keep_staging(b)),
            None => self.pool.keep_slots(back),
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
    /// Sends the slots in order, each once its copy is through (waiting
    /// for it: the copies were enqueued at `isend`, and the later ones
    /// run while the earlier slots travel); a slot whose copy failed goes
    /// as zeros, and the trailer says so.
    fn send(
        &mut self,
        (op, comm): (&'static str, &Comm),
        (dest, tag): (i32, i32),
        piece: usize,
    ) -> Result<Option<Error>> {
        let mut failed = None;
        for slot in &mut self.slots {
            let bytes = slot.get().map_or(0, PinnedSlot::len);
            let posted = match slot.settle(op) {
                Ok(()) => slot.send((op, comm), (0..bytes, piece), dest, tag),
                Err(e) => {
                    failed.get_or_insert(e);
                    let mut zeros = Held::new(vec![0u8; bytes]);
                    let posted = zeros.send((op, comm), (0..bytes, piece), dest, tag);
                    self.zeros.push(zeros);
                    posted
                }
            };
            Self::lent(op, dest, posted)?;
        }
        Ok(failed)
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
        let posted = slot.recv((op, comm), (0..bytes, self.piece), source, tag);
        Self::lent(op, source, posted)
    }

    fn take(
        &mut self,
        op: &'static str,
        shared: &dyn SharedMessages,
        (source, inbox): (i32, &DeviceBuffer<u8>),
    ) -> Result<Option<Error>> {
        let len = self.len;
        // Without room the message is refused, as over MPI.
        self.make_room(op)?;
        let mut slot = self.slots.first_mut().and_then(Held::get_mut);
        let mut write = || match slot.as_deref_mut() {
            Some(slot) => slot.fill_from(&inbox.create_sub_buffer::<T>(0, len)?),
            None => Ok(()),
        };
        shared.take_bytes(op, (source, inbox, len * size_of::<T>()), &mut write)
    }

    fn poll(&mut self, op: &'static str, error: &mut Option<Error>) -> bool {
        let mut idle = true;
        for slot in &mut self.slots {
            idle &= slot.poll(op, error);
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
        let slot = self.slots.first_mut().and_then(Held::get_mut);
        let landed = match (slot, &self.dest) {
            (Some(slot), Some(Dest::Device(buf))) => slot.drain_to(buf),
            (Some(slot), Some(Dest::Host(host))) => host
                .as_mut_slice()
                .and_then(|mut dst| slot.read(bytemuck::cast_slice_mut(&mut dst))),
            _ => Ok(()),
        };
        // The slot goes back to the pool (its next user waits for the
        // copy out of it).
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
