//! Exportable buffers: memory of their own, allocated exportable, and the
//! export of that memory as a handle of the platform.

#[cfg(unix)]
use std::os::fd::OwnedFd;

use ash::vk;
use bytemuck::Pod;

use super::{byte_size, ExternalMemoryInfo, MemoryHandleType};
use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::resource::BufferMemory;
use crate::view::{dtype_name, View};
#[cfg(unix)]
use crate::vk::export_memory_fd;
use crate::vk::memory::{buffer_usage, check_size, Dedicated, DedicatedKind, RawBuffer};
use crate::vk::{
    buffer_support, export_memory_win32, AliasLinks, Device, ExternalBuffer, MemorySource,
    MemoryUsage, Win32Handle,
};

/// A handle of memory, in the form its platform carries it.
pub(crate) enum Payload {
    /// A file descriptor (opaque or dma-buf).
    #[cfg(unix)]
    Fd(OwnedFd),
    /// A Win32 NT handle.
    Win32(Win32Handle),
}

/// Whether memory type `type_index` of `device` is host coherent.
pub(super) fn is_coherent(device: &Device, type_index: u32) -> bool {
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

/// A new buffer of `size` bytes whose memory is its own and exportable as
/// every handle type the device can export it as together: an opaque fd
/// (and a dma-buf fd where the device can), or an opaque Win32 handle.
fn create_exportable(device: &Device, size: u64, what: &str) -> Result<RawBuffer> {
    let unsupported = |what: &str| Error::Unsupported {
        what: what.to_string(),
        device: device.name().to_string(),
    };
    let enabled = device.external.enabled;
    if !enabled.memory_fd && !enabled.memory_win32 {
        return Err(unsupported(
            "exporting memory (VK_KHR_external_memory_fd or VK_KHR_external_memory_win32)",
        ));
    }
    check_size(device, size, MemoryUsage::Device, what)?;
    let (opaque, extra) = if enabled.memory_fd {
        let dma = (enabled.dma_buf).then_some(vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT);
        (vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD, dma)
    } else {
        (vk::ExternalMemoryHandleTypeFlags::OPAQUE_WIN32, None)
    };
    let Some(compatible) = export_support(device, opaque) else {
        return Err(unsupported(&format!(
            "exporting buffer memory as {opaque:?} handles"
        )));
    };
    let mut handle_types = opaque;
    if let Some(extra) = extra {
        if compatible.contains(extra) && export_support(device, extra).is_some() {
            handle_types |= extra;
        }
    }
    let buffer = ExternalBuffer::new(device, size, buffer_usage(device), handle_types)?;
    let requirements = buffer.requirements;
    let Some(type_index) = device.memory_type(requirements.memory_type_bits, MemoryUsage::Device)
    else {
        return Err(unsupported("a memory type for exportable buffers"));
    };
    let (buffer, memory) = buffer.bind(
        MemorySource::Export(handle_types),
        requirements.size,
        type_index,
        what,
    )?;
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

/// A new handle of `view`'s memory as `handle_type`, with its description.
pub(super) fn export(
    op: &'static str,
    view: &View,
    handle_type: MemoryHandleType,
) -> Result<(Payload, ExternalMemoryInfo)> {
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
            offset: dedicated.offset + view.offset,
            size: view.bytes,
            dedicated_buffer_size: Some(raw.size),
            memory_type_index: Some(dedicated.memory_type_index),
            device_uuid: Some(ids.uuid),
            driver_uuid: Some(ids.driver_uuid),
        },
    ))
}

/// The opaque handle type both `a` and `b` can share memory through, where
/// there is one: an fd on Unix, else a Win32 handle.
pub(super) fn common_opaque_type(a: &Device, b: &Device) -> Option<MemoryHandleType> {
    let (x, y) = (a.external.enabled, b.external.enabled);
    if cfg!(unix) && x.memory_fd && y.memory_fd {
        Some(MemoryHandleType::OpaqueFd)
    } else if x.memory_win32 && y.memory_win32 {
        Some(MemoryHandleType::OpaqueWin32)
    } else {
        None
    }
}

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
        let (payload, info) = export(op, &self.view, handle_type)?;
        super::import::import_view(ctx, op, info, payload, self.len())
    }
}
