//! Buffers with memory: creation through gpu-allocator, mapping, and the
//! cache maintenance that non-coherent memory needs.

use std::collections::HashMap;
use std::ptr::NonNull;

use ash::vk;
use gpu_allocator::vulkan::{Allocation, AllocationCreateDesc, AllocationScheme};
use gpu_allocator::{AllocationError, MemoryLocation};

use super::sizes::{allocation_error, buffer_call_error};
pub(crate) use super::sizes::{check_allocation, check_host_import, check_size};
use crate::error::{Error, Result, VkResultExt};
pub(crate) use crate::vk::HostAllocation;
use crate::vk::{Device, MemoryUsage};

/// The host address of mapped memory.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MappedPtr(NonNull<u8>);

// SAFETY: the pointer is an address in a persistent mapping owned by the
// allocator; it is only dereferenced under the rules of the buffer that owns
// the allocation (which decide who may read or write, and when), so moving
// or sharing the address itself between threads is harmless.
unsafe impl Send for MappedPtr {}
// SAFETY: as above.
unsafe impl Sync for MappedPtr {}

impl MappedPtr {
    pub(crate) fn as_ptr(self) -> *mut u8 {
        self.0.as_ptr()
    }
}

/// `len` bytes of mapped memory, for the host's copies in and out.
///
/// Every access is bounds-checked here. Its users make sure, as the
/// layers above are built to, that no device work writes the range while
/// the host reads it (or touches it while the host writes it) and that no
/// other host thread writes it meanwhile: a stream's staging memory is
/// only touched under the stream's lock, before the batch that uses it is
/// submitted or after it completed; a buffer's own memory only under its
/// use state, which excludes conflicting device work and host borrows.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MappedRange {
    ptr: MappedPtr,
    len: usize,
}

impl MappedRange {
    /// The host address of the first byte.
    pub(crate) fn as_ptr(self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// The `len` bytes at `offset` of this range.
    pub(crate) fn sub(self, offset: usize, len: usize) -> MappedRange {
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.len),
            "mapped range {offset}+{len} outside {} bytes",
            self.len
        );
        // SAFETY: `offset` lies inside the mapping (checked above).
        let ptr = unsafe { NonNull::new_unchecked(self.as_ptr().add(offset)) };
        MappedRange {
            ptr: MappedPtr(ptr),
            len,
        }
    }

    /// Copies `src` into the range's first `src.len()` bytes.
    pub(crate) fn write(self, src: &[u8]) {
        let dst = self.sub(0, src.len());
        // SAFETY: `dst` is `src.len()` mapped bytes (bounds checked by
        // `sub`) that nothing else touches meanwhile (the type's contract);
        // `src` is host memory, so the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_ptr(), src.len()) };
    }

    /// Copies the range's first `dst.len()` bytes into `dst`.
    pub(crate) fn read(self, dst: &mut [u8]) {
        let src = self.sub(0, dst.len());
        // SAFETY: `src` is `dst.len()` mapped bytes (bounds checked by
        // `sub`) that nothing writes meanwhile (the type's contract); `dst`
        // is host memory of the caller's, so the two do not overlap.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), dst.len()) };
    }

    /// Fills the whole range with copies of `pattern` (the last one cut
    /// short where the range is not a whole number of them).
    pub(crate) fn fill(self, pattern: &[u8]) {
        assert!(!pattern.is_empty(), "an empty fill pattern");
        let mut at = 0;
        while at < self.len {
            let n = pattern.len().min(self.len - at);
            self.sub(at, n).write(&pattern[..n]);
            at += n;
        }
    }

    /// Copies the range into `dst`, which the caller vouched for.
    pub(crate) fn read_into(self, dst: &RawDestination) {
        let src = self.sub(0, dst.len);
        // SAFETY: `src` is `dst.len` mapped bytes that nothing writes
        // meanwhile; `dst` is valid for `dst.len` bytes of writes and
        // untouched by others (`RawDestination::new`'s contract), and is
        // not mapped memory of this range.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst.ptr, dst.len) };
    }
}

/// Caller memory that receives a download when its copy completes,
/// possibly on another thread: the one raw destination vkcompute writes to.
pub(crate) struct RawDestination {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: `RawDestination::new`'s caller guarantees the memory stays valid
// and untouched until the copy into it is done, on whichever thread.
unsafe impl Send for RawDestination {}

impl RawDestination {
    /// The `len` bytes at `ptr`.
    ///
    /// # Safety
    ///
    /// `ptr` must be valid for `len` bytes of writes until the copy into
    /// it has run (or the destination was dropped without it), and nothing
    /// else may read or write those bytes until then.
    pub(crate) unsafe fn new(ptr: *mut u8, len: usize) -> Self {
        RawDestination { ptr, len }
    }

