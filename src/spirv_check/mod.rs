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

/// What a safe load checks before it prepares `words`: without the
/// validator, that it is a shipped kernel (every other module is
/// `Error::ValidatorUnavailable`); with it, nothing yet: the validator
/// runs once, on the module the driver gets ([`check_prepared`]).
pub(crate) fn gate(words: &[u32], label: &str, vulkan_1_3: bool, trust: Trust) -> Result<()> {
    match trust {
        Trust::CallerVouches => Ok(()),
        Trust::Check if cfg!(feature = "validate") => Ok(()),
        Trust::Check => check(words, label, vulkan_1_3),
    }
}

/// Checks `prepared`, the module made from `original` for the driver
/// (specialized into `frozen`, then reduced to one entry point, sized and
/// bounded), with the validator where it is built in (without it, the
/// [`gate`] took only shipped kernels, and the preparation is trusted as
/// tested). Where it is invalid, the error says whose it is: the module's
/// own, the specialization's (a module can be valid with its defaults and
/// invalid with the values given, e.g. an array length that makes a
/// block's members overlap), or vkcompute's preparation.
pub(crate) fn check_prepared(
    prepared: &[u32],
    frozen: &[u32],
    original: &[u32],
    label: &str,
    vulkan_1_3: bool,
    trust: Trust,
) -> Result<()> {
    if trust == Trust::CallerVouches || !cfg!(feature = "validate") {
        return Ok(());
    }
    let Err(Error::InvalidSpirv { reason }) = check(prepared, label, vulkan_1_3) else {
        return Ok(());
    };
    check(original, label, vulkan_1_3)?;
    if let Err(Error::InvalidSpirv { reason }) = check(frozen, label, vulkan_1_3) {
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

/// `failure`, the error of preparing or reading `original` before it was
/// validated, or the validator's error where the module is invalid (the
/// clearer account of what is wrong with it).
pub(crate) fn explain(
    original: &[u32],
    label: &str,
    vulkan_1_3: bool,
    trust: Trust,
    failure: Error,
) -> Error {
    if trust == Trust::Check && cfg!(feature = "validate") {
        if let Err(invalid) = check(original, label, vulkan_1_3) {
            return invalid;
        }
    }
    failure
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

    /// The gate, then the check of the prepared module (here the module
    /// itself), as a safe load runs them.
    fn check_module(words: &[u32], trust: Trust) -> Result<()> {
        gate(words, "main", false, trust)?;
        check_prepared(words, words, words, "main", false, trust)
    }

    #[test]
    fn shipped_kernels_pass_and_others_need_the_validator_or_a_promise() {
        for words in crate::shaders::SHIPPED {
            assert!(check_module(words, Trust::Check).is_ok());
        }
        // A shipped module with one word changed is not a shipped module.
        let mut altered = crate::shaders::STORE.to_vec();
        let last = altered.len() - 1;
        altered[last] ^= 1;
        let checked = check_module(&altered, Trust::Check);
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
        assert!(check_module(&altered, Trust::CallerVouches).is_ok());
    }
}
