//! Labels (issue 21): buffers are named by their type and length until
//! labelled; the label shows in `Debug`, is shared by views and clones, and
//! is the `VkBuffer`'s debug-utils name under validation, so validation
//! messages name it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use vkcompute::ash::vk;

#[test]
fn buffers_have_labels_shared_by_their_views() {
    common::on_each_path(|ctx, _| {
        let x = ctx.enqueue_create_buffer::<f32>(1024).unwrap();
        assert_eq!(x.label(), "DeviceBuffer[float32] of 1024 elements");
        let x = x.with_label("weights");
        assert_eq!(x.label(), "weights");
        let view = x.create_sub_buffer::<f32>(10, 20).unwrap();
        assert_eq!(view.label(), "weights");
        assert_eq!(x.clone().label(), "weights");
        assert!(format!("{x:?}").contains("weights"), "{x:?}");
        // Errors name the label.
        let e = x.create_sub_buffer::<f32>(1000, 100).unwrap_err();
        assert!(e.to_string().contains("`weights`"), "{e}");
        // Relabelled: every handle sees the new label; a NUL is harmless.
        let _ = view.clone().with_label("w\0b");
        assert_eq!(x.label(), "w\0b");
        let host = ctx.enqueue_create_host_buffer::<u8>(3).unwrap();
        assert_eq!(host.label(), "HostBuffer[uint8] of 3 elements");
        assert_eq!(host.with_label("staging").label(), "staging");
        let empty = ctx
            .enqueue_create_buffer::<u32>(0)
            .unwrap()
            .with_label("none");
        assert_eq!(empty.label(), "none");
        // Labelled buffers work as before.
        x.enqueue_fill(1.5).unwrap();
        assert_eq!(view.to_vec().unwrap(), vec![1.5; 20]);
    });
}

#[test]
fn validation_messages_name_labelled_buffers() {
    let ctx = common::context_with(common::options(common::Path::Direct));
    assert!(ctx.diagnostics().is_validation_enabled());
    let log = ctx.diagnostics().validation_log();
    let x = ctx
        .enqueue_create_buffer::<u32>(64)
        .unwrap()
        .with_label("my-weights");
    overlong_fill(&ctx, x.raw().buffer);
    let messages = log.take();
    assert!(
        messages
            .iter()
            .any(|m| m.id.contains("vkCmdFillBuffer") && m.text.contains("my-weights")),
        "a message naming the buffer: {messages:?}"
    );
    // An unlabelled buffer is named by its type and length.
    let y = ctx.enqueue_create_buffer::<u32>(32).unwrap();
    overlong_fill(&ctx, y.raw().buffer);
    let messages = log.take();
    assert!(
        messages.iter().any(|m| m.text.contains("32 elements")),
        "a message naming the buffer by type and length: {messages:?}"
    );
    drop((x, y));
    drop(ctx);
    common::assert_clean(&log, "the context");
}

/// Records (never submits) a fill of more bytes than `buffer` has, which
/// the validation layer reports on the buffer
/// (VUID-vkCmdFillBuffer-size-00027).
fn overlong_fill(ctx: &vkcompute::DeviceContext, buffer: vk::Buffer) {
    let device = ctx.raw().device();
    let pool_info =
        vk::CommandPoolCreateInfo::default().queue_family_index(ctx.raw().queue_family_index());
    // SAFETY: a command pool of the context's device and family, destroyed
    // here; its command buffer is recorded (deliberately wrongly, for the
    // validation layer) and never submitted.
    unsafe {
        let pool = device.create_command_pool(&pool_info, None).unwrap();
        let alloc = vk::CommandBufferAllocateInfo::default()
            .command_pool(pool)
            .command_buffer_count(1);
        let cmd = device.allocate_command_buffers(&alloc).unwrap()[0];
        device
            .begin_command_buffer(cmd, &vk::CommandBufferBeginInfo::default())
            .unwrap();
        device.cmd_fill_buffer(cmd, buffer, 0, 1 << 20, 0);
        let _ = device.end_command_buffer(cmd);
        device.destroy_command_pool(pool, None);
    }
}

