//! The staging of one point-to-point message: the pieces a device
//! buffer's message travels in, through a few pinned host buffers that
//! take turns (up to [`WINDOW`] pieces under way at once, each posted as
//! soon as its copy is through: `raw::stream_pieces`), and a host
//! buffer's message, or a device buffer's that maps directly
//! (`Communicator::maps_device_memory`), sent or received where it lies.

use std::mem::size_of;

use std::cell::RefCell;

use vkcompute::{DeviceBuffer, DeviceContext, Event, HostBuffer, MappedBuffer};

use super::place::Place;
use super::pool::StagingPool;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw::{self, Comm, Landing, Memory, Source};

/// The pieces of a range of `len` elements, `piece` at a time.
fn pieces(len: usize, piece: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.div_ceil(piece)).map(move |i| (i * piece, piece.min(len - i * piece)))
}

/// The most pieces of one staged message under way at once, and so the
/// pinned host buffers it takes turns in: a piece is copied between the
/// device and one while MPI moves the others.
pub(crate) const WINDOW: usize = 4;

/// The pinned host buffers the pieces of a device buffer's message take
/// turns in (piece `p` in buffer `p % count`), and for each the event of
/// the device copy last enqueued into or out of it.
pub(crate) struct Staging {
    buffers: Vec<HostBuffer<u8>>,
    copies: RefCell<Vec<Option<Event>>>,
}

impl Staging {
    /// Buffers for the pieces of `piece` elements of `T` of a buffer of
    /// `len` (as many as its pieces, up to [`WINDOW`]).
    fn new<T>(pool: &StagingPool, op: &'static str, piece: usize, len: usize) -> Result<Self> {
        let bytes = piece.min(len) * size_of::<T>();
        let count = len.div_ceil(piece.max(1)).clamp(1, WINDOW);
        let mut buffers = Vec::with_capacity(count);
        for _ in 0..count {
            match pool.staging(op, bytes) {
                Ok(b) => buffers.push(b),
                Err(e) => {
                    buffers.into_iter().for_each(|b| pool.keep_staging(b));
                    return Err(e);
                }
            }
        }
        Ok(Staging {
            copies: RefCell::new(vec![None; count]),
            buffers,
        })
    }

    /// The buffer of piece `index`.
    fn of(&self, index: usize) -> &HostBuffer<u8> {
        &self.buffers[index % self.buffers.len()]
    }

    /// How many pieces may be under way at once.
    fn window(&self) -> usize {
        self.buffers.len()
    }

    /// Notes the device copy just enqueued into or out of piece `index`'s
    /// buffer (submitted, with an event at its end).
    fn copied(&self, op: &'static str, ctx: &DeviceContext, index: usize) -> Result<()> {
        let event = ctx.record_event().map_err(Error::device(op))?;
        ctx.flush().map_err(Error::device(op))?;
        self.copies.borrow_mut()[index % self.buffers.len()] = Some(event);
        Ok(())
    }

    /// Whether the last device copy into or out of piece `index`'s buffer
    /// is through (an error counts as through: the buffer's own borrow
    /// reports it).
    fn idle(&self, index: usize) -> bool {
        let copies = self.copies.borrow();
        copies[index % self.buffers.len()]
            .as_ref()
            .is_none_or(|event| event.is_complete().unwrap_or(true))
    }

    /// Gives the buffers back for reuse.
    fn keep(self, pool: &StagingPool) {
        for b in self.buffers {
            pool.keep_staging(b);
        }
    }
}

/// The sending side of a message, prepared before its header goes out: the
/// first piece is already on its way to the host.
pub(crate) enum Outgoing<'a, T: Element> {
    Host {
        slice: vkcompute::HostSlice<'a, T>,
        piece: usize,
    },
    /// A device buffer mapped directly: MPI reads the memory itself.
    Mapped {
        mapping: MappedBuffer<'a, T>,
        piece: usize,
    },
    Device {
        buf: &'a DeviceBuffer<T>,
        staging: Staging,
        piece: usize,
    },
}

impl<'a, T: Element> Outgoing<'a, T> {
    pub(crate) fn prepare(
        (pool, maps): (&StagingPool, bool),
        op: &'static str,
        place: Place<'a, T>,
        piece: usize,
    ) -> Result<Self> {
        match place {
            Place::Host(host) => Ok(Outgoing::Host {
                slice: host.as_slice().map_err(Error::device(op))?,
                piece,
            }),
            Place::Device(buf) if maps && !buf.is_empty() => {
                // A mapped (or otherwise borrowed) buffer fails here, before
                // the header goes out, as on the staged path.
                let mapping = buf.map_to_host().map_err(Error::device(op))?;
                if mapping.is_direct() {
                    return Ok(Outgoing::Mapped { mapping, piece });
                }
                drop(mapping);
                Self::prepare_staged(pool, op, buf, piece)
            }
            Place::Device(buf) => Self::prepare_staged(pool, op, buf, piece),
        }
    }

