//! The host side: host buffers, safe host slices, map_to_host on both
//! memory paths, printing in the seed's format, raw-pointer copies.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use common::{on_each_path, run_with, Path};
use vkcompute::Error;

#[test]
fn host_buffers_copy_to_and_from_device_buffers_and_each_other() {
    on_each_path(|ctx, _| {
        let n = 3001;
        let host = ctx.enqueue_create_host_buffer::<i32>(n).unwrap();
        {
            let mut s = host.as_mut_slice().unwrap();
            for (i, v) in s.iter_mut().enumerate() {
                *v = i as i32 * 3 - 7;
            }
        }
        let want: Vec<i32> = (0..n as i32).map(|i| i * 3 - 7).collect();
        let dev = ctx.enqueue_create_buffer::<i32>(n).unwrap();
        dev.enqueue_copy_from(&host).unwrap();
        let back = ctx.enqueue_create_host_buffer::<i32>(n).unwrap();
        dev.enqueue_copy_to(&back).unwrap();
        // No synchronize: the slice waits for the copy into `back`.
        assert_eq!(&*back.as_slice().unwrap(), &want[..]);
        let third = ctx.enqueue_create_host_buffer::<i32>(n).unwrap();
        third.enqueue_copy_from(&back).unwrap();
        back.enqueue_copy_to(&third).unwrap();
        assert_eq!(third.to_vec().unwrap(), want);
        third
            .enqueue_copy_from(
                &want[..10]
                    .repeat(300)
                    .iter()
                    .chain(&want[..1])
                    .copied()
                    .collect::<Vec<_>>(),
            )
            .unwrap();
        assert_eq!(third.as_slice().unwrap()[10], want[0]);
        third.enqueue_fill(5).unwrap();
        assert_eq!(third.to_vec().unwrap(), vec![5; n]);
    });
}

#[test]
fn a_device_to_host_copy_can_be_read_at_once() {
    on_each_path(|ctx, _| {
        let dev = ctx.enqueue_create_buffer::<f32>(1 << 20).unwrap();
        dev.enqueue_fill(0.25).unwrap();
        let host = ctx.enqueue_create_host_buffer::<f32>(1 << 20).unwrap();
        dev.enqueue_copy_to(&host).unwrap();
        let s = host.as_slice().unwrap();
        assert!(s.iter().all(|&v| v == 0.25));
    });
}

#[test]
fn device_writes_cannot_be_enqueued_while_a_host_slice_lives() {
    on_each_path(|ctx, _| {
        let host = ctx.enqueue_create_host_buffer::<u32>(16).unwrap();
        host.enqueue_fill(1).unwrap();
        let dev = ctx.enqueue_create_buffer::<u32>(16).unwrap();
        {
            let reading = host.as_slice().unwrap();
            let second = host.as_slice().unwrap();
            assert_eq!(reading[0], 1);
            assert_eq!(second[15], 1);
            // The device may read it ...
            dev.enqueue_copy_from(&host).unwrap();
            // ... but not write it, nor may the host take it mutably.
            assert!(matches!(
                host.enqueue_fill(2),
                Err(Error::BufferMapped { .. })
            ));
            assert!(matches!(
                host.enqueue_copy_from(&dev),
                Err(Error::BufferMapped { .. })
            ));
            assert!(matches!(
                host.as_mut_slice(),
                Err(Error::BufferMapped { .. })
            ));
        }
        {
            let _writing = host.as_mut_slice().unwrap();
            assert!(matches!(
                dev.enqueue_copy_from(&host),
                Err(Error::BufferMapped { .. })
            ));
            assert!(matches!(host.as_slice(), Err(Error::BufferMapped { .. })));
        }
        host.enqueue_fill(3).unwrap();
        assert_eq!(host.to_vec().unwrap(), vec![3; 16]);
        assert_eq!(dev.to_vec().unwrap(), vec![1; 16]);
    });
}

#[test]
fn map_to_host_writes_back_changes_on_both_paths() {
    on_each_path(|ctx, path| {
        let buf = ctx.enqueue_create_buffer::<u16>(1001).unwrap();
        buf.enqueue_fill(7).unwrap();
        {
            let mut m = buf.map_to_host().unwrap();
            assert_eq!(
                m.is_direct(),
                path == Path::Direct,
                "lavapipe's memory is host visible"
            );
            assert!(m.iter().all(|&v| v == 7), "the mapping waits for the fill");
            m[0] = 1;
            m[1000] = 2;
        }
        let mut want = vec![7u16; 1001];
        want[0] = 1;
        want[1000] = 2;
        assert_eq!(buf.to_vec().unwrap(), want);
        let mut m = buf.map_to_host().unwrap();
        m[500] = 9;
        m.finish().unwrap();
        want[500] = 9;
        assert_eq!(buf.to_vec().unwrap(), want);
    });
}

