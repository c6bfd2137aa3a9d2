//! Host memory imported without copies (`VK_EXT_external_memory_host`).

use std::marker::PhantomData;
use std::mem::size_of;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;

use ash::vk;
use bytemuck::Pod;

use super::byte_size;
use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::interop::is_coherent;
use crate::resource::BufferMemory;
use crate::view::{dtype_name, View};
use crate::vk::memory::{
    buffer_usage, check_host_import, check_size, Dedicated, DedicatedKind, HostAllocation,
    RawBuffer,
};
use crate::vk::{buffer_support, host_memory_types, ExternalBuffer, MemoryUsage};

/// Sharing memory and semaphores with other devices, processes and APIs.
impl DeviceContext {
    /// The alignment (of address and size) that host memory imported with
    /// [`import_host_memory`](Self::import_host_memory) needs
    /// (`minImportedHostPointerAlignment`), or `None` where the device
    /// cannot import host memory (`VK_EXT_external_memory_host`).
    pub fn host_import_alignment(&self) -> Option<usize> {
        let device = &self.stream.device;
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
        let len = memory.len;
        let what = format!(
            "HostBuffer[{}] of {len} imported elements",
            dtype_name::<T>()
        );
        let bytes = byte_size::<T>(&what, len)?;
        let alloc = memory.into_allocation();
        let (ptr, size) = (alloc.ptr, alloc.layout.size() as u64);
        // SAFETY: `alloc` is a live allocation of `size` bytes; it moves into
        // the buffer's `DedicatedKind::Host`, which frees it only after the
        // memory.
        #[allow(
            unsafe_code,
            reason = "the import of a host allocation whose lifetime this function ties to the memory"
        )]
        let view = unsafe {
            self.import_host_pointer(op, (ptr, size, bytes), DedicatedKind::Host(alloc), &what)
        }?;
        Ok(HostBuffer::from_view(view, len))
    }

    /// A device buffer over `len` bytes of host memory that the caller
    /// mapped, without copying: memory shared with another process (both
    /// map one `memfd`, say), which that process's device imports too.
    /// The buffer is never mapped for the host: host transfers of it are
    /// staged, like those of imported device memory, so no Rust reference
    /// to the memory is ever made here. `keep` keeps the mapping alive (it
    /// unmaps in its `Drop`, say); vkcompute drops it only after the last
    /// clone of the buffer is gone and the device is done with the
    /// memory. [`DeviceBuffer::enqueue_release_to_external`] and
    /// [`enqueue_acquire_from_external`](DeviceBuffer::enqueue_acquire_from_external)
    /// apply to it as barriers with the host (not queue family transfers,
    /// which hold only between queues of one device and driver): a release
    /// makes the device's writes available in host memory, where another
    /// process's device reads them once this context's work is done
    /// (`synchronize()`); an acquire makes what was written there visible
    /// to the work after it, once the writer's work is done (ordered
    /// through the host: a wait for its fence, then a message).
    ///
    /// Errors: [`Error::Unsupported`] without
    /// `VK_EXT_external_memory_host` (or where the device refuses buffers
    /// over host memory); [`Error::Misaligned`] where `ptr` or `len` is not
    /// a multiple of [`host_import_alignment`](Self::host_import_alignment);
    /// [`Error::InvalidHandle`] for an empty mapping; [`Error::TooLarge`]
    /// past the device's `maxBufferSize`, `maxMemoryAllocationSize` or
    /// heap; [`Error::ImportSize`] where the buffer needs more memory than
    /// `len`; [`Error::OutOfMemory`] where the driver runs out, and
    /// [`Error::Vulkan`] where it refuses the pointer
    /// (`VK_ERROR_INVALID_EXTERNAL_HANDLE`: memory of a kind it cannot
    /// import, file-backed memory on some drivers). On error `keep` is
    /// dropped.
    ///
    /// # Safety
    ///
    /// `ptr` must address `len` bytes mapped readable and writable in this
    /// process, which stay mapped with that protection (no `munmap` or
    /// `mprotect`), backed by memory or a file that does not shrink (a
    /// `memfd` sealed against shrinking, say) and whose pages nothing
    /// removes (no hole punched in it), until `keep` is dropped. Nothing
    /// in this process may reach them while the buffer lives but through
    /// the buffer (no reference to them is held elsewhere). Another process may write them at any time: the device
    /// then reads whatever bytes are there, as with memory another device
    /// writes (see the module's soundness note).
    #[allow(
        unsafe_code,
        reason = "a public raw entry point: the caller answers for the mapping"
    )]
    pub unsafe fn import_host_mapping(
        &self,
        ptr: NonNull<u8>,
        len: usize,
        keep: Box<dyn std::any::Any + Send + Sync>,
    ) -> Result<DeviceBuffer<u8>> {
        let op = "DeviceContext::import_host_mapping";
        let what = format!("DeviceBuffer[u8] of {len} imported mapped bytes");
        let bytes = byte_size::<u8>(&what, len)?;
        if len == 0 {
            return Err(Error::InvalidHandle {
                op,
                handle_type: "HOST_ALLOCATION",
                detail: "an empty mapping".into(),
            });
        }
        // SAFETY: the caller guarantees `ptr..ptr + len` is mapped until
        // `keep` drops; `keep` moves into the buffer's
        // `DedicatedKind::Mapping`, dropped only after the memory, which
        // is not mapped for the host (see `import_host_pointer`).
        let kind = DedicatedKind::Mapping(keep);
        let view = unsafe { self.import_host_pointer(op, (ptr, bytes, bytes), kind, &what) }?;
        Ok(DeviceBuffer::from_view(view, len))
    }

    /// Imports the `size` bytes at `ptr` into a buffer, `kind` holding
    /// whatever keeps them alive, and returns a view of its first `bytes`.
    /// The host reaches the memory through the buffer's mapping only for
    /// `DedicatedKind::Host` (an allocation vkcompute made). On error
    /// `kind` is dropped.
    ///
    /// # Safety
    ///
    /// `ptr..ptr + size` stays allocated and mapped until `kind` drops.
    #[allow(
        unsafe_code,
        reason = "the import of host memory whose lifetime the caller ties to `kind`"
    )]
    unsafe fn import_host_pointer(
        &self,
        op: &'static str,
        (ptr, size, bytes): (NonNull<u8>, u64, u64),
        kind: DedicatedKind,
        what: &str,
    ) -> Result<View> {
        let device = &self.stream.device;
        let unsupported = |what: &str| Error::Unsupported {
            what: what.to_string(),
            device: device.name().to_string(),
        };
        if !device.external.enabled.host {
            return Err(unsupported(
                "importing host memory (VK_EXT_external_memory_host)",
            ));
        }
        let align = device.adapter.min_imported_host_pointer_alignment.max(1);
        let address = ptr.as_ptr() as u64;
        for (value, name) in [(address, "address"), (size, "size")] {
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
        // The device's limits on buffers and allocations hold for imports
        // too (a driver may take an import past its heap and fail later).
        check_size(device, size, what)?;
        let host_types = host_memory_types(device, ptr)?;
        let buffer = ExternalBuffer::new(device, size, buffer_usage(device), handle)?;
        let requirements = buffer.requirements;
        let allowed = requirements.memory_type_bits & host_types;
        let type_index = device.memory_type(allowed, MemoryUsage::Readback);
        if let Some(index) = type_index {
            check_host_import(device, index, size.max(requirements.size), what)?;
        }
        let Some(type_index) = type_index.filter(|_| requirements.size <= size) else {
            return Err(if requirements.size > size {
                Error::ImportSize {
                    op,
                    needed: requirements.size,
                    available: size,
                }
            } else {
                unsupported("a memory type for this host allocation")
            });
        };
        // SAFETY: `ptr` addresses `size` live bytes, aligned as the device
        // requires (checked above), until `kind` drops (the caller's
        // guarantee); `kind` goes into the buffer's memory, dropped after it.
        let (buffer, vk_memory) = unsafe { buffer.bind_host(ptr, size, type_index, what) }?;
        let mapped = matches!(kind, DedicatedKind::Host(_)).then_some(ptr);
        let raw = RawBuffer::dedicated(
            buffer,
            Dedicated {
                memory: vk_memory,
                size,
                offset: 0,
                memory_type_index: type_index,
                kind,
            },
            size,
            MemoryUsage::Readback,
            mapped,
            is_coherent(device, type_index),
        );
        Ok(View {
            memory: BufferMemory::from_raw(&self.stream, Some(raw), bytes),
            offset: 0,
            bytes,
        })
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
        let alloc = HostAllocation::zeroed(layout).ok_or_else(|| Error::OutOfMemory {
            what: what.clone(),
            bytes: size as u64,
            detail: "the host allocator refused".into(),
        })?;
        Ok(AlignedHostMemory {
            alloc,
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
        // The allocation holds at least `len` elements, at an address
        // aligned for `T` (`with_alignment` checked it): the cast cannot fail.
        bytemuck::cast_slice(&self.alloc.bytes()[..self.len * size_of::<T>()])
    }
}

impl<T: Pod> DerefMut for AlignedHostMemory<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // As in `deref`.
        bytemuck::cast_slice_mut(&mut self.alloc.bytes_mut()[..self.len * size_of::<T>()])
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
