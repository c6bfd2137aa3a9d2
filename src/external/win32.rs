//! Win32 handles of memory and semaphores (`VK_KHR_external_memory_win32`,
//! `VK_KHR_external_semaphore_win32`, handle type `OPAQUE_WIN32`).
//!
//! Built on every platform: only Windows drivers have the extensions, and
//! elsewhere every entry point here returns [`Error::Unsupported`](crate::Error::Unsupported) (or
//! [`Error::NotExportable`](crate::Error::NotExportable)) before any of their functions is called.

use ash::vk;
use bytemuck::Pod;

use super::{ExportedMemoryWin32, ExternalSemaphore, MemoryHandleType};
use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::Result;
use crate::interop::{export, Payload};
use crate::vk::{export_semaphore_win32, import_semaphore_win32, Win32Handle};

/// A stream's timeline semaphore exported as an opaque Win32 handle
/// ([`DeviceContext::export_semaphore_win32`]), and the value that the work
/// enqueued before the export signals.
#[derive(Debug)]
pub struct ExportedSemaphoreWin32 {
    /// The handle; closed when this value drops (an import does not take it).
    pub handle: Win32Handle,
    /// Reached when the exporting stream's work enqueued before the export
    /// is done.
    pub value: u64,
    /// The exporter's `deviceUUID`.
    pub device_uuid: [u8; 16],
}

const SEMAPHORE_HANDLES: &str = "opaque Win32 handles (VK_KHR_external_semaphore_win32)";

impl<T: Pod> DeviceBuffer<T> {
    /// A new opaque Win32 (NT) handle of this buffer's memory, with its
    /// description, as [`export_fd`](Self::export_fd) gives an fd; for
    /// Vulkan, CUDA (`cudaExternalMemoryHandleTypeOpaqueWin32`) and
    /// Direct3D 12 on Windows. Errors: [`Error::NotExportable`](crate::Error::NotExportable) where the
    /// buffer is not exportable as one (every device without
    /// `VK_KHR_external_memory_win32`, so every device outside Windows).
    pub fn export_win32(&self) -> Result<ExportedMemoryWin32> {
        let op = "DeviceBuffer::export_win32";
        match export(op, self.view.range(), MemoryHandleType::OpaqueWin32)? {
            (Payload::Win32(handle), info) => Ok(ExportedMemoryWin32 { handle, info }),
            #[cfg(unix)]
            (Payload::Fd(_), _) => Err(crate::Error::NotExportable {
                op,
                reason: "the export gave a file descriptor, not a Win32 handle".into(),
            }),
        }
    }
}

/// Sharing memory and semaphores with other devices, processes and APIs.
impl DeviceContext {
    /// A buffer of `len` elements of `T` over memory imported from an
    /// opaque Win32 handle, with the checks of
    /// [`import_buffer_fd`](Self::import_buffer_fd). The handle is not taken
    /// over: Vulkan holds the memory itself, and `memory.handle` closes
    /// when `memory` drops. Errors: [`Error::Unsupported`](crate::Error::Unsupported) where the device
    /// has no `VK_KHR_external_memory_win32` (every device outside Windows).
    ///
    /// # Safety
    ///
    /// As for [`import_buffer_fd`](Self::import_buffer_fd): `memory.handle` must
    /// be memory exported by Vulkan (or an interop API) as
    /// `memory.info.handle_type`, truly described by `memory.info`, and
    /// not shrink while the buffer lives; vkcompute cannot check what a
    /// handle refers to.
    #[allow(
        unsafe_code,
        reason = "a public raw entry point: the caller answers for the handle's origin"
    )]
    pub unsafe fn import_buffer_win32<T: Pod>(
        &self,
        memory: ExportedMemoryWin32,
        len: usize,
    ) -> Result<DeviceBuffer<T>> {
        let ExportedMemoryWin32 { handle, info } = memory;
        super::import::import_view(
            self,
            "DeviceContext::import_buffer_win32",
            info,
            Payload::Win32(handle),
            len,
        )
    }

    /// This stream's timeline semaphore as a new opaque Win32 handle, with
    /// the value the work enqueued so far signals, as
    /// [`export_semaphore_fd`](Self::export_semaphore_fd) gives an fd. Errors:
    /// [`Error::Unsupported`](crate::Error::Unsupported) where the device cannot export timeline
    /// semaphores as Win32 handles (every device outside Windows).
    pub fn export_semaphore_win32(&self) -> Result<ExportedSemaphoreWin32> {
        let handle_type = vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_WIN32;
        let value = self.timeline_for_export(handle_type, SEMAPHORE_HANDLES)?;
        let device = &self.stream.device;
        Ok(ExportedSemaphoreWin32 {
            handle: export_semaphore_win32(device, self.stream.timeline.semaphore, handle_type)?,
            value,
            device_uuid: device.adapter.info.uuid,
        })
    }

    /// A timeline semaphore over one exported as a Win32 handle, as
    /// [`import_semaphore_fd`](Self::import_semaphore_fd) (the handle closes when
    /// `exported` drops; Vulkan does not take it).
    pub fn import_semaphore_win32(
        &self,
        exported: ExportedSemaphoreWin32,
    ) -> Result<ExternalSemaphore> {
        let handle_type = vk::ExternalSemaphoreHandleTypeFlags::OPAQUE_WIN32;
        self.import_timeline(
            "DeviceContext::import_semaphore_win32",
            SEMAPHORE_HANDLES,
            exported.device_uuid,
            handle_type,
            |device, semaphore| {
                import_semaphore_win32(device, semaphore, handle_type, &exported.handle)
            },
        )
    }
}
