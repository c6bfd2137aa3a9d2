//! `KernelBuilder`: the options a kernel is loaded with (specialization
//! constants, entry point, label, subgroup size, pointer addressing), for a
//! module given as SPIR-V or compiled from GLSL.

use std::borrow::Cow;

use crate::context::DeviceContext;
use crate::error::Result;
use crate::spirv_check::Trust;

use super::cache::Load;
use super::{Kernel, SpecValue};

/// Loads a [`Kernel`] with specialization constants: see [`Kernel::builder`].
#[derive(Clone)]
#[must_use = "a builder loads nothing until build"]
pub struct KernelBuilder<'a> {
    /// The module, or why its bytes are no module (reported by `build`).
    words: Result<Cow<'a, [u32]>>,
    entry: String,
    specialization: Vec<(u32, SpecValue)>,
    pointers: bool,
    subgroup_size: Option<u32>,
    unchecked_indices: bool,
    label: Option<String>,
}

impl KernelBuilder<'static> {
    /// The builder of a module compiled from GLSL, or why it is none.
    #[cfg(feature = "glsl")]
    pub(crate) fn compiled(words: Result<Vec<u32>>) -> Self {
        KernelBuilder::of(words.map(Cow::Owned))
    }
}

impl<'a> KernelBuilder<'a> {
    /// The builder of `words` with every option at its default.
    pub(super) fn of(words: Result<Cow<'a, [u32]>>) -> Self {
        KernelBuilder {
            words,
            entry: "main".to_string(),
            specialization: Vec::new(),
            pointers: false,
            subgroup_size: None,
            unchecked_indices: false,
            label: None,
        }
    }

    /// The module's words, without loading it: those of the SPIR-V given
    /// to [`Kernel::builder`], or those a
    /// `GlslSource::compile` (feature `glsl`) produced (or
    /// its compile error).
    pub fn into_words(self) -> Result<Vec<u32>> {
        self.words.map(Cow::into_owned)
    }

    /// What errors, `Debug` and traces call the kernel (default: its entry
    /// point's name). Loading the same module with another label shares
    /// the pipeline.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = Some(label.into());
        self
    }

    /// The entry point's name (default `main`). A module compiled from
    /// GLSL has the name `GlslSource::entry`
    /// gave the compiler (feature `glsl`), which `compile` sets here.
    pub fn entry(mut self, name: &str) -> Self {
        self.entry = name.to_string();
        self
    }

    /// Sets specialization constant `id` (GLSL `constant_id`, or the id in
    /// `local_size_x_id`) to `value`.
    pub fn specialize(mut self, id: u32, value: impl Into<SpecValue>) -> Self {
        self.specialization.retain(|(i, _)| *i != id);
        self.specialization.push((id, value.into()));
        self
    }

    /// Accepts a module that addresses memory through pointers (buffer
    /// device addresses: GLSL `GL_EXT_buffer_reference`, the
    /// `PhysicalStorageBufferAddresses` capability, pointer casts, variable
    /// pointers), which [`Kernel::new`] refuses.
    ///
    /// Loading such a kernel is harmless; running it is not, since its
    /// addresses come with each dispatch. So the kernel this builds is
    /// refused by [`DeviceContext::enqueue_function`] and runs only through
    /// the `unsafe` [`DeviceContext::enqueue_function_with_addresses`],
    /// whose caller lists the buffers the kernel reaches by address and
    /// answers for what it touches.
    pub fn allow_pointer_addressing(mut self) -> Self {
        self.pointers = true;
        self
    }

    /// Requires the kernel to run with subgroups of `size` invocations
    /// (`VkPipelineShaderStageRequiredSubgroupSizeCreateInfo`, Vulkan 1.3 or
    /// `VK_EXT_subgroup_size_control`). Loading fails with
    /// [`Error::UnsupportedKernel`](crate::Error::UnsupportedKernel) where
    /// the device cannot require a subgroup size for compute shaders, where
    /// `size` is not a power of two within
    /// [`SubgroupInfo::min_size`](crate::device::SubgroupInfo::min_size) ..=
    /// [`max_size`](crate::device::SubgroupInfo::max_size), or where the workgroup
    /// holds more than `maxComputeWorkgroupSubgroups` subgroups of that size.
    pub fn subgroup_size(mut self, size: u32) -> Self {
        self.subgroup_size = Some(size);
        self
    }

    /// Loads the kernel without bounding its indices: the pipeline runs
    /// the module as given (specialized), where every other load clamps
    /// each dynamic index into workgroup, function, private and
    /// push-constant arrays, and each dynamic vector or matrix component,
    /// into range (see the crate's "Kernels" documentation). For measuring
    /// what the bounds cost, or for a kernel whose indices are proven in
    /// range. Storage-buffer accesses stay bounded by `robustBufferAccess`.
    ///
    /// # Safety
    ///
    /// Every dynamic index the kernel computes into an array of fixed
    /// length, a vector or a matrix (outside storage buffers) must be in
    /// range on every dispatch: an index out of range reads or writes
    /// memory outside the kernel's own, which is undefined behaviour (on
    /// lavapipe a workgroup index out of range crashes the process).
    #[allow(
        unsafe_code,
        reason = "a public entry point whose caller vouches for the kernel's indices"
    )]
    pub unsafe fn unchecked_indices(mut self) -> Self {
        self.unchecked_indices = true;
        self
    }

    /// Loads the kernel on `ctx`'s device.
    ///
    /// Without feature `validate`, only the kernels of
    /// [`shaders`](crate::shaders) load this way: see
    /// [`build_unvalidated`](Self::build_unvalidated).
    pub fn build(self, ctx: &DeviceContext) -> Result<Kernel> {
        self.load(ctx, Trust::Check)
    }

    /// Loads the kernel like [`build`](Self::build), but without the
    /// SPIR-V validator (which only builds with feature `validate` have);
    /// every other check still runs.
    ///
    /// # Safety
    ///
    /// The module must be valid SPIR-V for the Vulkan version of `ctx`'s
    /// device, as `spirv-val --target-env vulkan1.2` (or `vulkan1.3`) would
    /// accept it: invalid SPIR-V handed to the driver is undefined behaviour.
    #[allow(
        unsafe_code,
        reason = "a public entry point whose caller vouches for the module"
    )]
    pub unsafe fn build_unvalidated(self, ctx: &DeviceContext) -> Result<Kernel> {
        self.load(ctx, Trust::CallerVouches)
    }

    fn load(self, ctx: &DeviceContext, trust: Trust) -> Result<Kernel> {
        let mut spec = self.specialization.clone();
        spec.sort_by_key(|(id, _)| *id);
        Kernel::load(
            ctx,
            &self.words?,
            &self.entry,
            Load {
                specialization: spec,
                pointers: self.pointers,
                subgroup_size: self.subgroup_size,
                trust,
                unchecked_indices: self.unchecked_indices,
                array_lengths: Vec::new(),
                label: self.label,
            },
        )
    }
}
