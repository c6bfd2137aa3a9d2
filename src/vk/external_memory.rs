//! External memory at the Vulkan level: buffers that bind exportable or
//! imported memory, the allocation chain of each kind of memory, the export
//! of memory as handles, and host allocations to import.

#[cfg(unix)]
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::ptr::NonNull;

use ash::vk;

use super::win32::Win32Handle;
use super::Device;
use crate::error::{Error, Result, VkResultExt};

/// Where the memory of an [`ExternalBuffer`] comes from.
pub(crate) enum MemorySource<'a> {
    /// New memory, exportable as these handle types, dedicated to the buffer.
    Export(vk::ExternalMemoryHandleTypeFlags),
    /// A file descriptor of `handle_type`, imported; Vulkan owns it once the
    /// import succeeds, and it is closed when it fails.
    #[cfg(unix)]
    Fd {
        handle_type: vk::ExternalMemoryHandleTypeFlags,
        fd: OwnedFd,
        dedicated: bool,
    },
    /// A Win32 handle of `handle_type`, imported; Vulkan takes no ownership
    /// of it (the caller closes it).
    Win32 {
        handle_type: vk::ExternalMemoryHandleTypeFlags,
        handle: &'a Win32Handle,
        dedicated: bool,
    },
}

/// A `VkBuffer` created to bind external memory, destroyed when dropped
/// unless [`bind`](Self::bind) hands it over with its memory.
pub(crate) struct ExternalBuffer<'d> {
    device: &'d Device,
    buffer: vk::Buffer,
    pub(crate) requirements: vk::MemoryRequirements,
}

impl<'d> ExternalBuffer<'d> {
    /// A buffer of `size` bytes (more than zero) with `usage` that may be
    /// bound to external memory of `handle_types`.
    pub(crate) fn new(
        device: &'d Device,
        size: u64,
        usage: vk::BufferUsageFlags,
        handle_types: vk::ExternalMemoryHandleTypeFlags,
    ) -> Result<Self> {
        let mut external = vk::ExternalMemoryBufferCreateInfo::default().handle_types(handle_types);
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(usage)
            .sharing_mode(vk::SharingMode::EXCLUSIVE)
            .push_next(&mut external);
        // SAFETY: a valid create info with a non-zero size; the callers
        // checked that the device supports the handle types for this usage.
        let buffer = unsafe { device.raw.create_buffer(&info, None) }.during("vkCreateBuffer")?;
        // SAFETY: `buffer` was just created on this device.
        let requirements = unsafe { device.raw.get_buffer_memory_requirements(buffer) };
        Ok(ExternalBuffer {
            device,
            buffer,
            requirements,
        })
    }

    /// Allocates `size` bytes of memory type `type_index` from `source`
    /// for the buffer and binds it at offset 0. The caller owns both
    /// handles from then on (and frees them together). `what` names the
    /// buffer in errors.
    pub(crate) fn bind(
        self,
        source: MemorySource<'_>,
        size: u64,
        type_index: u32,
        what: &str,
    ) -> Result<(vk::Buffer, vk::DeviceMemory)> {
        let buffer = self.buffer;
        let mut flags = vk::MemoryAllocateFlagsInfo::default().flags(allocate_flags(self.device));
        let mut dedicated_info = vk::MemoryDedicatedAllocateInfo::default().buffer(buffer);
        let mut info = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(type_index)
            .push_next(&mut flags);
        let mut export;
        #[cfg(unix)]
        let mut import_fd;
        let mut import_win32;
        #[cfg(unix)]
        let mut owned_fd = None;
        let dedicated = match source {
            MemorySource::Export(types) => {
                export = vk::ExportMemoryAllocateInfo::default().handle_types(types);
                info = info.push_next(&mut export);
                true
            }
            #[cfg(unix)]
            MemorySource::Fd {
                handle_type,
                fd,
                dedicated,
            } => {
                let fd = own_file_description(self.device, handle_type, fd);
                import_fd = vk::ImportMemoryFdInfoKHR::default()
                    .handle_type(handle_type)
                    .fd(fd.as_raw_fd());
                owned_fd = Some(fd);
                info = info.push_next(&mut import_fd);
                dedicated
            }
            MemorySource::Win32 {
                handle_type,
                handle,
                dedicated,
            } => {
                import_win32 = vk::ImportMemoryWin32HandleInfoKHR::default()
                    .handle_type(handle_type)
                    .handle(handle.as_raw());
                info = info.push_next(&mut import_win32);
                dedicated
            }
        };
        if dedicated {
            info = info.push_next(&mut dedicated_info);
        }
        let allocated = self.allocate(&info, what);
        #[cfg(unix)]
        if let Some(fd) = owned_fd {
            if allocated.is_ok() || takes_fd_of_failed_import(self.device) {
                // A successful import owns the descriptor from then on,
                // whether or not binding succeeds below (freeing the memory
                // closes it, where the driver kept it). A refused import
                // leaves it the caller's by the specification, but see
                // `takes_fd_of_failed_import`: there it is left alone (a
                // descriptor leaked where the driver did not close it after
                // all, never one closed twice).
                let _ = fd.into_raw_fd();
            }
        }
        let memory = self.bind_memory(allocated?)?;
        Ok((buffer, memory))
    }

