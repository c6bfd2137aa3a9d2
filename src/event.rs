//! Events: points on a stream, as CUDA has them. Recorded in stream order
//! with [`DeviceContext::enqueue_record_event`]; another stream of the
//! device waits for one on the device
//! ([`DeviceContext::enqueue_wait_event`]), the host waits for one or asks
//! whether it is reached, and two of one queue give the device time
//! between them.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::recorder::Command;
use crate::stream::Point;
use crate::vk::command::TimestampPool;
use crate::vk::{Waiters, WakerSlot};

/// A point on a stream: everything enqueued on the stream before
/// [`DeviceContext::enqueue_record_event`] made it. Cheap to clone (clones
/// are the same point); `Send` and `Sync`.
///
/// An `Event` is a [`Future`] too (`event.await`, or `event.clone().await`
/// to keep it), for any executor: it submits the event's work and
/// registers with its stream's waiter, a thread that runs while futures
/// wait for the stream, sleeps in `vkWaitSemaphores` for the stream's next
/// timeline value and wakes each future once its value is reached (the
/// values of a stream complete in order). Nothing polls in a loop. It
/// resolves to the error of the submission, or of the wait on a lost
/// device.
///
/// ```
/// # fn main() -> vkcompute::Result<()> {
/// use vkcompute::DeviceContext;
/// let ctx = DeviceContext::new()?;
/// let other = ctx.new_stream()?;
/// let data = ctx.enqueue_create_buffer::<u32>(1 << 20)?;
/// let start = ctx.enqueue_record_event()?;
/// data.enqueue_fill(7)?;
/// let filled = ctx.enqueue_record_event()?;
/// // `other` waits on the device for the fill, without blocking the host.
/// other.enqueue_wait_event(&filled)?;
/// let copy = other.enqueue_create_buffer::<u32>(1 << 20)?;
/// copy.enqueue_copy_from(&data)?;
/// filled.wait()?;
/// assert!(filled.is_complete()?);
/// if let Ok(t) = filled.elapsed_since(&start) {
///     println!("the fill took {t:?} on the device");
/// }
/// assert_eq!(copy.to_vec()?[0], 7);
/// # Ok(())
/// # }
/// ```
pub struct Event {
    point: Arc<Point>,
    device_id: u64,
    queue: usize,
    /// The event's timestamp (slot 0's end query), where the queue writes
    /// timestamps.
    timestamp: Option<Arc<TimestampPool>>,
    /// This handle's waker, as a future (each clone has its own).
    slot: Arc<WakerSlot>,
}

impl Clone for Event {
    fn clone(&self) -> Self {
        Event {
            point: self.point.clone(),
            device_id: self.device_id,
            queue: self.queue,
            timestamp: self.timestamp.clone(),
            slot: Arc::default(),
        }
    }
}

impl Drop for Event {
    fn drop(&mut self) {
        self.slot.drop_future();
    }
}

impl fmt::Debug for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Event")
            .field("value", &self.point.value)
            .field("queue", &self.queue)
            .field("timed", &self.timestamp.is_some())
            .finish()
    }
}

/// Events: points on a stream to wait for, await, or time.
impl DeviceContext {
    /// An [`Event`] at this point of the stream: it is reached once
    /// everything enqueued on this context so far has completed. Where the
    /// compute queue writes timestamps it records one (a
    /// `BOTTOM_OF_PIPE` timestamp query of its own), for
    /// [`Event::elapsed_since`]. It is recorded like any command: it may
    /// submit the open batch (as every command does when the batch is
    /// full), and where the stream has its limit of batches in flight it
    /// waits for room first. Waiting for the event submits its batch.
    pub fn enqueue_record_event(&self) -> Result<Event> {
        let device = &self.stream.device;
        let timestamp = if TimestampPool::valid_bits(device) > 0 {
            Some(Arc::new(TimestampPool::new(device, 1)?))
        } else {
            None
        };
        let (value, queue) =
            crate::enqueue::onto(&self.stream, "DeviceContext::enqueue_record_event", &[])
                .command(|stream| {
                    let point = (stream.pending_value(), stream.queue_index());
                    let Some(pool) = &timestamp else {
                        return Ok((Command::Mark, point));
                    };
                    // The batch keeps the pool alive until it completed.
                    stream.keep_alive(pool.clone());
                    // The end is BOTTOM_OF_PIPE: written once every earlier
                    // command of the queue is done.
                    let command = Command::Timestamps {
                        pool,
                        start: true,
                        end: true,
                    };
                    Ok((command, point))
                })?;
        Ok(Event {
            point: Arc::new(self.stream.point(value)),
            device_id: device.id,
            queue,
            timestamp,
            slot: Arc::default(),
        })
    }

