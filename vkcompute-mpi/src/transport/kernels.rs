//! The reduction kernels: `acc[i] = acc[i] OP incoming[i]` on the device,
//! three SPIR-V modules per element type (`shaders/reduce_*.comp`, one
//! element an invocation; `reduce4_*`, four, the operands in one binding
//! at a stride; `reduce3_*`, four, up to three operands in bindings of
//! their own; compiled and checked in under `shaders/spv/`), the operation
//! chosen by specialization constant 0.
//!
//! They load from the checked-in SPIR-V through the raw layer
//! (`raw::shipped_kernel`, which says why that is sound).

use std::collections::HashMap;
use std::sync::Mutex;

use bytemuck::Pod;
use vkcompute::{DeviceBuffer, DeviceContext, HostBuffer, Kernel};

use crate::element::{KernelType, ReduceOp, Reducible};
use crate::error::{Error, Result};
use crate::raw::{self, Shape};

/// The invocations of one workgroup (`local_size_x` of the shaders).
const WORKGROUP: usize = 256;
/// The groups of four elements each invocation of a wide kernel does
/// (`UNROLL` in `shaders/reduce4_*.comp` and `shaders/reduce3_*.comp`).
const WIDE_UNROLL: usize = 4;
/// The most workgroups one dispatch uses (the kernels loop over the rest;
/// the device's `maxComputeWorkGroupCount[0]` caps it too). Enough for one
/// element (or group of four) per invocation up to 64 Mi of them: on
/// lavapipe an invocation that loops is slower than more workgroups
/// (32 MiB of f32, wide kernel, 4,096 workgroups against 8,192: 20.1 and
/// 20.8 ms against 17.3 and 18.7 ms, one process on the 2-core VM).
const MAX_WORKGROUPS: usize = 65535;

/// The reduction kernels of one communicator's context, loaded on first
/// use (by element type, operation, shape and operand count).
pub(crate) struct Reducer {
    loaded: Mutex<HashMap<(KernelType, ReduceOp, Shape, u32), Kernel>>,
}

/// The two kernels of one reduction: the wide one for the elements in
/// whole groups of four, the scalar one for the rest.
#[derive(Clone)]
pub(crate) struct ReduceKernels {
    wide: Kernel,
    scalar: Kernel,
}

/// The passes of a reduction of `operands` operands in buffers of their
/// own: `(first, count)`, three operands a pass, the last pass the rest.
fn operand_passes(operands: usize) -> impl Iterator<Item = (usize, usize)> {
    (0..operands)
        .step_by(3)
        .map(move |first| (first, 3.min(operands - first)))
}

impl Reducer {
    pub(crate) fn new() -> Self {
        Reducer {
            loaded: Mutex::new(HashMap::new()),
        }
    }

    /// The kernels that reduce `T` with `op` on `ctx`'s device.
    pub(crate) fn kernel<T: Reducible>(
        &self,
        op_name: &'static str,
        ctx: &DeviceContext,
        op: ReduceOp,
    ) -> Result<ReduceKernels> {
        Ok(ReduceKernels {
            wide: self.load::<T>(op_name, ctx, op, (Shape::Wide, 1))?,
            scalar: self.load::<T>(op_name, ctx, op, (Shape::Scalar, 1))?,
        })
    }

    /// Loads the kernels that reduce `operands` operands of `T` in buffers
    /// of their own with `op` on `ctx`'s device
    /// ([`enqueue_reduce_operands`]), so that a failure shows before the
    /// ranks agree.
    pub(crate) fn load_operand_kernels<T: Reducible>(
        &self,
        op_name: &'static str,
        ctx: &DeviceContext,
        op: ReduceOp,
        operands: usize,
    ) -> Result<()> {
        for (_, count) in operand_passes(operands) {
            self.load::<T>(op_name, ctx, op, (Shape::Operands3, count as u32))?;
        }
        self.load::<T>(op_name, ctx, op, (Shape::Scalar, 1))
            .map(drop)
    }

