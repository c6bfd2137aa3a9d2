//! Transfers between the host and buffers, and between buffers: uploads
//! (straight into host-visible memory when it is idle, else staged in
//! pieces), downloads (likewise, with a window of pieces in flight),
//! deferred downloads into caller memory, and device copies. `enqueue_fill`
//! lives in `fill.rs`.

use std::collections::VecDeque;
use std::sync::Arc;

use ash::vk;

use crate::enqueue::BufferAccess;
use crate::error::{Error, Result};
use crate::garbage::Garbage;
use crate::recorder::Command;
use crate::resource::BufferMemory;
use crate::staging::StagingBlock;
use crate::stream::batches::Stream;
use crate::stream::StreamHandle;
use crate::vk::memory::RawDestination;

/// Staged uploads and downloads are split into pieces of at most this many
/// bytes: staging buffers stay a reasonable size, and the host copies one
/// piece while the device copies another.
pub(crate) const TRANSFER_CHUNK: u64 = 8 << 20;
/// Staged download pieces in flight at once.
const DOWNLOAD_WINDOW: usize = 3;

/// The pieces a staged transfer of `len` bytes goes in: (start, length),
/// each at most `TRANSFER_CHUNK` bytes. The one chunker of uploads,
/// downloads and deferred downloads.
fn pieces(len: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..len)
        .step_by(TRANSFER_CHUNK as usize)
        .map(move |start| (start, (len - start).min(TRANSFER_CHUNK as usize)))
}

/// The range a direct transfer reads or writes, for the trace.
fn direct_access(
    memory: &Arc<BufferMemory>,
    offset: u64,
    len: u64,
    write: bool,
) -> BufferAccess<'_> {
    BufferAccess {
        memory,
        offset,
        len,
        write,
    }
}

/// Copies `bytes` into `dst` at byte `offset`: straight into its memory
/// when it is host visible and idle, else through staging, in pieces
/// that no other operation on `dst` can fall between.
pub(crate) fn upload(
    handle: &StreamHandle,
    op: &'static str,
    dst: &Arc<BufferMemory>,
    offset: u64,
    bytes: &[u8],
) -> Result<()> {
    let _ops = dst.lock_ops(bytes.len() as u64 > TRANSFER_CHUNK);
    upload_held(handle, op, dst, offset, bytes)
}

/// [`upload`](upload) by a caller that holds `dst`'s operation
/// lock (exclusively where `bytes` is more than one piece).
pub(crate) fn upload_held(
    handle: &StreamHandle,
    op: &'static str,
    dst: &Arc<BufferMemory>,
    offset: u64,
    bytes: &[u8],
) -> Result<()> {
    if bytes.is_empty() {
        return dst.check_kept_error();
    }
    let len = bytes.len() as u64;
    if !handle.force_staging {
        let started = crate::enqueue::trace_start(handle);
        // No device work touches the range while the use lock is held.
        let copied = dst.access_now(op, offset, len, true, |mapped| mapped.write(bytes))?;
        if copied.is_some() {
            crate::enqueue::trace_direct(
                handle,
                op,
                started,
                direct_access(dst, offset, len, true),
            );
            return Ok(());
        }
        log::trace!("{op}: the buffer's memory is not host visible; staging {len} bytes");
    }
    for (i, (start, piece)) in pieces(bytes.len()).enumerate() {
        let chunk = &bytes[start..start + piece];
        let start = start as u64;
        let stage = || -> Result<()> {
            if i > 0 {
                // Submit the chunk staged before, so that the device
                // copies it while the host stages this one.
                handle.flush()?;
            }
            let access = BufferAccess {
                memory: dst,
                offset: offset + start,
                len: chunk.len() as u64,
                write: true,
            };
            crate::enqueue::onto(handle, op, &[access])
                .holding(Some(dst))
                .command(|stream| {
                    let slice = stream.stage_upload(chunk.len() as u64)?;
                    // No device work uses the slice yet.
                    slice.mapped.write(chunk);
                    let region = vk::BufferCopy {
                        src_offset: slice.offset,
                        dst_offset: offset + start,
                        size: chunk.len() as u64,
                    };
                    Ok((Command::copy(slice.buffer, dst.handle(), region), ()))
                })
        };
        match stage() {
            // A piece after the first found no memory (a command buffer,
            // staging): earlier pieces are on their way, so failing now
            // would leave the range half written. Once the work in flight
            // is done, which gives back what it holds, the piece is tried
            // once more.
            Err(Error::OutOfMemory { .. }) if i > 0 => {
                log::debug!("{op}: piece {i} found no memory; retrying once the device is idle");
                handle.synchronize()?;
                stage()?;
            }
            other => other?,
        }
    }
    Ok(())
}

