//! The context: device listing and choice, names and limits, and bad input
//! that must fail cleanly and leave the context working.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use vkcompute::{
    device::{DeviceKind, FreeMemorySource},
    ContextOptions, DeviceBuffer, DeviceContext, Error,
};

#[test]
fn devices_lists_lavapipe_with_its_properties() {
    let devices = DeviceContext::devices().unwrap();
    assert!(!devices.is_empty());
    let cpu = devices
        .iter()
        .find(|d| d.kind == DeviceKind::Cpu)
        .expect("lavapipe is installed by the set-up, and listed");
    assert!(cpu.name.contains("llvmpipe"), "{cpu}");
    assert!(cpu.memory_bytes > 0);
    assert!(cpu.unsupported.is_none(), "{cpu}");
    assert!(cpu.api_version.starts_with("1."));
    let line = cpu.to_string();
    assert!(line.contains(&cpu.name) && line.contains("CPU"), "{line}");
}

#[test]
fn a_device_can_be_chosen_by_index_or_name() {
    let devices = DeviceContext::devices().unwrap();
    let cpu = devices.iter().find(|d| d.kind == DeviceKind::Cpu).unwrap();
    common::run_with(
        common::options(common::Path::Direct).device(cpu.index),
        "device by index",
        |ctx| {
            assert_eq!(ctx.name(), cpu.name);
        },
    );
    common::run_with(
        common::options(common::Path::Direct).device("LLVMPIPE"),
        "device by name",
        |ctx| {
            assert_eq!(ctx.info().kind, DeviceKind::Cpu);
        },
    );
}

#[test]
fn an_unknown_device_is_a_clear_error() {
    match DeviceContext::with_options(ContextOptions::new().device("no such gpu")) {
        Err(Error::DeviceNotFound {
            selector,
            available,
            ..
        }) => {
            assert_eq!(selector, "no such gpu");
            assert!(available.contains("llvmpipe"), "{available}");
        }
        other => panic!("expected DeviceNotFound, got {other:?}"),
    }
    match DeviceContext::with_options(ContextOptions::new().device(1000)) {
        Err(e @ Error::DeviceNotFound { .. }) => assert!(e.to_string().contains("1000")),
        other => panic!("expected DeviceNotFound, got {other:?}"),
    }
}

#[test]
fn name_memory_and_limits_are_reported() {
    common::run_with(common::options(common::Path::Direct), "queries", |ctx| {
        assert!(!ctx.name().is_empty());
        let info = ctx.memory_info();
        assert!(info.total > 0 && info.free <= info.total, "{info:?}");
        assert!(ctx.info().limits.max_storage_buffer_range > 0);
        let big = ctx.enqueue_create_buffer::<u8>(64 << 20).unwrap();
        big.enqueue_fill(1).unwrap();
        ctx.synchronize().unwrap();
        let after = ctx.memory_info();
        assert!(
            after.allocated >= info.allocated + (64 << 20),
            "a 64 MiB buffer is in the allocator's count: {info:?} then {after:?}"
        );
        match after.source {
            // Free memory is the heaps less the allocations: it drops by
            // the buffer exactly.
            FreeMemorySource::OwnAllocations => assert!(
                after.free + (64 << 20) <= info.free,
                "a 64 MiB buffer lowers the free memory: {info:?} then {after:?}"
            ),
            // The driver's estimate counts other processes too (on a CPU
            // driver, the system's free memory): it moves with them, so
            // only its range is checked.
            FreeMemorySource::DriverBudget => assert!(after.free <= after.total, "{after:?}"),
            other => panic!("a memory source this test does not know: {other:?}"),
        }
    });
}

#[test]
fn type_names_follow_the_seed() {
    assert_eq!(DeviceBuffer::<f32>::type_name(), "DeviceBuffer[float32]");
    assert_eq!(DeviceBuffer::<u8>::type_name(), "DeviceBuffer[uint8]");
    assert_eq!(DeviceBuffer::<i64>::type_name(), "DeviceBuffer[int64]");
    assert_eq!(
        DeviceBuffer::<vkcompute::half::f16>::type_name(),
        "DeviceBuffer[float16]"
    );
    assert_eq!(
        DeviceBuffer::<vkcompute::half::bf16>::type_name(),
        "DeviceBuffer[bfloat16]"
    );
    assert_eq!(DeviceBuffer::<f64>::type_name(), "DeviceBuffer[float64]");
}

#[test]
fn impossible_allocations_are_errors_and_the_context_survives() {
    common::run_with(
        common::options(common::Path::Direct),
        "bad allocations",
        |ctx| {
            let keep = ctx.enqueue_create_buffer::<u32>(4).unwrap();
            keep.enqueue_fill(11).unwrap();
            match ctx.enqueue_create_buffer::<u64>(usize::MAX / 4) {
                Err(Error::SizeOverflow { len, elem_size, .. }) => {
                    assert_eq!((len, elem_size), (usize::MAX / 4, 8));
                }
                other => panic!("expected SizeOverflow, got {other:?}"),
            }
            match ctx.enqueue_create_buffer::<u8>(1 << 40) {
                Err(e @ (Error::TooLarge { .. } | Error::OutOfMemory { .. })) => {
                    assert!(e.to_string().contains("1099511627776"), "{e}");
                }
                other => panic!("expected TooLarge or OutOfMemory, got {other:?}"),
            }
            assert_eq!(keep.to_vec().unwrap(), vec![11; 4]);
            let again = ctx.enqueue_create_buffer::<u32>(4).unwrap();
            again.enqueue_copy_from(&keep).unwrap();
            assert_eq!(again.to_vec().unwrap(), vec![11; 4]);
        },
    );
}

#[test]
fn options_select_the_memory_path() {
    common::run_with(
        common::options(common::Path::Staging),
        "staging option",
        |ctx| {
            assert!(ctx.is_staging_forced());
        },
    );
    common::run_with(
        common::options(common::Path::Direct),
        "direct option",
        |ctx| {
            assert!(!ctx.is_staging_forced());
        },
    );
}

#[test]
fn both_barrier_kinds_and_descriptor_paths_work() {
    for (sync2, push) in [(false, false), (false, true), (true, false)] {
        let options = common::options(common::Path::Direct)
            .synchronization2(sync2)
            .push_descriptors(push);
        common::run_with(options, "sync1 / pooled descriptors", |ctx| {
            let a = ctx.enqueue_create_buffer::<u16>(333).unwrap();
            let b = ctx.enqueue_create_buffer::<u16>(333).unwrap();
            a.enqueue_fill(7).unwrap(); // the fill kernel: 16-bit at an odd length
            b.enqueue_copy_from(&a).unwrap();
            a.enqueue_fill(9).unwrap();
            assert_eq!(b.to_vec().unwrap(), vec![7; 333]);
            assert_eq!(a.to_vec().unwrap(), vec![9; 333]);
        });
    }
}
