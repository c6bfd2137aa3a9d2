//! Replays with parameters: other push constants for some dispatches,
//! other buffers in place of captured ones.
//!
//! A replay records nothing again but the operations it changes (the
//! "live" ones). The graph is recorded once more around each set of live
//! operations it is replayed with, into segments (secondary command
//! buffers of the unchanged operations between them); a replay then runs
//! the segments and records the live operations with their parameters
//! straight into the stream's batch, through the stream's recorder, with a
//! full barrier between pieces. Its cost grows with the number of live
//! operations, not with the graph's length. The last few sets of live
//! operations keep their segments (`MAX_SPLITS`).

use std::collections::HashMap;
use std::sync::Arc;

use bytemuck::Pod;
use smallvec::SmallVec;

use super::recording::{
    add_use, record, record_op, use_accesses, Commands, Op, Pools, Sink, Substitutions, Uses,
};
use super::{DispatchId, Graph, GraphInner};
use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::enqueue::{hazards, BufferAccess};
use crate::error::{Error, Result};
use crate::recorder::Command;
use crate::stream::batches::Stream;
use crate::stream::StreamHandle;
use crate::view::View;
use crate::vk::Device;

/// How many sets of live operations a graph keeps recorded segments for.
const MAX_SPLITS: usize = 4;

/// A view's identity: its memory, offset and length.
type ViewKey = (usize, u64, u64);

fn key(view: &View) -> ViewKey {
    (Arc::as_ptr(&view.memory) as usize, view.offset, view.bytes)
}

/// Where a graph's operations are, found at capture so that a replay
/// with parameters looks up only what it changes.
pub(super) struct OpIndex {
    /// The operations that use each captured view (exactly).
    by_view: HashMap<ViewKey, SmallVec<[usize; 2]>>,
    /// The operation of each dispatch, by `DispatchId`.
    dispatches: Vec<usize>,
    /// The streams the graph waits for.
    pub(super) waits: Vec<Arc<StreamHandle>>,
}

impl OpIndex {
    pub(super) fn new(ops: &[Op]) -> Self {
        let mut index = OpIndex {
            by_view: HashMap::new(),
            dispatches: Vec::new(),
            waits: Vec::new(),
        };
        for (i, op) in ops.iter().enumerate() {
            let mut note = |view: &View| {
                let users = index.by_view.entry(key(view)).or_default();
                if users.last() != Some(&i) {
                    users.push(i);
                }
            };
            match op {
                Op::Copy { src, dst } => {
                    note(src);
                    note(dst);
                }
                Op::Fill { dst, .. } | Op::FillTiles { dst, .. } => note(dst),
                Op::Dispatch { args, indirect, .. } => {
                    args.iter().for_each(|(view, _)| note(view));
                    if let Some(indirect) = indirect {
                        note(&indirect.args);
                    }
                    index.dispatches.push(i);
                }
                Op::Wait { other } => index.waits.push(other.clone()),
            }
        }
        index
    }
}

/// A graph recorded around a set of live operations.
pub(super) struct Split {
    /// The live operations' indices, ascending.
    live: Vec<usize>,
    pieces: Vec<Piece>,
    /// The segments' uses.
    uses: Uses,
    /// The segments' commands.
    count: usize,
}

enum Piece {
    Segment(Arc<Commands>),
    Live(usize),
}

impl Split {
    /// Records the operations of `ops` between the `live` ones.
    fn new(device: &Arc<Device>, pools: &Pools, ops: &[Op], live: Vec<usize>) -> Result<Self> {
        let mut split = Split {
            live: Vec::new(),
            pieces: Vec::new(),
            uses: Vec::new(),
            count: 0,
        };
        let mut start = 0;
        for end in live.iter().copied().chain([ops.len()]) {
            if end > start {
                let recording = record(device, pools, &ops[start..end], &Substitutions::none())?;
                if recording.count > 0 {
                    for access in use_accesses(&recording.uses) {
                        add_use(&mut split.uses, &access);
                    }
                    split.count += recording.count;
                    split.pieces.push(Piece::Segment(recording.commands));
                }
            }
            if end < ops.len() {
                split.pieces.push(Piece::Live(end));
            }
            start = end + 1;
        }
        split.live = live;
        Ok(split)
    }
}

/// The stream's batch as the target of a replay's live operations.
struct StreamSink<'s> {
    stream: &'s mut Stream,
    commands: usize,
}

impl Sink for StreamSink<'_> {
    fn record(&mut self, accesses: &[BufferAccess<'_>], command: Command<'_>) -> Result<()> {
        self.commands += 1;
        self.stream.record(&hazards(accesses), command)
    }
}