    fn load<T: Reducible>(
        &self,
        op_name: &'static str,
        ctx: &DeviceContext,
        op: ReduceOp,
        (shape, count): (Shape, u32),
    ) -> Result<Kernel> {
        let key = (T::KERNEL.0, op, shape, count);
        let mut loaded = self.loaded.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = loaded.get(&key) {
            return Ok(k.clone());
        }
        let kernel = raw::shipped_kernel(ctx, (key.0, shape), (op.code(), count))
            .map_err(Error::device(op_name))?;
        loaded.insert(key, kernel.clone());
        Ok(kernel)
    }
}

/// Enqueues `acc = acc OP incoming` element by element on `ctx`'s stream,
/// where `incoming` (pinned host memory, which the kernel reads where it
/// lies) has `acc`'s length: see [`enqueue_reduce_many`].
pub(crate) fn enqueue_reduce<T: Reducible>(
    op_name: &'static str,
    ctx: &DeviceContext,
    kernels: &ReduceKernels,
    acc: &DeviceBuffer<T>,
    incoming: &HostBuffer<T>,
) -> Result<()> {
    enqueue_reduce_with(op_name, ctx, kernels, acc, Operand::Host(incoming))
}

/// The incoming operand of a reduction: pinned host memory, or device
/// memory (another rank's, imported: the same-node allreduce).
pub(crate) enum Operand<'a, T> {
    Host(&'a HostBuffer<T>),
    Device(&'a DeviceBuffer<T>),
}

impl<T: Reducible> Operand<'_, T> {
    /// Enqueues `kernel` over `acc` and elements `start..start + len` of
    /// this operand, both seen as `U`, with `push`.
    fn dispatch<U: Pod, P: Pod>(
        &self,
        ctx: &DeviceContext,
        (kernel, groups): (&Kernel, u32),
        acc: &DeviceBuffer<U>,
        (start, len): (usize, usize),
        push: &P,
    ) -> vkcompute::Result<()> {
        // The two kinds of buffer have the same methods but no common trait.
        macro_rules! bind {
            ($b:expr) => {{
                let b = $b.create_sub_buffer::<U>(start, len)?;
                let args = [acc.arg_reinterpret(), b.arg_reinterpret()];
                ctx.enqueue_function(kernel, groups, &args, push)
            }};
        }
        match self {
            Operand::Host(b) => bind!(b),
            Operand::Device(b) => bind!(b),
        }
    }
}

/// [`enqueue_reduce`] with an incoming operand of either kind.
pub(crate) fn enqueue_reduce_with<T: Reducible>(
    op_name: &'static str,
    ctx: &DeviceContext,
    kernels: &ReduceKernels,
    acc: &DeviceBuffer<T>,
    incoming: Operand<'_, T>,
) -> Result<()> {
    enqueue_reduce_many(op_name, ctx, kernels, acc, incoming, (1, 0))
}

/// Enqueues `acc = acc OP in_0 OP in_1 ... OP in_(count-1)` element by
/// element on `ctx`'s stream, where operand `j` is elements `j * stride
/// ..` of `incoming` (`acc`'s length each; `incoming` holds at least
/// `(count - 1) * stride + acc.len()` elements): the elements in whole
/// groups of four by the wide kernel (bound as `[T; 4]`), all operands in
/// one pass, the last one to three by the scalar one, once per operand.
/// `acc` starts at a multiple of `align_bytes(ctx)` in its memory, as do
/// `incoming` and `stride` elements; the work is split into dispatches
/// whose bindings fit the device's `maxStorageBufferRange`, and where the
/// operands together leave too little room in one binding (less than the
/// whole chunk and less than half a dispatch's most), they go in passes of
/// as many as do, one each at the least.
pub(crate) fn enqueue_reduce_many<T: Reducible>(
    op_name: &'static str,
    ctx: &DeviceContext,
    kernels: &ReduceKernels,
    acc: &DeviceBuffer<T>,
    incoming: Operand<'_, T>,
    shape: (usize, usize),
) -> Result<()> {
    let per_dispatch = dispatch_elements::<[T; 4]>(ctx);
    enqueue_reduce_within(op_name, ctx, kernels, acc, incoming, shape, per_dispatch).map(drop)
}

