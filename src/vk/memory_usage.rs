//! What a block of memory is for, and the memory types each use prefers.

use ash::vk;

/// What a block of memory is for; each use has its own memory-type preferences.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum MemoryUsage {
    /// Device buffers: device-local.
    Device,
    /// Upload staging: host-visible, coherent, write-combined system memory.
    Upload,
    /// Readback staging and host buffers: host-visible and cached, since
    /// reading uncached (write-combined) memory from the CPU is many times slower.
    Readback,
}

type Flags = vk::MemoryPropertyFlags;

impl MemoryUsage {
    /// (flags wanted, flags avoided), in order of preference.
    pub(super) fn preferences(self) -> &'static [(Flags, Flags)] {
        const HV: Flags = Flags::HOST_VISIBLE;
        const HC: Flags = Flags::HOST_COHERENT;
        const CACHED: Flags = Flags::HOST_CACHED;
        const DL: Flags = Flags::DEVICE_LOCAL;
        const NONE: Flags = Flags::empty();
        const HV_HC: Flags = Flags::from_raw(HV.as_raw() | HC.as_raw());
        const HV_HC_CACHED: Flags = Flags::from_raw(HV_HC.as_raw() | CACHED.as_raw());
        const DL_CACHED: Flags = Flags::from_raw(DL.as_raw() | CACHED.as_raw());
        match self {
            MemoryUsage::Device => &[(DL, HV), (DL, NONE), (NONE, NONE)],
            // Staging memory is always coherent: the specification guarantees
            // a HOST_VISIBLE | HOST_COHERENT type on every device.
            MemoryUsage::Upload => &[(HV_HC, DL_CACHED), (HV_HC, DL), (HV_HC, NONE)],
            MemoryUsage::Readback => &[(HV_HC_CACHED, DL), (HV_HC_CACHED, NONE), (HV_HC, NONE)],
        }
    }
}
