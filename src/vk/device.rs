//! The logical device: queues, enabled features, the memory allocator.

use std::ffi::c_char;
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;
use gpu_allocator::vulkan::{Allocator, AllocatorCreateDesc};

use super::adapter::Adapter;
use super::external::{ExternalExtensions, ExternalFns};
use super::info::KernelFeatures;
use super::instance::Instance;
use super::memory::{BufferCache, RawBuffer};
use super::pipeline::ComputePipeline;
use super::pipeline_cache::{create_pipeline_cache, save_pipeline_cache, DiskCache};
use super::MemoryUsage;
use crate::capabilities::{Capabilities, Feature, FeatureStructs};
use crate::error::{Error, Result, VkResultExt};

/// The most queues a device context spreads its streams over.
const MAX_QUEUES: u32 = 4;

/// Choices made when a device is opened.
#[derive(Clone, Debug)]
pub(crate) struct DeviceOptions {
    /// The directory of the on-disk pipeline cache, or `None` for none.
    pub(crate) pipeline_cache_dir: Option<PathBuf>,
    /// Use `VK_KHR_push_descriptor` where the device has it.
    pub(crate) push_descriptors: bool,
    /// Use synchronization2 barriers where the device has them.
    pub(crate) synchronization2: bool,
}

/// The queues and extensions a logical device was created with, as far as
/// vkcompute cares (its features are a `Capabilities` value).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Enabled {
    pub(crate) queue_family: u32,
    /// Queues created in that family (index 0 up).
    pub(crate) queue_count: u32,
    pub(crate) push_descriptors: bool,
    pub(crate) memory_budget: bool,
    /// The sharing extensions enabled (none on a borrowed device).
    pub(crate) external: ExternalExtensions,
}

