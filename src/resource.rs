//! The memory behind device and host buffers: who owns it, which timeline
//! values last read and wrote it, and its deferred free.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use ash::vk;

use crate::context::ContextShared;
use crate::error::{Error, Result};
use crate::memory::RawBuffer;
use crate::stream::Garbage;
use crate::timeline::Timeline;
use crate::vk::{Device, MemoryUsage};

/// The last read and write of a buffer on one stream's timeline.
struct BufferUse {
    timeline: Arc<Timeline>,
    read: u64,
    write: u64,
}

/// One allocation shared by a buffer, its clones and its views.
pub(crate) struct BufferMemory {
    pub(crate) device: Arc<Device>,
    /// `None` for a buffer of zero bytes, which has no `VkBuffer`.
    raw: Option<RawBuffer>,
    /// The bytes visible to the user (the `VkBuffer` may be a little larger).
    pub(crate) size: u64,
    /// The context whose stream frees the memory.
    owner: Mutex<Arc<ContextShared>>,
    /// Leaf lock: nothing else is locked while it is held.
    uses: Mutex<Vec<BufferUse>>,
    /// A host mapping of the buffer is alive.
    pub(crate) mapped: AtomicBool,
}

impl BufferMemory {
    /// Allocates `size` bytes for `owner`'s device. A zero size allocates nothing.
    pub(crate) fn new(
        owner: &Arc<ContextShared>,
        size: u64,
        usage: MemoryUsage,
        what: &str,
    ) -> Result<Arc<Self>> {
        let device = owner.device.clone();
        let raw = if size == 0 {
            None
        } else {
            // Whole 32-bit words, so that the fill kernel may read and write
            // the word holding the last byte.
            let padded = size
                .checked_next_multiple_of(4)
                .ok_or_else(|| Error::SizeOverflow {
                    what: what.to_string(),
                    len: usize::MAX,
                    elem_size: 1,
                })?;
            Some(RawBuffer::new(&device, padded, usage, what)?)
        };
        Ok(Arc::new(BufferMemory {
            device,
            raw,
            size,
            owner: Mutex::new(owner.clone()),
            uses: Mutex::new(Vec::new()),
            mapped: AtomicBool::new(false),
        }))
    }

    /// The `VkBuffer`, or a null handle for zero bytes.
    pub(crate) fn handle(&self) -> vk::Buffer {
        self.raw.as_ref().map_or(vk::Buffer::null(), |r| r.buffer)
    }

    pub(crate) fn raw(&self) -> Option<&RawBuffer> {
        self.raw.as_ref()
    }

    /// Takes the buffer out; dropping `self` then frees nothing.
    pub(crate) fn into_raw(mut self) -> Option<RawBuffer> {
        self.raw.take()
    }

    /// Whether the memory is mapped into the host's address space.
    pub(crate) fn host_visible(&self) -> bool {
        self.raw.as_ref().is_some_and(|r| r.mapped.is_some())
    }

