//! Indirect dispatch: `DeviceContext::enqueue_function_indirect`, whose
//! three workgroup counts are read on the device from a `DeviceBuffer<u32>`
//! (written by an earlier kernel, say), and the guard in front of it.
//!
//! An indirect dispatch is two commands: the guard (`shaders/clamp_groups.comp`,
//! one invocation) copies the counts into a small buffer of vkcompute's own,
//! each clamped to `maxComputeWorkGroupCount`, and the dispatch reads them
//! from there (`vkCmdDispatchIndirect`). So no count beyond the device's
//! limit reaches it, whatever the buffer holds; a count of 0 runs nothing.
//! Both go through the recorder: the guard reads the argument buffer and
//! writes the slot, the dispatch reads the slot, so each is ordered after
//! the work it depends on like any other command. The same steps serve
//! streams and graphs.

use std::sync::Arc;

use ash::vk;
use bytemuck::{Pod, Zeroable};
use smallvec::SmallVec;

use crate::buffer::DeviceBuffer;
use crate::context::DeviceContext;
use crate::enqueue::{hazards, BufferAccess};
use crate::error::{Error, Result};
use crate::kernel::{Grid, Kernel, KernelArg};
use crate::recorder::Command;
use crate::view::View;
use crate::vk::pipeline::{ComputePipeline, Groups, PipelineBinding};
use crate::vk::Device;

/// The guard's push constants (`shaders/clamp_groups.comp`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Pod, Zeroable)]
struct ClampParams {
    first: u32,
    max: [u32; 3],
}

/// The elements of the slot the guard writes (three counts, padded).
pub(crate) const SLOT_LEN: usize = 4;

/// The two commands of one indirect dispatch, but the dispatch's own
/// bindings: the guard's bindings and parameters, and where the clamped
/// counts go.
pub(crate) struct IndirectSteps {
    pipeline: Arc<ComputePipeline>,
    bindings: [vk::DescriptorBufferInfo; 2],
    params: ClampParams,
    slot: vk::Buffer,
    slot_offset: u64,
}

impl IndirectSteps {
    /// The steps of a dispatch whose counts are elements `first..first + 3`
    /// of `args` (a view of `u32`), clamped into `slot` (a view of
    /// [`SLOT_LEN`] `u32` of the same device).
    pub(crate) fn new(device: &Device, args: &View, first: u64, slot: &View) -> Result<Self> {
        let pipeline = device.internal_pipeline("clamp_groups", || {
            ComputePipeline::new(
                device,
                crate::shaders::CLAMP_GROUPS,
                c"main",
                vec![PipelineBinding::storage(0), PipelineBinding::storage(1)],
                std::mem::size_of::<ClampParams>() as u32,
                None,
            )
        })?;
        let limits = device.limits();
        let (bind_offset, bind_len) = guard_read(device, args, first);
        let start = args.offset + 4 * first;
        Ok(IndirectSteps {
            pipeline,
            bindings: [
                vk::DescriptorBufferInfo {
                    buffer: args.memory.handle(),
                    offset: bind_offset,
                    range: bind_len,
                },
                vk::DescriptorBufferInfo {
                    buffer: slot.memory.handle(),
                    offset: slot.offset,
                    range: slot.bytes,
                },
            ],
            params: ClampParams {
                first: ((start - bind_offset) / 4) as u32,
                max: limits.max_compute_work_group_count,
            },
            slot: slot.memory.handle(),
            slot_offset: slot.offset,
        })
    }

    /// What the guard reads (its binding of the arguments) and writes
    /// (the slot), given the views the steps were made for.
    pub(crate) fn guard_accesses<'a>(
        &self,
        args: &'a View,
        slot: &'a View,
    ) -> [BufferAccess<'a>; 2] {
        let [read, _] = self.bindings;
        [
            BufferAccess {
                memory: &args.memory,
                offset: read.offset,
                len: read.range,
                write: false,
            },
            BufferAccess {
                memory: &slot.memory,
                offset: slot.offset,
                len: slot.bytes,
                write: true,
            },
        ]
    }

    /// The dispatch's read of the clamped counts.
    pub(crate) fn slot_read<'a>(&self, slot: &'a View) -> BufferAccess<'a> {
        BufferAccess {
            memory: &slot.memory,
            offset: slot.offset,
            len: 12,
            write: false,
        }
    }

    /// The guard's command.
    pub(crate) fn guard(&self) -> Command<'_> {
        Command::Dispatch {
            pipeline: &self.pipeline,
            buffers: &self.bindings,
            push: bytemuck::bytes_of(&self.params),
            groups: Groups::Count([1, 1, 1]),
        }
    }

    /// The workgroups of the dispatch: the clamped counts.
    pub(crate) fn groups(&self) -> Groups {
        Groups::Indirect {
            buffer: self.slot,
            offset: self.slot_offset,
        }
    }
}

