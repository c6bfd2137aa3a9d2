//! Memory that crosses devices, below the public API of `external`:
//! handle types and descriptions, exportable memory and its export, buffers
//! over imported handles, and zero-copy copies between two devices of one
//! physical device.

mod cross;
mod handle;
mod memory;

pub(crate) use cross::copy_between_devices;
#[cfg(unix)]
pub use handle::ExportedMemoryFd;
pub use handle::{
    ExportedMemoryWin32, ExternalMemoryInfo, MemoryHandleType, EXTERNAL_MEMORY_INFO_BYTES,
};
pub(crate) use memory::{
    create_exportable, export, export_types, exported_types, handle_types, import_raw, is_coherent,
    shared_type, Payload,
};

/// A UUID in hex, for error messages.
pub(crate) fn hex(uuid: &[u8]) -> String {
    uuid.iter().map(|b| format!("{b:02x}")).collect()
}
