//! The host side: `HostBuffer<T>` (pinned, host-visible memory the device
//! copies to and from), safe host slices of it, `map_to_host` for device
//! buffers, and raw-pointer copies.

use std::marker::PhantomData;
use std::mem::{align_of, size_of};
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use bytemuck::Pod;

use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::event::{Event, Reached};
use crate::resource::HostAccess;
use crate::view::{Source, View};
use crate::vk::memory::{MappedRange, RawDestination};
use crate::vk::MemoryUsage;

/// `len` elements of `T` in mapped memory, which a host borrow of their
/// view protects for as long as the holder lives: no device work writes
/// them meanwhile, and none touches them while the borrow is exclusive.
struct Elements<T> {
    /// `None` for no elements.
    mapped: Option<MappedRange>,
    len: usize,
    /// Neither `Send` nor `Sync`, as the slices over it have always been.
    _element: PhantomData<NonNull<T>>,
}

#[allow(
    unsafe_code,
    reason = "references into mapped memory, which the view's host borrow protects"
)]
impl<T: Pod> Elements<T> {
    fn get(&self) -> &[T] {
        let Some(mapped) = self.mapped else {
            return &[];
        };
        // SAFETY: `mapped` is `len` elements of `T` of mapped memory,
        // aligned for `T` (checked when borrowed); Pod makes any bytes valid
        // elements; the borrow this value stands for keeps device writes
        // (and host writers) away while `&self` lives.
        unsafe { std::slice::from_raw_parts(mapped.as_ptr().cast::<T>(), self.len) }
    }

    /// For holders of an exclusive borrow only.
    fn get_mut(&mut self) -> &mut [T] {
        let Some(mapped) = self.mapped else {
            return &mut [];
        };
        // SAFETY: as in `get`; the borrow is exclusive, so nothing else (no
        // device work, no other host reference) reads or writes the
        // elements while `&mut self` lives.
        unsafe { std::slice::from_raw_parts_mut(mapped.as_ptr().cast::<T>(), self.len) }
    }
}

/// A buffer of `T` in pinned host memory that the device copies to and
/// from directly (host-cached memory, fast for the CPU to read).
///
/// Host access is safe: [`as_slice`](Self::as_slice) waits for exactly the
/// pending device work that writes the buffer, and
/// [`as_mut_slice`](Self::as_mut_slice) for the work that reads or writes
/// it; device work on the buffer cannot be enqueued while a conflicting
/// slice is alive. Cloning is cheap (same memory); the memory is freed once
/// the last clone is dropped and the stream has passed its last use.
///
/// ```
/// # fn main() -> vkcompute::Result<()> {
/// let ctx = vkcompute::DeviceContext::new()?;
/// let dev = ctx.enqueue_create_buffer::<u32>(4)?;
/// dev.enqueue_fill(3)?;
/// let host = ctx.enqueue_create_host_buffer::<u32>(4)?;
/// dev.enqueue_copy_to(&host)?;
/// assert_eq!(&*host.as_slice()?, &[3, 3, 3, 3]); // waits for the copy
/// # Ok(()) }
/// ```
pub struct HostBuffer<T> {
    pub(crate) view: View,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

crate::buffer::typed_buffer!(HostBuffer, "HostBuffer");

/// Host buffers: pinned, host-visible memory for transfers.
impl DeviceContext {
    /// A buffer of `len` elements of `T` in pinned host memory. Its contents
    /// are undefined until written.
    pub fn enqueue_create_host_buffer<T: Pod>(&self, len: usize) -> Result<HostBuffer<T>> {
        let view = View::allocate::<T>(self, len, MemoryUsage::Readback, "HostBuffer")?;
        Ok(HostBuffer {
            view,
            len,
            _element: PhantomData,
        })
    }
}

impl<T: Pod> HostBuffer<T> {
    /// A host buffer of `len` elements over `view` (of their size).
    pub(crate) fn from_view(view: View, len: usize) -> Self {
        HostBuffer {
            view,
            len,
            _element: PhantomData,
        }
    }

