//! A pinned host buffer whose memory a [`Held`](super::Held) lends to
//! MPI: the memory of a request (`Communicator::isend` and `irecv`), which
//! the device fills or drains with ordinary copies and MPI reads or writes
//! in between, without a copy through memory of the request's own.
//!
//! The buffer is the slot's alone: it comes from the communicator's
//! staging pool, whose users drop every other handle (their views) before
//! they give a buffer back, and the slot hands out no handle. Device work
//! on it is enqueued only through the slot's `&mut self` methods, which a
//! `Held` refuses while MPI holds the memory, and [`Stable::settle`] waits
//! for that work before the memory is lent.

use std::ptr::NonNull;

use bytemuck::Pod;
use vkcompute::{DeviceBuffer, HostBuffer};

use super::held::Stable;
use crate::error::{Error, Result};

/// The most bytes one copy moves: lavapipe of Mesa 22.3 crashes in a
/// `vkCmdCopyBuffer` region of 2^31 bytes or more (a 2 GiB send on the
/// same-node path did), so longer copies go as several of at most 1 GiB.
pub(crate) const COPY_PART_BYTES: usize = 1 << 30;

/// `len` elements of `T` in parts of at most [`COPY_PART_BYTES`]: (start,
/// length) each, none for none.
pub(crate) fn copy_part_ranges<T>(len: usize) -> impl Iterator<Item = (usize, usize)> {
    let part = (COPY_PART_BYTES / std::mem::size_of::<T>().max(1)).max(1);
    (0..len)
        .step_by(part)
        .map(move |start| (start, part.min(len - start)))
}

/// A pinned host buffer's first `len` bytes, lent to MPI through a
/// [`Held`](super::Held) (see the module documentation).
pub(crate) struct PinnedSlot {
    host: HostBuffer<u8>,
    /// The first byte of `host`'s mapping, which lasts as long as `host`.
    base: NonNull<u8>,
    len: usize,
    /// Whether device work may have been enqueued on the buffer since the
    /// last [`settle`](Stable::settle): until then `bytes` is empty.
    unsettled: bool,
}

// SAFETY: `base` points into the mapping that `host` (which is `Send`)
// owns; nothing about it is tied to a thread.
unsafe impl Send for PinnedSlot {}

impl PinnedSlot {
    /// A slot of the first `len` bytes of `host` (a buffer of the staging
    /// pool: see the module documentation), once the device work on it is
    /// done.
    pub(crate) fn new(op: &'static str, host: HostBuffer<u8>, len: usize) -> Result<PinnedSlot> {
        if len > host.len() {
            return Err(Error::InvalidLength {
                op,
                detail: format!("{len} bytes in a staging buffer of {}", host.len()),
            });
        }
        let base = {
            let mut mapped = host.as_mut_slice().map_err(Error::device(op))?;
            NonNull::new(mapped.as_mut_ptr()).unwrap_or(NonNull::dangling())
        };
        Ok(PinnedSlot {
            host,
            base,
            len,
            unsettled: false,
        })
    }

    /// The slot's length in bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Enqueues the copy of `src` into the slot's first bytes (in parts of
    /// at most [`COPY_PART_BYTES`]), and submits it; [`settle`](Stable::settle)
    /// waits for it.
    pub(crate) fn fill_from<T: Pod>(&mut self, src: &DeviceBuffer<T>) -> vkcompute::Result<()> {
        self.fill_from_at(0, src)
    }

    /// [`fill_from`](Self::fill_from) into the slot's bytes from `at` on
    /// (a multiple of `T`'s size).
    pub(crate) fn fill_from_at<T: Pod>(
        &mut self,
        at: usize,
        src: &DeviceBuffer<T>,
    ) -> vkcompute::Result<()> {
        self.unsettled = true;
        let first = at / size_of::<T>().max(1);
        for (start, n) in copy_part_ranges::<T>(src.len()) {
            let host = self.host.create_sub_buffer::<T>(first + start, n)?;
            src.create_sub_buffer::<T>(start, n)?
                .enqueue_copy_to(&host)?;
        }
        src.context().flush()
    }

    /// Copies `src` into the slot's first bytes on the host.
    pub(crate) fn write(&mut self, src: &[u8]) -> vkcompute::Result<()> {
        self.unsettled = true;
        let mut mapped = self.host.as_mut_slice()?;
        mapped[..src.len()].copy_from_slice(src);
        Ok(())
    }

