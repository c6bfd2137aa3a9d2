//! Kernels: the shipped example kernels against CPU references on random
//! input, 1D and 2D grids, push and specialization constants, both
//! descriptor paths, ordering with copies and fills, and every wrong
//! argument, each leaving the context working.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use bytemuck::{Pod, Zeroable};
use common::{run_with, Path, Rng};
use vkcompute::{shaders, ContextOptions, DeviceContext, Error, Kernel};

#[repr(C)]
#[derive(Clone, Copy, Pod, Zeroable)]
struct Saxpy {
    a: f32,
    n: u32,
}

/// Both descriptor paths (push descriptors and pooled sets), validated.
fn on_each_descriptor_path(test: impl Fn(&DeviceContext)) {
    for push in [true, false] {
        let options = common::options(Path::Direct).push_descriptors(push);
        run_with(options, &format!("push descriptors {push}"), &test);
    }
}

fn random_floats(rng: &mut Rng, n: usize) -> Vec<f32> {
    (0..n)
        .map(|_| (rng.below(2000) as f32 - 1000.0) / 64.0 + 0.5)
        .collect()
}

fn saxpy_grid(n: u32, max_x: u32) -> (u32, u32) {
    let groups = n.div_ceil(256).max(1);
    if groups <= max_x {
        (groups, 1)
    } else {
        (max_x, groups.div_ceil(max_x))
    }
}

#[test]
fn saxpy_matches_the_cpu_for_sizes_that_are_not_multiples_of_the_workgroup() {
    on_each_descriptor_path(|ctx| {
        let kernel = Kernel::new(ctx, shaders::SAXPY, "main").unwrap();
        assert_eq!(kernel.local_size(), [256, 1, 1]);
        assert_eq!(kernel.push_constant_size(), 8);
        assert_eq!(kernel.bindings().len(), 2);
        assert!(kernel.bindings()[0].read_only && !kernel.bindings()[1].read_only);
        let mut rng = Rng::new(7);
        for n in [1u32, 255, 256, 257, 10_007] {
            let xs = random_floats(&mut rng, n as usize);
            let ys = random_floats(&mut rng, n as usize);
            let x = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
            let y = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
            x.enqueue_copy_from(&xs).unwrap();
            y.enqueue_copy_from(&ys).unwrap();
            let a = 1.75;
            ctx.enqueue_function(
                &kernel,
                saxpy_grid(n, 65_535),
                &[x.arg(), y.arg()],
                &Saxpy { a, n },
            )
            .unwrap();
            let want: Vec<f32> = xs.iter().zip(&ys).map(|(x, y)| a * x + y).collect();
            assert_eq!(y.to_vec().unwrap(), want, "n = {n}");
        }
    });
}

#[test]
fn saxpy_on_a_2d_grid_covers_every_element() {
    run_with(common::options(Path::Direct), "2D saxpy", |ctx| {
        let kernel = Kernel::new(ctx, shaders::SAXPY, "main").unwrap();
        // Rows of 4 workgroups: a 2D grid even for a small vector.
        let n = 5000u32;
        let x = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
        let y = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
        let xs: Vec<f32> = (0..n).map(|i| i as f32 + 1.0).collect();
        x.enqueue_copy_from(&xs).unwrap();
        y.enqueue_fill(0.5).unwrap();
        ctx.enqueue_function(
            &kernel,
            saxpy_grid(n, 4),
            &[x.arg(), y.arg()],
            &Saxpy { a: 2.0, n },
        )
        .unwrap();
        let want: Vec<f32> = xs.iter().map(|x| 2.0 * x + 0.5).collect();
        assert_eq!(y.to_vec().unwrap(), want);
    });
}