    /// Bytes the destination takes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Its first `at` bytes (at most its length), and the rest where any
    /// is left: two destinations that do not overlap.
    pub(crate) fn split_at(self, at: usize) -> (RawDestination, Option<RawDestination>) {
        let at = at.min(self.len);
        let first = RawDestination {
            ptr: self.ptr,
            len: at,
        };
        let rest = (at < self.len).then(|| RawDestination {
            // In bounds: `at < len`, inside the memory `new` vouched for.
            ptr: self.ptr.wrapping_add(at),
            len: self.len - at,
        });
        (first, rest)
    }
}

/// The memory behind a [`RawBuffer`].
pub(crate) enum Backing {
    /// A block of gpu-allocator's.
    Allocator(Allocation),
    /// A `VkDeviceMemory` of its own (exportable, imported, or over host
    /// memory), freed with the buffer and never reused for another.
    Dedicated(Dedicated),
}

/// A `VkDeviceMemory` of one buffer's own.
pub(crate) struct Dedicated {
    pub(crate) memory: vk::DeviceMemory,
    /// The allocation size.
    pub(crate) size: u64,
    /// Where the buffer is bound in it.
    pub(crate) offset: u64,
    pub(crate) memory_type_index: u32,
    pub(crate) kind: DedicatedKind,
}

/// Where dedicated memory comes from.
pub(crate) enum DedicatedKind {
    /// Allocated here, exportable as these handle types; the links drop
    /// (and the aliases other devices keep of it go) with the memory.
    Exportable(vk::ExternalMemoryHandleTypeFlags, crate::vk::AliasLinks),
    /// Imported from a handle (which the memory now holds).
    Imported,
    /// Imported from a host allocation, held here and freed (dropped)
    /// after the memory.
    Host(#[allow(dead_code)] HostAllocation),
    /// Imported from a host mapping the caller made
    /// (`DeviceContext::import_host_mapping`); what keeps it mapped is
    /// held here and dropped after the memory.
    Mapping(#[allow(dead_code)] Box<dyn std::any::Any + Send + Sync>),
}

impl Backing {
    fn size(&self) -> u64 {
        match self {
            Backing::Allocator(a) => a.size(),
            Backing::Dedicated(d) => d.size,
        }
    }
}

/// The usage every buffer of `device` is created with.
pub(crate) fn buffer_usage(device: &Device) -> vk::BufferUsageFlags {
    let mut usage_flags = vk::BufferUsageFlags::TRANSFER_SRC
        | vk::BufferUsageFlags::TRANSFER_DST
        | vk::BufferUsageFlags::STORAGE_BUFFER
        | vk::BufferUsageFlags::UNIFORM_BUFFER
        | vk::BufferUsageFlags::INDIRECT_BUFFER;
    if device.buffer_device_address() {
        usage_flags |= vk::BufferUsageFlags::SHADER_DEVICE_ADDRESS;
    }
    usage_flags
}

/// A `VkBuffer` bound to memory of its own.
pub(crate) struct RawBuffer {
    pub(crate) buffer: vk::Buffer,
    backing: Backing,
    /// What the memory was chosen for.
    pub(crate) usage: MemoryUsage,
    /// The size the `VkBuffer` was created with.
    pub(crate) size: u64,
    /// Where the memory is mapped, when it is host visible.
    pub(crate) mapped: Option<MappedPtr>,
    /// Whether host access needs no flush or invalidate.
    pub(crate) coherent: bool,
}

impl RawBuffer {
    /// A buffer of `size` bytes (more than zero) for `usage`, named `what`
    /// in errors: a retired one of the same size and usage from the device's
    /// cache where there is one, else a new one.
    pub(crate) fn new(device: &Device, size: u64, usage: MemoryUsage, what: &str) -> Result<Self> {
        device.check_alive("vkAllocateMemory")?;
        if let Some(raw) = device.buffer_cache().take(size, usage) {
            return Ok(raw);
        }
        match Self::create(device, size, usage, what) {
            // Memory held by the cache is memory the caller may have instead.
            Err(Error::OutOfMemory { .. }) if !device.buffer_cache().is_empty() => {
                device.release_cached_buffers();
                Self::create(device, size, usage, what)
            }
            other => other,
        }
    }

    /// Creates a new buffer (see [`new`](Self::new)).
    fn create(device: &Device, size: u64, usage: MemoryUsage, what: &str) -> Result<Self> {
        debug_assert!(size > 0);
        check_size(device, size, what)?;
        let info = vk::BufferCreateInfo::default()
            .size(size)
            .usage(buffer_usage(device))
            .sharing_mode(vk::SharingMode::EXCLUSIVE);
        let buffer = super::fault::allocation(device)
            .and_then(|()| {
                // SAFETY: a valid create info with a non-zero size within the limits.
                unsafe { device.raw.create_buffer(&info, None) }
            })
            .map_err(|e| buffer_call_error(what, size, "vkCreateBuffer", e))?;
        // SAFETY: `buffer` was just created on this device.
        let mut requirements = unsafe { device.raw.get_buffer_memory_requirements(buffer) };
        let Some(type_index) = device.memory_type(requirements.memory_type_bits, usage) else {
            // SAFETY: the buffer is unused and destroyed once.
            unsafe { device.raw.destroy_buffer(buffer, None) };
            return Err(Error::Allocation {
                what: what.to_string(),
                detail: format!(
                    "no memory type suits {usage:?} buffers (allowed types {:#b})",
                    requirements.memory_type_bits
                ),
            });
        };
        if let Err(e) = check_allocation(device, type_index, requirements.size, what) {
            // SAFETY: the buffer is unused and destroyed once.
            unsafe { device.raw.destroy_buffer(buffer, None) };
            return Err(e);
        }
        // Choose the memory type here (gpu-allocator's locations cannot say
        // "cached system memory" or "write-combined, not device-local").
        requirements.memory_type_bits = 1 << type_index;
        let allocated = match super::fault::allocation(device) {
            Err(_) => Err(AllocationError::OutOfMemory),
            Ok(()) => device.allocator().allocate(&AllocationCreateDesc {
                name: what,
                requirements,
                location: MemoryLocation::Unknown,
                linear: true,
                allocation_scheme: AllocationScheme::GpuAllocatorManaged,
            }),
        };
        let allocation = match allocated {
            Ok(a) => a,
            Err(e) => {
                // SAFETY: the buffer is unused and destroyed once.
                unsafe { device.raw.destroy_buffer(buffer, None) };
                return Err(allocation_error(device, what, size, e));
            }
        };
        let bound = super::fault::allocation(device).and_then(|()| {
            // SAFETY: the allocation is at least `requirements.size` bytes of a
            // memory type the buffer allows, at an offset aligned as required.
            unsafe {
                device
                    .raw
                    .bind_buffer_memory(buffer, allocation.memory(), allocation.offset())
            }
        });
        let raw = RawBuffer {
            buffer,
            usage,
            mapped: allocation.mapped_ptr().map(|p| MappedPtr(p.cast())),
            coherent: allocation
                .memory_properties()
                .contains(vk::MemoryPropertyFlags::HOST_COHERENT),
            backing: Backing::Allocator(allocation),
            size,
        };
        if let Err(e) = bound {
            raw.destroy(device);
            return Err(buffer_call_error(what, size, "vkBindBufferMemory", e));
        }
        Ok(raw)
    }

    /// A buffer over dedicated memory, bound already; `mapped` is the host
    /// address of its first byte where the host may reach it.
    pub(crate) fn dedicated(
        buffer: vk::Buffer,
        memory: Dedicated,
        size: u64,
        usage: MemoryUsage,
        mapped: Option<NonNull<u8>>,
        coherent: bool,
    ) -> Self {
        RawBuffer {
            buffer,
            backing: Backing::Dedicated(memory),
            usage,
            size,
            mapped: mapped.map(MappedPtr),
            coherent,
        }
    }

    /// The dedicated memory behind the buffer, where it has its own.
    pub(crate) fn dedicated_memory(&self) -> Option<&Dedicated> {
        match &self.backing {
            Backing::Dedicated(d) => Some(d),
            Backing::Allocator(_) => None,
        }
    }

    /// Destroys the buffer and frees its memory. The caller guarantees that
    /// no submitted work still uses it.
    pub(crate) fn destroy(self, device: &Device) {
        // SAFETY: the caller guarantees the buffer is no longer in use; it is
        // destroyed once since `self` is consumed.
        unsafe { device.raw.destroy_buffer(self.buffer, None) };
        match self.backing {
            // gpu-allocator only fails here on its own internal inconsistency;
            // there is nothing a caller could do about that.
            Backing::Allocator(allocation) => {
                let _ = device.allocator().free(allocation);
            }
            Backing::Dedicated(d) => {
                // SAFETY: the memory is this buffer's alone and no longer in
                // use; freed once. A host allocation under it (in `d.kind`)
                // is released after this, when `d` drops.
                unsafe { device.raw.free_memory(d.memory, None) };
                if let DedicatedKind::Exportable(..) = d.kind {
                    let _ = device.exportable_bytes.fetch_update(
                        std::sync::atomic::Ordering::AcqRel,
                        std::sync::atomic::Ordering::Acquire,
                        |v| Some(v.saturating_sub(d.size)),
                    );
                }
            }
        }
    }

    /// The buffer's device address (needs `bufferDeviceAddress`).
    /// The `len` bytes at `offset`, where the buffer is mapped; `None`
    /// where it is not.
    pub(crate) fn mapped_range(&self, offset: u64, len: u64) -> Option<MappedRange> {
        let mapped = self.mapped?;
        assert!(
            offset.checked_add(len).is_some_and(|end| end <= self.size),
            "mapped range {offset}+{len} outside a buffer of {} bytes",
            self.size
        );
        Some(
            MappedRange {
                ptr: mapped,
                len: self.size as usize,
            }
            .sub(offset as usize, len as usize),
        )
    }

    pub(crate) fn device_address(&self, device: &Device) -> Option<u64> {
        device.buffer_device_address().then(|| {
            let info = vk::BufferDeviceAddressInfo::default().buffer(self.buffer);
            // SAFETY: the buffer was created with SHADER_DEVICE_ADDRESS usage.
            unsafe { device.raw.get_buffer_device_address(&info) }
        })
    }

    /// The device memory and the offset of the buffer in it.
    pub(crate) fn memory(&self) -> (vk::DeviceMemory, u64) {
        match &self.backing {
            // SAFETY: reading the handle; it is not freed while `self` lives.
            Backing::Allocator(a) => (unsafe { a.memory() }, a.offset()),
            Backing::Dedicated(d) => (d.memory, d.offset),
        }
    }

    /// Makes host writes to `offset..offset+len` visible to the device, where
    /// the memory is not coherent.
    pub(crate) fn flush_host_writes(&self, device: &Device, offset: u64, len: u64) -> Result<()> {
        if self.coherent || len == 0 {
            return Ok(());
        }
        let range = self.atom_range(device, offset, len);
        // SAFETY: the range lies inside this allocation's mapped memory.
        unsafe { device.raw.flush_mapped_memory_ranges(&[range]) }
            .during("vkFlushMappedMemoryRanges")
    }

    /// Makes device writes to `offset..offset+len` visible to the host, where
    /// the memory is not coherent.
    pub(crate) fn invalidate_for_host_reads(
        &self,
        device: &Device,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        if self.coherent || len == 0 {
            return Ok(());
        }
        let range = self.atom_range(device, offset, len);
        // SAFETY: the range lies inside this allocation's mapped memory.
        unsafe { device.raw.invalidate_mapped_memory_ranges(&[range]) }
            .during("vkInvalidateMappedMemoryRanges")
    }

    /// `offset..offset+len` of the buffer widened to `nonCoherentAtomSize`
    /// within its allocation.
    fn atom_range(&self, device: &Device, offset: u64, len: u64) -> vk::MappedMemoryRange<'static> {
        let atom = device.limits().non_coherent_atom_size.max(1);
        let (memory, base) = self.memory();
        let start = (base + offset) / atom * atom;
        let end = (base + offset + len).div_ceil(atom) * atom;
        // The block is a multiple of the atom size, or the range reaches its
        // end: clamp to the allocation's own end rounded up, which stays in the block.
        let alloc_end = (base + self.backing.size()).div_ceil(atom) * atom;
        vk::MappedMemoryRange::default()
            .memory(memory)
            .offset(start)
            .size(end.min(alloc_end) - start)
    }
}

/// Buffers whose last use has passed, kept for reuse by buffers of the same
/// size and usage, so that a loop that creates and drops buffers does not
/// allocate (and page in) new memory every time. Bounded in bytes.
pub(crate) struct BufferCache {
    entries: HashMap<(u64, MemoryUsage), Vec<RawBuffer>>,
    bytes: u64,
    limit: u64,
}

impl BufferCache {
    /// A cache of at most `limit` bytes.
    pub(crate) fn new(limit: u64) -> Self {
        BufferCache {
            entries: HashMap::new(),
            bytes: 0,
            limit,
        }
    }

    fn take(&mut self, size: u64, usage: MemoryUsage) -> Option<RawBuffer> {
        let list = self.entries.get_mut(&(size, usage))?;
        let raw = list.pop()?;
        self.bytes -= raw.size;
        Some(raw)
    }

    /// Keeps `raw` for reuse, or gives it back when the cache is full.
    /// Memory of a buffer's own (which another device or process may see)
    /// is never reused.
    pub(crate) fn put(&mut self, raw: RawBuffer) -> Option<RawBuffer> {
        if self.bytes + raw.size > self.limit || raw.dedicated_memory().is_some() {
            return Some(raw);
        }
        self.bytes += raw.size;
        self.entries
            .entry((raw.size, raw.usage))
            .or_default()
            .push(raw);
        None
    }

    /// Everything the cache holds, emptying it.
    pub(crate) fn drain(&mut self) -> Vec<RawBuffer> {
        self.bytes = 0;
        self.entries.drain().flat_map(|(_, list)| list).collect()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.bytes == 0
    }
}
