//! Semaphores shared beyond one device, at the Vulkan level: the export of
//! a semaphore's payload as a file descriptor or Win32 handle and the
//! import of one into a new semaphore.

#[cfg(unix)]
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

use ash::vk;

use super::win32::Win32Handle;
use super::Device;
use crate::error::{Error, Result, VkResultExt};

/// A new file descriptor of `semaphore` (of `device`, alive, created
/// exportable as `handle_type`).
#[cfg(unix)]
pub(crate) fn export_semaphore_fd(
    device: &Device,
    semaphore: vk::Semaphore,
    handle_type: vk::ExternalSemaphoreHandleTypeFlags,
) -> Result<OwnedFd> {
    let Some(fns) = &device.external.semaphore_fd else {
        return Err(Error::vk(
            "vkGetSemaphoreFdKHR",
            vk::Result::ERROR_EXTENSION_NOT_PRESENT,
        ));
    };
    let info = vk::SemaphoreGetFdInfoKHR::default()
        .semaphore(semaphore)
        .handle_type(handle_type);
    // SAFETY: the extension is enabled; the semaphore is alive and was
    // created exportable as this handle type (the caller's contract).
    let fd = unsafe { fns.get_semaphore_fd(&info) }.during("vkGetSemaphoreFdKHR")?;
    // SAFETY: vkGetSemaphoreFdKHR returns a new descriptor that the caller owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Imports `fd` (of `handle_type`) as the payload of `semaphore` (of
/// `device`, new and unused). Vulkan owns the descriptor once the import
/// succeeds; it is closed when the import fails.
#[cfg(unix)]
pub(crate) fn import_semaphore_fd(
    device: &Device,
    semaphore: vk::Semaphore,
    handle_type: vk::ExternalSemaphoreHandleTypeFlags,
    fd: OwnedFd,
) -> std::result::Result<(), vk::Result> {
    let Some(fns) = &device.external.semaphore_fd else {
        return Err(vk::Result::ERROR_EXTENSION_NOT_PRESENT);
    };
    let info = vk::ImportSemaphoreFdInfoKHR::default()
        .semaphore(semaphore)
        .handle_type(handle_type)
        .fd(fd.as_raw_fd());
    // SAFETY: the extension is enabled; the semaphore is new and unused;
    // the descriptor is open.
    unsafe { fns.import_semaphore_fd(&info) }?;
    // The import succeeded: the semaphore owns the descriptor now.
    let _ = fd.into_raw_fd();
    Ok(())
}

/// A new Win32 handle of `semaphore`, as [`export_semaphore_fd`].
pub(crate) fn export_semaphore_win32(
    device: &Device,
    semaphore: vk::Semaphore,
    handle_type: vk::ExternalSemaphoreHandleTypeFlags,
) -> Result<Win32Handle> {
    let Some(fns) = &device.external.semaphore_win32 else {
        return Err(Error::vk(
            "vkGetSemaphoreWin32HandleKHR",
            vk::Result::ERROR_EXTENSION_NOT_PRESENT,
        ));
    };
    let info = vk::SemaphoreGetWin32HandleInfoKHR::default()
        .semaphore(semaphore)
        .handle_type(handle_type);
    // SAFETY: the extension is enabled; the semaphore is alive and was
    // created exportable as this (NT) handle type.
    let handle =
        unsafe { fns.get_semaphore_win32_handle(&info) }.during("vkGetSemaphoreWin32HandleKHR")?;
    // SAFETY: an OPAQUE_WIN32 export is a new NT handle that the caller owns.
    Ok(unsafe { Win32Handle::from_raw(handle) })
}

/// Imports `handle` (of `handle_type`) as the payload of `semaphore` (new
/// and unused). Vulkan takes no ownership of the handle.
pub(crate) fn import_semaphore_win32(
    device: &Device,
    semaphore: vk::Semaphore,
    handle_type: vk::ExternalSemaphoreHandleTypeFlags,
    handle: &Win32Handle,
) -> std::result::Result<(), vk::Result> {
    let Some(fns) = &device.external.semaphore_win32 else {
        return Err(vk::Result::ERROR_EXTENSION_NOT_PRESENT);
    };
    let info = vk::ImportSemaphoreWin32HandleInfoKHR::default()
        .semaphore(semaphore)
        .handle_type(handle_type)
        .handle(handle.as_raw());
    // SAFETY: the extension is enabled; the semaphore is new and unused;
    // the handle is open while `handle` lives.
    unsafe { fns.import_semaphore_win32_handle(&info) }
}

/// Destroys `semaphore` (of `device`), which no submission ever used.
pub(crate) fn destroy_unused_semaphore(device: &Device, semaphore: vk::Semaphore) {
    // SAFETY: never used by any submission (the caller's contract);
    // destroyed once.
    unsafe { device.raw.destroy_semaphore(semaphore, None) };
}

/// A sync file (`SYNC_FD`) that signals once `timeline` (a timeline
/// semaphore of `device`) reaches `value`, which has been submitted.
///
/// Sync fds are payloads of binary semaphores only, and exporting one has
/// copy transference (it takes a snapshot of a pending signal): so a new
/// binary semaphore, exportable as `SYNC_FD`, is signalled by an empty
/// submission that waits for the timeline value, and its payload is then
/// exported (which unsignals it, as a wait would). The semaphore and the
/// submission's fence are destroyed once the fence has signalled (checked
/// at the next export, and when the device goes).
#[cfg(unix)]
pub(crate) fn export_sync_fd(
    device: &Device,
    timeline: vk::Semaphore,
    value: u64,
) -> Result<OwnedFd> {
    reclaim_sync_exports(device);
    let handle_type = vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD;
    let mut export = vk::ExportSemaphoreCreateInfo::default().handle_types(handle_type);
    let info = vk::SemaphoreCreateInfo::default().push_next(&mut export);
    // SAFETY: a valid create info; the caller checked that binary
    // semaphores are exportable as SYNC_FD on this device.
    let semaphore =
        unsafe { device.raw.create_semaphore(&info, None) }.during("vkCreateSemaphore")?;
    // SAFETY: a valid create info.
    let fence = match unsafe {
        device
            .raw
            .create_fence(&vk::FenceCreateInfo::default(), None)
    } {
        Ok(f) => f,
        Err(e) => {
            destroy_unused_semaphore(device, semaphore);
            return Err(Error::vk("vkCreateFence", e));
        }
    };
    let waits = [timeline];
    let wait_values = [value];
    let stages = [vk::PipelineStageFlags::ALL_COMMANDS];
    let signals = [semaphore];
    let signal_values = [0];
    let mut values = vk::TimelineSemaphoreSubmitInfo::default()
        .wait_semaphore_values(&wait_values)
        .signal_semaphore_values(&signal_values);
    let submit = vk::SubmitInfo::default()
        .wait_semaphores(&waits)
        .wait_dst_stage_mask(&stages)
        .signal_semaphores(&signals)
        .push_next(&mut values);
    let submitted = {
        let queue = device.queue(0);
        // SAFETY: the queue is locked; the timeline is alive and `value`
        // was submitted on it; the semaphore and fence are new and live
        // until the fence has signalled.
        unsafe { device.raw.queue_submit(*queue, &[submit], fence) }
    };
    if let Err(e) = submitted {
        destroy_unused_semaphore(device, semaphore);
        // SAFETY: the fence was never submitted; destroyed once.
        unsafe { device.raw.destroy_fence(fence, None) };
        return Err(Error::vk("vkQueueSubmit", e));
    }
    device
        .external
        .sync_exports
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((fence, semaphore));
    // The semaphore has a signal operation pending, as a SYNC_FD export of
    // a binary semaphore requires.
    export_semaphore_fd(device, semaphore, handle_type)
}

/// Destroys the sync-fd semaphores (and fences) whose submission is done.
#[cfg(unix)]
fn reclaim_sync_exports(device: &Device) {
    let mut pending = device
        .external
        .sync_exports
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    pending.retain(|&(fence, semaphore)| {
        // SAFETY: the fence is alive (destroyed only here or when the
        // device goes).
        let done = unsafe { device.raw.get_fence_status(fence) }.unwrap_or(false);
        if done {
            // SAFETY: the submission that used both has completed; each is
            // destroyed once (removed from the list).
            unsafe {
                device.raw.destroy_fence(fence, None);
                device.raw.destroy_semaphore(semaphore, None);
            }
        }
        !done
    });
}
