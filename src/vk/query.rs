//! Timestamp queries: a pool of two, read after the work between them.

use std::sync::Arc;

use ash::vk;

use super::device::Device;
use crate::error::{Result, VkResultExt};

/// A pool of two timestamp queries (start and end), destroyed when the
/// last reference goes. Whoever records a query into a batch keeps an
/// `Arc` of the pool with that batch until it completes.
pub(crate) struct TimestampQueries {
    device: Arc<Device>,
    raw: vk::QueryPool,
}

impl TimestampQueries {
    pub(crate) fn new(device: &Arc<Device>) -> Result<Self> {
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(2);
        // SAFETY: a valid create info on a live device.
        let raw =
            unsafe { device.raw.create_query_pool(&info, None) }.during("vkCreateQueryPool")?;
        Ok(TimestampQueries {
            device: device.clone(),
            raw,
        })
    }

    /// Records into `cmd` (a command buffer of the pool's device being
    /// recorded outside any render pass, whose batch keeps the pool alive)
    /// a reset of both queries and the start timestamp.
    pub(crate) fn record_start(&self, cmd: vk::CommandBuffer) {
        let raw = &self.device.raw;
        // SAFETY: `cmd` is recording outside any render pass (the caller's
        // part, as for every recorder of the crate); both queries exist and
        // the pool outlives the batch, which holds a reference to it.
        unsafe {
            raw.cmd_reset_query_pool(cmd, self.raw, 0, 2);
            raw.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, self.raw, 0);
        }
    }

    /// Records into `cmd` (as for [`record_start`](Self::record_start), in
    /// a later batch or later in the same one) the end timestamp, taken
    /// once every earlier command has completed.
    pub(crate) fn record_end(&self, cmd: vk::CommandBuffer) {
        // SAFETY: `cmd` is recording outside any render pass; query 1
        // exists and the pool outlives the batch, which holds a reference
        // to it. BOTTOM_OF_PIPE waits for all earlier commands.
        unsafe {
            self.device.raw.cmd_write_timestamp(
                cmd,
                vk::PipelineStageFlags::BOTTOM_OF_PIPE,
                self.raw,
                1,
            )
        };
    }

    /// The start and end timestamps, in ticks, once the batches that
    /// recorded both have completed.
    pub(crate) fn read(&self) -> Result<[u64; 2]> {
        let mut ticks = [0u64; 2];
        // SAFETY: the pool has two queries of 64-bit results; the caller
        // reads only after the work that reset and wrote both completed
        // (`execution_time` synchronizes first), so neither is unset.
        unsafe {
            self.device.raw.get_query_pool_results(
                self.raw,
                0,
                &mut ticks,
                vk::QueryResultFlags::TYPE_64,
            )
        }
        .during("vkGetQueryPoolResults")?;
        Ok(ticks)
    }
}

impl Drop for TimestampQueries {
    fn drop(&mut self) {
        // SAFETY: every batch that records a query holds a reference until it
        // completes, so no pending work uses the pool once the last one goes.
        unsafe { self.device.raw.destroy_query_pool(self.raw, None) };
    }
}