/// A logical device and what hangs off it. Shared (`Arc`) by every context
/// (stream) and every buffer made on it, so it outlives them all.
pub(crate) struct Device {
    pub(crate) raw: ash::Device,
    pub(crate) adapter: Adapter,
    pub(crate) queue_family: u32,
    queues: Vec<Mutex<vk::Queue>>,
    next_queue: AtomicUsize,
    /// `VK_KHR_push_descriptor`, when it is enabled.
    pub(crate) push_descriptor: Option<ash::khr::push_descriptor::Device>,
    /// The optional features enabled on the device: what the adapter
    /// offers, intersected with what was asked (for a borrowed device,
    /// what the application is taken to have enabled: see `borrowed`).
    pub(crate) capabilities: Capabilities,
    /// `VK_EXT_memory_budget`, when it is enabled.
    pub(crate) memory_budget: bool,
    /// The sharing extensions enabled, and their functions.
    pub(crate) external: ExternalFns,
    pub(crate) pipeline_cache: vk::PipelineCache,
    /// Where the pipeline cache is saved when the device is destroyed.
    pub(super) disk_cache: Option<DiskCache>,
    /// Whether the pipeline cache started from a file.
    pub(crate) pipeline_cache_loaded: bool,
    allocator: ManuallyDrop<Mutex<Allocator>>,
    /// Retired buffers kept for reuse (leaf lock, like the allocator's).
    buffer_cache: Mutex<BufferCache>,
    /// Buffers handed to the user (`take_raw`) and dropped unfreed: the
    /// user's work may still use them, so they go with the device.
    orphans: Mutex<Vec<RawBuffer>>,
    /// Timeline semaphores of dropped streams. Destroying one as soon as its
    /// last waiter's batch is seen complete raced with lavapipe's submit
    /// thread, which releases its wait on the semaphore after signalling the
    /// batch's own (a use after free inside the driver, seen as a rare crash
    /// in the model test); they are destroyed once the device is idle: on
    /// `trim`, when the device goes, and when a stream is made while
    /// `MAX_RETIRED_SEMAPHORES` wait (on a device vkcompute owns; a borrowed
    /// device keeps them until `trim` or its end).
    retired_semaphores: Mutex<Vec<vk::Semaphore>>,
    /// Streams (`StreamHandle`s) of the device alive now.
    pub(crate) streams: AtomicUsize,
    /// Whether the device was lost (a call returned `VK_ERROR_DEVICE_LOST`,
    /// or the fault-injection hook said so): every later public call that
    /// needs the device returns `Error::DeviceLost`.
    lost: AtomicBool,
    /// The crate's own pipelines (the fill kernel), made on first use.
    internal_pipelines: Mutex<Vec<(&'static str, Arc<ComputePipeline>)>>,
    /// Unique among the devices of this process.
    pub(crate) id: u64,
    /// Bytes of exportable buffers' own (dedicated) memory, for `MemoryInfo`.
    pub(crate) exportable_bytes: AtomicU64,
    /// Submissions so far, for the exit handler's registrations (exit.rs).
    pub(crate) submissions: AtomicU64,
    /// `VK_EXT_debug_utils`' device functions, loaded on the first name.
    pub(crate) debug_names: std::sync::OnceLock<ash::ext::debug_utils::Device>,
    #[cfg(feature = "fault-injection")]
    pub(crate) faults: super::fault::Faults,
    owned: bool,
    /// Dropped after everything above (fields drop in order).
    pub(crate) instance: Instance,
}

static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

/// The most timeline semaphores of dropped streams a device keeps before a
/// new stream waits for the device to be idle and destroys them (see
/// `Device::bound_retired_semaphores`).
pub(crate) const MAX_RETIRED_SEMAPHORES: usize = 64;

impl Device {
    /// Opens `adapter` with every optional feature vkcompute can use, and
    /// with robust buffer access wherever the device has it, so that no
    /// kernel index reaches memory outside the buffers bound to it.
    pub(crate) fn new(
        instance: Instance,
        adapter: Adapter,
        options: DeviceOptions,
    ) -> Result<Arc<Self>> {
        let family = adapter
            .queue_family
            .ok_or_else(|| Error::UnsupportedDevice {
                device: adapter.info.name.clone(),
                reason: "it has no compute queue".into(),
            })?;
        let queue_count = family.count.min(MAX_QUEUES);
        let priorities = vec![1.0f32; queue_count as usize];
        let queue_infos = [vk::DeviceQueueCreateInfo::default()
            .queue_family_index(family.index)
            .queue_priorities(&priorities)];

        let push_descriptors =
            options.push_descriptors && adapter.has_extension(ash::khr::push_descriptor::NAME);
        let memory_budget = adapter.has_extension(ash::ext::memory_budget::NAME);
        let mut extensions: Vec<*const c_char> = Vec::new();
        if push_descriptors {
            extensions.push(ash::khr::push_descriptor::NAME.as_ptr());
        }
        if memory_budget {
            extensions.push(ash::ext::memory_budget::NAME.as_ptr());
        }
        let external = ExternalExtensions::offered(&adapter);
        extensions.extend(external.names());
        if adapter.has_extension(ash::khr::portability_subset::NAME) {
            // Required wherever the device offers it (MoltenVK).
            extensions.push(ash::khr::portability_subset::NAME.as_ptr());
        }

        // Every optional feature the device offers (requirements met), and
        // the extensions those need.
        let core13 = adapter.api_version >= vk::API_VERSION_1_3;
        let enabled_features = adapter
            .capabilities
            .enabled_when_opened(options.synchronization2);
        let mut structs = FeatureStructs::enabling(core13, enabled_features.features);
        extensions.extend(structs.extensions().iter().map(|name| name.as_ptr()));
        let mut features2 = structs.chain();
        let info = vk::DeviceCreateInfo::default()
            .queue_create_infos(&queue_infos)
            .enabled_extension_names(&extensions)
            .push_next(&mut features2);
        // SAFETY: `adapter.raw` belongs to `instance`; every pointer in `info`
        // refers to locals that outlive the call.
        let raw = unsafe { instance.raw.create_device(adapter.raw, &info, None) }
            .during("vkCreateDevice")?;

        // From here on, `DeviceParts` destroys the device if a later step fails.
        let parts = DeviceParts { raw: Some(raw) };
        let disk = options
            .pipeline_cache_dir
            .as_deref()
            .map(|dir| DiskCache::open(dir, &adapter));
        let enabled = Enabled {
            queue_family: family.index,
            queue_count,
            push_descriptors,
            memory_budget,
            external,
        };
        #[allow(clippy::expect_used, reason = "parts.raw was set just above")]
        let device = Self::assemble(
            instance,
            adapter,
            parts.raw.clone().expect("set above"),
            enabled,
            enabled_features,
            true,
            disk,
        )?;
        // The device now belongs to `device`, which destroys it when dropped.
        let _ = parts.release();
        Ok(device)
    }