/// Copies `out.len()` bytes of `src` at byte `offset` into `out`, waiting
/// for the device work that writes them.
pub(crate) fn download(
    handle: &StreamHandle,
    op: &'static str,
    src: &Arc<BufferMemory>,
    offset: u64,
    out: &mut [u8],
) -> Result<()> {
    // Read in pieces, the download holds the buffer's operations until
    // the last piece is recorded, so no write falls between two pieces.
    let many = out.len() as u64 > TRANSFER_CHUNK;
    let direct = !handle.force_staging && src.is_mapped() && !out.is_empty();
    if direct && !many {
        // At once where no pending work conflicts, under the shared lock.
        let _ops = src.lock_ops(false);
        let len = out.len() as u64;
        let started = crate::enqueue::trace_start(handle);
        if src
            .access_now(op, offset, len, false, |mapped| mapped.read(out))?
            .is_some()
        {
            crate::enqueue::trace_direct(
                handle,
                op,
                started,
                direct_access(src, offset, len, false),
            );
            return Ok(());
        }
    }
    // Else the read waits for the device holding the lock exclusively:
    // no new command on the memory starts meanwhile, so the wait ends
    // however busy other threads keep the buffer (under the shared lock
    // a writer that never paused kept a direct read waiting for ever).
    let _ops = src.lock_ops(many || direct);
    download_held(handle, op, src, offset, out)
}

/// [`download`](download) by a caller that holds `src`'s
/// operation lock (exclusively where `out` is more than one piece).
pub(crate) fn download_held(
    handle: &StreamHandle,
    op: &'static str,
    src: &Arc<BufferMemory>,
    offset: u64,
    out: &mut [u8],
) -> Result<()> {
    if out.is_empty() {
        return src.check_kept_error();
    }
    if !handle.force_staging {
        let len = out.len() as u64;
        let started = crate::enqueue::trace_start(handle);
        // No device work writes the range while the use lock is held.
        let read = src.access_when_ready(op, offset, len, false, |mapped| mapped.read(out))?;
        if read.is_some() {
            crate::enqueue::trace_direct(
                handle,
                op,
                started,
                direct_access(src, offset, len, false),
            );
            return Ok(());
        }
    }
    // Chunks through readback staging, a few in flight: the host copies
    // chunk i out while the device copies chunk i + 1 in.
    let mut in_flight: VecDeque<(StagingBlock, u64, usize, usize)> = VecDeque::new();
    let mut chunks = pieces(out.len());
    let result = 'pieces: loop {
        while in_flight.len() < DOWNLOAD_WINDOW {
            let Some((start, len)) = chunks.next() else {
                break;
            };
            match stage_readback(handle, op, src, offset + start as u64, len, true) {
                Ok((block, value)) => in_flight.push_back((block, value, start, len)),
                Err(e) => break 'pieces Err(e),
            }
            if let Err(e) = handle.flush() {
                break 'pieces Err(e);
            }
        }
        let Some((block, value, start, len)) = in_flight.pop_front() else {
            break Ok(());
        };
        if let Err(e) = handle.point(value).wait() {
            in_flight.push_front((block, value, start, len));
            break Err(e);
        }
        // The copy into the block completed (the wait above), and the
        // batch's final barrier made it visible to the host; the block
        // is coherent memory.
        block.mapped(len as u64).read(&mut out[start..start + len]);
        handle.lock().readback.recycle(&handle.device, [block]);
    };
    // After an error: blocks the device may still copy into are freed
    // once it is done with them.
    for (block, value, _, _) in in_flight {
        free_readback_after(handle, block, value);
    }
    result
}

/// Frees readback `block` once this stream passes `value` (the device
/// may copy into it until then), instead of reusing it.
fn free_readback_after(handle: &StreamHandle, block: StagingBlock, value: u64) {
    let raw = handle.lock().readback.forget(block);
    handle.defer_free(Garbage {
        raw,
        pending: vec![(handle.timeline.clone(), value)],
    });
}

