//! How exported memory is described: its handle type and the description
//! an importer needs beside the handle.

#[cfg(unix)]
use std::os::fd::OwnedFd;

use ash::vk;

use crate::error::{Error, Result};
use crate::vk::Win32Handle;

/// How exported memory is handed over.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MemoryHandleType {
    /// An opaque POSIX file descriptor (`VK_KHR_external_memory_fd`):
    /// importable by Vulkan, CUDA (`cudaExternalMemoryHandleTypeOpaqueFd`)
    /// and OpenCL on the same device and driver.
    OpaqueFd,
    /// A Linux dma-buf file descriptor (`VK_EXT_external_memory_dma_buf`):
    /// importable by other drivers, V4L2, DRM, and the network stacks that
    /// register dma-bufs (UCX, libfabric, RDMA).
    DmaBuf,
    /// An opaque Win32 NT handle (`VK_KHR_external_memory_win32`):
    /// importable by Vulkan, CUDA (`cudaExternalMemoryHandleTypeOpaqueWin32`),
    /// Direct3D 12 and OpenCL on the same device and driver, on Windows.
    OpaqueWin32,
}

impl MemoryHandleType {
    /// Every handle type, in the order a choice among them prefers.
    pub(crate) const ALL: [MemoryHandleType; 3] = [
        MemoryHandleType::OpaqueFd,
        MemoryHandleType::OpaqueWin32,
        MemoryHandleType::DmaBuf,
    ];

    pub(crate) fn flag(self) -> vk::ExternalMemoryHandleTypeFlags {
        match self {
            MemoryHandleType::OpaqueFd => vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD,
            MemoryHandleType::DmaBuf => vk::ExternalMemoryHandleTypeFlags::DMA_BUF_EXT,
            MemoryHandleType::OpaqueWin32 => vk::ExternalMemoryHandleTypeFlags::OPAQUE_WIN32,
        }
    }

    /// The extension that carries this handle type.
    pub(super) fn extension(self) -> &'static str {
        match self {
            MemoryHandleType::OpaqueFd => "VK_KHR_external_memory_fd",
            MemoryHandleType::DmaBuf => "VK_EXT_external_memory_dma_buf",
            MemoryHandleType::OpaqueWin32 => "VK_KHR_external_memory_win32",
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            MemoryHandleType::OpaqueFd => "opaque fd",
            MemoryHandleType::DmaBuf => "dma-buf",
            MemoryHandleType::OpaqueWin32 => "opaque Win32",
        }
    }

    fn code(self) -> u64 {
        match self {
            MemoryHandleType::OpaqueFd => 1,
            MemoryHandleType::DmaBuf => 2,
            MemoryHandleType::OpaqueWin32 => 3,
        }
    }
}

/// What an importer needs to know of exported memory besides its handle.
/// [`to_bytes`](Self::to_bytes) / [`from_bytes`](Self::from_bytes) carry it
/// to another process beside the descriptor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ExternalMemoryInfo {
    /// The kind of handle.
    pub handle_type: MemoryHandleType,
    /// Bytes of the memory object (`allocationSize` of the import).
    pub allocation_size: u64,
    /// Where the buffer's data starts in the memory.
    pub offset: u64,
    /// Bytes of data from `offset`.
    pub size: u64,
    /// The size of the `VkBuffer` the memory is dedicated to, where the
    /// exporter made a dedicated allocation (vkcompute always does); the
    /// importer makes its buffer alike. `None` for other exporters.
    pub dedicated_buffer_size: Option<u64>,
    /// The exporter's memory type (an opaque import must use the same).
    pub memory_type_index: Option<u32>,
    /// The exporter's `deviceUUID`, checked on import where known.
    pub device_uuid: Option<[u8; 16]>,
    /// The exporter's `driverUUID`, checked on import of opaque handles
    /// where known.
    pub driver_uuid: Option<[u8; 16]>,
}

/// Bytes of [`ExternalMemoryInfo::to_bytes`].
pub const EXTERNAL_MEMORY_INFO_BYTES: usize = 88;