    /// Wraps a device the application created (see
    /// `DeviceContext::from_raw`); vkcompute creates its own objects on it
    /// (allocator, pipelines, command pools) but never destroys the device.
    ///
    /// Which features the application enabled cannot be read back from a
    /// device: kernels may use those the physical device has, robust buffer
    /// access is taken as on (the caller of `from_raw` guarantees it),
    /// robustBufferAccess2 as off, and the memory model as on only where its
    /// Device scope is supported too.
    /// `buffer_device_address` and `synchronization2` say whether the
    /// application enabled those features.
    pub(crate) fn borrowed(
        instance: Instance,
        adapter: Adapter,
        raw: ash::Device,
        enabled: Enabled,
        (buffer_device_address, synchronization2): (bool, bool),
    ) -> Result<Arc<Self>> {
        let features = adapter
            .capabilities
            .enabled_when_borrowed(buffer_device_address, synchronization2);
        Self::assemble(instance, adapter, raw, enabled, features, false, None)
    }

    /// Everything after `vkCreateDevice`: queues, allocator, pipeline cache.
    fn assemble(
        instance: Instance,
        mut adapter: Adapter,
        raw: ash::Device,
        enabled: Enabled,
        features: Capabilities,
        owned: bool,
        disk: Option<(DiskCache, Option<Vec<u8>>)>,
    ) -> Result<Arc<Self>> {
        adapter.info.enabled = Some(KernelFeatures::of(&features));
        let queues = (0..enabled.queue_count)
            // SAFETY: the queues were created with the device.
            .map(|i| Mutex::new(unsafe { raw.get_device_queue(enabled.queue_family, i) }))
            .collect();
        let allocator = Allocator::new(&AllocatorCreateDesc {
            instance: instance.raw.clone(),
            device: raw.clone(),
            physical_device: adapter.raw,
            debug_settings: Default::default(),
            buffer_device_address: features.has(Feature::BufferDeviceAddress),
            allocation_sizes: Default::default(),
        })
        .map_err(|e| Error::Allocation {
            what: "the allocator".into(),
            detail: e.to_string(),
        })?;
        let (disk_cache, initial) = match disk {
            Some((cache, data)) => (Some(cache), data),
            None => (None, None),
        };
        let (pipeline_cache, pipeline_cache_loaded) = create_pipeline_cache(&raw, initial)?;
        let push_descriptor = enabled
            .push_descriptors
            .then(|| ash::khr::push_descriptor::Device::new(&instance.raw, &raw));
        let external = ExternalFns::load(&instance, &raw, enabled.external);
        // After the layer's and the driver's exit handlers (see exit.rs).
        super::exit::register();
        Ok(Arc::new(Device {
            raw,
            queue_family: enabled.queue_family,
            queues,
            next_queue: AtomicUsize::new(0),
            push_descriptor,
            capabilities: features,
            memory_budget: enabled.memory_budget,
            external,
            pipeline_cache,
            disk_cache,
            pipeline_cache_loaded,
            allocator: ManuallyDrop::new(Mutex::new(allocator)),
            buffer_cache: Mutex::new(BufferCache::new(cache_limit(&adapter))),
            orphans: Mutex::new(Vec::new()),
            retired_semaphores: Mutex::new(Vec::new()),
            streams: AtomicUsize::new(0),
            lost: AtomicBool::new(false),
            internal_pipelines: Mutex::new(Vec::new()),
            id: NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed),
            debug_names: Default::default(),
            exportable_bytes: AtomicU64::new(0),
            submissions: AtomicU64::new(0),
            #[cfg(feature = "fault-injection")]
            faults: Default::default(),
            owned,
            adapter,
            instance,
        }))
    }

    /// The file the pipeline cache is saved to, if any.
    pub(crate) fn pipeline_cache_file(&self) -> Option<&Path> {
        self.disk_cache.as_ref().map(|d| d.file.as_path())
    }

    /// The crate's own pipeline named `name`, created by `create` on first
    /// use. No lock is held while `create` compiles it: two threads that
    /// both find it missing both build it, and the second to finish drops
    /// its own (never used) and takes the first's.
    pub(crate) fn internal_pipeline(
        &self,
        name: &'static str,
        create: impl FnOnce() -> Result<ComputePipeline>,
    ) -> Result<Arc<ComputePipeline>> {
        let pipelines = || {
            self.internal_pipelines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        };
        let find = |list: &[(&str, Arc<ComputePipeline>)]| {
            list.iter()
                .find(|(n, _)| *n == name)
                .map(|(_, p)| p.clone())
        };
        if let Some(p) = find(&pipelines()) {
            return Ok(p);
        }
        let built = create()?;
        let mut list = pipelines();
        if let Some(p) = find(&list) {
            drop(list);
            // Never used: no work records it.
            built.destroy(self);
            return Ok(p);
        }
        let pipeline = Arc::new(built);
        list.push((name, pipeline.clone()));
        Ok(pipeline)
    }