/// The bytes of `args`'s memory the guard binds (offset, length) to read
/// elements `first..first + 3` of `args`: from the storage alignment below
/// the counts to their end (it reads only the three words).
pub(crate) fn guard_read(device: &Device, args: &View, first: u64) -> (u64, u64) {
    let start = args.offset + 4 * first;
    let align = device.limits().min_storage_buffer_offset_alignment.max(4);
    let bind_offset = start / align * align;
    (bind_offset, start + 12 - bind_offset)
}

/// Checks the argument buffer of an indirect dispatch: of `device`, with
/// three elements from `first` on.
pub(crate) fn check_arguments(
    op: &'static str,
    device: &Device,
    args: &DeviceBuffer<u32>,
    first: usize,
) -> Result<()> {
    if args.view.memory.device.id != device.id {
        return Err(Error::DifferentDevice {
            op,
            detail: "the buffer of workgroup counts is on another device".into(),
        });
    }
    if first.checked_add(3).is_none_or(|end| end > args.len()) {
        return Err(Error::OutOfRange {
            op,
            buffer: DeviceBuffer::<u32>::type_name(),
            offset: first,
            len: 3,
            buffer_len: args.len(),
        });
    }
    Ok(())
}

/// Indirect dispatch: workgroup counts read on the device.
impl DeviceContext {
    /// Enqueues a dispatch of `kernel` whose workgroup counts are read on
    /// the device: elements `offset`, `offset + 1` and `offset + 2` of
    /// `args` (x, y, z), as an earlier command left them (a kernel that
    /// decides how much work comes next, say). `buffers` and `push` are as
    /// in [`enqueue_function`](Self::enqueue_function), with the same checks.
    ///
    /// The counts never reach the device unbounded: a guard kernel, run
    /// just before on the device, copies them into a buffer of vkcompute's
    /// own, each clamped to `maxComputeWorkGroupCount` (a count of 0 runs
    /// no workgroup). Each count is bounded, not their product: counts of
    /// `u32::MAX` run the largest grid the device allows (65,535³
    /// workgroups on many devices), which takes as long as it takes. The dispatch is ordered after earlier work that
    /// writes `args` and before later work that writes it, like a read;
    /// the kernel may write `args` itself (the counts were copied first).
    ///
    /// Errors as `enqueue_function`'s, and [`Error::OutOfRange`] where
    /// `args` has fewer than `offset + 3` elements.
    ///
    /// ```
    /// # fn main() -> vkcompute::Result<()> {
    /// use vkcompute::{shaders, DeviceContext, Kernel};
    /// let ctx = DeviceContext::new()?;
    /// let add_one = Kernel::new(&ctx, shaders::ADD_ONE, "main")?; // 64 per workgroup
    /// let data = ctx.enqueue_create_buffer::<u32>(256)?;
    /// data.enqueue_fill(0)?;
    /// let counts = ctx.enqueue_create_buffer::<u32>(3)?;
    /// counts.enqueue_copy_from(&[2u32, 1, 1][..])?; // or written by a kernel
    /// ctx.enqueue_function_indirect(&add_one, &counts, 0, &[data.arg()], &256u32)?;
    /// let out = data.to_vec()?;
    /// assert_eq!(out.iter().filter(|&&v| v == 1).count(), 128); // 2 workgroups of 64
    /// # Ok(()) }
    /// ```
    pub fn enqueue_function_indirect<P: Pod>(
        &self,
        kernel: &Kernel,
        args: &DeviceBuffer<u32>,
        offset: usize,
        buffers: &[KernelArg<'_>],
        push: &P,
    ) -> Result<()> {
        let op = "DeviceContext::enqueue_function_indirect";
        kernel.refuse_pointer_addressing()?;
        let device = &self.stream.device;
        // Every check of a direct dispatch but the grid's, which the guard
        // makes on the device.
        let d = self.check_dispatch(
            op,
            kernel,
            Grid([1, 1, 1]),
            buffers,
            &[],
            bytemuck::bytes_of(push),
        )?;
        check_arguments(op, device, args, offset)?;
        // Freed once the dispatch that reads it is done (its uses are noted).
        let slot = self.enqueue_create_buffer::<u32>(SLOT_LEN)?;
        let steps = IndirectSteps::new(device, &args.view, offset as u64, &slot.view)?;
        let guard = steps.guard_accesses(&args.view, &slot.view);
        let mut dispatch: SmallVec<[BufferAccess<'_>; 9]> = SmallVec::new();
        for a in &d.accesses {
            dispatch.push(*a);
        }
        dispatch.push(steps.slot_read(&slot.view));
        let all: Vec<BufferAccess<'_>> = guard.iter().chain(&dispatch).copied().collect();
        let keep = d.kernel.clone();
        let describe = || format!("kernel {} indirect", kernel.label());
        crate::enqueue::onto(&self.stream, op, &all)
            .described(&describe)
            .sequence(|stream, _| {
                stream.keep_alive(keep);
                d.keep_printf(stream, &kernel.label, &self.stream.printf);
                stream.record(&hazards(&guard), steps.guard())?;
                let command = Command::Dispatch {
                    pipeline: d.kernel.pipeline(),
                    buffers: &d.infos,
                    push: &d.push,
                    groups: steps.groups(),
                };
                stream.record(&hazards(&dispatch), command)
            })
    }
}