#[test]
fn vector_add_takes_its_workgroup_size_from_a_specialization_constant() {
    on_each_descriptor_path(|ctx| {
        let mut rng = Rng::new(3);
        for local in [1u32, 32, 100, 256] {
            let kernel = Kernel::builder(shaders::VECTOR_ADD)
                .specialize(0, local)
                .build(ctx)
                .unwrap();
            assert_eq!(kernel.local_size(), [local, 1, 1]);
            let n = 1000u32;
            let (av, bv) = (
                random_floats(&mut rng, n as usize),
                random_floats(&mut rng, n as usize),
            );
            let a = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
            let b = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
            let c = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
            a.enqueue_copy_from(&av).unwrap();
            b.enqueue_copy_from(&bv).unwrap();
            ctx.enqueue_function(&kernel, n.div_ceil(local), &[a.arg(), b.arg(), c.arg()], &n)
                .unwrap();
            let want: Vec<f32> = av.iter().zip(&bv).map(|(x, y)| x + y).collect();
            assert_eq!(c.to_vec().unwrap(), want, "local size {local}");
        }
        let default = Kernel::new(ctx, shaders::VECTOR_ADD, "main").unwrap();
        assert_eq!(default.local_size(), [64, 1, 1]);
        assert_eq!(default.spec_constants().len(), 1);
    });
}

#[test]
fn a_two_pass_reduction_matches_the_cpu_sum() {
    on_each_descriptor_path(|ctx| {
        let kernel = Kernel::new(ctx, shaders::REDUCE_SUM, "main").unwrap();
        let mut rng = Rng::new(11);
        for n in [1u32, 300, 65_537, 1 << 20] {
            let values: Vec<f32> = (0..n)
                .map(|_| rng.below(1000) as f32 / 256.0 + 0.125)
                .collect();
            let input = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
            let partial = ctx.enqueue_create_buffer::<f32>(64).unwrap();
            let total = ctx.enqueue_create_buffer::<f32>(1).unwrap();
            input.enqueue_copy_from(&values).unwrap();
            ctx.enqueue_function(&kernel, 64, &[input.arg(), partial.arg()], &n)
                .unwrap();
            ctx.enqueue_function(&kernel, 1, &[partial.arg(), total.arg()], &64u32)
                .unwrap();
            let got = total.to_vec().unwrap()[0] as f64;
            let want: f64 = values.iter().map(|&v| v as f64).sum();
            assert!(
                ((got - want) / want).abs() < 1e-5,
                "n = {n}: {got} vs {want}"
            );
        }
    });
}

#[test]
fn dispatches_are_ordered_with_copies_and_fills() {
    on_each_descriptor_path(|ctx| {
        let store = Kernel::new(ctx, shaders::STORE, "main").unwrap();
        let data = ctx.enqueue_create_buffer::<u32>(8).unwrap();
        let copy = ctx.enqueue_create_buffer::<u32>(8).unwrap();
        let mut model = [0u32; 8];
        data.enqueue_fill(0).unwrap();
        for i in 0..8u32 {
            ctx.enqueue_function(&store, 1, &[data.arg()], &[i, i * 10 + 1])
                .unwrap();
            model[i as usize] = i * 10 + 1;
            if i == 3 {
                copy.enqueue_copy_from(&data).unwrap();
                data.enqueue_fill(5).unwrap();
                model = [5; 8];
            }
        }
        assert_eq!(copy.to_vec().unwrap(), [1, 11, 21, 31, 0, 0, 0, 0]);
        assert_eq!(data.to_vec().unwrap(), model);
    });
}

#[test]
fn a_kernel_binds_sub_buffers_at_aligned_offsets() {
    run_with(
        common::options(Path::Direct),
        "sub-buffer arguments",
        |ctx| {
            let store = Kernel::new(ctx, shaders::STORE, "main").unwrap();
            let align = ctx.info().limits.min_storage_buffer_offset_alignment as usize / 4;
            let whole = ctx.enqueue_create_buffer::<u32>(align * 2 + 4).unwrap();
            whole.enqueue_fill(9).unwrap();
            let view = whole.create_sub_buffer::<u32>(align, 4).unwrap();
            ctx.enqueue_function(&store, 1, &[view.arg()], &[2u32, 77u32])
                .unwrap();
            let got = whole.to_vec().unwrap();
            assert_eq!(got[align + 2], 77);
            assert_eq!(got.iter().filter(|&&v| v == 9).count(), got.len() - 1);
        },
    );
}