    /// The contents, for reading, once the pending device work that writes
    /// the buffer is done. Device work that writes the buffer cannot be
    /// enqueued while the slice lives ([`Error::BufferMapped`]).
    pub fn as_slice(&self) -> Result<HostSlice<'_, T>> {
        let (elements, borrowed) = self
            .view
            .borrow_for_host::<T>("HostBuffer::as_slice", HostAccess::Read)?;
        Ok(HostSlice {
            view: &self.view,
            elements,
            borrowed,
        })
    }

    /// The contents, for reading and writing, once the pending device work
    /// that reads or writes the buffer is done. No device work on the
    /// buffer can be enqueued while the slice lives.
    pub fn as_mut_slice(&self) -> Result<HostSliceMut<'_, T>> {
        let (elements, borrowed) = self
            .view
            .borrow_for_host::<T>("HostBuffer::as_mut_slice", HostAccess::Write)?;
        Ok(HostSliceMut {
            view: &self.view,
            elements,
            borrowed,
        })
    }

    /// A copy of the contents, once the device work that writes them is done.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        Ok(self.as_slice()?.to_vec())
    }
}

impl View {
    /// Borrows the view for host code as elements of `T`: the elements and
    /// whether a borrow was taken (none for an empty view).
    #[allow(
        clippy::expect_used,
        reason = "the mapping exists: the memory is mapped"
    )]
    fn borrow_for_host<T: Pod>(
        &self,
        op: &'static str,
        access: HostAccess,
    ) -> Result<(Elements<T>, bool)> {
        let len = (self.bytes / size_of::<T>().max(1) as u64) as usize;
        if self.bytes == 0 || size_of::<T>() == 0 {
            let none = Elements {
                mapped: None,
                len: 0,
                _element: PhantomData,
            };
            return Ok((none, false));
        }
        let mapped =
            self.memory
                .mapped(self.offset, self.bytes)
                .ok_or_else(|| Error::Unsupported {
                    what: "host access to memory that is not host visible".into(),
                    device: self.memory.device.name().to_string(),
                })?;
        if mapped.as_ptr() as usize % align_of::<T>() != 0 {
            return Err(Error::Misaligned {
                op,
                offset: self.offset,
                alignment: align_of::<T>() as u64,
                rule: "the host address of a buffer's elements must suit their type",
            });
        }
        self.memory.borrow_host(op, access)?;
        let raw = self.memory.raw().expect("host-visible memory exists");
        if let Err(e) = raw.invalidate_for_host_reads(&self.memory.device, self.offset, self.bytes)
        {
            self.memory.release_host();
            return Err(e);
        }
        let elements = Elements {
            mapped: Some(mapped),
            len,
            _element: PhantomData,
        };
        Ok((elements, true))
    }

    /// Ends a host borrow, making host writes visible to the device where
    /// the memory is not coherent.
    fn end_host_borrow(&self, written: bool) -> Result<()> {
        let flushed = match (written, self.memory.raw()) {
            (true, Some(raw)) => {
                raw.flush_host_writes(&self.memory.device, self.offset, self.bytes)
            }
            _ => Ok(()),
        };
        self.memory.release_host();
        flushed
    }
}

/// A host buffer's contents, borrowed for reading: see [`HostBuffer::as_slice`].
pub struct HostSlice<'a, T: Pod> {
    view: &'a View,
    elements: Elements<T>,
    borrowed: bool,
}

impl<T: Pod> Deref for HostSlice<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.elements.get()
    }
}

impl<T: Pod> Drop for HostSlice<'_, T> {
    fn drop(&mut self) {
        if self.borrowed {
            self.view.memory.release_host();
        }
    }
}

/// A host buffer's contents, borrowed for writing: see [`HostBuffer::as_mut_slice`].
pub struct HostSliceMut<'a, T: Pod> {
    view: &'a View,
    elements: Elements<T>,
    borrowed: bool,
}

impl<T: Pod> Deref for HostSliceMut<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        self.elements.get()
    }
}

impl<T: Pod> DerefMut for HostSliceMut<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // The borrow is exclusive (`HostAccess::Write`).
        self.elements.get_mut()
    }
}

