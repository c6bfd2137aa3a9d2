//! Sharing memory beyond one context: exportable buffers and their file
//! descriptors, buffers imported from such handles, host buffers over the
//! user's own allocations, exported and imported timeline semaphores, and
//! zero-copy transfers between two devices of one physical device.
//!
//! # Soundness
//!
//! Memory that another device or process can see is never handed to host
//! code as a Rust reference: exportable and imported buffers are not mapped,
//! so every host transfer of them goes through this context's own staging
//! buffers, copied by its device. What another device writes while this one
//! reads is a race on device memory (the bytes read may be old, new or torn,
//! and every element type is `Pod`, so any bytes are valid), never a race on
//! host memory that Rust code holds a reference to. Ordering between devices
//! is the user's: `synchronize()` (or [`DeviceContext::wait_on_host_for`])
//! on the writer before the reader's work, or semaphores where the device
//! exports them.

use std::marker::PhantomData;
use std::mem::size_of;
use std::ops::{Deref, DerefMut};
#[cfg(unix)]
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use ash::vk;
use bytemuck::Pod;

use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::{Error, Result, VkResultExt};
use crate::host::HostBuffer;
use crate::resource::{BufferMemory, HostAccess};
use crate::view::{check_element_size, dtype_name, View};
use crate::vk::memory::{
    buffer_usage, check_size, Dedicated, DedicatedKind, HostAllocation, RawBuffer,
};

use crate::vk::{buffer_support, timeline_semaphore_support, Device, MemoryUsage, Timeline};

/// How exported memory is handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemoryHandleType {
    /// An opaque POSIX file descriptor (`VK_KHR_external_memory_fd`):
    /// importable by Vulkan, CUDA (`cudaExternalMemoryHandleTypeOpaqueFd`)
    /// and OpenCL on the same device and driver.
    OpaqueFd,
    /// A Linux dma-buf file descriptor (`VK_EXT_external_memory_dma_buf`):
    /// importable by other drivers, V4L2, DRM, and the network stacks that
    /// register dma-bufs (UCX, libfabric, RDMA).
    DmaBuf,
}

impl MemoryHandleType {
    pub(crate) fn flag(self) -> vk::ExternalMemoryHandleTypeFlags {
        match self {
            MemoryHandleType::OpaqueFd => vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
            MemoryHandleType::DmaBuf => vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT,
        }
    }

    fn name(self) -> &'static str {
        match self {
            MemoryHandleType::OpaqueFd => "opaque fd",
            MemoryHandleType::DmaBuf => "dma-buf",
        }
    }

    fn code(self) -> u64 {
        match self {
            MemoryHandleType::OpaqueFd => 1,
            MemoryHandleType::DmaBuf => 2,
        }
    }
}

/// What an importer needs to know of exported memory besides its handle.
/// [`to_bytes`](Self::to_bytes) / [`from_bytes`](Self::from_bytes) carry it
/// to another process beside the descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalMemoryInfo {
    /// The kind of handle.
    pub handle_type: MemoryHandleType,
    /// Bytes of the memory object (`allocationSize` of the import).
    pub allocation_size: u64,
    /// Where the buffer's data starts in the memory.
    pub offset: u64,
    /// Bytes of data from `offset`.
    pub size: u64,
    /// The size of the `VkBuffer` the memory is dedicated to, where the
    /// exporter made a dedicated allocation (vkcompute always does); the
    /// importer makes its buffer alike. `None` for other exporters.
    pub dedicated_buffer_size: Option<u64>,
    /// The exporter's memory type (an opaque import must use the same).
    pub memory_type_index: Option<u32>,
    /// The exporter's `deviceUUID`, checked on import where known.
    pub device_uuid: Option<[u8; 16]>,
    /// The exporter's `driverUUID`, checked on import of opaque handles
    /// where known.
    pub driver_uuid: Option<[u8; 16]>,
}

/// Bytes of [`ExternalMemoryInfo::to_bytes`].
pub const EXTERNAL_MEMORY_INFO_BYTES: usize = 88;

impl ExternalMemoryInfo {
    /// The description of memory from another API or process that says
    /// only its handle type and size: data from offset 0, not dedicated,
    /// device unchecked.
    pub fn foreign(handle_type: MemoryHandleType, allocation_size: u64) -> Self {
        ExternalMemoryInfo {
            handle_type,
            allocation_size,
            offset: 0,
            size: allocation_size,
            dedicated_buffer_size: None,
            memory_type_index: None,
            device_uuid: None,
            driver_uuid: None,
        }
    }