#[test]
fn loading_the_same_module_twice_reuses_its_pipeline() {
    run_with(common::options(Path::Direct), "pipeline reuse", |ctx| {
        let a = Kernel::new(ctx, shaders::SAXPY, "main").unwrap();
        let b = Kernel::new(ctx, shaders::SAXPY, "main").unwrap();
        assert!(a.shares_pipeline_with(&b));
        let c = Kernel::builder(shaders::VECTOR_ADD)
            .specialize(0, 32u32)
            .build(ctx)
            .unwrap();
        let d = Kernel::builder(shaders::VECTOR_ADD)
            .specialize(0, 64u32)
            .build(ctx)
            .unwrap();
        assert!(!c.shares_pipeline_with(&d));
        let bytes: Vec<u8> = shaders::SAXPY
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let e = Kernel::new(ctx, &bytes, "main").unwrap();
        assert!(a.shares_pipeline_with(&e));
        let swapped: Vec<u8> = shaders::SAXPY
            .iter()
            .flat_map(|w| w.to_be_bytes())
            .collect();
        let f = Kernel::new(ctx, &swapped, "main").unwrap();
        assert!(a.shares_pipeline_with(&f), "big-endian SPIR-V is read too");
    });
}

#[test]
fn a_kernel_dropped_with_its_dispatch_in_flight_stays_alive_until_done() {
    run_with(common::options(Path::Direct), "kernel lifetime", |ctx| {
        let data = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        data.enqueue_fill(0).unwrap();
        {
            let store = Kernel::new(ctx, shaders::STORE, "main").unwrap();
            ctx.enqueue_function(&store, 1, &[data.arg()], &[1u32, 5u32])
                .unwrap();
        }
        assert_eq!(data.to_vec().unwrap(), [0, 5, 0, 0]);
    });
}

#[test]
fn execution_time_measures_the_enqueued_work() {
    run_with(common::options(Path::Direct), "execution time", |ctx| {
        let kernel = Kernel::new(ctx, shaders::SAXPY, "main").unwrap();
        let n = 1u32 << 20;
        let x = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
        let y = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
        x.enqueue_fill(1.0).unwrap();
        y.enqueue_fill(0.0).unwrap();
        let time = ctx
            .execution_time(
                |ctx| {
                    ctx.enqueue_function(
                        &kernel,
                        n / 256,
                        &[x.arg(), y.arg()],
                        &Saxpy { a: 1.0, n },
                    )
                },
                3,
            )
            .unwrap();
        assert!(time.as_nanos() > 0, "{time:?}");
        assert_eq!(y.to_vec().unwrap()[..4], [3.0; 4], "the work ran 3 times");
    });
}

/// Runs `attempt`, expects an error matching `check`, and checks the
/// context still runs a kernel afterwards.
fn rejects(
    ctx: &DeviceContext,
    attempt: impl FnOnce() -> vkcompute::Result<()>,
    check: impl FnOnce(&Error) -> bool,
) {
    let err = attempt().expect_err("the call must fail");
    assert!(check(&err), "unexpected error: {err}");
    let store = Kernel::new(ctx, shaders::STORE, "main").unwrap();
    let probe = ctx.enqueue_create_buffer::<u32>(1).unwrap();
    ctx.enqueue_function(&store, 1, &[probe.arg()], &[0u32, 123u32])
        .unwrap();
    assert_eq!(
        probe.to_vec().unwrap(),
        [123],
        "the context works after: {err}"
    );
}

