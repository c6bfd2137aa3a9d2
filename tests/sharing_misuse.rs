//! Misuse of exportable buffers, the handle-type choice and share_with (a
//! hostile review): streams of the same device, views, bad handle-type
//! lists, odd byte ranges.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use common::{assert_clean, context_with, options, Path};
use vkcompute::{sharing::MemoryHandleType, Error};

/// share_with a context of the *same* VkDevice (a stream of the exporter):
/// the docs say "a context of another VkDevice". Either it is refused with
/// a clear error, or the result is the same memory, validation-clean.
#[test]
fn share_with_a_stream_of_the_same_device() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let x = ctx.enqueue_create_exportable_buffer::<u32>(64).unwrap();
    x.enqueue_fill(5).unwrap();
    let stream = ctx.new_stream().unwrap();
    match x.share_with(&stream) {
        Ok(s) => {
            assert_eq!(s.to_vec().unwrap(), vec![5; 64]);
            s.enqueue_fill(6).unwrap();
            // `x` and `s` are the same memory, tracked as two buffers: the
            // read of `x` is not ordered after the fill of `s`.
            let read = x.to_vec().unwrap();
            println!(
                "share_with the same device: Ok; x after s's fill: {}",
                read[0]
            );
            assert_eq!(
                read,
                vec![6; 64],
                "a write through the share is not seen by the original"
            );
        }
        Err(e) => println!("refused: {e}"),
    }
    ctx.synchronize().unwrap();
    stream.synchronize().unwrap();
    drop(stream);
    drop(x);
    drop(ctx);
    assert_clean(&log, "the context");
}

/// A view of an exportable buffer shares exactly its range.
#[test]
fn share_with_of_a_view_gives_the_views_range() {
    let a = context_with(options(Path::Staging));
    let b = context_with(options(Path::Staging));
    let (la, lb) = (
        a.diagnostics().validation_log(),
        b.diagnostics().validation_log(),
    );
    let x = a.enqueue_create_exportable_buffer::<u32>(100).unwrap();
    let data: Vec<u32> = (0..100).collect();
    x.enqueue_copy_from(&data).unwrap();
    a.synchronize().unwrap();
    let view = x.create_sub_buffer::<u32>(37, 11).unwrap();
    assert_eq!(view.exportable_handle_types(), x.exportable_handle_types());
    let s = view.share_with(&b).unwrap();
    assert_eq!(s.len(), 11);
    assert_eq!(s.to_vec().unwrap(), data[37..48].to_vec());
    s.enqueue_fill(7).unwrap();
    b.synchronize().unwrap();
    let back = x.to_vec().unwrap();
    assert_eq!(&back[..37], &data[..37], "written before the view");
    assert_eq!(&back[37..48], &[7; 11]);
    assert_eq!(&back[48..], &data[48..], "written after the view");
    // Shared memory is exported again only by its exporter.
    let e = s.share_with(&a).unwrap_err();
    assert!(matches!(e, Error::NotExportable { .. }), "{e}");
    drop((x, view, s));
    drop((a, b));
    assert_clean(&la, "a");
    assert_clean(&lb, "b");
}

