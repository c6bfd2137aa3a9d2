//! What a module needs of the device: the one table that maps SPIR-V
//! capabilities, SPIR-V extensions and feature-dependent constructs to
//! the Vulkan features, extensions and properties behind them.
//!
//! The device enables at creation every optional feature of this table it
//! has (`vk::device`), and loading a kernel checks each of its needs
//! against what is enabled ([`check`]); a capability or extension missing
//! from the table is refused, since its feature could not be enabled.
#![deny(unsafe_code)]

use ash::vk;

use crate::vk::{Features, SubgroupInfo};

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

/// The float-controls execution modes, each needing a property (Vulkan
/// 1.2) for the float width it names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FloatControl {
    DenormPreserve,
    DenormFlushToZero,
    SignedZeroInfNanPreserve,
    RoundingModeRte,
    RoundingModeRtz,
}

impl FloatControl {
    /// The property's name for `width`-bit floats.
    fn property(self, width: u32) -> String {
        let name = match self {
            FloatControl::DenormPreserve => "shaderDenormPreserve",
            FloatControl::DenormFlushToZero => "shaderDenormFlushToZero",
            FloatControl::SignedZeroInfNanPreserve => "shaderSignedZeroInfNanPreserve",
            FloatControl::RoundingModeRte => "shaderRoundingModeRTE",
            FloatControl::RoundingModeRtz => "shaderRoundingModeRTZ",
        };
        format!("{name}Float{width}")
    }

    /// Whether the device supports the mode for `width`-bit floats.
    fn supported(self, f: &Features, width: u32) -> bool {
        let c = &f.float_controls;
        let widths = match self {
            FloatControl::DenormPreserve => c.denorm_preserve,
            FloatControl::DenormFlushToZero => c.denorm_flush_to_zero,
            FloatControl::SignedZeroInfNanPreserve => c.signed_zero_inf_nan_preserve,
            FloatControl::RoundingModeRte => c.rounding_mode_rte,
            FloatControl::RoundingModeRtz => c.rounding_mode_rtz,
        };
        match width {
            16 => widths[0],
            32 => widths[1],
            64 => widths[2],
            _ => false,
        }
    }
}

/// The float-controls execution modes: (value, name, property).
pub(crate) const FLOAT_MODES: &[(u32, &str, FloatControl)] = &[
    (4459, "DenormPreserve", FloatControl::DenormPreserve),
    (4460, "DenormFlushToZero", FloatControl::DenormFlushToZero),
    (
        4461,
        "SignedZeroInfNanPreserve",
        FloatControl::SignedZeroInfNanPreserve,
    ),
    (4462, "RoundingModeRTE", FloatControl::RoundingModeRte),
    (4463, "RoundingModeRTZ", FloatControl::RoundingModeRtz),
];

type Sg = vk::SubgroupFeatureFlags;

