//! The kernels loaded in this process, reused where the same module, entry
//! point and specialization are loaded again on a device.
//!
//! The lock is held only to look up and to insert: building a kernel
//! (validation, reflection, capability checks, pipeline creation) happens
//! with no lock held, so one thread's build holds up no other thread's
//! load. Two threads that load the same kernel at once both build it; the
//! one that inserts second finds the first one's kernel and uses it,
//! dropping its own, so every handle to that kernel shares one pipeline.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use super::KernelPipeline;
use crate::error::Result;
use crate::spirv_check::Trust;
use vkcompute_spirv::SpecValue;

/// How a kernel is loaded beside its module and entry point.
#[derive(Clone, Default)]
pub(super) struct Load {
    /// Specialization constants (id, value), sorted by id.
    pub(super) specialization: Vec<(u32, SpecValue)>,
    pub(super) pointers: bool,
    pub(super) subgroup_size: Option<u32>,
    /// Who answers for the module's validity.
    pub(super) trust: Trust,
    /// Loaded without bounds on its indices (the caller answers for them).
    pub(super) unchecked_indices: bool,
    /// The length of each runtime-sized array of buffers (set, binding,
    /// length), in (set, binding) order; 1 for any not named.
    pub(super) array_lengths: Vec<(u32, u32, u32)>,
    /// The kernel's label (not part of what identifies its pipeline).
    pub(super) label: Option<String>,
}

/// Every kernel loaded and still held, on every device. A leaf lock:
/// nothing else is locked while it is held.
static LOADED: Mutex<Vec<Weak<KernelPipeline>>> = Mutex::new(Vec::new());

/// What identifies a loaded kernel.
pub(super) struct Key<'a> {
    /// The device's id (`vk::Device::id`).
    pub(super) device: u64,
    pub(super) words: &'a [u32],
    pub(super) entry: &'a str,
    /// Specialization, pointer addressing and subgroup size (not who vouches
    /// for the module: the words are the same either way).
    pub(super) load: &'a Load,
}

impl KernelPipeline {
    fn is(&self, key: &Key<'_>) -> bool {
        self.device.id == key.device
            && self.entry == key.entry
            && self.pointers == key.load.pointers
            && self.subgroup_size == key.load.subgroup_size
            && self.unchecked_indices == key.load.unchecked_indices
            && same_values(&self.specialization, &key.load.specialization)
            && self.array_lengths == key.load.array_lengths
            && self.words == key.words
    }
}

/// The loaded kernel `key` names, or else the one `build` makes, cached.
pub(super) fn get_or_build(
    key: &Key<'_>,
    build: impl FnOnce() -> Result<KernelPipeline>,
) -> Result<Arc<KernelPipeline>> {
    if let Some(hit) = find(&mut loaded(), key) {
        return Ok(hit);
    }
    let built = Arc::new(build()?);
    let mut loaded = loaded();
    if let Some(hit) = find(&mut loaded, key) {
        // Another thread built the same kernel meanwhile. `built` drops
        // after the lock is released (locals drop in reverse order).
        return Ok(hit);
    }
    loaded.push(Arc::downgrade(&built));
    Ok(built)
}

/// The list locked. A poisoned lock only means a thread panicked while
/// holding it; the list of weak references stays valid.
fn loaded() -> MutexGuard<'static, Vec<Weak<KernelPipeline>>> {
    LOADED.lock().unwrap_or_else(|e| e.into_inner())
}

/// Drops the entries of kernels no longer held, and finds `key`'s.
fn find(loaded: &mut Vec<Weak<KernelPipeline>>, key: &Key<'_>) -> Option<Arc<KernelPipeline>> {
    loaded.retain(|k| k.strong_count() > 0);
    loaded.iter().filter_map(Weak::upgrade).find(|k| k.is(key))
}

/// Whether two specializations set the same ids to the same bits (not
/// `==` on floats: `-0.0` and `0.0` are different constants, and a NaN is
/// the same NaN).
fn same_values(a: &[(u32, SpecValue)], b: &[(u32, SpecValue)]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|((i, x), (j, y))| i == j && x.bytes() == y.bytes())
}
