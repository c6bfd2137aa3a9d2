//! Fault injection for tests (feature `fault-injection`): makes the Nth
//! allocation point reached on a device fail as the driver or the allocator
//! would (out of memory), so that every failure path can be exercised.
//!
//! The allocation points: `vkCreateBuffer`, the memory allocation and
//! `vkBindBufferMemory` of every buffer (device, host and staging buffers),
//! `vkAllocateCommandBuffers` (when no free one is pooled) and
//! `vkBeginCommandBuffer` when a batch opens or a graph is recorded,
//! `vkCreateDescriptorPool` and `vkAllocateDescriptorSets` on the pooled
//! descriptor path, `vkCreateComputePipelines` when a kernel (or the
//! crate's fill kernel) is loaded, `vkCreateSemaphore` and
//! `vkCreateCommandPool` when a stream is made, and `vkCreateCommandPool`
//! when a graph is finished.
//!
//! Without the feature, [`allocation`] is `Ok(())`, which the compiler
//! removes: normal builds pay nothing.
//!
//! This is the counter only; the public hook that arms it from a
//! `DeviceContext` is `crate::testing`, in the public layer above.

/// Ok, or the failure injected at this allocation point of `device`: the
/// `vk::Result` the real call would return when out of memory.
#[cfg(not(feature = "fault-injection"))]
#[inline(always)]
pub(crate) fn allocation(_device: &crate::vk::Device) -> std::result::Result<(), ash::vk::Result> {
    Ok(())
}

#[cfg(feature = "fault-injection")]
pub(crate) use injection::*;

#[cfg(feature = "fault-injection")]
mod injection {
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

    use ash::vk;

    use crate::vk::Device;

    /// A device's fault-injection state.
    ///
    /// Per device, not process-wide: tests of one binary run in parallel on
    /// devices of their own and must not fire each other's faults. Atomic
    /// counters rather than thread-local ones: a device's streams are used
    /// from several threads, and allocations also happen on whichever
    /// thread drops a buffer or reclaims a batch, all of which must count.
    #[derive(Default)]
    pub(crate) struct Faults {
        /// Allocation points still to pass before the one that fails; 0
        /// when nothing is armed.
        countdown: AtomicU64,
        /// Allocation points passed since the last `arm`.
        passed: AtomicU64,
        /// Whether the armed failure has been injected.
        fired: AtomicBool,
        /// Whether every allocation point after the armed one fails too.
        sticky: AtomicBool,
    }

    impl Faults {
        /// Makes the `n`th allocation point from now fail, and with
        /// `sticky` every one after it too; 0 disarms.
        pub(crate) fn arm(&self, n: u64, sticky: bool) {
            self.countdown.store(0, Ordering::SeqCst);
            self.passed.store(0, Ordering::SeqCst);
            self.fired.store(false, Ordering::SeqCst);
            self.sticky.store(sticky, Ordering::SeqCst);
            self.countdown.store(n, Ordering::SeqCst);
        }

        pub(crate) fn passed(&self) -> u64 {
            self.passed.load(Ordering::SeqCst)
        }

        pub(crate) fn fired(&self) -> bool {
            self.fired.load(Ordering::SeqCst)
        }

        fn hit(&self) -> bool {
            self.passed.fetch_add(1, Ordering::SeqCst);
            let sticky = self.sticky.load(Ordering::SeqCst);
            // 0: disarmed; 1: this point fails (and stays at 1 when sticky).
            let before =
                self.countdown
                    .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |c| match c {
                        0 => None,
                        1 if sticky => None,
                        c => Some(c - 1),
                    });
            let fails = matches!(before, Ok(1) | Err(1));
            if fails {
                self.fired.store(true, Ordering::SeqCst);
            }
            fails
        }
    }

    /// Ok, or the failure injected at this allocation point of `device`:
    /// the `vk::Result` the real call would return when out of memory.
    pub(crate) fn allocation(device: &Device) -> std::result::Result<(), vk::Result> {
        if device.faults.hit() {
            Err(vk::Result::ERROR_OUT_OF_DEVICE_MEMORY)
        } else {
            Ok(())
        }
    }
}
