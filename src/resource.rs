//! The memory behind device and host buffers: who owns it, which timeline
//! values last read and wrote it, whether the host has borrowed it, and its
//! deferred free.
//!
//! The host and the device never touch the memory at the same time in a
//! way that could race: a host borrow (a mapping, a host slice) waits for
//! the device work it conflicts with, and device work cannot be recorded
//! while a conflicting host borrow is alive. Both checks happen under one
//! lock, so neither can slip past the other.

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

/// How the host holds the memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum HostBorrow {
    None,
    /// This many host readers (host slices).
    Shared(usize),
    /// One host writer of the memory itself (a direct mapping or a mutable
    /// host slice).
    Exclusive,
    /// A mapping through a host copy: the device may read the memory (to
    /// fill the copy) but nothing may write it until the copy is written back.
    Staged,
}

/// What a user's host borrow does with the memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum HostAccess {
    /// Reads it in place (a host slice).
    Read,
    /// Reads and writes it in place (a mutable host slice, a direct mapping).
    Write,
    /// Works on a copy that is written back later (a staged mapping).
    Copy,
}

/// Device uses and host borrows, kept under one lock.
struct UseState {
    uses: Vec<BufferUse>,
    borrow: HostBorrow,
}

impl UseState {
    /// The work a host access must wait for: pending writes for a read,
    /// pending reads and writes for a write.
    fn pending(&self, write: bool) -> Vec<(Arc<Timeline>, u64)> {
        self.uses
            .iter()
            .map(|u| {
                (
                    u.timeline.clone(),
                    if write { u.read.max(u.write) } else { u.write },
                )
            })
            .filter(|(t, v)| *v > 0 && !t.is_complete(*v))
            .collect()
    }

    /// Whether device work (or the library's own host copies, which stand
    /// in for it) may read or write the memory beside the current borrow.
    fn device_allows(&self, write: bool) -> bool {
        match self.borrow {
            HostBorrow::None => true,
            HostBorrow::Shared(_) | HostBorrow::Staged => !write,
            HostBorrow::Exclusive => false,
        }
    }

    /// Whether a new user borrow of this kind may start beside the current one.
    fn host_allows(&self, access: HostAccess) -> bool {
        matches!(
            (self.borrow, access),
            (HostBorrow::None, _) | (HostBorrow::Shared(_), HostAccess::Read)
        )
    }

    fn check_device(&self, op: &'static str, write: bool) -> Result<()> {
        if self.device_allows(write) {
            Ok(())
        } else {
            Err(Error::BufferMapped {
                op,
                buffer: describe_borrow(self.borrow),
            })
        }
    }
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
    state: Mutex<UseState>,
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
        // Memory of dropped buffers whose work is done can be reused now.
        owner.lock().reclaim_garbage()?;
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
            state: Mutex::new(UseState {
                uses: Vec::new(),
                borrow: HostBorrow::None,
            }),
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

    /// The host address of byte `offset`, where the memory is mapped.
    pub(crate) fn host_ptr(&self, offset: u64) -> Option<*mut u8> {
        let mapped = self.raw.as_ref()?.mapped?;
        // SAFETY: callers pass offsets inside the buffer.
        Some(unsafe { mapped.as_ptr().add(offset as usize) })
    }

