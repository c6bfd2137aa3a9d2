//! Timeline semaphores shared beyond one device: exported as fds, imported,
//! waited on by a stream; and the explicit host-side wait where the device
//! cannot export them.

#[cfg(unix)]
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};
use std::sync::Arc;

use ash::vk;

#[cfg(unix)]
use super::hex;
use crate::context::DeviceContext;
use crate::error::{Error, Result, VkResultExt};
use crate::timeline::Timeline;
use crate::vk::{timeline_semaphore_support, Device};

/// Whether `device`'s stream timelines are created exportable as opaque fds.
pub(crate) fn timeline_exportable(device: &Device) -> bool {
    device.external.enabled.semaphore_fd
        && timeline_semaphore_support(
            &device.instance,
            device.adapter.raw,
            vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD,
        )
        .contains(vk::ExternalSemaphoreFeatureFlags::EXPORTABLE)
}

/// A stream's timeline semaphore exported as an opaque fd, and the value
/// that the work enqueued before the export signals.
#[cfg(unix)]
#[derive(Debug)]
pub struct ExportedSemaphore {
    /// The handle; an import takes it over.
    pub fd: OwnedFd,
    /// Reached when the exporting stream's work enqueued before the export
    /// is done.
    pub value: u64,
    /// The exporter's `deviceUUID`.
    pub device_uuid: [u8; 16],
}

/// A timeline semaphore imported from another context, process or API:
/// streams wait on its values with [`DeviceContext::enqueue_wait_semaphore`],
/// the host with [`wait`](Self::wait).
pub struct ExternalSemaphore {
    timeline: Arc<Timeline>,
}

impl ExternalSemaphore {
    /// Blocks the host until the semaphore reaches `value`.
    pub fn wait(&self, value: u64) -> Result<()> {
        self.timeline.wait_submitted(value)
    }

    /// The value the semaphore has reached.
    pub fn value(&self) -> Result<u64> {
        self.timeline.query()
    }
}

impl std::fmt::Debug for ExternalSemaphore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExternalSemaphore")
            .field("semaphore", &self.timeline.semaphore)
            .finish()
    }
}

impl DeviceContext {
    /// Orders the work enqueued on this context from now on after
    /// everything enqueued on `other` so far, by blocking the host until
    /// `other`'s work is done. The ordering for contexts on different
    /// `VkDevice`s (two contexts of one physical device sharing memory)
    /// where the device cannot export semaphores
    /// ([`export_semaphore`](Self::export_semaphore) fails): explicit, and
    /// costing a host round trip. Between streams of one device use
    /// [`enqueue_wait_for`](Self::enqueue_wait_for), which does not block.
    pub fn wait_on_host_for(&self, other: &DeviceContext) -> Result<()> {
        if Arc::ptr_eq(&self.shared, &other.shared) {
            return Ok(());
        }
        other.synchronize()
    }

    /// Waits (on the device, in this stream) until `semaphore` reaches
    /// `value`: the work enqueued from now on runs after it.
    pub fn enqueue_wait_semaphore(&self, semaphore: &ExternalSemaphore, value: u64) -> Result<()> {
        if semaphore.timeline.device().id != self.shared.device.id {
            return Err(Error::DifferentDevice {
                op: "DeviceContext::enqueue_wait_semaphore",
                detail: "the semaphore was imported on another device; import it on this context's"
                    .into(),
            });
        }
        if value == 0 || semaphore.timeline.is_complete(value) {
            return Ok(());
        }
        self.shared
            .lock()
            .command(&[], vec![(semaphore.timeline.clone(), value)], false)
            .map(drop)
    }
}

