//! Copies between two contexts of one physical device through memory both
//! share, instead of a round trip through the host, through the aliases a
//! device keeps of other devices' exportable memory.

use std::sync::Arc;

use super::memory::{export, import_alias, shared_type};
use super::MemoryHandleType;
use crate::error::{Error, Result};
use crate::resource::{lock_two, BufferMemory};
use crate::vk::memory::DedicatedKind;
use crate::vk::AliasLinks;

/// `bytes` bytes of a memory at `offset`: one end of a copy.
pub(crate) type Range<'a> = (&'a Arc<BufferMemory>, u64, u64);

/// The links of `memory` where it is exportable as `handle_type`.
fn exporter_links(memory: &BufferMemory, handle_type: MemoryHandleType) -> Option<&AliasLinks> {
    let dedicated = memory.raw()?.dedicated_memory()?;
    match &dedicated.kind {
        DedicatedKind::Exportable(types, links) if types.contains(handle_type.flag()) => {
            Some(links)
        }
        _ => None,
    }
}

/// Copies `src` into `dst` (of equal length) on two devices of one physical
/// device without a host round trip, where one end is exportable: the other
/// device copies through its alias of that memory (imported on the first
/// copy, kept for the next). Completes before it returns. `None` when
/// neither end is exportable or the devices differ (then the caller goes
/// through the host).
pub(crate) fn copy_between_devices(
    op: &'static str,
    src: Range<'_>,
    dst: Range<'_>,
) -> Option<Result<()>> {
    let (a, b) = (&src.0.device, &dst.0.device);
    if a.adapter.info.uuid != b.adapter.info.uuid
        || a.adapter.info.driver_uuid != b.adapter.info.driver_uuid
        || src.2 == 0
    {
        return None;
    }
    // The device of the end that is not exportable runs the copy, on an
    // alias of the exportable end, through a handle type it can import.
    let (shared, runner, write, handle_type) = if let Some(t) = shared_type(dst.0, a) {
        (dst, src, true, t)
    } else if let Some(t) = shared_type(src.0, b) {
        (src, dst, false, t)
    } else {
        return None;
    };
    Some(copy_through_alias(
        op,
        (src, dst),
        (shared, runner, write),
        handle_type,
    ))
}

fn copy_through_alias(
    op: &'static str,
    (src, dst): (Range<'_>, Range<'_>),
    (shared, runner, write): (Range<'_>, Range<'_>, bool),
    handle_type: MemoryHandleType,
) -> Result<()> {
    let ctx = runner.0.owner();
    let device = &ctx.device;
    let links = exporter_links(shared.0, handle_type).ok_or(Error::NotExportable {
        op,
        reason: "the shared end is not exportable".into(),
    })?;
    // Hold both ends' operation locks (in address order, as every holder
    // of several takes them): on the shared end, its own device's
    // conflicting work is done first, and no operation or host borrow of
    // it starts until the copy on the other device is done (they wait for
    // it, as for any operation of several commands); the runner's copy is
    // recorded under its lock. The caller's reference keeps the shared end
    // alive, so its links cannot drop the alias while the copy uses it.
    let [held, _runner_held] = lock_two(shared.0, runner.0);
    shared.0.ready_for_foreign_access(op, write, &held)?;
    let raw = match device.external.aliases.take(links.id()) {
        Some(raw) => raw,
        None => {
            let (payload, info) = export(op, shared, handle_type)?;
            let raw = import_alias(op, device, info, payload)?;
            device.external.aliases.note_import();
            raw
        }
    };
    // The alias is a buffer of the exporter's whole buffer, at the
    // same offsets.
    let alias = BufferMemory::from_raw(&ctx, Some(raw), shared.0.size);
    let ((s, so), (d, dof)) = if write {
        ((src.0, src.1), (&alias, dst.1))
    } else {
        ((&alias, src.1), (dst.0, dst.1))
    };
    crate::transfer::copy_held(&ctx, op, (s, so), (d, dof), src.2, Some(runner.0))?;
    // The alias's uses are the copy: wait for it on the host.
    alias.wait_for_host_access(true)?;
    // Idle again: keep it for the next copy (else it is freed as any
    // buffer is, once its work is done).
    if let Ok(alias) = Arc::try_unwrap(alias) {
        if let Some(raw) = alias.into_raw() {
            device.external.aliases.put(device, links.id(), raw);
            links.link(device);
        }
    }
    Ok(())
}