    fn prepare_staged(
        pool: &StagingPool,
        op: &'static str,
        buf: &'a DeviceBuffer<T>,
        piece: usize,
    ) -> Result<Self> {
        let staging = Staging::new::<T>(pool, op, piece, buf.len())?;
        let outgoing = Outgoing::Device {
            buf,
            staging,
            piece,
        };
        // The first pieces on their way to the host before the header goes
        // out (a buffer mapped to the host fails here).
        let first = (0..outgoing.window()).try_for_each(|index| outgoing.start_piece(op, index));
        if let Err(e) = first {
            outgoing.finish(pool);
            return Err(e);
        }
        Ok(outgoing)
    }

    /// How many pieces are under way at once.
    fn window(&self) -> usize {
        match self {
            Outgoing::Device { staging, .. } => staging.window(),
            _ => 1,
        }
    }

    /// Enqueues the copy of piece `index` of a device buffer to its staging
    /// buffer, and submits it (nothing past the last piece).
    fn start_piece(&self, op: &'static str, index: usize) -> Result<()> {
        let Outgoing::Device {
            buf,
            staging,
            piece,
        } = self
        else {
            return Ok(());
        };
        let Some((start, len)) = pieces(buf.len(), *piece).nth(index) else {
            return Ok(());
        };
        let host = staging
            .of(index)
            .create_sub_buffer::<T>(0, len)
            .map_err(Error::device(op))?;
        buf.create_sub_buffer::<T>(start, len)
            .and_then(|part| part.enqueue_copy_to(&host))
            .map_err(Error::device(op))?;
        staging.copied(op, &buf.context(), index)
    }

    /// Sends every piece. `Ok(Some(e))`: a piece could not be read after
    /// the header went out; zeros went in its place (so that the receiver
    /// does not hang) and the trailer says so.
    pub(crate) fn send_all(
        &self,
        op: &'static str,
        comm: &Comm,
        dest: i32,
        tag: i32,
    ) -> Result<Option<Error>> {
        match self {
            Outgoing::Host { slice, piece } => {
                send_pieces(op, comm, slice, *piece, dest, tag)?;
                Ok(None)
            }
            Outgoing::Mapped { mapping, piece } => {
                send_pieces(op, comm, mapping, *piece, dest, tag)?;
                Ok(None)
            }
            Outgoing::Device {
                buf,
                staging,
                piece,
            } => {
                // A piece that could not be read after the header went out:
                // zeros go in its place and in every later one's.
                let failed = RefCell::new(None);
                let all: Vec<(usize, usize)> = pieces(buf.len(), *piece).collect();
                let size = size_of::<T>();
                let ready = |p: usize| {
                    let bytes = all[p].1 * size;
                    if failed.borrow().is_some() {
                        return Some(Memory::Send(Source::Spare(vec![0u8; bytes])));
                    }
                    if !staging.idle(p) {
                        return None;
                    }
                    Some(Memory::Send(match staging.of(p).as_slice() {
                        Ok(slice) => Source::Slot(slice, bytes),
                        Err(e) => {
                            failed.replace(Some(Error::device(op)(e)));
                            Source::Spare(vec![0u8; bytes])
                        }
                    }))
                };
                // The buffer is free again: the piece `window` later goes in.
                let done = |p: usize, _| {
                    if failed.borrow().is_none() {
                        if let Err(e) = self.start_piece(op, p + staging.window()) {
                            failed.replace(Some(e));
                        }
                    }
                };
                let window = (all.len(), staging.window());
                raw::stream_pieces(op, comm, (dest, tag), window, ready, done)?;
                Ok(failed.into_inner())
            }
        }
    }

    /// Gives the staging buffers back for reuse (or ends the mapping).
    pub(crate) fn finish(self, pool: &StagingPool) {
        if let Outgoing::Device { staging, .. } = self {
            staging.keep(pool);
        }
    }
}

/// Sends `elements` in pieces of `piece`, each one message, all posted at
/// once.
fn send_pieces<T: Element>(
    op: &'static str,
    comm: &Comm,
    elements: &[T],
    piece: usize,
    dest: i32,
    tag: i32,
) -> Result<()> {
    let bytes: &[u8] = bytemuck::cast_slice(elements);
    let size = size_of::<T>();
    let all = pieces(elements.len(), piece)
        .map(|(start, len)| &bytes[start * size..(start + len) * size])
        .collect();
    raw::send_all(op, comm, all, dest, tag)
}