/// [`DeviceContext::enqueue_graph_with`]: records the operations `params`
/// changes between segments of the rest.
pub(super) fn enqueue_with(
    ctx: &DeviceContext,
    graph: &Graph,
    params: &GraphParams<'_>,
) -> Result<()> {
    let op = "DeviceContext::enqueue_graph_with";
    let inner = &graph.inner;
    if inner.device.id != ctx.stream.device.id {
        return Err(Error::DifferentDevice {
            op,
            detail: "the graph was captured on another device".into(),
        });
    }
    let mut subst = Substitutions::none();
    let mut live = Vec::new();
    let bad = |reason: String| Error::GraphParameter { reason };
    for (captured, with) in &params.views {
        if with.memory.device.id != inner.device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: "a substitute buffer is on another device than the graph".into(),
            });
        }
        let Some(users) = inner.index.by_view.get(&key(captured)) else {
            return Err(bad(format!(
                "the graph does not use the buffer given as captured ({} bytes at byte {})",
                captured.bytes, captured.offset
            )));
        };
        live.extend_from_slice(users);
        subst.views.push((captured, with));
    }
    for (id, bytes) in &params.push {
        if id.graph != inner.id {
            return Err(bad(format!(
                "dispatch {} of graph {} was given for graph {} (`{}`): a DispatchId \
                 belongs to the graph whose builder returned it",
                id.index,
                id.graph,
                inner.id,
                graph.label()
            )));
        }
        let found = inner
            .index
            .dispatches
            .get(id.index)
            .map(|&i| (i, &inner.ops[i]));
        let Some((
            index,
            Op::Dispatch {
                push_size, label, ..
            },
        )) = found
        else {
            return Err(bad(format!(
                "graph {} (`{}`) has no dispatch {}",
                inner.id,
                graph.label(),
                id.index
            )));
        };
        if bytes.len() != *push_size {
            return Err(Error::PushConstantSize {
                kernel: label.to_string(),
                expected: *push_size as u32,
                given: bytes.len(),
            });
        }
        live.push(index);
        subst.push.push((id.index, bytes));
    }
    live.sort_unstable();
    live.dedup();
    for &index in &live {
        check_substitution(&inner.device, index, &inner.ops[index], &subst)?;
    }
    if live.is_empty() {
        return ctx.enqueue_graph(graph);
    }
    let split = graph.split(live)?;
    for other in &inner.index.waits {
        ctx.stream.wait_for(other)?;
    }
    let device = &ctx.stream.device;
    let mut accesses: SmallVec<[BufferAccess<'_>; 8]> = use_accesses(&split.uses).collect();
    for &index in &split.live {
        inner.ops[index].accesses(device, &subst, &mut accesses);
    }
    let describe = || format!("{} with parameters", graph.label());
    let outs = super::printf::outputs(&inner.device, &inner.printing)?;
    crate::enqueue::onto(&ctx.stream, op, &accesses)
        .described(&describe)
        .sequence(|stream, hazards| {
            // After the work before it, as a whole; each piece after the
            // one before it, with a full barrier.
            stream.order(hazards);
            let output = &ctx.stream.printf;
            super::printf::around(stream, &inner.printing, &outs, output, |stream| {
                record_pieces(ctx, inner, &split, &subst, &accesses, stream)
            })?;
            // Later commands are ordered against the replay as a whole.
            stream.note(hazards);
            Ok(())
        })
}

/// Records the pieces of `split` (recorded segments, and the operations
/// `subst` changes), each after the one before it.
fn record_pieces(
    ctx: &DeviceContext,
    inner: &GraphInner,
    split: &Split,
    subst: &Substitutions<'_>,
    accesses: &[BufferAccess<'_>],
    stream: &mut Stream,
) -> Result<()> {
    let op = "DeviceContext::enqueue_graph_with";
    let device = &ctx.stream.device;
    let mut sink = StreamSink {
        stream,
        commands: 0,
    };
    let record_piece = |sink: &mut StreamSink<'_>, piece: &Piece| -> Result<()> {
        match piece {
            Piece::Segment(commands) => {
                // The batch keeps the commands (see
                // `recording::Commands`).
                sink.stream.keep_alive(commands.clone());
                sink.stream.record(&[], Command::Execute(commands.cmd))
            }
            Piece::Live(index) => {
                let op = &inner.ops[*index];
                if let Some(keep) = op.keeps() {
                    sink.stream.keep_alive(keep);
                }
                record_op(device, sink, op, subst)
            }
        }
    };
    let mut pieces = || -> Result<()> {
        for (i, piece) in split.pieces.iter().enumerate() {
            if i > 0 {
                sink.stream.barrier();
            }
            match record_piece(&mut sink, piece) {
                // Out of memory (descriptor sets, say) after earlier
                // pieces were recorded: failing now would run part of the
                // replay. Once the device is idle, which gives back what
                // completed batches hold, the piece is tried once more in
                // a new batch (a guard recorded before the failure only
                // clamps counts again).
                Err(Error::OutOfMemory { .. }) if i > 0 => {
                    log::debug!("{op}: piece {i} of a replay found no memory; retrying");
                    sink.stream.restart_batch()?;
                    // The rest is in a later batch: its buffers are in use
                    // until that one completes.
                    let value = sink.stream.pending_value();
                    for a in accesses {
                        a.memory.note_device_use(op, &ctx.stream, value, a.write)?;
                    }
                    record_piece(&mut sink, piece)?;
                }
                other => other?,
            }
        }
        Ok(())
    };
    let recorded = pieces();
    if recorded.is_err() {
        // Part of the replay may be recorded (and a piece may be half
        // recorded): it is ordered before every later command.
        sink.stream.barrier();
    }
    recorded
}