    /// Synchronization2 barriers are enabled.
    pub(crate) fn synchronization2(&self) -> bool {
        self.capabilities.has(Feature::Synchronization2)
    }

    /// `bufferDeviceAddress` is enabled.
    pub(crate) fn buffer_device_address(&self) -> bool {
        self.capabilities.has(Feature::BufferDeviceAddress)
    }

    /// Records that the device is lost: every later public call that
    /// needs it fails ([`check_alive`](Self::check_alive)).
    pub(crate) fn mark_lost(&self) {
        if !self.lost.swap(true, Ordering::AcqRel) {
            log::error!("the device `{}` was lost", self.name());
        }
    }

    /// `result`, noting a lost device on the way.
    pub(crate) fn note<T>(
        &self,
        result: std::result::Result<T, vk::Result>,
    ) -> std::result::Result<T, vk::Result> {
        if result.as_ref().err() == Some(&vk::Result::ERROR_DEVICE_LOST) {
            self.mark_lost();
        }
        result
    }

    /// `Error::DeviceLost` naming `op` where the device was lost.
    pub(crate) fn check_alive(&self, op: &'static str) -> crate::Result<()> {
        if self.lost.load(Ordering::Acquire) {
            return Err(crate::Error::DeviceLost { call: op });
        }
        Ok(())
    }

    pub(crate) fn limits(&self) -> &vk::PhysicalDeviceLimits {
        &self.adapter.limits
    }

    pub(crate) fn name(&self) -> &str {
        &self.adapter.info.name
    }

    /// The allocator, locked. A leaf lock: nothing else is locked while it is held.
    pub(crate) fn allocator(&self) -> MutexGuard<'_, Allocator> {
        self.allocator.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The cache of retired buffers, locked. Lock it only on its own (never
    /// with the allocator's lock held).
    pub(crate) fn buffer_cache(&self) -> MutexGuard<'_, BufferCache> {
        self.buffer_cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Frees a buffer whose last use has passed, or keeps it for reuse.
    pub(crate) fn retire_buffer(&self, raw: RawBuffer) {
        let refused = self.buffer_cache().put(raw);
        if let Some(raw) = refused {
            raw.destroy(self);
        }
    }

    /// Destroys `semaphore` once the device is idle (when it is dropped,
    /// or on `trim`): see `retired_semaphores`.
    pub(crate) fn retire_semaphore(&self, semaphore: vk::Semaphore) {
        self.retired_semaphores
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(semaphore);
    }

    /// How many retired semaphores wait to be destroyed.
    pub(crate) fn retired_semaphore_count(&self) -> usize {
        self.retired_semaphores
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Keeps the retired semaphores bounded without `trim`: where
    /// [`MAX_RETIRED_SEMAPHORES`] or more wait, waits for the device to be
    /// idle and destroys them (as `destroy_retired_semaphores`). Called
    /// where a stream is made, with no lock held: so the cost of a dropped
    /// stream is bounded by that many semaphores, and one idle wait per that
    /// many streams made. Destroying each as soon as its last batch is
    /// seen complete is not safe on lavapipe (see `retired_semaphores`); an
    /// idle device is.
    pub(crate) fn bound_retired_semaphores(&self) -> crate::Result<()> {
        if self.retired_semaphore_count() < MAX_RETIRED_SEMAPHORES {
            return Ok(());
        }
        self.destroy_retired_semaphores()
    }

    /// Waits until the device is idle and destroys the retired semaphores,
    /// where vkcompute owns the device (a borrowed device's other queues
    /// are the application's, and waiting for the device needs them all).
    pub(crate) fn destroy_retired_semaphores(&self) -> crate::Result<()> {
        if !self.owned {
            return Ok(());
        }
        let mut retired = self
            .retired_semaphores
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if retired.is_empty() {
            return Ok(());
        }
        self.wait_idle()?;
        for semaphore in retired.drain(..) {
            // SAFETY: the device is idle, so no batch and no driver thread
            // still uses the semaphore; each is destroyed once.
            unsafe { self.raw.destroy_semaphore(semaphore, None) };
        }
        Ok(())
    }

    /// Waits until the device is idle, where vkcompute owns the device (a
    /// borrowed device's other queues are the application's, and the wait
    /// needs every queue externally synchronized); does nothing otherwise.
    pub(crate) fn wait_idle(&self) -> crate::Result<()> {
        if !self.owned {
            return Ok(());
        }
        let _queues: Vec<_> = (0..self.queues.len()).map(|i| self.queue(i)).collect();
        // SAFETY: every queue of the device is locked, and vkcompute owns
        // the device, so no other thread submits meanwhile.
        super::exit::gate(|| unsafe { self.raw.device_wait_idle() })
            .map_err(|e| crate::Error::vk("vkDeviceWaitIdle", e))
    }

    /// Frees `raw` when the device is destroyed, once it is idle.
    pub(crate) fn free_when_destroyed(&self, raw: RawBuffer) {
        self.orphans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(raw);
    }

    /// Frees every buffer the cache keeps for reuse.
    pub(crate) fn release_cached_buffers(&self) {
        let cached = self.buffer_cache().drain();
        for raw in cached {
            raw.destroy(self);
        }
    }

    /// A queue for a new stream: each stream its own while there are enough.
    pub(crate) fn assign_queue(&self) -> usize {
        self.next_queue.fetch_add(1, Ordering::Relaxed) % self.queues.len()
    }

    /// The queue at `index`, locked for a submission.
    pub(crate) fn queue(&self, index: usize) -> MutexGuard<'_, vk::Queue> {
        self.queues[index].lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The index of the best memory type among `type_bits` for `usage`.
    pub(crate) fn memory_type(&self, type_bits: u32, usage: MemoryUsage) -> Option<u32> {
        let props = &self.adapter.memory;
        let types = &props.memory_types[..props.memory_type_count as usize];
        let allowed = |i: usize| type_bits & (1 << i) != 0;
        usage.preferences().iter().find_map(|(want, avoid)| {
            (0..types.len())
                .find(|&i| {
                    allowed(i)
                        && types[i].property_flags.contains(*want)
                        && !types[i].property_flags.intersects(*avoid)
                })
                .map(|i| i as u32)
        })
    }
}

/// The bytes of retired buffers a device keeps for reuse: a quarter of its
/// device-local memory, at most 512 MiB.
fn cache_limit(adapter: &Adapter) -> u64 {
    (adapter.info.memory_bytes / 4).min(512 << 20)
}

/// Destroys a freshly created device unless construction completes.
struct DeviceParts {
    raw: Option<ash::Device>,
}

impl DeviceParts {
    #[allow(
        clippy::expect_used,
        reason = "release consumes the parts, so runs once"
    )]
    fn release(mut self) -> ash::Device {
        self.raw.take().expect("released once")
    }
}

