//! The SPIR-V capabilities a kernel may declare on a device: those the
//! Vulkan environment allows with the features and subgroup operations the
//! device has enabled. A module declaring any other capability is refused
//! before it reaches the driver (a capability without its feature is
//! invalid usage: VUID-VkShaderModuleCreateInfo-pCode-08740, formerly
//! -01091), even where SPIRV-Tools accepts it.
#![deny(unsafe_code)]

use ash::vk;

use crate::reflect::instructions;
use crate::vk::Adapter;

const OP_CAPABILITY: u32 = 17;

/// Checks every `OpCapability` of `words` against `adapter`; the error says
/// which capability is missing what.
pub(crate) fn check(words: &[u32], adapter: &Adapter) -> Result<(), String> {
    let f = &adapter.features;
    let subgroup = |op: vk::SubgroupFeatureFlags| adapter.compute_subgroup_operations.contains(op);
    for (op, operands) in instructions(words) {
        let (OP_CAPABILITY, [capability, ..]) = (op, operands) else {
            continue;
        };
        let (name, allowed) = match *capability {
            0 => ("Matrix", true),
            1 => ("Shader", true),
            9 => ("Float16", f.shader_float16),
            10 => ("Float64", f.shader_float64),
            11 => ("Int64", f.shader_int64),
            22 => ("Int16", f.shader_int16),
            39 => ("Int8", f.shader_int8),
            61 => ("GroupNonUniform", subgroup(vk::SubgroupFeatureFlags::BASIC)),
            62 => (
                "GroupNonUniformVote",
                subgroup(vk::SubgroupFeatureFlags::VOTE),
            ),
            63 => (
                "GroupNonUniformArithmetic",
                subgroup(vk::SubgroupFeatureFlags::ARITHMETIC),
            ),
            64 => (
                "GroupNonUniformBallot",
                subgroup(vk::SubgroupFeatureFlags::BALLOT),
            ),
            65 => (
                "GroupNonUniformShuffle",
                subgroup(vk::SubgroupFeatureFlags::SHUFFLE),
            ),
            66 => (
                "GroupNonUniformShuffleRelative",
                subgroup(vk::SubgroupFeatureFlags::SHUFFLE_RELATIVE),
            ),
            67 => (
                "GroupNonUniformClustered",
                subgroup(vk::SubgroupFeatureFlags::CLUSTERED),
            ),
            68 => (
                "GroupNonUniformQuad",
                subgroup(vk::SubgroupFeatureFlags::QUAD),
            ),
            4433 => ("StorageBuffer16BitAccess", f.storage_buffer_16bit),
            4434 => (
                "UniformAndStorageBuffer16BitAccess",
                f.uniform_and_storage_buffer_16bit,
            ),
            4448 => ("StorageBuffer8BitAccess", f.storage_buffer_8bit),
            4449 => (
                "UniformAndStorageBuffer8BitAccess",
                f.uniform_and_storage_buffer_8bit,
            ),
            5345 => ("VulkanMemoryModel", f.vulkan_memory_model),
            5347 => ("PhysicalStorageBufferAddresses", f.buffer_device_address),
            other => {
                return Err(format!(
                    "it declares SPIR-V capability {other}, which vkcompute does not enable"
                ))
            }
        };
        if !allowed {
            return Err(format!(
                "it declares SPIR-V capability {name}, which the device does not support"
            ));
        }
    }
    Ok(())
}
