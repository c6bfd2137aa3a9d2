//! Where a message's elements are ([`Place`], of a [`Buffer`]), and the
//! copies between device and host buffers that the transports enqueue,
//! cut into parts a driver takes.

use bytemuck::Pod;
use vkcompute::{CopySource, DeviceBuffer, HostBuffer};

use crate::error::{Error, Result};

use crate::raw::copy_part_ranges;

mod sealed {
    pub trait Sealed {}
}

/// Where a message's elements are: a device buffer (or a view of one) or a
/// host buffer.
pub enum Place<'a, T> {
    /// Device memory: mapped where it maps directly
    /// ([`Communicator::maps_device_memory`](crate::Communicator::maps_device_memory)),
    /// else staged through pinned host memory in pieces.
    Device(&'a DeviceBuffer<T>),
    /// Pinned host memory, which MPI reads and writes directly.
    Host(&'a HostBuffer<T>),
}

impl<T> Clone for Place<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Place<'_, T> {}

/// A buffer that can be sent, received and take part in collectives:
/// [`DeviceBuffer`] and [`HostBuffer`] (and their views, which are buffers
/// too). Sealed.
pub trait Buffer<T>: sealed::Sealed {
    /// Where the elements are.
    fn place(&self) -> Place<'_, T>;

    /// The number of elements.
    fn elements(&self) -> usize;
}

impl<T> sealed::Sealed for DeviceBuffer<T> {}
impl<T: Pod> Buffer<T> for DeviceBuffer<T> {
    fn place(&self) -> Place<'_, T> {
        Place::Device(self)
    }
    fn elements(&self) -> usize {
        self.len()
    }
}

impl<T> sealed::Sealed for HostBuffer<T> {}
impl<T: Pod> Buffer<T> for HostBuffer<T> {
    fn place(&self) -> Place<'_, T> {
        Place::Host(self)
    }
    fn elements(&self) -> usize {
        self.len()
    }
}

/// A device or host buffer as one end of a copy, in parts.
pub(crate) trait Parts<T: Pod>: CopySource<T> + Sized {
    /// Elements `start..start + len` (a view).
    fn part(&self, start: usize, len: usize) -> vkcompute::Result<Self>;
    /// Enqueues a copy of `src` (this buffer's length) into it.
    fn copy_in<S: CopySource<T> + ?Sized>(&self, src: &S) -> vkcompute::Result<()>;
    /// Its length in elements.
    fn elements(&self) -> usize;
}

impl<T: Pod> Parts<T> for DeviceBuffer<T> {
    fn part(&self, start: usize, len: usize) -> vkcompute::Result<Self> {
        self.create_sub_buffer::<T>(start, len)
    }
    fn copy_in<S: CopySource<T> + ?Sized>(&self, src: &S) -> vkcompute::Result<()> {
        self.enqueue_copy_from(src)
    }
    fn elements(&self) -> usize {
        self.len()
    }
}

impl<T: Pod> Parts<T> for HostBuffer<T> {
    fn part(&self, start: usize, len: usize) -> vkcompute::Result<Self> {
        self.create_sub_buffer::<T>(start, len)
    }
    fn copy_in<S: CopySource<T> + ?Sized>(&self, src: &S) -> vkcompute::Result<()> {
        self.enqueue_copy_from(src)
    }
    fn elements(&self) -> usize {
        self.len()
    }
}

/// Enqueues the copy of `len` elements of `src` from `src_at` into `dst`
/// from `dst_at`, in parts of at most `raw::COPY_PART_BYTES` (one copy where
/// it fits one and both ends are whole).
pub(crate) fn copy_parts<T: Pod, D: Parts<T>, S: Parts<T>>(
    (dst, dst_at): (&D, usize),
    (src, src_at): (&S, usize),
    len: usize,
) -> vkcompute::Result<()> {
    let one = copy_part_ranges::<T>(len).nth(1).is_none();
    let whole = |b: usize, at: usize| at == 0 && b == len;
    if one && whole(dst.elements(), dst_at) && whole(src.elements(), src_at) {
        return dst.copy_in(src);
    }
    for (start, n) in copy_part_ranges::<T>(len) {
        dst.part(dst_at + start, n)?
            .copy_in(&src.part(src_at + start, n)?)?;
    }
    Ok(())
}

impl<T: Pod> Place<'_, T> {
    /// vkcompute's `BufferMapped` where the host maps a device buffer
    /// (`DeviceBuffer::is_mapped`). Every operation refuses one before the
    /// ranks agree, as the mapped path's own mapping does: through a
    /// staged mapping (a copy) vkcompute would still let the device read
    /// the buffer, and the operation would fail only where it writes it,
    /// after the other ranks had their data.
    pub(crate) fn unmapped(&self, op: &'static str) -> Result<()> {
        match self {
            // The mapping refuses a second one: vkcompute's own error.
            Place::Device(b) if b.is_mapped() => match b.map_to_host() {
                Err(e) => Err(Error::device(op)(e)),
                // Unmapped meanwhile, by another thread.
                Ok(_) => Ok(()),
            },
            _ => Ok(()),
        }
    }

    /// Enqueues a copy of `src` into these elements on their buffer's
    /// stream, and submits it.
    pub(crate) fn copy_from<S: Parts<T>>(&self, src: &S) -> vkcompute::Result<()> {
        self.copy_into_range(0, src.elements(), src)
    }

    /// Enqueues a copy of `src` (`len` elements) into these elements from
    /// `start` on, on their buffer's stream, and submits it.
    pub(crate) fn copy_into_range<S: Parts<T>>(
        &self,
        start: usize,
        len: usize,
        src: &S,
    ) -> vkcompute::Result<()> {
        match self {
            Place::Device(b) => {
                copy_parts((*b, start), (src, 0), len).and_then(|()| b.context().flush())
            }
            Place::Host(b) => {
                copy_parts((*b, start), (src, 0), len).and_then(|()| b.context().flush())
            }
        }
    }

    /// Records an event on these elements' stream, after the work
    /// enqueued on it so far, and submits that work.
    pub(crate) fn record_event(&self) -> vkcompute::Result<vkcompute::Event> {
        let ctx = match self {
            Place::Device(b) => b.context(),
            Place::Host(b) => b.context(),
        };
        let event = ctx.enqueue_record_event()?;
        ctx.flush()?;
        Ok(event)
    }

    /// Enqueues a copy of elements `start..start + len` into `dst` on
    /// their buffer's stream, and submits it.
    pub(crate) fn copy_range_to<D: Parts<T>>(
        &self,
        start: usize,
        len: usize,
        dst: &D,
    ) -> vkcompute::Result<()> {
        match self {
            Place::Device(b) => {
                copy_parts((dst, 0), (*b, start), len).and_then(|()| b.context().flush())
            }
            Place::Host(b) => {
                copy_parts((dst, 0), (*b, start), len).and_then(|()| b.context().flush())
            }
        }
    }
}