/// Streams and graphs have labels too; the trace names a labelled stream's
/// tracks and a labelled graph's replays by them.
#[test]
fn streams_and_graphs_have_labels_in_debug_and_the_trace() {
    let path = std::env::temp_dir().join(format!("vkcompute-labels-{}.json", std::process::id()));
    {
        let ctx = common::context_with(
            vkcompute::ContextOptions::new()
                .validation(true)
                .trace(&path),
        );
        let log = ctx.diagnostics().validation_log();
        assert!(ctx.label().starts_with("stream of "), "{}", ctx.label());
        let uploads = ctx.new_stream().unwrap().with_label("uploads");
        assert_eq!(uploads.label(), "uploads");
        assert_eq!(uploads.clone().label(), "uploads");
        assert!(format!("{uploads:?}").contains("uploads"));
        let x = uploads.enqueue_create_buffer::<u32>(64).unwrap();
        let mut g = uploads.capture_graph();
        g.enqueue_fill(&x, 3).unwrap();
        let unnamed = ctx.capture_graph().finish().unwrap();
        assert_eq!(unnamed.label(), "graph of 0 operations");
        g.label("refill");
        let graph = g.finish().unwrap();
        assert_eq!(graph.label(), "refill");
        assert!(format!("{graph:?}").contains("refill"));
        uploads.enqueue_graph(&graph).unwrap();
        assert_eq!(x.to_vec().unwrap(), vec![3; 64]);
        drop((x, graph, unnamed, uploads));
        drop(ctx);
        common::assert_clean(&log, "a traced run");
    }
    let text = std::fs::read_to_string(&path).unwrap();
    let _ = std::fs::remove_file(&path);
    assert!(
        text.contains(r#""name":"uploads commands ("#),
        "the stream's track"
    );
    assert!(
        text.contains("graph `refill` of 1 commands"),
        "the graph's replay"
    );
}

/// Errors name a labelled buffer: a mapped one the device may not touch,
/// and a kernel argument the dispatch refuses.
#[test]
fn errors_name_labelled_buffers() {
    let ctx = common::context_with(common::options(common::Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let weights = ctx
        .enqueue_create_buffer::<f32>(256)
        .unwrap()
        .with_label("layer 3 weights");
    {
        let _host = weights.map_to_host().unwrap();
        let e = weights.enqueue_fill(1.0).unwrap_err();
        assert!(matches!(e, vkcompute::Error::BufferMapped { .. }), "{e}");
        assert!(e.to_string().contains("`layer 3 weights`"), "{e}");
    }
    let saxpy = vkcompute::Kernel::new(&ctx, vkcompute::shaders::SAXPY, "main").unwrap();
    let counts = ctx
        .enqueue_create_buffer::<u32>(256)
        .unwrap()
        .with_label("token counts");
    let e = ctx
        .enqueue_function(&saxpy, 1, &[counts.arg(), weights.arg()], &[0u32; 2])
        .unwrap_err();
    assert!(matches!(e, vkcompute::Error::Argument { .. }), "{e}");
    assert!(e.to_string().contains("`token counts`"), "{e}");
    // Unlabelled buffers are named by their type, as before.
    let plain = ctx.enqueue_create_buffer::<u32>(256).unwrap();
    let e = ctx
        .enqueue_function(&saxpy, 1, &[plain.arg(), weights.arg()], &[0u32; 2])
        .unwrap_err();
    assert!(e.to_string().contains("DeviceBuffer[uint32] "), "{e}");
    assert!(!e.to_string().contains("token counts"), "{e}");
    drop((weights, counts, plain, saxpy, ctx));
    common::assert_clean(&log, "labelled errors");
}