    /// Imports `size` bytes of host memory at `ptr` (of memory type
    /// `type_index`) for the buffer and binds it at offset 0, as
    /// [`bind`](Self::bind) does.
    ///
    /// # Safety
    ///
    /// `ptr` is a live host allocation of at least `size` bytes, aligned as
    /// `minImportedHostPointerAlignment` requires, that outlives the memory
    /// (it is freed only after the memory is).
    pub(crate) unsafe fn bind_host(
        self,
        ptr: NonNull<u8>,
        size: u64,
        type_index: u32,
        what: &str,
    ) -> Result<(vk::Buffer, vk::DeviceMemory)> {
        let buffer = self.buffer;
        let mut import = vk::ImportMemoryHostPointerInfoEXT::default()
            .handle_type(vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT)
            .host_pointer(ptr.as_ptr().cast());
        let mut flags = vk::MemoryAllocateFlagsInfo::default().flags(allocate_flags(self.device));
        let info = vk::MemoryAllocateInfo::default()
            .allocation_size(size)
            .memory_type_index(type_index)
            .push_next(&mut import)
            .push_next(&mut flags);
        let memory = self.allocate(&info, what)?;
        let memory = self.bind_memory(memory)?;
        Ok((buffer, memory))
    }

    /// Allocates `info` (of `what`) on the buffer's device.
    fn allocate(&self, info: &vk::MemoryAllocateInfo<'_>, what: &str) -> Result<vk::DeviceMemory> {
        let device = self.device;
        // SAFETY: `info` is valid for this device (the callers checked its
        // chain against the external-memory properties); a host pointer in
        // it is valid as `bind_host`'s caller guarantees.
        unsafe { device.raw.allocate_memory(info, None) }.map_err(|e| match e {
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                Error::OutOfMemory {
                    what: what.to_string(),
                    bytes: info.allocation_size,
                    detail: format!("vkAllocateMemory returned {e}"),
                }
            }
            e => Error::vk("vkAllocateMemory", e),
        })
    }

    /// Binds `memory` (allocated for this buffer by [`allocate`](Self::allocate))
    /// at offset 0; on success the buffer is the caller's (not destroyed
    /// when `self` drops), on failure the memory is freed.
    fn bind_memory(mut self, memory: vk::DeviceMemory) -> Result<vk::DeviceMemory> {
        let device = self.device;
        // SAFETY: the memory was allocated for this buffer (dedicated, or
        // of a size and type its requirements allow); bound once, at 0.
        if let Err(e) = unsafe { device.raw.bind_buffer_memory(self.buffer, memory, 0) } {
            // SAFETY: the memory is unused; freed once (the buffer goes
            // when `self` drops).
            unsafe { device.raw.free_memory(memory, None) };
            return Err(Error::vk("vkBindBufferMemory", e));
        }
        self.buffer = vk::Buffer::null();
        Ok(memory)
    }
}

