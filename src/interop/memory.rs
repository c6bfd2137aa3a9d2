//! Memory that crosses devices: exportable buffers (memory of their own,
//! allocated exportable), the export of that memory as a handle of the
//! platform, and buffers over imported handles, with the checks every
//! import makes (device, handle type, sizes).

#[cfg(unix)]
use std::os::fd::OwnedFd;

use std::sync::Arc;

use ash::vk;

use super::{hex, ExternalMemoryInfo, MemoryHandleType};
use crate::error::{Error, Result};
use crate::resource::BufferMemory;
use crate::vk::memory::{
    buffer_usage, check_allocation, check_size, Dedicated, DedicatedKind, RawBuffer,
};
use crate::vk::{
    buffer_support, export_memory_win32, AliasLinks, Device, ExternalBuffer, MemorySource,
    MemoryUsage, Win32Handle,
};
#[cfg(unix)]
use crate::vk::{export_memory_fd, fd_memory_types};

/// A handle of memory, in the form its platform carries it.
pub(crate) enum Payload {
    /// A file descriptor (opaque or dma-buf).
    #[cfg(unix)]
    Fd(OwnedFd),
    /// A Win32 NT handle.
    Win32(Win32Handle),
}

/// Whether memory type `type_index` of `device` is host coherent.
pub(crate) fn is_coherent(device: &Device, type_index: u32) -> bool {
    device.adapter.memory.memory_types[type_index as usize]
        .property_flags
        .contains(vk::MemoryPropertyFlags::HOST_COHERENT)
}

/// Whether `device` can export buffer memory as `handle_type`, and which
/// handle types such memory is compatible with.
fn export_support(
    device: &Device,
    handle_type: vk::ExternalMemoryHandleTypeFlags,
) -> Option<vk::ExternalMemoryHandleTypeFlags> {
    let support = buffer_support(
        &device.instance,
        device.adapter.raw,
        buffer_usage(device),
        handle_type,
    );
    support
        .external_memory_features
        .contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE)
        .then_some(support.compatible_handle_types)
}

/// Whether `device` has the extension of `handle_type` enabled.
fn extension_enabled(device: &Device, handle_type: MemoryHandleType) -> bool {
    let enabled = device.external.enabled;
    match handle_type {
        MemoryHandleType::OpaqueFd => cfg!(unix) && enabled.memory_fd,
        MemoryHandleType::DmaBuf => cfg!(unix) && enabled.dma_buf,
        MemoryHandleType::OpaqueWin32 => enabled.memory_win32,
    }
}

/// The handle types `device` can export buffer memory as, each on its own
/// (`export`), or import buffer memory from (`!export`): the extension is
/// enabled and the driver says so for the buffers vkcompute creates.
pub(crate) fn handle_types(device: &Device, export: bool) -> Vec<MemoryHandleType> {
    MemoryHandleType::ALL
        .into_iter()
        .filter(|&t| {
            if !extension_enabled(device, t) {
                return false;
            }
            if export {
                return export_support(device, t.flag()).is_some();
            }
            let support = buffer_support(
                &device.instance,
                device.adapter.raw,
                buffer_usage(device),
                t.flag(),
            );
            support
                .external_memory_features
                .contains(vk::ExternalMemoryFeatureFlags::IMPORTABLE)
        })
        .collect()
}

/// The handle types of a new exportable buffer: `asked` where given (each
/// exportable, and all compatible with each other in one allocation), else
/// every type the device can export together with its opaque type.
pub(crate) fn export_types(
    device: &Device,
    asked: Option<&[MemoryHandleType]>,
) -> Result<vk::ExternalMemoryHandleTypeFlags> {
    let unsupported = |what: String| Error::Unsupported {
        what,
        device: device.name().to_string(),
    };
    let exportable = handle_types(device, true);
    let Some(asked) = asked else {
        let Some(&first) = exportable.first() else {
            return Err(unsupported(
                "exporting buffer memory (VK_KHR_external_memory_fd or \
                 VK_KHR_external_memory_win32, with a driver that exports buffers)"
                    .into(),
            ));
        };
        // The preferred type, and the others it is compatible with.
        let compatible = export_support(device, first.flag()).unwrap_or_default();
        return Ok(exportable
            .iter()
            .filter(|t| compatible.contains(t.flag()))
            .fold(first.flag(), |all, t| all | t.flag()));
    };
    if asked.is_empty() {
        return Err(Error::NotExportable {
            op: "DeviceContext::enqueue_create_exportable_buffer_as",
            reason: "no handle type was asked for".into(),
        });
    }
    let mut flags = vk::ExternalMemoryHandleTypeFlags::empty();
    for &t in asked {
        if !exportable.contains(&t) {
            return Err(unsupported(format!(
                "exporting buffer memory as {} handles ({})",
                t.name(),
                t.extension()
            )));
        }
        flags |= t.flag();
    }
    for &t in asked {
        let compatible = export_support(device, t.flag()).unwrap_or_default();
        if !compatible.contains(flags) {
            let names: Vec<&str> = asked.iter().map(|t| t.name()).collect();
            return Err(unsupported(format!(
                "exporting one buffer's memory as {} handles together (the driver's \
                 compatible types for {} are {compatible:?}); ask for fewer",
                names.join(" and "),
                t.name()
            )));
        }
    }
    Ok(flags)
}

