//! Pooled host-visible buffers for staged uploads and readbacks.
//!
//! Uploads are packed into blocks one after another; the blocks an open
//! batch used travel with it when it is submitted and come back to the free
//! list when the timeline passes it. Readbacks take a whole block each,
//! which the caller returns once it has copied the data out.

use ash::vk;

use crate::batch_pool::{BatchPool, Pooled};
use crate::error::Result;
use crate::vk::memory::{MappedRange, RawBuffer};
use crate::vk::{Device, MemoryUsage};

/// The smallest block the pool allocates.
const MIN_BLOCK: u64 = 1 << 20;
/// Free blocks beyond this many bytes are destroyed rather than kept.
const MAX_FREE_BYTES: u64 = 256 << 20;
/// Offsets of packed uploads are kept to this alignment.
const ALIGN: u64 = 64;

/// A staging buffer and how much of it the open batch has used.
pub(crate) struct StagingBlock {
    pub(crate) raw: RawBuffer,
    used: u64,
}

impl StagingBlock {
    /// The block's first `len` bytes, mapped.
    #[allow(clippy::expect_used, reason = "staging memory is always mapped")]
    pub(crate) fn mapped(&self, len: u64) -> MappedRange {
        self.raw
            .mapped_range(0, len)
            .expect("staging memory is host visible (chosen so in MemoryUsage)")
    }
}

/// A place in a staging block for one upload.
pub(crate) struct StagingSlice {
    pub(crate) buffer: vk::Buffer,
    pub(crate) offset: u64,
    /// The slice's bytes, which no device work uses until the batch that
    /// records the upload is submitted.
    pub(crate) mapped: MappedRange,
}

impl Pooled for StagingBlock {
    fn reset(&mut self, _device: &Device) -> bool {
        self.used = 0;
        true
    }

    fn destroy(self, device: &Device) {
        self.raw.destroy(device);
    }

    fn bytes(&self) -> u64 {
        self.raw.size
    }
}

/// Staging blocks of one kind of memory (upload or readback), in the
/// per-batch pool.
pub(crate) struct StagingPool {
    usage: MemoryUsage,
    blocks: BatchPool<StagingBlock>,
}

impl StagingPool {
    pub(crate) fn new(usage: MemoryUsage) -> Self {
        StagingPool {
            usage,
            blocks: BatchPool::new(MAX_FREE_BYTES),
        }
    }

    /// Room for `size` bytes (more than zero) for the open batch. The memory
    /// stays valid until the blocks are recycled after the batch completes.
    pub(crate) fn alloc(&mut self, device: &Device, size: u64) -> Result<StagingSlice> {
        if let Some(block) = self.blocks.current() {
            let offset = block.used.next_multiple_of(ALIGN);
            if offset + size <= block.raw.size {
                block.used = offset + size;
                return Ok(StagingSlice {
                    buffer: block.raw.buffer,
                    offset,
                    mapped: block
                        .mapped(offset + size)
                        .sub(offset as usize, size as usize),
                });
            }
        }
        let mut block = self.acquire(device, size)?;
        block.used = size;
        let slice = StagingSlice {
            buffer: block.raw.buffer,
            offset: 0,
            mapped: block.mapped(size),
        };
        self.blocks.make_current(block);
        Ok(slice)
    }

    /// The blocks the open batch used, to travel with it.
    pub(crate) fn take_for_batch(&mut self) -> Vec<StagingBlock> {
        self.blocks.take_for_batch()
    }

    /// A whole free block of at least `size` bytes, for one readback.
    pub(crate) fn acquire(&mut self, device: &Device, size: u64) -> Result<StagingBlock> {
        let usage = self.usage;
        self.blocks.take(
            |b| b.raw.size >= size,
            || {
                let capacity = size.max(MIN_BLOCK).next_power_of_two();
                let raw = RawBuffer::new(device, capacity, usage, "a staging buffer")?;
                Ok(StagingBlock { raw, used: 0 })
            },
        )
    }

    /// Takes back blocks the device no longer uses.
    pub(crate) fn recycle(
        &mut self,
        device: &Device,
        blocks: impl IntoIterator<Item = StagingBlock>,
    ) {
        self.blocks.recycle(device, blocks);
    }

    /// Destroys the free blocks (those no batch uses).
    pub(crate) fn release_free(&mut self, device: &Device) {
        self.blocks.release_free(device);
    }

    /// Stops counting `block` as the pool's: the caller frees its buffer.
    pub(crate) fn forget(&mut self, block: StagingBlock) -> RawBuffer {
        self.blocks.forget(block).raw
    }

    /// Destroys every block the pool holds. Blocks travelling with batches
    /// must have been recycled first.
    pub(crate) fn destroy(&mut self, device: &Device) {
        self.blocks.destroy(device);
    }

    /// Blocks alive (free, in use, or travelling with batches).
    pub(crate) fn live_blocks(&self) -> usize {
        self.blocks.live()
    }
}