    /// A fixed-size little-endian encoding, to send beside the descriptor.
    pub fn to_bytes(&self) -> [u8; EXTERNAL_MEMORY_INFO_BYTES] {
        let mut out = [0u8; EXTERNAL_MEMORY_INFO_BYTES];
        let words = [
            self.handle_type.code(),
            self.allocation_size,
            self.offset,
            self.size,
            self.dedicated_buffer_size.map_or(u64::MAX, |s| s),
            self.memory_type_index.map_or(u64::MAX, u64::from),
        ];
        for (i, w) in words.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        out[48] = u8::from(self.device_uuid.is_some());
        out[49] = u8::from(self.driver_uuid.is_some());
        out[56..72].copy_from_slice(&self.device_uuid.unwrap_or_default());
        out[72..88].copy_from_slice(&self.driver_uuid.unwrap_or_default());
        out
    }

    /// Decodes [`to_bytes`](Self::to_bytes); anything else is
    /// [`Error::InvalidHandle`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let bad = |detail: &str| Error::InvalidHandle {
            op: "ExternalMemoryInfo::from_bytes",
            handle_type: "memory",
            detail: detail.to_string(),
        };
        if bytes.len() != EXTERNAL_MEMORY_INFO_BYTES {
            return Err(bad(&format!(
                "{} bytes of description, expected {EXTERNAL_MEMORY_INFO_BYTES}",
                bytes.len()
            )));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        let uuid = |at: usize, present: u8| {
            let mut u = [0u8; 16];
            u.copy_from_slice(&bytes[at..at + 16]);
            (present == 1).then_some(u)
        };
        let handle_type = match word(0) {
            1 => MemoryHandleType::OpaqueFd,
            2 => MemoryHandleType::DmaBuf,
            other => return Err(bad(&format!("unknown handle type code {other}"))),
        };
        Ok(ExternalMemoryInfo {
            handle_type,
            allocation_size: word(1),
            offset: word(2),
            size: word(3),
            dedicated_buffer_size: Some(word(4)).filter(|&s| s != u64::MAX),
            memory_type_index: u32::try_from(word(5)).ok(),
            device_uuid: uuid(56, bytes[48]),
            driver_uuid: uuid(72, bytes[49]),
        })
    }
}

/// Exported memory: an owned file descriptor (closed when dropped) and its
/// description. Each export makes a new descriptor, which holds the memory
/// alive on its own: the exporting buffer may be dropped meanwhile.
#[cfg(unix)]
#[derive(Debug)]
pub struct ExportedMemory {
    /// The handle; an import takes it over.
    pub fd: OwnedFd,
    /// What an importer needs to know.
    pub info: ExternalMemoryInfo,
}

fn hex(uuid: &[u8]) -> String {
    uuid.iter().map(|b| format!("{b:02x}")).collect()
}

/// `vkAllocateMemory` flags every buffer memory of `device` needs.
fn allocate_flags(device: &Device) -> vk::MemoryAllocateFlags {
    if device.buffer_device_address {
        vk::MemoryAllocateFlags::DEVICE_ADDRESS
    } else {
        vk::MemoryAllocateFlags::empty()
    }
}

