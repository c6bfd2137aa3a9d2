//! Sub-buffers (views of another element type over the same memory),
//! ownership, and raw handles.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{on_each_path, run_with, Path, Rng};
use vkcompute::{DeviceBuffer, Error, Kernel};

#[test]
fn sub_buffer_range_and_alignment_errors() {
    run_with(common::options(Path::Direct), "sub-buffer errors", |ctx| {
        let bytes = ctx.enqueue_create_buffer::<u8>(64).unwrap();
        let words = ctx.enqueue_create_buffer::<u32>(16).unwrap();
        // (description, result, expect out-of-range?)
        let cases: Vec<(&str, vkcompute::Result<()>, bool)> = vec![
            (
                "past the end",
                bytes.create_sub_buffer::<u8>(60, 5).map(drop),
                true,
            ),
            (
                "offset past the end",
                bytes.create_sub_buffer::<u8>(65, 0).map(drop),
                true,
            ),
            (
                "u32 elements past the end",
                bytes.create_sub_buffer::<u32>(15, 2).map(drop),
                true,
            ),
            (
                "overflowing offset",
                bytes.create_sub_buffer::<u64>(usize::MAX, 1).map(drop),
                true,
            ),
            (
                "overflowing length",
                words.create_sub_buffer::<u8>(1, usize::MAX).map(drop),
                true,
            ),
            (
                "misaligned u32 in a u8 view",
                bytes
                    .create_sub_buffer::<u8>(1, 8)
                    .and_then(|v| v.create_sub_buffer::<u32>(0, 1))
                    .map(drop),
                false,
            ),
            (
                "misaligned u64",
                bytes
                    .create_sub_buffer::<u32>(1, 4)
                    .and_then(|v| v.create_sub_buffer::<u64>(0, 1))
                    .map(drop),
                false,
            ),
        ];
        for (what, result, out_of_range) in cases {
            match result {
                Err(e @ Error::OutOfRange { .. }) if out_of_range => {
                    assert!(e.to_string().contains("out of range"), "{what}: {e}");
                }
                Err(e @ Error::Misaligned { .. }) if !out_of_range => {
                    assert!(e.to_string().contains("not a multiple of"), "{what}: {e}");
                }
                other => panic!("{what}: unexpected {other:?}"),
            }
        }
        // Edges that are allowed.
        assert_eq!(bytes.create_sub_buffer::<u8>(64, 0).unwrap().len(), 0);
        assert_eq!(bytes.create_sub_buffer::<u64>(7, 1).unwrap().byte_len(), 8);
        assert_eq!(words.create_sub_buffer::<u16>(31, 1).unwrap().len(), 1);
        // The context and buffers still work.
        bytes.enqueue_fill(3).unwrap();
        assert_eq!(bytes.to_vec().unwrap(), vec![3; 64]);
    });
}

