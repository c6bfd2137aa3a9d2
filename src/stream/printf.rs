//! Kernels that talk back: the records a dispatch's `debugPrintfEXT` calls
//! append to a buffer of their own (the loader rewrote each call, see
//! `vkcompute_spirv::printf`), read once the dispatch completes and turned
//! into lines for the context's output, and failed assertions into
//! [`Error::KernelAssert`] for the next host call that waits on the
//! stream.

use std::sync::Arc;

use vkcompute_spirv::printf::{Printf, ASSERTION_SLOT, FIRST_RECORD_SLOT, HEADER_WORDS};

use crate::error::{Error, KernelAssertion, Result};
use crate::stream::batches::{Completion, Stream};
use crate::trace::escape;
use crate::vk::memory::RawBuffer;
use crate::vk::{Device, MemoryUsage};

/// Where kernels' `debugPrintfEXT` lines go
/// ([`ContextOptions::printf`](crate::ContextOptions::printf)).
#[derive(Clone, Default)]
pub enum PrintfOutput {
    /// The process's standard output (the default).
    #[default]
    Stdout,
    /// The `log` crate, at level `info`, target `vkcompute::printf`.
    Log,
    /// A function of the application's, called once per line, in order.
    Callback(Arc<dyn Fn(&PrintfLine<'_>) + Send + Sync>),
}

impl PrintfOutput {
    /// A [`PrintfOutput::Callback`] of `f`.
    pub fn callback(f: impl Fn(&PrintfLine<'_>) + Send + Sync + 'static) -> Self {
        PrintfOutput::Callback(Arc::new(f))
    }
}

impl std::fmt::Debug for PrintfOutput {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PrintfOutput::Stdout => f.write_str("Stdout"),
            PrintfOutput::Log => f.write_str("Log"),
            PrintfOutput::Callback(_) => f.write_str("Callback"),
        }
    }
}

/// One line a kernel printed.
#[derive(Clone, Copy, Debug)]
pub struct PrintfLine<'a> {
    /// The kernel's label.
    pub kernel: &'a str,
    /// The global invocation id of the invocation that printed it.
    pub invocation: [u32; 3],
    /// The text, formatted on the host. Where records were dropped (the
    /// buffer was full), one line says how many, with `invocation` zero.
    pub text: &'a str,
    /// Where the call stands in the source (file, line), where the module
    /// kept line information (GLSL compiled by vkcompute keeps it).
    pub location: Option<(&'a str, u32)>,
}

/// A context's printf settings.
#[derive(Clone, Debug)]
pub(crate) struct Output {
    pub(crate) sink: PrintfOutput,
    /// Bytes of records one dispatch may write.
    pub(crate) buffer_bytes: u64,
    /// Whether lines written to stdout or the log carry the invocation id.
    pub(crate) invocation_ids: bool,
}

impl Output {
    /// Emits one line.
    fn emit(&self, line: &PrintfLine<'_>) {
        let prefix = if self.invocation_ids {
            let [x, y, z] = line.invocation;
            format!("[{} ({x}, {y}, {z})]", line.kernel)
        } else {
            format!("[{}]", line.kernel)
        };
        match &self.sink {
            PrintfOutput::Stdout => println!("{prefix} {}", line.text),
            PrintfOutput::Log => log::info!(target: "vkcompute::printf", "{prefix} {}", line.text),
            PrintfOutput::Callback(f) => f(line),
        }
    }
}

/// The records a dispatch of a kernel with call table `table` may write
/// on `device`, `bytes` of them asked for (`Printf::capacity` under the
/// device's `maxStorageBufferRange`).
pub(crate) fn capacity(device: &Device, table: &Printf, bytes: u64) -> u32 {
    table.capacity(bytes, u64::from(device.limits().max_storage_buffer_range))
}

/// What one dispatch left in its record buffer.
#[derive(Default)]
struct Written {
    /// The records it asked for.
    cursor: u32,
    /// The written records' slots, in order.
    records: Vec<u32>,
    /// The assertion slot's words, where an assertion's record that did
    /// not fit took it; else empty.
    assertion: Vec<u32>,
}

/// One dispatch's record buffer: host-visible memory the kernel appends
/// to, read by the host once the dispatch completes.
pub(crate) struct RecordBuffer {
    device: Arc<Device>,
    raw: Option<RawBuffer>,
    /// The records it holds (its capacity).
    capacity: u32,
    /// The words of one record's slot.
    slot_words: u32,
}

impl RecordBuffer {
    /// A buffer for `capacity` of `table`'s records (from [`capacity`]):
    /// the header, the trash and assertion slots, and the records' slots.
    pub(crate) fn new(device: &Arc<Device>, table: &Printf, capacity: u32) -> Result<Self> {
        let bytes = table.buffer_words(capacity) * 4;
        let raw = RawBuffer::new(
            device,
            bytes,
            MemoryUsage::Readback,
            "a printf record buffer",
        )?;
        let Some(mapped) = raw.mapped_range(0, bytes) else {
            raw.destroy(device);
            return Err(Error::Unsupported {
                what: "printf from a kernel (records in host-visible memory)".into(),
                device: device.name().to_string(),
            });
        };
        // The cursor at 0. The slots need no clearing: the host reads only
        // those below the cursor, which the dispatch wrote.
        mapped.write(bytemuck::cast_slice(&[0u32; HEADER_WORDS as usize]));
        raw.flush_host_writes(device, 0, u64::from(HEADER_WORDS) * 4)?;
        Ok(RecordBuffer {
            device: device.clone(),
            raw: Some(raw),
            capacity,
            slot_words: table.slot_words(),
        })
    }

