//! Recording a graph: its operations, the command pool and the fill tiles
//! its recordings use, and the recording itself (a secondary command
//! buffer with the barriers the operations need, and the union of the
//! byte ranges it reads and writes).

use std::sync::{Arc, Mutex};

use ash::vk;
use smallvec::SmallVec;

use crate::batch_pool::DescriptorPools;
use crate::enqueue::{hazards, BufferAccess};
use crate::error::{Error, Result};
use crate::fill::{self, FillSteps};
use crate::indirect::{guard_read, IndirectSteps};
use crate::kernel::{write_extent, KernelPipeline};
use crate::recorder::{Command, Recorder};
use crate::stream::StreamHandle;
use crate::view::View;
use crate::vk::command::{Cmd, CommandPool};
use crate::vk::memory::RawBuffer;
use crate::vk::pipeline::Groups;
use crate::vk::{Device, MemoryUsage};

/// One captured operation.
pub(super) enum Op {
    Copy {
        src: View,
        dst: View,
    },
    /// A fill with an element of 1, 2, 4, 8 or 16 bytes, planned when
    /// recorded (the plan depends on the offset, which a substitute may
    /// change): one `vkCmdFillBuffer` where the range is a 32-bit pattern
    /// on 4-byte boundaries, else dispatches of the fill kernel.
    Fill {
        dst: View,
        element: Vec<u8>,
    },
    /// A fill of other element widths: copies of a tile of whole elements
    /// the graph keeps in its own host-visible buffer (at any offset).
    FillTiles {
        dst: View,
        tile: Arc<Tile>,
    },
    Dispatch {
        /// Its `DispatchId`: the how-manieth dispatch of the graph.
        id: usize,
        kernel: Arc<KernelPipeline>,
        /// The kernel's label, for errors.
        label: Arc<str>,
        /// Bound arguments: the view, and whether the kernel writes it.
        args: Vec<(View, bool)>,
        /// Padded to whole words; `push_size` bytes are the kernel's.
        push: Vec<u8>,
        push_size: usize,
        grid: [u32; 3],
        /// Where an indirect dispatch reads its counts (`grid` is unused).
        indirect: Option<Indirect>,
    },
    Wait {
        other: Arc<StreamHandle>,
    },
}

impl Op {
    /// What a batch that records the operation itself keeps alive: its
    /// kernel or its tile.
    pub(super) fn keeps(&self) -> Option<Arc<dyn std::any::Any + Send + Sync>> {
        match self {
            Op::Dispatch { kernel, .. } => Some(kernel.clone()),
            Op::FillTiles { tile, .. } => Some(tile.clone()),
            Op::Copy { .. } | Op::Fill { .. } | Op::Wait { .. } => None,
        }
    }

