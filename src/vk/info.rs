//! What a device is, as the public API describes it: [`DeviceInfo`] with
//! its kind, subgroups, compute limits and enabled kernel features, and
//! the [`DeviceSelector`] that picks one.

use std::fmt;
use std::str::FromStr;

use ash::vk;

use super::conv;
use crate::capabilities::{Capabilities, Feature};

/// What kind of processor a device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// A GPU with its own memory.
    DiscreteGpu,
    /// A GPU sharing memory with the CPU.
    IntegratedGpu,
    /// A GPU of a virtual machine.
    VirtualGpu,
    /// The CPU itself (lavapipe, SwiftShader).
    Cpu,
    /// Anything else.
    Other,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::DiscreteGpu => "discrete GPU",
            DeviceKind::IntegratedGpu => "integrated GPU",
            DeviceKind::VirtualGpu => "virtual GPU",
            DeviceKind::Cpu => "CPU",
            DeviceKind::Other => "other",
        })
    }
}

/// A Vulkan device as [`DeviceContext::devices`](crate::DeviceContext::devices) lists it.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Its position in the loader's list: what `VKCOMPUTE_DEVICE=<index>` selects.
    pub index: usize,
    /// The device name, such as `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// Discrete, integrated, virtual, CPU.
    pub kind: DeviceKind,
    /// The driver's name and version information.
    pub driver: String,
    /// The Vulkan version the device implements, as `major.minor.patch`.
    pub api_version: String,
    /// Bytes in the device's device-local memory heaps.
    pub memory_bytes: u64,
    /// Why vkcompute cannot use the device, or `None` when it can.
    pub unsupported: Option<String>,
    /// What is enabled on the opened device that bears on what kernels may
    /// do: `Some` in [`DeviceContext::info`](crate::DeviceContext::info),
    /// `None` in a [`DeviceContext::devices`](crate::DeviceContext::devices)
    /// listing, which opens no device.
    pub enabled: Option<KernelFeatures>,
    /// `deviceUUID`: the same for every `VkDevice` opened on this physical
    /// device, in every process and API (CUDA, OpenCL, other Vulkan
    /// instances) that reports it. Memory exported from one device can be
    /// imported only where this matches.
    pub uuid: [u8; 16],
    /// `driverUUID`: opaque handles (opaque file descriptors) move only
    /// between drivers that report the same value.
    pub driver_uuid: [u8; 16],
    /// `deviceLUID` where the device reports one (on Windows, mostly).
    pub luid: Option<[u8; 8]>,
    /// Subgroups: sizes, and the stages and operations they support.
    pub subgroup: SubgroupInfo,
    /// The limits of compute dispatches on the device.
    pub limits: ComputeLimits,
}

/// A device's subgroups (Vulkan 1.1 subgroup properties, and subgroup size
/// control from Vulkan 1.3 or `VK_EXT_subgroup_size_control`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SubgroupInfo {
    /// The default subgroup size (`subgroupSize`).
    pub size: u32,
    /// The smallest size a kernel may require (`minSubgroupSize`; `size`
    /// where the device has no subgroup size control).
    pub min_size: u32,
    /// The largest size a kernel may require (`maxSubgroupSize`).
    pub max_size: u32,
    /// The shader stages with subgroup operations (`supportedStages`).
    pub supported_stages: ash::vk::ShaderStageFlags,
    /// The classes of subgroup operations supported (`supportedOperations`):
    /// basic, vote, arithmetic, ballot, shuffle, shuffle relative,
    /// clustered, quad.
    pub supported_operations: ash::vk::SubgroupFeatureFlags,
    /// Whether a kernel may require a subgroup size
    /// ([`KernelBuilder::subgroup_size`](crate::KernelBuilder::subgroup_size)):
    /// the device has `subgroupSizeControl` and lists compute in
    /// `requiredSubgroupSizeStages`.
    pub size_control: bool,
    /// The stages in which a subgroup size may be required
    /// (`requiredSubgroupSizeStages`).
    pub required_size_stages: ash::vk::ShaderStageFlags,
    /// The most subgroups in one workgroup (`maxComputeWorkgroupSubgroups`;
    /// 0 where the device does not say).
    pub max_compute_workgroup_subgroups: u32,
}