    pub(crate) fn owner(&self) -> Arc<ContextShared> {
        self.owner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_owner(&self, owner: Arc<ContextShared>) {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = owner;
    }

    fn state(&self) -> MutexGuard<'_, UseState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds to `out` what an access by `own`'s stream must wait for on
    /// other streams: their writes, and for a write their reads too.
    pub(crate) fn foreign_waits(
        &self,
        own: &Arc<Timeline>,
        write: bool,
        out: &mut Vec<(Arc<Timeline>, u64)>,
    ) {
        let state = self.state();
        for u in &state.uses {
            if Arc::ptr_eq(&u.timeline, own) {
                continue;
            }
            let value = if write { u.read.max(u.write) } else { u.write };
            if value > 0 && !u.timeline.is_complete(value) {
                out.push((u.timeline.clone(), value));
            }
        }
    }

    /// Notes that work signalling `value` on `timeline` reads (or writes)
    /// the buffer; fails if a host borrow forbids it.
    pub(crate) fn note_device_use(
        &self,
        op: &'static str,
        timeline: &Arc<Timeline>,
        value: u64,
        write: bool,
    ) -> Result<()> {
        let mut state = self.state();
        state.check_device(op, write)?;
        let uses = &mut state.uses;
        #[allow(clippy::expect_used, reason = "the use was pushed just before")]
        let entry = match uses.iter().position(|u| Arc::ptr_eq(&u.timeline, timeline)) {
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
        Ok(())
    }

    /// Waits on the host for the work a host read (or write) must follow.
    pub(crate) fn wait_for_host_access(&self, write: bool) -> Result<()> {
        let pending = self.state().pending(write);
        for (timeline, value) in pending {
            timeline.wait(value)?;
        }
        Ok(())
    }

    /// Borrows the memory for the user's host code, once the device work it
    /// conflicts with is done (writes for a read or a copy; reads and writes
    /// for a write). Fails if a conflicting host borrow is alive. Release
    /// with [`release_host`](Self::release_host).
    pub(crate) fn borrow_host(&self, op: &'static str, access: HostAccess) -> Result<()> {
        let waits_for_reads = access == HostAccess::Write;
        loop {
            {
                let mut state = self.state();
                if !state.host_allows(access) {
                    return Err(Error::BufferMapped {
                        op,
                        buffer: describe_borrow(state.borrow),
                    });
                }
                if state.pending(waits_for_reads).is_empty() {
                    state.borrow = match (state.borrow, access) {
                        (HostBorrow::Shared(n), HostAccess::Read) => HostBorrow::Shared(n + 1),
                        (_, HostAccess::Read) => HostBorrow::Shared(1),
                        (_, HostAccess::Write) => HostBorrow::Exclusive,
                        (_, HostAccess::Copy) => HostBorrow::Staged,
                    };
                    return Ok(());
                }
            }
            self.wait_for_host_access(waits_for_reads)?;
        }
    }

    /// Ends a borrow made by [`borrow_host`](Self::borrow_host).
    pub(crate) fn release_host(&self) {
        let mut state = self.state();
        state.borrow = match state.borrow {
            HostBorrow::Shared(n) if n > 1 => HostBorrow::Shared(n - 1),
            _ => HostBorrow::None,
        };
    }

    /// Runs `f` on the mapped bytes `offset..offset+len` if the buffer is
    /// host visible and no device work is pending that conflicts with the
    /// access; returns `None` (without running `f`) otherwise. Fails if a
    /// host borrow forbids the access. The lock is held while `f` runs, so
    /// no command on the buffer can be recorded (and then submitted) meanwhile.
    pub(crate) fn access_now<R>(
        &self,
        op: &'static str,
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
        let state = self.state();
        state.check_device(op, write)?;
        if !state.pending(write).is_empty() {
            return Ok(None);
        }
        raw.invalidate_for_host_reads(&self.device, offset, len)?;
        // SAFETY: `offset + len` lies inside the mapping.
        let result = f(unsafe { mapped.as_ptr().add(offset as usize) });
        if write {
            raw.flush_host_writes(&self.device, offset, len)?;
        }
        drop(state);
        Ok(Some(result))
    }

    /// Like [`access_now`](Self::access_now), but waits for conflicting
    /// device work first instead of giving up.
    pub(crate) fn access_when_ready<R>(
        &self,
        op: &'static str,
        offset: u64,
        len: u64,
        write: bool,
        mut f: impl FnMut(*mut u8) -> R,
    ) -> Result<Option<R>> {
        if self.host_ptr(0).is_none() {
            return Ok(None);
        }
        loop {
            if let Some(r) = self.access_now(op, offset, len, write, &mut f)? {
                return Ok(Some(r));
            }
            self.wait_for_host_access(write)?;
        }
    }
}

fn describe_borrow(borrow: HostBorrow) -> String {
    match borrow {
        HostBorrow::Exclusive => "the buffer is mapped (or mutably borrowed) by the host".into(),
        HostBorrow::Staged => "the buffer is mapped to the host".into(),
        HostBorrow::Shared(n) => format!("the buffer is borrowed by {n} host slice(s)"),
        HostBorrow::None => "the buffer is not borrowed".into(),
    }
}

impl Drop for BufferMemory {
    fn drop(&mut self) {
        let Some(raw) = self.raw.take() else { return };
        let pending = self.state().pending(true);
        let owner = self.owner();
        owner.defer_free(Garbage { raw, pending });
    }
}