/// One random operation on a view of a 4 KiB byte buffer, applied to both
/// the device and a host model.
fn random_view_op(
    ctx: &vkcompute::DeviceContext,
    whole: &DeviceBuffer<u8>,
    model: &mut [u8],
    rng: &mut Rng,
) {
    let n = model.len();
    match rng.below(6) {
        0 => {
            // Upload at an odd byte offset.
            let off = rng.below(n as u64) as usize;
            let len = rng.below((n - off) as u64 + 1) as usize;
            let data = rng.bytes(len);
            whole
                .create_sub_buffer::<u8>(off, len)
                .unwrap()
                .enqueue_copy_from(&data)
                .unwrap();
            model[off..off + len].copy_from_slice(&data);
        }
        1 => {
            // Copy between two non-overlapping views.
            let len = rng.below(200) as usize + 1;
            let a = rng.below((n / 2 - len) as u64) as usize;
            let b = n / 2 + rng.below((n / 2 - len) as u64) as usize;
            let (src, dst) = if rng.below(2) == 0 { (a, b) } else { (b, a) };
            let vs = whole.create_sub_buffer::<u8>(src, len).unwrap();
            whole
                .create_sub_buffer::<u8>(dst, len)
                .unwrap()
                .enqueue_copy_from(&vs)
                .unwrap();
            model.copy_within(src..src + len, dst);
        }
        2 => {
            // 8- and 16-bit fills at any offset (the fill kernel).
            let width = if rng.below(2) == 0 { 1 } else { 2 };
            let count = rng.below(300) as usize;
            let first = rng.below(((n - count * width) / width) as u64 + 1) as usize;
            let value = rng.next_u64();
            if width == 1 {
                whole
                    .create_sub_buffer::<u8>(first, count)
                    .unwrap()
                    .enqueue_fill(value as u8)
                    .unwrap();
                model[first..first + count].fill(value as u8);
            } else {
                whole
                    .create_sub_buffer::<u16>(first, count)
                    .unwrap()
                    .enqueue_fill(value as u16)
                    .unwrap();
                for i in 0..count {
                    let at = (first + i) * 2;
                    model[at..at + 2].copy_from_slice(&(value as u16).to_le_bytes());
                }
            }
        }
        3 => {
            // 64-bit and 3-byte fills.
            let value = rng.next_u64();
            if rng.below(2) == 0 {
                let count = rng.below(64) as usize;
                let first = rng.below((n / 8 - count) as u64 + 1) as usize;
                whole
                    .create_sub_buffer::<u64>(first, count)
                    .unwrap()
                    .enqueue_fill(value)
                    .unwrap();
                for i in 0..count {
                    model[(first + i) * 8..(first + i + 1) * 8]
                        .copy_from_slice(&value.to_le_bytes());
                }
            } else {
                let v = [value as u8, (value >> 8) as u8, (value >> 16) as u8];
                let count = rng.below(100) as usize;
                let first = rng.below((n / 3 - count) as u64 + 1) as usize;
                whole
                    .create_sub_buffer::<[u8; 3]>(first, count)
                    .unwrap()
                    .enqueue_fill(v)
                    .unwrap();
                for i in 0..count {
                    model[(first + i) * 3..(first + i + 1) * 3].copy_from_slice(&v);
                }
            }
        }
        4 => {
            // Map a view, change a byte, unmap.
            let off = rng.below(n as u64 - 1) as usize;
            let len = rng.below((n - off) as u64 - 1) as usize + 1;
            let view = whole.create_sub_buffer::<u8>(off, len).unwrap();
            let mut m = view.map_to_host().unwrap();
            assert_eq!(
                &m[..],
                &model[off..off + len],
                "mapping shows the view's bytes"
            );
            let at = rng.below(len as u64) as usize;
            m[at] ^= 0x5a;
            model[off + at] ^= 0x5a;
        }
        _ => {
            // Read a view back.
            let off = rng.below(n as u64) as usize;
            let len = rng.below((n - off) as u64 + 1) as usize;
            let view = whole.create_sub_buffer::<u8>(off, len).unwrap();
            assert_eq!(view.to_vec().unwrap(), &model[off..off + len]);
        }
    }
    let _ = ctx;
}

#[test]
fn every_operation_on_views_at_odd_offsets_matches_a_host_model() {
    on_each_path(|ctx, path| {
        let n = 4096;
        let whole = ctx.enqueue_create_buffer::<u8>(n).unwrap();
        let mut rng = Rng::new(if path == Path::Direct { 5 } else { 6 });
        let mut model = rng.bytes(n);
        whole.enqueue_copy_from(&model).unwrap();
        for step in 0..300 {
            random_view_op(ctx, &whole, &mut model, &mut rng);
            if step % 50 == 49 {
                assert_eq!(whole.to_vec().unwrap(), model, "after step {step}");
            }
        }
        assert_eq!(whole.to_vec().unwrap(), model);
    });
}

#[test]
fn views_print_and_bind_to_kernels() {
    run_with(common::options(Path::Direct), "views in kernels", |ctx| {
        let whole = ctx.enqueue_create_buffer::<u32>(64).unwrap();
        whole
            .enqueue_copy_from(&(0..64).collect::<Vec<u32>>())
            .unwrap();
        let view = whole.create_sub_buffer::<u32>(5, 3).unwrap();
        assert_eq!(view.to_string(), "DeviceBuffer([5, 6, 7])");
        let align = ctx.info().limits.min_storage_buffer_offset_alignment as usize / 4;
        let store = Kernel::new(ctx, vkcompute::shaders::STORE, "main").unwrap();
        let bound = whole.create_sub_buffer::<u32>(align * 2, 4).unwrap();
        ctx.enqueue_function(&store, 1, &[bound.arg()], &[1u32, 1000u32])
            .unwrap();
        assert_eq!(whole.to_vec().unwrap()[align * 2 + 1], 1000);
    });
}

#[test]
fn a_view_keeps_its_parents_memory_alive() {
    on_each_path(|ctx, _| {
        let view = {
            let parent = ctx.enqueue_create_buffer::<u16>(100).unwrap();
            parent.enqueue_fill(0x1234).unwrap();
            parent.create_sub_buffer::<u8>(10, 4).unwrap()
        };
        ctx.synchronize().unwrap();
        assert_eq!(view.to_vec().unwrap(), [0x34, 0x12, 0x34, 0x12]);
        let deeper = view.create_sub_buffer::<u16>(1, 1).unwrap();
        drop(view);
        deeper.enqueue_fill(0xbeef).unwrap();
        assert_eq!(deeper.to_vec().unwrap(), [0xbeef]);
    });
}

