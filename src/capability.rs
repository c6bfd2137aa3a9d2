//! The SPIR-V capabilities and extensions a kernel may declare on a
//! device: those the Vulkan environment allows with the features, subgroup
//! operations and Vulkan version of the device. A module declaring any
//! other is refused before it reaches the driver (a capability without its
//! feature, or an extension without its device extension, is invalid
//! usage, VUID-VkShaderModuleCreateInfo-pCode-01091 and -04147 in the
//! validation layer 1.3.239), even where SPIRV-Tools accepts it.
#![deny(unsafe_code)]

use ash::vk;

use crate::reflect::{instructions, literal_string};
use crate::vk::Adapter;

const OP_EXTENSION: u32 = 10;
const OP_CAPABILITY: u32 = 17;

/// The SPIR-V extensions of Vulkan 1.2 core (vkcompute needs 1.2), which
/// need no device extension.
const CORE_1_2_EXTENSIONS: [&str; 12] = [
    "SPV_KHR_storage_buffer_storage_class",
    "SPV_KHR_16bit_storage",
    "SPV_KHR_variable_pointers",
    "SPV_KHR_device_group",
    "SPV_KHR_multiview",
    "SPV_KHR_shader_draw_parameters",
    "SPV_KHR_8bit_storage",
    "SPV_KHR_vulkan_memory_model",
    "SPV_KHR_physical_storage_buffer",
    "SPV_KHR_float_controls",
    "SPV_EXT_descriptor_indexing",
    "SPV_EXT_shader_viewport_index_layer",
];

/// The SPIR-V extensions Vulkan 1.3 adds to its core.
const CORE_1_3_EXTENSIONS: [&str; 4] = [
    "SPV_KHR_non_semantic_info",
    "SPV_KHR_terminate_invocation",
    "SPV_KHR_integer_dot_product",
    "SPV_EXT_demote_to_helper_invocation",
];

/// Checks every `OpCapability` of `words` against `adapter`; the error says
/// which capability is missing what.
pub(crate) fn check(words: &[u32], adapter: &Adapter) -> Result<(), String> {
    let f = &adapter.features;
    let subgroup = |op: vk::SubgroupFeatureFlags| adapter.compute_subgroup_operations.contains(op);
    for (op, operands) in instructions(words) {
        if op == OP_EXTENSION {
            let name = literal_string(operands);
            let core_1_3 = adapter.api_version >= vk::API_VERSION_1_3;
            if !(CORE_1_2_EXTENSIONS.contains(&name.as_str())
                || core_1_3 && CORE_1_3_EXTENSIONS.contains(&name.as_str()))
            {
                return Err(format!(
                    "it declares SPIR-V extension {name}, which the device does not have enabled"
                ));
            }
        }
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