    pub(crate) fn owner(&self) -> Arc<ContextShared> {
        self.owner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_owner(&self, owner: Arc<ContextShared>) {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = owner;
    }

    fn uses(&self) -> MutexGuard<'_, Vec<BufferUse>> {
        self.uses.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What an access by `own`'s stream must wait for on other streams: their
    /// writes, and for a write their reads too.
    pub(crate) fn foreign_waits(
        &self,
        own: &Arc<Timeline>,
        write: bool,
    ) -> Vec<(Arc<Timeline>, u64)> {
        self.uses()
            .iter()
            .filter(|u| !Arc::ptr_eq(&u.timeline, own))
            .map(|u| {
                (
                    u.timeline.clone(),
                    if write { u.read.max(u.write) } else { u.write },
                )
            })
            .filter(|(t, v)| *v > 0 && !t.is_complete(*v))
            .collect()
    }

    /// Notes that work signalling `value` on `timeline` reads (or writes) the buffer.
    pub(crate) fn note_use(&self, timeline: &Arc<Timeline>, value: u64, write: bool) {
        let mut uses = self.uses();
        let entry = match uses
            .iter_mut()
            .position(|u| Arc::ptr_eq(&u.timeline, timeline))
        {
            Some(i) => &mut uses[i],
            None => {
                // Forget streams whose work on the buffer is all complete.
                uses.retain(|u| !u.timeline.is_complete(u.read.max(u.write)));
                uses.push(BufferUse {
                    timeline: timeline.clone(),
                    read: 0,
                    write: 0,
                });
                uses.last_mut().expect("pushed above")
            }
        };
        if write {
            entry.write = entry.write.max(value);
        } else {
            entry.read = entry.read.max(value);
        }
    }

    /// The work the host must wait for before it reads the buffer (pending
    /// writes) or writes it (pending reads and writes).
    fn pending(uses: &[BufferUse], write: bool) -> Vec<(Arc<Timeline>, u64)> {
        uses.iter()
            .map(|u| {
                (
                    u.timeline.clone(),
                    if write { u.read.max(u.write) } else { u.write },
                )
            })
            .filter(|(t, v)| *v > 0 && !t.is_complete(*v))
            .collect()
    }

    /// Waits on the host for the work a host read (or write) must follow.
    pub(crate) fn wait_for_host_access(&self, write: bool) -> Result<()> {
        let pending = Self::pending(&self.uses(), write);
        for (timeline, value) in pending {
            timeline.wait(value)?;
        }
        Ok(())
    }

    /// Runs `f` on the mapped bytes `offset..offset+len` if the buffer is
    /// host visible and no device work is pending that conflicts with the
    /// access; returns `None` (without running `f`) otherwise. The use lock
    /// is held while `f` runs, so no command on the buffer can be recorded
    /// (and then submitted) in the meantime.
    pub(crate) fn access_now<R>(
        &self,
        offset: u64,
        len: u64,
        write: bool,
        f: impl FnOnce(*mut u8) -> R,
    ) -> Result<Option<R>> {
        let Some(raw) = &self.raw else {
            return Ok(None);
        };
        let Some(mapped) = raw.mapped else {
            return Ok(None);
        };
        debug_assert!(offset + len <= self.size);
        let uses = self.uses();
        if !Self::pending(&uses, write).is_empty() {
            return Ok(None);
        }
        raw.invalidate_for_host_reads(&self.device, offset, len)?;
        // SAFETY: `offset + len` lies inside the mapping.
        let result = f(unsafe { mapped.as_ptr().add(offset as usize) });
        if write {
            raw.flush_host_writes(&self.device, offset, len)?;
        }
        drop(uses);
        Ok(Some(result))
    }

    /// Like [`access_now`](Self::access_now), but waits for conflicting
    /// device work first instead of giving up.
    pub(crate) fn access_when_ready<R>(
        &self,
        offset: u64,
        len: u64,
        write: bool,
        mut f: impl FnMut(*mut u8) -> R,
    ) -> Result<Option<R>> {
        if !self.host_visible() {
            return Ok(None);
        }
        loop {
            if let Some(r) = self.access_now(offset, len, write, &mut f)? {
                return Ok(Some(r));
            }
            self.wait_for_host_access(write)?;
        }
    }

    /// Fails with [`Error::BufferMapped`] while a host mapping is alive.
    pub(crate) fn check_unmapped(
        &self,
        op: &'static str,
        buffer: impl FnOnce() -> String,
    ) -> Result<()> {
        if self.mapped.load(Ordering::Acquire) {
            return Err(Error::BufferMapped {
                op,
                buffer: buffer(),
            });
        }
        Ok(())
    }
}

impl Drop for BufferMemory {
    fn drop(&mut self) {
        let Some(raw) = self.raw.take() else { return };
        let pending = Self::pending(&self.uses(), true);
        let owner = self.owner();
        owner.defer_free(Garbage { raw, pending });
    }
}
