//! The one per-batch pool: resources (staging blocks, descriptor pools)
//! that the open batch takes as it needs them, that travel with the batch
//! when it is submitted, and that come back for reuse once the timeline
//! passes it. `staging.rs` and the descriptor sets below build on it.

use std::sync::Arc;

use ash::vk;

use crate::error::{Error, Result};
use crate::vk::pipeline::DescriptorPool;
use crate::vk::Device;

/// A resource a [`BatchPool`] keeps.
pub(crate) trait Pooled: Sized {
    /// Readies the resource for reuse once the batches that used it have
    /// completed; `false` where it cannot be reused and must be destroyed.
    fn reset(&mut self, device: &Device) -> bool;
    /// Destroys the resource; no pending work uses it.
    fn destroy(self, device: &Device);
    /// Bytes it holds, counted against the pool's limit of free bytes.
    fn bytes(&self) -> u64;
}

/// Resources for batches: the open batch's current one and those it
/// filled before, the free ones, and a count of all that are alive.
pub(crate) struct BatchPool<R> {
    /// The resource the open batch takes from now.
    current: Option<R>,
    /// Resources the open batch used before `current`.
    used: Vec<R>,
    free: Vec<R>,
    free_bytes: u64,
    /// Free resources beyond this many bytes are destroyed, not kept.
    max_free_bytes: u64,
    /// Resources alive in all (free, in use, travelling with batches).
    live: usize,
}

impl<R: Pooled> BatchPool<R> {
    /// An empty pool keeping at most `max_free_bytes` of free resources.
    pub(crate) fn new(max_free_bytes: u64) -> Self {
        BatchPool {
            current: None,
            used: Vec::new(),
            free: Vec::new(),
            free_bytes: 0,
            max_free_bytes,
            live: 0,
        }
    }

    /// The resource the open batch takes from now, if any.
    pub(crate) fn current(&mut self) -> Option<&mut R> {
        self.current.as_mut()
    }

    /// Makes `resource` (from [`take`](Self::take)) the open batch's
    /// current one; the one before stays with the batch.
    pub(crate) fn make_current(&mut self, resource: R) {
        if let Some(old) = self.current.replace(resource) {
            self.used.push(old);
        }
    }

    /// The smallest free resource that `fits`, else a new one from
    /// `create`: the caller's until it gives it back (to the open batch
    /// with [`make_current`](Self::make_current), or with
    /// [`recycle`](Self::recycle) or [`forget`](Self::forget)).
    pub(crate) fn take(
        &mut self,
        fits: impl Fn(&R) -> bool,
        create: impl FnOnce() -> Result<R>,
    ) -> Result<R> {
        let best = self
            .free
            .iter()
            .enumerate()
            .filter(|(_, r)| fits(r))
            .min_by_key(|(_, r)| r.bytes())
            .map(|(i, _)| i);
        if let Some(i) = best {
            let resource = self.free.swap_remove(i);
            self.free_bytes -= resource.bytes();
            return Ok(resource);
        }
        let resource = create()?;
        self.live += 1;
        Ok(resource)
    }

    /// The open batch takes no more from its current resource (it stays
    /// with the batch).
    pub(crate) fn retire_current(&mut self) {
        if let Some(current) = self.current.take() {
            self.used.push(current);
        }
    }

    /// The resources the open batch used, to travel with it.
    pub(crate) fn take_for_batch(&mut self) -> Vec<R> {
        self.retire_current();
        std::mem::take(&mut self.used)
    }

    /// Takes back resources no pending work uses: reset and kept, or
    /// destroyed where they cannot be reset or the free ones hold enough.
    pub(crate) fn recycle(&mut self, device: &Device, resources: impl IntoIterator<Item = R>) {
        for mut resource in resources {
            if resource.reset(device) && self.free_bytes + resource.bytes() <= self.max_free_bytes {
                self.free_bytes += resource.bytes();
                self.free.push(resource);
            } else {
                resource.destroy(device);
                self.live -= 1;
            }
        }
    }

    /// Destroys the free resources (those no batch uses).
    pub(crate) fn release_free(&mut self, device: &Device) {
        for resource in self.free.drain(..) {
            resource.destroy(device);
            self.live -= 1;
        }
        self.free_bytes = 0;
    }

    /// Stops counting `resource` as the pool's: the caller frees it.
    pub(crate) fn forget(&mut self, resource: R) -> R {
        self.live -= 1;
        resource
    }