    /// Makes the work enqueued on this context from now on wait (on the
    /// device, no host block) until `event` is reached. The event must
    /// come from a stream of the same device ([`Error::DifferentDevice`]);
    /// one of this stream is reached already in stream order.
    pub fn enqueue_wait_event(&self, event: &Event) -> Result<()> {
        let op = "DeviceContext::enqueue_wait_event";
        if event.device_id != self.stream.device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: format!(
                    "the event was recorded on another device than this context's `{}`; wait \
                     for it on the host (Event::wait) instead",
                    self.name()
                ),
            });
        }
        let timeline = &event.point.stream.timeline;
        if Arc::ptr_eq(timeline, &self.stream.timeline) || event.is_reached() {
            return Ok(());
        }
        event.point.ensure_submitted()?;
        self.stream
            .lock()
            .wait_command(vec![(timeline.clone(), event.point.value)])
    }
}

impl Event {
    /// Waits on the host until the event is reached, submitting its
    /// stream's work first where it is not yet submitted.
    pub fn wait(&self) -> Result<()> {
        self.point.wait()
    }

    /// [`wait`](Self::wait), at most `timeout`: [`Error::Timeout`] where
    /// the event is not reached by then, with nothing changed (a later wait
    /// waits on).
    pub fn wait_timeout(&self, timeout: Duration) -> Result<()> {
        self.point
            .wait_at_most("Event::wait_timeout", Some(timeout))
    }

    /// Whether the event is reached, without blocking. Submits its
    /// stream's work where it is not yet submitted (so that polling
    /// terminates); the error is that submission's.
    pub fn is_complete(&self) -> Result<bool> {
        if self.is_reached() {
            return Ok(true);
        }
        self.point.ensure_submitted()?;
        // Asked of the device, so that a lost device is an error rather
        // than an event that is never reached.
        Ok(self.point.stream.timeline.query()? >= self.point.value)
    }

    /// Whether the event carries a timestamp (where the compute queue
    /// writes timestamps), for [`elapsed_since`](Self::elapsed_since).
    pub fn is_timed(&self) -> bool {
        self.timestamp.is_some()
    }

    fn is_reached(&self) -> bool {
        self.point.stream.timeline.is_complete(self.point.value)
    }

    /// The device time from `earlier` to this event, waiting for both.
    /// Both come from one device ([`Error::DifferentDevice`]) and one
    /// queue (timestamps of different queues are not comparable: streams
    /// on different queues of a device give [`Error::EventMismatch`]), and
    /// `earlier` was reached first ([`Error::EventMismatch`] otherwise).
    /// [`Error::Unsupported`] where the queue writes no timestamps.
    pub fn elapsed_since(&self, earlier: &Event) -> Result<Duration> {
        let op = "Event::elapsed_since";
        let device = self.point.stream.timeline.device();
        if earlier.device_id != self.device_id {
            return Err(Error::DifferentDevice {
                op,
                detail: "the two events were recorded on different devices".into(),
            });
        }
        if earlier.queue != self.queue {
            return Err(Error::EventMismatch {
                op,
                reason: "the two events were recorded on streams of different queues, whose \
                         timestamps cannot be compared"
                    .into(),
            });
        }
        let (Some(later), Some(first)) = (&self.timestamp, &earlier.timestamp) else {
            return Err(Error::Unsupported {
                what: "timestamp queries on the compute queue".into(),
                device: device.name().to_string(),
            });
        };
        earlier.wait()?;
        self.wait()?;
        let mask = TimestampPool::tick_mask(device);
        let (end, start) = (later.read(0)?[1] & mask, first.read(0)?[1] & mask);
        if end < start {
            return Err(Error::EventMismatch {
                op,
                reason: "the earlier event was reached after this one".into(),
            });
        }
        let nanos = (end - start) as f64 * device.limits().timestamp_period as f64;
        Ok(Duration::from_nanos(nanos.round() as u64))
    }
}

impl Future for Event {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        poll_point(&self.point, &self.slot, cx)
    }
}

/// Polls for `point` with `slot` as the future's place in its timeline's
/// waiters: submits it where it is not yet, and registers the task's
/// waker until it is reached. Once reached, it returns what a blocking
/// wait does (`Point::reached`: printf lines emitted, a failed assertion).
fn poll_point(point: &Point, slot: &Arc<WakerSlot>, cx: &mut Context<'_>) -> Poll<Result<()>> {
    let timeline = &point.stream.timeline;
    if timeline.is_complete(point.value) {
        return Poll::Ready(point.reached());
    }
    if let Err(e) = point.ensure_submitted() {
        return Poll::Ready(Err(e));
    }
    if let Err(e) = Waiters::register(timeline, point.value, slot, cx.waker()) {
        return Poll::Ready(Err(e));
    }
    // Reached between the first look and the registration: the waiter
    // wakes this task too, but there is no need to wait for it.
    if timeline.is_complete(point.value) {
        Poll::Ready(point.reached())
    } else {
        Poll::Pending
    }
}

/// A future that resolves once `point` is reached (what the mapping future
/// waits for: a buffer's pending work on one stream).
pub(crate) struct Reached {
    point: Point,
    slot: Arc<WakerSlot>,
}

impl Reached {
    pub(crate) fn new(point: Point) -> Self {
        Reached {
            point,
            slot: Arc::default(),
        }
    }
}

impl Future for Reached {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        poll_point(&self.point, &self.slot, cx)
    }
}

impl Drop for Reached {
    fn drop(&mut self) {
        self.slot.drop_future();
    }
}
