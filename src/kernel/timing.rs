//! `DeviceContext::execution_time`: device time measured with timestamp
//! queries.

use std::sync::Arc;
use std::time::Duration;

use ash::vk;

use crate::context::DeviceContext;
use crate::error::{Error, Result, VkResultExt};
use crate::vk::Device;

impl DeviceContext {
    /// The device time taken by the work `f` enqueues, run `iters` times:
    /// the total, measured with timestamp queries around it (the stream is
    /// synchronized before and after).
    pub fn execution_time(
        &self,
        mut f: impl FnMut(&DeviceContext) -> Result<()>,
        iters: usize,
    ) -> Result<Duration> {
        let device = &self.shared.device;
        let valid_bits = device
            .adapter
            .queue_family
            .map_or(0, |f| f.timestamp_valid_bits);
        if valid_bits == 0 {
            return Err(Error::Unsupported {
                what: "timestamp queries on the compute queue".into(),
                device: device.name().to_string(),
            });
        }
        let pool = Arc::new(QueryPool::new(device)?);
        // Every batch that records a query keeps the pool alive, so it is
        // destroyed only once no submitted work uses it, even where `f`
        // fails or panics.
        let ticks = self.time_between(&pool, &mut f, iters)?;
        let mask = if valid_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << valid_bits) - 1
        };
        let elapsed = (ticks[1] & mask).wrapping_sub(ticks[0] & mask) & mask;
        let nanos = elapsed as f64 * device.limits().timestamp_period as f64;
        Ok(Duration::from_nanos(nanos.round() as u64))
    }

    fn time_between(
        &self,
        pool: &Arc<QueryPool>,
        f: &mut impl FnMut(&DeviceContext) -> Result<()>,
        iters: usize,
    ) -> Result<[u64; 2]> {
        let raw = &self.shared.device.raw;
        self.synchronize()?;
        self.shared.record("execution_time", &[], |stream, cmd| {
            stream.keep_alive(pool.clone());
            // SAFETY: `cmd` is recording outside any render pass; the pool
            // has two queries and lives until the batch completes (kept above).
            unsafe {
                raw.cmd_reset_query_pool(cmd, pool.raw, 0, 2);
                raw.cmd_write_timestamp(cmd, vk::PipelineStageFlags::TOP_OF_PIPE, pool.raw, 0);
            }
            Ok(())
        })?;
        for _ in 0..iters {
            f(self)?;
        }
        self.shared.record("execution_time", &[], |stream, cmd| {
            stream.keep_alive(pool.clone());
            // SAFETY: `cmd` is recording outside any render pass; query 1
            // exists and the pool lives until the batch completes (kept
            // above). BOTTOM_OF_PIPE waits for all earlier commands.
            unsafe {
                raw.cmd_write_timestamp(cmd, vk::PipelineStageFlags::BOTTOM_OF_PIPE, pool.raw, 1)
            };
            Ok(())
        })?;
        self.synchronize()?;
        let mut ticks = [0u64; 2];
        // SAFETY: both queries were written by work that has completed
        // (`synchronize` waited for it).
        unsafe {
            raw.get_query_pool_results(pool.raw, 0, &mut ticks, vk::QueryResultFlags::TYPE_64)
        }
        .during("vkGetQueryPoolResults")?;
        Ok(ticks)
    }
}

/// A pool of two timestamp queries, destroyed when the last reference
/// goes: `execution_time`'s and those of the batches that use it.
struct QueryPool {
    device: Arc<Device>,
    raw: vk::QueryPool,
}

impl QueryPool {
    fn new(device: &Arc<Device>) -> Result<Self> {
        let info = vk::QueryPoolCreateInfo::default()
            .query_type(vk::QueryType::TIMESTAMP)
            .query_count(2);
        // SAFETY: a valid create info on a live device.
        let raw =
            unsafe { device.raw.create_query_pool(&info, None) }.during("vkCreateQueryPool")?;
        Ok(QueryPool {
            device: device.clone(),
            raw,
        })
    }
}

impl Drop for QueryPool {
    fn drop(&mut self) {
        // SAFETY: every batch that records a query holds a reference until it
        // completes, so no pending work uses the pool once the last one goes.
        unsafe { self.device.raw.destroy_query_pool(self.raw, None) };
    }
}
