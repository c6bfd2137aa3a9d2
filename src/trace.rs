//! A trace of the device work, in the Chrome / Perfetto trace-event JSON
//! format (open it in `ui.perfetto.dev` or `chrome://tracing`): one track
//! per stream with a slice per recorded command at its host enqueue time
//! (copy, fill, dispatch with its kernel and grid, upload, download),
//! instant events for barriers and cross-stream waits, and one track per
//! stream with the device time of each submitted batch, measured with
//! timestamp queries.

use std::fmt::Write as _;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use crate::error::{Error, Result};
use crate::vk::command::{Cmd, TimestampPool};
use crate::vk::Device;

/// The process id written into every event (a trace has one process).
const PID: u32 = 1;

/// Writes trace events to a file; shared by every stream of a device.
pub(crate) struct Tracer {
    out: Mutex<Output>,
    start: Instant,
    next_stream: AtomicU64,
    /// Host microseconds minus device microseconds: one device clock, so
    /// one offset for every stream. A batch starts on the device no earlier
    /// than it was submitted, so each gives a lower bound; the largest so
    /// far is the estimate (a batch that waited for another stream gives a
    /// loose bound, one that did not a tight one).
    device_offset: Mutex<Option<f64>>,
    /// Whether streams time every command on the device.
    pub(crate) commands: bool,
}

struct Output {
    file: BufWriter<File>,
    first: bool,
    /// A failed write ends the trace quietly: tracing never fails the work.
    broken: bool,
}

impl Tracer {
    /// Creates (or truncates) the trace file at `path`; streams time each
    /// command on the device where `commands` says so.
    pub(crate) fn create(path: &Path, commands: bool) -> Result<Self> {
        let file = File::create(path).map_err(|e| Error::Trace {
            path: path.display().to_string(),
            detail: e.to_string(),
        })?;
        let tracer = Tracer {
            out: Mutex::new(Output {
                file: BufWriter::new(file),
                first: true,
                broken: false,
            }),
            start: Instant::now(),
            next_stream: AtomicU64::new(1),
            device_offset: Mutex::new(None),
            commands,
        };
        tracer.raw("[\n");
        tracer.event(&format!(
            r#"{{"name":"process_name","ph":"M","pid":{PID},"args":{{"name":"vkcompute"}}}}"#
        ));
        Ok(tracer)
    }

    /// Microseconds since the trace began.
    pub(crate) fn now_us(&self) -> f64 {
        self.start.elapsed().as_secs_f64() * 1e6
    }

    /// The host time, in trace microseconds, of the device time
    /// `device_us` at which a batch submitted at `submitted_us` started.
    pub(crate) fn device_to_host(&self, device_us: f64, submitted_us: f64) -> f64 {
        let mut offset = self.device_offset.lock().unwrap_or_else(|e| e.into_inner());
        let bound = submitted_us - device_us;
        let estimate = offset.map_or(bound, |o: f64| o.max(bound));
        *offset = Some(estimate);
        device_us + estimate
    }

    /// A new stream's two track ids (host commands, device batches), named.
    pub(crate) fn new_stream(&self, device: &str) -> (u64, u64) {
        let n = self.next_stream.fetch_add(1, Ordering::Relaxed);
        let (host, batches) = (n * 2, n * 2 + 1);
        self.name_tracks((host, batches), &format!("stream {n}"), device);
        (host, batches)
    }

    /// Names a stream's two tracks `name` (a later name replaces an
    /// earlier one in trace viewers).
    pub(crate) fn name_tracks(&self, (host, batches): (u64, u64), name: &str, device: &str) {
        for (tid, what) in [(host, "commands"), (batches, "device batches")] {
            self.event(&format!(
                r#"{{"name":"thread_name","ph":"M","pid":{PID},"tid":{tid},"args":{{"name":"{} {what} ({})"}}}}"#,
                escape(name),
                escape(device)
            ));
        }
    }

    /// A slice `name` on track `tid` from `start_us` lasting `dur_us`, with
    /// `args` (a JSON object's members, without braces).
    pub(crate) fn slice(&self, tid: u64, name: &str, start_us: f64, dur_us: f64, args: &str) {
        self.event(&format!(
            r#"{{"name":"{}","ph":"X","pid":{PID},"tid":{tid},"ts":{start_us:.3},"dur":{:.3},"args":{{{args}}}}}"#,
            escape(name),
            dur_us.max(0.0)
        ));
    }

    /// An instant event `name` on track `tid`, now.
    pub(crate) fn instant(&self, tid: u64, name: &str, args: &str) {
        self.event(&format!(
            r#"{{"name":"{}","ph":"i","s":"t","pid":{PID},"tid":{tid},"ts":{:.3},"args":{{{args}}}}}"#,
            escape(name),
            self.now_us()
        ));
    }

    fn event(&self, json: &str) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if out.broken {
            return;
        }
        let sep = if out.first { "" } else { ",\n" };
        out.first = false;
        if write!(out.file, "{sep}{json}").is_err() {
            out.broken = true;
        }
    }

    fn raw(&self, text: &str) {
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if out.file.write_all(text.as_bytes()).is_err() {
            out.broken = true;
        }
    }
}

impl Drop for Tracer {
    fn drop(&mut self) {
        let out = self.out.get_mut().unwrap_or_else(|e| e.into_inner());
        if !out.broken {
            let _ = out.file.write_all(b"\n]\n");
            let _ = out.file.flush();
        }
    }
}

/// `text` as the inside of a JSON string.
pub(crate) fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out
}