/// Creates a `VkBuffer` of `size` bytes that may be bound to external
/// memory of `handle_types`.
fn create_external_buffer(
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
fn allocate_and_bind(
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

fn is_coherent(device: &Device, type_index: u32) -> bool {
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

/// The byte size of `len` elements of `T`, refusing element types of no
/// size and sizes that overflow; `what` names the buffer in errors.
fn byte_size<T>(what: &str, len: usize) -> Result<u64> {
    check_element_size::<T>(what)?;
    let bytes = Error::byte_size(what, len, size_of::<T>())?;
    bytes
        .checked_next_multiple_of(4)
        .ok_or_else(|| Error::SizeOverflow {
            what: what.to_string(),
            len,
            elem_size: size_of::<T>(),
        })?;
    Ok(bytes)
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

    /// The alignment (of address and size) that host memory imported with
    /// [`import_host_memory`](Self::import_host_memory) needs
    /// (`minImportedHostPointerAlignment`), or `None` where the device
    /// cannot import host memory (`VK_EXT_external_memory_host`).
    pub fn host_import_alignment(&self) -> Option<usize> {
        let device = &self.shared.device;
        (device.external.enabled.host)
            .then(|| usize::try_from(device.adapter.min_imported_host_pointer_alignment).ok())
            .flatten()
    }

    /// A host buffer over `memory` itself, without copying: the device
    /// reads and writes the allocation the caller filled. The buffer owns
    /// the allocation and frees it only after the last clone is dropped
    /// and the device is done with it, so safe code cannot free it early.
    /// Errors: [`Error::Unsupported`] where the device cannot import host
    /// memory; [`Error::Misaligned`] where `memory`'s address or size is not
    /// a multiple of [`host_import_alignment`](Self::host_import_alignment)
    /// (allocate it with [`AlignedHostMemory::with_alignment`]). On error
    /// `memory` is dropped.
    pub fn import_host_memory<T: Pod>(
        &self,
        memory: AlignedHostMemory<T>,
    ) -> Result<HostBuffer<T>> {
        let op = "DeviceContext::import_host_memory";
        let device = &self.shared.device;
        let unsupported = |what: &str| Error::Unsupported {
            what: what.to_string(),
            device: device.name().to_string(),
        };
        let Some(fns) = &device.external.host else {
            return Err(unsupported(
                "importing host memory (VK_EXT_external_memory_host)",
            ));
        };
        let len = memory.len;
        let what = format!(
            "HostBuffer[{}] of {len} imported elements",
            dtype_name::<T>()
        );
        let bytes = byte_size::<T>(&what, len)?;
        let alloc = memory.into_allocation();
        let align = device.adapter.min_imported_host_pointer_alignment.max(1);
        let address = alloc.ptr.as_ptr() as u64;
        let alloc_size = alloc.layout.size() as u64;
        for (value, name) in [(address, "address"), (alloc_size, "size")] {
            if value % align != 0 {
                return Err(Error::Misaligned {
                    op,
                    offset: value,
                    alignment: align,
                    rule: if name == "address" {
                        "imported host memory must start at a multiple of minImportedHostPointerAlignment (allocate it with AlignedHostMemory::with_alignment(len, ctx.host_import_alignment()))"
                    } else {
                        "imported host memory must be a whole number of minImportedHostPointerAlignment blocks"
                    },
                });
            }
        }
        let handle = vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT;
        let support = buffer_support(
            &device.instance,
            device.adapter.raw,
            buffer_usage(device),
            handle,
        );
        if !support
            .external_memory_features
            .contains(vk::ExternalMemoryFeatureFlags::IMPORTABLE)
        {
            return Err(unsupported("buffers over imported host allocations"));
        }
        let mut host_props = vk::MemoryHostPointerPropertiesEXT::default();
        // SAFETY: the extension is enabled; the pointer addresses a live
        // host allocation of `alloc_size` bytes, aligned as required.
        unsafe {
            (fns.fp().get_memory_host_pointer_properties_ext)(
                device.raw.handle(),
                handle,
                alloc.ptr.as_ptr().cast(),
                &mut host_props,
            )
        }
        .result()
        .during("vkGetMemoryHostPointerPropertiesEXT")?;
        let (buffer, requirements) = create_external_buffer(device, alloc_size, handle)?;
        let allowed = requirements.memory_type_bits & host_props.memory_type_bits;
        let type_index = device.memory_type(allowed, MemoryUsage::Readback);
        let Some(type_index) = type_index.filter(|_| requirements.size <= alloc_size) else {
            // SAFETY: the buffer is unused and destroyed once.
            unsafe { device.raw.destroy_buffer(buffer, None) };
            return Err(if requirements.size > alloc_size {
                Error::ImportSize {
                    op,
                    needed: requirements.size,
                    available: alloc_size,
                }
            } else {
                unsupported("a memory type for this host allocation")
            });
        };
        let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
            .handle_type(handle)
            .host_pointer(alloc.ptr.as_ptr().cast());
        let mut flags = vk::MemoryAllocateFlagsInfo::default().flags(allocate_flags(device));
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(alloc_size)
            .memory_type_index(type_index)
            .push_next(&mut import)
            .push_next(&mut flags);
        let vk_memory = allocate_and_bind(device, buffer, &info, &what)?;
        let ptr = alloc.ptr;
        let raw = RawBuffer::dedicated(
            buffer,
            Dedicated {
                memory: vk_memory,
                size: alloc_size,
                offset: 0,
                memory_type_index: type_index,
                kind: DedicatedKind::Host(alloc),
            },
            alloc_size,
            MemoryUsage::Readback,
            Some(ptr),
            is_coherent(device, type_index),
        );
        let memory = BufferMemory::from_raw(&self.shared, Some(raw), bytes);
        Ok(HostBuffer::from_view(
            View {
                memory,
                offset: 0,
                bytes,
            },
            len,
        ))
    }
}

/// Host memory of `len` elements of `T`, zeroed, at an address and of a
/// size aligned for import into a device
/// ([`DeviceContext::import_host_memory`]). Derefs to `[T]`.
pub struct AlignedHostMemory<T> {
    alloc: HostAllocation,
    len: usize,
    _element: PhantomData<T>,
}

impl<T: Pod> AlignedHostMemory<T> {
    /// `len` zeroed elements, page-aligned (4096 bytes; see
    /// [`with_alignment`](Self::with_alignment) for devices that need more).
    pub fn new(len: usize) -> Result<Self> {
        Self::with_alignment(len, 4096)
    }

    /// `len` zeroed elements at an address that is a multiple of
    /// `alignment` (a power of two), rounded up to a whole number of
    /// `alignment` bytes (at least one block).
    pub fn with_alignment(len: usize, alignment: usize) -> Result<Self> {
        let op = "AlignedHostMemory::with_alignment";
        let what = format!("AlignedHostMemory[{}] of {len} elements", dtype_name::<T>());
        let bytes = byte_size::<T>(&what, len)?;
        if !alignment.is_power_of_two() || alignment < std::mem::align_of::<T>() {
            return Err(Error::Misaligned {
                op,
                offset: alignment as u64,
                alignment: std::mem::align_of::<T>() as u64,
                rule: "the alignment must be a power of two and suit the element type",
            });
        }
        let too_large = || Error::SizeOverflow {
            what: what.clone(),
            len,
            elem_size: size_of::<T>(),
        };
        let size = usize::try_from(bytes)
            .ok()
            .and_then(|b| b.max(1).checked_next_multiple_of(alignment))
            .ok_or_else(too_large)?;
        let layout =
            std::alloc::Layout::from_size_align(size, alignment).map_err(|_| too_large())?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(ptr).ok_or_else(|| Error::OutOfMemory {
            what: what.clone(),
            bytes: size as u64,
            detail: "the host allocator refused".into(),
        })?;
        Ok(AlignedHostMemory {
            alloc: HostAllocation { ptr, layout },
            len,
            _element: PhantomData,
        })
    }

    /// The alignment of the address and size.
    pub fn alignment(&self) -> usize {
        self.alloc.layout.align()
    }

    /// Bytes allocated (a multiple of the alignment).
    pub fn allocation_size(&self) -> usize {
        self.alloc.layout.size()
    }

    fn into_allocation(self) -> HostAllocation {
        self.alloc
    }
}

impl<T: Pod> Deref for AlignedHostMemory<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: the allocation holds at least `len` zero-initialised (so
        // valid: `T` is Pod) elements, aligned for `T`, owned by `self`.
        unsafe { std::slice::from_raw_parts(self.alloc.ptr.as_ptr().cast(), self.len) }
    }
}

impl<T: Pod> DerefMut for AlignedHostMemory<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.alloc.ptr.as_ptr().cast(), self.len) }
    }
}