impl<T: Pod> Drop for HostSliceMut<'_, T> {
    fn drop(&mut self) {
        if self.borrowed {
            if let Err(e) = self.view.end_host_borrow(true) {
                self.view.memory.keep_error(e);
            }
        }
    }
}

/// Where a mapping's elements live.
enum Mapping<T> {
    /// The buffer's own memory, borrowed exclusively.
    Direct(Elements<T>),
    /// A host copy, written back if changed.
    Copy(Vec<T>),
}

/// A device buffer's contents on the host: see [`DeviceBuffer::map_to_host`].
///
/// Derefs to `[T]`. When dropped (or on [`finish`](Self::finish), which
/// reports errors), changed contents go back to the device; unchanged ones
/// are not written.
pub struct MappedBuffer<'a, T: Pod> {
    view: &'a View,
    mapping: Mapping<T>,
    borrowed: bool,
    written: bool,
    done: bool,
}

impl<T: Pod> DeviceBuffer<T> {
    /// The buffer's contents, as a future that waits without blocking a
    /// thread (see [`Event`](Event)'s `Future`): enqueues a copy into
    /// a new [`HostBuffer`](HostBuffer) on the buffer's context now
    /// (after the work enqueued so far that writes the buffer), and
    /// resolves once it is done. The future owns what it needs: the buffer
    /// may be dropped, or written again, meanwhile. Errors (a mapped
    /// buffer, memory) come from the future. The call itself enqueues: where
    /// the stream has its limit of batches in flight it waits for room, as
    /// every `enqueue_*` does; the future never blocks.
    ///
    /// ```
    /// # fn main() -> vkcompute::Result<()> {
    /// # use std::task::{Context, Poll, Waker};
    /// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
    /// #     // Any executor does; this one is the shortest (it spins, which
    /// #     // a real one does not: the waiter thread wakes the task).
    /// #     let mut f = std::pin::pin!(f);
    /// #     let mut cx = Context::from_waker(Waker::noop());
    /// #     loop { if let Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    /// let ctx = vkcompute::DeviceContext::new()?;
    /// let data = ctx.enqueue_create_buffer::<u32>(1024)?;
    /// data.enqueue_fill(3)?;
    /// let read = data.to_vec_async();
    /// data.enqueue_fill(4)?; // later work: not in `read`
    /// assert_eq!(block_on(read)?, vec![3; 1024]);
    /// # Ok(())
    /// # }
    /// ```
    pub fn to_vec_async(&self) -> impl std::future::Future<Output = Result<Vec<T>>> + Send + 'static
    where
        T: Send + Sync,
    {
        let staged = self.stage_readback();
        async move {
            let (host, done) = staged?;
            done.await?;
            host.to_vec()
        }
    }

    fn stage_readback(&self) -> Result<(HostBuffer<T>, Event)> {
        let ctx = self.context();
        let host = ctx.enqueue_create_host_buffer::<T>(self.len())?;
        self.enqueue_copy_to(&host)?;
        Ok((host, ctx.enqueue_record_event()?))
    }

    /// [`map_to_host`](Self::map_to_host) as a future: waits, without
    /// blocking a thread, until the work enqueued on this buffer before the
    /// call is done (on every stream that has some), then maps it. Work
    /// enqueued on the buffer after the call and before the mapping is
    /// made, the mapping waits for on the polling thread, as `map_to_host`
    /// does. Errors are `map_to_host`'s and the waits' (a lost device).
    ///
    /// ```
    /// # use std::future::Future;
    /// # use std::task::{Context, Poll, Waker};
    /// # fn block_on<F: Future>(f: F) -> F::Output {
    /// #     let mut f = std::pin::pin!(f);
    /// #     let mut cx = Context::from_waker(Waker::noop());
    /// #     loop { if let Poll::Ready(v) = f.as_mut().poll(&mut cx) { return v; } }
    /// # }
    /// # fn main() -> vkcompute::Result<()> {
    /// let ctx = vkcompute::DeviceContext::new()?;
    /// let buf = ctx.enqueue_create_buffer::<u32>(1 << 20)?;
    /// buf.enqueue_fill(5)?;
    /// let mut host = block_on(buf.map_to_host_async())?; // in an async fn: .await
    /// assert!(host.iter().all(|&v| v == 5));
    /// host[0] = 6;
    /// drop(host);
    /// assert_eq!(buf.to_vec()?[..2], [6, 5]);
    /// # Ok(()) }
    /// ```
    pub fn map_to_host_async(
        &self,
    ) -> impl std::future::Future<Output = Result<MappedBuffer<'_, T>>> + '_ {
        // A mapping may be written: it follows every read and write.
        let pending = self.view.memory.pending_work(true);
        async move {
            for point in pending {
                Reached::new(point).await?;
            }
            self.map_to_host()
        }
    }

