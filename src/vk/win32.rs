//! Win32 handles of shared memory and semaphores (`VK_KHR_external_memory_win32`,
//! `VK_KHR_external_semaphore_win32`, handle type `OPAQUE_WIN32`).
//!
//! Everything here but closing a handle builds on every platform, so the
//! Win32 path is type-checked where it cannot run: `ash` declares the
//! extensions' functions and `HANDLE` (an `isize`) everywhere, and a device
//! without the extensions (every one outside Windows) refuses them with a
//! clear error before any of their functions is called.

use ash::vk;

/// An owned Win32 `HANDLE` (an NT handle) of exported memory or a
/// semaphore, closed (`CloseHandle`) when dropped. Vulkan does not take
/// ownership of an imported Win32 handle, so an import leaves it to this
/// value to close.
#[derive(Debug)]
pub struct Win32Handle(vk::HANDLE);

impl Win32Handle {
    /// Takes ownership of `handle`, which this value closes when dropped.
    ///
    /// # Safety
    ///
    /// `handle` is an open NT handle that the caller owns (no one else
    /// closes it), or 0. Outside Windows no handle is ever closed, and a
    /// device there has no Win32 extension, so such a value only reaches
    /// the clear errors of the Win32 entry points.
    pub unsafe fn from_raw(handle: vk::HANDLE) -> Self {
        Win32Handle(handle)
    }

    /// The raw handle, still owned by `self`.
    pub fn as_raw(&self) -> vk::HANDLE {
        self.0
    }

    /// Gives up ownership: the caller closes the handle.
    pub fn into_raw(self) -> vk::HANDLE {
        let handle = self.0;
        std::mem::forget(self);
        handle
    }
}

#[cfg(windows)]
#[link(name = "kernel32")]
extern "system" {
    fn CloseHandle(handle: vk::HANDLE) -> i32;
}

impl Drop for Win32Handle {
    fn drop(&mut self) {
        #[cfg(windows)]
        if self.0 != 0 {
            // SAFETY: the handle is open and owned by this value alone
            // (`from_raw`'s contract, or a new handle from the driver); it is
            // closed once, here. A failure leaves nothing to do.
            unsafe {
                CloseHandle(self.0);
            }
        }
    }
}
