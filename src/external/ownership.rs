//! Queue family ownership transfers of shared memory: the release of a
//! buffer to `VK_QUEUE_FAMILY_EXTERNAL` before another API, process or
//! `VkDevice` uses its memory, and the acquire that takes it back (over a
//! host mapping, barriers with the host instead).

use bytemuck::Pod;

use crate::buffer::DeviceBuffer;
use crate::enqueue::BufferAccess;
use crate::error::{Error, Result};
use crate::recorder::Command;
use crate::vk::memory::DedicatedKind;

impl<T: Pod> DeviceBuffer<T> {
    /// Enqueues the release of this buffer's (or view's) range to
    /// `VK_QUEUE_FAMILY_EXTERNAL`: after the work enqueued before it, the
    /// memory belongs to the users outside this device (another
    /// `VkDevice`, process or API that imported it), which acquire it on
    /// their side (a Vulkan consumer with a barrier from
    /// `VK_QUEUE_FAMILY_EXTERNAL` over the same range). The Vulkan rules
    /// for external memory: release here, make sure the release has
    /// completed (`synchronize()`, or a semaphore), then acquire there;
    /// without the pair the other side may see undefined contents. Enqueue
    /// nothing on the buffer until
    /// [`enqueue_acquire_from_external`](Self::enqueue_acquire_from_external)
    /// takes it back.
    ///
    /// An empty buffer or view (length 0, wherever it starts) owns no
    /// memory: its release records nothing and orders nothing (Vulkan has
    /// no barrier over zero bytes), though memory that is not shared is
    /// refused all the same.
    ///
    /// Over host memory another process maps
    /// ([`import_host_mapping`](crate::DeviceContext::import_host_mapping)),
    /// which devices of other drivers may share, the release is a barrier
    /// that makes the writes available to the host instead, and the
    /// acquire one that makes host writes visible.
    ///
    /// Errors: [`Error::NotExportable`] for a buffer whose memory is not
    /// shared (made neither by
    /// [`enqueue_create_exportable_buffer`](crate::DeviceContext::enqueue_create_exportable_buffer)
    /// nor by an import).
    pub fn enqueue_release_to_external(&self) -> Result<()> {
        self.transfer_ownership("DeviceBuffer::enqueue_release_to_external", true)
    }

    /// Enqueues the acquire of this buffer's (or view's) range from
    /// `VK_QUEUE_FAMILY_EXTERNAL`: the work enqueued after it sees what the
    /// external users wrote, once they released the memory (and the
    /// release completed before this runs: wait for them first, with
    /// `synchronize()` on their context, a semaphore
    /// ([`enqueue_wait_semaphore`](crate::DeviceContext::enqueue_wait_semaphore))
    /// or the end of their process). An empty range records nothing, and
    /// errors are those of
    /// [`enqueue_release_to_external`](Self::enqueue_release_to_external).
    pub fn enqueue_acquire_from_external(&self) -> Result<()> {
        self.transfer_ownership("DeviceBuffer::enqueue_acquire_from_external", false)
    }

    fn transfer_ownership(&self, op: &'static str, release: bool) -> Result<()> {
        let view = &self.view;
        let Some(raw) = view.memory.raw() else {
            return Ok(()); // an empty buffer has no memory to hand over
        };
        let kind = raw.dedicated_memory().map(|d| &d.kind);
        let shared = kind.is_some_and(|kind| {
            matches!(
                kind,
                DedicatedKind::Exportable(..) | DedicatedKind::Imported | DedicatedKind::Mapping(_)
            )
        });
        let host = matches!(kind, Some(DedicatedKind::Mapping(_)));
        if !shared {
            return Err(Error::NotExportable {
                op,
                reason: "the buffer's memory is not shared with anything outside this device; \
                         create it with DeviceContext::enqueue_create_exportable_buffer or \
                         import it"
                    .into(),
            });
        }
        if view.bytes == 0 {
            // No bytes, no owner to hand them to (and no valid barrier).
            return Ok(());
        }
        let ctx = view.memory.owner();
        let range = (view.offset, view.bytes);
        let access = [BufferAccess {
            memory: &view.memory,
            offset: view.offset,
            len: view.bytes,
            write: true,
        }];
        let command = Command::Ownership {
            buffer: view.memory.handle(),
            range,
            release,
            host,
        };
        crate::enqueue::onto(&ctx, op, &access).command(|_| Ok((command, ())))
    }
}
