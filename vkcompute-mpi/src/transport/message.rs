//! The staging of one point-to-point message: the pieces a device
//! buffer's message travels in, through two pinned host buffers that take
//! turns (one is copied while MPI moves the other), and a host buffer's
//! message, or a device buffer's that maps directly
//! (`Communicator::maps_device_memory`), sent or received where it lies.

use std::mem::size_of;

use vkcompute::{DeviceBuffer, Event, HostBuffer, MappedBuffer};

use super::place::Place;
use super::pool::StagingPool;
use crate::element::Element;
use crate::error::{Error, Result};
use crate::raw::{self, streaming, Comm, PinnedSlot, COPY_PART_BYTES};
use crate::wire::PinnedBuffers;

/// The most slots a request's message is cut into (`stage_request`).
const MAX_REQUEST_SLOTS: usize = 16;

/// The pieces of a range of `len` elements, `piece` at a time.
fn pieces(len: usize, piece: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len.div_ceil(piece)).map(move |i| (i * piece, piece.min(len - i * piece)))
}

/// Two pinned host buffers that the pieces of a device buffer's message
/// take turns in: one is copied while MPI moves the other.
pub(crate) struct StagingPair {
    buffers: [HostBuffer<u8>; 2],
}

impl StagingPair {
    /// Two buffers for pieces of `piece` elements of `T` of a buffer of `len`.
    fn new<T>(pool: &StagingPool, op: &'static str, piece: usize, len: usize) -> Result<Self> {
        let bytes = piece.min(len) * size_of::<T>();
        Ok(StagingPair {
            buffers: [pool.staging(op, bytes)?, pool.staging(op, bytes)?],
        })
    }

    /// The buffer of piece `index`.
    fn of(&self, index: usize) -> &HostBuffer<u8> {
        &self.buffers[index % 2]
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
        staging: StagingPair,
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
        let staging = StagingPair::new::<T>(pool, op, piece, buf.len())?;
        let outgoing = Outgoing::Device {
            buf,
            staging,
            piece,
        };
        if let Err(e) = outgoing.start_piece(op, 0) {
            outgoing.finish(pool);
            return Err(e);
        }
        Ok(outgoing)
    }

    /// Enqueues the copy of piece `index` of a device buffer to its staging
    /// buffer, and submits it.
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
            .and_then(|()| buf.context().flush())
            .map_err(Error::device(op))
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
                let mut failed = None;
                let all: Vec<(usize, usize)> = pieces(buf.len(), *piece).collect();
                for (index, &(_, len)) in all.iter().enumerate() {
                    if index + 1 < all.len() && failed.is_none() {
                        if let Err(e) = self.start_piece(op, index + 1) {
                            failed = Some(e);
                        }
                    }
                    let bytes = len * size_of::<T>();
                    let read = staging.of(index).as_slice().map_err(Error::device(op));
                    let (to, patience) = ((dest, tag), streaming(bytes));
                    match read {
                        Ok(host) if failed.is_none() => {
                            raw::send(op, comm, &host[..bytes], to, patience)?
                        }
                        Ok(_) => raw::send(op, comm, &vec![0u8; bytes], to, patience)?,
                        Err(e) => {
                            raw::send(op, comm, &vec![0u8; bytes], to, patience)?;
                            failed.get_or_insert(e);
                        }
                    }
                }
                Ok(failed)
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
        staging: StagingPair,
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
                    staging: StagingPair::new::<T>(pool, op, piece, buf.len())?,
                    piece,
                }),
            },
            Place::Device(buf) => Ok(Incoming::Device {
                buf,
                staging: StagingPair::new::<T>(pool, op, piece, buf.len())?,
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
                let mut failed = None;
                for (index, (start, len)) in pieces(buf.len(), *piece).enumerate() {
                    let bytes = len * size_of::<T>();
                    let host = &staging.of(index);
                    let (from, patience) = ((source, tag), streaming(bytes));
                    match host.as_mut_slice() {
                        Ok(mut slice) => raw::recv(op, comm, &mut slice[..bytes], from, patience)?,
                        Err(e) => {
                            raw::recv(op, comm, &mut vec![0u8; bytes], from, patience)?;
                            failed.get_or_insert(Error::device(op)(e));
                            continue;
                        }
                    }
                    if failed.is_some() {
                        continue;
                    }
                    let stored = host
                        .create_sub_buffer::<T>(0, len)
                        .and_then(|h| {
                            buf.create_sub_buffer::<T>(start, len)
                                .and_then(|part| part.enqueue_copy_from(&h))
                        })
                        .and_then(|()| buf.context().flush());
                    if let Err(e) = stored {
                        failed = Some(Error::device(op)(e));
                    }
                }
                Ok(failed)
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

/// A request's message (`Communicator::isend` over MPI): the elements of
/// `place` in pinned slots from `pool` (its requests' buffers, taken
/// without waiting), in pieces of `piece` elements, each slot a whole
/// number of pieces (at most [`MAX_REQUEST_SLOTS`] slots, and at most
/// [`COPY_PART_BYTES`] a slot where a piece is no more). A device buffer's
/// copies are enqueued and submitted, one a slot, each followed by an
/// event, and not waited for: the request posts each slot once its event
/// is reached (`wire::Owned`). A host buffer's are made now.
pub(crate) fn stage_request<T: Element>(
    pool: &StagingPool,
    op: &'static str,
    place: Place<'_, T>,
    piece: usize,
) -> Result<Vec<(PinnedSlot, Option<Event>)>> {
    /// Where the elements come from.
    enum From<'a, T: Element> {
        Device(&'a DeviceBuffer<T>),
        Host(vkcompute::HostSlice<'a, T>),
    }
    let from = match place {
        Place::Device(b) => From::Device(b),
        Place::Host(b) => From::Host(b.as_slice().map_err(Error::device(op))?),
    };
    let len = match &from {
        From::Device(b) => b.len(),
        From::Host(elements) => elements.len(),
    };
    let size = size_of::<T>();
    let piece = piece.max(1);
    let fit = (COPY_PART_BYTES / (piece * size)).max(1);
    let per_slot = piece
        * len
            .div_ceil(piece)
            .div_ceil(MAX_REQUEST_SLOTS)
            .clamp(1, fit);
    let mut slots = Vec::with_capacity(len.div_ceil(per_slot));
    for start in (0..len).step_by(per_slot) {
        let n = per_slot.min(len - start);
        let filled = PinnedBuffers::take(pool, op, n * size)
            .and_then(|buffer| PinnedSlot::new(op, buffer, n * size))
            .and_then(|mut slot| {
                let copied = match &from {
                    From::Device(b) => (b.create_sub_buffer::<T>(start, n))
                        .and_then(|part| slot.fill_from(&part))
                        .and_then(|()| b.context().enqueue_record_event().map(Some)),
                    From::Host(elements) => slot
                        .write(bytemuck::cast_slice(&elements[start..start + n]))
                        .map(|()| None),
                };
                match copied {
                    Ok(event) => {
                        slots.push((slot, event));
                        Ok(())
                    }
                    Err(e) => {
                        // The copy may be under way: the buffer is freed
                        // once the device is done with it.
                        drop(slot);
                        Err(Error::device(op)(e))
                    }
                }
            });
        if let Err(e) = filled {
            for (slot, event) in slots {
                PinnedBuffers::keep(pool, slot.into_host(), event);
            }
            return Err(e);
        }
    }
    Ok(slots)
}
