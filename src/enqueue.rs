//! The one way onto a stream ([`onto`]): every operation's commands, with
//! their device checks, cross-stream waits, hazards and use notes, all
//! under the operation locks of the buffers they touch.

use std::sync::Arc;

use ash::vk;
use smallvec::SmallVec;

use crate::error::{Error, Result};
use crate::hazard::Access;
use crate::recorder::Command;
use crate::resource::{lock_all, BufferMemory};
use crate::stream::batches::Stream;
use crate::stream::{Point, StreamHandle};
use crate::trace::StreamTrace;

/// One byte range of a buffer that a command reads or writes.
#[derive(Clone, Copy)]
pub(crate) struct BufferAccess<'a> {
    pub(crate) memory: &'a Arc<BufferMemory>,
    pub(crate) offset: u64,
    pub(crate) len: u64,
    pub(crate) write: bool,
}

impl BufferAccess<'_> {
    fn hazard(&self) -> Access {
        Access {
            buffer: vk::Handle::as_raw(self.memory.handle()),
            start: self.offset,
            end: self.offset + self.len,
            write: self.write,
        }
    }
}

/// The hazard ranges of `accesses`, on the stack for the usual few buffers.
pub(crate) fn hazards(accesses: &[BufferAccess<'_>]) -> SmallVec<[Access; 8]> {
    accesses.iter().map(BufferAccess::hazard).collect()
}

/// The one way onto a stream: an operation named `op` that reads and
/// writes `accesses` on `handle`'s stream. [`command`](Enqueue::command)
/// records one command, [`sequence`](Enqueue::sequence) several in order;
/// [`holding`](Enqueue::holding) and [`described`](Enqueue::described)
/// say what the operation already holds and how the trace names it.
pub(crate) fn onto<'a>(
    handle: &'a StreamHandle,
    op: &'static str,
    accesses: &'a [BufferAccess<'a>],
) -> Enqueue<'a> {
    Enqueue {
        handle,
        op,
        accesses,
        held: None,
        describe: None,
    }
}

/// An operation on its way onto a stream (see [`enqueue`]).
pub(crate) struct Enqueue<'a> {
    handle: &'a StreamHandle,
    op: &'static str,
    accesses: &'a [BufferAccess<'a>],
    held: Option<&'a BufferMemory>,
    describe: Option<&'a dyn Fn() -> String>,
}

impl<'a> Enqueue<'a> {
    /// For one command of an operation that holds `held`'s operation lock
    /// already (see `BufferMemory::lock_ops`): it is not taken again.
    pub(crate) fn holding(self, held: Option<&'a BufferMemory>) -> Self {
        Enqueue { held, ..self }
    }

    /// With a description of the command for the trace (called only where
    /// the context traces).
    pub(crate) fn described(self, describe: &'a dyn Fn() -> String) -> Self {
        Enqueue {
            describe: Some(describe),
            ..self
        }
    }

    /// Records one command: checks the buffers, makes the command wait for
    /// other streams' work on them, notes the uses on the buffers, and
    /// gives the recorder the command `body` makes (it may stage data, keep
    /// objects alive with the batch or run work on its completion first).
    /// Returns `body`'s other result.
    pub(crate) fn command<'c, R>(
        self,
        body: impl FnOnce(&mut Stream) -> Result<(Command<'c>, R)>,
    ) -> Result<R> {
        self.sequence(|stream, hazards| {
            let (command, result) = body(stream)?;
            stream.record(hazards, command)?;
            Ok(result)
        })
    }

    /// For a command of several parts (a graph replay with parameters):
    /// `body` orders and records them itself with the command's hazard
    /// ranges (`Stream::order`, `record`, `note`).
    pub(crate) fn sequence<R>(
        self,
        body: impl FnOnce(&mut Stream, &[Access]) -> Result<R>,
    ) -> Result<R> {
        record_parts(
            self.handle,
            self.op,
            self.accesses,
            self.held,
            self.describe,
            body,
        )
    }
}

