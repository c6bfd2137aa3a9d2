//! Sharing memory beyond one context: exportable buffers and their file
//! descriptors, buffers imported from such handles, host buffers over the
//! user's own allocations, exported and imported timeline semaphores, and
//! zero-copy transfers between two devices of one physical device.
//!
//! # Soundness
//!
//! Memory that another device or process can see is never handed to host
//! code as a Rust reference: exportable and imported buffers are not mapped,
//! so every host transfer of them goes through this context's own staging
//! buffers, copied by its device. What another device writes while this one
//! reads is a race on device memory (the bytes read may be old, new or torn,
//! and every element type is `Pod`, so any bytes are valid), never a race on
//! host memory that Rust code holds a reference to. Ordering between devices
//! is the user's: `synchronize()` on the writer before the reader's work, or
//! semaphores where the device exports them.
//!
//! Importing a handle is `unsafe` (`import_buffer_fd`, `import_buffer_win32`):
//! vkcompute checks what a handle's description says, but not that a file
//! descriptor is device memory at all. The paths where vkcompute made the
//! handle itself stay safe: `share_with` and copies between contexts.

// In the reading order of `DeviceContext`'s documentation: exportable
// buffers, their export, imports, host memory, aliases, semaphores.
mod memory;

#[cfg(unix)]
mod fd;

mod import;

mod host;

mod aliases;

mod ownership;
mod semaphore;
mod win32;

use crate::error::{Error, Result};
use crate::view::check_element_size;

#[cfg(unix)]
pub use crate::interop::ExportedMemoryFd;
pub use crate::interop::{
    ExportedMemoryWin32, ExternalMemoryInfo, MemoryHandleType, EXTERNAL_MEMORY_INFO_BYTES,
};
pub use aliases::SharedAliases;
pub use host::AlignedHostMemory;
#[cfg(unix)]
pub use semaphore::ExportedSemaphoreFd;
pub use semaphore::ExternalSemaphore;
pub use win32::ExportedSemaphoreWin32;

use crate::interop::hex;

/// The byte size of `len` elements of `T`, refusing element types of no
/// size and sizes that overflow; `what` names the buffer in errors.
fn byte_size<T>(what: &str, len: usize) -> Result<u64> {
    check_element_size::<T>(what)?;
    let bytes = Error::byte_size(what, len, size_of::<T>())?;
    bytes
        .checked_next_multiple_of(4)
        .ok_or_else(|| Error::SizeOverflow {
            what: what.to_string(),
            len,
            elem_size: size_of::<T>(),
        })?;
    Ok(bytes)
}
