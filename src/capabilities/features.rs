//! The device side of the table: every optional Vulkan feature vkcompute
//! knows, where it lives in the feature structs (or which extension it is),
//! what it requires, and the probed or enabled [`Capabilities`] of a device.
//!
//! One list (the `features!` invocation below) is read both ways: the
//! adapter reads what a device offers from the structs it filled, and
//! device creation writes what to enable into fresh ones.

use std::ffi::CStr;

use ash::vk;

/// Where a feature is found on a device.
#[derive(Clone, Copy)]
enum Source {
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
struct Entry {
    /// The name in the Vulkan specification (for messages).
    name: &'static str,
    source: Source,
    extension: Option<Extension>,
    /// A feature that must be enabled with it (vkcompute enables neither
    /// without the other where this says so).
    requires: Option<Feature>,
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

            fn entry(self) -> Entry {
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

const DOT: &CStr = ash::khr::shader_integer_dot_product::NAME;
const ZERO: &CStr = ash::khr::zero_initialize_workgroup_memory::NAME;
const SIZES: &CStr = ash::ext::subgroup_size_control::NAME;
const NON_SEMANTIC: &CStr = ash::khr::shader_non_semantic_info::NAME;
const ROBUSTNESS2: &CStr = ash::ext::robustness2::NAME;
const ATOMIC_FLOAT: &CStr = ash::ext::shader_atomic_float::NAME;

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
    fn extension(self, core13: bool) -> Option<&'static CStr> {
        self.entry()
            .extension
            .filter(|e| !(core13 && e.core13))
            .map(|e| e.name)
    }
}

/// A set of [`Feature`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FeatureSet(u64);

impl FeatureSet {
    pub(crate) fn contains(self, feature: Feature) -> bool {
        self.0 & (1 << feature as u8) != 0
    }

    pub(crate) fn insert(&mut self, feature: Feature) {
        self.0 |= 1 << feature as u8;
    }

    pub(crate) fn remove(&mut self, feature: Feature) {
        self.0 &= !(1 << feature as u8);
    }

    /// Every feature of the table.
    #[cfg(test)]
    pub(crate) fn all() -> Self {
        let mut set = FeatureSet::default();
        Feature::ALL.iter().for_each(|&f| set.insert(f));
        set
    }

    fn iter(self) -> impl Iterator<Item = Feature> {
        Feature::ALL
            .iter()
            .copied()
            .filter(move |&f| self.contains(f))
    }

    /// Without the features whose required feature is missing (repeated
    /// until none is: a requirement may itself be dropped).
    fn with_requirements_met(mut self) -> Self {
        loop {
            let unmet = self.iter().find(|f| {
                f.entry()
                    .requires
                    .is_some_and(|needed| !self.contains(needed))
            });
            match unmet {
                Some(f) => self.remove(f),
                None => return self,
            }
        }
    }
}

/// The float-controls properties, each for 16-, 32- and 64-bit floats.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FloatControls {
    pub(crate) denorm_preserve: [bool; 3],
    pub(crate) denorm_flush_to_zero: [bool; 3],
    pub(crate) signed_zero_inf_nan_preserve: [bool; 3],
    pub(crate) rounding_mode_rte: [bool; 3],
    pub(crate) rounding_mode_rtz: [bool; 3],
}

impl FloatControls {
    pub(crate) fn from_properties(p: &vk::PhysicalDeviceFloatControlsProperties<'_>) -> Self {
        let on = |b: vk::Bool32| b == vk::TRUE;
        let widths = |a, b, c| [on(a), on(b), on(c)];
        FloatControls {
            denorm_preserve: widths(
                p.shader_denorm_preserve_float16,
                p.shader_denorm_preserve_float32,
                p.shader_denorm_preserve_float64,
            ),
            denorm_flush_to_zero: widths(
                p.shader_denorm_flush_to_zero_float16,
                p.shader_denorm_flush_to_zero_float32,
                p.shader_denorm_flush_to_zero_float64,
            ),
            signed_zero_inf_nan_preserve: widths(
                p.shader_signed_zero_inf_nan_preserve_float16,
                p.shader_signed_zero_inf_nan_preserve_float32,
                p.shader_signed_zero_inf_nan_preserve_float64,
            ),
            rounding_mode_rte: widths(
                p.shader_rounding_mode_rte_float16,
                p.shader_rounding_mode_rte_float32,
                p.shader_rounding_mode_rte_float64,
            ),
            rounding_mode_rtz: widths(
                p.shader_rounding_mode_rtz_float16,
                p.shader_rounding_mode_rtz_float32,
                p.shader_rounding_mode_rtz_float64,
            ),
        }
    }
}