#[cfg(unix)]
impl DeviceContext {
    /// This stream's timeline semaphore as a new opaque fd, with the value
    /// that the work enqueued so far signals (the work is submitted). Another
    /// context or process imports it ([`import_semaphore`](Self::import_semaphore))
    /// and waits for the value on its device. Errors:
    /// [`Error::Unsupported`] where the device has no
    /// `VK_KHR_external_semaphore_fd` or cannot export timeline semaphores
    /// (lavapipe): order the work with `synchronize()` or
    /// [`wait_on_host_for`](Self::wait_on_host_for) instead.
    pub fn export_semaphore(&self) -> Result<ExportedSemaphore> {
        let device = &self.shared.device;
        let Some(fns) = device
            .external
            .semaphore_fd
            .as_ref()
            .filter(|_| timeline_exportable(device))
        else {
            return Err(Error::Unsupported {
                what:
                    "exporting timeline semaphores as opaque fds (VK_KHR_external_semaphore_fd); \
                       order the work on the host with synchronize() or \
                       DeviceContext::wait_on_host_for instead"
                        .into(),
                device: device.name().to_string(),
            });
        };
        self.shared.flush()?;
        let value = self.shared.timeline.submitted();
        let info = vk::SemaphoreGetFdInfoKHR::default()
            .semaphore(self.shared.timeline.semaphore)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD);
        // SAFETY: the semaphore was created exportable as an opaque fd (the
        // same check as here) and lives while the context does.
        let fd = unsafe { fns.get_semaphore_fd(&info) }.during("vkGetSemaphoreFdKHR")?;
        Ok(ExportedSemaphore {
            // SAFETY: vkGetSemaphoreFdKHR returns a new descriptor we own.
            fd: unsafe { OwnedFd::from_raw_fd(fd) },
            value,
            device_uuid: device.adapter.info.uuid,
        })
    }

    /// A timeline semaphore over an exported one, for
    /// [`enqueue_wait_semaphore`](Self::enqueue_wait_semaphore). Checked:
    /// the exporter's device UUID ([`Error::ForeignDevice`]), support
    /// ([`Error::Unsupported`]), the descriptor ([`Error::InvalidHandle`]).
    pub fn import_semaphore(&self, exported: ExportedSemaphore) -> Result<ExternalSemaphore> {
        let op = "DeviceContext::import_semaphore";
        let device = &self.shared.device;
        let importable = device.external.enabled.semaphore_fd
            && timeline_semaphore_support(
                &device.instance,
                device.adapter.raw,
                vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD,
            )
            .contains(vk::ExternalSemaphoreFeatureFlags::IMPORTABLE);
        let Some(fns) = device.external.semaphore_fd.as_ref().filter(|_| importable) else {
            return Err(Error::Unsupported {
                what:
                    "importing timeline semaphores from opaque fds (VK_KHR_external_semaphore_fd)"
                        .into(),
                device: device.name().to_string(),
            });
        };
        if exported.device_uuid != device.adapter.info.uuid {
            return Err(Error::ForeignDevice {
                op,
                exporter: hex(&exported.device_uuid),
                importer: hex(&device.adapter.info.uuid),
                device: device.name().to_string(),
            });
        }
        let semaphore = Timeline::create_semaphore(device)?;
        let info = vk::ImportSemaphoreFdInfoKHR::default()
            .semaphore(semaphore)
            .handle_type(vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD)
            .fd(exported.fd.as_raw_fd());
        // SAFETY: the semaphore is new and unused; the descriptor is open.
        if let Err(e) = unsafe { fns.import_semaphore_fd(&info) } {
            // SAFETY: never used; destroyed once.
            unsafe { device.raw.destroy_semaphore(semaphore, None) };
            return Err(Error::InvalidHandle {
                op,
                handle_type: "semaphore opaque fd",
                detail: format!("vkImportSemaphoreFdKHR returned {e}"),
            });
        }
        // The import succeeded: the semaphore owns the descriptor now.
        let _ = exported.fd.into_raw_fd();
        let timeline = Timeline::new(device.clone(), semaphore, std::sync::Weak::new());
        // Values are signalled elsewhere: every one counts as submitted.
        timeline.set_submitted(u64::MAX);
        Ok(ExternalSemaphore {
            timeline: Arc::new(timeline),
        })
    }
}