#[test]
fn wrong_dispatch_arguments_are_errors_before_the_driver() {
    run_with(common::options(Path::Direct), "wrong arguments", |ctx| {
        let saxpy = Kernel::new(ctx, shaders::SAXPY, "main").unwrap();
        let x = ctx.enqueue_create_buffer::<f32>(64).unwrap();
        let y = ctx.enqueue_create_buffer::<f32>(64).unwrap();
        y.enqueue_fill(4.0).unwrap();
        let ok = Saxpy { a: 1.0, n: 64 };
        rejects(
            ctx,
            || ctx.enqueue_function(&saxpy, 1, &[x.arg()], &ok),
            |e| {
                matches!(
                    e,
                    Error::ArgumentCount {
                        expected: 2,
                        given: 1,
                        ..
                    }
                ) && e.to_string().contains("main")
            },
        );
        rejects(
            ctx,
            || ctx.enqueue_function(&saxpy, 1, &[x.arg(), y.arg()], &1.0f32),
            |e| {
                matches!(
                    e,
                    Error::PushConstantSize {
                        expected: 8,
                        given: 4,
                        ..
                    }
                )
            },
        );
        rejects(
            ctx,
            || ctx.enqueue_function(&saxpy, (1, 0), &[x.arg(), y.arg()], &ok),
            |e| {
                matches!(
                    e,
                    Error::InvalidGrid {
                        grid: [1, 0, 1],
                        ..
                    }
                ) && e.to_string().contains("dimension y")
            },
        );
        let max = ctx.info().limits.max_workgroup_count[0];
        rejects(
            ctx,
            || ctx.enqueue_function(&saxpy, max + 1, &[x.arg(), y.arg()], &ok),
            |e| {
                matches!(e, Error::InvalidGrid { .. })
                    && e.to_string().contains("maxComputeWorkGroupCount[0]")
            },
        );
        let bytes = ctx.enqueue_create_buffer::<u8>(256).unwrap();
        rejects(
            ctx,
            || ctx.enqueue_function(&saxpy, 1, &[bytes.arg(), y.arg()], &ok),
            |e| {
                matches!(
                    e,
                    Error::Argument {
                        index: 0,
                        binding: 0,
                        ..
                    }
                ) && e.to_string().contains("4-byte elements")
            },
        );
        let empty = ctx.enqueue_create_buffer::<f32>(0).unwrap();
        rejects(
            ctx,
            || ctx.enqueue_function(&saxpy, 1, &[x.arg(), empty.arg()], &ok),
            |e| matches!(e, Error::Argument { index: 1, .. }) && e.to_string().contains("empty"),
        );
        let offset_view = y.create_sub_buffer::<f32>(1, 8).unwrap();
        rejects(
            ctx,
            || ctx.enqueue_function(&saxpy, 1, &[x.arg(), offset_view.arg()], &ok),
            |e| {
                matches!(e, Error::Misaligned { offset: 4, .. })
                    && e.to_string().contains("minStorageBufferOffsetAlignment")
            },
        );
        let range = ctx.info().limits.max_storage_buffer_range as usize;
        let huge = ctx.enqueue_create_buffer::<f32>(range / 4 + 4).unwrap();
        rejects(
            ctx,
            || ctx.enqueue_function(&saxpy, 1, &[x.arg(), huge.arg()], &ok),
            |e| {
                matches!(e, Error::Argument { index: 1, .. })
                    && e.to_string().contains("maxStorageBufferRange")
            },
        );
        // Nothing above touched `y`.
        assert_eq!(y.to_vec().unwrap(), vec![4.0; 64]);
    });
}