impl<T> std::fmt::Debug for AlignedHostMemory<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AlignedHostMemory")
            .field("len", &self.len)
            .field("alignment", &self.alloc.layout.align())
            .finish()
    }
}

#[cfg(unix)]
mod fd {
    use super::*;

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
                "imported memory is exported again only by its exporter; export the original"
                    .into(),
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
    /// or by another API ([`ExternalMemoryInfo::foreign`]). The buffer
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

/// Copies `src` into `dst` (of equal length) on two devices of one physical
/// device without a host round trip, where one end is exportable: the other
/// device imports it and copies. Completes before it returns. `None` when
/// neither end is exportable or the devices differ (then the caller goes
/// through the host).
#[cfg(unix)]
pub(crate) fn copy_between_devices(op: &'static str, src: &View, dst: &View) -> Option<Result<()>> {
    let (a, b) = (&src.memory.device, &dst.memory.device);
    if a.adapter.info.uuid != b.adapter.info.uuid
        || a.adapter.info.driver_uuid != b.adapter.info.driver_uuid
        || !a.external.enabled.memory_fd
        || !b.external.enabled.memory_fd
        || src.bytes == 0
    {
        return None;
    }
    let exportable = |v: &View| {
        v.memory
            .raw()
            .and_then(|r| r.dedicated_memory())
            .is_some_and(|d| {
                matches!(d.kind, DedicatedKind::Exportable(t)
                if t.contains(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD))
            })
    };
    // The device of the end that is not exportable runs the copy, on an
    // alias of the exportable end.
    let (shared, runner, write) = if exportable(dst) {
        (dst, src, true)
    } else if exportable(src) {
        (src, dst, false)
    } else {
        return None;
    };
    Some(copy_through_alias(op, src, dst, shared, runner, write))
}

#[cfg(not(unix))]
pub(crate) fn copy_between_devices(_: &'static str, _: &View, _: &View) -> Option<Result<()>> {
    None
}

#[cfg(unix)]
fn copy_through_alias(
    op: &'static str,
    src: &View,
    dst: &View,
    shared: &View,
    runner: &View,
    write: bool,
) -> Result<()> {
    let ctx = runner.memory.owner();
    // Hold the shared end as a host borrow would: its own device's
    // conflicting work is done first, and none can start until the copy
    // on the other device is done.
    let access = if write {
        HostAccess::Write
    } else {
        HostAccess::Read
    };
    shared.memory.borrow_host(op, access)?;
    let result = (|| {
        let exported = fd::export(op, shared, MemoryHandleType::OpaqueFd)?;
        let raw = fd::import(op, &ctx.device, exported, "a shared buffer's alias")?;
        let alias = BufferMemory::from_raw(&ctx, Some(raw), shared.memory.size);
        let ((s, so), (d, dof)) = if write {
            ((&src.memory, src.offset), (&alias, dst.offset))
        } else {
            ((&alias, src.offset), (&dst.memory, dst.offset))
        };
        ctx.copy(op, (s, so), (d, dof), src.bytes)?;
        // The alias's uses are the copy: wait for it on the host.
        alias.wait_for_host_access(true)
    })();
    shared.memory.release_host();
    result
}

/// A stream's timeline semaphore exported as an opaque fd, and the value
/// that the work enqueued before the export signals.
#[cfg(unix)]
#[derive(Debug)]
pub struct ExportedSemaphore {
    /// The handle; an import takes it over.
    pub fd: OwnedFd,
    /// Reached when the exporting stream's work enqueued before the export
    /// is done.
    pub value: u64,
    /// The exporter's `deviceUUID`.
    pub device_uuid: [u8; 16],
}

/// A timeline semaphore imported from another context, process or API:
/// streams wait on its values with [`DeviceContext::enqueue_wait_semaphore`],
/// the host with [`wait`](Self::wait).
pub struct ExternalSemaphore {
    timeline: Arc<Timeline>,
}

impl ExternalSemaphore {
    /// Blocks the host until the semaphore reaches `value`.
    pub fn wait(&self, value: u64) -> Result<()> {
        self.timeline.wait_submitted(value)
    }

