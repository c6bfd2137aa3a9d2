//! Host memory imported without copies (`VK_EXT_external_memory_host`).

use std::marker::PhantomData;
use std::mem::size_of;
use std::ops::{Deref, DerefMut};

use ash::vk;
use bytemuck::Pod;

use super::byte_size;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::host::HostBuffer;
use crate::interop::is_coherent;
use crate::resource::BufferMemory;
use crate::view::{dtype_name, View};
use crate::vk::memory::{buffer_usage, Dedicated, DedicatedKind, HostAllocation, RawBuffer};
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
        let host_types = host_memory_types(device, &alloc)?;
        let buffer = ExternalBuffer::new(device, alloc_size, buffer_usage(device), handle)?;
        let requirements = buffer.requirements;
        let allowed = requirements.memory_type_bits & host_types;
        let type_index = device.memory_type(allowed, MemoryUsage::Readback);
        let Some(type_index) = type_index.filter(|_| requirements.size <= alloc_size) else {
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
        // SAFETY: `alloc` is a live allocation of `alloc_size` bytes, aligned
        // as the device requires (checked above); it moves into the buffer's
        // `DedicatedKind::Host` below, which frees it only after the memory.
        #[allow(
            unsafe_code,
            reason = "the import of a host allocation whose lifetime this function ties to the memory"
        )]
        let (buffer, vk_memory) =
            unsafe { buffer.bind_host(alloc.ptr, alloc_size, type_index, &what) }?;
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
        let memory = BufferMemory::from_raw(&self.stream, Some(raw), bytes);
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
