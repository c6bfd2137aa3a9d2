//! The SPIR-V side of the capabilities table: what each capability,
//! extension, feature-dependent construct and float-controls execution
//! mode needs of the device.

use ash::vk;

use super::Feature as F;
use super::Need::Feature as Needs;
use super::Need::{AnyOf, Core, Never, Subgroup};
use super::{Feature, FloatControls, Need};

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
    pub(super) fn supported(self, c: &FloatControls, width: u32) -> bool {
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
/// One row a line (`rustfmt::skip`): a table read down its columns.
#[rustfmt::skip]
pub(crate) const CAPABILITIES: &[(u32, &str, Need)] = &[
    (0, "Matrix", Core),
    (1, "Shader", Core),
    (4, "Addresses", Never("the Addresses capability (OpenCL kernels)")),
    (9, "Float16", Needs(F::ShaderFloat16)),
    (10, "Float64", Needs(F::ShaderFloat64)),
    (11, "Int64", Needs(F::ShaderInt64)),
    (12, "Int64Atomics", AnyOf(&[F::ShaderBufferInt64Atomics, F::ShaderSharedInt64Atomics])),
    (22, "Int16", Needs(F::ShaderInt16)),
    (28, "UniformBufferArrayDynamicIndexing", Needs(F::ShaderUniformBufferArrayDynamicIndexing)),
    (30, "StorageBufferArrayDynamicIndexing", Needs(F::ShaderStorageBufferArrayDynamicIndexing)),
    (39, "Int8", Needs(F::ShaderInt8)),
    (61, "GroupNonUniform", Subgroup(Sg::BASIC)),
    (62, "GroupNonUniformVote", Subgroup(Sg::VOTE)),
    (63, "GroupNonUniformArithmetic", Subgroup(Sg::ARITHMETIC)),
    (64, "GroupNonUniformBallot", Subgroup(Sg::BALLOT)),
    (65, "GroupNonUniformShuffle", Subgroup(Sg::SHUFFLE)),
    (66, "GroupNonUniformShuffleRelative", Subgroup(Sg::SHUFFLE_RELATIVE)),
    (67, "GroupNonUniformClustered", Subgroup(Sg::CLUSTERED)),
    (68, "GroupNonUniformQuad", Subgroup(Sg::QUAD)),
    (4423, "SubgroupBallotKHR", Never("VK_EXT_shader_subgroup_ballot")),
    (4431, "SubgroupVoteKHR", Never("VK_EXT_shader_subgroup_vote")),
    (4433, "StorageBuffer16BitAccess", Needs(F::StorageBuffer16Bit)),
    (4434, "UniformAndStorageBuffer16BitAccess", Needs(F::UniformAndStorageBuffer16Bit)),
    (4435, "StoragePushConstant16", Needs(F::StoragePushConstant16)),
    (4437, "DeviceGroup", Core),
    (4441, "VariablePointersStorageBuffer", Needs(F::VariablePointersStorageBuffer)),
    (4442, "VariablePointers", Needs(F::VariablePointers)),
    (4448, "StorageBuffer8BitAccess", Needs(F::StorageBuffer8Bit)),
    (4449, "UniformAndStorageBuffer8BitAccess", Needs(F::UniformAndStorageBuffer8Bit)),
    (4450, "StoragePushConstant8", Needs(F::StoragePushConstant8)),
    (4464, "DenormPreserve", Core),
    (4465, "DenormFlushToZero", Core),
    (4466, "SignedZeroInfNanPreserve", Core),
    (4467, "RoundingModeRTE", Core),
    (4468, "RoundingModeRTZ", Core),
    (5301, "ShaderNonUniform", Core),
    (5302, "RuntimeDescriptorArray", Needs(F::RuntimeDescriptorArray)),
    (5306, "UniformBufferArrayNonUniformIndexing", Needs(F::ShaderUniformBufferArrayNonUniformIndexing)),
    (5308, "StorageBufferArrayNonUniformIndexing", Needs(F::ShaderStorageBufferArrayNonUniformIndexing)),
    (5345, "VulkanMemoryModel", Needs(F::VulkanMemoryModel)),
    (5346, "VulkanMemoryModelDeviceScope", Needs(F::VulkanMemoryModel)),
    (5347, "PhysicalStorageBufferAddresses", Needs(F::BufferDeviceAddress)),
    (6016, "DotProductInputAll", Needs(F::ShaderIntegerDotProduct)),
    (6017, "DotProductInput4x8Bit", Needs(F::ShaderIntegerDotProduct)),
    (6018, "DotProductInput4x8BitPacked", Needs(F::ShaderIntegerDotProduct)),
    (6019, "DotProduct", Needs(F::ShaderIntegerDotProduct)),
    (6022, "CooperativeMatrixKHR", Never("VK_KHR_cooperative_matrix")),
    (6033, "AtomicFloat32AddEXT", AnyOf(&[F::ShaderBufferFloat32AtomicAdd, F::ShaderSharedFloat32AtomicAdd])),
    (6034, "AtomicFloat64AddEXT", AnyOf(&[F::ShaderBufferFloat64AtomicAdd, F::ShaderSharedFloat64AtomicAdd])),
    (6095, "AtomicFloat16AddEXT", AnyOf(&[F::ShaderBufferFloat16AtomicAdd, F::ShaderSharedFloat16AtomicAdd])),
    (5612, "AtomicFloat32MinMaxEXT", AnyOf(&[F::ShaderBufferFloat32AtomicMinMax, F::ShaderSharedFloat32AtomicMinMax])),
    (5613, "AtomicFloat64MinMaxEXT", AnyOf(&[F::ShaderBufferFloat64AtomicMinMax, F::ShaderSharedFloat64AtomicMinMax])),
    (5616, "AtomicFloat16MinMaxEXT", AnyOf(&[F::ShaderBufferFloat16AtomicMinMax, F::ShaderSharedFloat16AtomicMinMax])),
];

/// Every SPIR-V extension (`OpExtension`) a compute kernel may declare,
/// with what it needs beyond its capabilities (which the table above checks).
#[rustfmt::skip]
pub(crate) const EXTENSIONS: &[(&str, Need)] = &[
    ("SPV_KHR_storage_buffer_storage_class", Core),
    ("SPV_KHR_16bit_storage", Core),
    ("SPV_KHR_8bit_storage", Core),
    ("SPV_KHR_variable_pointers", Core),
    ("SPV_KHR_vulkan_memory_model", Core),
    ("SPV_KHR_float_controls", Core),
    ("SPV_KHR_physical_storage_buffer", Core),
    ("SPV_KHR_device_group", Core),
    ("SPV_EXT_descriptor_indexing", Core),
    ("SPV_KHR_shader_draw_parameters", Core),
    ("SPV_KHR_no_integer_wrap_decoration", Core),
    ("SPV_KHR_integer_dot_product", Needs(F::ShaderIntegerDotProduct)),
    ("SPV_KHR_non_semantic_info", Needs(F::NonSemanticInfo)),
    ("SPV_KHR_shader_ballot", Never("VK_EXT_shader_subgroup_ballot")),
    ("SPV_KHR_subgroup_vote", Never("VK_EXT_shader_subgroup_vote")),
    (
        "SPV_EXT_shader_atomic_float_add",
        AnyOf(&[
            F::ShaderBufferFloat32AtomicAdd,
            F::ShaderSharedFloat32AtomicAdd,
            F::ShaderBufferFloat64AtomicAdd,
            F::ShaderSharedFloat64AtomicAdd,
        ]),
    ),
    (
        "SPV_EXT_shader_atomic_float16_add",
        AnyOf(&[F::ShaderBufferFloat16AtomicAdd, F::ShaderSharedFloat16AtomicAdd]),
    ),
    (
        "SPV_EXT_shader_atomic_float_min_max",
        AnyOf(&[
            F::ShaderBufferFloat16AtomicMinMax,
            F::ShaderSharedFloat16AtomicMinMax,
            F::ShaderBufferFloat32AtomicMinMax,
            F::ShaderSharedFloat32AtomicMinMax,
            F::ShaderBufferFloat64AtomicMinMax,
            F::ShaderSharedFloat64AtomicMinMax,
        ]),
    ),
    ("SPV_KHR_cooperative_matrix", Never("VK_KHR_cooperative_matrix")),
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

pub(crate) use vkcompute_spirv::FloatAtomicOp;

/// The feature a float atomic needs, by its width (16, 32 or 64), what it
/// does, and whether it operates on shared memory (else on a buffer);
/// `None` for another width.
pub(crate) fn float_atomic(width: u32, op: FloatAtomicOp, shared: bool) -> Option<Feature> {
    use FloatAtomicOp::{Add, Exchange, MinMax};
    Some(match (width, op, shared) {
        (16, Exchange, false) => F::ShaderBufferFloat16Atomics,
        (16, Add, false) => F::ShaderBufferFloat16AtomicAdd,
        (16, MinMax, false) => F::ShaderBufferFloat16AtomicMinMax,
        (16, Exchange, true) => F::ShaderSharedFloat16Atomics,
        (16, Add, true) => F::ShaderSharedFloat16AtomicAdd,
        (16, MinMax, true) => F::ShaderSharedFloat16AtomicMinMax,
        (32, Exchange, false) => F::ShaderBufferFloat32Atomics,
        (32, Add, false) => F::ShaderBufferFloat32AtomicAdd,
        (32, MinMax, false) => F::ShaderBufferFloat32AtomicMinMax,
        (32, Exchange, true) => F::ShaderSharedFloat32Atomics,
        (32, Add, true) => F::ShaderSharedFloat32AtomicAdd,
        (32, MinMax, true) => F::ShaderSharedFloat32AtomicMinMax,
        (64, Exchange, false) => F::ShaderBufferFloat64Atomics,
        (64, Add, false) => F::ShaderBufferFloat64AtomicAdd,
        (64, MinMax, false) => F::ShaderBufferFloat64AtomicMinMax,
        (64, Exchange, true) => F::ShaderSharedFloat64Atomics,
        (64, Add, true) => F::ShaderSharedFloat64AtomicAdd,
        (64, MinMax, true) => F::ShaderSharedFloat64AtomicMinMax,
        _ => return None,
    })
}

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
