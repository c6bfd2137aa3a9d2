//! Exportable buffers and sharing a buffer with another context: the
//! public API over `interop`'s exports.

use bytemuck::Pod;

use super::byte_size;
use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::interop::{common_opaque_type, create_exportable, export};
use crate::resource::BufferMemory;
use crate::view::{dtype_name, View};

impl DeviceContext {
    /// A buffer of `len` elements of `T` in device memory of its own that
    /// can be exported ([`DeviceBuffer::export_fd`]) to other contexts,
    /// processes and APIs, as an opaque fd and, where the device has
    /// `VK_EXT_external_memory_dma_buf`, a dma-buf fd. Contents are
    /// undefined until written. Host transfers of it always go through
    /// staging (the memory is never mapped: another device may write it at
    /// any time), and its memory is never reused for another buffer.
    /// Errors: [`Error::Unsupported`] where the device cannot export memory.
    pub fn enqueue_create_exportable_buffer<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        let what = format!(
            "exportable DeviceBuffer[{}] of {len} elements",
            dtype_name::<T>()
        );
        let bytes = byte_size::<T>(&what, len)?;
        let device = &self.shared.device;
        self.shared.lock().reclaim_garbage()?;
        let raw = if bytes == 0 {
            None
        } else {
            Some(create_exportable(device, bytes.next_multiple_of(4), &what)?)
        };
        let memory = BufferMemory::from_raw(&self.shared, raw, bytes);
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
    /// The same memory as a buffer of `ctx`, a context of another
    /// `VkDevice` on the same physical device, through an opaque fd (or
    /// Win32 handle): export and import in one. The buffer must be
    /// exportable ([`Error::NotExportable`]); where the two devices share
    /// no handle type, [`Error::Unsupported`].
    pub fn share_with(&self, ctx: &DeviceContext) -> Result<DeviceBuffer<T>> {
        let op = "DeviceBuffer::share_with";
        let Some(handle_type) = common_opaque_type(&self.view.memory.device, &ctx.shared.device)
        else {
            return Err(Error::Unsupported {
                what: "sharing memory between these devices (no opaque handle type both have)"
                    .into(),
                device: ctx.shared.device.name().to_string(),
            });
        };
        let (payload, info) = export(op, self.view.range(), handle_type)?;
        super::import::import_view(ctx, op, info, payload, self.len())
    }
}