    /// The descriptor that binds it.
    pub(crate) fn descriptor(&self) -> ash::vk::DescriptorBufferInfo {
        let raw = self.raw.as_ref();
        ash::vk::DescriptorBufferInfo {
            buffer: raw.map_or(ash::vk::Buffer::null(), |r| r.buffer),
            offset: 0,
            range: ash::vk::WHOLE_SIZE,
        }
    }

    /// What the dispatch left, once it completed.
    fn read(&self) -> Result<Written> {
        let mut written = Written::default();
        let Some(raw) = &self.raw else {
            return Ok(written);
        };
        let bytes = raw.size;
        raw.invalidate_for_host_reads(&self.device, 0, bytes)?;
        let Some(mapped) = raw.mapped_range(0, bytes) else {
            return Ok(written);
        };
        let mut header = [0u32; 2];
        mapped.read(bytemuck::cast_slice_mut(&mut header));
        let [cursor, claimed] = header;
        written.cursor = cursor;
        let slot = self.slot_words as usize;
        let at = |s: u32| (HEADER_WORDS as usize + s as usize * slot) * 4;
        if claimed != 0 {
            let mut words = vec![0u32; slot];
            mapped
                .sub(at(ASSERTION_SLOT), slot * 4)
                .read(bytemuck::cast_slice_mut(&mut words));
            written.assertion = words;
        }
        let used = cursor.min(self.capacity) as usize * slot;
        written.records = vec![0u32; used];
        mapped
            .sub(at(FIRST_RECORD_SLOT), used * 4)
            .read(bytemuck::cast_slice_mut(&mut written.records));
        Ok(written)
    }
}

impl Drop for RecordBuffer {
    fn drop(&mut self) {
        // Dropped by the completion that read it, or with its batch: the
        // work that wrote it is done.
        if let Some(raw) = self.raw.take() {
            self.device.retire_buffer(raw);
        }
    }
}

/// What runs when the batch of a dispatch of kernel `label` completes:
/// its records read, emitted to `output`, and the first failed assertion
/// kept on the stream for the next wait.
pub(crate) fn completion(
    records: Arc<RecordBuffer>,
    table: Arc<Printf>,
    label: Arc<str>,
    output: Arc<Output>,
) -> Completion {
    Box::new(move |stream: &mut Stream| {
        let written = match records.read() {
            Ok(read) => read,
            Err(e) => {
                stream.keep_assert(e);
                return;
            }
        };
        let capacity = records.capacity;
        let mut lines = table.records(&written.records, written.cursor, capacity);
        let mut dropped = Printf::dropped(written.cursor, capacity);
        // An assertion's record that did not fit, kept in the assertion
        // slot: one of the dropped, reported and printed after the others.
        let kept = table.record(&written.assertion);
        if let Some(record) = kept.filter(|r| table.calls[r.call].assert_line.is_some()) {
            lines.push(record);
            dropped = dropped.saturating_sub(1);
        }
        for record in lines {
            let call = &table.calls[record.call];
            let location = call.location.as_ref().map(|(f, l)| (f.as_str(), *l));
            if let Some(line) = call.assert_line {
                let (file, line) = match location {
                    Some((file, _)) => (file.to_string(), line),
                    None => (String::new(), line),
                };
                stream.keep_assert(Error::KernelAssert(Box::new(KernelAssertion {
                    kernel: label.to_string(),
                    file,
                    line,
                    message: record.text.clone(),
                    invocation: record.invocation,
                })));
            }
            let line = PrintfLine {
                kernel: &label,
                invocation: record.invocation,
                text: &record.text,
                location,
            };
            trace_line(stream, &line);
            output.emit(&line);
        }
        if dropped > 0 {
            let text = format!(
                "{dropped} printf record(s) dropped: the dispatch's record buffer ({} bytes) was \
                 full (ContextOptions::printf_buffer_bytes)",
                u64::from(capacity) * u64::from(records.slot_words) * 4
            );
            let line = PrintfLine {
                kernel: &label,
                invocation: [0; 3],
                text: &text,
                location: None,
            };
            trace_line(stream, &line);
            output.emit(&line);
        }
    })
}

/// `line` as an instant event `printf` on the stream's device track,
/// where the context traces.
fn trace_line(stream: &Stream, line: &PrintfLine<'_>) {
    if let Some(t) = &stream.trace {
        let [x, y, z] = line.invocation;
        t.tracer.instant(
            t.batches,
            "printf",
            &format!(
                r#""kernel":"{}","invocation":[{x},{y},{z}],"text":"{}""#,
                escape(line.kernel),
                escape(line.text)
            ),
        );
    }
}