/// What a device can do for kernels: its optional features, float-controls
/// properties and subgroup operations. The adapter probes it once (what
/// the device offers); a device stores what it enabled of that
/// ([`enabled_when_opened`](Self::enabled_when_opened),
/// [`enabled_when_borrowed`](Self::enabled_when_borrowed)); kernels are
/// checked against the latter.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Capabilities {
    pub(crate) features: FeatureSet,
    /// Properties, not features: always in effect.
    pub(crate) float_controls: FloatControls,
    /// The stages with subgroup operations (`supportedStages`).
    pub(crate) subgroup_stages: vk::ShaderStageFlags,
    /// The classes of subgroup operations (`supportedOperations`).
    pub(crate) subgroup_operations: vk::SubgroupFeatureFlags,
}

impl Capabilities {
    pub(crate) fn has(&self, feature: Feature) -> bool {
        self.features.contains(feature)
    }

    /// What vkcompute enables on a device it opens with these offered:
    /// every feature whose requirements are offered too, synchronization2
    /// only where `synchronization2` asks for it.
    pub(crate) fn enabled_when_opened(&self, synchronization2: bool) -> Capabilities {
        let mut features = self.features;
        if !synchronization2 {
            features.remove(Feature::Synchronization2);
        }
        Capabilities {
            features: features.with_requirements_met(),
            ..*self
        }
    }

    /// What an application's device (`DeviceContext::from_raw`) is taken to
    /// have enabled, since it cannot be read back: what the physical device
    /// offers (requirements met), robust buffer access on (the caller of
    /// `from_raw` guarantees it), robustBufferAccess2 off, and buffer
    /// device addresses and synchronization2 as the application says.
    pub(crate) fn enabled_when_borrowed(
        &self,
        buffer_device_address: bool,
        synchronization2: bool,
    ) -> Capabilities {
        let mut features = self.features;
        features.insert(Feature::RobustBufferAccess);
        features.remove(Feature::RobustBufferAccess2);
        for (feature, on) in [
            (Feature::BufferDeviceAddress, buffer_device_address),
            (Feature::Synchronization2, synchronization2),
        ] {
            match on {
                true => features.insert(feature),
                false => features.remove(feature),
            }
        }
        Capabilities {
            features: features.with_requirements_met(),
            ..*self
        }
    }
}

/// One of each Vulkan struct that holds a feature of the table: filled by
/// `vkGetPhysicalDeviceFeatures2` when probing, or set from a
/// [`FeatureSet`] to enable at `vkCreateDevice`.
#[derive(Default)]
pub(crate) struct FeatureStructs {
    /// Vulkan 1.3: its core struct, and no extension, for the features
    /// 1.3 made core.
    core13: bool,
    /// The feature extensions in use: offered (probing) or to enable.
    extensions: Vec<&'static CStr>,
    v10: vk::PhysicalDeviceFeatures,
    v11: vk::PhysicalDeviceVulkan11Features<'static>,
    v12: vk::PhysicalDeviceVulkan12Features<'static>,
    v13: vk::PhysicalDeviceVulkan13Features<'static>,
    robustness2: vk::PhysicalDeviceRobustness2FeaturesEXT<'static>,
    dot: vk::PhysicalDeviceShaderIntegerDotProductFeatures<'static>,
    zero: vk::PhysicalDeviceZeroInitializeWorkgroupMemoryFeatures<'static>,
    sizes: vk::PhysicalDeviceSubgroupSizeControlFeatures<'static>,
    atomic_float: vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT<'static>,
}

