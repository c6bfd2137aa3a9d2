//! The probed or enabled [`Capabilities`] of a device, and the Vulkan
//! feature structs that the table of `features.rs` reads and writes.

use std::ffi::CStr;

use ash::vk;

use super::features::{
    Feature, Source, ATOMIC_FLOAT, ATOMIC_FLOAT2, DOT, ROBUSTNESS2, SIZES, ZERO,
};

/// A set of [`Feature`]s.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct FeatureSet(u64);

// One bit of the set per feature of the table.
const _: () = assert!(Feature::ALL.len() <= 64);

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
    pub(super) core13: bool,
    /// The feature extensions in use: offered (probing) or to enable.
    extensions: Vec<&'static CStr>,
    pub(super) v10: vk::PhysicalDeviceFeatures,
    pub(super) v11: vk::PhysicalDeviceVulkan11Features<'static>,
    pub(super) v12: vk::PhysicalDeviceVulkan12Features<'static>,
    pub(super) v13: vk::PhysicalDeviceVulkan13Features<'static>,
    pub(super) robustness2: vk::PhysicalDeviceRobustness2FeaturesEXT<'static>,
    pub(super) dot: vk::PhysicalDeviceShaderIntegerDotProductFeatures<'static>,
    pub(super) zero: vk::PhysicalDeviceZeroInitializeWorkgroupMemoryFeatures<'static>,
    pub(super) sizes: vk::PhysicalDeviceSubgroupSizeControlFeatures<'static>,
    pub(super) atomic_float: vk::PhysicalDeviceShaderAtomicFloatFeaturesEXT<'static>,
    pub(super) atomic_float2: vk::PhysicalDeviceShaderAtomicFloat2FeaturesEXT<'static>,
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
        let (robustness2, dot, zero, sizes, atomic_float, atomic_float2) = (
            uses(ROBUSTNESS2),
            uses(DOT),
            uses(ZERO),
            uses(SIZES),
            uses(ATOMIC_FLOAT),
            uses(ATOMIC_FLOAT2),
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
            &mut self.atomic_float2.p_next,
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
        if atomic_float2 {
            f2 = f2.push_next(&mut self.atomic_float2);
        }
        f2
    }

    /// Keeps the Vulkan 1.0 features a probe returned in the chain's head.
    pub(crate) fn set_v10(&mut self, v10: vk::PhysicalDeviceFeatures) {
        self.v10 = v10;
    }
}
