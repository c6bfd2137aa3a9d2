//! `DeviceContext::execution_time`: device time measured with timestamp
//! queries.

use std::sync::Arc;
use std::time::Duration;

use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::recorder::Command;
use crate::vk::command::TimestampPool;

/// Timing work on the device.
impl DeviceContext {
    /// The device time taken by the work `f` enqueues, run `iters` times:
    /// the total, measured with timestamp queries around it (the stream is
    /// synchronized before and after).
    pub fn execution_time(
        &self,
        mut f: impl FnMut(&DeviceContext) -> Result<()>,
        iters: usize,
    ) -> Result<Duration> {
        let device = &self.stream.device;
        if TimestampPool::valid_bits(device) == 0 {
            return Err(Error::Unsupported {
                what: "timestamp queries on the compute queue".into(),
                device: device.name().to_string(),
            });
        }
        let queries = Arc::new(TimestampPool::new(device, 1)?);
        // Every batch that records a query keeps the pool alive, so it is
        // destroyed only once no submitted work uses it, even where `f`
        // fails or panics.
        let ticks = self.time_between(&queries, &mut f, iters)?;
        let mask = TimestampPool::tick_mask(device);
        let elapsed = (ticks[1] & mask).wrapping_sub(ticks[0] & mask) & mask;
        let nanos = elapsed as f64 * device.limits().timestamp_period as f64;
        Ok(Duration::from_nanos(nanos.round() as u64))
    }

    fn time_between(
        &self,
        queries: &Arc<TimestampPool>,
        f: &mut impl FnMut(&DeviceContext) -> Result<()>,
        iters: usize,
    ) -> Result<[u64; 2]> {
        self.synchronize()?;
        crate::enqueue::onto(&self.stream, "execution_time", &[]).command(|stream| {
            stream.keep_alive(queries.clone());
            let command = Command::Timestamps {
                pool: queries,
                start: true,
                end: false,
            };
            Ok((command, ()))
        })?;
        for _ in 0..iters {
            f(self)?;
        }
        crate::enqueue::onto(&self.stream, "execution_time", &[]).command(|stream| {
            stream.keep_alive(queries.clone());
            // Its BOTTOM_OF_PIPE timestamp waits for all earlier commands.
            let command = Command::Timestamps {
                pool: queries,
                start: false,
                end: true,
            };
            Ok((command, ()))
        })?;
        // Both queries were written by work that has completed once this
        // returns.
        self.synchronize()?;
        queries.read(0)
    }
}