impl Drop for DeviceParts {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            // SAFETY: nothing was created from the device yet that outlives this
            // point (the allocator, if made, has freed no memory and is dropped).
            unsafe { raw.destroy_device(None) };
        }
    }
}

impl Drop for Device {
    fn drop(&mut self) {
        // SAFETY: every context and buffer holds an `Arc<Device>`, so none is
        // left; waiting makes sure no submitted work still runs.
        unsafe {
            let _ = self.raw.device_wait_idle();
        }
        if let Some(disk) = &self.disk_cache {
            save_pipeline_cache(&self.raw, self.pipeline_cache, disk, &self.adapter);
        }
        // SAFETY: no pipeline is being created (every user of the device
        // is gone), and the cache is destroyed once.
        unsafe { self.raw.destroy_pipeline_cache(self.pipeline_cache, None) };
        self.release_cached_buffers();
        self.external.release(self);
        let orphans = std::mem::take(self.orphans.get_mut().unwrap_or_else(|e| e.into_inner()));
        for raw in orphans {
            raw.destroy(self);
        }
        let retired = std::mem::take(
            self.retired_semaphores
                .get_mut()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for semaphore in retired {
            // SAFETY: the device is idle (waited above); destroyed once.
            unsafe { self.raw.destroy_semaphore(semaphore, None) };
        }
        let pipelines = std::mem::take(
            self.internal_pipelines
                .get_mut()
                .unwrap_or_else(|e| e.into_inner()),
        );
        for (_, pipeline) in pipelines {
            pipeline.destroy(self);
        }
        // SAFETY: taken once, here; all allocations were freed by their owners.
        unsafe { ManuallyDrop::drop(&mut self.allocator) };
        if self.owned {
            // SAFETY: all child objects were destroyed above or by their owners.
            unsafe { self.raw.destroy_device(None) };
        }
    }
}
