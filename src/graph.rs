//! Compute graphs: a sequence of stream operations (copies, fills,
//! dispatches, waits on other streams) checked and recorded once into a
//! reusable secondary command buffer, with its barriers computed at
//! capture, then replayed on the stream with one call.
//!
//! A replay is one command of the stream: it waits for, and is waited for
//! by, other work on the buffers it uses as a whole (the union of the byte
//! ranges its operations read and write, per buffer), like any other
//! command. The graph keeps its buffers and kernels alive. Replays may
//! change push constants and put other buffers of the same type and length
//! in place of captured ones; such a replay records a new command buffer
//! from the captured operations (no checks repeat but the substitutes').

use std::sync::{Arc, Mutex};

use ash::vk;
use bytemuck::Pod;

use crate::buffer::{CopyDestination, CopySource, DeviceBuffer, Source, View};
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::fill::{self, FillPlan};
use crate::hazard::{Access, HazardTracker};
use crate::kernel::{write_extent, Grid, Kernel, KernelArg, KernelPipeline};
use crate::record::BufferAccess;
use crate::submitter::Submitter;
use crate::vk::command::{Cmd, CommandPool};
use crate::vk::memory::RawBuffer;
use crate::vk::pipeline::{record_dispatch_into, Bound, DescriptorPools};
use crate::vk::{Device, MemoryUsage};

/// One captured operation.
enum Op {
    Copy {
        src: View,
        dst: View,
    },
    Fill {
        dst: View,
        word: u32,
    },
    /// A fill of other element widths: copies of a tile of whole elements
    /// the graph keeps in its own host-visible buffer.
    FillTiles {
        dst: View,
        tile: Arc<Tile>,
    },
    /// A fill through the fill kernel (elements of 1, 2, 4, 8 or 16 bytes
    /// on ranges a 32-bit pattern cannot cover), in dispatches computed
    /// when recorded (they depend on the view's offset).
    FillKernel {
        dst: View,
        element: Vec<u8>,
    },
    Dispatch {
        kernel: Arc<KernelPipeline>,
        /// Bound arguments: the view, and whether the kernel writes it.
        args: Vec<(View, bool)>,
        /// Padded to whole words; `push_size` bytes are the kernel's.
        push: Vec<u8>,
        push_size: usize,
        grid: [u32; 3],
    },
    Wait {
        other: Arc<Submitter>,
    },
}

impl Op {
    /// Whether the operation uses exactly `view`.
    fn uses(&self, view: &View) -> bool {
        match self {
            Op::Copy { src, dst } => same_view(src, view) || same_view(dst, view),
            Op::Fill { dst, .. } | Op::FillKernel { dst, .. } | Op::FillTiles { dst, .. } => {
                same_view(dst, view)
            }
            Op::Dispatch { args, .. } => args.iter().any(|(v, _)| same_view(v, view)),
            Op::Wait { .. } => false,
        }
    }

    /// The byte ranges the operation reads and writes, after substitution.
    fn accesses<'a>(
        &'a self,
        device: &Device,
        subst: &Substitutions<'a>,
        out: &mut Vec<BufferAccess<'a>>,
    ) {
        let whole = |view: &'a View, write: bool| BufferAccess {
            memory: &view.memory,
            offset: view.offset,
            len: view.bytes,
            write,
        };
        match self {
            Op::Copy { src, dst } => {
                out.push(whole(subst.view(src), false));
                out.push(whole(subst.view(dst), true));
            }
            // (A tile is written once, at capture, before any submission.)
            Op::Fill { dst, .. } | Op::FillTiles { dst, .. } => {
                out.push(whole(subst.view(dst), true))
            }
            // Each of its dispatches is ordered on its own, in `record_into`.
            Op::FillKernel { .. } => {}
            Op::Dispatch { args, .. } => {
                for (view, write) in args {
                    let view = subst.view(view);
                    let (offset, len) = if *write {
                        write_extent(device, view)
                    } else {
                        (view.offset, view.bytes)
                    };
                    out.push(BufferAccess {
                        memory: &view.memory,
                        offset,
                        len,
                        write: *write,
                    });
                }
            }
            Op::Wait { .. } => {}
        }
    }
}

/// Views put in place of captured ones for one replay.
struct Substitutions<'a> {
    /// (captured, substitute); the substitute has the captured length.
    views: Vec<(&'a View, &'a View)>,
    /// (dispatch index, push constants).
    push: Vec<(usize, &'a [u8])>,
}