/// The limits of compute work on a device (from `VkPhysicalDeviceLimits`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ComputeLimits {
    /// `maxComputeWorkGroupSize`: the largest workgroup in x, y and z.
    pub max_workgroup_size: [u32; 3],
    /// `maxComputeWorkGroupCount`: the most workgroups of one dispatch in
    /// x, y and z.
    pub max_workgroup_count: [u32; 3],
    /// `maxComputeWorkGroupInvocations`: the most invocations of one workgroup.
    pub max_workgroup_invocations: u32,
    /// `maxComputeSharedMemorySize`: bytes of `shared` memory per workgroup.
    pub max_shared_memory_bytes: u32,
    /// `maxPushConstantsSize`: bytes of push constants.
    pub max_push_constants_bytes: u32,
    /// `maxStorageBufferRange`: the most bytes one binding may cover.
    pub max_storage_buffer_range: u32,
    /// `minStorageBufferOffsetAlignment`: a bound view's offset is a
    /// multiple of it.
    pub min_storage_buffer_offset_alignment: u64,
    /// `maxMemoryAllocationSize` (Vulkan 1.1): the most bytes of one
    /// buffer's memory; a larger buffer is [`Error::TooLarge`](crate::Error::TooLarge).
    pub max_memory_allocation_size: u64,
    /// `maxBufferSize` (Vulkan 1.3, `VK_KHR_maintenance4`), where the device
    /// reports it: the most bytes of one buffer.
    pub max_buffer_size: Option<u64>,
    /// `maxBoundDescriptorSets`: a kernel's bindings may be in sets 0 up
    /// to one less than this (at least 4 on every Vulkan device).
    pub max_bound_descriptor_sets: u32,
}

impl ComputeLimits {
    pub(super) fn from_limits(
        l: &vk::PhysicalDeviceLimits,
        max_memory_allocation_size: u64,
        max_buffer_size: Option<u64>,
    ) -> Self {
        ComputeLimits {
            max_memory_allocation_size,
            max_buffer_size,
            max_workgroup_size: l.max_compute_work_group_size,
            max_workgroup_count: l.max_compute_work_group_count,
            max_workgroup_invocations: l.max_compute_work_group_invocations,
            max_shared_memory_bytes: l.max_compute_shared_memory_size,
            max_push_constants_bytes: l.max_push_constants_size,
            max_storage_buffer_range: l.max_storage_buffer_range,
            min_storage_buffer_offset_alignment: l.min_storage_buffer_offset_alignment,
            max_bound_descriptor_sets: l.max_bound_descriptor_sets,
        }
    }
}

/// A device's memory, as [`DeviceContext::memory_info`](crate::DeviceContext::memory_info)
/// reports it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct MemoryInfo {
    /// Bytes of device-local memory that are about free: the driver's
    /// budget less its usage where it reports one (`source` says), else
    /// `total` less what this device's allocator holds.
    pub free: u64,
    /// Bytes of device-local memory in all (the device-local heaps' sizes).
    pub total: u64,
    /// Bytes this device's memory allocator holds now, for every context
    /// on the device (its memory blocks, which may be larger than the
    /// buffers in them), and exportable buffers' own memory.
    pub allocated: u64,
    /// Where `free` comes from.
    pub source: FreeMemorySource,
}

/// Where [`MemoryInfo::free`] comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum FreeMemorySource {
    /// The driver's budget and usage (`VK_EXT_memory_budget`), which count
    /// other processes' memory too, as the driver estimates it: on a CPU
    /// driver such as lavapipe, the system's free memory.
    DriverBudget,
    /// The heaps' sizes less this device's allocations: the driver reports
    /// no budget, and other processes' use is not seen.
    OwnAllocations,
}

