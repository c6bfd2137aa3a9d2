//! Dispatching a kernel: `DeviceContext::enqueue_function` and its
//! checks of every argument against the kernel's interface and the
//! device's limits.

use std::sync::Arc;

use ash::vk;
use bytemuck::Pod;
use smallvec::SmallVec;

use super::args::{
    arg_name, binding_list, check_aliasing, check_element_type, flatten, flatten_any,
    in_binding_order,
};
use super::{ArgKind, Grid, Kernel, KernelArg, KernelPipeline};
use crate::capabilities::Feature;
use crate::context::DeviceContext;
use crate::enqueue::BufferAccess;
use crate::error::{Error, Result};
use crate::recorder::Command;
use crate::stream::batches::Stream;
use crate::stream::printf::{self, Output, RecordBuffer};
use crate::view::View;
use crate::vk::pipeline::Groups;
use crate::vk::Device;
use vkcompute_spirv::printf::Printf;

/// A dispatch that passed every check: the buffer ranges it reads and
/// writes, its descriptors, push constants (padded to whole words) and grid.
pub(crate) struct CheckedDispatch<'a> {
    /// The pipeline to dispatch: the kernel's own, or the one for the
    /// lengths of the runtime-sized arrays of buffers it binds.
    pub(crate) kernel: Arc<KernelPipeline>,
    pub(crate) accesses: SmallVec<[BufferAccess<'a>; 8]>,
    pub(crate) infos: SmallVec<[vk::DescriptorBufferInfo; 8]>,
    /// The view behind each of `infos`.
    pub(crate) views: SmallVec<[&'a View; 8]>,
    pub(crate) push: SmallVec<[u8; 128]>,
    pub(crate) grid: [u32; 3],
    /// A printing kernel's record buffer (bound last) and call table.
    pub(crate) printf: Option<(Arc<RecordBuffer>, Arc<Printf>)>,
}

impl CheckedDispatch<'_> {
    /// Keeps the dispatch's record buffer with the batch being recorded on
    /// `stream`, and has its records read when the batch completes: lines
    /// to `output`, a failed assertion of kernel `label` for the next wait.
    pub(crate) fn keep_printf(&self, stream: &mut Stream, label: &Arc<str>, output: &Arc<Output>) {
        if let Some((records, table)) = &self.printf {
            stream.keep_alive(records.clone());
            let value = stream.pending_value();
            stream.on_complete(
                value,
                printf::completion(
                    records.clone(),
                    table.clone(),
                    label.clone(),
                    output.clone(),
                ),
            );
        }
    }
}

/// The bytes a kernel may write through a binding of `view`, as (offset,
/// length) in its memory, for ordering against other commands: an
/// out-of-range index may write past the view, within 4 bytes of its end
/// under robustBufferAccess2 (robustStorageBufferAccessSizeAlignment is at
/// most 4), anywhere in the buffer under robustBufferAccess alone, and
/// (where the device has neither) only the view is assumed.
pub(crate) fn write_extent(device: &Device, view: &View) -> (u64, u64) {
    let end = view.offset + view.bytes;
    let f = &device.capabilities;
    if f.has(Feature::RobustBufferAccess2) {
        let padded = end.next_multiple_of(4).min(view.memory.size.max(end));
        (view.offset, padded - view.offset)
    } else if f.has(Feature::RobustBufferAccess) {
        (0, view.memory.size.max(end))
    } else {
        (view.offset, view.bytes)
    }
}

impl Kernel {
    /// Refuses a kernel loaded with `allow_pointer_addressing` where the
    /// caller cannot answer for its addresses (every safe dispatch).
    pub(crate) fn refuse_pointer_addressing(&self) -> Result<()> {
        if self.inner.pointers {
            return Err(Error::PointerAddressing {
                kernel: self.label.to_string(),
                found: "it was loaded with `allow_pointer_addressing`; dispatch it with \
                        `enqueue_function_with_addresses`"
                    .into(),
            });
        }
        Ok(())
    }
}