/// Every SPIR-V capability a compute kernel may declare: (value, name, need).
pub(crate) const CAPABILITIES: &[(u32, &str, Need)] = &[
    (0, "Matrix", Need::Core),
    (1, "Shader", Need::Core),
    (
        4,
        "Addresses",
        Need::Never("the Addresses capability (OpenCL kernels)"),
    ),
    (9, "Float16", Need::Feature(Feature::ShaderFloat16)),
    (10, "Float64", Need::Feature(Feature::ShaderFloat64)),
    (11, "Int64", Need::Feature(Feature::ShaderInt64)),
    (
        12,
        "Int64Atomics",
        Need::AnyOf(&[
            Feature::ShaderBufferInt64Atomics,
            Feature::ShaderSharedInt64Atomics,
        ]),
    ),
    (22, "Int16", Need::Feature(Feature::ShaderInt16)),
    (39, "Int8", Need::Feature(Feature::ShaderInt8)),
    (61, "GroupNonUniform", Need::Subgroup(Sg::BASIC)),
    (62, "GroupNonUniformVote", Need::Subgroup(Sg::VOTE)),
    (
        63,
        "GroupNonUniformArithmetic",
        Need::Subgroup(Sg::ARITHMETIC),
    ),
    (64, "GroupNonUniformBallot", Need::Subgroup(Sg::BALLOT)),
    (65, "GroupNonUniformShuffle", Need::Subgroup(Sg::SHUFFLE)),
    (
        66,
        "GroupNonUniformShuffleRelative",
        Need::Subgroup(Sg::SHUFFLE_RELATIVE),
    ),
    (
        67,
        "GroupNonUniformClustered",
        Need::Subgroup(Sg::CLUSTERED),
    ),
    (68, "GroupNonUniformQuad", Need::Subgroup(Sg::QUAD)),
    (
        4423,
        "SubgroupBallotKHR",
        Need::Never("VK_EXT_shader_subgroup_ballot"),
    ),
    (
        4431,
        "SubgroupVoteKHR",
        Need::Never("VK_EXT_shader_subgroup_vote"),
    ),
    (
        4433,
        "StorageBuffer16BitAccess",
        Need::Feature(Feature::StorageBuffer16Bit),
    ),
    (
        4434,
        "UniformAndStorageBuffer16BitAccess",
        Need::Feature(Feature::UniformAndStorageBuffer16Bit),
    ),
    (
        4435,
        "StoragePushConstant16",
        Need::Feature(Feature::StoragePushConstant16),
    ),
    (4437, "DeviceGroup", Need::Core),
    (
        4441,
        "VariablePointersStorageBuffer",
        Need::Feature(Feature::VariablePointersStorageBuffer),
    ),
    (
        4442,
        "VariablePointers",
        Need::Feature(Feature::VariablePointers),
    ),
    (
        4448,
        "StorageBuffer8BitAccess",
        Need::Feature(Feature::StorageBuffer8Bit),
    ),
    (
        4449,
        "UniformAndStorageBuffer8BitAccess",
        Need::Feature(Feature::UniformAndStorageBuffer8Bit),
    ),
    (
        4450,
        "StoragePushConstant8",
        Need::Feature(Feature::StoragePushConstant8),
    ),
    (4464, "DenormPreserve", Need::Core),
    (4465, "DenormFlushToZero", Need::Core),
    (4466, "SignedZeroInfNanPreserve", Need::Core),
    (4467, "RoundingModeRTE", Need::Core),
    (4468, "RoundingModeRTZ", Need::Core),
    (5301, "ShaderNonUniform", Need::Core),
    (
        5302,
        "RuntimeDescriptorArray",
        Need::Never("runtimeDescriptorArray (vkcompute binds one buffer per binding)"),
    ),
    (
        5345,
        "VulkanMemoryModel",
        Need::Feature(Feature::VulkanMemoryModel),
    ),
    (
        5346,
        "VulkanMemoryModelDeviceScope",
        Need::Feature(Feature::VulkanMemoryModel),
    ),
    (
        5347,
        "PhysicalStorageBufferAddresses",
        Need::Feature(Feature::BufferDeviceAddress),
    ),
    (
        6016,
        "DotProductInputAll",
        Need::Feature(Feature::ShaderIntegerDotProduct),
    ),
    (
        6017,
        "DotProductInput4x8Bit",
        Need::Feature(Feature::ShaderIntegerDotProduct),
    ),
    (
        6018,
        "DotProductInput4x8BitPacked",
        Need::Feature(Feature::ShaderIntegerDotProduct),
    ),
    (
        6019,
        "DotProduct",
        Need::Feature(Feature::ShaderIntegerDotProduct),
    ),
    (
        6022,
        "CooperativeMatrixKHR",
        Need::Never("VK_KHR_cooperative_matrix"),
    ),
    (
        6033,
        "AtomicFloat32AddEXT",
        Need::Never("VK_EXT_shader_atomic_float"),
    ),
    (
        6034,
        "AtomicFloat64AddEXT",
        Need::Never("VK_EXT_shader_atomic_float"),
    ),
    (
        6095,
        "AtomicFloat16AddEXT",
        Need::Never("VK_EXT_shader_atomic_float2"),
    ),
];