impl ExternalMemoryInfo {
    /// The description of memory from another API or process that says
    /// only its handle type and size: data from offset 0, not dedicated,
    /// device unchecked. Importing what it describes is `unsafe`
    /// ([`DeviceContext::import_buffer_fd`](crate::DeviceContext::import_buffer_fd)):
    /// the caller answers for the handle being such memory.
    pub fn foreign(handle_type: MemoryHandleType, allocation_size: u64) -> Self {
        ExternalMemoryInfo {
            handle_type,
            allocation_size,
            offset: 0,
            size: allocation_size,
            dedicated_buffer_size: None,
            memory_type_index: None,
            device_uuid: None,
            driver_uuid: None,
        }
    }

    /// A fixed-size little-endian encoding, to send beside the descriptor.
    pub fn to_bytes(&self) -> [u8; EXTERNAL_MEMORY_INFO_BYTES] {
        let mut out = [0u8; EXTERNAL_MEMORY_INFO_BYTES];
        let words = [
            self.handle_type.code(),
            self.allocation_size,
            self.offset,
            self.size,
            self.dedicated_buffer_size.map_or(u64::MAX, |s| s),
            self.memory_type_index.map_or(u64::MAX, u64::from),
        ];
        for (i, w) in words.iter().enumerate() {
            out[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
        }
        out[48] = u8::from(self.device_uuid.is_some());
        out[49] = u8::from(self.driver_uuid.is_some());
        out[56..72].copy_from_slice(&self.device_uuid.unwrap_or_default());
        out[72..88].copy_from_slice(&self.driver_uuid.unwrap_or_default());
        out
    }

    /// Decodes [`to_bytes`](Self::to_bytes); anything else is
    /// [`Error::InvalidHandle`].
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let bad = |detail: &str| Error::InvalidHandle {
            op: "ExternalMemoryInfo::from_bytes",
            handle_type: "memory",
            detail: detail.to_string(),
        };
        if bytes.len() != EXTERNAL_MEMORY_INFO_BYTES {
            return Err(bad(&format!(
                "{} bytes of description, expected {EXTERNAL_MEMORY_INFO_BYTES}",
                bytes.len()
            )));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[i * 8..i * 8 + 8]);
            u64::from_le_bytes(w)
        };
        let uuid = |at: usize, present: u8| {
            let mut u = [0u8; 16];
            u.copy_from_slice(&bytes[at..at + 16]);
            (present == 1).then_some(u)
        };
        let handle_type = match word(0) {
            1 => MemoryHandleType::OpaqueFd,
            2 => MemoryHandleType::DmaBuf,
            3 => MemoryHandleType::OpaqueWin32,
            other => return Err(bad(&format!("unknown handle type code {other}"))),
        };
        Ok(ExternalMemoryInfo {
            handle_type,
            allocation_size: word(1),
            offset: word(2),
            size: word(3),
            dedicated_buffer_size: Some(word(4)).filter(|&s| s != u64::MAX),
            memory_type_index: u32::try_from(word(5)).ok(),
            device_uuid: uuid(56, bytes[48]),
            driver_uuid: uuid(72, bytes[49]),
        })
    }
}

/// Exported memory: an owned file descriptor (closed when dropped) and its
/// description. Each export makes a new descriptor, which holds the memory
/// alive on its own: the exporting buffer may be dropped meanwhile.
#[cfg(unix)]
#[derive(Debug)]
pub struct ExportedMemoryFd {
    /// The handle; an import takes it over.
    pub fd: OwnedFd,
    /// What an importer needs to know.
    pub info: ExternalMemoryInfo,
}

/// Exported memory as a Win32 handle (closed when dropped) and its
/// description ([`DeviceBuffer::export_win32`](crate::DeviceBuffer::export_win32)).
/// Defined on every platform; only Windows drivers export such handles.
#[derive(Debug)]
pub struct ExportedMemoryWin32 {
    /// The handle. An import does not take it over (Vulkan does not own
    /// imported Win32 handles): it is closed when this value drops.
    pub handle: Win32Handle,
    /// What an importer needs to know.
    pub info: ExternalMemoryInfo,
}