/// Records a copy of `len` bytes of `src` at `offset` into a readback
/// block: the block and the timeline value after which it holds them.
fn stage_readback(
    handle: &StreamHandle,
    op: &'static str,
    src: &Arc<BufferMemory>,
    offset: u64,
    len: usize,
    held: bool,
) -> Result<(StagingBlock, u64)> {
    let device = &handle.device;
    let len = len as u64;
    let block = handle.lock().readback.acquire(device, len)?;
    let access = BufferAccess {
        memory: src,
        offset,
        len,
        write: false,
    };
    // The value of the batch the copy went into, once it is recorded.
    let copied_by = std::cell::Cell::new(None);
    let record = |stream: &mut Stream| {
        let region = vk::BufferCopy {
            src_offset: offset,
            dst_offset: 0,
            size: len,
        };
        let value = stream.pending_value();
        copied_by.set(Some(value));
        Ok((Command::copy(src.handle(), block.raw.buffer, region), value))
    };
    let recorded = crate::enqueue::onto(handle, op, &[access])
        .holding(held.then_some(&**src))
        .command(record);
    match recorded {
        Ok(value) => Ok((block, value)),
        Err(e) => {
            match copied_by.get() {
                // Recorded before the error (a failed submission or wait
                // after it): the device may still copy into the block.
                Some(value) => free_readback_after(handle, block, value),
                None => handle.lock().readback.recycle(device, [block]),
            }
            Err(e)
        }
    }
}

/// Enqueues a copy of `dst.len()` bytes of `src` at byte `offset` to
/// `dst`, which receives them when the stream reclaims the batches (the
/// device copies into readback staging, in pieces; the host copies each
/// out when its batch completes). The pieces are recorded under `src`'s
/// exclusive operation lock, so no other operation falls between them.
pub(crate) fn download_later(
    handle: &StreamHandle,
    op: &'static str,
    src: &Arc<BufferMemory>,
    offset: u64,
    dst: RawDestination,
) -> Result<()> {
    let _ops = src.lock_ops(dst.len() as u64 > TRANSFER_CHUNK);
    if dst.len() == 0 {
        return src.check_kept_error();
    }
    let total = dst.len();
    let mut rest = Some(dst);
    for (start, len) in pieces(total) {
        // `pieces` covers `total` exactly: a rest is left for each piece.
        let Some(whole) = rest.take() else { break };
        let (piece, after) = whole.split_at(len);
        rest = after;
        let (block, value) = stage_readback(handle, op, src, offset + start as u64, len, true)?;
        handle.lock().on_complete(
            value,
            Box::new(move |stream: &mut Stream| {
                // The copy into the block completed.
                block.mapped(piece.len() as u64).read_into(&piece);
                let device = stream.device().clone();
                stream.readback.recycle(&device, [block]);
            }),
        );
    }
    Ok(())
}

/// Copies `len` bytes from `src` at `src_offset` to `dst` at `dst_offset`.
pub(crate) fn copy(
    handle: &StreamHandle,
    op: &'static str,
    src: (&Arc<BufferMemory>, u64),
    dst: (&Arc<BufferMemory>, u64),
    len: u64,
) -> Result<()> {
    copy_held(handle, op, src, dst, len, None)
}

/// [`copy`](copy) for an operation that holds `held`'s operation
/// lock (one of the two ends).
pub(crate) fn copy_held(
    handle: &StreamHandle,
    op: &'static str,
    src: (&Arc<BufferMemory>, u64),
    dst: (&Arc<BufferMemory>, u64),
    len: u64,
    held: Option<&BufferMemory>,
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    let ((src, src_offset), (dst, dst_offset)) = (src, dst);
    if Arc::ptr_eq(src, dst) && src_offset < dst_offset + len && dst_offset < src_offset + len {
        return Err(Error::Overlap {
            op,
            src_offset,
            dst_offset,
            len,
        });
    }
    let accesses = [
        BufferAccess {
            memory: src,
            offset: src_offset,
            len,
            write: false,
        },
        BufferAccess {
            memory: dst,
            offset: dst_offset,
            len,
            write: true,
        },
    ];
    // Both ranges lie in their buffers and do not overlap (checked above).
    let region = vk::BufferCopy {
        src_offset,
        dst_offset,
        size: len,
    };
    crate::enqueue::onto(handle, op, &accesses)
        .holding(held)
        .command(|_| Ok((Command::copy(src.handle(), dst.handle(), region), ())))
}
