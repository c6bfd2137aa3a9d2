//! The memory behind device and host buffers: who owns it, which timeline
//! values last read and wrote it, whether the host has borrowed it, and its
//! deferred free.
//!
//! The host and the device never touch the memory at the same time in a
//! way that could race: a host borrow (a mapping, a host slice) waits for
//! the device work it conflicts with, and device work cannot be recorded
//! while a conflicting host borrow is alive. Both checks happen under one
//! lock, so neither can slip past the other.

use std::sync::{Arc, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};

use ash::vk;

use crate::error::{Error, Result};
use crate::garbage::Garbage;
use crate::stream::{Point, StreamHandle, StreamRef};
use crate::vk::memory::{MappedRange, RawBuffer};
use crate::vk::{name_object, Device, MemoryUsage, Timeline};

mod locks;

pub(crate) use locks::{lock_all, lock_two};

/// The last read and write of a buffer on one stream's timeline.
struct BufferUse {
    stream: StreamRef,
    read: u64,
    write: u64,
}

impl BufferUse {
    /// What an access must wait for: the last write, and for a write the
    /// last read too (0 where nothing).
    fn last(&self, write: bool) -> u64 {
        if write {
            self.read.max(self.write)
        } else {
            self.write
        }
    }

    /// The value an access must wait for, where it has not completed.
    fn waits_for(&self, write: bool) -> Option<u64> {
        let value = self.last(write);
        (value > 0 && !self.stream.timeline.is_complete(value)).then_some(value)
    }

    /// [`waits_for`](Self::waits_for) as a point (made only then: making
    /// one clones its handles).
    fn pending(&self, write: bool) -> Option<Point> {
        self.waits_for(write).map(|value| self.stream.at(value))
    }
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
    /// An error that arose in a `Drop` of something using this memory (a
    /// mapping's write-back, say), returned by the memory's next operation.
    kept: Option<Error>,
}