    /// Whether the host has this buffer's memory mapped (a
    /// [`MappedBuffer`] of this buffer, a clone or a view of the same
    /// memory is alive): what [`map_to_host`](Self::map_to_host) says work
    /// on it meets meanwhile. A snapshot: another thread may map or unmap
    /// it right after.
    pub fn is_mapped(&self) -> bool {
        self.view.memory.is_host_borrowed()
    }

    /// Maps the buffer's contents to the host, once this buffer's pending
    /// work is done (not the whole stream's). Where the memory is host
    /// visible (lavapipe, integrated GPUs, ReBAR) the mapping is the memory
    /// itself; elsewhere the contents are read through a staging buffer and
    /// written back on drop if they were changed. While it is mapped
    /// ([`is_mapped`](Self::is_mapped)), no work that writes the buffer can
    /// be enqueued, nor, where the mapping is the memory itself
    /// ([`MappedBuffer::is_direct`]), any work on it
    /// ([`Error::BufferMapped`]); work that only reads a buffer mapped
    /// through a copy reads the contents from before the mapping's changes.
    ///
    /// ```
    /// # fn main() -> vkcompute::Result<()> {
    /// let ctx = vkcompute::DeviceContext::new()?;
    /// let buf = ctx.enqueue_create_buffer::<f32>(3)?;
    /// buf.enqueue_fill(1.0)?;
    /// {
    ///     let mut host = buf.map_to_host()?;
    ///     host[1] = 42.0;
    /// } // the change goes back to the device here
    /// assert_eq!(buf.to_vec()?, [1.0, 42.0, 1.0]);
    /// # Ok(()) }
    /// ```
    pub fn map_to_host(&self) -> Result<MappedBuffer<'_, T>> {
        let op = "DeviceBuffer::map_to_host";
        let view = &self.view;
        let direct = !view.memory.owner().force_staging
            && view
                .memory
                .mapped(view.offset, view.bytes)
                .is_some_and(|m| m.as_ptr() as usize % align_of::<T>() == 0);
        let (mapping, borrowed) = if direct {
            let (elements, borrowed) = view.borrow_for_host::<T>(op, HostAccess::Write)?;
            (Mapping::Direct(elements), borrowed)
        } else {
            let borrowed = view.bytes > 0;
            if borrowed {
                view.memory.borrow_host(op, HostAccess::Copy)?;
            }
            let mut copy = vec![T::zeroed(); self.len()];
            if let Err(e) = view.read_into(op, bytemuck::cast_slice_mut(&mut copy), size_of::<T>())
            {
                if borrowed {
                    view.memory.release_host();
                }
                return Err(e);
            }
            (Mapping::Copy(copy), borrowed)
        };
        Ok(MappedBuffer {
            view,
            mapping,
            borrowed,
            written: false,
            done: false,
        })
    }

    /// Enqueues a copy from `src`, which holds `len()` elements.
    ///
    /// The elements are copied (or staged) before the call returns.
    ///
    /// # Safety
    ///
    /// `src` must be valid for reads of `len()` elements of `T` and properly
    /// aligned, and nothing may write that memory during the call.
    #[allow(unsafe_code, reason = "a public raw-pointer entry point")]
    pub unsafe fn enqueue_copy_from_ptr(&self, src: *const T) -> Result<()> {
        let op = "DeviceBuffer::enqueue_copy_from_ptr";
        check_ptr::<T>(op, src as usize)?;
        // SAFETY: the caller guarantees `len()` readable elements at `src`.
        let slice = unsafe { std::slice::from_raw_parts(src, self.len()) };
        self.view.copy_from(
            op,
            Source::Host(bytemuck::cast_slice(slice)),
            size_of::<T>(),
        )
    }

    /// Enqueues a copy of the buffer into the `len()` elements at `dst`; the
    /// elements arrive once the stream passes the copy (after
    /// `synchronize()`, say).
    ///
    /// # Safety
    ///
    /// `dst` must be valid for writes of `len()` elements of `T` and properly
    /// aligned, and the memory must stay valid and untouched (not read, not
    /// written, not freed) until the stream has passed the copy, even where
    /// the call returns an error (a copy of several pieces may have
    /// recorded some before it: they still arrive; `synchronize()` passes
    /// them).
    #[allow(unsafe_code, reason = "a public raw-pointer entry point")]
    pub unsafe fn enqueue_copy_to_ptr(&self, dst: *mut T) -> Result<()> {
        let op = "DeviceBuffer::enqueue_copy_to_ptr";
        check_ptr::<T>(op, dst as usize)?;
        let view = &self.view;
        // SAFETY: the caller guarantees `len()` elements (the view's bytes)
        // writable at `dst` and untouched until the stream passes the copy.
        let dst = unsafe { RawDestination::new(dst.cast(), view.bytes as usize) };
        crate::transfer::download_later(&view.memory.owner(), op, &view.memory, view.offset, dst)
    }
}

