//! A stream's timeline semaphore: the value each submission signals, what
//! has been submitted, and what is known to be complete. Waiting for a
//! value not yet submitted (which first needs the stream flushed) is
//! decided above, by `StreamHandle`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use ash::vk;

use super::Device;
use crate::error::{Error, Result, VkResultExt};

/// The timeline of one stream. Submission `n` of the stream signals value
/// `n`; work recorded into the open batch carries the value that batch will
/// signal, which is `submitted() + 1`.
pub(crate) struct Timeline {
    device: Arc<Device>,
    pub(crate) semaphore: vk::Semaphore,
    submitted: AtomicU64,
    completed: AtomicU64,
    /// The futures waiting for values of it.
    pub(crate) waiters: super::waiter::Waiters,
}

impl Timeline {
    /// A new timeline semaphore at value 0 on `device`, exportable as the
    /// handle types the device offers for timelines.
    pub(crate) fn create_semaphore(device: &Device) -> Result<vk::Semaphore> {
        let mut kind = vk::SemaphoreTypeCreateInfo::default()
            .semaphore_type(vk::SemaphoreType::TIMELINE)
            .initial_value(0);
        let types = device.timeline_export_types();
        let mut export = vk::ExportSemaphoreCreateInfo::default().handle_types(types);
        let mut info = vk::SemaphoreCreateInfo::default().push_next(&mut kind);
        if !types.is_empty() {
            info = info.push_next(&mut export);
        }
        crate::vk::fault::allocation(device).during("vkCreateSemaphore")?;
        // SAFETY: a valid create info; timeline semaphores are enabled.
        unsafe { device.raw.create_semaphore(&info, None) }.during("vkCreateSemaphore")
    }

    /// Takes ownership of `semaphore` (from `create_semaphore`).
    pub(crate) fn new(device: Arc<Device>, semaphore: vk::Semaphore) -> Self {
        Timeline {
            device,
            semaphore,
            submitted: AtomicU64::new(0),
            completed: AtomicU64::new(0),
            waiters: Default::default(),
        }
    }

    /// The device of the semaphore.
    pub(crate) fn device(&self) -> &Arc<Device> {
        &self.device
    }

    /// The last value submitted.
    pub(crate) fn submitted(&self) -> u64 {
        self.submitted.load(Ordering::Acquire)
    }

    /// Records that `value` was submitted (called by the stream, under its lock).
    pub(crate) fn set_submitted(&self, value: u64) {
        self.submitted.store(value, Ordering::Release);
    }

    /// The value the semaphore has reached, asking the device.
    pub(crate) fn query(&self) -> Result<u64> {
        // SAFETY: the semaphore is live while `self` is.
        let value = self
            .device
            .note(unsafe { self.device.raw.get_semaphore_counter_value(self.semaphore) })
            .during("vkGetSemaphoreCounterValue")?;
        self.completed.fetch_max(value, Ordering::AcqRel);
        Ok(value)
    }

    /// Whether the work that signals `value` has completed. Errors count as
    /// not complete (a lost device never completes anything).
    pub(crate) fn is_complete(&self, value: u64) -> bool {
        if self.completed.load(Ordering::Acquire) >= value {
            return true;
        }
        if self.submitted() < value {
            return false;
        }
        self.query().is_ok_and(|v| v >= value)
    }

    /// Waits for a value that has been submitted already.
    pub(crate) fn wait_submitted(&self, value: u64) -> Result<()> {
        self.wait_submitted_for(value, u64::MAX).map(drop)
    }

    /// Waits at most `timeout_ns` for a value that has been submitted
    /// already: whether it was reached.
    pub(crate) fn wait_submitted_for(&self, value: u64, timeout_ns: u64) -> Result<bool> {
        if self.completed.load(Ordering::Acquire) >= value {
            return Ok(true);
        }
        let semaphores = [self.semaphore];
        let values = [value];
        let info = vk::SemaphoreWaitInfo::default()
            .semaphores(&semaphores)
            .values(&values);
        // SAFETY: the semaphore is live; `value` was submitted (or signalled
        // from the host after a failed submission), so the wait ends.
        match self
            .device
            .note(unsafe { self.device.raw.wait_semaphores(&info, timeout_ns) })
        {
            Ok(()) => {}
            Err(vk::Result::TIMEOUT) => return Ok(false),
            Err(e) => return Err(Error::vk("vkWaitSemaphores", e)),
        }
        self.completed.fetch_max(value, Ordering::AcqRel);
        Ok(true)
    }

    /// Signals `value` from the host, after a submission that should have
    /// signalled it failed, so that nothing waits for it forever.
    pub(crate) fn signal_from_host(&self, value: u64) {
        let info = vk::SemaphoreSignalInfo::default()
            .semaphore(self.semaphore)
            .value(value);
        // SAFETY: `value` is above every value signalled so far (the failed
        // submission was the newest).
        let _ = unsafe { self.device.raw.signal_semaphore(&info) };
    }
}

impl Drop for Timeline {
    fn drop(&mut self) {
        // Every submission signalling or waiting for the semaphore has been
        // seen complete, but the driver may still be releasing its hold on
        // it: the device destroys it once idle.
        self.device.retire_semaphore(self.semaphore);
    }
}
