//! The bad-input matrix: every public call, times each way its arguments
//! can be wrong. Each must return the expected error variant with a message
//! naming the argument and the limit, must not panic, and must leave the
//! context working and every other buffer's data intact.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::Path;
use vkcompute::{shaders, ContextOptions, DeviceBuffer, DeviceContext, Error, Kernel};

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Saxpy {
    a: f32,
    n: u32,
}

/// What every row may use.
struct Env {
    ctx: DeviceContext,
    other: DeviceContext,
    saxpy: Kernel,
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
}

type Check = fn(&Error) -> bool;

/// One row: the call, how its arguments are wrong, the attempt, the
/// expected error, and a piece of text its message must contain.
struct Row {
    call: &'static str,
    wrong: &'static str,
    attempt: fn(&Env) -> vkcompute::Result<()>,
    expect: Check,
    mentions: &'static str,
}

macro_rules! row {
    ($call:expr, $wrong:expr, $attempt:expr, $pat:pat, $mentions:expr) => {
        Row {
            call: $call,
            wrong: $wrong,
            attempt: $attempt,
            expect: |e| matches!(e, $pat),
            mentions: $mentions,
        }
    };
}

/// `words` with the width of its first `OpTypeFloat` set to 13 bits: every
/// instruction keeps its length, so only a real validator notices.
fn corrupt_float_width(words: &[u32]) -> Vec<u32> {
    const OP_TYPE_FLOAT: u32 = 22;
    let mut out = words.to_vec();
    let mut at = 5;
    while at < out.len() {
        let (count, opcode) = ((out[at] >> 16) as usize, out[at] & 0xffff);
        if opcode == OP_TYPE_FLOAT {
            out[at + 2] = 13;
            return out;
        }
        at += count.max(1);
    }
    panic!("the module has no OpTypeFloat");
}