    /// The byte ranges the operation reads and writes, after substitution.
    pub(super) fn accesses<'a>(
        &'a self,
        device: &Device,
        subst: &Substitutions<'a>,
        out: &mut SmallVec<[BufferAccess<'a>; 8]>,
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
            // A fill through the kernel orders each of its dispatches on its
            // own, in `record_into`.
            Op::Fill { dst, .. } | Op::FillTiles { dst, .. } => {
                out.push(whole(subst.view(dst), true))
            }
            Op::Dispatch { args, indirect, .. } => {
                if let Some(indirect) = indirect {
                    // The guard reads the counts and writes the slot, which
                    // the dispatch then reads.
                    let counts = subst.view(&indirect.args);
                    let (offset, len) = guard_read(device, counts, indirect.first);
                    out.push(BufferAccess {
                        memory: &counts.memory,
                        offset,
                        len,
                        write: false,
                    });
                    out.push(whole(&indirect.slot, true));
                }
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

/// The counts of an indirect dispatch: elements `first..first + 3` of
/// `args`, clamped into the graph's own `slot` by the guard.
pub(super) struct Indirect {
    pub(super) args: View,
    pub(super) first: u64,
    pub(super) slot: View,
}

/// Views put in place of captured ones for one replay.
pub(super) struct Substitutions<'a> {
    /// (captured, substitute); the substitute has the captured length.
    pub(super) views: Vec<(&'a View, &'a View)>,
    /// (`DispatchId`, push constants).
    pub(super) push: Vec<(usize, &'a [u8])>,
}

impl<'a> Substitutions<'a> {
    pub(super) fn none() -> Self {
        Substitutions {
            views: Vec::new(),
            push: Vec::new(),
        }
    }

    pub(super) fn view(&self, captured: &'a View) -> &'a View {
        self.views
            .iter()
            .find(|(c, _)| same_view(c, captured))
            .map_or(captured, |(_, s)| s)
    }
}

pub(super) fn same_view(a: &View, b: &View) -> bool {
    Arc::ptr_eq(&a.memory, &b.memory) && a.offset == b.offset && a.bytes == b.bytes
}

/// Per buffer and direction, one byte range covering every access of a
/// graph: (the memory, offset, length, write).
pub(super) type Uses = Vec<(View, u64, u64, bool)>;

/// The command pool a graph's recordings come from (of secondary buffers).
/// Recording into (and freeing) its buffers needs its lock. Every
/// recording holds it (an Arc) and every batch that executes a recording
/// holds the recording, so none of its buffers is pending when it goes.
pub(super) type Pools = Arc<Mutex<CommandPool>>;

/// A buffer of whole elements that a graph's tile fills copy from, written
/// once at capture.
pub(super) struct Tile {
    device: Arc<Device>,
    raw: Option<RawBuffer>,
    len: u64,
}

impl Tile {
    pub(super) fn new(device: &Arc<Device>, element: &[u8], len: u64) -> Result<Self> {
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

/// One recording of a graph: its commands (what a batch that executes it
/// keeps), and the union of the byte ranges it reads and writes (the
/// buffers, which only the replay that records it needs).
pub(super) struct Recording {
    pub(super) commands: Arc<Commands>,
    pub(super) uses: Uses,
    pub(super) count: usize,
}

/// A recording's secondary command buffer, the descriptor sets it binds
/// (where push descriptors are off), the tiles its fills copy from and the
/// kernels it dispatches. Batches that execute it hold it, and nothing in
/// it holds a buffer (whose memory holds its owner's stream): a batch of
/// the stream that owns a graph's buffers would keep the stream alive
/// through it, and the stream the batch. The buffers need no holding:
/// each replay notes its uses on them, so their memory is freed only once
/// the replay is done.
pub(super) struct Commands {
    device: Arc<Device>,
    pools: Pools,
    pub(super) cmd: Cmd,
    descriptors: DescriptorPools,
    _tiles: Vec<Arc<Tile>>,
    _kernels: Vec<Arc<KernelPipeline>>,
}

impl Drop for Commands {
    fn drop(&mut self) {
        // No batch that executes the buffer is pending (they hold these
        // commands until they complete).
        let mut pool = self.pools.lock().unwrap_or_else(|e| e.into_inner());
        pool.free(self.cmd);
        self.descriptors.destroy(&self.device);
    }
}

/// Records `ops` (with `subst`) into a new secondary command buffer, with a
/// barrier wherever an operation depends on an earlier one.
pub(super) fn record(
    device: &Arc<Device>,
    pools: &Pools,
    ops: &[Op],
    subst: &Substitutions<'_>,
) -> Result<Recording> {
    // The pool's lock is held while its buffer records (Vulkan requires it).
    let mut guard = pools.lock().unwrap_or_else(|e| e.into_inner());
    let cmd = guard.begin()?;
    let mut descriptors = DescriptorPools::descriptors();
    let recorded = record_into(device, cmd, &mut descriptors, ops, subst)
        .and_then(|recorded| guard.end(cmd).map(|()| recorded));
    drop(guard);
    // From here the recording owns `cmd` and the descriptor sets.
    let commands = Arc::new(Commands {
        device: device.clone(),
        pools: pools.clone(),
        cmd,
        descriptors,
        _tiles: ops
            .iter()
            .filter_map(|op| match op {
                Op::FillTiles { tile, .. } => Some(tile.clone()),
                _ => None,
            })
            .collect(),
        _kernels: ops
            .iter()
            .filter_map(|op| match op {
                Op::Dispatch { kernel, .. } => Some(kernel.clone()),
                _ => None,
            })
            .collect(),
    });
    let (uses, count) = recorded?;
    Ok(Recording {
        commands,
        uses,
        count,
    })
}

/// The body of [`record`]: returns the union of the uses and the number of
/// commands recorded.
pub(super) fn record_into(
    device: &Arc<Device>,
    cmd: Cmd,
    descriptors: &mut DescriptorPools,
    ops: &[Op],
    subst: &Substitutions<'_>,
) -> Result<(Uses, usize)> {
    let mut target = Target {
        device,
        recorder: Recorder::new(cmd),
        descriptors,
        union: Vec::new(),
        commands: 0,
    };
    for op in ops {
        record_op(device, &mut target, op, subst)?;
    }
    target.recorder.finish(device);
    Ok((target.union, target.commands))
}

/// Where the commands of a graph's operations go: the graph's own
/// recording, or (for the operations a replay with parameters changes)
/// the stream's batch. Either way one [`Recorder`] records them.
pub(super) trait Sink {
    /// Records `command`, which makes `accesses`.
    fn record(&mut self, accesses: &[BufferAccess<'_>], command: Command<'_>) -> Result<()>;
}

/// Gives the commands of `op` (with `subst`) to `sink`.
pub(super) fn record_op(
    device: &Arc<Device>,
    sink: &mut dyn Sink,
    op: &Op,
    subst: &Substitutions<'_>,
) -> Result<()> {
    let mut accesses: SmallVec<[BufferAccess<'_>; 8]> = SmallVec::new();
    match op {
        Op::Fill { dst, element } => {
            let d = subst.view(dst);
            let handle = d.memory.handle();
            // Planned for the offset of the view it fills now; never
            // `Tiles`, which depends on the element's width alone.
            let Some(fill) = FillSteps::new(device, handle, d.offset, d.bytes, element)? else {
                return Err(Error::GraphParameter {
                    reason: "a captured fill changed its plan".into(),
                });
            };
            for step in &fill.steps {
                let access = BufferAccess {
                    memory: &d.memory,
                    offset: step.offset,
                    len: step.len,
                    write: true,
                };
                sink.record(&[access], step.command(device, handle))?;
            }
        }
        Op::Wait { .. } => {}
        Op::Copy { src, dst } => {
            op.accesses(device, subst, &mut accesses);
            let (s, d) = (subst.view(src), subst.view(dst));
            let region = vk::BufferCopy {
                src_offset: s.offset,
                dst_offset: d.offset,
                size: s.bytes,
            };
            // Both ranges lie in their buffers and do not overlap (checked
            // at capture; a substitute has the captured length).
            let command = Command::copy(s.memory.handle(), d.memory.handle(), region);
            sink.record(&accesses, command)?;
        }
        Op::FillTiles { dst, tile } => {
            op.accesses(device, subst, &mut accesses);
            let d = subst.view(dst);
            // The tile is at most the view's length (a substitute has the
            // captured length).
            let src = (tile.buffer(), 0, tile.len);
            let command = fill::tile_copy(src, d.memory.handle(), d.offset, d.bytes);
            sink.record(&accesses, command)?;
        }
        Op::Dispatch {
            id,
            kernel,
            args,
            push,
            grid,
            indirect,
            ..
        } => {
            op.accesses(device, subst, &mut accesses);
            let steps = match indirect {
                Some(i) => {
                    let counts = subst.view(&i.args);
                    let steps = IndirectSteps::new(device, counts, i.first, &i.slot)?;
                    sink.record(&steps.guard_accesses(counts, &i.slot), steps.guard())?;
                    Some(steps)
                }
                None => None,
            };
            let infos: SmallVec<[vk::DescriptorBufferInfo; 8]> = args
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
            let mut replaced = SmallVec::<[u8; 128]>::new();
            let push = match subst.push.iter().find(|(i, _)| i == id) {
                Some((_, bytes)) => {
                    replaced.extend_from_slice(bytes);
                    replaced.resize(push.len(), 0);
                    &replaced[..]
                }
                None => &push[..],
            };
            let command = Command::Dispatch {
                pipeline: kernel.pipeline(),
                buffers: &infos,
                push,
                groups: steps.as_ref().map_or(Groups::Count(*grid), |s| s.groups()),
            };
            sink.record(&accesses, command)?;
        }
    }
    Ok(())
}

/// A graph's recording as the recorder's target: the commands go into its
/// secondary command buffer with its own descriptor pools, and their
/// ranges widen the graph's uses.
struct Target<'r> {
    device: &'r Arc<Device>,
    recorder: Recorder,
    descriptors: &'r mut DescriptorPools,
    union: Uses,
    commands: usize,
}

impl Sink for Target<'_> {
    fn record(&mut self, accesses: &[BufferAccess<'_>], command: Command<'_>) -> Result<()> {
        self.recorder
            .record(self.device, self.descriptors, &hazards(accesses), command)?;
        for a in accesses {
            add_use(&mut self.union, a);
        }
        self.commands += 1;
        Ok(())
    }
}

/// The byte ranges of `uses`, as a command's accesses.
pub(super) fn use_accesses(uses: &Uses) -> impl Iterator<Item = BufferAccess<'_>> {
    uses.iter().map(|(view, offset, len, write)| BufferAccess {
        memory: &view.memory,
        offset: *offset,
        len: *len,
        write: *write,
    })
}

/// Widens the graph's use of `a`'s memory (in `a`'s direction) to cover `a`.
pub(super) fn add_use(union: &mut Uses, a: &BufferAccess<'_>) {
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