/// Dispatching kernels.
impl DeviceContext {
    /// Enqueues a dispatch of `kernel` over `grid` workgroups (`n`, `(x, y)`
    /// or `(x, y, z)`), with `args` bound to its buffer bindings (storage
    /// and uniform) in (set, binding) order and `push` as its push constants
    /// (`&()` for none).
    ///
    /// Everything is checked before anything reaches the driver: the number
    /// of buffers, each buffer's element size against the binding's array
    /// stride, binding size against `maxStorageBufferRange` (a uniform
    /// binding: at least its block, at most `maxUniformBufferRange`), offset
    /// against `minStorageBufferOffsetAlignment` (or
    /// `minUniformBufferOffsetAlignment`), the device of every buffer, the
    /// push-constant size, the grid against `maxComputeWorkGroupCount`, and
    /// that no two arguments overlap in one buffer where the kernel writes
    /// either ([`Error::AliasedArguments`]; read-only aliases are fine).
    ///
    /// A kernel loaded with
    /// [`KernelBuilder::allow_pointer_addressing`](crate::KernelBuilder::allow_pointer_addressing)
    /// is refused ([`Error::PointerAddressing`]): dispatch it with
    /// [`enqueue_function_with_addresses`](Self::enqueue_function_with_addresses).
    pub fn enqueue_function<P: Pod>(
        &self,
        kernel: &Kernel,
        grid: impl Into<Grid>,
        args: &[KernelArg<'_>],
        push: &P,
    ) -> Result<()> {
        let op = "DeviceContext::enqueue_function";
        kernel.refuse_pointer_addressing()?;
        self.dispatch(op, kernel, grid.into(), args, &[], bytemuck::bytes_of(push))
    }

    /// Enqueues a dispatch of a kernel that reaches buffers through device
    /// addresses (the seed's `DevicePassable` model), loaded with
    /// [`KernelBuilder::allow_pointer_addressing`](crate::KernelBuilder::allow_pointer_addressing)
    /// (or an ordinary kernel).
    /// `args` bind to its buffer bindings as in
    /// [`enqueue_function`](Self::enqueue_function), with the same checks;
    /// `addressed` lists the buffers (or views) the kernel reaches through
    /// addresses, typically from [`DeviceBuffer::device_address`] passed in
    /// `push`. Each listed buffer counts as read and written by the
    /// dispatch: it stays alive until the dispatch completes even if every
    /// handle to it is dropped at once, and the dispatch is ordered after
    /// earlier work on it and before later work, like an argument.
    ///
    /// # Safety
    ///
    /// vkcompute cannot see the kernel's addresses, so the caller answers
    /// for them. For the whole execution of the dispatch:
    ///
    /// - every memory access the kernel makes through a pointer (a device
    ///   address, or a pointer derived from one) falls inside the byte range
    ///   of one buffer or view in `addressed`, or of one in `args`, and its
    ///   address was taken from that buffer on this device
    ///   ([`DeviceBuffer::device_address`]);
    /// - the kernel does not write, through addresses, a range it also
    ///   reaches through another argument or listed buffer, unless its own
    ///   synchronization makes those accesses race-free (vkcompute orders
    ///   the dispatch against other commands, not the kernel's invocations
    ///   against each other);
    /// - every value the kernel writes into a buffer is a valid value of
    ///   that buffer's element type (always so for the plain numeric
    ///   element types).
    ///
    /// [`DeviceBuffer::device_address`]: crate::DeviceBuffer::device_address
    #[allow(
        unsafe_code,
        reason = "a public entry point whose caller answers for the kernel's addresses"
    )]
    pub unsafe fn enqueue_function_with_addresses<P: Pod>(
        &self,
        kernel: &Kernel,
        grid: impl Into<Grid>,
        args: &[KernelArg<'_>],
        addressed: &[KernelArg<'_>],
        push: &P,
    ) -> Result<()> {
        self.dispatch(
            "DeviceContext::enqueue_function_with_addresses",
            kernel,
            grid.into(),
            args,
            addressed,
            bytemuck::bytes_of(push),
        )
    }

    /// Checks a dispatch and records it; `addressed` buffers are noted as
    /// read and written, beside the bound `args`.
    fn dispatch(
        &self,
        op: &'static str,
        kernel: &Kernel,
        grid: Grid,
        args: &[KernelArg<'_>],
        addressed: &[KernelArg<'_>],
        push_bytes: &[u8],
    ) -> Result<()> {
        let d = self.check_dispatch(op, kernel, grid, args, addressed, push_bytes)?;
        let k = &d.kernel;
        let keep = k.clone();
        let describe = || format!("kernel {} grid {:?}", kernel.label, d.grid);
        crate::enqueue::onto(&self.stream, op, &d.accesses)
            .described(&describe)
            .command(|stream| {
                stream.keep_alive(keep);
                d.keep_printf(stream, &kernel.label, &self.stream.printf);
                let command = Command::Dispatch {
                    pipeline: &k.pipeline,
                    buffers: &d.infos,
                    push: &d.push,
                    groups: Groups::Count(d.grid),
                };
                Ok((command, ()))
            })
    }

    /// Checks a dispatch (everything `enqueue_function` documents) and
    /// returns what recording it needs.
    pub(crate) fn check_dispatch<'a>(
        &self,
        op: &'static str,
        kernel: &'a Kernel,
        grid: Grid,
        args: &[KernelArg<'a>],
        addressed: &[KernelArg<'a>],
        push_bytes: &[u8],
    ) -> Result<CheckedDispatch<'a>> {
        let k = &kernel.inner;
        let device = &self.stream.device;
        let name = || kernel.label.to_string();
        if k.device.id != device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: format!(
                    "kernel `{}` was loaded on device `{}`, the context is on `{}`; load it on this context",
                    kernel.label,
                    k.device.name(),
                    device.name()
                ),
            });
        }
        let bindings = &k.interface.bindings;
        if args.len() != bindings.len() {
            return Err(Error::ArgumentCount {
                kernel: name(),
                expected: bindings.len(),
                bindings: binding_list(bindings),
                given: args.len(),
            });
        }
        let ordered = in_binding_order(&kernel.label, bindings, args)?;
        let args = &ordered[..];
        if push_bytes.len() != k.interface.push_size as usize {
            return Err(Error::PushConstantSize {
                kernel: name(),
                expected: k.interface.push_size,
                given: push_bytes.len(),
            });
        }
        let Grid(grid) = grid;
        let limits = device.limits();
        for (axis, (&n, &max)) in grid
            .iter()
            .zip(&limits.max_compute_work_group_count)
            .enumerate()
        {
            if n == 0 || n > max {
                return Err(Error::InvalidGrid {
                    kernel: name(),
                    grid,
                    reason: format!(
                        "dimension {} is {n}; it must be between 1 and maxComputeWorkGroupCount[{axis}] = {max}",
                        ["x", "y", "z"][axis]
                    ),
                });
            }
        }
        let bound = flatten(&kernel.label, bindings, args)?;
        check_aliasing(&kernel.label, &bound)?;
        let pipeline = if k.has_runtime_arrays() {
            let lengths: SmallVec<[u32; 4]> = args
                .iter()
                .zip(bindings)
                .filter(|(_, b)| b.runtime_sized)
                .map(|((_, arg), _)| match arg.kind {
                    ArgKind::Array(elements) => elements.len() as u32,
                    ArgKind::Buffer(_) => 1,
                })
                .collect();
            k.variant(self, &kernel.label, &lengths)?
        } else {
            k.clone()
        };
        let mut accesses = SmallVec::with_capacity(bound.len() + addressed.len());
        let mut infos = SmallVec::with_capacity(bound.len());
        let mut views = SmallVec::with_capacity(bound.len());
        for each in &bound {
            let (arg, binding) = (each.arg, each.binding);
            let bad = |reason: String| Error::Argument {
                kernel: name(),
                index: each.index,
                binding: binding.binding,
                reason: match each.element {
                    Some(e) => format!("element {e}: {reason}"),
                    None => reason,
                },
            };
            let view = arg.view;
            if view.bytes == 0 {
                return Err(bad(format!(
                    "{} is empty; a binding needs at least one element",
                    arg_name(arg)
                )));
            }
            if let Err(strides) = binding.accepts(arg.element_size, view.bytes) {
                let declared = match strides.as_slice() {
                    [one] => format!("the binding's array has {one}-byte elements"),
                    many => format!(
                        "the binding's aliases have arrays of {many:?}-byte elements and its {} bytes \
                         are not a whole number of elements of each",
                        view.bytes
                    ),
                };
                return Err(bad(format!(
                    "{declared} but {} has {}-byte elements; pass a view of a matching type \
                     (`create_sub_buffer`)",
                    arg_name(arg),
                    arg.element_size
                )));
            }
            check_element_type(arg, binding).map_err(bad)?;
            let uniform = binding.kind == crate::reflect::BindingKind::UniformBuffer;
            let (max_range, range_name, align, rule) = if uniform {
                (
                    limits.max_uniform_buffer_range,
                    "maxUniformBufferRange",
                    limits.min_uniform_buffer_offset_alignment,
                    "a uniform buffer bound to a kernel must start at a multiple of \
                     minUniformBufferOffsetAlignment",
                )
            } else {
                (
                    limits.max_storage_buffer_range,
                    "maxStorageBufferRange",
                    limits.min_storage_buffer_offset_alignment,
                    "a buffer bound to a kernel must start at a multiple of \
                     minStorageBufferOffsetAlignment",
                )
            };
            if let Some(needed) = binding.uniform_size.filter(|&n| view.bytes < n) {
                return Err(bad(format!(
                    "{} holds {} bytes but the kernel's uniform block spans {needed}; pass a buffer \
                     of at least that size",
                    arg_name(arg),
                    view.bytes
                )));
            }
            let max_range = u64::from(max_range);
            if view.bytes > max_range {
                return Err(bad(format!(
                    "{} bytes exceed the device's {range_name} of {max_range} bytes; split the work",
                    view.bytes
                )));
            }
            let align = align.max(1);
            if view.offset % align != 0 {
                return Err(Error::Misaligned {
                    op,
                    offset: view.offset,
                    alignment: align,
                    rule,
                });
            }
            let (offset, len) = if binding.read_only {
                (view.offset, view.bytes)
            } else {
                write_extent(device, view)
            };
            accesses.push(BufferAccess {
                memory: &view.memory,
                offset,
                len,
                write: !binding.read_only,
            });
            infos.push(vk::DescriptorBufferInfo {
                buffer: view.memory.handle(),
                offset: view.offset,
                range: view.bytes,
            });
            views.push(view);
        }
        // The buffers reached through addresses (every element of an
        // array argument among them).
        let listed = flatten_any(addressed);
        accesses.extend(listed.map(|view| BufferAccess {
            memory: &view.memory,
            offset: view.offset,
            len: view.bytes,
            write: true,
        }));
        let mut push = SmallVec::from_slice(push_bytes);
        push.resize(push_bytes.len().next_multiple_of(4), 0);
        // A printing kernel's record buffer: its binding is the kernel's
        // last (see `vkcompute_spirv::printf`).
        let printf = match &pipeline.printf {
            Some(table) => {
                let capacity = printf::capacity(device, table, self.stream.printf.buffer_bytes);
                let records = Arc::new(RecordBuffer::new(device, table, capacity)?);
                infos.push(records.descriptor());
                Some((records, table.clone()))
            }
            None => None,
        };
        Ok(CheckedDispatch {
            kernel: pipeline,
            accesses,
            infos,
            views,
            push,
            grid,
            printf,
        })
    }
}
