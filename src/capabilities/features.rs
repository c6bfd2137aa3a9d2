//! The device side of the table: every optional Vulkan feature vkcompute
//! knows, where it lives in the feature structs (or which extension it is),
//! what it requires, and the probed or enabled [`Capabilities`] of a device.
//!
//! One list (the `features!` invocation below) is read both ways: the
//! adapter reads what a device offers from the structs it filled, and
//! device creation writes what to enable into fresh ones.

use std::ffi::CStr;

use ash::vk;

use super::structs::FeatureStructs;

/// Where a feature is found on a device.
#[derive(Clone, Copy)]
pub(super) enum Source {
    /// A member of the feature structs (for a feature core in Vulkan 1.3
    /// and an extension before, the 1.3 struct's or the extension's,
    /// whichever [`FeatureStructs::core13`] says).
    Field(fn(&mut FeatureStructs) -> &mut vk::Bool32),
    /// No feature bit: present wherever its extension is usable.
    Extension,
}

/// The extension that offers a feature.
#[derive(Clone, Copy)]
struct Extension {
    name: &'static CStr,
    /// Whether Vulkan 1.3 made it core (then a 1.3 device needs no extension).
    core13: bool,
}

/// One row of the table.
#[derive(Clone, Copy)]
pub(super) struct Entry {
    /// The name in the Vulkan specification (for messages).
    name: &'static str,
    pub(super) source: Source,
    extension: Option<Extension>,
    /// A feature that must be enabled with it (vkcompute enables neither
    /// without the other where this says so).
    pub(super) requires: Option<Feature>,
}

const fn ext(name: &'static CStr, core13: bool) -> Option<Extension> {
    Some(Extension { name, core13 })
}