impl Graph {
    /// The graph recorded around `live` (ascending, not empty): a kept
    /// one, else recorded now.
    fn split(&self, live: Vec<usize>) -> Result<Arc<Split>> {
        let inner = &self.inner;
        let lock = || inner.splits.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(found) = lock().iter().find(|s| s.live == live) {
            return Ok(found.clone());
        }
        // Recorded without the list's lock held (it takes the pools' lock).
        let split = Arc::new(Split::new(&inner.device, &inner.pools, &inner.ops, live)?);
        let mut splits = lock();
        splits.retain(|s| s.live != split.live);
        splits.insert(0, split.clone());
        splits.truncate(MAX_SPLITS);
        Ok(split)
    }
}

/// Checks what substitutes change in operation `index`: a copy's ends must
/// not overlap, a dispatch's bindings must stay aligned, and no two of its
/// arguments may overlap where the kernel writes either (as at capture).
fn check_substitution(
    device: &Device,
    index: usize,
    op: &Op,
    subst: &Substitutions<'_>,
) -> Result<()> {
    let bad = |reason: String| Error::GraphParameter { reason };
    let overlap = |a: &View, b: &View| {
        Arc::ptr_eq(&a.memory, &b.memory)
            && a.offset < b.offset + b.bytes
            && b.offset < a.offset + a.bytes
    };
    let limits = device.limits();
    let storage_align = limits.min_storage_buffer_offset_alignment.max(1);
    let uniform_align = limits.min_uniform_buffer_offset_alignment.max(1);
    match op {
        Op::Copy { src, dst } => {
            if overlap(subst.view(src), subst.view(dst)) {
                return Err(bad(format!(
                    "operation {index}, a copy, would copy between overlapping ranges"
                )));
            }
        }
        Op::Dispatch { args, kernel, .. } => {
            for (i, (a, a_writes)) in args.iter().enumerate() {
                let a = subst.view(a);
                let (align, rule) = if kernel.binds_uniform(i) {
                    (
                        uniform_align,
                        "a uniform buffer bound to a kernel must start at a multiple of \
                         minUniformBufferOffsetAlignment",
                    )
                } else {
                    (
                        storage_align,
                        "a buffer bound to a kernel must start at a multiple of \
                         minStorageBufferOffsetAlignment",
                    )
                };
                if a.offset % align != 0 {
                    return Err(Error::Misaligned {
                        op: "DeviceContext::enqueue_graph_with",
                        offset: a.offset,
                        alignment: align,
                        rule,
                    });
                }
                for (b, b_writes) in &args[i + 1..] {
                    if (*a_writes || *b_writes) && overlap(a, subst.view(b)) {
                        return Err(bad(format!(
                            "operation {index}, a dispatch, would bind overlapping ranges \
                             that the kernel writes"
                        )));
                    }
                }
            }
        }
        // A fill is planned for the substitute's offset when recorded.
        Op::Fill { .. } | Op::FillTiles { .. } | Op::Wait { .. } => {}
    }
    Ok(())
}

/// What a replay changes: see [`DeviceContext::enqueue_graph_with`].
#[derive(Default)]
pub struct GraphParams<'a> {
    views: Vec<(&'a View, &'a View)>,
    push: Vec<(DispatchId, &'a [u8])>,
}

impl<'a> GraphParams<'a> {
    /// No changes.
    pub fn new() -> Self {
        Self::default()
    }

    /// Puts `with` wherever the graph uses `captured` (the same buffer or
    /// view, exactly); both hold `T` and must have the same length.
    pub fn buffer<T: Pod>(
        mut self,
        captured: &'a DeviceBuffer<T>,
        with: &'a DeviceBuffer<T>,
    ) -> Result<Self> {
        if captured.len() != with.len() {
            return Err(Error::LengthMismatch {
                op: "GraphParams::buffer",
                dst_len: captured.len(),
                src_len: with.len(),
            });
        }
        self.views.push((&captured.view, &with.view));
        Ok(self)
    }

    /// Other push constants for dispatch `id` (of the captured size).
    pub fn push<P: Pod>(mut self, id: DispatchId, value: &'a P) -> Self {
        self.push.push((id, bytemuck::bytes_of(value)));
        self
    }
}
