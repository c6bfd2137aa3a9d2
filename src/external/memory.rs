//! Exportable buffers: memory of their own, allocated exportable, and the
//! buffers that import such memory.

use ash::vk;
use bytemuck::Pod;

use super::byte_size;
#[cfg(unix)]
use super::{fd, ExportedMemory, MemoryHandleType};
use crate::buffer::{dtype_name, DeviceBuffer, View};
use crate::context::DeviceContext;
use crate::error::{Error, Result, VkResultExt};
use crate::memory::{buffer_usage, check_size, Dedicated, DedicatedKind, RawBuffer};
use crate::resource::BufferMemory;
use crate::vk::{buffer_support, Device, MemoryUsage};

/// `vkAllocateMemory` flags every buffer memory of `device` needs.
pub(super) fn allocate_flags(device: &Device) -> vk::MemoryAllocateFlags {
    if device.buffer_device_address {
        vk::MemoryAllocateFlags::DEVICE_ADDRESS
    } else {
        vk::MemoryAllocateFlags::empty()
    }
}

/// Creates a `VkBuffer` of `size` bytes that may be bound to external
/// memory of `handle_types`.
pub(super) fn create_external_buffer(
    device: &Device,
    size: u64,
    handle_types: vk::ExternalMemoryHandleTypeFlags,
) -> Result<(vk::Buffer, vk::MemoryRequirements)> {
    let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle_types);
    let info = vk::BufferCreateInfo::default()
        .size(size)
        .usage(buffer_usage(device))
        .sharing_mode(vk::SharingMode::EXCLUSIVE)
        .push_next(&mut external);
    // SAFETY: a valid create info with a non-zero size; the handle types are
    // ones the device supports for this usage (checked by the callers).
    let buffer = unsafe { device.raw.create_buffer(&info, None) }.during("vkCreateBuffer")?;
    // SAFETY: `buffer` was just created on this device.
    let requirements = unsafe { device.raw.get_buffer_memory_requirements(buffer) };
    Ok((buffer, requirements))
}

/// Allocates `info` for `buffer` and binds it at offset 0; destroys the
/// buffer on failure. `what` names the buffer in errors.
pub(super) fn allocate_and_bind(
    device: &Device,
    buffer: vk::Buffer,
    info: &vk::MemoryAllocateInfo<'_>,
    what: &str,
) -> Result<vk::DeviceMemory> {
    // SAFETY: `info` is valid for this device (its chain was checked by
    // the caller against the external-memory properties).
    let memory = match unsafe { device.raw.allocate_memory(info, None) } {
        Ok(m) => m,
        Err(e) => {
            // SAFETY: the buffer is unused and destroyed once.
            unsafe { device.raw.destroy_buffer(buffer, None) };
            return Err(match e {
                vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                    Error::OutOfMemory {
                        what: what.to_string(),
                        bytes: info.allocation_size,
                        detail: format!("vkAllocateMemory returned {e}"),
                    }
                }
                e => Error::vk("vkAllocateMemory", e),
            });
        }
    };
    // SAFETY: the memory was allocated for this buffer (dedicated, or of a
    // size and type its requirements allow); bound once, at offset 0.
    if let Err(e) = unsafe { device.raw.bind_buffer_memory(buffer, memory, 0) } {
        // SAFETY: neither is in use; each is destroyed once.
        unsafe {
            device.raw.destroy_buffer(buffer, None);
            device.raw.free_memory(memory, None);
        }
        return Err(Error::vk("vkBindBufferMemory", e));
    }
    Ok(memory)
}

pub(super) fn is_coherent(device: &Device, type_index: u32) -> bool {
    device.adapter.memory.memory_types[type_index as usize]
        .property_flags
        .contains(vk::MemoryPropertyFlags::HOST_COHERENT)
}

/// A new buffer of `size` bytes whose memory is its own and exportable as
/// an opaque fd (and a dma-buf fd where the device can).
fn create_exportable(device: &Device, size: u64, what: &str) -> Result<RawBuffer> {
    let unsupported = |what: &str| Error::Unsupported {
        what: what.to_string(),
        device: device.name().to_string(),
    };
    if !device.external.enabled.memory_fd {
        return Err(unsupported(
            "exporting memory as file descriptors (VK_KHR_external_memory_fd)",
        ));
    }
    check_size(device, size, MemoryUsage::Device, what)?;
    let instance = &device.instance;
    let usage = buffer_usage(device);
    let opaque = buffer_support(
        instance,
        device.adapter.raw,
        usage,
        vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
    );
    if !opaque
        .external_memory_features
        .contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE)
    {
        return Err(unsupported("exporting buffer memory as opaque fds"));
    }
    let mut handle_types = vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD;
    let dma = vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT;
    if device.external.enabled.dma_buf
        && opaque.compatible_handle_types.contains(dma)
        && buffer_support(instance, device.adapter.raw, usage, dma)
            .external_memory_features
            .contains(vk::ExternalMemoryFeatureFlags::EXPORTABLE)
    {
        handle_types |= dma;
    }
    let (buffer, requirements) = create_external_buffer(device, size, handle_types)?;
    let Some(type_index) = device.memory_type(requirements.memory_type_bits, MemoryUsage::Device)
    else {
        // SAFETY: the buffer is unused and destroyed once.
        unsafe { device.raw.destroy_buffer(buffer, None) };
        return Err(unsupported("a memory type for exportable buffers"));
    };
    let mut export = vk::ExportMemoryAllocateInfo::default().handle_types(handle_types);
    let mut dedicated = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
    let mut flags = vk::MemoryAllocateFlagsInfo::default().flags(allocate_flags(device));
    let info = vk::MemoryAllocateInfo::default()
        .allocation_size(requirements.size)
        .memory_type_index(type_index)
        .push_next(&mut export)
        .push_next(&mut dedicated)
        .push_next(&mut flags);
    let memory = allocate_and_bind(device, buffer, &info, what)?;
    Ok(RawBuffer::dedicated(
        buffer,
        Dedicated {
            memory,
            size: requirements.size,
            offset: 0,
            memory_type_index: type_index,
            kind: DedicatedKind::Exportable(handle_types),
        },
        size,
        MemoryUsage::Device,
        None,
        is_coherent(device, type_index),
    ))
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

