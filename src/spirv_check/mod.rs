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

/// Checks `prepared`, the module made from `original` for the driver
/// (specialized into `frozen`, then reduced to one entry point, sized and
/// bounded), as [`check_module`] checks a module. Where it is invalid, the
/// error says whose it is: the specialization's (a module can be valid with
/// its defaults and invalid with the values given, e.g. an array length
/// that makes a block's members overlap), or vkcompute's own preparation.
pub(crate) fn check_prepared(
    prepared: &[u32],
    frozen: &[u32],
    original: &[u32],
    label: &str,
    vulkan_1_3: bool,
    trust: Trust,
) -> Result<()> {
    match trust {
        Trust::CallerVouches => Ok(()),
        Trust::Check => check_prepared_module(prepared, frozen, original, label, vulkan_1_3),
    }
}

#[cfg(feature = "validate")]
fn check_prepared_module(
    prepared: &[u32],
    frozen: &[u32],
    _original: &[u32],
    _label: &str,
    vulkan_1_3: bool,
) -> Result<()> {
    use vkcompute_spirv::validate::validate;
    let Err(reason) = validate(prepared, vulkan_1_3) else {
        return Ok(());
    };
    if let Err(reason) = validate(frozen, vulkan_1_3) {
        return Err(Error::InvalidSpirv {
            reason: format!("with its specialization constants set: {reason}"),
        });
    }
    Err(Error::InvalidSpirv {
        reason: format!(
            "vkcompute's preparation of the module (bounds, entry point) made an invalid module \
             (a vkcompute bug; please report it): {reason}"
        ),
    })
}

/// Without the validator only the shipped kernels load, and their
/// specialization constants are workgroup sizes, which the loader checks
/// against the device's limits; the preparation is trusted as tested.
#[cfg(not(feature = "validate"))]
fn check_prepared_module(
    _prepared: &[u32],
    _frozen: &[u32],
    original: &[u32],
    label: &str,
    vulkan_1_3: bool,
) -> Result<()> {
    check(original, label, vulkan_1_3)
}

#[cfg(feature = "validate")]
fn check(words: &[u32], _label: &str, vulkan_1_3: bool) -> Result<()> {
    vkcompute_spirv::validate::validate(words, vulkan_1_3)
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
mod model_tests;

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
