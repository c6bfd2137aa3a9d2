//! Copies between two contexts of one physical device through memory
//! both share, instead of a round trip through the host.

use ash::vk;

#[cfg(unix)]
use super::{fd, MemoryHandleType};
use crate::buffer::View;
use crate::error::Result;
#[cfg(unix)]
use crate::memory::DedicatedKind;
#[cfg(unix)]
use crate::resource::{BufferMemory, HostAccess};

/// Copies `src` into `dst` (of equal length) on two devices of one physical
/// device without a host round trip, where one end is exportable: the other
/// device imports it and copies. Completes before it returns. `None` when
/// neither end is exportable or the devices differ (then the caller goes
/// through the host).
#[cfg(unix)]
pub(crate) fn copy_between_devices(op: &'static str, src: &View, dst: &View) -> Option<Result<()>> {
    let (a, b) = (&src.memory.device, &dst.memory.device);
    if a.adapter.info.uuid != b.adapter.info.uuid
        || a.adapter.info.driver_uuid != b.adapter.info.driver_uuid
        || !a.external.enabled.memory_fd
        || !b.external.enabled.memory_fd
        || src.bytes == 0
    {
        return None;
    }
    let exportable = |v: &View| {
        v.memory
            .raw()
            .and_then(|r| r.dedicated_memory())
            .is_some_and(|d| {
                matches!(d.kind, DedicatedKind::Exportable(t)
                if t.contains(vk::ExternalMemoryHandleTypeFlags::OPAQUE_FD))
            })
    };
    // The device of the end that is not exportable runs the copy, on an
    // alias of the exportable end.
    let (shared, runner, write) = if exportable(dst) {
        (dst, src, true)
    } else if exportable(src) {
        (src, dst, false)
    } else {
        return None;
    };
    Some(copy_through_alias(op, src, dst, shared, runner, write))
}

#[cfg(not(unix))]
pub(crate) fn copy_between_devices(_: &'static str, _: &View, _: &View) -> Option<Result<()>> {
    None
}

#[cfg(unix)]
fn copy_through_alias(
    op: &'static str,
    src: &View,
    dst: &View,
    shared: &View,
    runner: &View,
    write: bool,
) -> Result<()> {
    let ctx = runner.memory.owner();
    // Hold the shared end as a host borrow would: its own device's
    // conflicting work is done first, and none can start until the copy
    // on the other device is done.
    let access = if write {
        HostAccess::Write
    } else {
        HostAccess::Read
    };
    shared.memory.borrow_host(op, access)?;
    let result = (|| {
        let exported = fd::export(op, shared, MemoryHandleType::OpaqueFd)?;
        let raw = fd::import(op, &ctx.device, exported, "a shared buffer's alias")?;
        let alias = BufferMemory::from_raw(&ctx, Some(raw), shared.memory.size);
        let ((s, so), (d, dof)) = if write {
            ((&src.memory, src.offset), (&alias, dst.offset))
        } else {
            ((&alias, src.offset), (&dst.memory, dst.offset))
        };
        ctx.copy(op, (s, so), (d, dof), src.bytes)?;
        // The alias's uses are the copy: wait for it on the host.
        alias.wait_for_host_access(true)
    })();
    shared.memory.release_host();
    result
}