#[test]
fn copies_between_overlapping_views_of_one_buffer_are_rejected() {
    run_with(common::options(Path::Direct), "overlap", |ctx| {
        let whole = ctx.enqueue_create_buffer::<u8>(100).unwrap();
        whole.enqueue_fill(1).unwrap();
        let a = whole.create_sub_buffer::<u8>(0, 60).unwrap();
        let b = whole.create_sub_buffer::<u8>(40, 60).unwrap();
        assert!(matches!(
            b.enqueue_copy_from(&a),
            Err(Error::Overlap { .. })
        ));
        let c = whole.create_sub_buffer::<u8>(60, 40).unwrap();
        let d = whole.create_sub_buffer::<u8>(0, 40).unwrap();
        d.enqueue_fill(9).unwrap();
        c.enqueue_copy_from(&d).unwrap();
        assert_eq!(whole.to_vec().unwrap()[60..], [9; 40]);
    });
}

#[test]
fn reassigning_a_busy_buffer_to_another_stream_then_dropping_it_is_safe() {
    run_with(common::options(Path::Direct), "reassign", |ctx| {
        let other = ctx.new_stream().unwrap();
        let dst = ctx.enqueue_create_buffer::<u32>(1 << 16).unwrap();
        let src = ctx.enqueue_create_buffer::<u32>(1 << 16).unwrap();
        src.enqueue_fill(77).unwrap();
        dst.enqueue_copy_from(&src).unwrap();
        src.reassign_ownership_to(&other).unwrap();
        assert!(std::ptr::eq(
            src.context().raw().device(),
            other.raw().device()
        ));
        src.enqueue_fill(5).unwrap(); // now on `other`'s stream, after the copy
        drop(src);
        assert_eq!(dst.to_vec().unwrap(), vec![77; 1 << 16]);
        other.synchronize().unwrap();
        assert_eq!(other.diagnostics().live_objects().pending_frees, 0);
        let foreign = common::context_with(common::options(Path::Direct));
        let log = foreign.diagnostics().validation_log();
        match dst.reassign_ownership_to(&foreign) {
            Err(e @ Error::DifferentDevice { .. }) => {
                assert!(e.to_string().contains("copy it instead"), "{e}")
            }
            other => panic!("expected DifferentDevice, got {other:?}"),
        }
        drop(foreign);
        common::assert_clean(&log, "the foreign context");
    });
}

#[test]
fn take_raw_hands_over_an_idle_buffer_and_refuses_shared_ones() {
    run_with(common::options(Path::Direct), "take_raw", |ctx| {
        let buf = ctx.enqueue_create_buffer::<u32>(256).unwrap();
        buf.enqueue_fill(3).unwrap();
        let clone = buf.clone();
        let (buf, e) = buf.take_raw().unwrap_err();
        assert!(matches!(e, Error::Shared { .. }), "{e}");
        let view = buf.create_sub_buffer::<u32>(1, 2).unwrap();
        let (view, e) = view.take_raw().unwrap_err();
        assert!(e.to_string().contains("view"), "{e}");
        drop((clone, view));
        assert_eq!(buf.to_vec().unwrap(), vec![3; 256]);
        let handle = buf.raw().buffer;
        buf.enqueue_fill(4).unwrap(); // still in flight when taken: take_raw waits
        let owned = buf.take_raw().unwrap();
        assert_eq!(owned.buffer(), handle);
        assert_eq!(owned.size(), 1024);
        // SAFETY: the buffer is idle (take_raw waited) and not used again.
        unsafe { ctx.raw().free_buffer(owned) }.unwrap();
        let empty = ctx.enqueue_create_buffer::<u32>(0).unwrap();
        assert!(empty.take_raw().is_err());
    });
}

#[test]
fn device_addresses_account_for_view_offsets() {
    run_with(common::options(Path::Direct), "device addresses", |ctx| {
        let buf = ctx.enqueue_create_buffer::<u64>(32).unwrap();
        let base = buf
            .device_address()
            .expect("lavapipe has buffer device addresses");
        assert_ne!(base, 0);
        let view = buf.create_sub_buffer::<u64>(3, 2).unwrap();
        assert_eq!(view.device_address(), Some(base + 24));
        assert_eq!(view.raw().offset, 24);
        assert_eq!(view.raw().size, 16);
        assert_eq!(view.raw().buffer, buf.raw().buffer);
        assert_eq!(
            ctx.enqueue_create_buffer::<u64>(0)
                .unwrap()
                .device_address(),
            None
        );
    });
}