/// Bad lists of handle types: refused with the documented errors, never a
/// panic, for every length.
#[test]
fn exportable_buffer_as_refuses_bad_handle_type_lists() {
    let ctx = context_with(options(Path::Direct));
    let log = ctx.diagnostics().validation_log();
    let exportable = ctx.exportable_handle_types();
    println!(
        "exportable {exportable:?}, importable {:?}",
        ctx.importable_handle_types()
    );
    for len in [0usize, 1, 1000] {
        let e = ctx
            .enqueue_create_exportable_buffer_as::<u32>(len, &[])
            .unwrap_err();
        assert!(matches!(e, Error::NotExportable { .. }), "{len}: {e}");
        let e = ctx
            .enqueue_create_exportable_buffer_as::<u32>(len, &[MemoryHandleType::OpaqueWin32])
            .unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{len}: {e}");
        assert!(
            e.to_string().contains("Win32") || e.to_string().contains("win32"),
            "{e}"
        );
        if !exportable.contains(&MemoryHandleType::DmaBuf) {
            let e = ctx
                .enqueue_create_exportable_buffer_as::<u32>(len, &[MemoryHandleType::DmaBuf])
                .unwrap_err();
            assert!(matches!(e, Error::Unsupported { .. }), "{len}: {e}");
        }
        // The same type twice is the type once.
        let b = ctx
            .enqueue_create_exportable_buffer_as::<u32>(
                len,
                &[MemoryHandleType::OpaqueFd, MemoryHandleType::OpaqueFd],
            )
            .unwrap();
        if len > 0 {
            assert_eq!(b.exportable_handle_types(), [MemoryHandleType::OpaqueFd]);
        }
    }
    // Too large: an error, not a panic or an abort.
    let e = ctx
        .enqueue_create_exportable_buffer_as::<u32>(usize::MAX / 2, &[MemoryHandleType::OpaqueFd])
        .unwrap_err();
    println!("huge: {e}");
    let e = ctx
        .enqueue_create_exportable_buffer::<u64>(usize::MAX / 8)
        .unwrap_err();
    println!("huge: {e}");
    // An empty exportable buffer lists no types (docs) and cannot be shared.
    let empty = ctx.enqueue_create_exportable_buffer::<u32>(0).unwrap();
    assert!(empty.exportable_handle_types().is_empty());
    let other = context_with(options(Path::Direct));
    let e = empty.share_with(&other).unwrap_err();
    assert!(matches!(e, Error::NotExportable { .. }), "{e}");
    drop(empty);
    drop(ctx);
    assert_clean(&log, "the context");
}

/// share_with picks the handle type by the importer's *extensions*, not by
/// what its driver can import (importable_handle_types): where the first
/// exportable type has the extension but is not importable, share_with
/// fails though importable_handle_types lists another of the buffer's types.
#[test]
fn share_with_uses_a_type_the_importer_can_import() {
    let a = context_with(options(Path::Direct));
    let b = context_with(options(Path::Direct));
    let x = a.enqueue_create_exportable_buffer::<u32>(16).unwrap();
    let importable = b.importable_handle_types();
    let types = x.exportable_handle_types();
    println!("buffer {types:?}, importer {importable:?}");
    let any = types.iter().any(|t| importable.contains(t));
    match x.share_with(&b) {
        Ok(_) => assert!(any),
        Err(e) => assert!(
            !any,
            "share_with failed though {importable:?} covers one of {types:?}: {e}"
        ),
    }
}

/// Odd byte lengths and offsets: share_with of u8 views, and copies between
/// contexts through the alias, keep every byte outside the range.
#[test]
fn odd_byte_ranges_share_and_copy_between_contexts() {
    let a = context_with(options(Path::Direct));
    let b = context_with(options(Path::Staging));
    let (la, lb) = (
        a.diagnostics().validation_log(),
        b.diagnostics().validation_log(),
    );
    for n in [1usize, 3, 5, 4099] {
        let x = a.enqueue_create_exportable_buffer::<u8>(n).unwrap();
        let data: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
        x.enqueue_copy_from(&data).unwrap();
        a.synchronize().unwrap();
        let s = x.share_with(&b).unwrap();
        assert_eq!(s.to_vec().unwrap(), data, "n {n}");
        if n >= 3 {
            let view = x.create_sub_buffer::<u8>(1, n - 2).unwrap();
            let sv = view.share_with(&b).unwrap();
            assert_eq!(sv.to_vec().unwrap(), data[1..n - 1].to_vec(), "n {n}");
            // A copy from b into the odd view of x, through the alias.
            let src = b.enqueue_create_buffer::<u8>(n - 2).unwrap();
            src.enqueue_copy_from(&vec![0xEEu8; n - 2]).unwrap();
            b.synchronize().unwrap();
            view.enqueue_copy_from(&src).unwrap();
            a.synchronize().unwrap();
            b.synchronize().unwrap();
            let back = x.to_vec().unwrap();
            assert_eq!(back[0], data[0], "n {n}: byte before the view");
            assert_eq!(back[n - 1], data[n - 1], "n {n}: byte after the view");
            assert!(back[1..n - 1].iter().all(|&v| v == 0xEE), "n {n}");
        }
    }
    drop((a, b));
    assert_clean(&la, "a");
    assert_clean(&lb, "b");
}
