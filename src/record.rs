//! The generic recorder every operation is built from: one command on a
//! stream, with its device checks, cross-stream waits, hazards and use
//! notes, all under the operation locks of the buffers it touches.

use std::sync::Arc;

use ash::vk;

use crate::error::{Error, Result};
use crate::hazard::Access;
use crate::resource::{lock_all, BufferMemory};
use crate::stream::{CopyCommand, Stream};
use crate::submitter::{Point, Submitter};
use crate::trace::StreamTrace;
use crate::vk::command::Cmd;
use crate::vk::Timeline;

/// One byte range of a buffer that a command reads or writes.
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

impl Submitter {
    /// Records one command on this stream: checks the buffers, makes the
    /// command wait for other streams' work on them, records a barrier if it
    /// depends on earlier commands, runs `body` to record it, and notes the
    /// uses on the buffers. Returns `body`'s result.
    pub(crate) fn record<R>(
        &self,
        op: &'static str,
        accesses: &[BufferAccess<'_>],
        body: impl FnOnce(&mut Stream, Cmd) -> Result<R>,
    ) -> Result<R> {
        self.record_command(op, accesses, None, None, Stream::command, body)
    }

    /// [`record`](Self::record) with a description of the command for the
    /// trace (called only where the context traces).
    pub(crate) fn record_described<R>(
        &self,
        op: &'static str,
        describe: &dyn Fn() -> String,
        accesses: &[BufferAccess<'_>],
        body: impl FnOnce(&mut Stream, Cmd) -> Result<R>,
    ) -> Result<R> {
        self.record_command(op, accesses, None, Some(describe), Stream::command, body)
    }

    /// [`record`](Self::record) for a copy: `body` gives its regions with
    /// `Stream::push_copy` and the command's token, which merges copies
    /// between the same buffers.
    pub(crate) fn record_copy<R>(
        &self,
        op: &'static str,
        accesses: &[BufferAccess<'_>],
        body: impl FnOnce(&mut Stream, CopyCommand) -> Result<R>,
    ) -> Result<R> {
        self.record_command(op, accesses, None, None, Stream::copy_command, body)
    }

    /// [`record`](Self::record) for one command of an operation that holds
    /// `held`'s operation lock (see `BufferMemory::lock_ops`).
    pub(crate) fn record_held<R>(
        &self,
        op: &'static str,
        accesses: &[BufferAccess<'_>],
        held: &BufferMemory,
        body: impl FnOnce(&mut Stream, Cmd) -> Result<R>,
    ) -> Result<R> {
        self.record_command(op, accesses, Some(held), None, Stream::command, body)
    }

    /// [`record_copy`](Self::record_copy) for one command of an operation
    /// that holds `held`'s operation lock.
    pub(crate) fn record_copy_held<R>(
        &self,
        op: &'static str,
        accesses: &[BufferAccess<'_>],
        held: &BufferMemory,
        body: impl FnOnce(&mut Stream, CopyCommand) -> Result<R>,
    ) -> Result<R> {
        self.record_command(op, accesses, Some(held), None, Stream::copy_command, body)
    }

    /// The recorder behind every `record*`: `start` begins the command on
    /// the locked stream (`Stream::command` or `Stream::copy_command`) and
    /// `body` records it with what `start` returned.
    fn record_command<T, R>(
        &self,
        op: &'static str,
        accesses: &[BufferAccess<'_>],
        held: Option<&BufferMemory>,
        describe: Option<&dyn Fn() -> String>,
        start: impl FnOnce(&mut Stream, &[Access], Vec<(Arc<Timeline>, u64)>) -> Result<T>,
        body: impl FnOnce(&mut Stream, T) -> Result<R>,
    ) -> Result<R> {
        let started = self.tracer.as_ref().map(|t| t.now_us());
        // One command is atomic: no operation of several commands on these
        // buffers is half done while it is recorded. The stream is taken
        // with room for one more batch (see `Stream::over_limit`); where
        // it has none, every lock is let go while the host waits for it.
        let (_ops, waits, mut stream) = loop {
            let ops = lock_all(accesses.iter().map(|a| a.memory), held);
            let waits = self.foreign_waits(op, accesses)?;
            let mut stream = self.lock();
            match stream.over_limit()? {
                None => break (ops, waits, stream),
                Some(value) => {
                    drop(stream);
                    drop(ops);
                    self.timeline.wait_submitted(value)?;
                }
            }
        };
        let waits = waits
            .into_iter()
            .map(|p| (p.stream.timeline, p.value))
            .collect();
        // The hazard ranges, on the stack for the usual few buffers.
        let mut small = [Access::default(); 8];
        let large: Vec<Access>;
        let hazards: &[Access] = if accesses.len() <= small.len() {
            for (slot, a) in small.iter_mut().zip(accesses) {
                *slot = a.hazard();
            }
            &small[..accesses.len()]
        } else {
            large = accesses.iter().map(BufferAccess::hazard).collect();
            &large
        };
        let command = start(&mut stream, hazards, waits)?;
        // Note the uses before recording: a host borrow that starts from now
        // on sees them and waits, and one that already started fails this.
        let value = stream.pending_value();
        for a in accesses {
            a.memory.note_device_use(op, self, value, a.write)?;
        }
        let result = body(&mut stream, command)?;
        if let (Some(t), Some(start)) = (&stream.trace, started) {
            trace_command(t, op, start, accesses, describe);
        }
        stream.maybe_flush()?;
        Ok(result)
    }

    /// What a command making `accesses` waits for on other streams, each
    /// submitted by now; fails for a buffer of another device, or with an
    /// error a buffer kept from a `Drop`.
    fn foreign_waits(&self, op: &'static str, accesses: &[BufferAccess<'_>]) -> Result<Vec<Point>> {
        let mut waits = Vec::new();
        for a in accesses {
            if a.memory.device.id != self.device.id {
                return Err(Error::DifferentDevice {
                    op,
                    detail: format!(
                        "a buffer of device `{}` (#{}) cannot be used on a context of device `{}` (#{})",
                        a.memory.device.name(),
                        a.memory.device.id,
                        self.device.name(),
                        self.device.id
                    ),
                });
            }
            a.memory
                .foreign_waits(&self.timeline, a.write, &mut waits)?;
        }
        for point in &waits {
            point.ensure_submitted()?;
        }
        Ok(waits)
    }
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