fn rows() -> Vec<Row> {
    vec![
        row!(
            "enqueue_create_buffer",
            "len * size_of::<T>() overflows",
            |e| e.ctx.enqueue_create_buffer::<u64>(usize::MAX / 2).map(drop),
            Error::SizeOverflow { .. },
            "overflow"
        ),
        row!(
            "enqueue_create_buffer",
            "more than the device's memory",
            |e| e.ctx.enqueue_create_buffer::<u8>(1 << 42).map(drop),
            Error::TooLarge { .. } | Error::OutOfMemory { .. },
            "4398046511104"
        ),
        row!(
            "enqueue_create_buffer",
            "one byte more than maxMemoryAllocationSize",
            |e| {
                let most = e.ctx.info().limits.max_memory_allocation_size;
                e.ctx
                    .enqueue_create_buffer::<u8>(most as usize + 1)
                    .map(drop)
            },
            Error::TooLarge { .. },
            "maxMemoryAllocationSize"
        ),
        row!(
            "enqueue_create_host_buffer",
            "one byte more than maxMemoryAllocationSize",
            |e| {
                let most = e.ctx.info().limits.max_memory_allocation_size;
                e.ctx
                    .enqueue_create_host_buffer::<u8>(most as usize + 1)
                    .map(drop)
            },
            Error::TooLarge { .. },
            "maxMemoryAllocationSize"
        ),
        row!(
            "enqueue_create_host_buffer",
            "len * size_of::<T>() overflows",
            |e| e
                .ctx
                .enqueue_create_host_buffer::<[u8; 7]>(usize::MAX / 3)
                .map(drop),
            Error::SizeOverflow { .. },
            "overflow"
        ),
        row!(
            "create_sub_buffer",
            "range past the end",
            |e| e.x.create_sub_buffer::<f32>(60, 5).map(drop),
            Error::OutOfRange { .. },
            "out of range"
        ),
        row!(
            "create_sub_buffer",
            "offset * size overflows",
            |e| e.x.create_sub_buffer::<u64>(usize::MAX, 1).map(drop),
            Error::OutOfRange { .. },
            "out of range"
        ),
        row!(
            "create_sub_buffer",
            "offset misaligned for U",
            |e| e
                .x
                .create_sub_buffer::<u8>(1, 8)?
                .create_sub_buffer::<u32>(0, 1)
                .map(drop),
            Error::Misaligned { .. },
            "multiple of 4"
        ),
        row!(
            "enqueue_copy_from(&[T])",
            "slice length differs",
            |e| e.x.enqueue_copy_from(&[1.0f32; 63][..]),
            Error::LengthMismatch { .. },
            "length mismatch"
        ),
        row!(
            "enqueue_copy_from(&DeviceBuffer)",
            "buffer length differs",
            |e| e.x.enqueue_copy_from(&e.y.create_sub_buffer::<f32>(0, 10)?),
            Error::LengthMismatch { .. },
            "length mismatch"
        ),
        row!(
            "enqueue_copy_from(&DeviceBuffer)",
            "overlapping views of one buffer",
            |e| e
                .x
                .create_sub_buffer::<f32>(0, 32)?
                .enqueue_copy_from(&e.x.create_sub_buffer::<f32>(16, 32)?),
            Error::Overlap { .. },
            "overlap"
        ),
        row!(
            "enqueue_copy_to",
            "buffer length differs",
            |e| e.x.enqueue_copy_to(&e.y.create_sub_buffer::<f32>(0, 63)?),
            Error::LengthMismatch { .. },
            "length mismatch"
        ),
        row!(
            "enqueue_copy_to(&HostBuffer)",
            "host buffer length differs",
            |e| e
                .x
                .enqueue_copy_to(&e.ctx.enqueue_create_host_buffer::<f32>(65)?),
            Error::LengthMismatch { .. },
            "length mismatch"
        ),
        row!(
            "copy_to_slice",
            "slice length differs",
            |e| e.x.copy_to_slice(&mut [0.0; 65]),
            Error::LengthMismatch { .. },
            "length mismatch"
        ),
        row!(
            "enqueue_copy_to_ptr",
            "null pointer",
            |e| unsafe { e.x.enqueue_copy_to_ptr(std::ptr::null_mut()) },
            Error::Misaligned { .. },
            "non-null"
        ),
        row!(
            "enqueue_copy_from_ptr",
            "misaligned pointer",
            |e| unsafe { e.x.enqueue_copy_from_ptr(3usize as *const f32) },
            Error::Misaligned { .. },
            "aligned"
        ),
        row!(
            "map_to_host",
            "mapping a mapped buffer",
            |e| {
                let _m = e.x.map_to_host()?;
                e.x.map_to_host().map(drop)
            },
            Error::BufferMapped { .. },
            "mapped"
        ),
        row!(
            "enqueue_fill",
            "filling a mapped buffer",
            |e| {
                let _m = e.x.map_to_host()?;
                e.x.enqueue_fill(1.0)
            },
            Error::BufferMapped { .. },
            "mapped"
        ),
        row!(
            "enqueue_copy_from",
            "copying into a mapped buffer",
            |e| {
                let _m = e.x.map_to_host()?;
                e.x.enqueue_copy_from(&e.y)
            },
            Error::BufferMapped { .. },
            "mapped"
        ),
        row!(
            "enqueue_function",
            "a mapped argument",
            |e| {
                let _m = e.y.map_to_host()?;
                e.ctx.enqueue_function(
                    &e.saxpy,
                    1,
                    &[e.x.arg(), e.y.arg()],
                    &Saxpy { a: 1.0, n: 64 },
                )
            },
            Error::BufferMapped { .. },
            "mapped"
        ),
        row!(
            "HostBuffer::as_mut_slice",
            "while a host slice is alive",
            |e| {
                let h = e.ctx.enqueue_create_host_buffer::<u8>(8)?;
                let _s = h.as_slice()?;
                h.as_mut_slice().map(drop)
            },
            Error::BufferMapped { .. },
            "host slice"
        ),
        row!(
            "HostBuffer::enqueue_fill",
            "while a host slice is alive",
            |e| {
                let h = e.ctx.enqueue_create_host_buffer::<u8>(8)?;
                let _s = h.as_slice()?;
                h.enqueue_fill(1)
            },
            Error::BufferMapped { .. },
            "host slice"
        ),
        row!(
            "enqueue_function",
            "too few buffers",
            |e| e
                .ctx
                .enqueue_function(&e.saxpy, 1, &[e.x.arg()], &Saxpy { a: 1.0, n: 64 }),
            Error::ArgumentCount { .. },
            "takes 2"
        ),
        row!(
            "enqueue_function",
            "push constants of the wrong size",
            |e| e
                .ctx
                .enqueue_function(&e.saxpy, 1, &[e.x.arg(), e.y.arg()], &[0u32; 3]),
            Error::PushConstantSize { .. },
            "8 bytes"
        ),
        row!(
            "enqueue_function",
            "a zero grid dimension",
            |e| e.ctx.enqueue_function(
                &e.saxpy,
                (1, 1, 0),
                &[e.x.arg(), e.y.arg()],
                &Saxpy { a: 1.0, n: 64 }
            ),
            Error::InvalidGrid { .. },
            "maxComputeWorkGroupCount[2]"
        ),
        row!(
            "enqueue_function",
            "a grid beyond maxComputeWorkGroupCount",
            |e| e.ctx.enqueue_function(
                &e.saxpy,
                u32::MAX,
                &[e.x.arg(), e.y.arg()],
                &Saxpy { a: 1.0, n: 64 }
            ),
            Error::InvalidGrid { .. },
            "maxComputeWorkGroupCount[0]"
        ),
        row!(
            "enqueue_function",
            "element size differs from the binding's stride",
            |e| e.ctx.enqueue_function(
                &e.saxpy,
                1,
                &[e.x.create_sub_buffer::<u16>(0, 128)?.arg(), e.y.arg()],
                &Saxpy { a: 1.0, n: 64 }
            ),
            Error::Argument { .. },
            "4-byte elements"
        ),
        row!(
            "enqueue_function",
            "an empty buffer",
            |e| e.ctx.enqueue_function(
                &e.saxpy,
                1,
                &[e.x.create_sub_buffer::<f32>(0, 0)?.arg(), e.y.arg()],
                &Saxpy { a: 1.0, n: 64 }
            ),
            Error::Argument { .. },
            "empty"
        ),
        row!(
            "enqueue_function",
            "a binding beyond maxStorageBufferRange",
            |e| {
                let range = e.ctx.info().limits.max_storage_buffer_range as usize;
                let big = e.ctx.enqueue_create_buffer::<f32>(range / 4 + 1)?;
                e.ctx.enqueue_function(
                    &e.saxpy,
                    1,
                    &[e.x.arg(), big.arg()],
                    &Saxpy { a: 1.0, n: 64 },
                )
            },
            Error::Argument { .. },
            "maxStorageBufferRange"
        ),
        row!(
            "enqueue_function",
            "a binding offset off minStorageBufferOffsetAlignment",
            |e| e.ctx.enqueue_function(
                &e.saxpy,
                1,
                &[e.x.create_sub_buffer::<f32>(1, 8)?.arg(), e.y.arg()],
                &Saxpy { a: 1.0, n: 64 }
            ),
            Error::Misaligned { .. },
            "minStorageBufferOffsetAlignment"
        ),
        row!(
            "enqueue_function",
            "a buffer of another device",
            |e| e.ctx.enqueue_function(
                &e.saxpy,
                1,
                &[e.other.enqueue_create_buffer::<f32>(64)?.arg(), e.y.arg()],
                &Saxpy { a: 1.0, n: 64 }
            ),
            Error::DifferentDevice { .. },
            "device"
        ),
        row!(
            "enqueue_function",
            "a kernel of another device",
            |e| e.ctx.enqueue_function(
                &Kernel::new(&e.other, shaders::SAXPY, "main")?,
                1,
                &[e.x.arg(), e.y.arg()],
                &Saxpy { a: 1.0, n: 64 }
            ),
            Error::DifferentDevice { .. },
            "load it on this context"
        ),
        row!(
            "Kernel::new",
            "not whole words",
            |e| Kernel::new(&e.ctx, &[3u8, 2, 0x23, 0x07, 0], "main").map(drop),
            Error::InvalidSpirv { .. },
            "32-bit words"
        ),
        row!(
            "Kernel::new",
            "wrong magic number",
            |e| Kernel::new(&e.ctx, &[1u32, 2, 3, 4, 5, 6], "main").map(drop),
            Error::InvalidSpirv { .. },
            "magic number"
        ),
        row!(
            "Kernel::new",
            "a truncated module",
            |e| Kernel::new(&e.ctx, &shaders::SAXPY[..shaders::SAXPY.len() / 2], "main").map(drop),
            Error::InvalidSpirv { .. },
            "truncated"
        ),
        row!(
            "Kernel::new",
            "well-formed but invalid (a float of 13 bits)",
            |e| Kernel::new(&e.ctx, &corrupt_float_width(shaders::SAXPY), "main").map(drop),
            Error::InvalidSpirv { .. },
            "13"
        ),
        row!(
            "Kernel::new",
            "an entry point that does not exist",
            |e| Kernel::new(&e.ctx, shaders::SAXPY, "saxpy").map(drop),
            Error::UnsupportedKernel { .. },
            "no entry point `saxpy`"
        ),
        row!(
            "KernelBuilder::specialize",
            "an undeclared constant id",
            |e| Kernel::builder(shaders::VECTOR_ADD)
                .specialize(9, 1u32)
                .build(&e.ctx)
                .map(drop),
            Error::Specialization { .. },
            "declares no such constant"
        ),
        row!(
            "KernelBuilder::specialize",
            "a value of the wrong width",
            |e| Kernel::builder(shaders::VECTOR_ADD)
                .specialize(0, 1.0f64)
                .build(&e.ctx)
                .map(drop),
            Error::Specialization { .. },
            "4 bytes wide"
        ),
        row!(
            "KernelBuilder::specialize",
            "a workgroup beyond the device's limits",
            |e| Kernel::builder(shaders::VECTOR_ADD)
                .specialize(0, 1u32 << 20)
                .build(&e.ctx)
                .map(drop),
            Error::UnsupportedKernel { .. },
            "maxComputeWorkGroupInvocations"
        ),
        row!(
            "Kernel::from_glsl",
            "GLSL that does not compile",
            |e| Kernel::from_glsl(&e.ctx, "#version 450\nvoid main() { nope(); }\n", "main")
                .map(drop),
            Error::ShaderCompilation { .. },
            ":2:"
        ),
        row!(
            "Kernel::from_glsl",
            "a storage image binding",
            |e| {
                Kernel::from_glsl(&e.ctx, "#version 450\nlayout(local_size_x=1) in;\nlayout(binding=0, r32ui) uniform readonly uimage2D img;\nlayout(std430, binding=1) buffer B { uint b[]; };\nvoid main() { b[0] = imageLoad(img, ivec2(0)).x; }\n", "main").map(drop)
            },
            Error::UnsupportedKernel { .. },
            "storage and uniform buffers only"
        ),
        row!(
            "reassign_ownership_to",
            "a context of another device",
            |e| e.x.reassign_ownership_to(&e.other),
            Error::DifferentDevice { .. },
            "copy it instead"
        ),
        row!(
            "take_raw",
            "a buffer with clones",
            |e| e.x.clone().take_raw().map(drop).map_err(|(_, e)| e),
            Error::Shared { .. },
            "clones"
        ),
        row!(
            "take_raw",
            "a view",
            |e| e
                .x
                .create_sub_buffer::<f32>(1, 2)?
                .take_raw()
                .map(drop)
                .map_err(|(_, e)| e),
            Error::Shared { .. },
            "view"
        ),
        row!(
            "enqueue_wait_for",
            "a context of another device",
            |e| e.ctx.enqueue_wait_for(&e.other),
            Error::DifferentDevice { .. },
            "device"
        ),
        row!(
            "DeviceContext::with_options",
            "a device name that does not exist",
            |_| DeviceContext::with_options(ContextOptions::new().device("no-such-gpu")).map(drop),
            Error::DeviceNotFound { .. },
            "no-such-gpu"
        ),
        row!(
            "DeviceContext::with_options",
            "a device index that does not exist",
            |_| DeviceContext::with_options(ContextOptions::new().device(99)).map(drop),
            Error::DeviceNotFound { .. },
            "99"
        ),
    ]
}

