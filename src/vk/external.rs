//! The external-memory and external-semaphore extensions: which a device
//! is opened with, their function tables, what the device supports, the
//! barriers that hand shared memory to and from other APIs, and the aliases
//! of other devices' memory a device keeps.

use std::ffi::{c_char, CStr};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use ash::vk;

use super::adapter::Adapter;
use super::command::{Cmd, READS_AND_WRITES, STAGES, WRITES};
use super::instance::Instance;
use super::memory::RawBuffer;
use super::Device;

/// The sharing extensions, in the order they are enabled.
const EXTENSIONS: [&CStr; 6] = [
    ash::khr::external_memory_fd::NAME,
    ash::ext::external_memory_dma_buf::NAME,
    ash::ext::external_memory_host::NAME,
    ash::khr::external_semaphore_fd::NAME,
    ash::khr::external_memory_win32::NAME,
    ash::khr::external_semaphore_win32::NAME,
];

/// Which sharing extensions are enabled on a device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct ExternalExtensions {
    /// `VK_KHR_external_memory_fd`: opaque POSIX file descriptors of memory.
    pub(crate) memory_fd: bool,
    /// `VK_EXT_external_memory_dma_buf` (with `memory_fd`): dma-buf fds.
    pub(crate) dma_buf: bool,
    /// `VK_EXT_external_memory_host`: memory over host allocations.
    pub(crate) host: bool,
    /// `VK_KHR_external_semaphore_fd`: semaphores as fds.
    pub(crate) semaphore_fd: bool,
    /// `VK_KHR_external_memory_win32`: memory as Win32 handles.
    pub(crate) memory_win32: bool,
    /// `VK_KHR_external_semaphore_win32`: semaphores as Win32 handles.
    pub(crate) semaphore_win32: bool,
}

impl ExternalExtensions {
    /// Those `adapter` offers (dma-buf only together with memory fds, which
    /// it extends).
    pub(crate) fn offered(adapter: &Adapter) -> Self {
        let memory_fd = adapter.has_extension(EXTENSIONS[0]);
        ExternalExtensions {
            memory_fd,
            dma_buf: memory_fd && adapter.has_extension(EXTENSIONS[1]),
            host: adapter.has_extension(EXTENSIONS[2]),
            semaphore_fd: adapter.has_extension(EXTENSIONS[3]),
            memory_win32: adapter.has_extension(EXTENSIONS[4]),
            semaphore_win32: adapter.has_extension(EXTENSIONS[5]),
        }
    }

    /// The names to pass to `vkCreateDevice`.
    pub(crate) fn names(self) -> Vec<*const c_char> {
        let on = [
            self.memory_fd,
            self.dma_buf,
            self.host,
            self.semaphore_fd,
            self.memory_win32,
            self.semaphore_win32,
        ];
        EXTENSIONS
            .iter()
            .zip(on)
            .filter(|(_, on)| *on)
            .map(|(name, _)| name.as_ptr())
            .collect()
    }
}

/// The function tables of the enabled sharing extensions.
pub(crate) struct ExternalFns {
    pub(crate) enabled: ExternalExtensions,
    pub(crate) memory_fd: Option<ash::khr::external_memory_fd::Device>,
    pub(crate) host: Option<ash::ext::external_memory_host::Device>,
    pub(crate) semaphore_fd: Option<ash::khr::external_semaphore_fd::Device>,
    pub(crate) memory_win32: Option<ash::khr::external_memory_win32::Device>,
    pub(crate) semaphore_win32: Option<ash::khr::external_semaphore_win32::Device>,
    /// Aliases of other devices' exportable memory, for zero-copy copies.
    pub(crate) aliases: AliasCache,
    /// Binary semaphores exported as sync fds, with the fence of the
    /// submission that signals each: destroyed once it has completed.
    pub(crate) sync_exports: Mutex<Vec<(vk::Fence, vk::Semaphore)>>,
}

