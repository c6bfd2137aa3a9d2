//! A kernel with runtime-sized arrays of buffers (`bufs[]`) has one
//! pipeline per length it is dispatched with: the module rewritten with
//! that length (`bounds/arrays.rs`), built at the first dispatch of the
//! length and then kept with the kernel.

use std::sync::Arc;

use super::cache::Load;
use super::{Kernel, KernelPipeline};
use crate::context::DeviceContext;
use crate::error::Result;

impl KernelPipeline {
    /// Whether it declares a runtime-sized array of buffers.
    pub(crate) fn has_runtime_arrays(&self) -> bool {
        self.interface.bindings.iter().any(|b| b.runtime_sized)
    }

    /// The pipeline of this kernel whose runtime-sized arrays of buffers
    /// have `lengths` (in binding order): this one where they are its own,
    /// else one loaded (once, then kept) on `ctx`'s device.
    pub(crate) fn variant(
        self: &Arc<Self>,
        ctx: &DeviceContext,
        label: &Arc<str>,
        lengths: &[u32],
    ) -> Result<Arc<KernelPipeline>> {
        let own = self
            .interface
            .bindings
            .iter()
            .zip(&self.counts)
            .filter(|(b, _)| b.runtime_sized)
            .map(|(_, &n)| n);
        if own.eq(lengths.iter().copied()) {
            return Ok(self.clone());
        }
        let mut variants = self.variants.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, hit)) = variants.iter().find(|(l, _)| l == lengths) {
            return Ok(hit.clone());
        }
        let array_lengths = self
            .interface
            .bindings
            .iter()
            .filter(|b| b.runtime_sized)
            .zip(lengths.iter().copied())
            .map(|(b, n)| (b.set, b.binding, n))
            .collect();
        let load = Load {
            specialization: self.specialization.clone(),
            pointers: self.pointers,
            subgroup_size: self.subgroup_size,
            trust: self.trust,
            unchecked_indices: self.unchecked_indices,
            array_lengths,
            label: Some(label.to_string()),
        };
        let kernel = Kernel::load(ctx, &self.words, &self.entry, load)?;
        variants.push((lengths.to_vec(), kernel.inner.clone()));
        Ok(kernel.inner)
    }
}