/// Every SPIR-V extension (`OpExtension`) a compute kernel may declare,
/// with what it needs beyond its capabilities (which the table above checks).
pub(crate) const EXTENSIONS: &[(&str, Need)] = &[
    ("SPV_KHR_storage_buffer_storage_class", Need::Core),
    ("SPV_KHR_16bit_storage", Need::Core),
    ("SPV_KHR_8bit_storage", Need::Core),
    ("SPV_KHR_variable_pointers", Need::Core),
    ("SPV_KHR_vulkan_memory_model", Need::Core),
    ("SPV_KHR_float_controls", Need::Core),
    ("SPV_KHR_physical_storage_buffer", Need::Core),
    ("SPV_KHR_device_group", Need::Core),
    ("SPV_EXT_descriptor_indexing", Need::Core),
    ("SPV_KHR_shader_draw_parameters", Need::Core),
    ("SPV_KHR_no_integer_wrap_decoration", Need::Core),
    (
        "SPV_KHR_integer_dot_product",
        Need::Feature(Feature::ShaderIntegerDotProduct),
    ),
    (
        "SPV_KHR_non_semantic_info",
        Need::Feature(Feature::NonSemanticInfo),
    ),
    (
        "SPV_KHR_shader_ballot",
        Need::Never("VK_EXT_shader_subgroup_ballot"),
    ),
    (
        "SPV_KHR_subgroup_vote",
        Need::Never("VK_EXT_shader_subgroup_vote"),
    ),
    (
        "SPV_EXT_shader_atomic_float_add",
        Need::Never("VK_EXT_shader_atomic_float"),
    ),
    (
        "SPV_EXT_shader_atomic_float16_add",
        Need::Never("VK_EXT_shader_atomic_float2"),
    ),
    (
        "SPV_EXT_shader_atomic_float_min_max",
        Need::Never("VK_EXT_shader_atomic_float2"),
    ),
    (
        "SPV_KHR_cooperative_matrix",
        Need::Never("VK_KHR_cooperative_matrix"),
    ),
];

/// The need of an `OpVariable` in Workgroup memory with an initializer
/// (`shared` variables with initializers; WGSL compilers emit them).
pub(crate) const ZERO_INITIALIZED_WORKGROUP: (&str, Need) = (
    "an initialized Workgroup variable",
    Need::Feature(Feature::ZeroInitializeWorkgroupMemory),
);

/// The need of the `LocalSizeId` execution mode (what glslang emits for
/// `local_size_x_id` when targeting SPIR-V 1.6).
pub(crate) const LOCAL_SIZE_ID: (&str, Need) = (
    "the LocalSizeId execution mode",
    Need::Feature(Feature::Maintenance4),
);

/// The needs of 64-bit integer atomics by where they operate (the
/// `Int64Atomics` capability alone needs either feature).
pub(crate) const INT64_ATOMICS_BUFFER: (&str, Need) = (
    "a 64-bit atomic on a buffer",
    Need::Feature(Feature::ShaderBufferInt64Atomics),
);
pub(crate) const INT64_ATOMICS_SHARED: (&str, Need) = (
    "a 64-bit atomic on shared memory",
    Need::Feature(Feature::ShaderSharedInt64Atomics),
);

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

#[cfg(test)]
mod tests {
    use super::*;

    /// Features with every entry of the table on.
    fn everything() -> (Features, SubgroupInfo) {
        let mut f = Features {
            shader_float16: true,
            shader_float64: true,
            shader_int64: true,
            shader_buffer_int64_atomics: true,
            shader_shared_int64_atomics: true,
            shader_int16: true,
            shader_int8: true,
            storage_buffer_16bit: true,
            uniform_and_storage_buffer_16bit: true,
            storage_push_constant_16: true,
            storage_buffer_8bit: true,
            uniform_and_storage_buffer_8bit: true,
            storage_push_constant_8: true,
            vulkan_memory_model: true,
            vulkan_memory_model_device_scope: true,
            buffer_device_address: true,
            shader_integer_dot_product: true,
            zero_initialize_workgroup_memory: true,
            non_semantic_info: true,
            maintenance4: true,
            variable_pointers_storage_buffer: true,
            variable_pointers: true,
            ..Features::default()
        };
        let fc = &mut f.float_controls;
        for widths in [
            &mut fc.denorm_preserve,
            &mut fc.denorm_flush_to_zero,
            &mut fc.signed_zero_inf_nan_preserve,
            &mut fc.rounding_mode_rte,
            &mut fc.rounding_mode_rtz,
        ] {
            *widths = [true; 3];
        }
        let subgroup = SubgroupInfo {
            supported_stages: vk::ShaderStageFlags::COMPUTE,
            supported_operations: Sg::from_raw(0xff),
            ..SubgroupInfo::default()
        };
        (f, subgroup)
    }

