//! Printing kernels in graphs. A captured dispatch of a kernel that calls
//! `debugPrintfEXT` binds a record buffer of the graph's own (device
//! memory, bound last, as a stream dispatch binds its own). Every replay
//! resets that buffer's cursor before the graph's commands and copies the
//! whole buffer out after them,
//! into a host-visible buffer of that replay's, read when the replay's
//! batch completes: replays in flight together do not share records, and
//! each replay's lines come in the order of its dispatches.

use std::sync::Arc;

use ash::vk;
use smallvec::smallvec;
use vkcompute_spirv::printf::{Printf, HEADER_WORDS};

use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::error::Result;
use crate::recorder::Command;
use crate::stream::batches::Stream;
use crate::stream::printf::{self, Output, RecordBuffer};
use crate::view::View;
use crate::vk::Device;

/// One printing dispatch of a graph.
pub(super) struct Printing {
    /// Its record buffer: the header, the trash slot and `capacity`
    /// records' slots.
    records: DeviceBuffer<u32>,
    table: Arc<Printf>,
    label: Arc<str>,
    /// The records it holds.
    capacity: u32,
}

impl Printing {
    /// The record buffer of a dispatch of a kernel with call table
    /// `table`, captured on `ctx` (whose `printf_buffer_bytes` sizes it).
    pub(super) fn new(ctx: &DeviceContext, table: Arc<Printf>, label: Arc<str>) -> Result<Self> {
        let capacity = printf::capacity(&ctx.stream.device, &table, ctx.stream.printf.buffer_bytes);
        // At most one binding's bytes (`Printf::capacity`).
        let words = table.buffer_words(capacity) as usize;
        // Each replay sets the cursor; a slot is read only once written.
        let records = ctx.enqueue_create_buffer::<u32>(words)?;
        Ok(Printing {
            records,
            table,
            label,
            capacity,
        })
    }

    /// The view the dispatch binds last.
    pub(super) fn view(&self) -> &View {
        &self.records.view
    }

    /// The bytes a replay copies out: the whole buffer.
    fn bytes(&self) -> u64 {
        self.table.buffer_words(self.capacity) * 4
    }
}

/// The host-visible buffers one replay copies `printing`'s records into
/// (made before the stream is taken).
pub(super) fn outputs(
    device: &Arc<Device>,
    printing: &[Printing],
) -> Result<Vec<Arc<RecordBuffer>>> {
    printing
        .iter()
        .map(|p| Ok(Arc::new(RecordBuffer::new(device, &p.table, p.capacity)?)))
        .collect()
}

/// Records one replay of a graph with `printing` dispatches: the reset of
/// their headers, `body` (the graph's commands) after a barrier, and after
/// another the copies of their records into `outs` (from [`outputs`]),
/// each read once the batch completes and its lines given to `output` in
/// the order of the dispatches. Every part is ordered against the replay's
/// neighbours by the caller (`Stream::order` before, `note` after).
pub(super) fn around(
    stream: &mut Stream,
    printing: &[Printing],
    outs: &[Arc<RecordBuffer>],
    output: &Arc<Output>,
    body: impl FnOnce(&mut Stream) -> Result<()>,
) -> Result<()> {
    for p in printing {
        let view = p.view();
        // The cursor (the header's other words are unused).
        stream.record(
            &[],
            Command::FillWord {
                dst: view.memory.handle(),
                offset: view.offset,
                len: u64::from(HEADER_WORDS) * 4,
                word: 0,
            },
        )?;
    }
    stream.barrier();
    body(stream)?;
    stream.barrier();
    let value = stream.pending_value();
    for (p, out) in printing.iter().zip(outs) {
        let view = p.view();
        stream.record(
            &[],
            Command::Copy {
                src: view.memory.handle(),
                dst: out.descriptor().buffer,
                regions: smallvec![vk::BufferCopy {
                    src_offset: view.offset,
                    dst_offset: 0,
                    size: p.bytes(),
                }],
            },
        )?;
        stream.keep_alive(out.clone());
        stream.on_complete(
            value,
            printf::completion(
                out.clone(),
                p.table.clone(),
                p.label.clone(),
                output.clone(),
            ),
        );
    }
    Ok(())
}
