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
//! from the captured operations (no checks repeat but the substitutes'),
//! and plans each fill again for the offset of the view it fills then.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytemuck::Pod;

use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::enqueue::BufferAccess;
use crate::error::{Error, Result};
use crate::fill::{self, FillPlan};
use crate::indirect::{check_arguments, IndirectSteps, SLOT_LEN};
use crate::kernel::{Grid, Kernel, KernelArg};
use crate::recorder::Command;
use crate::view::{CopyDestination, CopySource, Source, View};
use crate::vk::command::CommandPool;
use crate::vk::Device;

mod params;
mod printf;
mod recording;

pub use params::GraphParams;
use params::{OpIndex, Split};
use printf::Printing;
use recording::{record, use_accesses, Indirect, Op, Pools, Recording, Substitutions, Tile};

struct GraphInner {
    device: Arc<Device>,
    /// The graph's number, which its `DispatchId`s carry.
    id: u64,
    /// The label given to the capture, if any.
    label: Option<String>,
    ops: Vec<Op>,
    pools: Pools,
    recording: Arc<Recording>,
    index: OpIndex,
    /// Recordings around the operations replays changed, newest first.
    splits: Mutex<Vec<Arc<Split>>>,
    /// The dispatches of printing kernels, in order.
    printing: Vec<Printing>,
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

impl Graph {
    /// The graph's label: the one given to its capture, else `graph of N
    /// operations`.
    pub fn label(&self) -> String {
        match &self.inner.label {
            Some(label) => label.clone(),
            None => format!("graph of {} operations", self.inner.ops.len()),
        }
    }

    /// The graph's number: unique in the process, carried by its
    /// [`DispatchId`]s and named in errors (clones share it).
    pub fn id(&self) -> u64 {
        self.inner.id
    }
}

impl std::fmt::Debug for Graph {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Graph")
            .field("id", &self.inner.id)
            .field("label", &self.label())
            .field("operations", &self.inner.ops.len())
            .finish()
    }
}

/// Which dispatch of which graph: returned by [`GraphCapture::enqueue_function`],
/// to change its push constants on a replay of that graph. Given with
/// another graph, it is an error ([`Error::GraphParameter`]) that names
/// both graphs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DispatchId {
    /// The number of the graph whose builder returned it.
    graph: u64,
    /// The dispatch's place among the graph's dispatches.
    index: usize,
}

impl DispatchId {
    /// The number of the graph it belongs to ([`Graph::id`]).
    pub fn graph(&self) -> u64 {
        self.graph
    }
}

/// The number of the next graph captured (from 1).
static NEXT_GRAPH: AtomicU64 = AtomicU64::new(1);

/// Records operations into a [`Graph`]: see [`DeviceContext::capture_graph`].
///
/// A capture is a recording, not a builder: its `enqueue_*` methods have
/// the stream's names and arguments (the stream method's receiver first)
/// and take `&mut self`, as a stream's take `&self`; [`finish`](Self::finish)
/// ends it. Every operation is checked as its `enqueue_*` counterpart checks it;
/// what cannot be replayed (host memory, mappings) does not exist here, and
/// a host slice as a copy's source is an error ([`Error::NotCapturable`]).
pub struct GraphCapture<'c> {
    ctx: &'c DeviceContext,
    /// The number of the graph it makes.
    id: u64,
    ops: Vec<Op>,
    dispatches: usize,
    label: Option<String>,
    printing: Vec<Printing>,
}