    /// Enqueues the copy of the slot's first `dst.len()` elements into
    /// `dst` (in parts of at most [`COPY_PART_BYTES`]), on `dst`'s stream,
    /// and submits it (what MPI wrote is made visible to the device first).
    pub(crate) fn drain_to<T: Pod>(&mut self, dst: &DeviceBuffer<T>) -> vkcompute::Result<()> {
        self.unsettled = true;
        // A host borrow's end flushes host writes where the memory is not
        // coherent; it waits for nothing, the slot being settled.
        drop(self.host.as_mut_slice()?);
        for (start, n) in copy_part_ranges::<T>(dst.len()) {
            let host = self.host.create_sub_buffer::<T>(start, n)?;
            dst.create_sub_buffer::<T>(start, n)?
                .enqueue_copy_from(&host)?;
        }
        dst.context().flush()
    }

    /// Copies the slot's first bytes into `dst` on the host.
    pub(crate) fn read(&self, dst: &mut [u8]) -> vkcompute::Result<()> {
        let mapped = self.host.as_slice()?;
        dst.copy_from_slice(&mapped[..dst.len()]);
        Ok(())
    }

    /// The buffer, for the pool (device work enqueued on it may still be
    /// under way: the pool's next user waits for it).
    pub(crate) fn into_host(self) -> HostBuffer<u8> {
        self.host
    }
}

// SAFETY: `bytes` and `bytes_mut` return `base..base + len`, inside the
// mapping of `host` (`new` checks `len`), which stays in place while the
// slot owns `host`. After `settle`, no device work on the buffer is under
// way (a host borrow waits for all of it) and none is enqueued until a
// `&mut self` method other than `bytes_mut` runs (the only ways to enqueue
// any; the buffer has no other handle: the module documentation), so
// nothing but these methods reaches the memory. Before `settle` they
// return empty slices.
unsafe impl Stable for PinnedSlot {
    fn settle(&mut self, op: &'static str) -> Result<()> {
        // Settled already (by `new`'s borrow or the last `settle`), and
        // nothing enqueued or written since: a second borrow would only
        // lock the buffer again (a sender's slot is settled before it is
        // posted, and by `Held::send`).
        if !self.unsettled {
            return Ok(());
        }
        // A host borrow waits for the device work on the buffer and makes
        // its writes visible to the host where the memory is not coherent.
        drop(self.host.as_mut_slice().map_err(Error::device(op))?);
        self.unsettled = false;
        Ok(())
    }

    fn bytes(&self) -> &[u8] {
        if self.unsettled {
            return &[];
        }
        // SAFETY: see the impl's SAFETY note: `len` bytes of the live
        // mapping, which nothing else reaches while the slot is settled.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        if self.unsettled {
            return &mut [];
        }
        // SAFETY: as in `bytes`; `&mut self` makes this the only slice.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.len) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkcompute::{ContextOptions, DeviceContext};

    /// A slot shows nothing until settled after device work on it; then
    /// what the device copied in. What is written into it goes back out to
    /// the device. A slot longer than its buffer is refused. Parts are
    /// whole and in order.
    #[test]
    fn a_slot_lends_its_memory_only_once_settled() {
        let ctx = DeviceContext::with_options(ContextOptions::new().pipeline_cache_dir(None))
            .expect("a context (lavapipe: run `make test`)");
        let host = ctx.enqueue_create_host_buffer::<u8>(64).unwrap();
        let mut slot = PinnedSlot::new("t", host, 40).unwrap();
        let src = ctx.enqueue_create_buffer::<u32>(10).unwrap();
        src.enqueue_copy_from(&(0..10u32).collect::<Vec<_>>()[..])
            .unwrap();
        slot.fill_from(&src).unwrap();
        assert!(slot.bytes().is_empty() && slot.bytes_mut().is_empty());
        slot.settle("t").unwrap();
        let words: Vec<u32> = (slot.bytes().chunks(4))
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
            .collect();
        assert_eq!(words, (0..10).collect::<Vec<_>>());
        slot.write(bytemuck::cast_slice(&[7u32; 10])).unwrap();
        slot.settle("t").unwrap();
        slot.bytes_mut()[..4].copy_from_slice(&9u32.to_le_bytes());
        let dst = ctx.enqueue_create_buffer::<u32>(10).unwrap();
        slot.drain_to(&dst).unwrap();
        let mut want = [7u32; 10];
        want[0] = 9;
        assert_eq!(dst.to_vec().unwrap(), want);
        let host = slot.into_host();
        assert!(PinnedSlot::new("t", host, 65).is_err());
        let all: Vec<_> = copy_part_ranges::<u64>(3 * (COPY_PART_BYTES / 8) + 1).collect();
        let part = COPY_PART_BYTES / 8;
        assert_eq!(
            all,
            [(0, part), (part, part), (2 * part, part), (3 * part, 1)]
        );
        assert_eq!(copy_part_ranges::<u8>(0).count(), 0);
    }
}