fn check_ptr<T>(op: &'static str, address: usize) -> Result<()> {
    if address == 0 || address % align_of::<T>() != 0 {
        return Err(Error::Misaligned {
            op,
            offset: address as u64,
            alignment: align_of::<T>() as u64,
            rule: "the pointer must be non-null and aligned for the element type",
        });
    }
    Ok(())
}

impl<T: Pod> MappedBuffer<'_, T> {
    /// Ends the mapping now, writing changed contents back, and reports any
    /// error (which `Drop` can only keep for the context's next call).
    pub fn finish(mut self) -> Result<()> {
        self.done = true;
        self.complete()
    }

    /// Whether the mapping is the buffer's memory itself (no copy).
    pub fn is_direct(&self) -> bool {
        matches!(self.mapping, Mapping::Direct(_))
    }

    fn complete(&mut self) -> Result<()> {
        let op = "MappedBuffer::finish";
        match &self.mapping {
            Mapping::Direct(_) => {
                if self.borrowed {
                    self.view.end_host_borrow(self.written)
                } else {
                    Ok(())
                }
            }
            Mapping::Copy(copy) => {
                let memory = &self.view.memory;
                // The borrow ends and the write-back is recorded under the
                // buffer's exclusive operation lock: no other operation (a
                // fill, another mapping) falls between them, so none is lost
                // under the write-back or sees the contents before it.
                let _ops = memory.lock_ops(true);
                if self.borrowed {
                    memory.release_host();
                }
                if self.written && !std::thread::panicking() {
                    crate::transfer::upload_held(
                        &memory.owner(),
                        op,
                        memory,
                        self.view.offset,
                        bytemuck::cast_slice(copy),
                    )
                } else {
                    Ok(())
                }
            }
        }
    }
}

impl<T: Pod> Deref for MappedBuffer<'_, T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        match &self.mapping {
            Mapping::Direct(elements) => elements.get(),
            Mapping::Copy(copy) => copy,
        }
    }
}

impl<T: Pod> DerefMut for MappedBuffer<'_, T> {
    fn deref_mut(&mut self) -> &mut [T] {
        self.written = true;
        match &mut self.mapping {
            // The mapping's borrow is exclusive (`HostAccess::Write`).
            Mapping::Direct(elements) => elements.get_mut(),
            Mapping::Copy(copy) => copy,
        }
    }
}

impl<T: Pod> Drop for MappedBuffer<'_, T> {
    fn drop(&mut self) {
        if !self.done {
            if let Err(e) = self.complete() {
                self.view.memory.keep_error(e);
            }
        }
    }
}