/// A new buffer of `size` bytes whose memory is its own and exportable as
/// the handle types `asked` (see `export_types` where `None`).
pub(crate) fn create_exportable(
    device: &Device,
    size: u64,
    what: &str,
    asked: Option<&[MemoryHandleType]>,
) -> Result<RawBuffer> {
    let handle_types = export_types(device, asked)?;
    check_size(device, size, what)?;
    let buffer = ExternalBuffer::new(device, size, buffer_usage(device), handle_types)?;
    let requirements = buffer.requirements;
    let Some(type_index) = device.memory_type(requirements.memory_type_bits, MemoryUsage::Device)
    else {
        return Err(Error::Unsupported {
            what: "a memory type for exportable buffers".into(),
            device: device.name().to_string(),
        });
    };
    check_allocation(device, type_index, requirements.size, what)?;
    let (buffer, memory) = buffer.bind(
        MemorySource::Export(handle_types),
        requirements.size,
        type_index,
        what,
    )?;
    device
        .exportable_bytes
        .fetch_add(requirements.size, std::sync::atomic::Ordering::AcqRel);
    Ok(RawBuffer::dedicated(
        buffer,
        Dedicated {
            memory,
            size: requirements.size,
            offset: 0,
            memory_type_index: type_index,
            kind: DedicatedKind::Exportable(handle_types, AliasLinks::new()),
        },
        size,
        MemoryUsage::Device,
        None,
        is_coherent(device, type_index),
    ))
}

/// The handle types the buffer memory `memory` can be exported as: those
/// it was created exportable as (none for other memory).
pub(crate) fn exported_types(memory: &BufferMemory) -> Vec<MemoryHandleType> {
    let types = match memory.raw().and_then(|raw| raw.dedicated_memory()) {
        Some(Dedicated {
            kind: DedicatedKind::Exportable(types, _),
            ..
        }) => *types,
        _ => return Vec::new(),
    };
    MemoryHandleType::ALL
        .into_iter()
        .filter(|t| types.contains(t.flag()))
        .collect()
}

/// A new handle of `bytes` bytes of `memory` at `offset` as
/// `handle_type`, with its description.
pub(crate) fn export(
    op: &'static str,
    (memory, offset, bytes): (&Arc<BufferMemory>, u64, u64),
    handle_type: MemoryHandleType,
) -> Result<(Payload, ExternalMemoryInfo)> {
    let device = &memory.device;
    let not = |reason: String| Error::NotExportable { op, reason };
    let Some(raw) = memory.raw() else {
        return Err(not("the buffer is empty: it has no memory to export".into()));
    };
    let Some(dedicated) = raw.dedicated_memory() else {
        return Err(not(
            "the buffer's memory is not exportable; create it with \
             DeviceContext::enqueue_create_exportable_buffer"
                .into(),
        ));
    };
    let DedicatedKind::Exportable(types, _) = &dedicated.kind else {
        return Err(not(
            "imported memory is exported again only by its exporter; export the original".into(),
        ));
    };
    let flag = handle_type.flag();
    if !types.contains(flag) {
        return Err(not(format!(
            "device `{}` cannot export this buffer's memory as a {} handle",
            device.name(),
            handle_type.name()
        )));
    }
    let payload = match handle_type {
        MemoryHandleType::OpaqueWin32 => {
            Payload::Win32(export_memory_win32(device, dedicated.memory, flag)?)
        }
        #[cfg(unix)]
        MemoryHandleType::OpaqueFd | MemoryHandleType::DmaBuf => {
            Payload::Fd(export_memory_fd(device, dedicated.memory, flag)?)
        }
        #[cfg(not(unix))]
        MemoryHandleType::OpaqueFd | MemoryHandleType::DmaBuf => {
            return Err(not("file descriptors are handles of Unix systems".into()))
        }
    };
    let ids = &device.adapter.info;
    Ok((
        payload,
        ExternalMemoryInfo {
            handle_type,
            allocation_size: dedicated.size,
            offset: dedicated.offset + offset,
            size: bytes,
            dedicated_buffer_size: Some(raw.size),
            memory_type_index: Some(dedicated.memory_type_index),
            device_uuid: Some(ids.uuid),
            driver_uuid: Some(ids.driver_uuid),
        },
    ))
}

/// The handle type through which `importer` can import `memory` (of
/// another device): the first, in `MemoryHandleType::ALL`'s order, that
/// the memory is exportable as and `importer` can import.
pub(crate) fn shared_type(memory: &BufferMemory, importer: &Device) -> Option<MemoryHandleType> {
    let exported = exported_types(memory);
    if exported.is_empty() {
        return None;
    }
    let importable = handle_types(importer, false);
    exported.into_iter().find(|t| importable.contains(t))
}

/// Imports the memory `payload` carries into a new buffer on `device`
/// (see `external::import_view`), for the alias of a zero-copy copy too.
pub(crate) fn import_alias(
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
pub(crate) fn import_raw(
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
    if !extension_enabled(device, info.handle_type) {
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
            let fd = check_descriptor(op, kind, fd, info.allocation_size)?;
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

/// Refuses descriptors that cannot hold memory (pipes, sockets,
/// directories, closed descriptors) and regular files (memfds) smaller
/// than `needed`, before the driver sees them. Gives the descriptor back.
#[cfg(unix)]
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