#[test]
fn buffers_and_kernels_of_another_device_are_rejected() {
    run_with(common::options(Path::Direct), "another device", |ctx| {
        let other = common::context_with(common::options(Path::Direct));
        let other_log = other.diagnostics().validation_log();
        let saxpy = Kernel::new(ctx, shaders::SAXPY, "main").unwrap();
        let foreign_kernel = Kernel::new(&other, shaders::SAXPY, "main").unwrap();
        let x = ctx.enqueue_create_buffer::<f32>(64).unwrap();
        let foreign = other.enqueue_create_buffer::<f32>(64).unwrap();
        let ok = Saxpy { a: 1.0, n: 64 };
        rejects(
            ctx,
            || ctx.enqueue_function(&saxpy, 1, &[x.arg(), foreign.arg()], &ok),
            |e| matches!(e, Error::DifferentDevice { .. }),
        );
        rejects(
            ctx,
            || ctx.enqueue_function(&foreign_kernel, 1, &[x.arg(), x.arg()], &ok),
            |e| matches!(e, Error::DifferentDevice { .. }),
        );
        drop((foreign, foreign_kernel, other));
        common::assert_clean(&other_log, "the other device");
    });
}

#[test]
fn invalid_spirv_is_rejected_at_load() {
    run_with(common::options(Path::Direct), "invalid SPIR-V", |ctx| {
        let bad = |e: &Error| matches!(e, Error::InvalidSpirv { .. });
        rejects(
            ctx,
            || Kernel::new(ctx, &[1u8, 2, 3], "main").map(drop),
            bad,
        );
        rejects(ctx, || Kernel::new(ctx, &[0u8; 40], "main").map(drop), bad);
        rejects(
            ctx,
            || Kernel::new(ctx, &[0x0723_0203u32, 1, 2], "main").map(drop),
            bad,
        );
        let mut garbage = vec![0x0723_0203u32, 0x0001_0500, 0, 100, 0];
        garbage.extend((0..64u32).map(|i| i.wrapping_mul(0x9e37_79b9)));
        rejects(
            ctx,
            || Kernel::new(ctx, &garbage, "main").map(drop),
            |e| {
                matches!(
                    e,
                    Error::InvalidSpirv { .. } | Error::UnsupportedKernel { .. }
                )
            },
        );
        rejects(
            ctx,
            || Kernel::new(ctx, shaders::SAXPY, "nope").map(drop),
            |e| {
                matches!(e, Error::UnsupportedKernel { .. })
                    && e.to_string().contains("no entry point `nope`")
            },
        );
        rejects(
            ctx,
            || {
                Kernel::builder(shaders::VECTOR_ADD)
                    .specialize(5, 1u32)
                    .build(ctx)
                    .map(drop)
            },
            |e| matches!(e, Error::Specialization { id: 5, .. }),
        );
        rejects(
            ctx,
            || {
                Kernel::builder(shaders::VECTOR_ADD)
                    .specialize(0, 1u64)
                    .build(ctx)
                    .map(drop)
            },
            |e| {
                matches!(e, Error::Specialization { id: 0, .. })
                    && e.to_string().contains("4 bytes")
            },
        );
        rejects(
            ctx,
            || {
                Kernel::builder(shaders::VECTOR_ADD)
                    .specialize(0, 100_000u32)
                    .build(ctx)
                    .map(drop)
            },
            |e| {
                matches!(e, Error::UnsupportedKernel { .. })
                    && e.to_string().contains("maxComputeWorkGroup")
            },
        );
    });
}

#[test]
fn the_staging_option_does_not_change_kernel_results() {
    run_with(
        ContextOptions::new()
            .validation(true)
            .force_staging(true)
            .pipeline_cache_dir(None),
        "staging",
        |ctx| {
            let kernel = Kernel::new(ctx, shaders::SAXPY, "main").unwrap();
            let x = ctx.enqueue_create_buffer::<f32>(1000).unwrap();
            let y = ctx.enqueue_create_buffer::<f32>(1000).unwrap();
            x.enqueue_copy_from(&(0..1000).map(|i| i as f32).collect::<Vec<_>>())
                .unwrap();
            y.enqueue_fill(1.0).unwrap();
            ctx.enqueue_function(&kernel, 4, &[x.arg(), y.arg()], &Saxpy { a: 3.0, n: 1000 })
                .unwrap();
            let want: Vec<f32> = (0..1000).map(|i| 3.0 * i as f32 + 1.0).collect();
            assert_eq!(y.to_vec().unwrap(), want);
        },
    );
}
