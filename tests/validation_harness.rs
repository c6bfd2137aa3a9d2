//! The harness catches validation messages: a deliberate misuse through the
//! raw `ash` device is reported, so clean runs elsewhere mean something.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use vkcompute::ash::vk;
use vkcompute::validation::Severity;

#[test]
fn a_deliberate_misuse_is_reported_by_the_validation_layer() {
    let ctx = common::context_with(common::options(common::Path::Direct));
    let log = ctx.diagnostics().validation_log();
    // A buffer of size zero violates VUID-VkBufferCreateInfo-size-00912.
    let info = vk::BufferCreateInfo::default()
        .size(0)
        .usage(vk::BufferUsageFlags::STORAGE_BUFFER);
    // SAFETY: deliberately invalid, to provoke the validation layer; the
    // result (if any) is destroyed at once.
    let made = unsafe { ctx.raw().device().create_buffer(&info, None) };
    if let Ok(buffer) = made {
        // SAFETY: the buffer was created above and never used.
        unsafe { ctx.raw().device().destroy_buffer(buffer, None) };
    }
    let messages = log.take();
    assert!(
        messages.iter().any(|m| m.severity == Severity::Error && m.id.contains("VUID-VkBufferCreateInfo-size")),
        "expected a VUID-VkBufferCreateInfo-size error, got {messages:?}"
    );
    std::panic::catch_unwind(|| common::assert_clean(&log, "a check of an emptied log"))
        .expect("the taken log is empty");
}

#[test]
fn the_harness_fails_a_test_that_provokes_a_message() {
    let outcome = std::panic::catch_unwind(|| {
        common::run_with(
            common::options(common::Path::Direct),
            "a provoking test",
            |ctx| {
                let info = vk::BufferCreateInfo::default()
                    .size(0)
                    .usage(vk::BufferUsageFlags::STORAGE_BUFFER);
                // SAFETY: deliberately invalid, as above.
                if let Ok(buffer) = unsafe { ctx.raw().device().create_buffer(&info, None) } {
                    // SAFETY: created above, never used.
                    unsafe { ctx.raw().device().destroy_buffer(buffer, None) };
                }
            },
        )
    });
    let panic = outcome.expect_err("the harness must fail a test with a validation message");
    let text = panic.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        text.contains("validation message"),
        "unexpected panic: {text}"
    );
}

#[test]
fn synchronization_validation_catches_an_unsynchronized_hazard() {
    // Two copies into the same buffer with no barrier between them, recorded
    // by hand: a WRITE_AFTER_WRITE hazard that only synchronization
    // validation reports. Proves it is on.
    let ctx = common::context_with(common::options(common::Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let src = ctx.enqueue_create_buffer::<u32>(64).unwrap();
    let dst = ctx.enqueue_create_buffer::<u32>(64).unwrap();
    src.enqueue_fill(1).unwrap();
    ctx.synchronize().unwrap();
    let device = ctx.raw().device();
    // SAFETY: a self-contained recording and submission on the context's
    // queue family, waited for before anything is destroyed.
    unsafe {
        let pool = device
            .create_command_pool(
                &vk::CommandPoolCreateInfo::default()
                    .queue_family_index(ctx.raw().queue_family_index()),
                None,
            )
            .unwrap();
        let cmd = device
            .allocate_command_buffers(
                &vk::CommandBufferAllocateInfo::default()
                    .command_pool(pool)
                    .level(vk::CommandBufferLevel::PRIMARY)
                    .command_buffer_count(1),
            )
            .unwrap()[0];
        device
            .begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
            .unwrap();
        let region = vk::BufferCopy {
            src_offset: 0,
            dst_offset: 0,
            size: 256,
        };
        device.cmd_copy_buffer(cmd, src.raw().buffer, dst.raw().buffer, &[region]);
        device.cmd_copy_buffer(cmd, src.raw().buffer, dst.raw().buffer, &[region]);
        device.end_command_buffer(cmd).unwrap();
        let queue = device.get_device_queue(ctx.raw().queue_family_index(), 0);
        let cmds = [cmd];
        device
            .queue_submit(
                queue,
                &[vk::SubmitInfo::default().command_buffers(&cmds)],
                vk::Fence::null(),
            )
            .unwrap();
        device.queue_wait_idle(queue).unwrap();
        device.destroy_command_pool(pool, None);
    }
    let messages = log.take();
    assert!(
        messages
            .iter()
            .any(|m| m.id.contains("SYNC-HAZARD-WRITE-AFTER-WRITE")),
        "expected SYNC-HAZARD-WRITE-AFTER-WRITE, got {messages:?}"
    );
}
