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
pub(crate) mod fault;
mod instance;
pub(crate) mod memory;
pub(crate) mod pipeline;
mod pipeline_cache;
mod timeline;

pub use adapter::{
    ComputeLimits, DeviceInfo, DeviceKind, DeviceSelector, KernelFeatures, SubgroupInfo,
};
pub use debug::{Severity, ValidationLog, ValidationMessage};

pub(crate) use adapter::{Adapter, Features};
pub(crate) use device::{Device, DeviceOptions, Enabled, MemoryUsage};
pub(crate) use external::{buffer_support, timeline_semaphore_support};
pub(crate) use instance::Instance;
pub(crate) use pipeline_cache::default_dir as default_pipeline_cache_dir;
pub(crate) use timeline::Timeline;