impl Drop for ExternalBuffer<'_> {
    fn drop(&mut self) {
        if self.buffer != vk::Buffer::null() {
            // SAFETY: the buffer was never bound or used; destroyed once.
            unsafe { self.device.raw.destroy_buffer(self.buffer, None) };
        }
    }
}

/// Driver workaround: whether `device`'s driver closes the descriptor of
/// an opaque-fd or dma-buf import that it refuses. The specification
/// leaves the descriptor of a failed import to the application, but
/// lavapipe (Mesa 22.3 and 25.0, measured: `tests/sharing.rs`) closes it
/// when the memory it names is smaller than asked for or is not its own;
/// closing it again could close another thread's descriptor that took the
/// number meanwhile (and aborts debug builds: "IO Safety violation").
#[cfg(unix)]
fn takes_fd_of_failed_import(device: &Device) -> bool {
    device.adapter.driver_id == vk::DriverId::MESA_LLVMPIPE
}

/// Driver workaround: `fd` itself, or where `device`'s driver reads an
/// opaque fd's header through the descriptor's file offset (lavapipe:
/// `lseek` to 0, then `read`), a new descriptor of the same file with an
/// open file description of its own. Every descriptor of one export shares
/// one description, hence one offset, across threads and processes, so two
/// imports of one export at once (ranks of one node importing a peer's
/// memory) can read the header from the wrong place and be refused
/// (`tests/sharing.rs`: two_threads_importing_one_export_at_once). Only
/// regular files (lavapipe's memfds) are reopened, through
/// `/proc/self/fd`; where that fails the import goes on with `fd`.
#[cfg(unix)]
fn own_file_description(
    device: &Device,
    handle_type: vk::ExternalMemoryHandleTypeFlags,
    fd: OwnedFd,
) -> OwnedFd {
    if device.adapter.driver_id != vk::DriverId::MESA_LLVMPIPE
        || handle_type != vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD
    {
        return fd;
    }
    let file = std::fs::File::from(fd);
    if !file.metadata().is_ok_and(|m| m.is_file()) {
        return file.into();
    }
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    match std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
    {
        // The received descriptor closes here: the new one names the same memory.
        Ok(reopened) => reopened.into(),
        Err(_) => file.into(),
    }
}

/// `vkAllocateMemory` flags every buffer memory of `device` needs.
fn allocate_flags(device: &Device) -> vk::MemoryAllocateFlags {
    if device.buffer_device_address() {
        vk::MemoryAllocateFlags::DEVICE_ADDRESS
    } else {
        vk::MemoryAllocateFlags::empty()
    }
}