/// Receives `elements` in pieces of `piece`, each one message, all posted
/// at once.
fn recv_pieces<T: Element>(
    op: &'static str,
    comm: &Comm,
    elements: &mut [T],
    piece: usize,
    source: i32,
    tag: i32,
) -> Result<()> {
    let mut bytes: &mut [u8] = bytemuck::cast_slice_mut(elements);
    let mut all = Vec::new();
    for (_, len) in pieces(bytes.len() / size_of::<T>().max(1), piece) {
        let (head, rest) = std::mem::take(&mut bytes).split_at_mut(len * size_of::<T>());
        all.push(head);
        bytes = rest;
    }
    raw::recv_all(op, comm, all, source, tag)
}

/// The receiving side of a message.
pub(crate) enum Incoming<'a, T: Element> {
    Host {
        slice: vkcompute::HostSliceMut<'a, T>,
        piece: usize,
    },
    /// A device buffer mapped directly: MPI writes the memory itself.
    Mapped {
        mapping: MappedBuffer<'a, T>,
        piece: usize,
    },
    Device {
        buf: &'a DeviceBuffer<T>,
        staging: Staging,
        piece: usize,
    },
}

impl<'a, T: Element> Incoming<'a, T> {
    pub(crate) fn prepare(
        (pool, maps): (&StagingPool, bool),
        op: &'static str,
        place: Place<'a, T>,
        piece: usize,
    ) -> Result<Self> {
        match place {
            Place::Host(host) => Ok(Incoming::Host {
                slice: host.as_mut_slice().map_err(Error::device(op))?,
                piece,
            }),
            // A buffer that cannot be mapped now (mapped already, say) takes
            // the staged path, which takes the message off the wire and then
            // fails with vkcompute's error.
            Place::Device(buf) if maps && !buf.is_empty() => match buf.map_to_host() {
                Ok(mapping) if mapping.is_direct() => Ok(Incoming::Mapped { mapping, piece }),
                _ => Ok(Incoming::Device {
                    buf,
                    staging: Staging::new::<T>(pool, op, piece, buf.len())?,
                    piece,
                }),
            },
            Place::Device(buf) => Ok(Incoming::Device {
                buf,
                staging: Staging::new::<T>(pool, op, piece, buf.len())?,
                piece,
            }),
        }
    }

    /// Receives every piece. `Ok(Some(e))`: a piece could not be written
    /// into a device buffer; the rest were still taken off the wire.
    pub(crate) fn recv_all(
        &mut self,
        op: &'static str,
        comm: &Comm,
        source: i32,
        tag: i32,
    ) -> Result<Option<Error>> {
        match self {
            Incoming::Host { slice, piece } => {
                recv_pieces(op, comm, slice, *piece, source, tag)?;
                Ok(None)
            }
            Incoming::Mapped { mapping, piece } => {
                recv_pieces(op, comm, mapping, *piece, source, tag)?;
                Ok(None)
            }
            Incoming::Device {
                buf,
                staging,
                piece,
            } => {
                // After a piece that could not be written, the rest are
                // still taken off the wire (into scratch memory).
                let failed = RefCell::new(None);
                let all: Vec<(usize, usize)> = pieces(buf.len(), *piece).collect();
                let size = size_of::<T>();
                // A buffer is free once the copy of the piece before out of
                // it is through.
                let ready = |p: usize| {
                    let bytes = all[p].1 * size;
                    if failed.borrow().is_some() {
                        return Some(Memory::Recv(Landing::Spare(vec![0u8; bytes])));
                    }
                    if !staging.idle(p) {
                        return None;
                    }
                    Some(Memory::Recv(match staging.of(p).as_mut_slice() {
                        Ok(slice) => Landing::Slot(slice, bytes),
                        Err(e) => {
                            failed.replace(Some(Error::device(op)(e)));
                            Landing::Spare(vec![0u8; bytes])
                        }
                    }))
                };
                let done = |p: usize, in_slot: bool| {
                    if !in_slot || failed.borrow().is_some() {
                        return;
                    }
                    let (start, len) = all[p];
                    let stored = staging
                        .of(p)
                        .create_sub_buffer::<T>(0, len)
                        .and_then(|h| {
                            buf.create_sub_buffer::<T>(start, len)
                                .and_then(|part| part.enqueue_copy_from(&h))
                        })
                        .map_err(Error::device(op))
                        .and_then(|()| staging.copied(op, &buf.context(), p));
                    if let Err(e) = stored {
                        failed.replace(Some(e));
                    }
                };
                let window = (all.len(), staging.window());
                raw::stream_pieces(op, comm, (source, tag), window, ready, done)?;
                Ok(failed.into_inner())
            }
        }
    }

    /// Gives the staging buffers back for reuse.
    pub(crate) fn finish(self, pool: &StagingPool) {
        if let Incoming::Device { staging, .. } = self {
            staging.keep(pool);
        }
    }
}