impl UseState {
    /// The work a host access must wait for: pending writes for a read,
    /// pending reads and writes for a write.
    fn pending(&self, write: bool) -> Vec<Point> {
        self.uses.iter().filter_map(|u| u.pending(write)).collect()
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

    /// The host's borrow, where it keeps the device from this access.
    fn check_device(&self, write: bool) -> std::result::Result<(), HostBorrow> {
        if self.device_allows(write) {
            Ok(())
        } else {
            Err(self.borrow)
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
    owner: Mutex<Arc<StreamHandle>>,
    /// Leaf lock: nothing else is locked while it is held.
    state: Mutex<UseState>,
    /// Makes operations on the memory atomic with respect to each other. An
    /// operation recorded as one command holds it shared while it records;
    /// one that takes several commands (a transfer in pieces, a mapping's
    /// write-back) holds it exclusively from its first command to its last,
    /// so that no other operation on the memory falls between them. Taken
    /// before the stream lock; several memories are locked in address order
    /// ([`lock_all`], [`lock_two`]); an exclusive holder locks no other
    /// memory, but for a copy between devices, which holds both ends
    /// exclusively (taken together, in address order) and the copy's
    /// alias, which nothing else can reach.
    ops: RwLock<()>,
    /// The user's label (`with_label`), where one was given.
    label: Mutex<Option<Arc<str>>>,
}

/// A lock on a memory's operations (see `BufferMemory::ops`).
pub(crate) enum OpsGuard<'a> {
    Shared(#[allow(dead_code)] RwLockReadGuard<'a, ()>),
    Exclusive(#[allow(dead_code)] RwLockWriteGuard<'a, ()>),
}

impl BufferMemory {
    /// Allocates `size` bytes for `owner`'s device. A zero size allocates nothing.
    pub(crate) fn new(
        owner: &Arc<StreamHandle>,
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
                    len: usize::try_from(size).unwrap_or(usize::MAX),
                    elem_size: 1,
                })?;
            let raw = RawBuffer::new(&device, padded, usage, what)?;
            name_object(&device, raw.buffer, what);
            Some(raw)
        };
        Ok(Self::from_raw(owner, raw, size))
    }

    /// Memory over `raw` (of at least `size` bytes, whole 32-bit words)
    /// for `owner`'s device.
    pub(crate) fn from_raw(
        owner: &Arc<StreamHandle>,
        raw: Option<RawBuffer>,
        size: u64,
    ) -> Arc<Self> {
        Arc::new(BufferMemory {
            device: owner.device.clone(),
            raw,
            size,
            owner: Mutex::new(owner.clone()),
            state: Mutex::new(UseState {
                uses: Vec::new(),
                borrow: HostBorrow::None,
                kept: None,
            }),
            ops: RwLock::new(()),
            label: Mutex::new(None),
        })
    }

    /// The user's label, where one was given.
    /// The use state, where device work may make an access now: not while
    /// an error a `Drop` kept waits to be returned (it is, here), nor while
    /// the host's borrow forbids it.
    fn state_for_device(&self, op: &'static str, write: bool) -> Result<MutexGuard<'_, UseState>> {
        let mut state = self.state();
        if let Some(e) = state.kept.take() {
            return Err(e);
        }
        if let Err(borrow) = state.check_device(write) {
            drop(state);
            return Err(self.borrowed_error(op, borrow));
        }
        Ok(state)
    }

    /// The error of an access the host's `borrow` of this memory forbids,
    /// naming the buffer by its label where it has one. (Takes the label's
    /// lock: not with the use state held, a leaf lock.)
    fn borrowed_error(&self, op: &'static str, borrow: HostBorrow) -> Error {
        let name = match self.label() {
            Some(label) => format!("the buffer `{label}`"),
            None => "the buffer".to_string(),
        };
        Error::BufferMapped {
            op,
            buffer: describe_borrow(&name, borrow),
        }
    }

    pub(crate) fn label(&self) -> Option<Arc<str>> {
        self.label.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Labels the memory: for `Debug`, errors, the trace, and as its
    /// `VkBuffer`'s debug name where validation or tracing is on.
    pub(crate) fn set_label(&self, label: &str) {
        if let Some(raw) = &self.raw {
            name_object(&self.device, raw.buffer, label);
        }
        *self.label.lock().unwrap_or_else(|e| e.into_inner()) = Some(label.into());
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

    /// The `len` bytes at `offset`, where the memory is mapped. Touching
    /// them needs a host borrow (or the use lock, as `access_now` holds it).
    pub(crate) fn mapped(&self, offset: u64, len: u64) -> Option<MappedRange> {
        self.raw.as_ref()?.mapped_range(offset, len)
    }

    pub(crate) fn owner(&self) -> Arc<StreamHandle> {
        self.owner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(crate) fn set_owner(&self, owner: Arc<StreamHandle>) {
        *self.owner.lock().unwrap_or_else(|e| e.into_inner()) = owner;
    }

    fn state(&self) -> MutexGuard<'_, UseState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Locks the memory's operations: exclusively for an operation of
    /// several commands, shared for one of a single command.
    pub(crate) fn lock_ops(&self, exclusive: bool) -> OpsGuard<'_> {
        if exclusive {
            OpsGuard::Exclusive(self.ops.write().unwrap_or_else(|e| e.into_inner()))
        } else {
            OpsGuard::Shared(self.ops.read().unwrap_or_else(|e| e.into_inner()))
        }
    }

    /// Whether a host borrow of the memory (a mapping, a host slice) is
    /// alive.
    pub(crate) fn is_host_borrowed(&self) -> bool {
        self.state().borrow != HostBorrow::None
    }

    /// Keeps an error from a `Drop` (a mapping's write-back, say) for the
    /// memory's next operation. The first error is kept.
    pub(crate) fn keep_error(&self, error: Error) {
        let mut state = self.state();
        if state.kept.is_none() {
            state.kept = Some(Error::Deferred(Box::new(error)));
        }
    }

    /// Returns (and forgets) the error kept by [`keep_error`](Self::keep_error).
    pub(crate) fn check_kept_error(&self) -> Result<()> {
        self.state().kept.take().map_or(Ok(()), Err)
    }

    /// Adds to `out` what an access by `own`'s stream must wait for on
    /// other streams: their writes, and for a write their reads too. Fails
    /// with an error kept from a `Drop` (see `keep_error`).
    pub(crate) fn foreign_waits(
        &self,
        own: &Arc<Timeline>,
        write: bool,
        out: &mut Vec<Point>,
    ) -> Result<()> {
        let mut state = self.state();
        if let Some(e) = state.kept.take() {
            return Err(e);
        }
        for u in &state.uses {
            if Arc::ptr_eq(&u.stream.timeline, own) {
                continue;
            }
            out.extend(u.pending(write));
        }
        Ok(())
    }

    /// Notes that the work signalling `value` on `stream`'s timeline reads
    /// (or writes) the buffer; fails if a host borrow forbids it, or with an
    /// error kept from a `Drop`.
    pub(crate) fn note_device_use(
        &self,
        op: &'static str,
        stream: &StreamHandle,
        value: u64,
        write: bool,
    ) -> Result<()> {
        let mut state = self.state_for_device(op, write)?;
        let uses = &mut state.uses;
        #[allow(clippy::expect_used, reason = "the use was pushed just before")]
        let entry = match uses
            .iter()
            .position(|u| Arc::ptr_eq(&u.stream.timeline, &stream.timeline))
        {
            Some(i) => &mut uses[i],
            None => {
                // Forget streams whose work on the buffer is all complete.
                uses.retain(|u| u.waits_for(true).is_some());
                uses.push(BufferUse {
                    stream: stream.stream_ref(),
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

    /// The work a host read (or write) must follow, one point per stream.
    pub(crate) fn pending_work(&self, write: bool) -> Vec<Point> {
        self.state().pending(write)
    }

    /// Waits on the host for the work a host read (or write) must follow.
    pub(crate) fn wait_for_host_access(&self, write: bool) -> Result<()> {
        let pending = self.state().pending(write);
        for point in pending {
            point.wait()?;
        }
        Ok(())
    }

    /// Borrows the memory for the user's host code, once the device work it
    /// conflicts with is done (writes for a read or a copy; reads and writes
    /// for a write). Fails if a conflicting host borrow is alive. Release
    /// with [`release_host`](Self::release_host).
    pub(crate) fn borrow_host(&self, op: &'static str, access: HostAccess) -> Result<()> {
        self.device.check_alive(op)?;
        // At once where no pending work conflicts, under the shared lock (no
        // borrow starts inside an operation of several commands); else the
        // borrow waits for the device holding the lock exclusively, so that
        // no new command on the memory starts meanwhile and the wait ends
        // however busy other threads keep the buffer.
        {
            let _ops = self.lock_ops(false);
            if self.try_borrow_host(op, access)? {
                return Ok(());
            }
        }
        let _ops = self.lock_ops(true);
        loop {
            if self.try_borrow_host(op, access)? {
                return Ok(());
            }
            self.wait_for_host_access(access == HostAccess::Write)?;
        }
    }

    /// Whether the memory is mapped on the host (direct access possible).
    pub(crate) fn is_mapped(&self) -> bool {
        self.raw.as_ref().is_some_and(|r| r.mapped.is_some())
    }

    /// Borrows the memory if no device work it conflicts with is pending;
    /// `Ok(false)` where some is. The caller holds the operation lock.
    fn try_borrow_host(&self, op: &'static str, access: HostAccess) -> Result<bool> {
        let waits_for_reads = access == HostAccess::Write;
        let mut state = self.state();
        if let Some(e) = state.kept.take() {
            return Err(e);
        }
        if !state.host_allows(access) {
            let borrow = state.borrow;
            drop(state);
            return Err(self.borrowed_error(op, borrow));
        }
        if !state.pending(waits_for_reads).is_empty() {
            return Ok(false);
        }
        state.borrow = match (state.borrow, access) {
            (HostBorrow::Shared(n), HostAccess::Read) => HostBorrow::Shared(n + 1),
            (_, HostAccess::Read) => HostBorrow::Shared(1),
            (_, HostAccess::Write) => HostBorrow::Exclusive,
            (_, HostAccess::Copy) => HostBorrow::Staged,
        };
        Ok(true)
    }

    /// Readies the memory for an access that another device makes through
    /// an alias of it (a copy between contexts), with the operation lock
    /// `_held` taken exclusively, so that no command and no host borrow of
    /// the memory starts until the access is done and the caller lets the
    /// lock go. Fails as a command would where a host borrow forbids the
    /// access (or with an error kept from a `Drop`); then waits on the
    /// host for the work of the memory's own device that it must follow.
    pub(crate) fn ready_for_foreign_access(
        &self,
        op: &'static str,
        write: bool,
        _held: &OpsGuard<'_>,
    ) -> Result<()> {
        drop(self.state_for_device(op, write)?);
        self.wait_for_host_access(write)
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
        f: impl FnOnce(MappedRange) -> R,
    ) -> Result<Option<R>> {
        self.device.check_alive(op)?;
        let Some(raw) = &self.raw else {
            return Ok(None);
        };
        debug_assert!(offset + len <= self.size);
        let Some(mapped) = raw.mapped_range(offset, len) else {
            return Ok(None);
        };
        let state = self.state_for_device(op, write)?;
        if !state.pending(write).is_empty() {
            return Ok(None);
        }
        raw.invalidate_for_host_reads(&self.device, offset, len)?;
        let result = f(mapped);
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
        mut f: impl FnMut(MappedRange) -> R,
    ) -> Result<Option<R>> {
        if self.raw.as_ref().is_none_or(|r| r.mapped.is_none()) {
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

/// How the host holds a buffer, `name` (the buffer and its label).
fn describe_borrow(name: &str, borrow: HostBorrow) -> String {
    match borrow {
        HostBorrow::Exclusive => format!("{name} is mapped (or mutably borrowed) by the host"),
        HostBorrow::Staged => format!("{name} is mapped to the host"),
        HostBorrow::Shared(n) => format!("{name} is borrowed by {n} host slice(s)"),
        HostBorrow::None => format!("{name} is not borrowed"),
    }
}

impl Drop for BufferMemory {
    fn drop(&mut self) {
        let Some(raw) = self.raw.take() else { return };
        let pending = self.state().pending(true);
        let pending = pending
            .into_iter()
            .map(|p| (p.stream.timeline, p.value))
            .collect();
        let owner = self.owner();
        owner.defer_free(Garbage { raw, pending });
    }
}