/// [`enqueue_reduce_many`] with bindings of at most `per_dispatch` groups
/// of four (a multiple of the alignment; the tests pass small ones);
/// returns how many dispatches of the wide kernel it enqueued.
fn enqueue_reduce_within<T: Reducible>(
    op_name: &'static str,
    ctx: &DeviceContext,
    kernels: &ReduceKernels,
    acc: &DeviceBuffer<T>,
    incoming: Operand<'_, T>,
    (count, stride): (usize, usize),
    per_dispatch: usize,
) -> Result<usize> {
    if count == 0 {
        return Ok(0);
    }
    let mut dispatches = 0;
    let bulk = acc.len() / 4 * 4;
    let unit = (align_bytes(ctx) / std::mem::size_of::<[T; 4]>()).max(1);
    // The groups of four that one binding of `c` operands spans beyond
    // `len` of them, and the most `len` that fits beside it.
    let reach = |c: usize| (c.saturating_sub(1)).saturating_mul(stride / 4);
    let room = |c: usize| per_dispatch.saturating_sub(reach(c)) / unit * unit;
    // Operands in passes of `k`: the most whose binding leaves room for
    // the whole chunk, or for at least half the longest dispatch, so that
    // no pass cuts the chunk into many small dispatches (a binding with a
    // sliver of room beside its operands would; one operand a pass leaves
    // all of `per_dispatch`).
    let enough = (bulk / 4).min(room(1) / 2).max(1);
    let k = (1..=count).rev().find(|&c| room(c) >= enough).unwrap_or(1);
    let passes: Vec<(usize, usize)> = (0..count)
        .step_by(k)
        .map(|first| (first, k.min(count - first)))
        .collect();
    for (first, c) in passes {
        let mut start = 0;
        while start < bulk / 4 {
            let len = room(c).min(bulk / 4 - start);
            let a = acc
                .create_sub_buffer::<[T; 4]>(start, len)
                .map_err(Error::device(op_name))?;
            let groups = len.div_ceil(WORKGROUP * WIDE_UNROLL).min(max_groups(ctx)) as u32;
            // Within the `u32`s: `len` is within one binding's range
            // (below 2^30 bytes), and so is `stride / 4` where it is read
            // (`c > 1`: `reach(c)` below the range).
            let push = [len as u32, c as u32, (stride / 4) as u32];
            let from = first * stride / 4 + start;
            incoming
                .dispatch(
                    ctx,
                    (&kernels.wide, groups),
                    &a,
                    (from, reach(c) + len),
                    &push,
                )
                .map_err(Error::device(op_name))?;
            dispatches += 1;
            start += len;
        }
    }
    if bulk < acc.len() {
        // The last one to three elements, bound from the last element
        // before them that starts at the alignment (the scalar kernel
        // starts `first` elements into its bindings), once per operand.
        let align = (align_bytes(ctx) / std::mem::size_of::<T>()).max(1);
        let base = bulk / align * align;
        let len = acc.len() - base;
        let a = acc
            .create_sub_buffer::<T>(base, len)
            .map_err(Error::device(op_name))?;
        let range = [(bulk - base) as u32, len as u32];
        for j in 0..count {
            incoming
                .dispatch(
                    ctx,
                    (&kernels.scalar, 1),
                    &a,
                    (j * stride + base, len),
                    &range,
                )
                .map_err(Error::device(op_name))?;
        }
    }
    Ok(dispatches)
}

/// Enqueues `acc = acc OP operands[0] OP operands[1] ...` element by
/// element on `ctx`'s stream, where each operand has `acc`'s length and
/// lies in a buffer of its own (other ranks' memories): the elements in
/// whole groups of four by `reduce3_*`, up to three operands a pass (so
/// that a pass reads and writes `acc` once for three operands), in
/// dispatches whose bindings fit the device's `maxStorageBufferRange`; the
/// last one to three elements by the scalar kernel, once per operand.
/// `acc` and every operand start at a multiple of `align_bytes(ctx)` in
/// their memory. The kernels come from `reducer` (loaded there once).
pub(crate) fn enqueue_reduce_operands<T: Reducible>(
    op_name: &'static str,
    ctx: &DeviceContext,
    reducer: (&Reducer, ReduceOp),
    acc: &DeviceBuffer<T>,
    operands: &[DeviceBuffer<T>],
) -> Result<()> {
    let per_dispatch = dispatch_elements::<[T; 4]>(ctx);
    enqueue_operands_within(op_name, ctx, reducer, acc, operands, per_dispatch).map(drop)
}

