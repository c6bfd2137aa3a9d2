//! The [`Body`] of a request (`Communicator::isend` and `irecv`): the
//! elements in memory of its own, lent to MPI while their transfers are
//! under way (`raw::Held`), and for a receive the destination they land in
//! once the whole message is here.

use std::any::Any;
use std::mem::size_of;
use std::sync::Arc;

use vkcompute::{DeviceBuffer, HostBuffer};

use super::op::Body;
use super::SharedMessages;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::kept::Kept;
use crate::raw::{Comm, Held};

/// How many allocations [`Spares`] keeps.
const KEPT_SPARES: usize = 4;
/// The most bytes [`Spares`] keeps, all allocations together: larger
/// ones go back to the system when their request is done.
const MAX_SPARE_BYTES: usize = 256 << 20;

/// The host memory of finished requests, kept for the next ones (at most
/// [`KEPT_SPARES`] allocations, of any element type, [`MAX_SPARE_BYTES`]
/// in all; the oldest go first). A
/// request's elements otherwise take a fresh allocation at every call,
/// which for a large message is fresh pages, faulted in and cleared each
/// time (measured: BENCHMARKS.md, `isendrecv`). Whatever a kept
/// allocation held is overwritten before it is read: a sender's copy of
/// its buffer, or a receiver's whole message.
pub(crate) struct Spares {
    /// `Vec`s of some element type.
    kept: Kept<Box<dyn Any + Send>>,
}

impl Default for Spares {
    fn default() -> Spares {
        Spares {
            kept: Kept::new(KEPT_SPARES, MAX_SPARE_BYTES),
        }
    }
}

impl Spares {
    /// `len` elements: the smallest kept allocation of `T` that holds
    /// them, or a new one.
    pub(crate) fn take<T: Element>(&self, len: usize) -> Vec<T> {
        let fits = |spare: &Box<dyn Any + Send>| {
            let elements = spare.downcast_ref::<Vec<T>>()?;
            (elements.capacity() >= len).then_some(elements.capacity())
        };
        match self.kept.take(fits).map(|spare| spare.downcast::<Vec<T>>()) {
            Some(Ok(mut elements)) => {
                elements.resize(len, T::zeroed());
                *elements
            }
            _ => vec![T::zeroed(); len],
        }
    }

    /// Keeps `elements`' allocation for a later request, dropping the
    /// oldest kept beyond [`KEPT_SPARES`] or [`MAX_SPARE_BYTES`].
    pub(crate) fn keep<T: Element>(&self, elements: Vec<T>) {
        let bytes = elements.capacity() * size_of::<T>();
        self.kept.keep(bytes, Box::new(elements));
    }
}

/// Where a receive's elements go once they are all here.
pub(crate) enum Dest<T> {
    Device(DeviceBuffer<T>),
    Host(HostBuffer<T>),
}

/// A request's elements (a sender's copy of its buffer, or where a
/// receiver's message arrives) and a receiver's destination (a clone of
/// the handle: it stays alive).
pub(crate) struct Owned<T: Element> {
    data: Held<Vec<T>>,
    len: usize,
    dest: Option<Dest<T>>,
    /// A receiver's piece size in bytes, from the sender's header.
    piece: usize,
    /// Where the elements' allocation goes once the request is done.
    spares: Arc<Spares>,
}

impl<T: Element> Owned<T> {
    /// A sender's copy of its elements (empty where they travel in
    /// same-node memory instead), whose allocation goes to `spares` once
    /// sent.
    pub(crate) fn sending(data: Vec<T>, spares: &Arc<Spares>) -> Owned<T> {
        Owned {
            len: data.len(),
            data: Held::new(data),
            dest: None,
            piece: 1,
            spares: Arc::clone(spares),
        }
    }

    /// A receiver of `len` elements into `dest`, in memory from `spares`
    /// (given back once landed).
    pub(crate) fn receiving(len: usize, dest: Dest<T>, spares: &Arc<Spares>) -> Owned<T> {
        Owned {
            data: Held::new(spares.take(len)),
            len,
            dest: Some(dest),
            piece: 1,
            spares: Arc::clone(spares),
        }
    }

    /// Gives the elements' allocation to the spares, where MPI is done
    /// with it; the request holds none after.
    fn give_back(&mut self) {
        if let Some(data) = self.data.take() {
            self.spares.keep(data);
        }
        self.data = Held::new(Vec::new());
    }

