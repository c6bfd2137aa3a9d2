//! Memory as POSIX file descriptors (Unix only): the export of an
//! exportable buffer's memory as an fd and the import of an fd.

use bytemuck::Pod;

use super::{ExportedMemoryFd, MemoryHandleType};
use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::interop::{export, Payload};

impl<T: Pod> DeviceBuffer<T> {
    /// A new file descriptor of this buffer's memory, with what an importer
    /// needs to know (size, offset of this buffer or view in the memory, the
    /// device's UUIDs). The buffer must come from
    /// [`DeviceContext::enqueue_create_exportable_buffer`]
    /// ([`Error::NotExportable`] otherwise, or where the device cannot
    /// export as `handle_type`: a Win32 handle comes from
    /// [`export_win32`](Self::export_win32)). Work on the memory in another
    /// context or process is not ordered against this buffer's stream:
    /// synchronize first (see [`DeviceContext::import_buffer_fd`]).
    pub fn export_fd(&self, handle_type: MemoryHandleType) -> Result<ExportedMemoryFd> {
        let op = "DeviceBuffer::export_fd";
        if handle_type == MemoryHandleType::OpaqueWin32 {
            return Err(Error::NotExportable {
                op,
                reason: "a Win32 handle is not a file descriptor; use DeviceBuffer::export_win32"
                    .into(),
            });
        }
        match export(op, self.view.range(), handle_type)? {
            (Payload::Fd(fd), info) => Ok(ExportedMemoryFd { fd, info }),
            (Payload::Win32(_), _) => Err(Error::NotExportable {
                op,
                reason: "the export gave a Win32 handle, not a file descriptor".into(),
            }),
        }
    }
}

/// Sharing memory and semaphores with other devices, processes and APIs.
impl DeviceContext {
    /// A buffer of `len` elements of `T` over imported memory: an fd
    /// exported by [`DeviceBuffer::export_fd`] in this or another process,
    /// or by another API ([`ExternalMemoryInfo::foreign`](super::ExternalMemoryInfo::foreign)). The buffer
    /// takes the descriptor over (Vulkan owns it after a successful
    /// import; on error it is closed).
    ///
    /// Checked: the exporter's device UUID (and for opaque handles its
    /// driver UUID) against this device's ([`Error::ForeignDevice`]); the
    /// handle type against what the device can import
    /// ([`Error::Unsupported`]); the descriptor is not a pipe, socket or
    /// directory and the driver accepts it ([`Error::InvalidHandle`]); the
    /// `len` elements fit in the exported range ([`Error::ImportSize`]).
    ///
    /// The memory is shared, not copied: work of this context and of the
    /// exporter on it is not ordered by vkcompute. Synchronize the writer
    /// (`synchronize()`, or a semaphore where the device exports them) before the other side
    /// reads. Host transfers of the buffer go through this context's
    /// staging buffers (the memory is never mapped), so a race between the
    /// two devices yields unspecified element values, never undefined
    /// behaviour in Rust code. The exporter must not shrink the memory
    /// (a memfd truncated by another process faults the device).
    ///
    /// Imported into the exporter's own device (or twice into one), the
    /// import is a second buffer over the same memory: vkcompute tracks
    /// the two as different buffers, so it puts no barrier between work on
    /// one and work on the other; order such work with `synchronize()`.
    /// Use clones and views ([`DeviceBuffer::create_sub_buffer`]) to share
    /// memory within one device.
    ///
    /// The import is `unsafe` because vkcompute cannot tell where a file
    /// descriptor came from, as with vulkano's `DeviceMemory::import` and
    /// wgpu's `create_buffer_from_hal`: safe code cannot import one.
    ///
    /// ```compile_fail,E0133
    /// # fn f(ctx: &vkcompute::DeviceContext, memory: vkcompute::sharing::ExportedMemoryFd) {
    /// let _ = ctx.import_buffer_fd::<u32>(memory, 16); // needs `unsafe`
    /// # }
    /// ```
    ///
    /// Within one process, [`DeviceBuffer::share_with`] and copies
    /// between contexts share exportable memory safely, without a handle
    /// in the caller's hands.
    ///
    /// # Safety
    ///
    /// `memory.fd` must be memory exported by Vulkan (by
    /// [`DeviceBuffer::export_fd`] in this or another process, or by
    /// another Vulkan or interop API exporting device memory as
    /// `memory.info.handle_type`), and `memory.info` must describe that
    /// export truly: its allocation size, the offset and size of the range,
    /// and the dedicated buffer size and memory type where the export had
    /// them. The memory must not shrink while the buffer (or work on it)
    /// lives. vkcompute checks the UUIDs, the handle type and the sizes
    /// that `info` states, and refuses pipes, sockets, directories and
    /// regular files shorter than the allocation ([`Error::InvalidHandle`],
    /// [`Error::ImportSize`]), which is sound to pass; what it cannot
    /// check is that any other descriptor (an ordinary file, a device
    /// node) is device memory as described, and importing one that is not
    /// is undefined behaviour in the driver.
    #[allow(
        unsafe_code,
        reason = "a public raw entry point: the caller answers for the handle's origin"
    )]
    pub unsafe fn import_buffer_fd<T: Pod>(
        &self,
        memory: ExportedMemoryFd,
        len: usize,
    ) -> Result<DeviceBuffer<T>> {
        let ExportedMemoryFd { fd, info } = memory;
        super::import::import_view(
            self,
            "DeviceContext::import_buffer_fd",
            info,
            Payload::Fd(fd),
            len,
        )
    }
}
