//! What a device can do and what a module needs of it: the one table of
//! optional device features (`features.rs`: where each lives in the Vulkan
//! structs, what it requires), and the one that maps SPIR-V capabilities,
//! SPIR-V extensions and feature-dependent constructs to those features
//! and the properties behind them (`spirv.rs`).
//!
//! The adapter probes a device's [`Capabilities`] once from the first
//! table; the device enables every optional feature of it the device has
//! ([`Capabilities::enabled_when_opened`]), and loading a kernel checks
//! each of its needs against what is enabled ([`check`]); a capability or
//! extension missing from the table is refused, since its feature could
//! not be enabled.
//!
//! A pure table below the Vulkan layer: it imports nothing of the crate.

mod features;
mod spirv;
mod structs;
#[cfg(test)]
mod tests;

use ash::vk;

pub(crate) use features::Feature;
pub(crate) use structs::{Capabilities, FeatureStructs, FloatControls};

pub(crate) use spirv::{
    float_atomic, FloatAtomicOp, CAPABILITIES, EXTENSIONS, FLOAT_MODES, INT64_ATOMICS_BUFFER,
    INT64_ATOMICS_SHARED, LOCAL_SIZE_ID, ZERO_INITIALIZED_WORKGROUP,
};

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
    /// Float atomics: (width, what it does, whether on shared memory).
    pub(crate) float_atomics: &'a [(u32, FloatAtomicOp, bool)],
    /// Float-controls execution modes: (mode, float width). The
    /// capabilities that come with them need nothing; each mode needs its
    /// property for its width.
    pub(crate) float_modes: &'a [(u32, u32)],
}

/// Checks every need of `declared` against what a device enabled; the
/// error says which capability (or extension, or construct) needs which
/// missing feature.
pub(crate) fn check(
    declared: &Declared<'_>,
    enabled: &Capabilities,
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
    for &(width, op, shared) in declared.float_atomics {
        let what = format!(
            "a {width}-bit float atomic {} on {}",
            match op {
                FloatAtomicOp::Add => "add",
                FloatAtomicOp::MinMax => "min or max",
                FloatAtomicOp::Exchange => "load, store or exchange",
            },
            if shared { "shared memory" } else { "a buffer" }
        );
        match float_atomic(width, op, shared) {
            Some(f) => needs.push((what, Need::Feature(f))),
            None => return Err(format!("{what} is not something Vulkan offers")),
        }
    }
    for &(mode, width) in declared.float_modes {
        let Some((_, name, control)) = FLOAT_MODES.iter().find(|(m, _, _)| *m == mode) else {
            continue;
        };
        if !control.supported(&enabled.float_controls, width) {
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
            Need::Feature(f) => (!enabled.has(f)).then(|| f.name().to_string()),
            Need::AnyOf(list) => (!list.iter().any(|&f| enabled.has(f))).then(|| {
                let names: Vec<&str> = list.iter().map(|f| f.name()).collect();
                format!("one of {}", names.join(", "))
            }),
            Need::Subgroup(ops) => (!enabled
                .subgroup_stages
                .contains(vk::ShaderStageFlags::COMPUTE)
                || !enabled.subgroup_operations.contains(ops))
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