#[test]
fn an_unchanged_mapping_writes_nothing_back() {
    on_each_path(|ctx, _| {
        let buf = ctx.enqueue_create_buffer::<u32>(64).unwrap();
        buf.enqueue_fill(4).unwrap();
        let m = buf.map_to_host().unwrap();
        assert_eq!(m[3], 4);
        let before = ctx.diagnostics().live_objects().commands_recorded;
        drop(m);
        assert_eq!(
            ctx.diagnostics().live_objects().commands_recorded,
            before,
            "no write-back recorded"
        );
        let mut m = buf.map_to_host().unwrap();
        m[0] = 5;
        let before = ctx.diagnostics().live_objects().commands_recorded;
        m.finish().unwrap();
        if !ctx.is_staging_forced() {
            assert_eq!(
                ctx.diagnostics().live_objects().commands_recorded,
                before,
                "a direct mapping needs no copy"
            );
        } else {
            assert!(
                ctx.diagnostics().live_objects().commands_recorded > before,
                "a staged write-back is a copy"
            );
        }
    });
}

#[test]
fn enqueueing_work_on_a_mapped_buffer_is_an_error() {
    on_each_path(|ctx, _| {
        let buf = ctx.enqueue_create_buffer::<f32>(32).unwrap();
        let other = ctx.enqueue_create_buffer::<f32>(32).unwrap();
        buf.enqueue_fill(1.0).unwrap();
        other.enqueue_fill(2.0).unwrap();
        {
            let m = buf.map_to_host().unwrap();
            let e = buf.enqueue_fill(0.0).unwrap_err();
            assert!(matches!(e, Error::BufferMapped { .. }), "{e}");
            assert!(e.to_string().contains("mapped"), "{e}");
            assert!(matches!(
                buf.enqueue_copy_from(&other),
                Err(Error::BufferMapped { .. })
            ));
            assert!(matches!(buf.map_to_host(), Err(Error::BufferMapped { .. })));
            assert_eq!(m[0], 1.0);
            // A view and a clone share the mapped memory; `other` does not.
            let view = buf.create_sub_buffer::<f32>(8, 4).unwrap();
            assert!(buf.is_mapped() && view.is_mapped() && buf.clone().is_mapped());
            assert!(!other.is_mapped());
            // Reading it: an error where the mapping is the memory itself,
            // the contents from before the mapping's changes where it is a
            // copy.
            let read = other.enqueue_copy_from(&buf);
            match m.is_direct() {
                true => assert!(matches!(read, Err(Error::BufferMapped { .. }))),
                false => assert_eq!(other.to_vec().unwrap(), vec![1.0; 32]),
            }
        }
        assert!(!buf.is_mapped());
        other.enqueue_fill(2.0).unwrap();
        buf.enqueue_copy_from(&other).unwrap();
        assert_eq!(buf.to_vec().unwrap(), vec![2.0; 32]);
    });
}

/// The seed's format for `n` elements with values `value(i)`.
fn model(kind: &str, n: usize, value: impl Fn(usize) -> String) -> String {
    let items: Vec<String> = if n < 1000 {
        (0..n).map(&value).collect()
    } else {
        let mut v: Vec<String> = (0..3).map(&value).collect();
        v.push("...".into());
        v.extend((n - 3..n).map(&value));
        v
    };
    format!("{kind}([{}])", items.join(", "))
}

#[test]
fn buffers_print_in_the_seeds_format() {
    on_each_path(|ctx, _| {
        for n in [0usize, 1, 15, 999, 1000, 1001] {
            let ints: Vec<i64> = (0..n as i64).map(|i| i - 2).collect();
            let floats: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let halves: Vec<f64> = (0..n).map(|i| i as f64 + 0.5).collect();
            let d = ctx.enqueue_create_buffer::<i64>(n).unwrap();
            d.enqueue_copy_from(&ints).unwrap();
            assert_eq!(
                d.to_string(),
                model("DeviceBuffer", n, |i| (i as i64 - 2).to_string())
            );
            let f = ctx.enqueue_create_buffer::<f32>(n).unwrap();
            f.enqueue_copy_from(&floats).unwrap();
            assert_eq!(
                f.to_string(),
                model("DeviceBuffer", n, |i| format!("{i}.0"))
            );
            let h = ctx.enqueue_create_host_buffer::<f64>(n).unwrap();
            h.enqueue_copy_from(&halves).unwrap();
            assert_eq!(h.to_string(), model("HostBuffer", n, |i| format!("{i}.5")));
            let hu = ctx.enqueue_create_host_buffer::<u8>(n).unwrap();
            hu.enqueue_fill(9).unwrap();
            assert_eq!(hu.to_string(), model("HostBuffer", n, |_| "9".into()));
        }
        let seed_example = ctx.enqueue_create_host_buffer::<f32>(1001).unwrap();
        seed_example
            .enqueue_copy_from(&(0..=1000).map(|i| i as f32).collect::<Vec<_>>())
            .unwrap();
        assert_eq!(
            seed_example.to_string(),
            "HostBuffer([0.0, 1.0, 2.0, ..., 998.0, 999.0, 1000.0])"
        );
        let three = ctx.enqueue_create_buffer::<u32>(3).unwrap();
        three.enqueue_copy_from(&[1, 2, 3]).unwrap();
        assert_eq!(format!("{three}"), "DeviceBuffer([1, 2, 3])");
        assert_eq!(
            ctx.enqueue_create_host_buffer::<f32>(0)
                .unwrap()
                .to_string(),
            "HostBuffer([])"
        );
    });
}

