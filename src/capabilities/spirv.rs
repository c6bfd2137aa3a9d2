//! The SPIR-V side of the capabilities table: what each capability,
//! extension, feature-dependent construct and float-controls execution
//! mode needs of the device.
#![deny(unsafe_code)]

use ash::vk;

use super::{Feature, Need};
use crate::vk::Features;

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
    pub(super) fn property(self, width: u32) -> String {
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
    pub(super) fn supported(self, f: &Features, width: u32) -> bool {
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
