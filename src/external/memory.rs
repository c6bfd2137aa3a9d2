//! Exportable buffers and sharing a buffer with another context: the
//! public API over `interop`'s exports.

use bytemuck::Pod;

use super::byte_size;
use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::interop::{
    create_exportable, export, export_types, exported_types, handle_types, shared_type,
    MemoryHandleType,
};
use crate::resource::BufferMemory;
use crate::view::{dtype_name, View};

/// Sharing memory and semaphores with other devices, processes and APIs.
impl DeviceContext {
    /// A buffer of `len` elements of `T` in device memory of its own that
    /// can be exported ([`DeviceBuffer::export_fd`]) to other contexts,
    /// processes and APIs: as the first handle type of
    /// [`exportable_handle_types`](Self::exportable_handle_types) (an
    /// opaque fd, or an opaque Win32 handle on Windows) and every other that
    /// the driver can combine with it in one allocation (a dma-buf fd on
    /// drivers that can); [`enqueue_create_exportable_buffer_as`](Self::enqueue_create_exportable_buffer_as)
    /// chooses. Contents are undefined until written. Host transfers of it
    /// always go through staging (the memory is never mapped: another
    /// device may write it at any time), and its memory is never reused for
    /// another buffer.
    /// Errors: [`Error::Unsupported`] where the device cannot export memory.
    pub fn enqueue_create_exportable_buffer<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        self.create_exportable::<T>(len, None)
    }

    /// As [`enqueue_create_exportable_buffer`](Self::enqueue_create_exportable_buffer),
    /// exportable as exactly `handle_types`: for a dma-buf alone, say,
    /// where the driver cannot combine dma-bufs with opaque fds in one
    /// allocation ([`exportable_handle_types`](Self::exportable_handle_types)
    /// lists what it can export).
    /// Errors: [`Error::Unsupported`] naming the type where the device
    /// cannot export one of them, or cannot export them together;
    /// [`Error::NotExportable`] where `handle_types` is empty. Checked for
    /// `len == 0` too.
    pub fn enqueue_create_exportable_buffer_as<T: Pod>(
        &self,
        len: usize,
        handle_types: &[MemoryHandleType],
    ) -> Result<DeviceBuffer<T>> {
        self.create_exportable::<T>(len, Some(handle_types))
    }

    /// The handle types this device can export an exportable buffer's
    /// memory as, each on its own: its extension is enabled and the driver
    /// reports buffers of vkcompute's usage exportable as it.
    pub fn exportable_handle_types(&self) -> Vec<MemoryHandleType> {
        handle_types(&self.stream.device, true)
    }

    /// The handle types this device can import buffer memory from
    /// ([`import_buffer_fd`](Self::import_buffer_fd)), as
    /// [`exportable_handle_types`](Self::exportable_handle_types) decides.
    pub fn importable_handle_types(&self) -> Vec<MemoryHandleType> {
        handle_types(&self.stream.device, false)
    }

    fn create_exportable<T: Pod>(
        &self,
        len: usize,
        asked: Option<&[MemoryHandleType]>,
    ) -> Result<DeviceBuffer<T>> {
        let what = format!(
            "exportable DeviceBuffer[{}] of {len} elements",
            dtype_name::<T>()
        );
        let bytes = byte_size::<T>(&what, len)?;
        let device = &self.stream.device;
        self.stream.lock().reclaim_garbage()?;
        let raw = if bytes == 0 {
            if asked.is_some() {
                export_types(device, asked)?;
            }
            None
        } else {
            Some(create_exportable(
                device,
                bytes.next_multiple_of(4),
                &what,
                asked,
            )?)
        };
        let memory = BufferMemory::from_raw(&self.stream, raw, bytes);
        Ok(DeviceBuffer::from_view(
            View {
                memory,
                offset: 0,
                bytes,
            },
            len,
        ))
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// The handle types this buffer's memory can be exported as: those it
    /// was created exportable as, in the order
    /// [`share_with`](Self::share_with) prefers them (empty for a buffer
    /// that is not exportable, or empty).
    pub fn exportable_handle_types(&self) -> Vec<MemoryHandleType> {
        exported_types(&self.view.memory)
    }

    /// The same memory as a buffer of `ctx`, a context of another
    /// `VkDevice` on the same physical device, through the first of
    /// [`exportable_handle_types`](Self::exportable_handle_types) that `ctx`'s
    /// device can import: export and import in one. The buffer must be
    /// exportable ([`Error::NotExportable`]); where `ctx` can import none
    /// of its handle types, [`Error::Unsupported`].
    ///
    /// For a context of the buffer's own device (a stream of it) this is a
    /// clone: buffers move freely between streams of a device, in order.
    pub fn share_with(&self, ctx: &DeviceContext) -> Result<DeviceBuffer<T>> {
        let op = "DeviceBuffer::share_with";
        if ctx.stream.device.id == self.view.memory.device.id {
            return Ok(self.clone());
        }
        if self.view.memory.raw().is_none() || self.exportable_handle_types().is_empty() {
            // export() gives the reason.
            export(op, self.view.range(), MemoryHandleType::OpaqueFd)?;
        }
        let Some(handle_type) = shared_type(&self.view.memory, &ctx.stream.device) else {
            return Err(Error::Unsupported {
                what: format!(
                    "importing this buffer's memory (exportable as {:?})",
                    self.exportable_handle_types()
                ),
                device: ctx.stream.device.name().to_string(),
            });
        };
        let (payload, info) = export(op, self.view.range(), handle_type)?;
        super::import::import_view(ctx, op, info, payload, self.len())
    }
}