/// Locks the buffers and the stream, makes the stream wait for other
/// streams' work on the buffers, notes the uses, and runs `body` to
/// record the command with its hazard ranges.
fn record_parts<R>(
    handle: &StreamHandle,
    op: &'static str,
    accesses: &[BufferAccess<'_>],
    held: Option<&BufferMemory>,
    describe: Option<&dyn Fn() -> String>,
    body: impl FnOnce(&mut Stream, &[Access]) -> Result<R>,
) -> Result<R> {
    handle.device.check_alive(op)?;
    let started = handle.tracer.as_ref().map(|t| t.now_us());
    // One command is atomic: no operation of several commands on these
    // buffers is half done while it is recorded. The stream is taken
    // with room for one more batch (see `Stream::over_limit`); where
    // it has none, every lock is let go while the host waits for it.
    let (_ops, waits, mut stream) = loop {
        let ops = lock_all(accesses.iter().map(|a| a.memory), held);
        let waits = foreign_waits(handle, op, accesses)?;
        match handle.lock_if_room()? {
            Ok(stream) => break (ops, waits, stream),
            Err(value) => {
                drop(ops);
                handle.timeline.wait_submitted(value)?;
            }
        }
    };
    let waits = waits
        .into_iter()
        .map(|p| (p.stream.timeline, p.value))
        .collect();
    stream.begin_command(waits)?;
    // Note the uses before recording: a host borrow that starts from now
    // on sees them and waits, and one that already started fails this.
    let value = stream.pending_value();
    for a in accesses {
        a.memory.note_device_use(op, handle, value, a.write)?;
    }
    let timed = stream.begin_timed();
    let result = body(&mut stream, &hazards(accesses))?;
    stream.end_timed(timed, || match describe {
        Some(describe) => format!("{op}: {}", describe()),
        None => op.to_string(),
    });
    if let (Some(t), Some(start)) = (&stream.trace, started) {
        trace_command(t, op, start, accesses, describe);
    }
    stream.maybe_flush()?;
    Ok(result)
}

/// The trace's clock now, where the context traces.
pub(crate) fn trace_start(handle: &StreamHandle) -> Option<f64> {
    handle.tracer.as_ref().map(|t| t.now_us())
}

/// Where the context traces, a slice for a transfer the host made
/// straight into or out of the buffer's mapped memory (no command, so
/// nothing on the device track), from `started` (`trace_start`) to now.
pub(crate) fn trace_direct(
    handle: &StreamHandle,
    op: &str,
    started: Option<f64>,
    access: BufferAccess<'_>,
) {
    let Some(start) = started else {
        return;
    };
    let stream = handle.lock();
    if let Some(t) = &stream.trace {
        let describe = || "direct: the host copied through the mapping".to_string();
        trace_command(t, op, start, &[access], Some(&describe));
    }
}

/// What a command making `accesses` waits for on other streams, each
/// submitted by now; fails for a buffer of another device, or with an
/// error a buffer kept from a `Drop`.
fn foreign_waits(
    handle: &StreamHandle,
    op: &'static str,
    accesses: &[BufferAccess<'_>],
) -> Result<Vec<Point>> {
    let mut waits = Vec::new();
    for a in accesses {
        if a.memory.device.id != handle.device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: format!(
                    "a buffer of device `{}` (#{}) cannot be used on a context of device `{}` (#{})",
                    a.memory.device.name(),
                    a.memory.device.id,
                    handle.device.name(),
                    handle.device.id
                ),
            });
        }
        a.memory
            .foreign_waits(&handle.timeline, a.write, &mut waits)?;
    }
    for point in &waits {
        point.ensure_submitted()?;
    }
    Ok(waits)
}

/// Writes a recorded command's slice: its operation, the byte ranges it
/// reads and writes, and the caller's description.
fn trace_command(
    t: &StreamTrace,
    op: &str,
    start: f64,
    accesses: &[BufferAccess<'_>],
    describe: Option<&dyn Fn() -> String>,
) {
    use std::fmt::Write as _;
    let mut args = String::from(r#""ranges":["#);
    for (i, a) in accesses.iter().enumerate() {
        // The buffer's label, else its handle and size.
        let name = match a.memory.label() {
            Some(label) => crate::trace::escape(&label),
            None => format!(
                "buffer {:#x} of {} bytes",
                vk::Handle::as_raw(a.memory.handle()),
                a.memory.size
            ),
        };
        let _ = write!(
            args,
            r#"{}"{} {name} +{}..+{}""#,
            if i > 0 { "," } else { "" },
            if a.write { "write" } else { "read" },
            a.offset,
            a.offset + a.len
        );
    }
    args.push(']');
    if let Some(describe) = describe {
        let _ = write!(args, r#","detail":"{}""#, crate::trace::escape(&describe()));
    }
    t.tracer
        .slice(t.host, op, start, t.tracer.now_us() - start, &args);
}
