//! Buffers over imported memory: the checks every import makes (device,
//! handle type, sizes), and the buffer over the memory.

use bytemuck::Pod;

use super::{byte_size, ExternalMemoryInfo};
use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::interop::{import_raw, Payload};
use crate::resource::BufferMemory;
use crate::view::{dtype_name, View};

/// A buffer of `len` elements of `T` on `ctx` over the memory `payload`
/// carries, as `info` describes it (see [`DeviceContext::import_buffer_fd`]).
pub(super) fn import_view<T: Pod>(
    ctx: &DeviceContext,
    op: &'static str,
    info: ExternalMemoryInfo,
    payload: Payload,
    len: usize,
) -> Result<DeviceBuffer<T>> {
    let what = format!(
        "imported DeviceBuffer[{}] of {len} elements",
        dtype_name::<T>()
    );
    let bytes = byte_size::<T>(&what, len)?;
    if bytes > info.size {
        return Err(Error::ImportSize {
            op,
            needed: bytes,
            available: info.size,
        });
    }
    let offset = info.offset;
    let align = std::mem::align_of::<T>() as u64;
    if offset % align != 0 {
        return Err(Error::Misaligned {
            op,
            offset,
            alignment: align,
            rule: "the exported range must start aligned for the element type",
        });
    }
    if bytes == 0 {
        // Nothing to share: an empty buffer (the handle closes).
        return ctx.enqueue_create_buffer(0);
    }
    ctx.stream.lock().reclaim_garbage()?;
    let raw = import_raw(op, &ctx.stream.device, info, payload, &what)?;
    let memory = BufferMemory::from_raw(&ctx.stream, Some(raw), offset + bytes);
    Ok(DeviceBuffer::from_view(
        View {
            memory,
            offset,
            bytes,
        },
        len,
    ))
}