impl<'a> Substitutions<'a> {
    fn none() -> Self {
        Substitutions {
            views: Vec::new(),
            push: Vec::new(),
        }
    }

    fn view(&self, captured: &'a View) -> &'a View {
        self.views
            .iter()
            .find(|(c, _)| same_view(c, captured))
            .map_or(captured, |(_, s)| s)
    }
}

fn same_view(a: &View, b: &View) -> bool {
    Arc::ptr_eq(&a.memory, &b.memory) && a.offset == b.offset && a.bytes == b.bytes
}

/// Per buffer and direction, one byte range covering every access of a
/// graph: (the memory, offset, length, write).
type Uses = Vec<(View, u64, u64, bool)>;

/// The command pool a graph's recordings come from (of secondary buffers).
/// Recording into (and freeing) its buffers needs its lock. Every
/// recording holds it (an Arc) and every batch that executes a recording
/// holds the recording, so none of its buffers is pending when it goes.
type Pools = Arc<Mutex<CommandPool>>;

/// A buffer of whole elements that a graph's tile fills copy from, written
/// once at capture.
struct Tile {
    device: Arc<Device>,
    raw: Option<RawBuffer>,
    len: u64,
}

impl Tile {
    fn new(device: &Arc<Device>, element: &[u8], len: u64) -> Result<Self> {
        let raw = RawBuffer::new(device, len, MemoryUsage::Upload, "a graph's fill tile")?;
        let tile = Tile {
            device: device.clone(),
            raw: Some(raw),
            len,
        };
        let Some(mapped) = tile.raw.as_ref().and_then(|r| r.mapped_range(0, len)) else {
            return Err(Error::Unsupported {
                what: "host-visible memory for a graph's fill tile".into(),
                device: device.name().to_string(),
            });
        };
        // The buffer is new (no device work uses it) and coherent (upload
        // memory always is).
        mapped.fill(element);
        Ok(tile)
    }

    fn buffer(&self) -> vk::Buffer {
        self.raw.as_ref().map_or(vk::Buffer::null(), |r| r.buffer)
    }
}

impl Drop for Tile {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            // Every recording that copies from the tile holds it, and every
            // batch that runs a recording holds the recording: no work
            // uses it any more.
            raw.destroy(&self.device);
        }
    }
}

/// One recording of a graph: a secondary command buffer, the descriptor
/// sets it binds (where push descriptors are off), and the union of the
/// byte ranges it reads and writes. Batches that execute it hold it.
struct Recording {
    device: Arc<Device>,
    pools: Pools,
    cmd: Cmd,
    descriptors: DescriptorPools,
    uses: Uses,
    commands: usize,
    /// The tiles its fills copy from.
    _tiles: Vec<Arc<Tile>>,
}

impl Drop for Recording {
    fn drop(&mut self) {
        // No batch that executes the buffer is pending (they hold this
        // recording until they complete).
        let mut pool = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pool.free(self.cmd);
        self.descriptors.destroy(&self.device);
    }
}

struct GraphInner {
    device: Arc<Device>,
    ops: Vec<Op>,
    pools: Pools,
    recording: Arc<Recording>,
}

/// A captured sequence of stream operations, replayed with
/// [`DeviceContext::enqueue_graph`]. See [`DeviceContext::capture_graph`].
///
/// Cloning is cheap (same graph). The graph keeps the buffers and kernels it
/// uses alive, so they may be dropped by the caller while it lives.
#[derive(Clone)]
pub struct Graph {
    inner: Arc<GraphInner>,
}

/// Which dispatch of a graph: returned by [`GraphBuilder::dispatch`], to
/// change its push constants on a replay.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DispatchId(usize);

/// Records operations into a [`Graph`]: see [`DeviceContext::capture_graph`].
///
/// Every operation is checked as its `enqueue_*` counterpart checks it;
/// what cannot be replayed (host memory, mappings) does not exist here, and
/// a host slice as a copy's source is an error ([`Error::NotCapturable`]).
pub struct GraphBuilder<'c> {
    ctx: &'c DeviceContext,
    ops: Vec<Op>,
    dispatches: usize,
}

