//! The [`Body`] of a request (`Communicator::isend` and `irecv`): the
//! elements in memory of its own, lent to MPI while their transfers are
//! under way (`raw::Held`), and for a receive the destination they land in
//! once the whole message is here.

use std::mem::size_of;

use vkcompute::{DeviceBuffer, HostBuffer};

use super::op::Body;
use super::SharedMessages;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw::{Comm, Held};

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
}

impl<T: Element> Owned<T> {
    /// A sender's copy of its elements (empty where they travel in
    /// same-node memory instead).
    pub(crate) fn sending(data: Vec<T>) -> Owned<T> {
        Owned {
            len: data.len(),
            data: Held::new(data),
            dest: None,
            piece: 1,
        }
    }

    /// A receiver of `len` elements into `dest`.
    pub(crate) fn receiving(len: usize, dest: Dest<T>) -> Owned<T> {
        Owned {
            data: Held::new(vec![T::zeroed(); len]),
            len,
            dest: Some(dest),
            piece: 1,
        }
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
        self.data = Held::new(Vec::new());
        landed
    }

    fn release(&mut self) {}
}
