//! Semaphores shared beyond one device, at the Vulkan level: the export of
//! a semaphore's payload as a file descriptor or Win32 handle and the
//! import of one into a new semaphore.

#[cfg(unix)]
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, OwnedFd};

use ash::vk;

#[cfg(unix)]
use super::command::queue_submit;
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
    let (semaphore, fence) = binary_and_fence(device, handle_type)?;
    submit_tracked(
        device,
        (timeline, value),
        (semaphore, 0),
        (semaphore, fence),
    )?;
    // The semaphore has a signal operation pending, as a SYNC_FD export of
    // a binary semaphore requires.
    export_semaphore_fd(device, semaphore, handle_type)
}

/// Submits an empty batch on queue 0 of `device` that waits for `wait`
/// and signals `signal` (each a semaphore and its value, ignored for a
/// binary one), with `fence`; `tracked` (a binary semaphore and `fence`)
/// is destroyed once the fence signals. Where the submission fails, both
/// are destroyed at once.
#[cfg(unix)]
fn submit_tracked(
    device: &Device,
    wait: (vk::Semaphore, u64),
    signal: (vk::Semaphore, u64),
    (binary, fence): (vk::Semaphore, vk::Fence),
) -> Result<()> {
    // SAFETY: no command buffers; both semaphores are alive (a wait value
    // was submitted on its timeline, or the binary semaphore has an
    // imported payload); the fence is new and unsignalled; all live until
    // the fence has signalled.
    let submitted = unsafe { queue_submit(device, 0, &[], &[wait], &[signal], fence) };
    if let Err(e) = submitted {
        destroy_unused_semaphore(device, binary);
        // SAFETY: the fence was never submitted; destroyed once.
        unsafe { device.raw.destroy_fence(fence, None) };
        return Err(Error::vk("vkQueueSubmit", e));
    }
    device
        .external
        .sync_exports
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push((fence, binary));
    Ok(())
}

/// A new binary semaphore of `device` (exportable as `export`, where not
/// empty) and a new fence, for one sync-fd export or import.
#[cfg(unix)]
fn binary_and_fence(
    device: &Device,
    export: vk::ExternalSemaphoreHandleTypeFlags,
) -> Result<(vk::Semaphore, vk::Fence)> {
    let mut export_info = vk::ExportSemaphoreCreateInfo::default().handle_types(export);
    let mut info = vk::SemaphoreCreateInfo::default();
    if !export.is_empty() {
        info = info.push_next(&mut export_info);
    }
    // SAFETY: a valid create info; the caller checked that binary
    // semaphores are exportable as `export` on this device.
    let semaphore =
        unsafe { device.raw.create_semaphore(&info, None) }.during("vkCreateSemaphore")?;
    // SAFETY: a valid create info.
    match unsafe {
        device
            .raw
            .create_fence(&vk::FenceCreateInfo::default(), None)
    } {
        Ok(fence) => Ok((semaphore, fence)),
        Err(e) => {
            destroy_unused_semaphore(device, semaphore);
            Err(Error::vk("vkCreateFence", e))
        }
    }
}

/// Makes `timeline` (a new timeline semaphore of `device`, at 0) reach 1
/// once the sync file `fd` signals: `fd` is imported (temporarily, as sync
/// fds always are) into a new binary semaphore, which an empty submission
/// waits for before it signals the timeline. Vulkan owns the descriptor
/// once the import succeeds. The inner error is the driver's refusal of
/// the import (a descriptor that is no sync file, say).
#[cfg(unix)]
pub(crate) fn import_sync_fd(
    device: &Device,
    timeline: vk::Semaphore,
    fd: OwnedFd,
) -> Result<std::result::Result<(), vk::Result>> {
    let Some(fns) = &device.external.semaphore_fd else {
        return Ok(Err(vk::Result::ERROR_EXTENSION_NOT_PRESENT));
    };
    reclaim_sync_exports(device);
    let (semaphore, fence) =
        binary_and_fence(device, vk::ExternalSemaphoreHandleTypeFlags::empty())?;
    let info = vk::ImportSemaphoreFdInfoKHR::default()
        .semaphore(semaphore)
        .flags(vk::SemaphoreImportFlags::TEMPORARY)
        .handle_type(vk::ExternalSemaphoreHandleTypeFlags::SYNC_FD)
        .fd(fd.as_raw_fd());
    // SAFETY: the extension is enabled; the semaphore is new and unused;
    // the descriptor is open.
    if let Err(e) = unsafe { fns.import_semaphore_fd(&info) } {
        destroy_unused_semaphore(device, semaphore);
        // SAFETY: never submitted; destroyed once.
        unsafe { device.raw.destroy_fence(fence, None) };
        return Ok(Err(e));
    }
    // The import succeeded: the semaphore owns the descriptor now.
    let _ = fd.into_raw_fd();
    submit_tracked(device, (semaphore, 0), (timeline, 1), (semaphore, fence))?;
    Ok(Ok(()))
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
