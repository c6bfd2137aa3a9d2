//! Timeline semaphores shared beyond one device: exported as fds (or Win32
//! handles), imported, waited on by a stream; and the explicit host-side
//! wait where the device cannot export them.

#[cfg(unix)]
use std::os::fd::OwnedFd;
use std::sync::Arc;

use ash::vk;

use super::hex;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::vk::{destroy_unused_semaphore, semaphore_support, Device, Timeline};
#[cfg(unix)]
use crate::vk::{export_semaphore_fd, export_sync_fd, import_semaphore_fd, import_sync_fd};

/// A stream's timeline semaphore exported as an opaque fd, and the value
/// that the work enqueued before the export signals.
#[cfg(unix)]
#[derive(Debug)]
pub struct ExportedSemaphoreFd {
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

/// Sharing memory and semaphores with other devices, processes and APIs.
impl DeviceContext {
    /// Waits (on the device, in this stream) until `semaphore` reaches
    /// `value`: the work enqueued from now on runs after it.
    pub fn enqueue_wait_semaphore(&self, semaphore: &ExternalSemaphore, value: u64) -> Result<()> {
        if semaphore.timeline.device().id != self.stream.device.id {
            return Err(Error::DifferentDevice {
                op: "DeviceContext::enqueue_wait_semaphore",
                detail: "the semaphore was imported on another device; import it on this context's"
                    .into(),
            });
        }
        if value == 0 || semaphore.timeline.is_complete(value) {
            return Ok(());
        }
        self.stream
            .lock()
            .wait_command(vec![(semaphore.timeline.clone(), value)])
    }
}

/// Sharing memory and semaphores with other devices, processes and APIs.
impl DeviceContext {
    /// Submits the work enqueued so far and gives the value it signals on
    /// this stream's timeline, once the timeline is known to be exportable
    /// as `handle_type`; `what` names the handle in the error.
    pub(super) fn timeline_for_export(
        &self,
        handle_type: vk::ExternalSemaphoreHandleTypeFlags,
        what: &str,
    ) -> Result<u64> {
        let device = &self.stream.device;
        if !device.timeline_export_types().contains(handle_type) {
            return Err(Error::Unsupported {
                what: format!(
                    "exporting timeline semaphores as {what}; order the work on the host with \
                     the writer's synchronize() instead"
                ),
                device: device.name().to_string(),
            });
        }
        self.stream.flush()?;
        Ok(self.stream.timeline.submitted())
    }

    /// A new timeline semaphore whose payload `import` brings in from a
    /// handle of `handle_type`, exported by a device of `device_uuid`.
    /// `what` names the handle in errors.
    pub(super) fn import_timeline(
        &self,
        op: &'static str,
        what: &'static str,
        device_uuid: [u8; 16],
        handle_type: vk::ExternalSemaphoreHandleTypeFlags,
        import: impl FnOnce(&Device, vk::Semaphore) -> std::result::Result<(), vk::Result>,
    ) -> Result<ExternalSemaphore> {
        let device = &self.stream.device;
        let enabled = if handle_type == vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_WIN32 {
            device.external.enabled.semaphore_win32
        } else {
            device.external.enabled.semaphore_fd
        };
        if !enabled
            || !device.timeline_supports(handle_type, vk::ExternalSemaphoreFeatureFlags::IMPORTABLE)
        {
            return Err(Error::Unsupported {
                what: format!("importing timeline semaphores from {what}"),
                device: device.name().to_string(),
            });
        }
        if device_uuid != device.adapter.info.uuid {
            return Err(Error::ForeignDevice {
                op,
                exporter: hex(&device_uuid),
                importer: hex(&device.adapter.info.uuid),
                device: device.name().to_string(),
            });
        }
        let semaphore = Timeline::create_semaphore(device)?;
        if let Err(e) = import(device, semaphore) {
            destroy_unused_semaphore(device, semaphore);
            return Err(Error::InvalidHandle {
                op,
                handle_type: what,
                detail: format!("the import returned {e}"),
            });
        }
        let timeline = Timeline::new(device.clone(), semaphore);
        // Values are signalled elsewhere: every one counts as submitted.
        timeline.set_submitted(u64::MAX);
        Ok(ExternalSemaphore {
            timeline: Arc::new(timeline),
        })
    }
}

#[cfg(unix)]
/// Sharing memory and semaphores with other devices, processes and APIs.
impl DeviceContext {
    /// This stream's timeline semaphore as a new opaque fd, with the value
    /// that the work enqueued so far signals (the work is submitted). Another
    /// context or process imports it ([`import_semaphore_fd`](Self::import_semaphore_fd))
    /// and waits for the value on its device. Errors:
    /// [`Error::Unsupported`] where the device has no
    /// `VK_KHR_external_semaphore_fd` or cannot export timeline semaphores
    /// (lavapipe): order the work with the writer's `synchronize()`
    /// instead.
    pub fn export_semaphore_fd(&self) -> Result<ExportedSemaphoreFd> {
        let handle_type = vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD;
        let value =
            self.timeline_for_export(handle_type, "opaque fds (VK_KHR_external_semaphore_fd)")?;
        let device = &self.stream.device;
        Ok(ExportedSemaphoreFd {
            fd: export_semaphore_fd(device, self.stream.timeline.semaphore, handle_type)?,
            value,
            device_uuid: device.adapter.info.uuid,
        })
    }