macro_rules! features {
    ($($(#[$doc:meta])* $feature:ident = $entry:expr;)*) => {
        /// An optional device feature vkcompute knows, enables where the
        /// device has it, and checks kernels against.
        #[derive(Clone, Copy, Debug, PartialEq, Eq)]
        #[repr(u8)]
        pub(crate) enum Feature {
            $($(#[$doc])* $feature,)*
        }

        impl Feature {
            /// Every feature, in the table's order.
            pub(crate) const ALL: &'static [Feature] = &[$(Feature::$feature),*];

            pub(super) fn entry(self) -> Entry {
                match self {
                    $(Feature::$feature => $entry,)*
                }
            }
        }
    };
}

/// A row for a member of a feature struct.
const fn field(name: &'static str, get: fn(&mut FeatureStructs) -> &mut vk::Bool32) -> Entry {
    Entry {
        name,
        source: Source::Field(get),
        extension: None,
        requires: None,
    }
}

impl Entry {
    const fn extension(self, name: &'static CStr, core13: bool) -> Entry {
        Entry {
            extension: ext(name, core13),
            ..self
        }
    }

    const fn requires(self, feature: Feature) -> Entry {
        Entry {
            requires: Some(feature),
            ..self
        }
    }
}

pub(super) const DOT: &CStr = ash::khr::shader_integer_dot_product::NAME;
pub(super) const ZERO: &CStr = ash::khr::zero_initialize_workgroup_memory::NAME;
pub(super) const SIZES: &CStr = ash::ext::subgroup_size_control::NAME;
pub(super) const NON_SEMANTIC: &CStr = ash::khr::shader_non_semantic_info::NAME;
pub(super) const ROBUSTNESS2: &CStr = ash::ext::robustness2::NAME;
pub(super) const ATOMIC_FLOAT: &CStr = ash::ext::shader_atomic_float::NAME;
pub(super) const ATOMIC_FLOAT2: &CStr = ash::ext::shader_atomic_float2::NAME;

features! {
    /// A kernel's out-of-range access of a storage buffer stays inside it.
    RobustBufferAccess = field("robustBufferAccess", |s| &mut s.v10.robust_buffer_access);
    /// Out-of-range writes dropped, reads zero (`VK_EXT_robustness2`).
    RobustBufferAccess2 = field("robustBufferAccess2", |s| &mut s.robustness2.robust_buffer_access2)
        .extension(ROBUSTNESS2, false)
        .requires(Feature::RobustBufferAccess);
    ShaderInt64 = field("shaderInt64", |s| &mut s.v10.shader_int64);
    ShaderFloat64 = field("shaderFloat64", |s| &mut s.v10.shader_float64);
    ShaderInt16 = field("shaderInt16", |s| &mut s.v10.shader_int16);
    /// Arrays of buffers indexed by dynamically uniform values.
    ShaderStorageBufferArrayDynamicIndexing = field("shaderStorageBufferArrayDynamicIndexing", |s| {
        &mut s.v10.shader_storage_buffer_array_dynamic_indexing
    });
    ShaderUniformBufferArrayDynamicIndexing = field("shaderUniformBufferArrayDynamicIndexing", |s| {
        &mut s.v10.shader_uniform_buffer_array_dynamic_indexing
    });
    StorageBuffer16Bit = field("storageBuffer16BitAccess", |s| {
        &mut s.v11.storage_buffer16_bit_access
    });
    UniformAndStorageBuffer16Bit = field("uniformAndStorageBuffer16BitAccess", |s| {
        &mut s.v11.uniform_and_storage_buffer16_bit_access
    });
    StoragePushConstant16 = field("storagePushConstant16", |s| &mut s.v11.storage_push_constant16);
    /// Variable pointers, which only kernels of the unsafe pointer path may use.
    VariablePointersStorageBuffer = field("variablePointersStorageBuffer", |s| {
        &mut s.v11.variable_pointers_storage_buffer
    });
    VariablePointers = field("variablePointers", |s| &mut s.v11.variable_pointers)
        .requires(Feature::VariablePointersStorageBuffer);
    /// Required of every device vkcompute opens.
    TimelineSemaphore = field("timelineSemaphore", |s| &mut s.v12.timeline_semaphore);
    StorageBuffer8Bit = field("storageBuffer8BitAccess", |s| &mut s.v12.storage_buffer8_bit_access);
    UniformAndStorageBuffer8Bit = field("uniformAndStorageBuffer8BitAccess", |s| {
        &mut s.v12.uniform_and_storage_buffer8_bit_access
    });
    StoragePushConstant8 = field("storagePushConstant8", |s| &mut s.v12.storage_push_constant8);
    ShaderFloat16 = field("shaderFloat16", |s| &mut s.v12.shader_float16);
    ShaderInt8 = field("shaderInt8", |s| &mut s.v12.shader_int8);
    BufferDeviceAddress = field("bufferDeviceAddress", |s| &mut s.v12.buffer_device_address);
    HostQueryReset = field("hostQueryReset", |s| &mut s.v12.host_query_reset);
    ScalarBlockLayout = field("scalarBlockLayout", |s| &mut s.v12.scalar_block_layout);
    /// Arrays of buffers indexed by values that differ between invocations
    /// (GLSL `nonuniformEXT`).
    ShaderStorageBufferArrayNonUniformIndexing = field("shaderStorageBufferArrayNonUniformIndexing", |s| {
        &mut s.v12.shader_storage_buffer_array_non_uniform_indexing
    });
    /// Runtime-sized arrays of buffers (`bufs[]`).
    RuntimeDescriptorArray = field("runtimeDescriptorArray", |s| &mut s.v12.runtime_descriptor_array);
    ShaderUniformBufferArrayNonUniformIndexing = field("shaderUniformBufferArrayNonUniformIndexing", |s| {
        &mut s.v12.shader_uniform_buffer_array_non_uniform_indexing
    });
    ShaderBufferInt64Atomics = field("shaderBufferInt64Atomics", |s| {
        &mut s.v12.shader_buffer_int64_atomics
    });
    ShaderSharedInt64Atomics = field("shaderSharedInt64Atomics", |s| {
        &mut s.v12.shader_shared_int64_atomics
    });
    /// Enabled only with its Device scope: with `vulkanMemoryModel` on and
    /// `vulkanMemoryModelDeviceScope` off, Device scope is forbidden in
    /// every module (VUID-RuntimeSpirv-vulkanMemoryModel-06265), and
    /// glslang gives every buffer atomic Device scope.
    VulkanMemoryModel = field("vulkanMemoryModel with vulkanMemoryModelDeviceScope", |s| {
        &mut s.v12.vulkan_memory_model
    })
    .requires(Feature::VulkanMemoryModelDeviceScope);
    VulkanMemoryModelDeviceScope = field("vulkanMemoryModelDeviceScope", |s| {
        &mut s.v12.vulkan_memory_model_device_scope
    })
    .requires(Feature::VulkanMemoryModel);
    /// Vulkan 1.3 barriers, enabled where the options ask for them.
    Synchronization2 = field("synchronization2 (Vulkan 1.3)", |s| &mut s.v13.synchronization2);
    /// `LocalSizeId` needs it.
    Maintenance4 = field("maintenance4 (Vulkan 1.3)", |s| &mut s.v13.maintenance4);
    ShaderIntegerDotProduct = field(
        "shaderIntegerDotProduct (VK_KHR_shader_integer_dot_product)",
        |s| if s.core13 {
            &mut s.v13.shader_integer_dot_product
        } else {
            &mut s.dot.shader_integer_dot_product
        },
    )
    .extension(DOT, true);
    ZeroInitializeWorkgroupMemory = field(
        "shaderZeroInitializeWorkgroupMemory (VK_KHR_zero_initialize_workgroup_memory)",
        |s| if s.core13 {
            &mut s.v13.shader_zero_initialize_workgroup_memory
        } else {
            &mut s.zero.shader_zero_initialize_workgroup_memory
        },
    )
    .extension(ZERO, true);
    SubgroupSizeControl = field("subgroupSizeControl", |s| if s.core13 {
        &mut s.v13.subgroup_size_control
    } else {
        &mut s.sizes.subgroup_size_control
    })
    .extension(SIZES, true);
    ComputeFullSubgroups = field("computeFullSubgroups", |s| if s.core13 {
        &mut s.v13.compute_full_subgroups
    } else {
        &mut s.sizes.compute_full_subgroups
    })
    .extension(SIZES, true);
    /// Float atomics (`VK_EXT_shader_atomic_float`): loads, stores and
    /// exchanges, and adds, of 32- and 64-bit floats in buffers and in
    /// shared memory.
    ShaderBufferFloat32Atomics = field("shaderBufferFloat32Atomics (VK_EXT_shader_atomic_float)", |s| {
        &mut s.atomic_float.shader_buffer_float32_atomics
    })
    .extension(ATOMIC_FLOAT, false);
    ShaderBufferFloat32AtomicAdd = field("shaderBufferFloat32AtomicAdd (VK_EXT_shader_atomic_float)", |s| {
        &mut s.atomic_float.shader_buffer_float32_atomic_add
    })
    .extension(ATOMIC_FLOAT, false);
    ShaderBufferFloat64Atomics = field("shaderBufferFloat64Atomics (VK_EXT_shader_atomic_float)", |s| {
        &mut s.atomic_float.shader_buffer_float64_atomics
    })
    .extension(ATOMIC_FLOAT, false);
    ShaderBufferFloat64AtomicAdd = field("shaderBufferFloat64AtomicAdd (VK_EXT_shader_atomic_float)", |s| {
        &mut s.atomic_float.shader_buffer_float64_atomic_add
    })
    .extension(ATOMIC_FLOAT, false);
    ShaderSharedFloat32Atomics = field("shaderSharedFloat32Atomics (VK_EXT_shader_atomic_float)", |s| {
        &mut s.atomic_float.shader_shared_float32_atomics
    })
    .extension(ATOMIC_FLOAT, false);
    ShaderSharedFloat32AtomicAdd = field("shaderSharedFloat32AtomicAdd (VK_EXT_shader_atomic_float)", |s| {
        &mut s.atomic_float.shader_shared_float32_atomic_add
    })
    .extension(ATOMIC_FLOAT, false);
    ShaderSharedFloat64Atomics = field("shaderSharedFloat64Atomics (VK_EXT_shader_atomic_float)", |s| {
        &mut s.atomic_float.shader_shared_float64_atomics
    })
    .extension(ATOMIC_FLOAT, false);
    ShaderSharedFloat64AtomicAdd = field("shaderSharedFloat64AtomicAdd (VK_EXT_shader_atomic_float)", |s| {
        &mut s.atomic_float.shader_shared_float64_atomic_add
    })
    .extension(ATOMIC_FLOAT, false);
    /// More float atomics (`VK_EXT_shader_atomic_float2`): 16-bit loads,
    /// stores, exchanges and adds, and min/max of 16-, 32- and 64-bit
    /// floats, in buffers and in shared memory.
    ShaderBufferFloat16Atomics = field("shaderBufferFloat16Atomics (VK_EXT_shader_atomic_float2)", |s| {
        &mut s.atomic_float2.shader_buffer_float16_atomics
    })
    .extension(ATOMIC_FLOAT2, false);
    ShaderBufferFloat16AtomicAdd = field("shaderBufferFloat16AtomicAdd (VK_EXT_shader_atomic_float2)", |s| {
        &mut s.atomic_float2.shader_buffer_float16_atomic_add
    })
    .extension(ATOMIC_FLOAT2, false);
    ShaderBufferFloat16AtomicMinMax = field("shaderBufferFloat16AtomicMinMax (VK_EXT_shader_atomic_float2)", |s| {
        &mut s.atomic_float2.shader_buffer_float16_atomic_min_max
    })
    .extension(ATOMIC_FLOAT2, false);
    ShaderBufferFloat32AtomicMinMax = field("shaderBufferFloat32AtomicMinMax (VK_EXT_shader_atomic_float2)", |s| {
        &mut s.atomic_float2.shader_buffer_float32_atomic_min_max
    })
    .extension(ATOMIC_FLOAT2, false);
    ShaderBufferFloat64AtomicMinMax = field("shaderBufferFloat64AtomicMinMax (VK_EXT_shader_atomic_float2)", |s| {
        &mut s.atomic_float2.shader_buffer_float64_atomic_min_max
    })
    .extension(ATOMIC_FLOAT2, false);
    ShaderSharedFloat16Atomics = field("shaderSharedFloat16Atomics (VK_EXT_shader_atomic_float2)", |s| {
        &mut s.atomic_float2.shader_shared_float16_atomics
    })
    .extension(ATOMIC_FLOAT2, false);
    ShaderSharedFloat16AtomicAdd = field("shaderSharedFloat16AtomicAdd (VK_EXT_shader_atomic_float2)", |s| {
        &mut s.atomic_float2.shader_shared_float16_atomic_add
    })
    .extension(ATOMIC_FLOAT2, false);
    ShaderSharedFloat16AtomicMinMax = field("shaderSharedFloat16AtomicMinMax (VK_EXT_shader_atomic_float2)", |s| {
        &mut s.atomic_float2.shader_shared_float16_atomic_min_max
    })
    .extension(ATOMIC_FLOAT2, false);
    ShaderSharedFloat32AtomicMinMax = field("shaderSharedFloat32AtomicMinMax (VK_EXT_shader_atomic_float2)", |s| {
        &mut s.atomic_float2.shader_shared_float32_atomic_min_max
    })
    .extension(ATOMIC_FLOAT2, false);
    ShaderSharedFloat64AtomicMinMax = field("shaderSharedFloat64AtomicMinMax (VK_EXT_shader_atomic_float2)", |s| {
        &mut s.atomic_float2.shader_shared_float64_atomic_min_max
    })
    .extension(ATOMIC_FLOAT2, false);
    /// `VK_KHR_shader_non_semantic_info` (core in Vulkan 1.3).
    NonSemanticInfo = Entry {
        name: "VK_KHR_shader_non_semantic_info",
        source: Source::Extension,
        extension: ext(NON_SEMANTIC, true),
        requires: None,
    };
}

impl Feature {
    /// The feature's name in the Vulkan specification.
    pub(crate) fn name(self) -> &'static str {
        self.entry().name
    }

    /// The extension to enable for it on a device of Vulkan 1.3 (`core13`)
    /// or 1.2, if any.
    pub(super) fn extension(self, core13: bool) -> Option<&'static CStr> {
        self.entry()
            .extension
            .filter(|e| !(core13 && e.core13))
            .map(|e| e.name)
    }
}
