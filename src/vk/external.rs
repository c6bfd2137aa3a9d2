//! The external-memory and external-semaphore extensions: which a device
//! is opened with, and their function tables.

use std::ffi::{c_char, CStr};

use ash::vk;

use super::adapter::Adapter;
use super::instance::Instance;

/// The sharing extensions, in the order they are enabled.
const EXTENSIONS: [&CStr; 4] = [
    ash::khr::external_memory_fd::NAME,
    ash::ext::external_memory_dma_buf::NAME,
    ash::ext::external_memory_host::NAME,
    ash::khr::external_semaphore_fd::NAME,
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
        }
    }

    /// The names to pass to `vkCreateDevice`.
    pub(crate) fn names(self) -> Vec<*const c_char> {
        let on = [self.memory_fd, self.dma_buf, self.host, self.semaphore_fd];
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
        }
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

/// What `vkGetPhysicalDeviceExternalSemaphoreProperties` says of timeline
/// semaphores and `handle_type`.
pub(crate) fn timeline_semaphore_support(
    instance: &Instance,
    physical: vk::PhysicalDevice,
    handle_type: vk::ExternalSemaphoreHandleTypeFlags,
) -> vk::ExternalSemaphoreFeatureFlags {
    let mut kind = vk::SemaphoreTypeCreateInfo::default()
        .semaphore_type(vk::SemaphoreType::TIMELINE)
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

impl super::Device {
    /// Whether the device's timeline semaphores can be made exportable as
    /// opaque fds.
    pub(crate) fn timeline_exportable(&self) -> bool {
        self.external.enabled.semaphore_fd
            && timeline_semaphore_support(
                &self.instance,
                self.adapter.raw,
                vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD,
            )
            .contains(vk::ExternalSemaphoreFeatureFlags::EXPORTABLE)
    }
}