    /// A sync file (a Linux `sync_file` fd, `SYNC_FD`) that signals once
    /// the work enqueued on this stream so far is done (the work is
    /// submitted): for APIs that wait on sync files (DRM, V4L2, Android,
    /// another Vulkan device's binary semaphore). A sync file is a one-shot
    /// snapshot, not the timeline itself: export a new one for later work.
    /// Errors: [`Error::Unsupported`] where the device cannot export binary
    /// semaphores as sync fds (`VK_KHR_external_semaphore_fd`; lavapipe
    /// cannot): order the work with `synchronize()` instead.
    pub fn export_sync_fd(&self) -> Result<OwnedFd> {
        let device = &self.stream.device;
        sync_fd_support(
            device,
            vk::ExternalSemaphoreFeatureFlags::EXPORTABLE,
            "exporting",
            "order the work on the host with synchronize() instead",
        )?;
        self.stream.flush()?;
        let value = self.stream.timeline.submitted();
        export_sync_fd(device, self.stream.timeline.semaphore, value)
    }

    /// Makes the work enqueued on this context from now on wait, on the
    /// device, until the sync file `fd` signals: a fence of another API or
    /// process ([`export_sync_fd`](Self::export_sync_fd) of another
    /// context, a DRM or Android fence). The descriptor is consumed. Nothing
    /// waits on the host. Errors: [`Error::Unsupported`] where the device
    /// cannot import sync fds into binary semaphores
    /// (`VK_KHR_external_semaphore_fd` with `SYNC_FD`; lavapipe cannot):
    /// wait for the other side on the host instead;
    /// [`Error::InvalidHandle`] where the driver refuses the descriptor.
    pub fn enqueue_wait_sync_fd(&self, fd: OwnedFd) -> Result<()> {
        let device = &self.stream.device;
        sync_fd_support(
            device,
            vk::ExternalSemaphoreFeatureFlags::IMPORTABLE,
            "importing",
            "wait for the other side on the host instead",
        )?;
        // A timeline of its own reaches 1 once the sync file signals; the
        // stream waits for it as for another stream's.
        let semaphore = Timeline::create_semaphore(device)?;
        let timeline = Arc::new(Timeline::new(device.clone(), semaphore));
        if let Err(e) = import_sync_fd(device, timeline.semaphore, fd)? {
            return Err(Error::InvalidHandle {
                op: "DeviceContext::enqueue_wait_sync_fd",
                handle_type: "sync fd",
                detail: format!("vkImportSemaphoreFdKHR returned {e}"),
            });
        }
        timeline.set_submitted(1);
        self.stream.lock().wait_command(vec![(timeline, 1)])
    }

    /// A timeline semaphore over an exported one, for
    /// [`enqueue_wait_semaphore`](Self::enqueue_wait_semaphore). Checked:
    /// the exporter's device UUID ([`Error::ForeignDevice`]), support
    /// ([`Error::Unsupported`]), the descriptor ([`Error::InvalidHandle`]).
    pub fn import_semaphore_fd(&self, exported: ExportedSemaphoreFd) -> Result<ExternalSemaphore> {
        let handle_type = vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_FD;
        let ExportedSemaphoreFd {
            fd, device_uuid, ..
        } = exported;
        self.import_timeline(
            "DeviceContext::import_semaphore_fd",
            "opaque fds (VK_KHR_external_semaphore_fd)",
            device_uuid,
            handle_type,
            |device, semaphore| import_semaphore_fd(device, semaphore, handle_type, fd),
        )
    }
}

/// `Ok` where `device`'s binary semaphores have `feature` for sync fds;
/// else the error that names the operation (`doing`) and what to do
/// `instead`.
#[cfg(unix)]
fn sync_fd_support(
    device: &Device,
    feature: vk::ExternalSemaphoreFeatureFlags,
    doing: &str,
    instead: &str,
) -> Result<()> {
    let supported = device.external.enabled.semaphore_fd
        && semaphore_support(
            &device.instance,
            device.adapter.raw,
            vk::SemaphoreType::BINARY,
            vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD,
        )
        .contains(feature);
    if supported {
        return Ok(());
    }
    Err(Error::Unsupported {
        what: format!(
            "{doing} sync fds (VK_KHR_external_semaphore_fd with SYNC_FD handles); {instead}"
        ),
        device: device.name().to_string(),
    })
}