impl ExternalFns {
    pub(crate) fn load(
        instance: &Instance,
        device: &ash::Device,
        enabled: ExternalExtensions,
    ) -> Self {
        let i = &instance.raw;
        ExternalFns {
            enabled,
            memory_fd: enabled
                .memory_fd
                .then(|| ash::khr::external_memory_fd::Device::new(i, device)),
            host: enabled
                .host
                .then(|| ash::ext::external_memory_host::Device::new(i, device)),
            semaphore_fd: enabled
                .semaphore_fd
                .then(|| ash::khr::external_semaphore_fd::Device::new(i, device)),
            memory_win32: enabled
                .memory_win32
                .then(|| ash::khr::external_memory_win32::Device::new(i, device)),
            semaphore_win32: enabled
                .semaphore_win32
                .then(|| ash::khr::external_semaphore_win32::Device::new(i, device)),
            aliases: AliasCache::default(),
            sync_exports: Mutex::new(Vec::new()),
        }
    }

    /// Destroys what the sharing extensions hold on `device` (the aliases
    /// and the sync-fd semaphores). Called by the device's `Drop`, once it
    /// is idle.
    pub(crate) fn release(&self, device: &Device) {
        for raw in std::mem::take(&mut *self.aliases.entries()) {
            raw.1.destroy(device);
        }
        let pending = std::mem::take(&mut *lock(&self.sync_exports));
        for (fence, semaphore) in pending {
            // SAFETY: the device is idle (the caller's contract), so the
            // submission that used them has completed; each destroyed once.
            unsafe {
                device.raw.destroy_fence(fence, None);
                device.raw.destroy_semaphore(semaphore, None);
            }
        }
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(|e| e.into_inner())
}

/// Buffers of one device over other devices' exportable memory (aliases),
/// kept between zero-copy copies so that a copy does not import the memory
/// again. Each alias is keyed by its exporter's [`AliasLinks::id`]; the
/// exporter's links remove it when the exporting memory is freed, and the
/// device destroys the rest when it goes. An alias in the cache is idle:
/// a copy takes it out while it uses it and waits for its work before
/// putting it back. A leaf lock.
#[derive(Default)]
pub(crate) struct AliasCache {
    entries: Mutex<Vec<(u64, RawBuffer)>>,
    /// Aliases imported since the device was opened.
    imports: AtomicU64,
}

impl AliasCache {
    fn entries(&self) -> MutexGuard<'_, Vec<(u64, RawBuffer)>> {
        lock(&self.entries)
    }

    /// Takes the alias of exporter `id` out of the cache, if it has one.
    pub(crate) fn take(&self, id: u64) -> Option<RawBuffer> {
        let mut entries = self.entries();
        let i = entries.iter().position(|(e, _)| *e == id)?;
        Some(entries.swap_remove(i).1)
    }

    /// Keeps `raw`, an idle alias of exporter `id` on `device`; destroys
    /// it where the cache has one already (two copies made one each).
    pub(crate) fn put(&self, device: &Device, id: u64, raw: RawBuffer) {
        let mut entries = self.entries();
        if entries.iter().any(|(e, _)| *e == id) {
            drop(entries);
            raw.destroy(device);
        } else {
            entries.push((id, raw));
        }
    }

    /// Counts an import of a new alias.
    pub(crate) fn note_import(&self) {
        self.imports.fetch_add(1, Ordering::Relaxed);
    }

    /// The aliases kept, and the aliases imported since the device opened.
    pub(crate) fn counts(&self) -> (usize, u64) {
        (self.entries().len(), self.imports.load(Ordering::Relaxed))
    }
}

static NEXT_EXPORTER: AtomicU64 = AtomicU64::new(1);

/// The identity of one exportable memory and the devices that keep an
/// alias of it. Dropped with the memory (after its last use): it removes
/// and destroys the aliases on every device still alive, so an alias never
/// holds memory its exporter has freed.
pub(crate) struct AliasLinks {
    id: u64,
    importers: Mutex<Vec<Weak<Device>>>,
}

impl AliasLinks {
    pub(crate) fn new() -> Self {
        AliasLinks {
            id: NEXT_EXPORTER.fetch_add(1, Ordering::Relaxed),
            importers: Mutex::new(Vec::new()),
        }
    }

    /// Unique among the exportable memories of this process.
    pub(crate) fn id(&self) -> u64 {
        self.id
    }

