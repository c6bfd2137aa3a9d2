//! What a module needs of the device: the one table that maps SPIR-V
//! capabilities, SPIR-V extensions and feature-dependent constructs to
//! the Vulkan features, extensions and properties behind them.
//!
//! The device enables at creation every optional feature of this table it
//! has (`vk::device`), and loading a kernel checks each of its needs
//! against what is enabled ([`check`]); a capability or extension missing
//! from the table is refused, since its feature could not be enabled.
//!
//! `spirv.rs` holds the SPIR-V side of the table (each capability,
//! extension, construct and float-controls mode with its need).
#![deny(unsafe_code)]

mod spirv;
#[cfg(test)]
mod tests;

use ash::vk;

use crate::vk::{Features, SubgroupInfo};

pub(crate) use spirv::{
    CAPABILITIES, EXTENSIONS, FLOAT_MODES, INT64_ATOMICS_BUFFER, INT64_ATOMICS_SHARED,
    LOCAL_SIZE_ID, ZERO_INITIALIZED_WORKGROUP,
};

/// A device feature vkcompute enables where the device has it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Feature {
    ShaderFloat16,
    ShaderFloat64,
    ShaderInt64,
    ShaderBufferInt64Atomics,
    ShaderSharedInt64Atomics,
    ShaderInt16,
    ShaderInt8,
    StorageBuffer16Bit,
    UniformAndStorageBuffer16Bit,
    StoragePushConstant16,
    StorageBuffer8Bit,
    UniformAndStorageBuffer8Bit,
    StoragePushConstant8,
    /// `vulkanMemoryModel` with `vulkanMemoryModelDeviceScope` (vkcompute
    /// enables neither without the other).
    VulkanMemoryModel,
    BufferDeviceAddress,
    ShaderIntegerDotProduct,
    ZeroInitializeWorkgroupMemory,
    /// `VK_KHR_shader_non_semantic_info` (core in Vulkan 1.3).
    NonSemanticInfo,
    /// `maintenance4` (Vulkan 1.3).
    Maintenance4,
    VariablePointersStorageBuffer,
    VariablePointers,
}

impl Feature {
    /// The feature's name in the Vulkan specification.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Feature::ShaderFloat16 => "shaderFloat16",
            Feature::ShaderFloat64 => "shaderFloat64",
            Feature::ShaderInt64 => "shaderInt64",
            Feature::ShaderBufferInt64Atomics => "shaderBufferInt64Atomics",
            Feature::ShaderSharedInt64Atomics => "shaderSharedInt64Atomics",
            Feature::ShaderInt16 => "shaderInt16",
            Feature::ShaderInt8 => "shaderInt8",
            Feature::StorageBuffer16Bit => "storageBuffer16BitAccess",
            Feature::UniformAndStorageBuffer16Bit => "uniformAndStorageBuffer16BitAccess",
            Feature::StoragePushConstant16 => "storagePushConstant16",
            Feature::StorageBuffer8Bit => "storageBuffer8BitAccess",
            Feature::UniformAndStorageBuffer8Bit => "uniformAndStorageBuffer8BitAccess",
            Feature::StoragePushConstant8 => "storagePushConstant8",
            Feature::VulkanMemoryModel => "vulkanMemoryModel with vulkanMemoryModelDeviceScope",
            Feature::BufferDeviceAddress => "bufferDeviceAddress",
            Feature::ShaderIntegerDotProduct => {
                "shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product)"
            }
            Feature::ZeroInitializeWorkgroupMemory => {
                "shaderZeroInitializeWorkgroupMemory (VK_KHR_zero_initialize_workgroup_memory)"
            }
            Feature::NonSemanticInfo => "VK_KHR_shader_non_semantic_info",
            Feature::Maintenance4 => "maintenance4 (Vulkan 1.3)",
            Feature::VariablePointersStorageBuffer => "variablePointersStorageBuffer",
            Feature::VariablePointers => "variablePointers",
        }
    }

    /// Whether `features` has it on.
    pub(crate) fn enabled_in(self, f: &Features) -> bool {
        match self {
            Feature::ShaderFloat16 => f.shader_float16,
            Feature::ShaderFloat64 => f.shader_float64,
            Feature::ShaderInt64 => f.shader_int64,
            Feature::ShaderBufferInt64Atomics => f.shader_buffer_int64_atomics,
            Feature::ShaderSharedInt64Atomics => f.shader_shared_int64_atomics,
            Feature::ShaderInt16 => f.shader_int16,
            Feature::ShaderInt8 => f.shader_int8,
            Feature::StorageBuffer16Bit => f.storage_buffer_16bit,
            Feature::UniformAndStorageBuffer16Bit => f.uniform_and_storage_buffer_16bit,
            Feature::StoragePushConstant16 => f.storage_push_constant_16,
            Feature::StorageBuffer8Bit => f.storage_buffer_8bit,
            Feature::UniformAndStorageBuffer8Bit => f.uniform_and_storage_buffer_8bit,
            Feature::StoragePushConstant8 => f.storage_push_constant_8,
            Feature::VulkanMemoryModel => {
                f.vulkan_memory_model && f.vulkan_memory_model_device_scope
            }
            Feature::BufferDeviceAddress => f.buffer_device_address,
            Feature::ShaderIntegerDotProduct => f.shader_integer_dot_product,
            Feature::ZeroInitializeWorkgroupMemory => f.zero_initialize_workgroup_memory,
            Feature::NonSemanticInfo => f.non_semantic_info,
            Feature::Maintenance4 => f.maintenance4,
            Feature::VariablePointersStorageBuffer => f.variable_pointers_storage_buffer,
            Feature::VariablePointers => f.variable_pointers,
        }
    }
}