/// Graphs: capture once, replay many times.
impl DeviceContext {
    /// Starts capturing a graph of operations on this context's device.
    ///
    /// ```
    /// # fn main() -> vkcompute::Result<()> {
    /// let ctx = vkcompute::DeviceContext::new()?;
    /// let a = ctx.enqueue_create_buffer::<u32>(64)?;
    /// let b = ctx.enqueue_create_buffer::<u32>(64)?;
    /// let mut g = ctx.capture_graph();
    /// g.enqueue_fill(&a, 5)?;
    /// g.enqueue_copy_to(&a, &b)?;
    /// let graph = g.finish()?;
    /// for _ in 0..3 {
    ///     ctx.enqueue_graph(&graph)?; // one call, nothing re-checked
    /// }
    /// assert_eq!(b.to_vec()?, vec![5; 64]);
    /// # Ok(()) }
    /// ```
    pub fn capture_graph(&self) -> GraphCapture<'_> {
        GraphCapture {
            ctx: self,
            id: NEXT_GRAPH.fetch_add(1, Ordering::Relaxed),
            ops: Vec::new(),
            dispatches: 0,
            label: None,
            printing: Vec::new(),
        }
    }

    /// Enqueues a replay of `graph`: all its operations, in order, as one
    /// command of this stream.
    pub fn enqueue_graph(&self, graph: &Graph) -> Result<()> {
        self.replay(graph, graph.inner.recording.clone())
    }

    /// Enqueues a replay of `graph` with `params`: other push constants for
    /// some dispatches, other buffers in place of captured ones.
    ///
    /// Only the operations that `params` changes are recorded again, with
    /// their parameters; the rest of the graph runs as recorded. Its cost
    /// grows with the number of changed operations, not with the graph's
    /// length, except on the first replay that changes a given set of
    /// operations: that one records the rest of the graph once more around
    /// them (the last four such sets stay recorded, so a loop that changes
    /// the same dispatches every iteration pays it once).
    ///
    /// A substitute may start at any offset its type allows: fills are
    /// planned again for it (a `vkCmdFillBuffer` needs 4-byte boundaries,
    /// elsewhere the fill kernel runs), copies take any offset, and a
    /// substitute bound to a kernel must start at a multiple of
    /// `minStorageBufferOffsetAlignment` ([`Error::Misaligned`]).
    pub fn enqueue_graph_with(&self, graph: &Graph, params: &GraphParams<'_>) -> Result<()> {
        params::enqueue_with(self, graph, params)
    }

    fn replay(&self, graph: &Graph, recording: Arc<Recording>) -> Result<()> {
        let op = "DeviceContext::enqueue_graph";
        let inner = &graph.inner;
        if inner.device.id != self.stream.device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: "the graph was captured on another device".into(),
            });
        }
        for other in &inner.index.waits {
            self.stream.wait_for(other)?;
        }
        let accesses: Vec<BufferAccess<'_>> = use_accesses(&recording.uses).collect();
        let describe = || match &graph.inner.label {
            Some(label) => format!("graph `{label}` of {} commands", recording.count),
            None => format!("graph of {} commands", recording.count),
        };
        // The batch keeps the commands, not the recording's buffers (see
        // `recording::Commands`).
        let keep = recording.commands.clone();
        if inner.printing.is_empty() {
            return crate::enqueue::onto(&self.stream, op, &accesses)
                .described(&describe)
                .command(|stream| {
                    let secondary = keep.cmd;
                    stream.keep_alive(keep);
                    Ok((Command::Execute(secondary), ()))
                });
        }
        let outs = printf::outputs(&inner.device, &inner.printing)?;
        let output = &self.stream.printf;
        crate::enqueue::onto(&self.stream, op, &accesses)
            .described(&describe)
            .sequence(|stream, hazards| {
                stream.order(hazards);
                printf::around(stream, &inner.printing, &outs, output, |stream| {
                    let secondary = keep.cmd;
                    stream.keep_alive(keep);
                    stream.record(&[], Command::Execute(secondary))
                })?;
                stream.note(hazards);
                Ok(())
            })
    }
}