/// [`enqueue_reduce_operands`] with bindings of at most `per_dispatch`
/// groups of four (a multiple of the alignment; the tests pass small
/// ones); returns how many dispatches of `reduce3_*` it enqueued.
fn enqueue_operands_within<T: Reducible>(
    op_name: &'static str,
    ctx: &DeviceContext,
    (reducer, op): (&Reducer, ReduceOp),
    acc: &DeviceBuffer<T>,
    operands: &[DeviceBuffer<T>],
    per_dispatch: usize,
) -> Result<usize> {
    debug_assert!(operands.iter().all(|o| o.len() == acc.len()));
    debug_assert!(per_dispatch * std::mem::size_of::<[T; 4]>() % align_bytes(ctx) == 0);
    let mut dispatches = 0;
    let groups_of_four = acc.len() / 4;
    let fours = |b: &DeviceBuffer<T>, start: usize, len: usize| {
        (b.create_sub_buffer::<[T; 4]>(start, len)).map_err(Error::device(op_name))
    };
    for (first, count) in operand_passes(operands.len()) {
        let kernel = reducer.load::<T>(op_name, ctx, op, (Shape::Operands3, count as u32))?;
        let pass = &operands[first..first + count];
        let mut start = 0;
        while start < groups_of_four {
            let len = per_dispatch.min(groups_of_four - start);
            let a = fours(acc, start, len)?;
            let bound = (pass.iter().map(|b| fours(b, start, len))).collect::<Result<Vec<_>>>()?;
            // A binding past `count` is bound (to the first operand) and
            // never read.
            let arg = |j: usize| bound.get(j).unwrap_or(&bound[0]).arg_reinterpret();
            let args = [a.arg_reinterpret(), arg(0), arg(1), arg(2)];
            let groups = len.div_ceil(WORKGROUP * WIDE_UNROLL).min(max_groups(ctx)) as u32;
            // Within the `u32`: `len` is within one binding's range.
            (ctx.enqueue_function(&kernel, groups, &args, &(len as u32)))
                .map_err(Error::device(op_name))?;
            dispatches += 1;
            start += len;
        }
    }
    let bulk = groups_of_four * 4;
    if bulk < acc.len() {
        // As in `enqueue_reduce_within`: bound from the last element before
        // the tail that starts at the alignment.
        let align = (align_bytes(ctx) / std::mem::size_of::<T>()).max(1);
        let base = bulk / align * align;
        let len = acc.len() - base;
        let a = (acc.create_sub_buffer::<T>(base, len)).map_err(Error::device(op_name))?;
        let range = [(bulk - base) as u32, len as u32];
        let scalar = reducer.load::<T>(op_name, ctx, op, (Shape::Scalar, 1))?;
        for operand in operands {
            (Operand::Device(operand))
                .dispatch(ctx, (&scalar, 1), &a, (base, len), &range)
                .map_err(Error::device(op_name))?;
        }
    }
    Ok(dispatches)
}

/// The most workgroups of one dispatch on `ctx`'s device.
fn max_groups(ctx: &DeviceContext) -> usize {
    (ctx.info().limits.max_workgroup_count[0] as usize).clamp(1, MAX_WORKGROUPS)
}

/// The alignment, in bytes, at which this crate places the pieces a kernel
/// binds: at least 256 and at least the device's
/// `minStorageBufferOffsetAlignment`.
pub(crate) fn align_bytes(ctx: &DeviceContext) -> usize {
    (ctx.info().limits.min_storage_buffer_offset_alignment as usize)
        .max(256)
        .next_power_of_two()
}