impl DeviceContext {
    /// Starts capturing a graph of operations on this context's device.
    ///
    /// ```
    /// # fn main() -> vkcompute::Result<()> {
    /// let ctx = vkcompute::DeviceContext::new()?;
    /// let a = ctx.enqueue_create_buffer::<u32>(64)?;
    /// let b = ctx.enqueue_create_buffer::<u32>(64)?;
    /// let mut g = ctx.capture_graph();
    /// g.fill(&a, 5)?;
    /// g.copy(&a, &b)?;
    /// let graph = g.finish()?;
    /// for _ in 0..3 {
    ///     ctx.enqueue_graph(&graph)?; // one call, nothing re-checked
    /// }
    /// assert_eq!(b.to_vec()?, vec![5; 64]);
    /// # Ok(()) }
    /// ```
    pub fn capture_graph(&self) -> GraphBuilder<'_> {
        GraphBuilder {
            ctx: self,
            ops: Vec::new(),
            dispatches: 0,
        }
    }

    /// Enqueues a replay of `graph`: all its operations, in order, as one
    /// command of this stream.
    pub fn enqueue_graph(&self, graph: &Graph) -> Result<()> {
        self.replay(graph, graph.inner.recording.clone())
    }

    /// Enqueues a replay of `graph` with `params`: other push constants for
    /// some dispatches, other buffers in place of captured ones. Records a
    /// new command buffer for the replay (its cost grows with the graph).
    pub fn enqueue_graph_with(&self, graph: &Graph, params: &GraphParams<'_>) -> Result<()> {
        let inner = &graph.inner;
        let mut subst = Substitutions::none();
        let bad = |reason: String| Error::GraphParameter { reason };
        for (captured, with) in &params.views {
            if with.memory.device.id != inner.device.id {
                return Err(Error::DifferentDevice {
                    op: "DeviceContext::enqueue_graph_with",
                    detail: "a substitute buffer is on another device than the graph".into(),
                });
            }
            if !inner.ops.iter().any(|op| op.uses(captured)) {
                return Err(bad(format!(
                    "the graph does not use the buffer given as captured ({} bytes at byte {})",
                    captured.bytes, captured.offset
                )));
            }
            subst.views.push((captured, with));
        }
        for (id, bytes) in &params.push {
            let Some(Op::Dispatch {
                push_size, kernel, ..
            }) = dispatch_op(&inner.ops, id.0)
            else {
                return Err(bad(format!("the graph has no dispatch {}", id.0)));
            };
            if bytes.len() != *push_size {
                return Err(Error::PushConstantSize {
                    kernel: kernel.entry().to_string(),
                    expected: *push_size as u32,
                    given: bytes.len(),
                });
            }
            subst.push.push((id.0, bytes));
        }
        check_substitutions(&inner.device, &inner.ops, &subst)?;
        let recording = record(&inner.device, &inner.pools, &inner.ops, &subst)?;
        self.replay(graph, Arc::new(recording))
    }

    fn replay(&self, graph: &Graph, recording: Arc<Recording>) -> Result<()> {
        let op = "DeviceContext::enqueue_graph";
        let inner = &graph.inner;
        if inner.device.id != self.shared.device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: "the graph was captured on another device".into(),
            });
        }
        for captured in &inner.ops {
            if let Op::Wait { other } = captured {
                self.shared.wait_for(other)?;
            }
        }
        let accesses: Vec<BufferAccess<'_>> = recording
            .uses
            .iter()
            .map(|(view, offset, len, write)| BufferAccess {
                memory: &view.memory,
                offset: *offset,
                len: *len,
                write: *write,
            })
            .collect();
        let describe = || format!("graph of {} commands", recording.commands);
        let keep = recording.clone();
        self.shared
            .record_described(op, &describe, &accesses, |stream, cmd| {
                stream.keep_alive(keep);
                cmd.execute(stream.device(), recording.cmd);
                // After a secondary command buffer the primary's bound state
                // is undefined.
                stream.forget_bindings();
                Ok(())
            })
    }
}