#[test]
fn printing_a_buffer_that_cannot_be_read_prints_the_error() {
    run_with(common::options(Path::Direct), "unreadable print", |ctx| {
        let buf = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        buf.enqueue_fill(1).unwrap();
        let mapped = buf.map_to_host().unwrap(); // a direct, exclusive mapping
        let text = buf.to_string();
        assert!(text.starts_with("DeviceBuffer(<unreadable: "), "{text}");
        drop(mapped);
        assert_eq!(buf.to_string(), "DeviceBuffer([1, 1, 1, 1])");
        let host = ctx.enqueue_create_host_buffer::<u32>(2).unwrap();
        host.enqueue_fill(8).unwrap();
        let writing = host.as_mut_slice().unwrap();
        assert!(host.to_string().contains("unreadable"));
        drop(writing);
        assert_eq!(host.to_string(), "HostBuffer([8, 8])");
    });
}

#[test]
fn raw_pointer_copies_arrive_once_the_stream_passes_them() {
    on_each_path(|ctx, _| {
        let n = 5000;
        let src: Vec<u64> = (0..n as u64).map(|i| i * i + 1).collect();
        let buf = ctx.enqueue_create_buffer::<u64>(n).unwrap();
        // SAFETY: `src` holds `n` aligned u64s and outlives the call.
        unsafe { buf.enqueue_copy_from_ptr(src.as_ptr()) }.unwrap();
        let mut dst = vec![0u64; n];
        // SAFETY: `dst` holds `n` aligned u64s, untouched until synchronize.
        unsafe { buf.enqueue_copy_to_ptr(dst.as_mut_ptr()) }.unwrap();
        buf.enqueue_fill(0).unwrap(); // later work does not affect the copy
        ctx.synchronize().unwrap();
        assert_eq!(dst, src);
        // SAFETY: a null pointer is rejected before it is used.
        let e = unsafe { buf.enqueue_copy_to_ptr(std::ptr::null_mut()) }.unwrap_err();
        assert!(matches!(e, Error::Misaligned { .. }), "{e}");
    });
}

/// A deferred raw-pointer copy larger than one staging piece (8 MiB) goes
/// in pieces, each landing at its place, none torn by later work; the
/// staging blocks come back to the pool.
#[test]
fn raw_pointer_copies_of_several_pieces_arrive_whole() {
    on_each_path(|ctx, _| {
        // 20 MiB and a little: two whole pieces and a short one.
        let n = (20 << 20) / 4 + 3;
        let src: Vec<u32> = (0..n as u32)
            .map(|i| i.wrapping_mul(2_654_435_761))
            .collect();
        let buf = ctx.enqueue_create_buffer::<u32>(n).unwrap();
        buf.enqueue_copy_from(&src).unwrap();
        let mut dst = vec![0u32; n];
        // SAFETY: `dst` holds `n` aligned u32s, untouched until synchronize.
        unsafe { buf.enqueue_copy_to_ptr(dst.as_mut_ptr()) }.unwrap();
        buf.enqueue_fill(7).unwrap(); // later work does not reach the copy
        ctx.synchronize().unwrap();
        assert!(dst == src, "the pieces arrived out of place");
        ctx.trim().unwrap();
        assert_eq!(ctx.diagnostics().live_objects().staging_buffers, 0);
    });
}

#[test]
fn host_sub_buffers_view_the_same_memory() {
    on_each_path(|ctx, _| {
        let host = ctx.enqueue_create_host_buffer::<u32>(8).unwrap();
        host.enqueue_fill(0).unwrap();
        let bytes = host.create_sub_buffer::<u8>(5, 6).unwrap();
        bytes.enqueue_fill(0xab).unwrap();
        let words = host.to_vec().unwrap();
        assert_eq!(words, [0, 0xabab_ab00, 0x00ab_abab, 0, 0, 0, 0, 0]);
        assert_eq!(bytes.len(), 6);
        let dev: vkcompute::DeviceBuffer<u8> = ctx.enqueue_create_buffer(6).unwrap();
        dev.enqueue_copy_from(&bytes).unwrap();
        assert_eq!(dev.to_vec().unwrap(), [0xab; 6]);
    });
}