/// The most elements of `T` one dispatch binds: a multiple of the
/// alignment within `maxStorageBufferRange` (and the `u32` count).
fn dispatch_elements<T>(ctx: &DeviceContext) -> usize {
    let align = align_bytes(ctx);
    let range = (ctx.info().limits.max_storage_buffer_range as usize).min(1 << 30);
    let bytes = (range / align).max(1) * align;
    (bytes / std::mem::size_of::<T>()).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkcompute::ContextOptions;

    fn validated_context() -> DeviceContext {
        DeviceContext::with_options(
            ContextOptions::new()
                .validation(true)
                .pipeline_cache_dir(None),
        )
        .expect("a validated context (lavapipe and the validation layers: run `make test`)")
    }

    /// Waits for `ctx`'s work, and fails on any validation message.
    fn assert_validation_clean(ctx: &DeviceContext) {
        ctx.synchronize().unwrap();
        let messages = ctx.diagnostics().validation_log().messages();
        assert!(messages.is_empty(), "validation messages: {messages:?}");
    }

    /// Three operands in one pass; in passes of two and one where three
    /// leave too little room beside them (not a sliver of room cut into
    /// many dispatches: a review measured 131,072 dispatches, 15x the
    /// ring's time, for a 4-rank allreduce just under 256 MiB); one a pass;
    /// and one a pass split over dispatches: each with the scalar
    /// kernel's tail, the same as the CPU, validation-clean.
    #[test]
    fn several_operands_reduce_in_passes_that_fit_one_binding() {
        let ctx = validated_context();
        let kernels = Reducer::new()
            .kernel::<f32>("test", &ctx, ReduceOp::Sum)
            .unwrap();
        let unit = align_bytes(&ctx) / 16;
        // 48 groups of four per operand: a multiple of the alignment.
        let stride = 12 * unit * 4;
        let len = 37 * 4 + 2;
        assert!(len <= stride && stride % (align_bytes(&ctx) / 4) == 0);
        let acc0: Vec<f32> = (0..len).map(|i| i as f32).collect();
        let incoming: Vec<f32> = (0..3 * stride).map(|i| (i % 1000) as f32 * 0.5).collect();
        let want: Vec<f32> = (0..len)
            .map(|i| acc0[i] + incoming[i] + incoming[stride + i] + incoming[2 * stride + i])
            .collect();
        let host = ctx.enqueue_create_host_buffer::<f32>(3 * stride).unwrap();
        host.as_mut_slice().unwrap().copy_from_slice(&incoming);
        let reach = |c: usize| (c - 1) * stride / 4;
        // (per_dispatch, wide dispatches): all three in one; a sliver of
        // room beside three, so two and one; none beside two, so one
        // each; one each, 37 groups in dispatches of 2 units (32).
        let cases = [
            (dispatch_elements::<[f32; 4]>(&ctx), 1),
            (reach(3) + unit, 2),
            (reach(2), 3),
            (2 * unit, 6),
        ];
        for (per_dispatch, expected) in cases {
            let acc = ctx.enqueue_create_buffer::<f32>(len).unwrap();
            acc.enqueue_copy_from(&acc0[..]).unwrap();
            let operands = Operand::Host(&host);
            let shape = (3, stride);
            let dispatches =
                enqueue_reduce_within("test", &ctx, &kernels, &acc, operands, shape, per_dispatch)
                    .unwrap();
            assert_eq!(dispatches, expected, "per_dispatch {per_dispatch}");
            assert_eq!(acc.to_vec().unwrap(), want, "per_dispatch {per_dispatch}");
        }
        assert_validation_clean(&ctx);
    }

    /// One to seven operands in buffers of their own: three a pass, the
    /// last pass the rest, applied from the left (the same bits as the CPU
    /// folding them in order, with sums that round), the tail by the scalar
    /// kernel; in one dispatch a pass, and split over dispatches; every
    /// operation; validation-clean.
    #[test]
    fn operands_in_buffers_of_their_own_reduce_three_a_pass() {
        let ctx = validated_context();
        let reducer = Reducer::new();
        let unit = align_bytes(&ctx) / 16;
        let len = 37 * 4 + 3;
        let value = |j: usize, i: usize| 0.1 * (i % 97) as f32 + 0.37 * j as f32 + 0.01;
        let acc0: Vec<f32> = (0..len).map(|i| value(0, i)).collect();
        let all: Vec<Vec<f32>> = (1..=7)
            .map(|j| (0..len).map(|i| value(j, i)).collect())
            .collect();
        let buffers: Vec<DeviceBuffer<f32>> = (all.iter())
            .map(|v| {
                let b = ctx.enqueue_create_buffer::<f32>(len).unwrap();
                b.enqueue_copy_from(&v[..]).unwrap();
                b
            })
            .collect();
        let ops = [
            (ReduceOp::Sum, (|a, b| a + b) as fn(f32, f32) -> f32),
            (ReduceOp::Product, |a, b| a * b),
            (ReduceOp::Min, f32::min),
            (ReduceOp::Max, f32::max),
        ];
        for (op, f) in ops {
            for count in 1..=7 {
                let want: Vec<f32> = (0..len)
                    .map(|i| all[..count].iter().fold(acc0[i], |a, v| f(a, v[i])))
                    .collect();
                let passes = count.div_ceil(3);
                // (per_dispatch, wide dispatches): one a pass; 37 groups of
                // four in dispatches of 2 units (32) a pass.
                let cases = [
                    (dispatch_elements::<[f32; 4]>(&ctx), passes),
                    (2 * unit, passes * 37usize.div_ceil(2 * unit)),
                ];
                for (per_dispatch, expected) in cases {
                    let acc = ctx.enqueue_create_buffer::<f32>(len).unwrap();
                    acc.enqueue_copy_from(&acc0[..]).unwrap();
                    let dispatches = enqueue_operands_within(
                        "test",
                        &ctx,
                        (&reducer, op),
                        &acc,
                        &buffers[..count],
                        per_dispatch,
                    )
                    .unwrap();
                    let what = format!("{op:?}, {count} operands, per_dispatch {per_dispatch}");
                    assert_eq!(dispatches, expected, "{what}");
                    assert_eq!(acc.to_vec().unwrap(), want, "{what}");
                }
            }
        }
        assert_validation_clean(&ctx);
    }

    /// u64 (wrapping sums and products), no operand, tails alone, no
    /// tail, and `acc` and the operands as parts at aligned offsets of
    /// larger buffers (as the ranks' memories give them): the same as the
    /// CPU, validation-clean.
    #[test]
    fn operand_reductions_of_any_length_where_the_parts_lie() {
        let ctx = validated_context();
        let reducer = Reducer::new();
        let align = align_bytes(&ctx) / 8;
        let value =
            |j: usize, i: usize| (i as u64 + 3).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ j as u64;
        let ops = [
            (ReduceOp::Sum, u64::wrapping_add as fn(u64, u64) -> u64),
            (ReduceOp::Product, u64::wrapping_mul),
        ];
        for len in [1usize, 3, 4, 64 * 4, 64 * 4 + 1] {
            // Parts `stride` apart in one buffer, from `stride` on.
            let stride = len.next_multiple_of(align);
            let host: Vec<u64> = (0..6 * stride)
                .map(|i| value(i / stride, i % stride))
                .collect();
            let memory = ctx.enqueue_create_buffer::<u64>(6 * stride).unwrap();
            memory.enqueue_copy_from(&host[..]).unwrap();
            for (op, f) in ops {
                for count in [0usize, 1, 4] {
                    let parts: Vec<DeviceBuffer<u64>> = (2..2 + count)
                        .map(|j| memory.create_sub_buffer::<u64>(j * stride, len).unwrap())
                        .collect();
                    let acc_memory = ctx.enqueue_create_buffer::<u64>(2 * stride).unwrap();
                    acc_memory.enqueue_copy_from(&host[..2 * stride]).unwrap();
                    let acc = acc_memory.create_sub_buffer::<u64>(stride, len).unwrap();
                    enqueue_reduce_operands("test", &ctx, (&reducer, op), &acc, &parts).unwrap();
                    let want: Vec<u64> = (0..len)
                        .map(|i| (2..2 + count).fold(value(1, i), |a, j| f(a, value(j, i))))
                        .collect();
                    let what = format!("{op:?}, len {len}, {count} operands");
                    assert_eq!(acc.to_vec().unwrap(), want, "{what}");
                }
            }
        }
        assert_validation_clean(&ctx);
    }
}