    /// Destroys every resource the pool holds. Those travelling with
    /// batches must have been recycled first.
    pub(crate) fn destroy(&mut self, device: &Device) {
        let used = self.take_for_batch();
        self.recycle(device, used);
        self.release_free(device);
    }

    /// Resources alive (free, in use, or travelling with batches).
    pub(crate) fn live(&self) -> usize {
        self.live
    }
}

impl Pooled for DescriptorPool {
    fn reset(&mut self, _device: &Device) -> bool {
        DescriptorPool::reset(self)
    }

    /// Dropped: the pool destroys itself.
    fn destroy(self, _device: &Device) {}

    /// Descriptor pools are kept whatever their number (as before the
    /// pool was generic): they are small.
    fn bytes(&self) -> u64 {
        0
    }
}

/// Descriptor pools for devices without push descriptors: each batch (or
/// graph recording) allocates its sets from pools it takes as it needs
/// them; they are reset once it completes.
pub(crate) type DescriptorPools = BatchPool<DescriptorPool>;

impl BatchPool<DescriptorPool> {
    /// Descriptor pools, none yet.
    pub(crate) fn descriptors() -> Self {
        Self::new(u64::MAX)
    }

    /// A descriptor set of `layout` for the open batch.
    pub(crate) fn allocate(
        &mut self,
        device: &Arc<Device>,
        layout: vk::DescriptorSetLayout,
    ) -> Result<vk::DescriptorSet> {
        for _attempt in 0..2 {
            if self.current().is_none() {
                let pool = self.take(|_| true, || DescriptorPool::new(device))?;
                self.make_current(pool);
            }
            #[allow(clippy::expect_used, reason = "made current just above")]
            let pool = self.current().expect("made current above");
            if let Some(set) = pool.allocate(layout)? {
                return Ok(set);
            }
            // The pool is full: the next attempt takes another.
            self.retire_current();
        }
        Err(Error::vk(
            "vkAllocateDescriptorSets",
            vk::Result::ERROR_OUT_OF_POOL_MEMORY,
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::tests::validated_context;

    /// A resource that counts its resets and knows whether it can be reset.
    struct Block {
        bytes: u64,
        resets: u32,
        resettable: bool,
    }

    impl Pooled for Block {
        fn reset(&mut self, _device: &Device) -> bool {
            self.resets += 1;
            self.resettable
        }
        fn destroy(self, _device: &Device) {}
        fn bytes(&self) -> u64 {
            self.bytes
        }
    }

    fn block(bytes: u64) -> Result<Block> {
        Ok(Block {
            bytes,
            resets: 0,
            resettable: true,
        })
    }

    /// Resources go to the open batch, travel with it, come back reset, are
    /// reused best fit first, and are destroyed past the byte limit or where
    /// they cannot be reset; the live count follows every step.
    #[test]
    fn resources_travel_with_batches_and_come_back() {
        let ctx = validated_context();
        let device = &ctx.stream.device;
        let mut pool = BatchPool::new(100);
        for bytes in [64, 32, 16] {
            let b = pool.take(|_| false, || block(bytes)).unwrap();
            pool.make_current(b);
        }
        assert_eq!(pool.live(), 3);
        let batch = pool.take_for_batch();
        assert_eq!(batch.len(), 3);
        assert!(pool.current().is_none() && pool.take_for_batch().is_empty());
        // 64 + 32 fit under the limit of 100; 16 more would not.
        pool.recycle(device, batch);
        assert_eq!(pool.live(), 2);
        // The smallest that fits comes back, reset once.
        let b = pool.take(|b| b.bytes >= 20, || block(999)).unwrap();
        assert_eq!((b.bytes, b.resets), (32, 1));
        // None fits: a new one is made.
        let big = pool.take(|b| b.bytes >= 100, || block(128)).unwrap();
        assert_eq!((big.bytes, pool.live()), (128, 3));
        let mut stuck = pool.forget(big);
        assert_eq!(pool.live(), 2);
        stuck.resettable = false;
        // Taken back into the count through `take`, then not reusable.
        let stuck = pool.take(|_| false, || Ok(stuck)).unwrap();
        pool.recycle(device, [stuck, b]);
        assert_eq!(pool.live(), 2);
        pool.destroy(device);
        assert_eq!(pool.live(), 0);
    }
}
