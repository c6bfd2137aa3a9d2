//! What the safe kernel loaders may hand to the driver: a module that passed
//! SPIRV-Tools (feature `validate`), one of the shipped kernels (validated
//! when they were compiled, see build.rs), or one the caller vouched for
//! through an `unsafe` loader.

use crate::error::{Error, Result};

/// Who answers for a module's validity.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Trust {
    /// The safe API: vkcompute checks the module.
    #[default]
    Check,
    /// An `unsafe` loader: the caller guarantees the module is valid.
    CallerVouches,
}

/// Checks that `words` (the kernel `label` names) may reach the driver.
pub(crate) fn check_module(
    words: &[u32],
    label: &str,
    vulkan_1_3: bool,
    trust: Trust,
) -> Result<()> {
    match trust {
        Trust::CallerVouches => Ok(()),
        Trust::Check => check(words, label, vulkan_1_3),
    }
}

/// Checks `frozen`, the module `original` with its specialization constants
/// set (a module can be valid with its defaults and invalid with the values
/// given), as [`check_module`] checks a module.
pub(crate) fn check_specialized(
    frozen: &[u32],
    original: &[u32],
    label: &str,
    vulkan_1_3: bool,
    trust: Trust,
) -> Result<()> {
    match trust {
        Trust::CallerVouches => Ok(()),
        Trust::Check => check_frozen(frozen, original, label, vulkan_1_3),
    }
}

#[cfg(feature = "validate")]
fn check_frozen(frozen: &[u32], _original: &[u32], _label: &str, vulkan_1_3: bool) -> Result<()> {
    crate::vk::spirv_val::validate(frozen, vulkan_1_3).map_err(|reason| Error::InvalidSpirv {
        reason: format!("with its specialization constants set: {reason}"),
    })
}

/// Without the validator only the shipped kernels load, and their
/// specialization constants are workgroup sizes, which the loader checks
/// against the device's limits.
#[cfg(not(feature = "validate"))]
fn check_frozen(_frozen: &[u32], original: &[u32], label: &str, vulkan_1_3: bool) -> Result<()> {
    check(original, label, vulkan_1_3)
}

/// Checks the module that bounds instrumentation (src/bounds) made, where
/// the validator is built in: an invalid one is a bug of vkcompute's, and
/// is refused rather than handed to the driver. Without the validator the
/// pass is trusted as tested.
pub(crate) fn check_instrumented(words: &[u32], vulkan_1_3: bool) -> Result<()> {
    #[cfg(feature = "validate")]
    crate::vk::spirv_val::validate(words, vulkan_1_3).map_err(|reason| Error::InvalidSpirv {
        reason: format!(
            "vkcompute's bounds instrumentation made an invalid module (a vkcompute bug; \
             please report it): {reason}"
        ),
    })?;
    #[cfg(not(feature = "validate"))]
    let _ = (words, vulkan_1_3);
    Ok(())
}

#[cfg(feature = "validate")]
fn check(words: &[u32], _label: &str, vulkan_1_3: bool) -> Result<()> {
    crate::vk::spirv_val::validate(words, vulkan_1_3)
        .map_err(|reason| Error::InvalidSpirv { reason })
}

#[cfg(not(feature = "validate"))]
fn check(words: &[u32], label: &str, _vulkan_1_3: bool) -> Result<()> {
    if crate::shaders::SHIPPED.contains(&words) {
        Ok(())
    } else {
        Err(Error::ValidatorUnavailable {
            kernel: label.to_string(),
        })
    }
}

#[cfg(test)]
mod bounds_tests;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_kernels_pass_and_others_need_the_validator_or_a_promise() {
        for words in crate::shaders::SHIPPED {
            assert!(check_module(words, "main", false, Trust::Check).is_ok());
        }
        // A shipped module with one word changed is not a shipped module.
        let mut altered = crate::shaders::STORE.to_vec();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        let checked = check_module(&altered, "main", false, Trust::Check);
        if cfg!(feature = "validate") {
            assert!(
                matches!(checked, Err(Error::InvalidSpirv { .. })),
                "{checked:?}"
            );
        } else {
            assert!(
                matches!(checked, Err(Error::ValidatorUnavailable { .. })),
                "{checked:?}"
            );
        }
        assert!(check_module(&altered, "main", false, Trust::CallerVouches).is_ok());
    }
}