/// A stream's part of a trace (see `crate::trace`): its two tracks and the
/// timestamp queries that measure each batch on the device.
pub(crate) struct StreamTrace {
    pub(crate) tracer: Arc<Tracer>,
    /// The track of recorded commands.
    pub(crate) host: u64,
    /// The track of device batches.
    pub(crate) batches: u64,
    /// Two timestamps per batch slot; `None` where the queue has none.
    queries: Option<TimestampPool>,
    /// Two timestamps for each command of each batch slot.
    command_queries: Option<TimestampPool>,
    /// The most commands a batch of the stream holds.
    batch_commands: u32,
    /// Slots in `queries`: more than can be in flight at once.
    slots: u64,
    /// Nanoseconds per timestamp tick.
    period: f64,
    /// The bits of a timestamp that are valid.
    mask: u64,
}

impl StreamTrace {
    /// A stream's tracks in `tracer`, with timestamp slots for more than
    /// `max_in_flight` batches of at most `batch_commands` commands.
    pub(crate) fn new(
        device: &Arc<Device>,
        tracer: Arc<Tracer>,
        max_in_flight: usize,
        batch_commands: usize,
    ) -> Result<Self> {
        let batch_commands = batch_commands as u32;
        let (host, batches) = tracer.new_stream(device.name());
        let (queries, command_queries) = if TimestampPool::valid_bits(device) == 0 {
            (None, None)
        } else {
            let slots = max_in_flight as u32 * 2;
            (
                Some(TimestampPool::new(device, slots)?),
                match tracer.commands {
                    true => Some(TimestampPool::new(device, slots * batch_commands)?),
                    false => None,
                },
            )
        };
        Ok(StreamTrace {
            tracer,
            host,
            batches,
            queries,
            command_queries,
            batch_commands,
            slots: max_in_flight as u64 * 2,
            period: f64::from(device.limits().timestamp_period),
            mask: TimestampPool::tick_mask(device),
        })
    }

    fn slot(&self, value: u64) -> u32 {
        (value % self.slots) as u32
    }

    /// Records the timestamp that opens the batch signalling `value`.
    pub(crate) fn begin(&self, cmd: Cmd, value: u64) {
        if let Some(pool) = &self.queries {
            // No batch in flight uses the slot: fewer batches than slots
            // are ever in flight.
            pool.start(cmd, self.slot(value));
        }
    }

    /// Records the timestamp that closes the batch signalling `value`.
    pub(crate) fn end(&self, cmd: Cmd, value: u64) {
        if let Some(pool) = &self.queries {
            pool.end(cmd, self.slot(value));
        }
    }

    /// The query slot of command `index` of the batch signalling `value`.
    fn command_slot(&self, value: u64, index: usize) -> u32 {
        self.slot(value) * self.batch_commands + index as u32
    }

    /// Whether command `index` of a batch is timed on the device.
    pub(crate) fn times(&self, index: usize) -> bool {
        self.command_queries.is_some() && index < self.batch_commands as usize
    }

    /// Records the timestamp before command `index` (one that [`times`](Self::times))
    /// of the batch signalling `value`.
    pub(crate) fn begin_command(&self, cmd: Cmd, value: u64, index: usize) {
        if let Some(pool) = &self.command_queries {
            // As for the batch's slot: no batch in flight uses it.
            pool.start(cmd, self.command_slot(value, index));
        }
    }

    /// Records the timestamp after command `index` of the batch
    /// signalling `value`.
    pub(crate) fn end_command(&self, cmd: Cmd, value: u64, index: usize) {
        if let Some(pool) = &self.command_queries {
            pool.end(cmd, self.command_slot(value, index));
        }
    }

    /// Writes the device slice of the completed batch that signalled
    /// `value`, of `commands` commands and `waits` waits, submitted at
    /// `submitted_us` (`None` where it never ran), and one slice for each
    /// of its timed commands (`timed`, their labels in order).
    pub(crate) fn retire(
        &self,
        value: u64,
        commands: usize,
        waits: usize,
        submitted_us: Option<f64>,
        timed: &[String],
    ) {
        let (Some(pool), Some(submitted)) = (&self.queries, submitted_us) else {
            return;
        };
        // The batch completed, so both of its queries were written.
        let Ok(ticks) = pool.read(self.slot(value)) else {
            return;
        };
        let us = |t: u64| (t & self.mask) as f64 * self.period / 1e3;
        let start = self.tracer.device_to_host(us(ticks[0]), submitted);
        let args = format!(r#""value":{value},"commands":{commands},"waits":{waits}"#);
        self.tracer.slice(
            self.batches,
            "batch",
            start,
            us(ticks[1].wrapping_sub(ticks[0]) & self.mask),
            &args,
        );
        let Some(pool) = &self.command_queries else {
            return;
        };
        for (index, label) in timed.iter().enumerate() {
            // Not written where the command's recording failed after its
            // first timestamp.
            let Ok(t) = pool.read(self.command_slot(value, index)) else {
                continue;
            };
            // On the batch's clock mapping, so that the command lies in
            // the batch's slice whatever other streams' batches have made
            // of the estimate since.
            let at = start + (us(t[0]) - us(ticks[0]));
            let args = format!(r#""index":{index}"#);
            let took = us(t[1].wrapping_sub(t[0]) & self.mask);
            self.tracer.slice(self.batches, label, at, took, &args);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::escape;

    #[test]
    fn strings_are_escaped_for_json() {
        assert_eq!(escape(r#"a"b\c"#), r#"a\"b\\c"#);
        assert_eq!(escape("x\ny"), "x\\u000ay");
    }
}