    /// The value the semaphore has reached.
    pub fn value(&self) -> Result<u64> {
        self.timeline.query()
    }
}

impl std::fmt::Debug for ExternalSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalSemaphore")
            .field("semaphore", &self.timeline.semaphore)
            .finish()
    }
}

impl DeviceContext {
    /// Orders the work enqueued on this context from now on after
    /// everything enqueued on `other` so far, by blocking the host until
    /// `other`'s work is done. The ordering for contexts on different
    /// `VkDevice`s (two contexts of one physical device sharing memory)
    /// where the device cannot export semaphores
    /// ([`export_semaphore`](Self::export_semaphore) fails): explicit, and
    /// costing a host round trip. Between streams of one device use
    /// [`enqueue_wait_for`](Self::enqueue_wait_for), which does not block.
    pub fn wait_on_host_for(&self, other: &DeviceContext) -> Result<()> {
        if Arc::ptr_eq(&self.shared, &other.shared) {
            return Ok(());
        }
        other.synchronize()
    }

    /// Waits (on the device, in this stream) until `semaphore` reaches
    /// `value`: the work enqueued from now on runs after it.
    pub fn enqueue_wait_semaphore(&self, semaphore: &ExternalSemaphore, value: u64) -> Result<()> {
        if semaphore.timeline.device().id != self.shared.device.id {
            return Err(Error::DifferentDevice {
                op: "DeviceContext::enqueue_wait_semaphore",
                detail: "the semaphore was imported on another device; import it on this context's"
                    .into(),
            });
        }
        if value == 0 || semaphore.timeline.is_complete(value) {
            return Ok(());
        }
        self.shared
            .lock()
            .command(&[], vec![(semaphore.timeline.clone(), value)], false)
            .map(drop)
    }
}