    /// `Ok` where the elements were lent to MPI.
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

impl<T: Element> Body for Owned<T> {
    fn send(
        &mut self,
        (op, comm): (&'static str, &Comm),
        (dest, tag): (i32, i32),
        piece: usize,
    ) -> Result<Option<Error>> {
        let bytes = self.len * size_of::<T>();
        let posted = self.data.send((op, comm), (0..bytes, piece), dest, tag);
        Self::lent(op, dest, posted).map(|()| None)
    }

    fn accept(&mut self, _op: &'static str, piece: usize) -> Result<()> {
        self.piece = piece;
        Ok(())
    }

    fn recv(&mut self, (op, comm): (&'static str, &Comm), (source, tag): (i32, i32)) -> Result<()> {
        let bytes = self.len * size_of::<T>();
        let posted = self
            .data
            .recv((op, comm), (0..bytes, self.piece), source, tag);
        Self::lent(op, source, posted)
    }

    fn take(
        &mut self,
        op: &'static str,
        shared: &dyn SharedMessages,
        (source, inbox): (i32, &DeviceBuffer<u8>),
    ) -> Result<Option<Error>> {
        let len = self.len;
        let mut data = self.data.get_mut();
        let mut write = || match data.as_deref_mut() {
            Some(data) if len > 0 => inbox.create_sub_buffer::<T>(0, len)?.copy_to_slice(data),
            _ => Ok(()),
        };
        shared.take_bytes(op, (source, inbox, len * size_of::<T>()), &mut write)
    }

    fn poll(&mut self, op: &'static str, error: &mut Option<Error>) -> bool {
        self.data.poll(op, error)
    }

    fn local_error(&mut self) -> Option<Error> {
        None
    }

    /// Copies the message to its destination: an ordinary copy enqueued
    /// on a device buffer's stream (later work on it sees the message), or
    /// a host write.
    fn land(&mut self, op: &'static str) -> Result<()> {
        let landed = match (self.data.get(), &self.dest) {
            (Some(data), _) if data.is_empty() => Ok(()),
            (Some(data), Some(Dest::Device(buf))) => buf
                .enqueue_copy_from(&data[..])
                .and_then(|()| buf.context().flush())
                .map_err(Error::device(op)),
            (Some(data), Some(Dest::Host(host))) => host
                .as_mut_slice()
                .map(|mut slice| slice.copy_from_slice(data))
                .map_err(Error::device(op)),
            _ => Ok(()),
        };
        // The elements are not needed any more.
        self.give_back();
        landed
    }

    /// A sender's elements go to the spares once the message is over (a
    /// receiver's stay until they land).
    fn release(&mut self) {
        if self.dest.is_none() {
            self.give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(spares: &Spares) -> Vec<usize> {
        spares.kept.sizes()
    }

    #[test]
    fn spares_fit_by_type_and_size_within_their_bounds() {
        let spares = Spares::default();
        spares.keep(Vec::<f32>::with_capacity(100));
        spares.keep(Vec::<f32>::with_capacity(10));
        // Another type: a new allocation, the kept ones stay.
        assert!(spares.take::<u32>(10).capacity() >= 10);
        assert_eq!(kept(&spares), [400, 40]);
        // The smallest that fits, at the length asked, zeros past the old.
        let taken = spares.take::<f32>(8);
        assert_eq!((taken.len(), taken.capacity()), (8, 10));
        assert_eq!(taken, [0.0; 8]);
        assert_eq!(kept(&spares), [400]);
        // Empty allocations are not kept; the oldest go past four.
        spares.keep(Vec::<u8>::new());
        for n in 1..=4 {
            spares.keep(Vec::<u8>::with_capacity(n));
        }
        assert_eq!(kept(&spares), [1, 2, 3, 4]);
        // And past the bytes bound, whatever their number.
        spares.keep(Vec::<u8>::with_capacity(MAX_SPARE_BYTES - 5));
        assert_eq!(kept(&spares), [4, MAX_SPARE_BYTES - 5]);
        spares.keep(Vec::<u8>::with_capacity(MAX_SPARE_BYTES + 1));
        assert_eq!(kept(&spares), [4, MAX_SPARE_BYTES - 5]);
    }
}
