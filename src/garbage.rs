//! Dropped memory waiting for the device work that still uses it: one list
//! per device, shared by all its streams.

use std::sync::{Arc, Mutex, MutexGuard};

use crate::vk::memory::RawBuffer;
use crate::vk::{Device, Timeline};

/// A stream submits its open batch once buffers of this many bytes,
/// dropped, wait for its work.
pub(crate) const FLUSH_GARBAGE_BYTES: u64 = 64 << 20;

/// Memory that is freed once every listed timeline value has completed.
pub(crate) struct Garbage {
    pub(crate) raw: RawBuffer,
    pub(crate) pending: Vec<(Arc<Timeline>, u64)>,
}

impl Garbage {
    fn is_free(&self) -> bool {
        self.pending.iter().all(|(t, v)| t.is_complete(*v))
    }
}

/// The garbage of every stream of one device, in one list: memory used on
/// several streams is freed by whichever of them sees its last use pass,
/// not only by the stream that owned it. Lock order: a stream's lock, then
/// this list's.
pub(crate) struct GarbageList {
    device: Arc<Device>,
    items: Mutex<(Vec<Garbage>, u64)>,
}

impl GarbageList {
    pub(crate) fn new(device: Arc<Device>) -> Arc<Self> {
        Arc::new(GarbageList {
            device,
            items: Mutex::new((Vec::new(), 0)),
        })
    }

    fn items(&self) -> MutexGuard<'_, (Vec<Garbage>, u64)> {
        self.items.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Frees `garbage` at once if its uses are complete (`None`), else keeps
    /// it and returns the bytes now waiting.
    pub(crate) fn keep(&self, garbage: Garbage) -> Option<u64> {
        if garbage.is_free() {
            self.device.retire_buffer(garbage.raw);
            return None;
        }
        Some(self.push(garbage))
    }

    /// Adds `garbage`; returns the bytes now waiting.
    fn push(&self, garbage: Garbage) -> u64 {
        let mut items = self.items();
        items.1 += garbage.raw.size;
        items.0.push(garbage);
        items.1
    }

    /// Frees the garbage whose last uses have completed.
    pub(crate) fn reclaim(&self) {
        let freed: Vec<Garbage> = {
            let mut items = self.items();
            let (list, bytes) = &mut *items;
            let mut freed = Vec::new();
            let mut i = 0;
            while i < list.len() {
                if list[i].is_free() {
                    let g = list.swap_remove(i);
                    *bytes -= g.raw.size;
                    freed.push(g);
                } else {
                    i += 1;
                }
            }
            freed
        };
        for g in freed {
            self.device.retire_buffer(g.raw);
        }
    }

    pub(crate) fn len(&self) -> usize {
        self.items().0.len()
    }
}

impl Drop for GarbageList {
    fn drop(&mut self) {
        // Every stream of the device is gone, and each waited for its work
        // as it went: the pending values are complete (the waits are sure).
        let (list, _) = std::mem::take(self.items.get_mut().unwrap_or_else(|e| e.into_inner()));
        for g in list {
            for (timeline, value) in &g.pending {
                if timeline.submitted() >= *value {
                    let _ = timeline.wait_submitted(*value);
                }
            }
            self.device.retire_buffer(g.raw);
        }
    }
}
