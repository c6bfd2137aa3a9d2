//! The aliases a device keeps of other devices' exportable memory for
//! copies between contexts.

use crate::context::DeviceContext;

/// How many aliases of other devices' exportable memory a device keeps for
/// zero-copy copies ([`DeviceContext::shared_aliases`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SharedAliases {
    /// Aliases kept now: one per exportable buffer of another device that a
    /// copy has gone through, until that buffer or this device goes.
    pub kept: usize,
    /// Aliases imported since the device was opened (a copy through a kept
    /// alias imports nothing).
    pub imported: u64,
}

/// Sharing memory and semaphores with other devices, processes and APIs.
impl DeviceContext {
    /// The aliases of other devices' exportable memory this context's
    /// device keeps for copies between contexts (see
    /// [`DeviceBuffer::enqueue_copy_from`](crate::DeviceBuffer::enqueue_copy_from)).
    pub fn shared_aliases(&self) -> SharedAliases {
        let (kept, imported) = self.stream.device.external.aliases.counts();
        SharedAliases { kept, imported }
    }
}