impl GraphCapture<'_> {
    fn check_device(&self, op: &'static str, view: &View) -> Result<()> {
        if view.memory.device.id != self.ctx.stream.device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: "a graph uses buffers of its context's device only".into(),
            });
        }
        Ok(())
    }

    /// Captures `src.enqueue_copy_to(dst)`: a copy from `src` to `dst`
    /// (device or host buffers of the same length); host slices cannot be
    /// captured.
    pub fn enqueue_copy_to<T: Pod, S, D>(&mut self, src: &S, dst: &D) -> Result<()>
    where
        S: CopySource<T> + ?Sized,
        D: CopyDestination<T> + ?Sized,
    {
        self.push_copy("GraphCapture::enqueue_copy_to", src, dst)
    }

    /// Captures `dst.enqueue_copy_from(src)`: the same copy as
    /// [`enqueue_copy_to`](Self::enqueue_copy_to), named from its
    /// destination.
    pub fn enqueue_copy_from<T: Pod, D, S>(&mut self, dst: &D, src: &S) -> Result<()>
    where
        D: CopyDestination<T> + ?Sized,
        S: CopySource<T> + ?Sized,
    {
        self.push_copy("GraphCapture::enqueue_copy_from", src, dst)
    }

    /// Checks a copy from `src` to `dst` and captures it.
    fn push_copy<T: Pod, S, D>(&mut self, op: &'static str, src: &S, dst: &D) -> Result<()>
    where
        S: CopySource<T> + ?Sized,
        D: CopyDestination<T> + ?Sized,
    {
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
        Ok(())
    }

    /// Captures `buffer.enqueue_fill(value)`. Fills that are one 32-bit
    /// pattern at a 4-byte-aligned offset and length (any 32-bit element;
    /// 8- and 16-bit elements on such ranges) are capturable.
    pub fn enqueue_fill<T: Pod>(&mut self, buffer: &DeviceBuffer<T>, value: T) -> Result<()> {
        let op = "GraphCapture::enqueue_fill";
        let view = &buffer.view;
        self.check_device(op, view)?;
        if view.bytes == 0 {
            return Ok(());
        }
        let element = bytemuck::bytes_of(&value);
        match fill::plan(view.offset, view.bytes, element) {
            // Planned again when recorded, for the offset of the view it
            // fills then (a substitute's may differ).
            FillPlan::Word(_) | FillPlan::Kernel => {
                self.ops.push(Op::Fill {
                    dst: view.clone(),
                    element: element.to_vec(),
                });
                Ok(())
            }
            FillPlan::Tiles => {
                let len = fill::tile_len(view.bytes, element.len() as u64);
                let tile = Tile::new(&self.ctx.stream.device, element, len)?;
                self.ops.push(Op::FillTiles {
                    dst: view.clone(),
                    tile: Arc::new(tile),
                });
                Ok(())
            }
        }
    }

    /// Captures a dispatch, with the arguments of
    /// [`DeviceContext::enqueue_function`] and checked as it checks them.
    /// Returns its id, to change its push constants on a replay.
    pub fn enqueue_function<P: Pod>(
        &mut self,
        kernel: &Kernel,
        grid: impl Into<Grid>,
        args: &[KernelArg<'_>],
        push: &P,
    ) -> Result<DispatchId> {
        let op = "GraphCapture::enqueue_function";
        self.push_dispatch(op, kernel, grid.into(), args, push, None)
    }

    /// Captures an indirect dispatch, with the arguments of
    /// [`DeviceContext::enqueue_function_indirect`] and checked as it
    /// checks them: every replay
    /// reads the workgroup counts from elements `offset..offset + 3` of
    /// `counts` as the work before it left them, and clamps them on the
    /// device to `maxComputeWorkGroupCount`. Returns its id, to change its
    /// push constants on a replay (`counts` may be substituted like any
    /// captured buffer).
    pub fn enqueue_function_indirect<P: Pod>(
        &mut self,
        kernel: &Kernel,
        counts: &DeviceBuffer<u32>,
        offset: usize,
        args: &[KernelArg<'_>],
        push: &P,
    ) -> Result<DispatchId> {
        let op = "GraphCapture::enqueue_function_indirect";
        let grid = Grid([1, 1, 1]);
        self.push_dispatch(op, kernel, grid, args, push, Some((counts, offset)))
    }

    /// Checks a dispatch (direct over `grid`, or indirect with its counts
    /// in `indirect`) and captures it.
    fn push_dispatch<P: Pod>(
        &mut self,
        op: &'static str,
        kernel: &Kernel,
        grid: Grid,
        args: &[KernelArg<'_>],
        push: &P,
        indirect: Option<(&DeviceBuffer<u32>, usize)>,
    ) -> Result<DispatchId> {
        kernel.refuse_pointer_addressing()?;
        let checked =
            self.ctx
                .check_dispatch(op, kernel, grid, args, &[], bytemuck::bytes_of(push))?;
        let device = &self.ctx.stream.device;
        let indirect = match indirect {
            Some((counts, first)) => {
                check_arguments(op, device, counts, first)?;
                let slot = self.ctx.enqueue_create_buffer::<u32>(SLOT_LEN)?;
                // Made now, so that what it needs fails at capture.
                IndirectSteps::new(device, &counts.view, first as u64, &slot.view)?;
                Some(Indirect {
                    args: counts.view.clone(),
                    first: first as u64,
                    slot: slot.view.clone(),
                })
            }
            None => None,
        };
        let mut args: Vec<(View, bool)> = checked
            .accesses
            .iter()
            .zip(&checked.views)
            .map(|(a, view)| (View::clone(view), a.write))
            .collect();
        // A printing kernel binds a record buffer of the graph's last (the
        // one `check_dispatch` made for a stream dispatch goes unused).
        if let Some((_, table)) = &checked.printf {
            let printing = Printing::new(self.ctx, table.clone(), kernel.label().into())?;
            args.push((printing.view().clone(), true));
            self.printing.push(printing);
        }
        self.ops.push(Op::Dispatch {
            id: self.dispatches,
            kernel: checked.kernel.clone(),
            label: kernel.label().into(),
            args,
            push_size: std::mem::size_of::<P>(),
            push: checked.push.to_vec(),
            grid: checked.grid,
            indirect,
        });
        self.dispatches += 1;
        Ok(DispatchId {
            graph: self.id,
            index: self.dispatches - 1,
        })
    }

    /// Captures `enqueue_wait_for(other)`: every replay waits (on the
    /// device) for the work enqueued on `other` by the time of the replay,
    /// as [`DeviceContext::enqueue_wait_for`] does.
    pub fn enqueue_wait_for(&mut self, other: &DeviceContext) -> Result<()> {
        if other.stream.device.id != self.ctx.stream.device.id {
            return Err(Error::DifferentDevice {
                op: "GraphCapture::enqueue_wait_for",
                detail: "a graph can wait on the device only for streams of its own device".into(),
            });
        }
        self.ops.push(Op::Wait {
            other: other.stream.clone(),
        });
        Ok(())
    }

    /// Labels the graph: its replays appear under it in the trace, and
    /// `Graph::label` and `Debug` show it.
    pub fn label(&mut self, label: impl Into<String>) -> &mut Self {
        self.label = Some(label.into());
        self
    }

    /// Records the graph.
    pub fn finish(self) -> Result<Graph> {
        let device = self.ctx.stream.device.clone();
        device.check_alive("GraphCapture::finish")?;
        let pools = Arc::new(Mutex::new(CommandPool::new(&device, true)?));
        let recording = record(&device, &pools, &self.ops, &Substitutions::none())?;
        Ok(Graph {
            inner: Arc::new(GraphInner {
                device,
                id: self.id,
                label: self.label,
                index: OpIndex::new(&self.ops),
                ops: self.ops,
                pools,
                recording: Arc::new(recording),
                splits: Mutex::new(Vec::new()),
                printing: self.printing,
            }),
        })
    }
}
