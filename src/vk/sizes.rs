//! What sizes of buffers a device takes, checked before anything reaches
//! the driver, and the errors of the sizes it does not: `maxBufferSize`
//! and `maxMemoryAllocationSize` for the buffer, then, once its memory
//! type is chosen, the size and the budget of that type's heap.

use ash::vk;
use gpu_allocator::AllocationError;

use super::info::FreeMemorySource;
use crate::error::{Error, Result};
use crate::vk::{Device, MemoryInfo};

/// Refuses a buffer of `size` bytes beyond the device's limits on
/// buffers: `maxBufferSize` (where reported) and `maxMemoryAllocationSize`
/// (a buffer's memory is one allocation). `what` names the buffer.
pub(crate) fn check_size(device: &Device, size: u64, what: &str) -> Result<()> {
    let adapter = &device.adapter;
    if let Some(limit) = adapter.max_buffer_size {
        if size > limit {
            return Err(too_large(what, size, "maxBufferSize", limit));
        }
    }
    check_allocation_size(device, size, what)
}

/// Refuses an allocation of `bytes` beyond `maxMemoryAllocationSize`.
fn check_allocation_size(device: &Device, bytes: u64, what: &str) -> Result<()> {
    let limit = device.adapter.max_allocation_size;
    if limit > 0 && bytes > limit {
        return Err(too_large(what, bytes, "maxMemoryAllocationSize", limit));
    }
    Ok(())
}

fn too_large(what: &str, bytes: u64, limit_name: &'static str, limit: u64) -> Error {
    Error::TooLarge {
        what: what.to_string(),
        bytes,
        limit_name,
        limit,
    }
}

/// Refuses an allocation of `bytes` (a buffer's memory requirements,
/// which may exceed its size) of memory type `type_index` that its heap
/// cannot hold: more than `maxMemoryAllocationSize`, more than the heap's
/// size, or, where the driver reports a budget (`VK_EXT_memory_budget`),
/// more than the heap's budget leaves. A driver may accept what its heap
/// cannot hold (lavapipe allocates with `malloc`, and the process is
/// killed when the system runs out): refused here, it is an error the
/// caller can act on.
pub(crate) fn check_allocation(
    device: &Device,
    type_index: u32,
    bytes: u64,
    what: &str,
) -> Result<()> {
    check_heap(device, (type_index, bytes), what, true)
}

/// Refuses an import of `bytes` of host memory as memory type
/// `type_index` beyond `maxMemoryAllocationSize` or the size of the
/// type's heap (a Vulkan rule). Not its budget: the pages exist already,
/// and a driver that counts its budget from the free system memory would
/// count them twice.
pub(crate) fn check_host_import(
    device: &Device,
    type_index: u32,
    bytes: u64,
    what: &str,
) -> Result<()> {
    check_heap(device, (type_index, bytes), what, false)
}

