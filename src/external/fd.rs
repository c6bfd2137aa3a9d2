//! Memory as POSIX file descriptors: the import of an fd into a buffer
//! and the export of an exportable buffer's memory.

use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

use ash::vk;

use super::memory::{allocate_and_bind, allocate_flags, create_external_buffer, is_coherent};
use super::{hex, ExportedMemory, ExternalMemoryInfo, MemoryHandleType};
use crate::buffer::View;
use crate::error::{Error, Result, VkResultExt};
use crate::memory::{buffer_usage, Dedicated, DedicatedKind, RawBuffer};
use crate::vk::{buffer_support, Device, MemoryUsage};

/// Refuses descriptors that cannot hold memory (pipes, sockets,
/// directories, closed descriptors) and regular files (memfds) smaller
/// than `needed`, before the driver sees them. Gives the descriptor back.
fn check_descriptor(
    op: &'static str,
    kind: &'static str,
    fd: OwnedFd,
    needed: u64,
) -> Result<OwnedFd> {
    use std::os::unix::fs::FileTypeExt;
    let file = std::fs::File::from(fd);
    let meta = file.metadata().map_err(|e| Error::InvalidHandle {
        op,
        handle_type: kind,
        detail: format!("fstat failed: {e}"),
    })?;
    let t = meta.file_type();
    let refused = if t.is_fifo() {
        Some("a pipe")
    } else if t.is_socket() {
        Some("a socket")
    } else if t.is_dir() {
        Some("a directory")
    } else if t.is_block_device() {
        Some("a block device")
    } else {
        None
    };
    if let Some(what) = refused {
        return Err(Error::InvalidHandle {
            op,
            handle_type: kind,
            detail: format!("the descriptor is {what}, not memory"),
        });
    }
    if t.is_file() && meta.len() < needed {
        return Err(Error::ImportSize {
            op,
            needed,
            available: meta.len(),
        });
    }
    Ok(OwnedFd::from(file))
}

