//! The [`Body`] of a blocking call's message (`Communicator::send` and
//! `recv`): the caller's buffer itself, staged through pinned host memory
//! in pieces, mapped, or a host buffer ([`message`](super::message)), or
//! on the same-node transport copied straight out of the sender's memory.

use std::mem::size_of;
use std::ops::Range;

use vkcompute::DeviceBuffer;

use super::message::{Incoming, Outgoing};
use super::place::Place;
use super::pool::StagingPool;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw::Comm;
use crate::wire::{Body, SharedMessages};

/// A blocking send's data: prepared (its first pieces on their way to
/// the host) before the header goes out, or none where it travels in the
/// same-node memory.
pub(crate) struct Sending<'a, T: Element> {
    out: Option<Outgoing<'a, T>>,
    pool: &'a StagingPool,
}

impl<'a, T: Element> Sending<'a, T> {
    pub(crate) fn new(out: Option<Outgoing<'a, T>>, pool: &'a StagingPool) -> Self {
        Sending { out, pool }
    }
}

impl<T: Element> Body for Sending<'_, T> {
    fn send(
        &mut self,
        (op, comm): (&'static str, &Comm),
        (dest, tag): (i32, i32),
        _piece: usize,
    ) -> Result<Option<Error>> {
        match &self.out {
            // In the pieces its header announced.
            Some(out) => out.send_all(op, comm, dest, tag),
            None => Ok(None),
        }
    }

    fn accept(&mut self, _op: &'static str, _piece: usize) -> Result<()> {
        Ok(())
    }

    fn recv(&mut self, _at: (&'static str, &Comm), _from: (i32, i32)) -> Result<()> {
        Ok(())
    }

    fn take(
        &mut self,
        _op: &'static str,
        _shared: &dyn SharedMessages,
        _inbox: (i32, &DeviceBuffer<u8>),
        _part: (Range<usize>, Range<usize>),
    ) -> Result<Option<Error>> {
        Ok(None)
    }

    fn poll(&mut self, _op: &'static str, _error: &mut Option<Error>) -> bool {
        true
    }

    fn local_error(&mut self) -> Option<Error> {
        None
    }

    fn land(&mut self, _op: &'static str) -> Result<()> {
        Ok(())
    }

    fn release(&mut self) {
        if let Some(out) = self.out.take() {
            out.finish(self.pool);
        }
    }
}

/// A blocking receive's destination, and once the header accepted the
/// message, how it comes in (staged, mapped or a host buffer's memory).
pub(crate) struct Receiving<'a, T: Element> {
    place: Place<'a, T>,
    pool: &'a StagingPool,
    maps: bool,
    incoming: Option<Incoming<'a, T>>,
    /// A piece that could not be written (the rest still came off the
    /// wire), or a copy out of same-node memory that failed.
    local: Option<Error>,
}

impl<'a, T: Element> Receiving<'a, T> {
    /// A receive into `place`, staged through `pool`, or in a device
    /// buffer's mapping where `maps`.
    pub(crate) fn new(place: Place<'a, T>, (pool, maps): (&'a StagingPool, bool)) -> Self {
        Receiving {
            place,
            pool,
            maps,
            incoming: None,
            local: None,
        }
    }
}

impl<T: Element> Body for Receiving<'_, T> {
    fn send(
        &mut self,
        _at: (&'static str, &Comm),
        _to: (i32, i32),
        _piece: usize,
    ) -> Result<Option<Error>> {
        Ok(None)
    }

    fn accept(&mut self, op: &'static str, piece: usize) -> Result<()> {
        let piece = (piece / size_of::<T>()).max(1);
        let place = self.place;
        self.incoming = Some(Incoming::prepare((self.pool, self.maps), op, place, piece)?);
        Ok(())
    }

    fn recv(&mut self, (op, comm): (&'static str, &Comm), (source, tag): (i32, i32)) -> Result<()> {
        let Some(mut incoming) = self.incoming.take() else {
            return Ok(());
        };
        let received = incoming.recv_all(op, comm, source, tag);
        incoming.finish(self.pool);
        self.local = received?;
        Ok(())
    }

    fn take(
        &mut self,
        op: &'static str,
        shared: &dyn SharedMessages,
        from: (i32, &DeviceBuffer<u8>),
        (range, own): (Range<usize>, Range<usize>),
    ) -> Result<Option<Error>> {
        let (place, inbox) = (&self.place, from.1);
        let mut write = || match range.len() {
            0 => Ok(()),
            n => place.copy_into_range(
                range.start,
                n,
                &inbox.create_sub_buffer::<T>(range.start, n)?,
            ),
        };
        shared.take_part(op, from, own, &mut write)
    }

    fn poll(&mut self, _op: &'static str, _error: &mut Option<Error>) -> bool {
        true
    }

    fn local_error(&mut self) -> Option<Error> {
        self.local.take()
    }

    fn land(&mut self, _op: &'static str) -> Result<()> {
        Ok(())
    }

    fn release(&mut self) {
        if let Some(incoming) = self.incoming.take() {
            incoming.finish(self.pool);
        }
    }
}