/// [`check_allocation`], with the budget where `budget`.
fn check_heap(
    device: &Device,
    (type_index, bytes): (u32, u64),
    what: &str,
    budget: bool,
) -> Result<()> {
    check_allocation_size(device, bytes, what)?;
    let memory = &device.adapter.memory;
    let heap = memory.memory_types[type_index as usize].heap_index as usize;
    let size = memory.memory_heaps[heap].size;
    let budget = match budget {
        true => heap_budget(device).map(|b| (b.heap_budget[heap], b.heap_usage[heap])),
        false => None,
    };
    match heap_refusal(what, bytes, (heap, size), budget) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Why heap `heap` (index, size), with `budget` (budget, usage) where the
/// driver reports one, cannot hold an allocation of `bytes`, if it cannot.
fn heap_refusal(
    what: &str,
    bytes: u64,
    (heap, size): (usize, u64),
    budget: Option<(u64, u64)>,
) -> Option<Error> {
    if bytes > size {
        return Some(too_large(what, bytes, "memory heap size", size));
    }
    let (budget, usage) = budget?;
    let left = budget.saturating_sub(usage);
    (bytes > left).then(|| Error::OutOfMemory {
        what: what.to_string(),
        bytes,
        detail: format!(
            "memory heap {heap} has a budget of {budget} bytes (VK_EXT_memory_budget), \
             {usage} of them in use (by every process, as the driver counts), so {left} are \
             left; drop buffers or allocate less"
        ),
    })
}

/// The error of a failed call on a buffer: out of memory names the buffer
/// and its size (which the call's own error does not know).
pub(super) fn buffer_call_error(
    what: &str,
    size: u64,
    call: &'static str,
    result: vk::Result,
) -> Error {
    match Error::vk(call, result) {
        Error::OutOfMemory { .. } => Error::OutOfMemory {
            what: what.to_string(),
            bytes: size,
            detail: format!("{call} returned {result}"),
        },
        e => e,
    }
}

/// The error of a failed allocation of `size` bytes for `what`.
pub(super) fn allocation_error(
    device: &Device,
    what: &str,
    size: u64,
    e: AllocationError,
) -> Error {
    match e {
        AllocationError::OutOfMemory => {
            let MemoryInfo { free, total, .. } = MemoryInfo::of(device);
            Error::OutOfMemory {
                what: what.to_string(),
                bytes: size,
                detail: format!(
                    "about {free} of {total} bytes are free; drop buffers (and let the stream \
                     retire them) or allocate less"
                ),
            }
        }
        e => Error::Allocation {
            what: what.to_string(),
            detail: e.to_string(),
        },
    }
}

impl MemoryInfo {
    /// What `device` has now.
    pub(crate) fn of(device: &Device) -> MemoryInfo {
        let props = &device.adapter.memory;
        let heaps = &props.memory_heaps[..props.memory_heap_count as usize];
        let local = |i: usize| heaps[i].flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL);
        let total: u64 = (0..heaps.len())
            .filter(|&i| local(i))
            .map(|i| heaps[i].size)
            .sum();
        let allocated = device.allocator().capacity()
            + device
                .exportable_bytes
                .load(std::sync::atomic::Ordering::Acquire);
        let Some(budget) = heap_budget(device) else {
            return MemoryInfo {
                free: total.saturating_sub(allocated),
                total,
                allocated,
                source: FreeMemorySource::OwnAllocations,
            };
        };
        let free = (0..heaps.len())
            .filter(|&i| local(i))
            .map(|i| budget.heap_budget[i].saturating_sub(budget.heap_usage[i]))
            .sum();
        MemoryInfo {
            free,
            total,
            allocated,
            source: FreeMemorySource::DriverBudget,
        }
    }
}

/// Each heap's budget and usage, where the device has
/// `VK_EXT_memory_budget` enabled.
pub(crate) fn heap_budget(
    device: &Device,
) -> Option<vk::PhysicalDeviceMemoryBudgetPropertiesEXT<'static>> {
    if !device.memory_budget {
        return None;
    }
    let mut budget = vk::PhysicalDeviceMemoryBudgetPropertiesEXT::default();
    let mut props2 = vk::PhysicalDeviceMemoryProperties2::default().push_next(&mut budget);
    // SAFETY: the extension is enabled on this device; the structs are
    // valid and chained as the extension defines.
    unsafe {
        device
            .instance
            .raw
            .get_physical_device_memory_properties2(device.adapter.raw, &mut props2)
    };
    Some(vk::PhysicalDeviceMemoryBudgetPropertiesEXT {
        p_next: std::ptr::null_mut(),
        ..budget
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An allocation the heap cannot hold is refused naming its size, or
    /// its budget and usage where the driver reports them; one it can
    /// hold passes.
    #[test]
    fn allocations_beyond_the_heap_or_its_budget_are_refused() {
        let gib = 1u64 << 30;
        let refusal = |bytes, budget| heap_refusal("a buffer", bytes, (1, 8 * gib), budget);
        assert!(refusal(8 * gib, None).is_none());
        assert!(refusal(8 * gib, Some((8 * gib, 0))).is_none());
        match refusal(8 * gib + 1, None) {
            Some(Error::TooLarge {
                limit_name, limit, ..
            }) => assert_eq!((limit_name, limit), ("memory heap size", 8 * gib)),
            other => panic!("{other:?}"),
        }
        let e = refusal(3 * gib, Some((6 * gib, 4 * gib))).unwrap();
        assert!(matches!(e, Error::OutOfMemory { bytes, .. } if bytes == 3 * gib));
        let message = e.to_string();
        for part in [
            "memory heap 1",
            "6442450944",
            "4294967296",
            "2147483648 are left",
        ] {
            assert!(message.contains(part), "{part} not in {message}");
        }
        // Usage above the budget leaves nothing.
        assert!(refusal(1, Some((gib, 2 * gib))).is_some());
        assert!(refusal(2 * gib, Some((6 * gib, 4 * gib))).is_none());
    }
}
