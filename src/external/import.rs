//! Buffers over imported memory: the checks every import makes (device,
//! handle type, sizes), and the buffer over the memory.

use ash::vk;
use bytemuck::Pod;

use super::memory::{is_coherent, Payload};
use super::{byte_size, hex, ExternalMemoryInfo, MemoryHandleType};
use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::resource::BufferMemory;
use crate::view::{dtype_name, View};
#[cfg(unix)]
use crate::vk::fd_memory_types;
use crate::vk::memory::{buffer_usage, Dedicated, DedicatedKind, RawBuffer};
use crate::vk::{buffer_support, Device, ExternalBuffer, MemorySource, MemoryUsage};

/// A buffer of `len` elements of `T` on `ctx` over the memory `payload`
/// carries, as `info` describes it (see [`DeviceContext::import_buffer`]).
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
    ctx.shared.lock().reclaim_garbage()?;
    let raw = import_raw(op, &ctx.shared.device, info, payload, &what)?;
    let memory = BufferMemory::from_raw(&ctx.shared, Some(raw), offset + bytes);
    Ok(DeviceBuffer::from_view(
        View {
            memory,
            offset,
            bytes,
        },
        len,
    ))
}

/// Imports the memory `payload` carries into a new buffer on `device`
/// (see [`import_view`]), for the alias of a zero-copy copy too.
pub(super) fn import_alias(
    op: &'static str,
    device: &Device,
    info: ExternalMemoryInfo,
    payload: Payload,
) -> Result<RawBuffer> {
    import_raw(op, device, info, payload, "a shared buffer's alias")
}

