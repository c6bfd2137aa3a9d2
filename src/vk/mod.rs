//! Vulkan plumbing: the instance, physical-device choice, the logical device
//! and its queues, the debug messenger, conversions, buffer allocations,
//! compute pipelines and descriptor pools. The one part of the
//! crate where raw `ash` calls are common.

mod adapter;
pub(crate) mod command;
mod conv;
mod debug;
mod device;
mod external;
mod external_memory;
mod external_semaphore;
pub(crate) mod fault;
mod info;
mod instance;
pub(crate) mod memory;
mod memory_usage;
pub(crate) mod pipeline;
mod pipeline_cache;
mod timeline;
mod waiter;
mod win32;

pub use debug::{Severity, ValidationLog, ValidationMessage};
pub use info::{
    ComputeLimits, DeviceInfo, DeviceKind, DeviceSelector, FreeMemorySource, KernelFeatures,
    MemoryInfo, SubgroupInfo,
};
pub use win32::Win32Handle;

pub(crate) use adapter::Adapter;
pub(crate) use debug::name_object;
pub(crate) use device::{Device, DeviceOptions, Enabled};
pub(crate) use external::{buffer_support, ownership_barrier, semaphore_support, AliasLinks};
#[cfg(unix)]
pub(crate) use external_memory::{export_memory_fd, fd_memory_types};
pub(crate) use external_memory::{
    export_memory_win32, host_memory_types, ExternalBuffer, HostAllocation, MemorySource,
};
pub(crate) use external_semaphore::{
    destroy_unused_semaphore, export_semaphore_win32, import_semaphore_win32,
};
#[cfg(unix)]
pub(crate) use external_semaphore::{
    export_semaphore_fd, export_sync_fd, import_semaphore_fd, import_sync_fd,
};
pub(crate) use instance::Instance;
pub(crate) use memory_usage::MemoryUsage;
pub(crate) use pipeline_cache::default_dir as default_pipeline_cache_dir;
pub(crate) use timeline::Timeline;
pub(crate) use waiter::{Waiters, WakerSlot};