#[test]
fn every_wrong_argument_is_a_clear_error_that_changes_nothing() {
    for path in common::PATHS {
        common::run_with(common::options(path), "the bad-input matrix", |ctx| {
            let other = common::context_with(common::options(Path::Direct));
            let other_log = other.diagnostics().validation_log();
            let env = Env {
                ctx: ctx.clone(),
                other,
                saxpy: Kernel::new(ctx, shaders::SAXPY, "main").unwrap(),
                x: ctx.enqueue_create_buffer::<f32>(64).unwrap(),
                y: ctx.enqueue_create_buffer::<f32>(64).unwrap(),
            };
            let sentinel_data: Vec<u32> = (0..1024).map(|i| i * 31 + 7).collect();
            let sentinel = ctx.enqueue_create_buffer::<u32>(1024).unwrap();
            sentinel.enqueue_copy_from(&sentinel_data).unwrap();
            let xs: Vec<f32> = (0..64).map(|i| i as f32 + 0.5).collect();
            for row in rows() {
                eprintln!("row: {} / {}", row.call, row.wrong);
                env.x.enqueue_copy_from(&xs).unwrap();
                env.y.enqueue_fill(2.0).unwrap();
                let outcome =
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (row.attempt)(&env)));
                let result =
                    outcome.unwrap_or_else(|_| panic!("{} with {}: panicked", row.call, row.wrong));
                let err = result.expect_err(&format!("{} with {}: must fail", row.call, row.wrong));
                assert!(
                    (row.expect)(&err),
                    "{} with {}: unexpected error {err:?}",
                    row.call,
                    row.wrong
                );
                let text = err.to_string();
                assert!(
                    text.contains(row.mentions),
                    "{} with {}: message {text:?} lacks {:?}",
                    row.call,
                    row.wrong,
                    row.mentions
                );
                // Nothing else changed, and the context still works.
                assert_eq!(
                    env.x.to_vec().unwrap(),
                    xs,
                    "{} with {}",
                    row.call,
                    row.wrong
                );
                assert_eq!(
                    sentinel.to_vec().unwrap(),
                    sentinel_data,
                    "{} with {}",
                    row.call,
                    row.wrong
                );
                env.ctx
                    .enqueue_function(
                        &env.saxpy,
                        1,
                        &[env.x.arg(), env.y.arg()],
                        &Saxpy { a: 2.0, n: 64 },
                    )
                    .unwrap();
                let want: Vec<f32> = xs.iter().map(|x| 2.0 * x + 2.0).collect();
                assert_eq!(
                    env.y.to_vec().unwrap(),
                    want,
                    "{} with {}",
                    row.call,
                    row.wrong
                );
            }
            drop(env);
            common::assert_clean(&other_log, "the other device");
        });
    }
}

/// Prints the matrix as CONTRIBUTING.md shows it (`cargo test --test bad_input -- --nocapture matrix`).
#[test]
fn matrix_lists_every_row_once() {
    let rows = rows();
    let mut seen = std::collections::HashSet::new();
    for row in &rows {
        assert!(
            seen.insert((row.call, row.wrong)),
            "duplicate row {} / {}",
            row.call,
            row.wrong
        );
        println!("| `{}` | {} |", row.call, row.wrong);
    }
    assert!(rows.len() >= 40);
}
