//! The fault-injection hook for the crate's own tests (feature
//! `fault-injection`; not part of the supported API): arms the counter of
//! allocation points that `vk::fault` keeps per device.

use crate::context::DeviceContext;

/// Makes the `n`th allocation point reached on `ctx`'s device from now
/// on (counting from 1, on every stream of the device) fail as the
/// driver does when out of memory; `0` disarms. Re-arming resets
/// [`allocations_passed`] and [`fault_injected`].
pub fn fail_allocation(ctx: &DeviceContext, n: u64) {
    ctx.stream.device.faults.arm(n, false);
}

/// As [`fail_allocation`], but every allocation point after the `n`th
/// fails too (memory stays exhausted) until re-armed or disarmed.
pub fn fail_allocations_from(ctx: &DeviceContext, n: u64) {
    ctx.stream.device.faults.arm(n, true);
}

/// Allocation points reached on `ctx`'s device since the last
/// [`fail_allocation`].
pub fn allocations_passed(ctx: &DeviceContext) -> u64 {
    ctx.stream.device.faults.passed()
}

/// Makes `ctx`'s device count as lost, as after `VK_ERROR_DEVICE_LOST`:
/// every later call that needs the device returns `Error::DeviceLost`.
/// (The device itself goes on running what was submitted, so that drops
/// stay sound while the test checks them.)
pub fn lose_device(ctx: &DeviceContext) {
    ctx.stream.device.mark_lost();
}

/// Whether the failure armed by the last [`fail_allocation`] happened.
pub fn fault_injected(ctx: &DeviceContext) -> bool {
    ctx.stream.device.faults.fired()
}