#[cfg(unix)]
impl DeviceContext {
    /// This stream's timeline semaphore as a new opaque fd, with the value
    /// that the work enqueued so far signals (the work is submitted). Another
    /// context or process imports it ([`import_semaphore`](Self::import_semaphore))
    /// and waits for the value on its device. Errors:
    /// [`Error::Unsupported`] where the device has no
    /// `VK_KHR_external_semaphore_fd` or cannot export timeline semaphores
    /// (lavapipe): order the work with `synchronize()` or
    /// [`wait_on_host_for`](Self::wait_on_host_for) instead.
    pub fn export_semaphore(&self) -> Result<ExportedSemaphore> {
        let device = &self.shared.device;
        let Some(fns) = device
            .external
            .semaphore_fd
            .as_ref()
            .filter(|_| device.timeline_exportable())
        else {
            return Err(Error::Unsupported {
                what:
                    "exporting timeline semaphores as opaque fds (VK_KHR_external_semaphore_fd); \
                       order the work on the host with synchronize() or \
                       DeviceContext::wait_on_host_for instead"
                        .into(),
                device: device.name().to_string(),
            });
        };
        self.shared.flush()?;
        let value = self.shared.timeline.submitted();
        let info = vk::SemaphoreGetFdInfoKHR::default()
            .semaphore(self.shared.timeline.semaphore)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
        // SAFETY: the semaphore was created exportable as an opaque fd (the
        // same check as here) and lives while the context does.
        let fd = unsafe { fns.get_semaphore_fd(&info) }.during("vkGetSemaphoreFdKHR")?;
        Ok(ExportedSemaphore {
            // SAFETY: vkGetSemaphoreFdKHR returns a new descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            value,
            device_uuid: device.adapter.info.uuid,
        })
    }

    /// A timeline semaphore over an exported one, for
    /// [`enqueue_wait_semaphore`](Self::enqueue_wait_semaphore). Checked:
    /// the exporter's device UUID ([`Error::ForeignDevice`]), support
    /// ([`Error::Unsupported`]), the descriptor ([`Error::InvalidHandle`]).
    pub fn import_semaphore(&self, exported: ExportedSemaphore) -> Result<ExternalSemaphore> {
        let op = "DeviceContext::import_semaphore";
        let device = &self.shared.device;
        let importable = device.external.enabled.semaphore_fd
            && timeline_semaphore_support(
                &device.instance,
                device.adapter.raw,
                vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD,
            )
            .contains(vk::ExternalSemaphoreFeatureFlags::IMPORTABLE);
        let Some(fns) = device.external.semaphore_fd.as_ref().filter(|_| importable) else {
            return Err(Error::Unsupported {
                what:
                    "importing timeline semaphores from opaque fds (VK_KHR_external_semaphore_fd)"
                        .into(),
                device: device.name().to_string(),
            });
        };
        if exported.device_uuid != device.adapter.info.uuid {
            return Err(Error::ForeignDevice {
                op,
                exporter: hex(&exported.device_uuid),
                importer: hex(&device.adapter.info.uuid),
                device: device.name().to_string(),
            });
        }
        let semaphore = Timeline::create_semaphore(device, device.timeline_exportable())?;
        let info = vk::ImportSemaphoreFdInfoKHR::default()
            .semaphore(semaphore)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD)
            .fd(exported.fd.as_raw_fd());
        // SAFETY: the semaphore is new and unused; the descriptor is open.
        if let Err(e) = unsafe { fns.import_semaphore_fd(&info) } {
            // SAFETY: never used; destroyed once.
            unsafe { device.raw.destroy_semaphore(semaphore, None) };
            return Err(Error::InvalidHandle {
                op,
                handle_type: "semaphore opaque fd",
                detail: format!("vkImportSemaphoreFdKHR returned {e}"),
            });
        }
        // The import succeeded: the semaphore owns the descriptor now.
        let _ = exported.fd.into_raw_fd();
        let timeline = Timeline::new(device.clone(), semaphore);
        // Values are signalled elsewhere: every one counts as submitted.
        timeline.set_submitted(u64::MAX);
        Ok(ExternalSemaphore {
            timeline: Arc::new(timeline),
        })
    }
}