/// Imports the memory `payload` carries into a new buffer on `device`:
/// checks the device's UUIDs, support for the handle type, the sizes and
/// (for an fd) the descriptor.
/// The buffer covers `offset + size` bytes of the memory (rounded up to
/// whole words), or the exporter's dedicated buffer.
fn import_raw(
    op: &'static str,
    device: &Device,
    info: ExternalMemoryInfo,
    payload: Payload,
    what: &str,
) -> Result<RawBuffer> {
    let kind = info.handle_type.name();
    let unsupported = |what: String| Error::Unsupported {
        what,
        device: device.name().to_string(),
    };
    let enabled = device.external.enabled;
    let available = match info.handle_type {
        MemoryHandleType::OpaqueFd => enabled.memory_fd,
        MemoryHandleType::DmaBuf => enabled.dma_buf,
        MemoryHandleType::OpaqueWin32 => enabled.memory_win32,
    };
    if !available {
        return Err(unsupported(format!(
            "importing {kind} memory handles ({})",
            info.handle_type.extension()
        )));
    }
    let carried = match &payload {
        #[cfg(unix)]
        Payload::Fd(_) => info.handle_type != MemoryHandleType::OpaqueWin32,
        Payload::Win32(_) => info.handle_type == MemoryHandleType::OpaqueWin32,
    };
    if !carried {
        return Err(Error::InvalidHandle {
            op,
            handle_type: kind,
            detail: "the description names a handle type that this kind of handle cannot carry"
                .into(),
        });
    }
    let ids = &device.adapter.info;
    let mismatch = |theirs: &[u8; 16], ours: &[u8; 16]| Error::ForeignDevice {
        op,
        exporter: hex(theirs),
        importer: hex(ours),
        device: device.name().to_string(),
    };
    if let Some(uuid) = &info.device_uuid {
        if *uuid != ids.uuid {
            return Err(mismatch(uuid, &ids.uuid));
        }
    }
    if info.handle_type != MemoryHandleType::DmaBuf {
        if let Some(uuid) = &info.driver_uuid {
            if *uuid != ids.driver_uuid {
                return Err(mismatch(uuid, &ids.driver_uuid));
            }
        }
    }
    let handle = info.handle_type.flag();
    let support = buffer_support(
        &device.instance,
        device.adapter.raw,
        buffer_usage(device),
        handle,
    );
    let features = support.external_memory_features;
    if !features.contains(vk::ExternalMemoryFeatureFlags::IMPORTABLE) {
        return Err(unsupported(format!(
            "importing buffer memory as {kind} handles"
        )));
    }
    let end = info
        .offset
        .checked_add(info.size)
        .filter(|&end| end <= info.allocation_size)
        .ok_or(Error::ImportSize {
            op,
            needed: info.offset.saturating_add(info.size),
            available: info.allocation_size,
        })?;
    if info.allocation_size == 0 {
        return Err(Error::ImportSize {
            op,
            needed: 1,
            available: 0,
        });
    }
    if features.contains(vk::ExternalMemoryFeatureFlags::DEDICATED_ONLY)
        && info.dedicated_buffer_size.is_none()
    {
        return Err(unsupported(format!(
            "importing {kind} memory that is not a dedicated allocation"
        )));
    }
    let buffer_size = match info.dedicated_buffer_size {
        Some(s) if s < end || s == 0 => {
            return Err(Error::ImportSize {
                op,
                needed: end,
                available: s,
            })
        }
        Some(s) => s,
        None => end
            .next_multiple_of(4)
            .min(info.allocation_size / 4 * 4)
            .max(4),
    };
    if buffer_size > info.allocation_size || end > buffer_size.next_multiple_of(4) {
        return Err(Error::ImportSize {
            op,
            needed: buffer_size.max(end),
            available: info.allocation_size,
        });
    }
    #[cfg(unix)]
    let invalid = |call: &str, e: vk::Result| Error::InvalidHandle {
        op,
        handle_type: kind,
        detail: format!("{call} returned {e}"),
    };
    let dedicated = info.dedicated_buffer_size.is_some();
    let win32_handle;
    let (source, handle_types) = match payload {
        #[cfg(unix)]
        Payload::Fd(fd) => {
            let fd = super::fd::check_descriptor(op, kind, fd, info.allocation_size)?;
            let types = if info.handle_type == MemoryHandleType::OpaqueFd {
                u32::MAX
            } else {
                fd_memory_types(device, handle, &fd)
                    .map_err(|e| invalid("vkGetMemoryFdPropertiesKHR", e))?
            };
            let source = MemorySource::Fd {
                handle_type: handle,
                fd,
                dedicated,
            };
            (source, types)
        }
        Payload::Win32(h) => {
            // Opaque Win32 handles allow every type the buffer allows
            // (vkGetMemoryWin32HandlePropertiesKHR is not for opaque ones).
            // Vulkan does not own an imported Win32 handle: it closes when
            // `win32_handle` drops, after the import.
            win32_handle = h;
            let source = MemorySource::Win32 {
                handle_type: handle,
                handle: &win32_handle,
                dedicated,
            };
            (source, u32::MAX)
        }
    };
    let buffer = ExternalBuffer::new(device, buffer_size, buffer_usage(device), handle)?;
    let requirements = buffer.requirements;
    let allowed = requirements.memory_type_bits & handle_types;
    let type_index = match info.memory_type_index {
        Some(i) if i < 32 && allowed & (1 << i) != 0 => Some(i),
        Some(_) => None,
        None => device.memory_type(allowed, MemoryUsage::Device),
    };
    if requirements.size > info.allocation_size {
        return Err(Error::ImportSize {
            op,
            needed: requirements.size,
            available: info.allocation_size,
        });
    }
    let Some(type_index) = type_index else {
        return Err(unsupported(format!(
            "a memory type for this {kind} import (the exporter's type {:?} is not allowed here)",
            info.memory_type_index
        )));
    };
    let (buffer, memory) = match buffer.bind(source, info.allocation_size, type_index, what) {
        Ok(bound) => bound,
        Err(Error::Vulkan { result, .. })
            if result == vk::Result::ERROR_INVALID_EXTERNAL_HANDLE =>
        {
            return Err(Error::InvalidHandle {
                op,
                handle_type: kind,
                detail: "the driver refused it (VK_ERROR_INVALID_EXTERNAL_HANDLE)".into(),
            })
        }
        Err(e) => return Err(e),
    };
    Ok(RawBuffer::dedicated(
        buffer,
        Dedicated {
            memory,
            size: info.allocation_size,
            offset: 0,
            memory_type_index: type_index,
            kind: DedicatedKind::Imported,
        },
        buffer_size,
        MemoryUsage::Device,
        None,
        is_coherent(device, type_index),
    ))
}
