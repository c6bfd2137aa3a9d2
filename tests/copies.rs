//! Copies host -> device, device -> device and device -> host, for every
//! element type and several sizes, on both memory paths, against a host model.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use bytemuck::Pod;
use common::{on_each_path, Rng};
use vkcompute::half::{bf16, f16};
use vkcompute::{DeviceContext, Error};

const SIZES: [usize; 6] = [0, 1, 2, 7, 255, 1001];

/// Random (non-zero) host data of `len` elements of `T`.
fn random<T: Pod>(rng: &mut Rng, len: usize) -> Vec<T> {
    let bytes = rng.bytes(len * std::mem::size_of::<T>());
    let mut out = vec![T::zeroed(); len];
    bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes);
    out
}

fn as_bytes<T: Pod>(v: &[T]) -> &[u8] {
    bytemuck::cast_slice(v)
}

/// Upload, device-to-device copy both ways, download; compared byte for byte.
fn round_trip<T: Pod + std::fmt::Debug>(ctx: &DeviceContext, rng: &mut Rng) {
    for len in SIZES {
        let host: Vec<T> = random(rng, len);
        let a = ctx.enqueue_create_buffer::<T>(len).unwrap();
        let b = ctx.enqueue_create_buffer::<T>(len).unwrap();
        let c = ctx.enqueue_create_buffer::<T>(len).unwrap();
        a.enqueue_copy_from(&host[..]).unwrap();
        b.enqueue_copy_from(&a).unwrap();
        b.enqueue_copy_to(&c).unwrap();
        let back = c.to_vec().unwrap();
        assert_eq!(
            as_bytes(&back),
            as_bytes(&host),
            "{} len {len}",
            vkcompute::DeviceBuffer::<T>::type_name()
        );
        let mut into = vec![T::zeroed(); len];
        a.copy_to_slice(&mut into).unwrap();
        assert_eq!(as_bytes(&into), as_bytes(&host));
    }
}

#[test]
fn every_element_type_round_trips_at_every_size() {
    on_each_path(|ctx, _| {
        let mut rng = Rng::new(1);
        round_trip::<u8>(ctx, &mut rng);
        round_trip::<i8>(ctx, &mut rng);
        round_trip::<u16>(ctx, &mut rng);
        round_trip::<i16>(ctx, &mut rng);
        round_trip::<u32>(ctx, &mut rng);
        round_trip::<i32>(ctx, &mut rng);
        round_trip::<u64>(ctx, &mut rng);
        round_trip::<i64>(ctx, &mut rng);
        round_trip::<f32>(ctx, &mut rng);
        round_trip::<f64>(ctx, &mut rng);
        round_trip::<f16>(ctx, &mut rng);
        round_trip::<bf16>(ctx, &mut rng);
        round_trip::<[u8; 3]>(ctx, &mut rng);
        round_trip::<[f32; 4]>(ctx, &mut rng);
    });
}

#[test]
fn a_64_mib_buffer_round_trips() {
    on_each_path(|ctx, _| {
        let len = 16 << 20; // 16 Mi u32 = 64 MiB
        let host: Vec<u32> = (0..len as u32)
            .map(|i| i.wrapping_mul(2_654_435_761) | 1)
            .collect();
        let a = ctx.enqueue_create_buffer::<u32>(len).unwrap();
        let b = ctx.enqueue_create_buffer::<u32>(len).unwrap();
        a.enqueue_copy_from(&host).unwrap();
        b.enqueue_copy_from(&a).unwrap();
        assert!(b.to_vec().unwrap() == host, "64 MiB copy differs");
    });
}

#[test]
fn the_source_slice_can_be_reused_as_soon_as_the_copy_is_enqueued() {
    on_each_path(|ctx, _| {
        let a = ctx.enqueue_create_buffer::<u32>(1000).unwrap();
        let b = ctx.enqueue_create_buffer::<u32>(1000).unwrap();
        let mut host: Vec<u32> = (0..1000).collect();
        a.enqueue_copy_from(&host[..]).unwrap();
        // `a` is busy with the first upload's successor work: make it so.
        b.enqueue_copy_from(&a).unwrap();
        host.iter_mut().for_each(|v| *v = 7);
        a.enqueue_copy_from(&host[..]).unwrap();
        host.iter_mut().for_each(|v| *v = 9);
        assert_eq!(b.to_vec().unwrap(), (0..1000).collect::<Vec<u32>>());
        assert_eq!(a.to_vec().unwrap(), vec![7; 1000]);
    });
}