/// Imports `memory` into a new buffer on `device`: checks the device's
/// UUIDs, support for the handle type, the sizes and the descriptor.
/// The buffer covers `offset + size` bytes of the memory (rounded up to
/// whole words), or the exporter's dedicated buffer.
pub(super) fn import(
    op: &'static str,
    device: &Device,
    memory: ExportedMemory,
    what: &str,
) -> Result<RawBuffer> {
    let ExportedMemory { fd, info } = memory;
    let kind = info.handle_type.name();
    let unsupported = |what: String| Error::Unsupported {
        what,
        device: device.name().to_string(),
    };
    let enabled = device.external.enabled;
    let available = match info.handle_type {
        MemoryHandleType::OpaqueFd => enabled.memory_fd,
        MemoryHandleType::DmaBuf => enabled.dma_buf,
    };
    let Some(fns) = device.external.memory_fd.as_ref().filter(|_| available) else {
        return Err(unsupported(format!(
            "importing {kind} memory handles ({})",
            match info.handle_type {
                MemoryHandleType::OpaqueFd => "VK_KHR_external_memory_fd",
                MemoryHandleType::DmaBuf => "VK_EXT_external_memory_dma_buf",
            }
        )));
    };
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
    if info.handle_type == MemoryHandleType::OpaqueFd {
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
    let fd = check_descriptor(op, kind, fd, info.allocation_size)?;
    let mut fd_types = u32::MAX;
    if info.handle_type != MemoryHandleType::OpaqueFd {
        let mut props = vk::MemoryFdPropertiesKHR::default();
        // SAFETY: the extension is enabled; `fd` is an open descriptor
        // we own; the handle type is not OPAQUE_FD (not allowed here).
        unsafe { fns.get_memory_fd_properties(handle, fd.as_raw_fd(), &mut props) }.map_err(
            |e| Error::InvalidHandle {
                op,
                handle_type: kind,
                detail: format!("vkGetMemoryFdPropertiesKHR returned {e}"),
            },
        )?;
        fd_types = props.memory_type_bits;
    }
    let (buffer, requirements) = create_external_buffer(device, buffer_size, handle)?;
    let allowed = requirements.memory_type_bits & fd_types;
    let type_index = match info.memory_type_index {
        Some(i) if i < 32 && allowed & (1 << i) != 0 => Some(i),
        Some(_) => None,
        None => device.memory_type(allowed, MemoryUsage::Device),
    };
    let fail = |e: Error| {
        // SAFETY: the buffer is unused and destroyed once.
        unsafe { device.raw.destroy_buffer(buffer, None) };
        Err(e)
    };
    if requirements.size > info.allocation_size {
        return fail(Error::ImportSize {
            op,
            needed: requirements.size,
            available: info.allocation_size,
        });
    }
    let Some(type_index) = type_index else {
        return fail(unsupported(format!(
            "a memory type for this {kind} import (the exporter's type {:?} is not allowed here)",
            info.memory_type_index
        )));
    };
    let mut import = vk::ImportMemoryFdInfoKHR::default()
        .handle_type(handle)
        .fd(fd.as_raw_fd());
    let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
    let mut flags = vk::MemoryAllocateFlagsInfo::default().flags(allocate_flags(device));
    let mut alloc = vk::MemoryAllocateInfo::default()
        .allocation_size(info.allocation_size)
        .memory_type_index(type_index)
        .push_next(&mut import)
        .push_next(&mut flags);
    if info.dedicated_buffer_size.is_some() {
        alloc = alloc.push_next(&mut dedicated);
    }
    let memory = match allocate_and_bind(device, buffer, &alloc, what) {
        Ok(m) => m,
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
    // The import succeeded: the memory owns the descriptor now.
    let _ = fd.into_raw_fd();
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

/// A new descriptor of `view`'s memory as `handle_type`.
pub(super) fn export(
    op: &'static str,
    view: &View,
    handle_type: MemoryHandleType,
) -> Result<ExportedMemory> {
    let device = &view.memory.device;
    let not = |reason: String| Error::NotExportable { op, reason };
    let Some(raw) = view.memory.raw() else {
        return Err(not("the buffer is empty: it has no memory to export".into()));
    };
    let Some(dedicated) = raw.dedicated_memory() else {
        return Err(not(
            "the buffer's memory is not exportable; create it with \
             DeviceContext::enqueue_create_exportable_buffer"
                .into(),
        ));
    };
    let DedicatedKind::Exportable(types) = dedicated.kind else {
        return Err(not(
            "imported memory is exported again only by its exporter; export the original".into(),
        ));
    };
    if !types.contains(handle_type.flag()) {
        return Err(not(format!(
            "device `{}` cannot export this buffer's memory as a {} handle",
            device.name(),
            handle_type.name()
        )));
    }
    let Some(fns) = &device.external.memory_fd else {
        return Err(not("the device cannot export memory".into()));
    };
    let info = vk::MemoryGetFdInfoKHR::default()
        .memory(dedicated.memory)
        .handle_type(handle_type.flag());
    // SAFETY: the memory was allocated exportable as this handle type
    // and lives while `view` does.
    let fd = unsafe { fns.get_memory_fd(&info) }.during("vkGetMemoryFdKHR")?;
    // SAFETY: vkGetMemoryFdKHR returns a new descriptor that the caller owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let ids = &device.adapter.info;
    Ok(ExportedMemory {
        fd,
        info: ExternalMemoryInfo {
            handle_type,
            allocation_size: dedicated.size,
            offset: dedicated.offset + view.offset,
            size: view.bytes,
            dedicated_buffer_size: Some(raw.size),
            memory_type_index: Some(dedicated.memory_type_index),
            device_uuid: Some(ids.uuid),
            driver_uuid: Some(ids.driver_uuid),
        },
    })
}