impl FeatureStructs {
    /// Empty structs to probe a device of Vulkan 1.3 (`core13`) or 1.2
    /// that offers the extensions `has` says.
    pub(crate) fn probing(core13: bool, has: impl Fn(&CStr) -> bool) -> Self {
        let mut extensions = Vec::new();
        for feature in Feature::ALL {
            if let Some(name) = feature.extension(core13) {
                if has(name) && !extensions.contains(&name) {
                    extensions.push(name);
                }
            }
        }
        FeatureStructs {
            core13,
            extensions,
            ..Default::default()
        }
    }

    /// Structs that enable `features` on a device of Vulkan 1.3 (`core13`)
    /// or 1.2, with the extensions they need.
    pub(crate) fn enabling(core13: bool, features: FeatureSet) -> Self {
        let mut structs = FeatureStructs {
            core13,
            ..Default::default()
        };
        for feature in features.iter() {
            if let Some(name) = feature.extension(core13) {
                if !structs.extensions.contains(&name) {
                    structs.extensions.push(name);
                }
            }
            if let Source::Field(get) = feature.entry().source {
                *get(&mut structs) = vk::TRUE;
            }
        }
        structs
    }

    /// The features the structs hold on (after probing).
    pub(crate) fn read(&mut self) -> FeatureSet {
        let mut set = FeatureSet::default();
        for &feature in Feature::ALL {
            let on = match feature.entry().source {
                Source::Field(get) => *get(self) == vk::TRUE,
                Source::Extension => match feature.extension(self.core13) {
                    None => true,
                    Some(name) => self.extensions.contains(&name),
                },
            };
            if on {
                set.insert(feature);
            }
        }
        set
    }

    /// The feature extensions in use: those to enable with the structs.
    pub(crate) fn extensions(&self) -> &[&'static CStr] {
        &self.extensions
    }

    /// A `VkPhysicalDeviceFeatures2` (with the Vulkan 1.0 features) that
    /// chains every struct that applies: the core structs of the device's
    /// version and those of the extensions in use. For probing, pass it to
    /// `vkGetPhysicalDeviceFeatures2` and then [`read`](Self::read) (after
    /// [`set_v10`](Self::set_v10)); to enable, chain it into
    /// `VkDeviceCreateInfo`.
    pub(crate) fn chain(&mut self) -> vk::PhysicalDeviceFeatures2<'_> {
        let core13 = self.core13;
        let uses = |name: &CStr| self.extensions.contains(&name);
        let (robustness2, dot, zero, sizes, atomic_float) = (
            uses(ROBUSTNESS2),
            uses(DOT),
            uses(ZERO),
            uses(SIZES),
            uses(ATOMIC_FLOAT),
        );
        // Each struct is chained once: clear the links a previous chain left.
        for p_next in [
            &mut self.v11.p_next,
            &mut self.v12.p_next,
            &mut self.v13.p_next,
            &mut self.robustness2.p_next,
            &mut self.dot.p_next,
            &mut self.zero.p_next,
            &mut self.sizes.p_next,
            &mut self.atomic_float.p_next,
        ] {
            *p_next = std::ptr::null_mut();
        }
        let mut f2 = vk::PhysicalDeviceFeatures2::default()
            .features(self.v10)
            .push_next(&mut self.v11)
            .push_next(&mut self.v12);
        if core13 {
            f2 = f2.push_next(&mut self.v13);
        }
        if robustness2 {
            f2 = f2.push_next(&mut self.robustness2);
        }
        if dot {
            f2 = f2.push_next(&mut self.dot);
        }
        if zero {
            f2 = f2.push_next(&mut self.zero);
        }
        if sizes {
            f2 = f2.push_next(&mut self.sizes);
        }
        if atomic_float {
            f2 = f2.push_next(&mut self.atomic_float);
        }
        f2
    }

    /// Keeps the Vulkan 1.0 features a probe returned in the chain's head.
    pub(crate) fn set_v10(&mut self, v10: vk::PhysicalDeviceFeatures) {
        self.v10 = v10;
    }
}