/// A new file descriptor of `memory` (of `device`, allocated exportable as
/// `handle_type` by vkcompute and alive during the call).
#[cfg(unix)]
pub(crate) fn export_memory_fd(
    device: &Device,
    memory: vk::DeviceMemory,
    handle_type: vk::ExternalMemoryHandleTypeFlags,
) -> Result<OwnedFd> {
    let Some(fns) = &device.external.memory_fd else {
        return Err(Error::vk(
            "vkGetMemoryFdKHR",
            vk::Result::ERROR_EXTENSION_NOT_PRESENT,
        ));
    };
    let info = vk::MemoryGetFdInfoKHR::default()
        .memory(memory)
        .handle_type(handle_type);
    // SAFETY: the extension is enabled; the memory was allocated exportable
    // as this handle type and lives during the call (the caller's contract).
    let fd = unsafe { fns.get_memory_fd(&info) }.during("vkGetMemoryFdKHR")?;
    // SAFETY: vkGetMemoryFdKHR returns a new descriptor that the caller owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new Win32 handle of `memory`, as [`export_memory_fd`].
pub(crate) fn export_memory_win32(
    device: &Device,
    memory: vk::DeviceMemory,
    handle_type: vk::ExternalMemoryHandleTypeFlags,
) -> Result<Win32Handle> {
    let Some(fns) = &device.external.memory_win32 else {
        return Err(Error::vk(
            "vkGetMemoryWin32HandleKHR",
            vk::Result::ERROR_EXTENSION_NOT_PRESENT,
        ));
    };
    let info = vk::MemoryGetWin32HandleInfoKHR::default()
        .memory(memory)
        .handle_type(handle_type);
    // SAFETY: the extension is enabled; the memory was allocated exportable
    // as this (NT) handle type and lives during the call.
    let handle =
        unsafe { fns.get_memory_win32_handle(&info) }.during("vkGetMemoryWin32HandleKHR")?;
    // SAFETY: an OPAQUE_WIN32 export is a new NT handle that the caller owns.
    Ok(unsafe { Win32Handle::from_raw(handle) })
}

/// The memory types `fd` (a descriptor of `handle_type`, not OPAQUE_FD)
/// may be imported as.
#[cfg(unix)]
pub(crate) fn fd_memory_types(
    device: &Device,
    handle_type: vk::ExternalMemoryHandleTypeFlags,
    fd: &OwnedFd,
) -> std::result::Result<u32, vk::Result> {
    let Some(fns) = &device.external.memory_fd else {
        return Err(vk::Result::ERROR_EXTENSION_NOT_PRESENT);
    };
    let mut props = vk::MemoryFdPropertiesKHR::default();
    if handle_type == vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD {
        return Err(vk::Result::ERROR_INVALID_EXTERNAL_HANDLE);
    }
    // SAFETY: the extension is enabled; `fd` is an open descriptor; the
    // handle type is not OPAQUE_FD (refused above, as the call requires).
    unsafe { fns.get_memory_fd_properties(handle_type, fd.as_raw_fd(), &mut props) }?;
    Ok(props.memory_type_bits)
}

/// The memory types the host memory at `ptr` may be imported as
/// (`VK_EXT_external_memory_host`, enabled on `device`).
pub(crate) fn host_memory_types(device: &Device, ptr: NonNull<u8>) -> Result<u32> {
    let Some(fns) = &device.external.host else {
        return Err(Error::vk(
            "vkGetMemoryHostPointerPropertiesEXT",
            vk::Result::ERROR_EXTENSION_NOT_PRESENT,
        ));
    };
    let mut props = vk::MemoryHostPointerPropertiesEXT::default();
    // SAFETY: the extension is enabled; the pointer addresses a live host
    // allocation (the caller's to keep alive through the call).
    unsafe {
        (fns.fp().get_memory_host_pointer_properties_ext)(
            device.raw.handle(),
            vk::ExternalMemoryHandleTypeFlags::HOST_ALLOCATION_EXT,
            ptr.as_ptr().cast(),
            &mut props,
        )
    }
    .result()
    .during("vkGetMemoryHostPointerPropertiesEXT")?;
    Ok(props.memory_type_bits)
}

/// A zeroed host allocation made with `std::alloc`, freed when dropped.
pub(crate) struct HostAllocation {
    pub(crate) ptr: NonNull<u8>,
    pub(crate) layout: std::alloc::Layout,
}

// SAFETY: the allocation is plain memory owned by this value alone; it is
// only read or written under the rules of the buffer that owns it.
unsafe impl Send for HostAllocation {}
// SAFETY: shared access only reads through `bytes`; writes need `&mut`
// (or the owning buffer's host-access rules).
unsafe impl Sync for HostAllocation {}

impl HostAllocation {
    /// `layout.size()` zeroed bytes (more than zero) at `layout.align()`,
    /// or `None` where the allocator refuses.
    pub(crate) fn zeroed(layout: std::alloc::Layout) -> Option<Self> {
        if layout.size() == 0 {
            return None;
        }
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { std::alloc::alloc_zeroed(layout) })?;
        Some(HostAllocation { ptr, layout })
    }

    /// The allocation's bytes.
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `layout.size()` initialised (zeroed, then written as
        // bytes) bytes owned by `self`; shared access while `&self` lives.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.layout.size()) }
    }

    /// The allocation's bytes, for writing.
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` makes the access exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.layout.size()) }
    }
}

impl Drop for HostAllocation {
    fn drop(&mut self) {
        // SAFETY: `ptr` was allocated with `layout` by `std::alloc` and is
        // freed once, here (after the device memory over it was freed).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) };
    }
}