    /// Notes that `device` keeps an alias of this memory.
    pub(crate) fn link(&self, device: &Arc<Device>) {
        let mut importers = lock(&self.importers);
        importers.retain(|w| w.strong_count() > 0);
        if !importers
            .iter()
            .any(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(device)))
        {
            importers.push(Arc::downgrade(device));
        }
    }
}

impl Drop for AliasLinks {
    fn drop(&mut self) {
        let importers = std::mem::take(self.importers.get_mut().unwrap_or_else(|e| e.into_inner()));
        for device in importers.iter().filter_map(Weak::upgrade) {
            // Idle (see `AliasCache`): no submitted work uses it.
            if let Some(raw) = device.external.aliases.take(self.id) {
                raw.destroy(&device);
            }
        }
    }
}

/// Records into `cmd` (recording, of `device`'s compute family) a queue
/// family ownership transfer of `buffer`'s bytes `offset..offset + size`
/// between that family and `VK_QUEUE_FAMILY_EXTERNAL`: a release (after
/// the transfers and compute work recorded before it) or an acquire
/// (before the transfers and compute work recorded after it). For host
/// memory (`host`: a mapping another process shares, maybe with another
/// device, which `VK_QUEUE_FAMILY_EXTERNAL` does not cover) a barrier
/// with the host instead: a release makes the writes available to the
/// host (what the other process's device reads through host memory), an
/// acquire makes host writes visible to the work after it.
pub(crate) fn ownership_barrier(
    device: &Device,
    cmd: Cmd,
    buffer: vk::Buffer,
    (offset, size): (u64, u64),
    (release, host): (bool, bool),
) {
    let cmd = cmd.raw();
    let (ours, external) = match host {
        true => (vk::QUEUE_FAMILY_IGNORED, vk::QUEUE_FAMILY_IGNORED),
        false => (device.queue_family, vk::QUEUE_FAMILY_EXTERNAL),
    };
    let (src_family, dst_family) = if release {
        (ours, external)
    } else {
        (external, ours)
    };
    // A release makes this queue's writes available (its second scope is
    // empty); an acquire makes them visible to this queue (its first scope
    // is empty): the external side synchronizes the rest. With the host,
    // the other scope is the host's; a host acquire also takes this
    // queue's stages into its first scope, so that it follows a semaphore
    // wait before it too.
    let none = (vk::PipelineStageFlags::empty(), vk::AccessFlags::empty());
    let host_stage = vk::PipelineStageFlags::HOST;
    let (src, dst) = match (release, host) {
        (true, false) => ((STAGES, WRITES), none),
        (true, true) => ((STAGES, WRITES), (host_stage, vk::AccessFlags::HOST_READ)),
        (false, false) => (none, (STAGES, READS_AND_WRITES)),
        (false, true) => (
            (host_stage | STAGES, vk::AccessFlags::HOST_WRITE),
            (STAGES, READS_AND_WRITES),
        ),
    };
    if device.synchronization2() {
        // The legacy flag bits have the same values in the 64-bit sync2
        // flags; an empty stage mask is VK_PIPELINE_STAGE_2_NONE.
        let barriers = [vk::BufferMemoryBarrier2::default()
            .src_stage_mask(vk::PipelineStageFlags2::from_raw(u64::from(src.0.as_raw())))
            .src_access_mask(vk::AccessFlags2::from_raw(u64::from(src.1.as_raw())))
            .dst_stage_mask(vk::PipelineStageFlags2::from_raw(u64::from(dst.0.as_raw())))
            .dst_access_mask(vk::AccessFlags2::from_raw(u64::from(dst.1.as_raw())))
            .src_queue_family_index(src_family)
            .dst_queue_family_index(dst_family)
            .buffer(buffer)
            .offset(offset)
            .size(size)];
        let info = vk::DependencyInfo::default().buffer_memory_barriers(&barriers);
        // SAFETY: `cmd` is recording on the compute family; synchronization2
        // is enabled; the range lies in the buffer (the caller's contract).
        unsafe { device.raw.cmd_pipeline_barrier2(cmd, &info) };
    } else {
        // Without synchronization2 an empty stage mask is spelled
        // BOTTOM_OF_PIPE (release) or TOP_OF_PIPE (acquire).
        let src_stage = match src.0.is_empty() {
            false => src.0,
            true => vk::PipelineStageFlags::TOP_OF_PIPE,
        };
        let dst_stage = match dst.0.is_empty() {
            false => dst.0,
            true => vk::PipelineStageFlags::BOTTOM_OF_PIPE,
        };
        let barriers = [vk::BufferMemoryBarrier::default()
            .src_access_mask(src.1)
            .dst_access_mask(dst.1)
            .src_queue_family_index(src_family)
            .dst_queue_family_index(dst_family)
            .buffer(buffer)
            .offset(offset)
            .size(size)];
        // SAFETY: `cmd` is recording on the compute family; the range lies
        // in the buffer (the caller's contract).
        unsafe {
            device.raw.cmd_pipeline_barrier(
                cmd,
                src_stage,
                dst_stage,
                vk::DependencyFlags::empty(),
                &[],
                &barriers,
                &[],
            )
        };
    }
}