#[cfg(unix)]
impl<T: Pod> DeviceBuffer<T> {
    /// A new file descriptor of this buffer's memory, with what an importer
    /// needs to know (size, offset of this buffer or view in the memory, the
    /// device's UUIDs). The buffer must come from
    /// [`DeviceContext::enqueue_create_exportable_buffer`]
    /// ([`Error::NotExportable`] otherwise, or where the device cannot
    /// export as `handle_type`). Work on the memory in another context or
    /// process is not ordered against this buffer's stream: synchronize
    /// first (see [`DeviceContext::import_buffer`]).
    pub fn export_fd(&self, handle_type: MemoryHandleType) -> Result<ExportedMemory> {
        fd::export("DeviceBuffer::export_fd", &self.view, handle_type)
    }

    /// The same memory as a buffer of `ctx`, a context of another
    /// `VkDevice` on the same physical device (see
    /// [`DeviceContext::import_buffer`]); the buffer must be exportable.
    pub fn share_with(&self, ctx: &DeviceContext) -> Result<DeviceBuffer<T>> {
        let exported = fd::export(
            "DeviceBuffer::share_with",
            &self.view,
            MemoryHandleType::OpaqueFd,
        )?;
        ctx.import_buffer(exported, self.len())
    }
}

#[cfg(unix)]
impl DeviceContext {
    /// A buffer of `len` elements of `T` over imported memory: an fd
    /// exported by [`DeviceBuffer::export_fd`] in this or another process,
    /// or by another API ([`ExternalMemoryInfo::foreign`](super::ExternalMemoryInfo::foreign)). The buffer
    /// takes the descriptor over (Vulkan owns it after a successful
    /// import; on error it is closed).
    ///
    /// Checked: the exporter's device UUID (and for opaque handles its
    /// driver UUID) against this device's ([`Error::ForeignDevice`]); the
    /// handle type against what the device can import
    /// ([`Error::Unsupported`]); the descriptor is not a pipe, socket or
    /// directory and the driver accepts it ([`Error::InvalidHandle`]); the
    /// `len` elements fit in the exported range ([`Error::ImportSize`]).
    ///
    /// The memory is shared, not copied: work of this context and of the
    /// exporter on it is not ordered by vkcompute. Synchronize the writer
    /// (`synchronize()`, [`wait_on_host_for`](Self::wait_on_host_for), or a
    /// semaphore where the device exports them) before the other side
    /// reads. Host transfers of the buffer go through this context's
    /// staging buffers (the memory is never mapped), so a race between the
    /// two devices yields unspecified element values, never undefined
    /// behaviour in Rust code. The exporter must not shrink the memory
    /// (a memfd truncated by another process faults the device).
    ///
    /// Imported into the exporter's own device (or twice into one), the
    /// import is a second buffer over the same memory: vkcompute tracks
    /// the two as different buffers, so it puts no barrier between work on
    /// one and work on the other; order such work with `synchronize()`.
    /// Use clones and views ([`DeviceBuffer::create_sub_buffer`]) to share
    /// memory within one device.
    pub fn import_buffer<T: Pod>(
        &self,
        memory: ExportedMemory,
        len: usize,
    ) -> Result<DeviceBuffer<T>> {
        let op = "DeviceContext::import_buffer";
        let what = format!(
            "imported DeviceBuffer[{}] of {len} elements",
            dtype_name::<T>()
        );
        let bytes = byte_size::<T>(&what, len)?;
        if bytes > memory.info.size {
            return Err(Error::ImportSize {
                op,
                needed: bytes,
                available: memory.info.size,
            });
        }
        let offset = memory.info.offset;
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
            // Nothing to share: an empty buffer (the descriptor closes).
            return self.enqueue_create_buffer(0);
        }
        self.shared.lock().reclaim_garbage()?;
        let raw = fd::import(op, &self.shared.device, memory, &what)?;
        let memory = BufferMemory::from_raw(&self.shared, Some(raw), offset + bytes);
        Ok(DeviceBuffer::from_view(
            View {
                memory,
                offset,
                bytes,
            },
            len,
        ))
    }
}