/// Device features that decide what a kernel's memory accesses can do, as
/// enabled on an opened device.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KernelFeatures {
    /// `robustBufferAccess`: a kernel's out-of-range access of a storage
    /// buffer stays inside that buffer (a write may land anywhere in the
    /// [`DeviceBuffer`](crate::DeviceBuffer) the bound view belongs to, or
    /// be dropped; a read returns data of that buffer or zero). Enabled
    /// wherever the device has it.
    pub robust_buffer_access: bool,
    /// `robustBufferAccess2` (`VK_EXT_robustness2`): out-of-range writes
    /// are dropped and out-of-range reads return zero (the range of a bound
    /// view counts as rounded up to at most 4 bytes). Enabled wherever the
    /// device has it.
    pub robust_buffer_access2: bool,
    /// `vulkanMemoryModel`: enabled only together with
    /// `vulkanMemoryModelDeviceScope`, since with the first alone no kernel
    /// may use Device-scope memory operations (which every GLSL buffer
    /// atomic is).
    pub vulkan_memory_model: bool,
    /// `vulkanMemoryModelDeviceScope`.
    pub vulkan_memory_model_device_scope: bool,
    /// `bufferDeviceAddress`: buffers have device addresses, which only
    /// kernels dispatched through the `unsafe` pointer path may use.
    pub buffer_device_address: bool,
    // What kernels' capabilities need, enabled wherever the device has it
    // (see `Kernel`): each field is the Vulkan feature named.
    /// `shaderFloat16`: 16-bit float arithmetic (`Float16`).
    pub shader_float16: bool,
    /// `shaderFloat64` (`Float64`).
    pub shader_float64: bool,
    /// `shaderInt8` (`Int8`).
    pub shader_int8: bool,
    /// `shaderInt16` (`Int16`).
    pub shader_int16: bool,
    /// `shaderInt64` (`Int64`).
    pub shader_int64: bool,
    /// `storageBuffer8BitAccess`: 8-bit values in buffers.
    pub storage_buffer_8bit: bool,
    /// `storageBuffer16BitAccess`: 16-bit values in buffers.
    pub storage_buffer_16bit: bool,
    /// `storagePushConstant8`: 8-bit push-constant members.
    pub storage_push_constant_8: bool,
    /// `storagePushConstant16`: 16-bit push-constant members.
    pub storage_push_constant_16: bool,
    /// `shaderBufferInt64Atomics`: 64-bit atomics on buffers.
    pub shader_buffer_int64_atomics: bool,
    /// `shaderSharedInt64Atomics`: 64-bit atomics on shared memory.
    pub shader_shared_int64_atomics: bool,
    /// `shaderIntegerDotProduct` (Vulkan 1.3 or `VK_KHR_shader_integer_dot_product`).
    pub shader_integer_dot_product: bool,
    /// `shaderZeroInitializeWorkgroupMemory`: initialized `shared` variables (Vulkan 1.3 or `VK_KHR_zero_initialize_workgroup_memory`).
    pub zero_initialize_workgroup_memory: bool,
    /// `subgroupSizeControl`: kernels may require a subgroup size (Vulkan 1.3 or `VK_EXT_subgroup_size_control`).
    pub subgroup_size_control: bool,
}

impl KernelFeatures {
    /// The public view of what a device enabled.
    pub(crate) fn of(enabled: &Capabilities) -> Self {
        let on = |feature| enabled.has(feature);
        KernelFeatures {
            robust_buffer_access: on(Feature::RobustBufferAccess),
            robust_buffer_access2: on(Feature::RobustBufferAccess2),
            vulkan_memory_model: on(Feature::VulkanMemoryModel),
            vulkan_memory_model_device_scope: on(Feature::VulkanMemoryModelDeviceScope),
            buffer_device_address: on(Feature::BufferDeviceAddress),
            shader_float16: on(Feature::ShaderFloat16),
            shader_float64: on(Feature::ShaderFloat64),
            shader_int8: on(Feature::ShaderInt8),
            shader_int16: on(Feature::ShaderInt16),
            shader_int64: on(Feature::ShaderInt64),
            storage_buffer_8bit: on(Feature::StorageBuffer8Bit),
            storage_buffer_16bit: on(Feature::StorageBuffer16Bit),
            storage_push_constant_8: on(Feature::StoragePushConstant8),
            storage_push_constant_16: on(Feature::StoragePushConstant16),
            shader_buffer_int64_atomics: on(Feature::ShaderBufferInt64Atomics),
            shader_shared_int64_atomics: on(Feature::ShaderSharedInt64Atomics),
            shader_integer_dot_product: on(Feature::ShaderIntegerDotProduct),
            zero_initialize_workgroup_memory: on(Feature::ZeroInitializeWorkgroupMemory),
            subgroup_size_control: on(Feature::SubgroupSizeControl),
        }
    }
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({}, driver {}, Vulkan {}, {})",
            self.index,
            self.name,
            self.kind,
            self.driver,
            self.api_version,
            conv::bytes_string(self.memory_bytes)
        )?;
        if let Some(reason) = &self.unsupported {
            write!(f, " [unusable: {reason}]")?;
        }
        Ok(())
    }
}

/// Which device a context should use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The device at this index of [`DeviceContext::devices`](crate::DeviceContext::devices).
    Index(usize),
    /// The most preferred device whose name contains this text (ignoring case).
    Name(String),
}

impl FromStr for DeviceSelector {
    type Err = std::convert::Infallible;

    /// A number selects by index, anything else by name.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let s = s.trim();
        Ok(match s.parse::<usize>() {
            Ok(i) => DeviceSelector::Index(i),
            Err(_) => DeviceSelector::Name(s.to_string()),
        })
    }
}

impl From<usize> for DeviceSelector {
    fn from(i: usize) -> Self {
        DeviceSelector::Index(i)
    }
}

impl From<&str> for DeviceSelector {
    fn from(s: &str) -> Self {
        s.parse().unwrap_or_else(|never| match never {})
    }
}