/// What one capability, extension or construct needs of the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Need {
    /// Nothing beyond the Vulkan 1.2 core every vkcompute device has.
    Core,
    /// A feature.
    Feature(Feature),
    /// Any one of these features.
    AnyOf(&'static [Feature]),
    /// A class of subgroup operations, supported in compute shaders.
    Subgroup(vk::SubgroupFeatureFlags),
    /// Something vkcompute never enables (what, to say so).
    Never(&'static str),
}
/// What a module declares that needs something of the device.
#[derive(Debug, Default)]
pub(crate) struct Declared<'a> {
    pub(crate) capabilities: &'a [u32],
    pub(crate) extensions: &'a [String],
    pub(crate) initialized_workgroup: bool,
    pub(crate) local_size_id: bool,
    pub(crate) int64_atomics_buffer: bool,
    pub(crate) int64_atomics_shared: bool,
    /// Float-controls execution modes: (mode, float width). The
    /// capabilities that come with them need nothing; each mode needs its
    /// property for its width.
    pub(crate) float_modes: &'a [(u32, u32)],
}

/// Checks every need of `declared` against the enabled `features` and the
/// device's `subgroup` properties; the error says which capability (or
/// extension, or construct) needs which missing feature.
pub(crate) fn check(
    declared: &Declared<'_>,
    features: &Features,
    subgroup: &SubgroupInfo,
    device: &str,
) -> Result<(), String> {
    let mut needs: Vec<(String, Need)> = Vec::new();
    for &capability in declared.capabilities {
        match CAPABILITIES.iter().find(|(c, _, _)| *c == capability) {
            Some((_, name, need)) => needs.push((format!("the {name} capability"), *need)),
            None => {
                return Err(format!(
                    "it declares capability {capability}, which vkcompute does not know; the \
                     device feature it needs could not be enabled"
                ))
            }
        }
    }
    for extension in declared.extensions {
        match EXTENSIONS.iter().find(|(e, _)| e == extension) {
            Some((_, need)) => needs.push((format!("the {extension} extension"), *need)),
            None => {
                return Err(format!(
                    "it declares the SPIR-V extension {extension}, which vkcompute does not \
                     know; the device extension it needs could not be enabled"
                ))
            }
        }
    }
    for (declares, (what, need)) in [
        (declared.initialized_workgroup, ZERO_INITIALIZED_WORKGROUP),
        (declared.local_size_id, LOCAL_SIZE_ID),
        (declared.int64_atomics_buffer, INT64_ATOMICS_BUFFER),
        (declared.int64_atomics_shared, INT64_ATOMICS_SHARED),
    ] {
        if declares {
            needs.push((what.to_string(), need));
        }
    }
    for &(mode, width) in declared.float_modes {
        let Some((_, name, control)) = FLOAT_MODES.iter().find(|(m, _, _)| *m == mode) else {
            continue;
        };
        if !control.supported(features, width) {
            return Err(format!(
                "the {name} execution mode for {width}-bit floats needs {}, which the device \
                 `{device}` does not have",
                control.property(width)
            ));
        }
    }
    for (what, need) in needs {
        let missing = match need {
            Need::Core => None,
            Need::Feature(f) => (!f.enabled_in(features)).then(|| f.name().to_string()),
            Need::AnyOf(list) => (!list.iter().any(|f| f.enabled_in(features))).then(|| {
                let names: Vec<&str> = list.iter().map(|f| f.name()).collect();
                format!("one of {}", names.join(", "))
            }),
            Need::Subgroup(ops) => (!subgroup
                .supported_stages
                .contains(vk::ShaderStageFlags::COMPUTE)
                || !subgroup.supported_operations.contains(ops))
            .then(|| format!("subgroup operations {ops:?} in compute shaders")),
            Need::Never(feature) => {
                return Err(format!(
                    "{what} needs {feature}, which vkcompute does not enable"
                ))
            }
        };
        if let Some(missing) = missing {
            return Err(format!(
                "{what} needs {missing}, which the device `{device}` does not have"
            ));
        }
    }
    Ok(())
}