    /// Turns off what `need` asks for.
    fn without(need: Need, f: &mut Features, s: &mut SubgroupInfo) {
        let mut off = |feature: Feature| match feature {
            Feature::ShaderFloat16 => f.shader_float16 = false,
            Feature::ShaderFloat64 => f.shader_float64 = false,
            Feature::ShaderInt64 => f.shader_int64 = false,
            Feature::ShaderBufferInt64Atomics => f.shader_buffer_int64_atomics = false,
            Feature::ShaderSharedInt64Atomics => f.shader_shared_int64_atomics = false,
            Feature::ShaderInt16 => f.shader_int16 = false,
            Feature::ShaderInt8 => f.shader_int8 = false,
            Feature::StorageBuffer16Bit => f.storage_buffer_16bit = false,
            Feature::UniformAndStorageBuffer16Bit => f.uniform_and_storage_buffer_16bit = false,
            Feature::StoragePushConstant16 => f.storage_push_constant_16 = false,
            Feature::StorageBuffer8Bit => f.storage_buffer_8bit = false,
            Feature::UniformAndStorageBuffer8Bit => f.uniform_and_storage_buffer_8bit = false,
            Feature::StoragePushConstant8 => f.storage_push_constant_8 = false,
            Feature::VulkanMemoryModel => f.vulkan_memory_model_device_scope = false,
            Feature::BufferDeviceAddress => f.buffer_device_address = false,
            Feature::ShaderIntegerDotProduct => f.shader_integer_dot_product = false,
            Feature::ZeroInitializeWorkgroupMemory => f.zero_initialize_workgroup_memory = false,
            Feature::NonSemanticInfo => f.non_semantic_info = false,
            Feature::Maintenance4 => f.maintenance4 = false,
            Feature::VariablePointersStorageBuffer => f.variable_pointers_storage_buffer = false,
            Feature::VariablePointers => f.variable_pointers = false,
        };
        match need {
            Need::Core | Need::Never(_) => {}
            Need::Feature(x) => off(x),
            Need::AnyOf(list) => list.iter().for_each(|x| off(*x)),
            Need::Subgroup(ops) => s.supported_operations &= !ops,
        }
    }

    fn missing_name(need: Need) -> Option<String> {
        match need {
            Need::Core => None,
            Need::Feature(f) => Some(f.name().to_string()),
            Need::AnyOf(list) => Some(list[0].name().to_string()),
            Need::Subgroup(ops) => Some(format!("{ops:?}")),
            Need::Never(what) => Some(what.to_string()),
        }
    }

    #[test]
    fn every_capability_loads_with_its_feature_and_names_it_without() {
        for &(capability, name, need) in CAPABILITIES {
            let (mut f, mut s) = everything();
            let caps = [1, capability];
            let declared = Declared {
                capabilities: &caps,
                ..Declared::default()
            };
            let with = check(&declared, &f, &s, "dev");
            if let Need::Never(_) = need {
                let e = with.expect_err(name);
                assert!(e.contains(name), "{name}: {e}");
                continue;
            }
            assert_eq!(with, Ok(()), "{name}");
            without(need, &mut f, &mut s);
            match (missing_name(need), check(&declared, &f, &s, "dev")) {
                (None, result) => assert_eq!(result, Ok(()), "{name}"),
                (Some(feature), Err(e)) => {
                    assert!(e.contains(name), "{name}: {e}");
                    assert!(e.contains(&feature), "{name} should name {feature}: {e}");
                    assert!(e.contains("`dev`"), "{e}");
                }
                (Some(_), Ok(())) => panic!("{name} loaded without its feature"),
            }
        }
    }