/// What `vkGetPhysicalDeviceExternalBufferProperties` says of buffers
/// with vkcompute's usage and `handle_type`.
pub(crate) fn buffer_support(
    instance: &Instance,
    physical: vk::PhysicalDevice,
    usage: vk::BufferUsageFlags,
    handle_type: vk::ExternalMemoryHandleTypeFlags,
) -> vk::ExternalMemoryProperties {
    let info = vk::PhysicalDeviceExternalBufferInfo::default()
        .usage(usage)
        .handle_type(handle_type);
    let mut out = vk::ExternalBufferProperties::default();
    // SAFETY: Vulkan 1.1 core; `physical` belongs to `instance`; the
    // structs are valid and unchained.
    unsafe {
        instance
            .raw
            .get_physical_device_external_buffer_properties(physical, &info, &mut out)
    };
    out.external_memory_properties
}

/// What `vkGetPhysicalDeviceExternalSemaphoreProperties` says of
/// semaphores of `kind` (timeline or binary) and `handle_type`.
pub(crate) fn semaphore_support(
    instance: &Instance,
    physical: vk::PhysicalDevice,
    kind: vk::SemaphoreType,
    handle_type: vk::ExternalSemaphoreHandleTypeFlags,
) -> vk::ExternalSemaphoreFeatureFlags {
    let mut kind = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(kind)
        .initial_value(0);
    let info = vk::PhysicalDeviceExternalSemaphoreInfo::default()
        .handle_type(handle_type)
        .push_next(&mut kind);
    let mut out = vk::ExternalSemaphoreProperties::default();
    // SAFETY: Vulkan 1.1 core (timeline semaphore types 1.2, which every
    // usable device has); `physical` belongs to `instance`.
    unsafe {
        instance
            .raw
            .get_physical_device_external_semaphore_properties(physical, &info, &mut out)
    };
    out.external_semaphore_features
}

impl Device {
    /// The handle types the device's stream timelines are created
    /// exportable as: opaque fds and opaque Win32 handles, each where the
    /// device can.
    pub(crate) fn timeline_export_types(&self) -> vk::ExternalSemaphoreHandleTypeFlags {
        let enabled = self.external.enabled;
        let mut types = vk::ExternalSemaphoreHandleTypeFlags::empty();
        for (on, handle_type) in [
            (
                enabled.semaphore_fd,
                vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD,
            ),
            (
                enabled.semaphore_win32,
                vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_WIN32,
            ),
        ] {
            if on
                && self
                    .timeline_supports(handle_type, vk::ExternalSemaphoreFeatureFlags::EXPORTABLE)
            {
                types |= handle_type;
            }
        }
        types
    }

    /// Whether the device's timeline semaphores have `feature` for `handle_type`.
    pub(crate) fn timeline_supports(
        &self,
        handle_type: vk::ExternalSemaphoreHandleTypeFlags,
        feature: vk::ExternalSemaphoreFeatureFlags,
    ) -> bool {
        semaphore_support(
            &self.instance,
            self.adapter.raw,
            vk::SemaphoreType::TIMELINE,
            handle_type,
        )
        .contains(feature)
    }
}
