//! Vulkan plumbing: the instance, physical-device choice, the logical device
//! and its queues, the debug messenger, and conversions. The one part of the
//! crate where raw `ash` calls are common.

mod adapter;
mod conv;
mod debug;
mod device;
mod external;
mod info;
mod instance;
mod pipeline_cache;
mod query;

pub use debug::{Severity, ValidationLog, ValidationMessage};
pub use info::{
    ComputeLimits, DeviceInfo, DeviceKind, DeviceSelector, KernelFeatures, SubgroupInfo,
};

pub(crate) use adapter::Adapter;
pub(crate) use device::{Device, DeviceOptions, Enabled, MemoryUsage};
pub(crate) use external::{buffer_support, timeline_semaphore_support};
pub(crate) use instance::Instance;
pub(crate) use pipeline_cache::default_dir as default_pipeline_cache_dir;
pub(crate) use query::TimestampQueries;