#[test]
fn uploads_and_copies_run_in_stream_order_without_synchronize() {
    on_each_path(|ctx, _| {
        // A chain where each step depends on the one before it.
        let n = 4096;
        let bufs: Vec<_> = (0..6)
            .map(|_| ctx.enqueue_create_buffer::<u32>(n).unwrap())
            .collect();
        let mut model = vec![vec![0u32; n]; 6];
        for round in 0..5u32 {
            let data: Vec<u32> = (0..n as u32).map(|i| i * 3 + round + 1).collect();
            bufs[0].enqueue_copy_from(&data).unwrap();
            model[0] = data;
            for k in 1..6 {
                bufs[k].enqueue_copy_from(&bufs[k - 1]).unwrap();
                model[k] = model[k - 1].clone();
            }
            bufs[0].enqueue_fill(round).unwrap();
            model[0] = vec![round; n];
        }
        for (buf, want) in bufs.iter().zip(&model) {
            assert_eq!(&buf.to_vec().unwrap(), want);
        }
    });
}

#[test]
fn many_small_copies_to_distinct_offsets_are_all_applied() {
    // Equal-sized views are not available here yet, so use whole small
    // buffers: 500 independent copies recorded back to back.
    on_each_path(|ctx, _| {
        let srcs: Vec<_> = (0..500u32)
            .map(|i| {
                let b = ctx.enqueue_create_buffer::<u32>(64).unwrap();
                b.enqueue_fill(i + 1).unwrap();
                b
            })
            .collect();
        let dsts: Vec<_> = (0..500)
            .map(|_| ctx.enqueue_create_buffer::<u32>(64).unwrap())
            .collect();
        for (s, d) in srcs.iter().zip(&dsts) {
            d.enqueue_copy_from(s).unwrap();
        }
        for (i, d) in dsts.iter().enumerate() {
            assert_eq!(d.to_vec().unwrap(), vec![i as u32 + 1; 64]);
        }
    });
}

#[test]
fn copies_between_different_lengths_are_errors_that_change_nothing() {
    on_each_path(|ctx, _| {
        let a = ctx.enqueue_create_buffer::<u32>(10).unwrap();
        let b = ctx.enqueue_create_buffer::<u32>(11).unwrap();
        a.enqueue_fill(1).unwrap();
        b.enqueue_fill(2).unwrap();
        let check = |e: Error, dst: usize, src: usize| match e {
            Error::LengthMismatch {
                dst_len, src_len, ..
            } => {
                assert_eq!((dst_len, src_len), (dst, src), "{e}");
                assert!(e.to_string().contains("length mismatch"));
            }
            other => panic!("expected LengthMismatch, got {other}"),
        };
        // Lengths in the error are elements, as the caller counts them.
        check(a.enqueue_copy_from(&b).unwrap_err(), 10, 11);
        check(a.enqueue_copy_to(&b).unwrap_err(), 11, 10);
        check(a.enqueue_copy_from(&[0u32; 9][..]).unwrap_err(), 10, 9);
        check(a.copy_to_slice(&mut [0u32; 11]).unwrap_err(), 11, 10);
        assert_eq!(a.to_vec().unwrap(), vec![1; 10]);
        assert_eq!(b.to_vec().unwrap(), vec![2; 11]);
        // The context still works.
        a.enqueue_copy_from(&[5u32; 10]).unwrap();
        assert_eq!(a.to_vec().unwrap(), vec![5; 10]);
    });
}

#[test]
fn zero_length_buffers_copy_and_fill_as_no_ops() {
    on_each_path(|ctx, _| {
        let a = ctx.enqueue_create_buffer::<f64>(0).unwrap();
        let b = ctx.enqueue_create_buffer::<f64>(0).unwrap();
        assert!(a.is_empty());
        assert_eq!(a.len(), 0);
        assert_eq!(a.byte_len(), 0);
        a.enqueue_copy_from(&[][..]).unwrap();
        a.enqueue_copy_from(&b).unwrap();
        a.enqueue_copy_to(&b).unwrap();
        a.enqueue_fill(1.0).unwrap();
        a.copy_to_slice(&mut []).unwrap();
        assert_eq!(a.to_vec().unwrap(), Vec::<f64>::new());
    });
}
