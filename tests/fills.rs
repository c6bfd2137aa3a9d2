//! `enqueue_fill` for every element width: 32-bit patterns (vkCmdFillBuffer),
//! 8/16/64-bit elements (the fill kernel), and wider values (tile copies),
//! against a host model, on both memory paths.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use bytemuck::Pod;
use common::on_each_path;
use vkcompute::half::{bf16, f16};
use vkcompute::DeviceContext;

const LENGTHS: [usize; 9] = [0, 1, 2, 3, 5, 8, 63, 1000, 4099];

fn fill_matches_model<T: Pod + PartialEq + std::fmt::Debug>(
    ctx: &DeviceContext,
    value: T,
    background: T,
) {
    for len in LENGTHS {
        let buf = ctx.enqueue_create_buffer::<T>(len).unwrap();
        buf.enqueue_fill(background).unwrap();
        buf.enqueue_fill(value).unwrap();
        let got = buf.to_vec().unwrap();
        assert!(
            got.iter()
                .all(|v| bytemuck::bytes_of(v) == bytemuck::bytes_of(&value)),
            "{} of {len}: {:?}",
            vkcompute::DeviceBuffer::<T>::type_name(),
            &got[..got.len().min(8)]
        );
    }
}

#[test]
fn fills_of_every_width_match_the_model() {
    on_each_path(|ctx, _| {
        fill_matches_model::<u8>(ctx, 0xa7, 1);
        fill_matches_model::<i8>(ctx, -3, 1);
        fill_matches_model::<u16>(ctx, 0xbeef, 1);
        fill_matches_model::<i16>(ctx, -12345, 1);
        fill_matches_model::<f16>(ctx, f16::from_f32(1.5), f16::from_f32(0.25));
        fill_matches_model::<bf16>(ctx, bf16::from_f32(-2.5), bf16::from_f32(0.25));
        fill_matches_model::<u32>(ctx, 0xdead_beef, 1);
        fill_matches_model::<i32>(ctx, -7, 1);
        fill_matches_model::<f32>(ctx, 3.25, 1.0);
        fill_matches_model::<u64>(ctx, 0x0123_4567_89ab_cdef, 1);
        fill_matches_model::<i64>(ctx, -9_876_543_210, 1);
        fill_matches_model::<f64>(ctx, std::f64::consts::PI, 1.0);
        // A 64-bit value whose halves are equal takes the 32-bit fill.
        fill_matches_model::<u64>(ctx, 0x1111_2222_1111_2222, 7);
        // Wider and odd-sized values: tile copies, or the kernel for 16 bytes.
        fill_matches_model::<[u8; 3]>(ctx, [1, 2, 3], [9, 9, 9]);
        fill_matches_model::<[f32; 3]>(ctx, [1.0, -2.0, 3.5], [0.0; 3]);
        fill_matches_model::<[u32; 4]>(ctx, [1, 2, 3, 4], [0; 4]);
        fill_matches_model::<[u64; 4]>(ctx, [5, 6, 7, 8], [0; 4]);
        fill_matches_model::<[u8; 5]>(ctx, [1, 2, 3, 4, 5], [0; 5]);
    });
}

#[test]
fn a_64_mib_fill_of_each_kind_is_complete() {
    on_each_path(|ctx, _| {
        let bytes = 64 << 20;
        let a = ctx.enqueue_create_buffer::<f32>(bytes / 4).unwrap();
        a.enqueue_fill(2.5).unwrap();
        assert!(a.to_vec().unwrap().iter().all(|&v| v == 2.5));
        let b = ctx.enqueue_create_buffer::<u64>(bytes / 8).unwrap();
        b.enqueue_fill(0x0102_0304_0506_0708).unwrap();
        assert!(b
            .to_vec()
            .unwrap()
            .iter()
            .all(|&v| v == 0x0102_0304_0506_0708));
        let c = ctx.enqueue_create_buffer::<[u8; 3]>(bytes / 3).unwrap();
        c.enqueue_fill([7, 8, 9]).unwrap();
        assert!(c.to_vec().unwrap().iter().all(|&v| v == [7, 8, 9]));
    });
}

#[test]
fn fills_are_ordered_with_copies_on_the_stream() {
    on_each_path(|ctx, _| {
        let a = ctx.enqueue_create_buffer::<u16>(999).unwrap();
        let b = ctx.enqueue_create_buffer::<u16>(999).unwrap();
        let c = ctx.enqueue_create_buffer::<u16>(999).unwrap();
        a.enqueue_fill(1).unwrap();
        b.enqueue_copy_from(&a).unwrap();
        a.enqueue_fill(2).unwrap();
        c.enqueue_copy_from(&a).unwrap();
        b.enqueue_fill(3).unwrap();
        a.enqueue_copy_from(&b).unwrap();
        assert_eq!(a.to_vec().unwrap(), vec![3; 999]);
        assert_eq!(b.to_vec().unwrap(), vec![3; 999]);
        assert_eq!(c.to_vec().unwrap(), vec![2; 999]);
    });
}