/// Checks what substitutes change: a copy's ends must not overlap, a
/// dispatch's bindings must stay aligned, and no two of its arguments may
/// overlap where the kernel writes either (as at capture).
fn check_substitutions(device: &Device, ops: &[Op], subst: &Substitutions<'_>) -> Result<()> {
    let bad = |reason: String| Error::GraphParameter { reason };
    let overlap = |a: &View, b: &View| {
        Arc::ptr_eq(&a.memory, &b.memory)
            && a.offset < b.offset + b.bytes
            && b.offset < a.offset + a.bytes
    };
    let align = device.limits().min_storage_buffer_offset_alignment.max(1);
    for (index, op) in ops.iter().enumerate() {
        match op {
            Op::Copy { src, dst } => {
                if overlap(subst.view(src), subst.view(dst)) {
                    return Err(bad(format!(
                        "operation {index}, a copy, would copy between overlapping ranges"
                    )));
                }
            }
            Op::Dispatch { args, .. } => {
                for (i, (a, a_writes)) in args.iter().enumerate() {
                    let a = subst.view(a);
                    if a.offset % align != 0 {
                        return Err(Error::Misaligned {
                            op: "DeviceContext::enqueue_graph_with",
                            offset: a.offset,
                            alignment: align,
                            rule: "a buffer bound to a kernel must start at a multiple of \
                                   minStorageBufferOffsetAlignment",
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
            Op::Fill { .. } | Op::FillKernel { .. } | Op::FillTiles { .. } | Op::Wait { .. } => {}
        }
    }
    Ok(())
}

/// The `n`th dispatch of `ops`.
fn dispatch_op(ops: &[Op], n: usize) -> Option<&Op> {
    ops.iter()
        .filter(|op| matches!(op, Op::Dispatch { .. }))
        .nth(n)
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

impl GraphBuilder<'_> {
    fn check_device(&self, op: &'static str, view: &View) -> Result<()> {
        if view.memory.device.id != self.ctx.shared.device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: "a graph uses buffers of its context's device only".into(),
            });
        }
        Ok(())
    }

    /// Captures a copy from `src` to `dst` (device or host buffers of the
    /// same length); host slices cannot be captured.
    pub fn copy<T: Pod, S, D>(&mut self, src: &S, dst: &D) -> Result<&mut Self>
    where
        S: CopySource<T> + ?Sized,
        D: CopyDestination<T> + ?Sized,
    {
        let op = "GraphBuilder::copy";
        let Source::View(src) = src.source() else {
            return Err(Error::NotCapturable {
                op,
                reason: "a host slice is read when it is enqueued, not when the graph runs; \
                         copy it into a HostBuffer and capture a copy from that"
                    .into(),
            });
        };
        let dst = dst.destination();
        self.check_device(op, src)?;
        self.check_device(op, dst)?;
        if src.bytes != dst.bytes {
            return Err(Error::LengthMismatch {
                op,
                dst_len: dst.bytes as usize,
                src_len: src.bytes as usize,
            });
        }
        if Arc::ptr_eq(&src.memory, &dst.memory)
            && src.offset < dst.offset + dst.bytes
            && dst.offset < src.offset + src.bytes
        {
            return Err(Error::Overlap {
                op,
                src_offset: src.offset,
                dst_offset: dst.offset,
                len: src.bytes,
            });
        }
        if src.bytes > 0 {
            self.ops.push(Op::Copy {
                src: src.clone(),
                dst: dst.clone(),
            });
        }
        Ok(self)
    }

    /// Captures a fill of `buffer` with `value`. Fills that are one 32-bit
    /// pattern at a 4-byte-aligned offset and length (any 32-bit element;
    /// 8- and 16-bit elements on such ranges) are capturable.
    pub fn fill<T: Pod>(&mut self, buffer: &DeviceBuffer<T>, value: T) -> Result<&mut Self> {
        let op = "GraphBuilder::fill";
        let view = &buffer.view;
        self.check_device(op, view)?;
        if view.bytes == 0 {
            return Ok(self);
        }
        let element = bytemuck::bytes_of(&value);
        match fill::plan(view.offset, view.bytes, element) {
            FillPlan::Word(word) => {
                self.ops.push(Op::Fill {
                    dst: view.clone(),
                    word,
                });
                Ok(self)
            }
            FillPlan::Kernel => {
                self.ops.push(Op::FillKernel {
                    dst: view.clone(),
                    element: element.to_vec(),
                });
                Ok(self)
            }
            FillPlan::Tiles => {
                let len = fill::tile_len(view.bytes, element.len() as u64);
                let tile = Tile::new(&self.ctx.shared.device, element, len)?;
                self.ops.push(Op::FillTiles {
                    dst: view.clone(),
                    tile: Arc::new(tile),
                });
                Ok(self)
            }
        }
    }

    /// Captures a dispatch, checked as [`DeviceContext::enqueue_function`]
    /// checks it. Returns its id, to change its push constants on a replay.
    pub fn dispatch<P: Pod>(
        &mut self,
        kernel: &Kernel,
        grid: impl Into<Grid>,
        args: &[KernelArg<'_>],
        push: &P,
    ) -> Result<DispatchId> {
        let op = "GraphBuilder::dispatch";
        let checked = self.ctx.check_dispatch(
            op,
            kernel,
            grid.into(),
            args,
            &[],
            bytemuck::bytes_of(push),
        )?;
        let args = checked
            .accesses
            .iter()
            .zip(args)
            .map(|(a, arg)| (arg.view.clone(), a.write))
            .collect();
        self.ops.push(Op::Dispatch {
            kernel: checked.kernel.clone(),
            args,
            push_size: std::mem::size_of::<P>(),
            push: checked.push.to_vec(),
            grid: checked.grid,
        });
        self.dispatches += 1;
        Ok(DispatchId(self.dispatches - 1))
    }

    /// Makes every replay wait (on the device) for the work enqueued on
    /// `other` by the time of the replay, as
    /// [`DeviceContext::enqueue_wait_for`] does.
    pub fn wait_for(&mut self, other: &DeviceContext) -> Result<&mut Self> {
        if other.shared.device.id != self.ctx.shared.device.id {
            return Err(Error::DifferentDevice {
                op: "GraphBuilder::wait_for",
                detail: "a graph can wait on the device only for streams of its own device".into(),
            });
        }
        self.ops.push(Op::Wait {
            other: other.shared.clone(),
        });
        Ok(self)
    }

    /// Records the graph.
    pub fn finish(self) -> Result<Graph> {
        let device = self.ctx.shared.device.clone();
        let pools = Arc::new(Mutex::new(CommandPool::new(&device, true)?));
        let recording = record(&device, &pools, &self.ops, &Substitutions::none())?;
        Ok(Graph {
            inner: Arc::new(GraphInner {
                device,
                ops: self.ops,
                pools,
                recording: Arc::new(recording),
            }),
        })
    }
}

/// Records `ops` (with `subst`) into a new secondary command buffer, with a
/// barrier wherever an operation depends on an earlier one.
fn record(
    device: &Arc<Device>,
    pools: &Pools,
    ops: &[Op],
    subst: &Substitutions<'_>,
) -> Result<Recording> {
    // The pool's lock is held while its buffer records (Vulkan requires it).
    let mut guard = pools.lock().unwrap_or_else(|e| e.into_inner());
    let cmd = guard.begin()?;
    let mut descriptors = DescriptorPools::default();
    let recorded = record_into(device, cmd, &mut descriptors, ops, subst)
        .and_then(|recorded| guard.end(cmd).map(|()| recorded));
    drop(guard);
    // From here the recording owns `cmd` and the descriptor sets.
    let mut recording = Recording {
        device: device.clone(),
        pools: pools.clone(),
        cmd,
        descriptors,
        uses: Vec::new(),
        commands: 0,
        _tiles: ops
            .iter()
            .filter_map(|op| match op {
                Op::FillTiles { tile, .. } => Some(tile.clone()),
                _ => None,
            })
            .collect(),
    };
    (recording.uses, recording.commands) = recorded?;
    Ok(recording)
}

/// The body of [`record`]: returns the union of the uses and the number of
/// commands recorded.
fn record_into(
    device: &Arc<Device>,
    cmd: Cmd,
    descriptors: &mut DescriptorPools,
    ops: &[Op],
    subst: &Substitutions<'_>,
) -> Result<(Uses, usize)> {
    let mut hazards = HazardTracker::default();
    let mut accesses = Vec::new();
    let mut union: Uses = Vec::new();
    let mut dispatch_index = 0;
    let mut commands = 0;
    let mut bound = Bound::default();
    for op in ops {
        if let Op::FillKernel { dst, element } = op {
            let d = subst.view(dst);
            let pipeline = fill::fill_pipeline(device)?;
            for chunk in fill::device_kernel_chunks(device, d.offset, d.bytes, element) {
                // The whole binding counts as written, as `enqueue_fill` counts it.
                let access = BufferAccess {
                    memory: &d.memory,
                    offset: chunk.bind_offset,
                    len: chunk.bind_size,
                    write: true,
                };
                order(device, cmd, &mut hazards, &mut union, &[access]);
                chunk.record(
                    device,
                    descriptors,
                    &mut bound,
                    cmd,
                    &pipeline,
                    d.memory.handle(),
                )?;
                commands += 1;
            }
            continue;
        }
        accesses.clear();
        op.accesses(device, subst, &mut accesses);
        order(device, cmd, &mut hazards, &mut union, &accesses);
        match op {
            Op::Copy { src, dst } => {
                let (s, d) = (subst.view(src), subst.view(dst));
                let region = vk::BufferCopy {
                    src_offset: s.offset,
                    dst_offset: d.offset,
                    size: s.bytes,
                };
                // Both ranges lie in their buffers and do not overlap
                // (checked at capture; a substitute has the captured length).
                cmd.copy_buffer(device, s.memory.handle(), d.memory.handle(), &[region]);
            }
            Op::FillTiles { dst, tile } => {
                let d = subst.view(dst);
                let regions: smallvec::SmallVec<[vk::BufferCopy; 8]> = (0..d.bytes)
                    .step_by(tile.len as usize)
                    .map(|at| vk::BufferCopy {
                        src_offset: 0,
                        dst_offset: d.offset + at,
                        size: tile.len.min(d.bytes - at),
                    })
                    .collect();
                // Every region lies in the tile and in the view (the tile is
                // whole elements, at most the view's length; a substitute has
                // the captured length).
                cmd.copy_buffer(device, tile.buffer(), d.memory.handle(), &regions);
            }
            Op::Fill { dst, word } => {
                let d = subst.view(dst);
                // Offset and size are multiples of 4 inside the buffer (the
                // fill plan said so at capture).
                cmd.fill_buffer(device, d.memory.handle(), d.offset, d.bytes, *word);
            }
            Op::Dispatch {
                kernel,
                args,
                push,
                grid,
                ..
            } => {
                let infos: Vec<vk::DescriptorBufferInfo> = args
                    .iter()
                    .map(|(view, _)| {
                        let v = subst.view(view);
                        vk::DescriptorBufferInfo {
                            buffer: v.memory.handle(),
                            offset: v.offset,
                            range: v.bytes,
                        }
                    })
                    .collect();
                let push = match subst.push.iter().find(|(i, _)| *i == dispatch_index) {
                    Some((_, bytes)) => {
                        let mut p = bytes.to_vec();
                        p.resize(push.len(), 0);
                        p
                    }
                    None => push.clone(),
                };
                dispatch_index += 1;
                record_dispatch_into(
                    device,
                    descriptors,
                    &mut bound,
                    cmd,
                    kernel.pipeline(),
                    &infos,
                    &push,
                    *grid,
                )?;
            }
            Op::Wait { .. } | Op::FillKernel { .. } => continue,
        }
        commands += 1;
    }
    Ok((union, commands))
}

/// Records a barrier before a command making `accesses` where it depends on
/// an earlier command of the graph, and widens the graph's uses to cover them.
fn order(
    device: &Device,
    cmd: Cmd,
    hazards: &mut HazardTracker,
    union: &mut Uses,
    accesses: &[BufferAccess<'_>],
) {
    let ranges: smallvec::SmallVec<[Access; 8]> = accesses
        .iter()
        .map(|a| Access {
            buffer: vk::Handle::as_raw(a.memory.handle()),
            start: a.offset,
            end: a.offset + a.len,
            write: a.write,
        })
        .collect();
    if hazards.conflicts(&ranges) {
        cmd.dependency_barrier(device);
        hazards.clear();
    }
    hazards.record(&ranges);
    for a in accesses {
        add_use(union, a);
    }
}

/// Widens the graph's use of `a`'s memory (in `a`'s direction) to cover `a`.
fn add_use(union: &mut Uses, a: &BufferAccess<'_>) {
    let end = a.offset + a.len;
    for (view, offset, len, write) in union.iter_mut() {
        if *write == a.write && Arc::ptr_eq(&view.memory, a.memory) {
            let new_end = (*offset + *len).max(end);
            *offset = (*offset).min(a.offset);
            *len = new_end - *offset;
            return;
        }
    }
    union.push((
        View {
            memory: a.memory.clone(),
            offset: 0,
            bytes: a.memory.size,
        },
        a.offset,
        a.len,
        a.write,
    ));
}