    #[test]
    fn float_control_modes_need_their_property_for_their_width() {
        for &(mode, name, control) in FLOAT_MODES {
            for (slot, width) in [16u32, 32, 64].into_iter().enumerate() {
                let (mut f, s) = everything();
                let modes = [(mode, width)];
                let declared = Declared {
                    float_modes: &modes,
                    ..Declared::default()
                };
                assert_eq!(check(&declared, &f, &s, "dev"), Ok(()), "{name} {width}");
                let fc = &mut f.float_controls;
                let widths = match control {
                    FloatControl::DenormPreserve => &mut fc.denorm_preserve,
                    FloatControl::DenormFlushToZero => &mut fc.denorm_flush_to_zero,
                    FloatControl::SignedZeroInfNanPreserve => &mut fc.signed_zero_inf_nan_preserve,
                    FloatControl::RoundingModeRte => &mut fc.rounding_mode_rte,
                    FloatControl::RoundingModeRtz => &mut fc.rounding_mode_rtz,
                };
                widths[slot] = false;
                let e = check(&declared, &f, &s, "dev").unwrap_err();
                assert!(e.contains(name), "{e}");
                assert!(e.contains(&format!("Float{width}")), "{e}");
            }
        }
    }

    #[test]
    fn subgroup_operations_need_the_compute_stage() {
        let (f, mut s) = everything();
        s.supported_stages = vk::ShaderStageFlags::FRAGMENT;
        let caps = [61];
        let declared = Declared {
            capabilities: &caps,
            ..Declared::default()
        };
        let e = check(&declared, &f, &s, "dev").unwrap_err();
        assert!(
            e.contains("GroupNonUniform") && e.contains("compute"),
            "{e}"
        );
    }

    #[test]
    fn every_extension_and_initialized_workgroup_memory_is_checked() {
        for &(extension, need) in EXTENSIONS {
            let (mut f, mut s) = everything();
            let exts = [extension.to_string()];
            let declared = Declared {
                extensions: &exts,
                ..Declared::default()
            };
            match need {
                Need::Never(_) => {
                    assert!(check(&declared, &f, &s, "dev").is_err(), "{extension}")
                }
                _ => assert_eq!(check(&declared, &f, &s, "dev"), Ok(()), "{extension}"),
            }
            without(need, &mut f, &mut s);
            if let Some(feature) = missing_name(need) {
                let e = check(&declared, &f, &s, "dev").unwrap_err();
                assert!(e.contains(extension) && e.contains(&feature), "{e}");
            }
        }
        let (mut f, s) = everything();
        let declared = Declared {
            initialized_workgroup: true,
            ..Declared::default()
        };
        assert_eq!(check(&declared, &f, &s, "dev"), Ok(()));
        f.zero_initialize_workgroup_memory = false;
        let e = check(&declared, &f, &s, "dev").unwrap_err();
        assert!(e.contains("shaderZeroInitializeWorkgroupMemory"), "{e}");
        let declared = Declared {
            local_size_id: true,
            ..Declared::default()
        };
        assert_eq!(check(&declared, &f, &s, "dev"), Ok(()));
        f.maintenance4 = false;
        let e = check(&declared, &f, &s, "dev").unwrap_err();
        assert!(
            e.contains("LocalSizeId") && e.contains("maintenance4"),
            "{e}"
        );
        // 64-bit atomics need the feature of the memory they operate on.
        let (mut f, s) = everything();
        let buffer = Declared {
            int64_atomics_buffer: true,
            ..Declared::default()
        };
        let shared = Declared {
            int64_atomics_shared: true,
            ..Declared::default()
        };
        f.shader_shared_int64_atomics = false;
        assert_eq!(check(&buffer, &f, &s, "dev"), Ok(()));
        let e = check(&shared, &f, &s, "dev").unwrap_err();
        assert!(
            e.contains("shared memory") && e.contains("shaderSharedInt64Atomics"),
            "{e}"
        );
        f.shader_shared_int64_atomics = true;
        f.shader_buffer_int64_atomics = false;
        assert_eq!(check(&shared, &f, &s, "dev"), Ok(()));
        let e = check(&buffer, &f, &s, "dev").unwrap_err();
        assert!(
            e.contains("buffer") && e.contains("shaderBufferInt64Atomics"),
            "{e}"
        );
        // Unknown capabilities and extensions are refused.
        let caps = [99_999];
        let unknown = Declared {
            capabilities: &caps,
            ..Declared::default()
        };
        assert!(check(&unknown, &f, &s, "dev")
            .unwrap_err()
            .contains("99999"));
        let exts = ["SPV_XYZ_unknown".to_string()];
        let unknown = Declared {
            extensions: &exts,
            ..Declared::default()
        };
        assert!(check(&unknown, &f, &s, "dev")
            .unwrap_err()
            .contains("SPV_XYZ_unknown"));
    }
}
