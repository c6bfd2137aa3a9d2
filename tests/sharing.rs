//! Sharing memory beyond one context (issue 14): exported and imported
//! buffers between two `VkDevice`s of one physical device and between two
//! processes, host memory imported without copies, semaphores (absent on
//! lavapipe: the error and the host-side fallback), zero-copy transfers
//! between contexts (through one alias kept per exporting buffer),
//! queue family ownership transfers to and from VK_QUEUE_FAMILY_EXTERNAL,
//! the refusals (Win32 handles and sync fds, which lavapipe lacks,
//! included). Everything under validation.
#![cfg(unix)]
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;
#[path = "common/fdpass.rs"]
mod fdpass;

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};

use common::{assert_clean, context_with, options, Path, PATHS};
use vkcompute::{
    shaders,
    sharing::{
        AlignedHostMemory, ExportedMemoryFd, ExportedMemoryWin32, ExportedSemaphoreWin32,
        ExternalMemoryInfo, MemoryHandleType, SharedAliases, Win32Handle,
        EXTERNAL_MEMORY_INFO_BYTES,
    },
    DeviceContext, Error, Kernel,
};

/// Two validated contexts on the same physical device: two `VkDevice`s.
fn two_contexts(path: Path) -> (DeviceContext, DeviceContext) {
    (context_with(options(path)), context_with(options(path)))
}

/// A regular file of `len` zero bytes, already unlinked: memory no driver made.
fn unlinked_file(len: u64) -> OwnedFd {
    let path = std::env::temp_dir().join(format!("vkcompute-sharing-{}", std::process::id()));
    let file = std::fs::File::create(&path).unwrap();
    file.set_len(len).unwrap();
    std::fs::remove_file(&path).unwrap();
    OwnedFd::from(file)
}

fn pattern(n: usize, seed: u32) -> Vec<u32> {
    (0..n as u32)
        .map(|i| i.wrapping_mul(2_654_435_761) ^ seed)
        .collect()
}

#[test]
fn device_info_has_the_ids_of_the_physical_device() {
    let (a, b) = two_contexts(Path::Direct);
    assert_eq!(a.info().uuid, b.info().uuid);
    assert_eq!(a.info().driver_uuid, b.info().driver_uuid);
    assert_ne!(a.info().uuid, [0; 16], "lavapipe reports a device UUID");
    let listed = DeviceContext::devices().unwrap();
    assert!(listed.iter().any(|d| d.uuid == a.info().uuid));
}

#[test]
fn writes_on_each_context_are_seen_on_the_other() {
    for path in PATHS {
        let (a, b) = two_contexts(path);
        let (log_a, log_b) = (
            a.diagnostics().validation_log(),
            b.diagnostics().validation_log(),
        );
        let n = 3000;
        let data = pattern(n, 1);
        let x = a.enqueue_create_exportable_buffer::<u32>(n).unwrap();
        x.enqueue_copy_from(&data).unwrap();
        a.synchronize().unwrap();
        let exported = x.export_fd(MemoryHandleType::OpaqueFd).unwrap();
        assert_eq!(exported.info.device_uuid, Some(a.info().uuid));
        assert_eq!(exported.info.size, (n * 4) as u64);
        // SAFETY: an export of `x`'s memory by vkcompute, with its own description.
        let y = unsafe { b.import_buffer_fd::<u32>(exported, n) }.unwrap();
        assert_eq!(y.to_vec().unwrap(), data, "{path:?}: B sees A's write");
        // B writes, A reads after B synchronized.
        y.enqueue_fill(7).unwrap();
        y.create_sub_buffer::<u32>(10, 5)
            .unwrap()
            .enqueue_copy_from(&[1, 2, 3, 4, 5])
            .unwrap();
        b.synchronize().unwrap();
        let mut expected = vec![7u32; n];
        expected[10..15].copy_from_slice(&[1, 2, 3, 4, 5]);
        assert_eq!(x.to_vec().unwrap(), expected, "{path:?}: A sees B's writes");
        // A view exports its own range; a kernel-free round trip again.
        let view = x.create_sub_buffer::<u32>(100, 50).unwrap();
        view.enqueue_copy_from(&pattern(50, 9)).unwrap();
        a.synchronize().unwrap();
        let e = view.export_fd(MemoryHandleType::OpaqueFd).unwrap();
        assert_eq!((e.info.offset, e.info.size), (400, 200));
        // SAFETY: an export of `x`'s memory by vkcompute, with its own description.
        let z = unsafe { b.import_buffer_fd::<u32>(e, 50) }.unwrap();
        assert_eq!(z.to_vec().unwrap(), pattern(50, 9));
        // The exporter's buffer may go first: the imports hold the memory.
        drop(x);
        drop(view);
        a.synchronize().unwrap();
        assert_eq!(
            y.create_sub_buffer::<u32>(100, 50)
                .unwrap()
                .to_vec()
                .unwrap(),
            pattern(50, 9)
        );
        // `share_with` is export + import.
        let s = a.enqueue_create_exportable_buffer::<u32>(8).unwrap();
        s.enqueue_fill(3).unwrap();
        a.synchronize().unwrap();
        assert_eq!(s.share_with(&b).unwrap().to_vec().unwrap(), [3; 8]);
        drop((y, z, s));
        b.synchronize().unwrap();
        drop((a, b));
        assert_clean(&log_a, "the exporting context");
        assert_clean(&log_b, "the importing context");
    }
}

/// Every handle type the device exports, asked for on its own: the export
/// and an import on another context see each other's writes, `share_with`
/// and copies between the contexts go through it; all of them asked for
/// together either work or are refused as a combination. Both memory paths.
#[test]
fn each_exportable_handle_type_shares_between_contexts() {
    for path in PATHS {
        let (a, b) = two_contexts(path);
        let (log_a, log_b) = (
            a.diagnostics().validation_log(),
            b.diagnostics().validation_log(),
        );
        let types = a.exportable_handle_types();
        assert!(!types.is_empty(), "the device exports no memory");
        for t in [MemoryHandleType::OpaqueFd, MemoryHandleType::DmaBuf] {
            if !types.contains(&t) {
                println!("skipped: {t:?} on {path:?} (the device cannot export it)");
                continue;
            }
            let n = 1001;
            let x = a
                .enqueue_create_exportable_buffer_as::<u32>(n, &[t])
                .unwrap();
            assert_eq!(x.exportable_handle_types(), [t]);
            x.enqueue_copy_from(&pattern(n, 3)).unwrap();
            a.synchronize().unwrap();
            let exported = x.export_fd(t).unwrap();
            assert_eq!(exported.info.handle_type, t);
            if !b.importable_handle_types().contains(&t) {
                // SAFETY: an export of `x`'s memory by vkcompute, with its own
                // description.
                let e = unsafe { b.import_buffer_fd::<u32>(exported, n) }.unwrap_err();
                assert!(matches!(e, Error::Unsupported { .. }), "{t:?}: {e}");
                println!("skipped: {t:?} import on {path:?} (the device cannot import it)");
                continue;
            }
            // SAFETY: an export of `x`'s memory by vkcompute, with its own description.
            let y = unsafe { b.import_buffer_fd::<u32>(exported, n) }.unwrap();
            assert_eq!(y.to_vec().unwrap(), pattern(n, 3), "{t:?} {path:?}");
            y.create_sub_buffer::<u32>(7, 3)
                .unwrap()
                .enqueue_copy_from(&[9, 8, 7])
                .unwrap();
            b.synchronize().unwrap();
            let mut expected = pattern(n, 3);
            expected[7..10].copy_from_slice(&[9, 8, 7]);
            assert_eq!(x.to_vec().unwrap(), expected, "{t:?} {path:?}");
            // share_with picks the buffer's own type.
            let s = x.share_with(&b).unwrap();
            assert_eq!(s.to_vec().unwrap(), expected);
            // A copy between the contexts, through an alias of `x`.
            let other = b.enqueue_create_buffer::<u32>(n).unwrap();
            other.enqueue_fill(11).unwrap();
            b.synchronize().unwrap();
            let before = b.diagnostics().live_objects().commands_recorded;
            other.enqueue_copy_to(&x).unwrap();
            assert_eq!(
                b.diagnostics().live_objects().commands_recorded,
                before + 1,
                "{t:?} {path:?}: one device copy, no host round trip"
            );
            b.synchronize().unwrap();
            assert_eq!(x.to_vec().unwrap(), vec![11; n], "{t:?} {path:?}");
            drop((x, y, s, other));
            a.synchronize().unwrap();
            b.synchronize().unwrap();
        }
        match a.enqueue_create_exportable_buffer_as::<u32>(16, &types) {
            Ok(all) => assert_eq!(all.exportable_handle_types(), types),
            Err(e) => {
                assert!(matches!(e, Error::Unsupported { .. }), "{e}");
                assert!(e.to_string().contains("together"), "{e}");
                println!("the device cannot export {types:?} in one allocation: {e}");
            }
        }
        drop((a, b));
        assert_clean(&log_a, "the exporting context");
        assert_clean(&log_b, "the importing context");
    }
}

#[test]
fn refusals_are_clear_errors_and_leave_the_contexts_usable() {
    let (a, b) = two_contexts(Path::Direct);
    let (log_a, log_b) = (
        a.diagnostics().validation_log(),
        b.diagnostics().validation_log(),
    );
    let x = a.enqueue_create_exportable_buffer::<u32>(64).unwrap();
    x.enqueue_fill(5).unwrap();
    a.synchronize().unwrap();
    let export = || x.export_fd(MemoryHandleType::OpaqueFd).unwrap();

    // A buffer not created exportable; an empty one.
    let plain = a.enqueue_create_buffer::<u32>(4).unwrap();
    let e = plain.export_fd(MemoryHandleType::OpaqueFd).unwrap_err();
    assert!(matches!(e, Error::NotExportable { .. }), "{e}");
    assert!(
        e.to_string().contains("enqueue_create_exportable_buffer"),
        "{e}"
    );
    let empty = a.enqueue_create_exportable_buffer::<u32>(0).unwrap();
    assert!(matches!(
        empty.export_fd(MemoryHandleType::OpaqueFd),
        Err(Error::NotExportable { .. })
    ));
    // A handle type the buffer was not created exportable as.
    for t in [MemoryHandleType::DmaBuf, MemoryHandleType::OpaqueWin32] {
        if !x.exportable_handle_types().contains(&t) {
            let e = x.export_fd(t).unwrap_err();
            assert!(matches!(e, Error::NotExportable { .. }), "{e}");
        }
    }
    // A dma-buf import where the device has none (where it has, the
    // driver may take an opaque fd's memory as a dma-buf: nothing to refuse).
    if b.importable_handle_types()
        .contains(&MemoryHandleType::DmaBuf)
    {
        println!("skipped: the dma-buf import refusal (this device imports dma-bufs)");
    } else {
        let mut dma = export();
        dma.info.handle_type = MemoryHandleType::DmaBuf;
        // SAFETY: a change of a real export's description (or a handle) that the
        // import's checks refuse before the driver sees it, as asserted.
        let e = unsafe { b.import_buffer_fd::<u32>(dma, 64) }.unwrap_err();
        assert!(matches!(e, Error::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("dma_buf"), "{e}");
    }
    // Handle types asked for: none; one the device cannot export.
    let e = a
        .enqueue_create_exportable_buffer_as::<u32>(4, &[])
        .unwrap_err();
    assert!(matches!(e, Error::NotExportable { .. }), "{e}");
    for t in [MemoryHandleType::DmaBuf, MemoryHandleType::OpaqueWin32] {
        if !a.exportable_handle_types().contains(&t) {
            for len in [0, 4] {
                let e = a
                    .enqueue_create_exportable_buffer_as::<u32>(len, &[t])
                    .unwrap_err();
                assert!(matches!(e, Error::Unsupported { .. }), "{e}");
            }
        }
    }

    // More elements than exported; a range beyond the memory.
    // SAFETY: a change of a real export's description (or a handle) that the
    // import's checks refuse before the driver sees it, as asserted.
    let e = unsafe { b.import_buffer_fd::<u32>(export(), 65) }.unwrap_err();
    assert!(
        matches!(
            e,
            Error::ImportSize {
                needed: 260,
                available: 256,
                ..
            }
        ),
        "{e}"
    );
    let mut beyond = export();
    beyond.info.offset = beyond.info.allocation_size;
    // SAFETY: a change of a real export's description (or a handle) that the
    // import's checks refuse before the driver sees it, as asserted.
    let e = unsafe { b.import_buffer_fd::<u32>(beyond, 64) }.unwrap_err();
    assert!(matches!(e, Error::ImportSize { .. }), "{e}");

    // A range that does not start aligned for the element type.
    let mut odd = export();
    odd.info.offset = 2;
    odd.info.size = 8;
    // SAFETY: a change of a real export's description (or a handle) that the
    // import's checks refuse before the driver sees it, as asserted.
    let e = unsafe { b.import_buffer_fd::<u32>(odd, 2) }.unwrap_err();
    assert!(
        matches!(
            e,
            Error::Misaligned {
                offset: 2,
                alignment: 4,
                ..
            }
        ),
        "{e}"
    );
    // Imported memory is exported again only by its exporter.
    // SAFETY: an export of `x`'s memory by vkcompute, with its own description.
    let imported = unsafe { b.import_buffer_fd::<u32>(export(), 64) }.unwrap();
    let e = imported.export_fd(MemoryHandleType::OpaqueFd).unwrap_err();
    assert!(matches!(e, Error::NotExportable { .. }), "{e}");
    drop(imported);

    // Another device's UUID, another driver's.
    let mut foreign = export();
    foreign.info.device_uuid = Some([0xab; 16]);
    // SAFETY: a change of a real export's description (or a handle) that the
    // import's checks refuse before the driver sees it, as asserted.
    let e = unsafe { b.import_buffer_fd::<u32>(foreign, 64) }.unwrap_err();
    assert!(matches!(e, Error::ForeignDevice { .. }), "{e}");
    assert!(e.to_string().contains("abababab"), "{e}");
    let mut other_driver = export();
    other_driver.info.driver_uuid = Some([1; 16]);
    assert!(matches!(
        // SAFETY: a change of a real export's description (or a handle) that the
        // import's checks refuse before the driver sees it, as asserted.
        unsafe { b.import_buffer_fd::<u32>(other_driver, 64) },
        Err(Error::ForeignDevice { .. })
    ));

    // A pipe is not memory; a file too small for the size claimed.
    let (reader, _writer) = std::io::pipe().unwrap();
    let pipe = ExportedMemoryFd {
        fd: OwnedFd::from(reader),
        info: ExternalMemoryInfo::foreign(MemoryHandleType::OpaqueFd, 4096),
    };
    // SAFETY: a pipe is refused before the driver sees it, as asserted.
    let e = unsafe { b.import_buffer_fd::<u32>(pipe, 16) }.unwrap_err();
    assert!(matches!(e, Error::InvalidHandle { .. }), "{e}");
    assert!(e.to_string().contains("pipe"), "{e}");
    let small = ExportedMemoryFd {
        fd: unlinked_file(100),
        info: ExternalMemoryInfo::foreign(MemoryHandleType::OpaqueFd, 4096),
    };
    // SAFETY: a regular file shorter than the allocation claimed is refused
    // before the driver sees it, as asserted.
    let e = unsafe { b.import_buffer_fd::<u32>(small, 16) }.unwrap_err();
    assert!(
        matches!(
            e,
            Error::ImportSize {
                needed: 4096,
                available: 100,
                ..
            }
        ),
        "{e}"
    );

    // A file of the size claimed that no driver made: the driver refuses
    // it, and the descriptor is closed once (a driver may close it itself
    // on refusal, as lavapipe does: closing it again would close whatever
    // took its number meanwhile, and abort this debug build).
    for _ in 0..3 {
        let foreign_file = ExportedMemoryFd {
            fd: unlinked_file(4096),
            info: ExternalMemoryInfo::foreign(MemoryHandleType::OpaqueFd, 4096),
        };
        // SAFETY: not memory of a Vulkan driver, which a driver can only
        // refuse (it checks what it reads or maps of its own memory first).
        let e = unsafe { b.import_buffer_fd::<u32>(foreign_file, 16) }.unwrap_err();
        assert!(
            matches!(e, Error::InvalidHandle { .. } | Error::OutOfMemory { .. }),
            "{e}"
        );
    }
    // The driver may report its refusals (lavapipe does, as a warning that
    // names the error): those and nothing else.
    for m in log_b.take() {
        assert!(
            m.to_string().contains("VK_ERROR_INVALID_EXTERNAL_HANDLE"),
            "{m}"
        );
    }

    // Descriptions travel as bytes; anything else is refused.
    let info = export().info;
    assert_eq!(
        ExternalMemoryInfo::from_bytes(&info.to_bytes()).unwrap(),
        info
    );
    assert!(matches!(
        ExternalMemoryInfo::from_bytes(&[0; 3]),
        Err(Error::InvalidHandle { .. })
    ));
    let mut bad = info.to_bytes();
    bad[0] = 9;
    assert!(matches!(
        ExternalMemoryInfo::from_bytes(&bad),
        Err(Error::InvalidHandle { .. })
    ));
    assert_eq!(bad.len(), EXTERNAL_MEMORY_INFO_BYTES);

    // Both contexts still work, and the memory is still shared.
    // SAFETY: an export of `x`'s memory by vkcompute, with its own description.
    let y = unsafe { b.import_buffer_fd::<u32>(export(), 64) }.unwrap();
    assert_eq!(y.to_vec().unwrap(), [5; 64]);
    plain.enqueue_fill(1).unwrap();
    assert_eq!(plain.to_vec().unwrap(), [1; 4]);
    drop((x, y, plain, empty));
    drop((a, b));
    assert_clean(&log_a, "the exporting context");
    assert_clean(&log_b, "the importing context");
}

#[test]
fn host_memory_is_imported_without_copies() {
    for path in PATHS {
        common::run_with(options(path), "host memory import", |ctx| {
            let align = ctx
                .host_import_alignment()
                .expect("lavapipe has VK_EXT_external_memory_host");
            let n = 5000;
            let mut mem = AlignedHostMemory::<u32>::with_alignment(n, align).unwrap();
            assert_eq!(mem.as_ptr() as usize % align, 0);
            assert!(mem.iter().all(|&v| v == 0));
            mem.copy_from_slice(&pattern(n, 3));
            let address = mem.as_ptr();
            let host = ctx.import_host_memory(mem).unwrap();
            // The buffer is the caller's allocation itself.
            assert_eq!(host.as_slice().unwrap().as_ptr(), address);
            let dev = ctx.enqueue_create_buffer::<u32>(n).unwrap();
            dev.enqueue_copy_from(&host).unwrap();
            assert_eq!(dev.to_vec().unwrap(), pattern(n, 3));
            dev.enqueue_fill(11).unwrap();
            dev.enqueue_copy_to(&host).unwrap();
            // Dropped right after enqueueing: freed once the copy is done.
            let clone = host.clone();
            drop(host);
            assert_eq!(clone.to_vec().unwrap(), vec![11; n]);
            clone.as_mut_slice().unwrap()[0] = 99;
            dev.enqueue_copy_from(&clone).unwrap();
            drop(clone);
            assert_eq!(dev.to_vec().unwrap()[..2], [99, 11]);

            // Misaligned sizes and addresses are refused before the driver.
            let small = AlignedHostMemory::<u32>::with_alignment(4, 64).unwrap();
            let e = ctx.import_host_memory(small).unwrap_err();
            assert!(matches!(e, Error::Misaligned { .. }), "{e}");
            assert!(matches!(
                AlignedHostMemory::<u32>::with_alignment(4, 3),
                Err(Error::Misaligned { .. })
            ));
            assert!(matches!(
                AlignedHostMemory::<u32>::new(usize::MAX),
                Err(Error::SizeOverflow { .. })
            ));
            dev.enqueue_fill(2).unwrap();
            assert_eq!(dev.to_vec().unwrap()[0], 2);
        });
    }
}

/// One mapping of a `memfd` of `len` bytes; unmapped (and `dropped` set)
/// when dropped.
struct Mapping {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
    dropped: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

// SAFETY: the mapping is plain shared memory; only the device touches it.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn of(fd: &OwnedFd, len: usize) -> Self {
        use std::os::fd::AsRawFd;
        // SAFETY: a shared read-write mapping of a descriptor this test
        // owns, of its whole length.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            )
        };
        assert_ne!(ptr, libc::MAP_FAILED);
        Mapping {
            ptr: std::ptr::NonNull::new(ptr.cast()).unwrap(),
            len,
            dropped: Default::default(),
        }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `of`, unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
        self.dropped
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

/// A `memfd` of `len` bytes.
fn memfd(len: usize) -> OwnedFd {
    use std::os::fd::FromRawFd;
    // SAFETY: a plain syscall; the descriptor is checked and then owned.
    let fd = unsafe { libc::memfd_create(c"vkcompute-test".as_ptr(), libc::MFD_CLOEXEC) };
    assert!(fd >= 0);
    // SAFETY: a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    let file = std::fs::File::from(fd);
    file.set_len(len as u64).unwrap();
    OwnedFd::from(file)
}

/// Two contexts import two mappings of one memfd: what one device's copies
/// and kernels write, the other reads; the mapping is dropped after the
/// last clone and the device's work; bad mappings are refused and dropped.
#[test]
fn a_host_mapping_two_contexts_import_is_one_memory() {
    use std::sync::atomic::Ordering::SeqCst;
    for path in PATHS {
        let (a, b) = two_contexts(path);
        let (log_a, log_b) = (
            a.diagnostics().validation_log(),
            b.diagnostics().validation_log(),
        );
        let align = a
            .host_import_alignment()
            .expect("VK_EXT_external_memory_host");
        let len = 1 << 20;
        let fd = memfd(len);
        let (ma, mb) = (Mapping::of(&fd, len), Mapping::of(&fd, len));
        let (gone_a, gone_b) = (ma.dropped.clone(), mb.dropped.clone());
        let (pa, pb) = (ma.ptr, mb.ptr);
        // SAFETY: each is a live mapping of `len` bytes, kept by its
        // `Mapping` (moved into the buffer); nothing else in this process
        // reaches it.
        let x = unsafe { a.import_host_mapping(pa, len, Box::new(ma)) }.unwrap();
        // SAFETY: as above.
        let y = unsafe { b.import_host_mapping(pb, len, Box::new(mb)) }.unwrap();
        assert_eq!((x.len(), y.len()), (len, len));
        // What A's device writes, B's device reads: one memory.
        let n = len / 4;
        let src = a.enqueue_create_buffer::<u32>(n).unwrap();
        src.enqueue_copy_from(&pattern(n, 7)[..]).unwrap();
        let xs = x.create_sub_buffer::<u32>(0, n).unwrap();
        xs.enqueue_copy_from(&src).unwrap();
        x.enqueue_release_to_external().unwrap();
        a.synchronize().unwrap();
        y.enqueue_acquire_from_external().unwrap();
        let dst = b.enqueue_create_buffer::<u32>(n).unwrap();
        dst.enqueue_copy_from(&y.create_sub_buffer::<u32>(0, n).unwrap())
            .unwrap();
        y.enqueue_release_to_external().unwrap();
        assert_eq!(dst.to_vec().unwrap(), pattern(n, 7));
        // A user's kernel on B's device reads and writes the imported
        // memory like any buffer: y = 2 x + y over 1,000 f32, in place,
        // and A's device sees the result.
        #[repr(C)]
        #[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
        struct Saxpy {
            a: f32,
            n: u32,
        }
        let m = 1000;
        let kernel = Kernel::new(&b, shaders::SAXPY, "main").unwrap();
        let (xv, yv): (Vec<f32>, Vec<f32>) = (0..m).map(|i| (i as f32, 0.5 * i as f32)).unzip();
        let xf = b.enqueue_create_buffer::<f32>(m).unwrap();
        xf.enqueue_copy_from(&xv[..]).unwrap();
        let yf = y.create_sub_buffer::<f32>(0, m).unwrap();
        yf.enqueue_copy_from(&yv[..]).unwrap();
        let args = Saxpy {
            a: 2.0,
            n: m as u32,
        };
        b.enqueue_function(
            &kernel,
            m.div_ceil(256) as u32,
            &[xf.arg(), yf.arg()],
            &args,
        )
        .unwrap();
        y.enqueue_release_to_external().unwrap();
        b.synchronize().unwrap();
        x.enqueue_acquire_from_external().unwrap();
        let seen = x.create_sub_buffer::<f32>(0, m).unwrap().to_vec().unwrap();
        let want: Vec<f32> = xv.iter().zip(&yv).map(|(x, y)| 2.0 * x + y).collect();
        assert_eq!(seen, want, "A reads what B's kernel wrote");
        // Host transfers of the buffer itself are staged, and work.
        assert_eq!(
            y.create_sub_buffer::<f32>(0, 4).unwrap().to_vec().unwrap(),
            want[..4]
        );
        // The mapping outlives the last clone and the device's work on it.
        xs.enqueue_fill(9).unwrap();
        drop((x, xs));
        a.synchronize().unwrap();
        assert!(gone_a.load(SeqCst), "dropped once the device is done");
        assert!(!gone_b.load(SeqCst));
        drop((y, yf));
        b.synchronize().unwrap();
        assert!(gone_b.load(SeqCst));
        // Misaligned and empty mappings are refused, and dropped.
        let m = Mapping::of(&fd, len);
        let (p, gone) = (m.ptr, m.dropped.clone());
        let off = std::ptr::NonNull::new(p.as_ptr().wrapping_add(align / 2)).unwrap();
        // SAFETY: the bytes are mapped (refused before any use).
        let e = unsafe { a.import_host_mapping(off, len - align, Box::new(m)) }.unwrap_err();
        assert!(matches!(e, Error::Misaligned { .. }), "{e}");
        assert!(gone.load(SeqCst));
        let m = Mapping::of(&fd, len);
        // SAFETY: as above.
        let e = unsafe { a.import_host_mapping(m.ptr, 0, Box::new(m)) }.unwrap_err();
        assert!(matches!(e, Error::InvalidHandle { .. }), "{e}");
        // Past the device's limit on one allocation: refused before the
        // driver (a memfd that large reserves no memory until touched).
        let most = a.info().limits.max_memory_allocation_size;
        let huge = usize::try_from(most)
            .ok()
            .and_then(|m| m.checked_next_multiple_of(align))
            .and_then(|m| m.checked_add(align))
            .expect("a limit this test can exceed by one aligned block");
        let big = memfd(huge);
        let m = Mapping::of(&big, huge);
        let (p, gone) = (m.ptr, m.dropped.clone());
        // SAFETY: as above; refused before any use.
        let e = unsafe { a.import_host_mapping(p, huge, Box::new(m)) }.unwrap_err();
        assert!(matches!(e, Error::TooLarge { .. }), "{e}");
        assert!(gone.load(SeqCst));
        let e = AlignedHostMemory::<u8>::with_alignment(huge, align)
            .and_then(|mem| a.import_host_memory(mem))
            .map(drop)
            .unwrap_err();
        assert!(
            matches!(e, Error::TooLarge { .. } | Error::OutOfMemory { .. }),
            "{e}"
        );
        drop((a, b));
        assert_clean(&log_a, "the importing context A");
        assert_clean(&log_b, "the importing context B");
    }
}

#[test]
fn semaphores_order_work_across_devices_or_fail_clearly() {
    let (a, b) = two_contexts(Path::Direct);
    let (log_a, log_b) = (
        a.diagnostics().validation_log(),
        b.diagnostics().validation_log(),
    );
    let n = 8 << 20;
    let x = a.enqueue_create_exportable_buffer::<u32>(n).unwrap();
    x.enqueue_fill(1).unwrap();
    a.synchronize().unwrap();
    let y = x.share_with(&b).unwrap();
    let tail = y.create_sub_buffer::<u32>(n - 4, 4).unwrap();
    // Between devices, a device-side wait on a context is refused.
    assert!(matches!(
        b.enqueue_wait_for(&a),
        Err(Error::DifferentDevice { .. })
    ));
    match a.export_semaphore_fd() {
        // A device with VK_KHR_external_semaphore_fd: B waits on the device.
        Ok(first) => {
            let mut foreign = a.export_semaphore_fd().unwrap();
            foreign.device_uuid = [0xcd; 16];
            assert!(matches!(
                b.import_semaphore_fd(foreign),
                Err(Error::ForeignDevice { .. })
            ));
            let semaphore = b.import_semaphore_fd(first).unwrap();
            for round in 2..5u32 {
                x.enqueue_fill(round).unwrap();
                let value = a.export_semaphore_fd().unwrap().value;
                b.enqueue_wait_semaphore(&semaphore, value).unwrap();
                assert_eq!(tail.to_vec().unwrap(), [round; 4]);
                assert!(semaphore.value().unwrap() >= value);
            }
        }
        // lavapipe: no semaphore fds. The error says so and names the fallback.
        Err(e) => {
            assert!(matches!(e, Error::Unsupported { .. }), "{e}");
            assert!(
                e.to_string().contains("VK_KHR_external_semaphore_fd"),
                "{e}"
            );
            assert!(e.to_string().contains("synchronize()"), "{e}");
        }
    }
    // The explicit host fallback orders B's reads after A's writes.
    for round in 5..8u32 {
        x.enqueue_fill(round).unwrap();
        a.synchronize().unwrap();
        assert_eq!(tail.to_vec().unwrap(), [round; 4]);
    }
    drop((x, y, tail));
    drop((a, b));
    assert_clean(&log_a, "the exporting context");
    assert_clean(&log_b, "the importing context");
}

#[test]
fn copies_between_contexts_use_shared_memory_where_an_end_is_exportable() {
    for path in PATHS {
        let (a, b) = two_contexts(path);
        let (log_a, log_b) = (
            a.diagnostics().validation_log(),
            b.diagnostics().validation_log(),
        );
        let n = 1 << 16;
        let src = a.enqueue_create_buffer::<u32>(n).unwrap();
        src.enqueue_copy_from(&pattern(n, 4)).unwrap();
        // Into an exportable buffer of B: A copies into its alias.
        let shared_dst = b.enqueue_create_exportable_buffer::<u32>(n).unwrap();
        shared_dst.enqueue_fill(0).unwrap();
        a.synchronize().unwrap();
        let before = a.diagnostics().live_objects().commands_recorded;
        shared_dst.enqueue_copy_from(&src).unwrap();
        // One device copy on A, into B's memory: no host round trip.
        assert_eq!(a.diagnostics().live_objects().commands_recorded, before + 1);
        assert_eq!(shared_dst.to_vec().unwrap(), pattern(n, 4));
        // From an exportable buffer of B into a plain one of A (copy_to).
        shared_dst.enqueue_fill(6).unwrap();
        let back = a.enqueue_create_buffer::<u32>(n).unwrap();
        shared_dst.enqueue_copy_to(&back).unwrap();
        assert_eq!(back.to_vec().unwrap(), vec![6; n]);
        // Neither end exportable: through the host, as before.
        let plain = b.enqueue_create_buffer::<u32>(n).unwrap();
        let before = a.diagnostics().live_objects().commands_recorded;
        plain.enqueue_copy_from(&src).unwrap();
        if path == Path::Direct {
            // Read straight from A's host-visible memory: no command on A.
            assert_eq!(a.diagnostics().live_objects().commands_recorded, before);
        }
        assert_eq!(plain.to_vec().unwrap(), pattern(n, 4));
        // A mapped end refuses the copy and stays intact.
        let mapped = shared_dst.map_to_host().unwrap();
        assert!(matches!(
            shared_dst.enqueue_copy_from(&src),
            Err(Error::BufferMapped { .. })
        ));
        assert!(
            !mapped.is_direct(),
            "shared memory is never mapped directly"
        );
        assert_eq!(mapped[0], 6);
        drop(mapped);
        drop((src, shared_dst, back, plain));
        drop((a, b));
        assert_clean(&log_a, "context A");
        assert_clean(&log_b, "context B");
    }
}

const SOCKET_VAR: &str = "VKCOMPUTE_SHARE_SOCKET";
const PATH_VAR: &str = "VKCOMPUTE_SHARE_PATH";

/// Each fd handle type the device exports, on both memory paths, into a
/// child process that imports it (where its device can: the child reports
/// a clear refusal otherwise) and changes the data.
#[test]
fn a_child_process_reads_and_writes_the_shared_buffer() {
    for path in PATHS {
        let ctx = context_with(options(path));
        let log = ctx.diagnostics().validation_log();
        for t in [MemoryHandleType::OpaqueFd, MemoryHandleType::DmaBuf] {
            if !ctx.exportable_handle_types().contains(&t) {
                println!("skipped: {t:?} on {path:?} (the device cannot export it)");
                continue;
            }
            if !ctx.importable_handle_types().contains(&t) {
                println!("skipped: {t:?} on {path:?} (the device cannot import it)");
                continue;
            }
            share_with_a_child(&ctx, path, t);
        }
        drop(ctx);
        assert_clean(&log, "the parent process");
    }
}

fn share_with_a_child(ctx: &DeviceContext, path: Path, t: MemoryHandleType) {
    let n = 4096;
    let buf = ctx
        .enqueue_create_exportable_buffer_as::<u32>(n, &[t])
        .unwrap();
    buf.enqueue_copy_from(&pattern(n, 5)).unwrap();
    ctx.synchronize().unwrap();
    let exported = buf.export_fd(t).unwrap();

    let socket = std::env::temp_dir().join(format!("vkcompute-share-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let listener = UnixListener::bind(&socket).unwrap();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "child_process_side",
            "--exact",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(SOCKET_VAR, &socket)
        .env(PATH_VAR, format!("{path:?}"))
        .spawn()
        .unwrap();
    let (stream, _) = listener.accept().unwrap();
    let _ = std::fs::remove_file(&socket);
    fdpass::send_fd(&stream, exported.fd.as_fd(), &exported.info.to_bytes()).unwrap();
    drop(exported);
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "the child failed ({t:?}, {path:?}): {status}"
    );
    // The child doubled every element and wrote a marker at the end.
    let mut expected: Vec<u32> = pattern(n, 5).iter().map(|v| v.wrapping_mul(2)).collect();
    expected[n - 1] = 0xC0FFEE;
    assert_eq!(buf.to_vec().unwrap(), expected, "{t:?} {path:?}");
}

/// The child of `a_child_process_reads_and_writes_the_shared_buffer`:
/// receives the descriptor, imports it, checks and changes the data.
#[test]
#[ignore = "run by a_child_process_reads_and_writes_the_shared_buffer in a child process"]
fn child_process_side() {
    let socket = std::env::var_os(SOCKET_VAR).expect("started by the parent test");
    let path = match std::env::var(PATH_VAR).as_deref() {
        Ok("Staging") => Path::Staging,
        _ => Path::Direct,
    };
    let stream = UnixStream::connect(socket).unwrap();
    let mut info = [0u8; EXTERNAL_MEMORY_INFO_BYTES];
    let fd = fdpass::recv_fd(&stream, &mut info).unwrap();
    let info = ExternalMemoryInfo::from_bytes(&info).unwrap();
    let n = (info.size / 4) as usize;
    let ctx = context_with(options(path));
    let log = ctx.diagnostics().validation_log();
    // SAFETY: the parent exported the descriptor with `export_fd` and sent
    // it with that export's own description; it keeps the memory alive.
    let buf = unsafe { ctx.import_buffer_fd::<u32>(ExportedMemoryFd { fd, info }, n) }.unwrap();
    let data = buf.to_vec().unwrap();
    assert_eq!(data, pattern(n, 5), "the child sees the parent's data");
    let mut doubled: Vec<u32> = data.iter().map(|v| v.wrapping_mul(2)).collect();
    doubled[n - 1] = 0xC0FFEE;
    buf.enqueue_copy_from(&doubled).unwrap();
    ctx.synchronize().unwrap();
    drop(buf);
    drop(ctx);
    assert_clean(&log, "the child process");
}

/// A stream waits on the device for a sync file: another stream's export
/// where the device has sync fds (then the waiting stream's copy sees the
/// other's fill), else a clear error that leaves the context working.
#[test]
fn a_stream_waits_for_a_sync_fd_or_says_it_cannot() {
    common::run_with(options(Path::Direct), "sync fd wait", |ctx| {
        let other = ctx.new_stream().unwrap();
        let x = ctx.enqueue_create_buffer::<u32>(1 << 16).unwrap();
        x.enqueue_fill(9).unwrap();
        match ctx.export_sync_fd() {
            Ok(fd) => {
                other.enqueue_wait_sync_fd(fd).unwrap();
                let y = other.enqueue_create_buffer::<u32>(1 << 16).unwrap();
                y.enqueue_copy_from(&x).unwrap();
                assert_eq!(y.to_vec().unwrap(), vec![9; 1 << 16]);
            }
            Err(e) => {
                assert!(matches!(e, Error::Unsupported { .. }), "{e}");
                // Any descriptor: refused before the driver sees it.
                let (a, _b) = UnixStream::pair().unwrap();
                let e = other.enqueue_wait_sync_fd(OwnedFd::from(a)).unwrap_err();
                assert!(matches!(e, Error::Unsupported { .. }), "{e}");
                let text = e.to_string();
                assert!(text.contains("importing sync fds"), "{e}");
                assert!(text.contains("SYNC_FD"), "{e}");
                assert!(text.contains("on the host instead"), "{e}");
            }
        }
        // Both streams go on working.
        assert_eq!(x.to_vec().unwrap(), vec![9; 1 << 16]);
        let z = other.enqueue_create_buffer::<u32>(4).unwrap();
        z.enqueue_fill(3).unwrap();
        assert_eq!(z.to_vec().unwrap(), [3; 4]);
    });
}

#[test]
fn sync_fd_export_is_a_clear_error_where_the_device_cannot() {
    common::run_with(options(Path::Direct), "sync fd export", |ctx| {
        let x = ctx.enqueue_create_buffer::<u32>(16).unwrap();
        x.enqueue_fill(4).unwrap();
        match ctx.export_sync_fd() {
            // A device that exports sync fds: the fd is an open file.
            Ok(fd) => {
                let file = std::fs::File::from(fd);
                file.metadata().unwrap();
            }
            // lavapipe: no VK_KHR_external_semaphore_fd.
            Err(e) => {
                assert!(matches!(e, Error::Unsupported { .. }), "{e}");
                let text = e.to_string();
                assert!(text.contains("SYNC_FD"), "{e}");
                assert!(text.contains("VK_KHR_external_semaphore_fd"), "{e}");
                assert!(text.contains("synchronize()"), "{e}");
            }
        }
        // The context goes on working.
        assert_eq!(x.to_vec().unwrap(), [4; 16]);
    });
}

#[test]
fn release_and_acquire_hand_shared_memory_between_contexts() {
    for path in PATHS {
        let (a, b) = two_contexts(path);
        let (log_a, log_b) = (
            a.diagnostics().validation_log(),
            b.diagnostics().validation_log(),
        );
        let n = 5000;
        let x = a.enqueue_create_exportable_buffer::<u32>(n).unwrap();
        x.enqueue_copy_from(&pattern(n, 21)).unwrap();
        // A hands the memory over; the release completes before B acquires.
        x.enqueue_release_to_external().unwrap();
        a.synchronize().unwrap();
        let y = x.share_with(&b).unwrap();
        y.enqueue_acquire_from_external().unwrap();
        assert_eq!(
            y.to_vec().unwrap(),
            pattern(n, 21),
            "{path:?}: B sees A's data"
        );
        // B writes part of it and hands it back.
        let part = y.create_sub_buffer::<u32>(100, 200).unwrap();
        part.enqueue_copy_from(&pattern(200, 22)).unwrap();
        y.enqueue_release_to_external().unwrap();
        b.synchronize().unwrap();
        x.enqueue_acquire_from_external().unwrap();
        let mut expected = pattern(n, 21);
        expected[100..300].copy_from_slice(&pattern(200, 22));
        assert_eq!(x.to_vec().unwrap(), expected, "{path:?}: A sees B's writes");
        // A view hands over its own range.
        let view = x.create_sub_buffer::<u32>(8, 8).unwrap();
        view.enqueue_release_to_external().unwrap();
        view.enqueue_acquire_from_external().unwrap();
        view.enqueue_fill(9).unwrap();
        assert_eq!(view.to_vec().unwrap(), [9; 8]);
        // Memory that is not shared has no owner outside the device.
        let plain = a.enqueue_create_buffer::<u32>(4).unwrap();
        let e = plain.enqueue_release_to_external().unwrap_err();
        assert!(matches!(e, Error::NotExportable { .. }), "{e}");
        let e = plain.enqueue_acquire_from_external().unwrap_err();
        assert!(matches!(e, Error::NotExportable { .. }), "{e}");
        plain.enqueue_fill(1).unwrap();
        assert_eq!(plain.to_vec().unwrap(), [1; 4]);
        drop((x, y, part, view, plain));
        drop((a, b));
        assert_clean(&log_a, "the releasing context");
        assert_clean(&log_b, "the acquiring context");
    }
}

#[test]
fn empty_ranges_of_shared_memory_hand_over_nothing() {
    // A view of length 0 (at the start, inside, at the buffer's end) owns
    // no memory: its release and acquire record no barrier (one of size 0,
    // or at offset = size, is invalid) and order nothing; memory that is
    // not shared is still refused.
    for path in PATHS {
        let a = context_with(options(path));
        let log = a.diagnostics().validation_log();
        let n = 64;
        let x = a.enqueue_create_exportable_buffer::<u32>(n).unwrap();
        x.enqueue_fill(3).unwrap();
        for at in [0, 5, n] {
            let empty = x.create_sub_buffer::<u32>(at, 0).unwrap();
            empty.enqueue_release_to_external().unwrap();
            empty.enqueue_acquire_from_external().unwrap();
        }
        let bytes = x.create_sub_buffer::<u8>(4 * n, 0).unwrap();
        bytes.enqueue_release_to_external().unwrap();
        bytes.enqueue_acquire_from_external().unwrap();
        a.synchronize().unwrap();
        assert_eq!(x.to_vec().unwrap(), [3; 64]);
        let plain = a.enqueue_create_buffer::<u32>(4).unwrap();
        let e = plain
            .create_sub_buffer::<u32>(4, 0)
            .unwrap()
            .enqueue_release_to_external()
            .unwrap_err();
        assert!(matches!(e, Error::NotExportable { .. }), "{e}");
        drop((x, bytes, plain));
        drop(a);
        assert_clean(&log, &format!("empty hand-overs, {path:?}"));
    }
}

#[test]
fn win32_handles_are_clear_errors_without_the_win32_extensions() {
    let (a, b) = two_contexts(Path::Direct);
    let (log_a, log_b) = (
        a.diagnostics().validation_log(),
        b.diagnostics().validation_log(),
    );
    let x = a.enqueue_create_exportable_buffer::<u32>(64).unwrap();
    x.enqueue_fill(2).unwrap();
    // lavapipe (and every driver outside Windows) has neither
    // VK_KHR_external_memory_win32 nor VK_KHR_external_semaphore_win32.
    let e = x.export_win32().unwrap_err();
    assert!(matches!(e, Error::NotExportable { .. }), "{e}");
    assert!(e.to_string().contains("Win32"), "{e}");
    let e = x.export_fd(MemoryHandleType::OpaqueWin32).unwrap_err();
    assert!(matches!(e, Error::NotExportable { .. }), "{e}");
    assert!(e.to_string().contains("export_win32"), "{e}");
    // SAFETY: 0 is no handle; nothing is closed outside Windows.
    let handle = unsafe { Win32Handle::from_raw(0) };
    let memory = ExportedMemoryWin32 {
        handle,
        info: ExternalMemoryInfo::foreign(MemoryHandleType::OpaqueWin32, 4096),
    };
    // SAFETY: the device has no Win32 imports: refused before the driver
    // sees the handle, as asserted.
    let e = unsafe { b.import_buffer_win32::<u32>(memory, 16) }.unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(
        e.to_string().contains("VK_KHR_external_memory_win32"),
        "{e}"
    );
    // An fd described as a Win32 handle is refused the same way.
    let mut described = x.export_fd(MemoryHandleType::OpaqueFd).unwrap();
    described.info.handle_type = MemoryHandleType::OpaqueWin32;
    // SAFETY: a change of a real export's description (or a handle) that the
    // import's checks refuse before the driver sees it, as asserted.
    let e = unsafe { b.import_buffer_fd::<u32>(described, 16) }.unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    let e = a.export_semaphore_win32().unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    assert!(
        e.to_string().contains("VK_KHR_external_semaphore_win32"),
        "{e}"
    );
    let semaphore = ExportedSemaphoreWin32 {
        // SAFETY: as above.
        handle: unsafe { Win32Handle::from_raw(0) },
        value: 1,
        device_uuid: a.info().uuid,
    };
    let e = b.import_semaphore_win32(semaphore).unwrap_err();
    assert!(matches!(e, Error::Unsupported { .. }), "{e}");
    // The description of a Win32 handle travels as bytes too.
    let info = ExternalMemoryInfo::foreign(MemoryHandleType::OpaqueWin32, 8192);
    assert_eq!(
        ExternalMemoryInfo::from_bytes(&info.to_bytes()).unwrap(),
        info
    );
    // Both contexts still work.
    a.synchronize().unwrap();
    assert_eq!(x.share_with(&b).unwrap().to_vec().unwrap(), [2; 64]);
    drop(x);
    drop((a, b));
    assert_clean(&log_a, "context A");
    assert_clean(&log_b, "context B");
}

#[test]
fn copies_between_contexts_reuse_one_alias_freed_with_either_side() {
    let (a, b) = two_contexts(Path::Direct);
    let (log_a, log_b) = (
        a.diagnostics().validation_log(),
        b.diagnostics().validation_log(),
    );
    let n = 1 << 14;
    let src = a.enqueue_create_exportable_buffer::<u32>(n).unwrap();
    let dst = b.enqueue_create_buffer::<u32>(n).unwrap();
    assert_eq!(b.shared_aliases(), SharedAliases::default());
    for round in 0..4u32 {
        src.enqueue_copy_from(&pattern(n, round)).unwrap();
        // B's device copies through its alias of A's memory.
        dst.enqueue_copy_from(&src).unwrap();
        assert_eq!(dst.to_vec().unwrap(), pattern(n, round));
        // Views of the same memory go through the same alias too.
        let half = src.create_sub_buffer::<u32>(n / 2, n / 2).unwrap();
        let back = b.enqueue_create_buffer::<u32>(n / 2).unwrap();
        back.enqueue_copy_from(&half).unwrap();
        assert_eq!(back.to_vec().unwrap(), pattern(n, round)[n / 2..]);
    }
    // One import for all eight copies.
    let kept = SharedAliases {
        kept: 1,
        imported: 1,
    };
    assert_eq!(b.shared_aliases(), kept);
    assert_eq!(a.shared_aliases(), SharedAliases::default());

    // The exporter goes first: once A frees its memory, B's alias goes too.
    drop(src);
    a.synchronize().unwrap();
    assert_eq!(b.shared_aliases().kept, 0);
    assert_eq!(dst.to_vec().unwrap(), pattern(n, 3));

    // The importer goes first: its device destroys the alias, and the
    // exporter goes on working with other contexts.
    let src = a.enqueue_create_exportable_buffer::<u32>(n).unwrap();
    src.enqueue_fill(7).unwrap();
    dst.enqueue_copy_from(&src).unwrap();
    assert_eq!(b.shared_aliases().kept, 1);
    assert_eq!(b.shared_aliases().imported, 2);
    drop(dst);
    drop(b);
    assert_clean(&log_b, "the importing context");
    let c = context_with(options(Path::Direct));
    let log_c = c.diagnostics().validation_log();
    let other = c.enqueue_create_buffer::<u32>(n).unwrap();
    other.enqueue_copy_from(&src).unwrap();
    assert_eq!(other.to_vec().unwrap(), vec![7; n]);
    drop(src);
    a.synchronize().unwrap();
    assert_eq!(c.shared_aliases().kept, 0);
    drop((other, c));
    drop(a);
    assert_clean(&log_a, "the exporting context");
    assert_clean(&log_c, "the third context");
}

/// Two threads copy out of one exportable buffer into another device at
/// once, many times: each copy sees the whole buffer, the device keeps at
/// most one alias of it (two made at once: one is destroyed), and nothing
/// is left when the exporter goes.
#[test]
fn two_threads_copying_through_one_alias_at_once() {
    let (a, b) = two_contexts(Path::Direct);
    let (log_a, log_b) = (
        a.diagnostics().validation_log(),
        b.diagnostics().validation_log(),
    );
    let n = 1 << 14;
    let src = a.enqueue_create_exportable_buffer::<u32>(n).unwrap();
    src.enqueue_copy_from(&pattern(n, 5)).unwrap();
    a.synchronize().unwrap();
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (b, src) = (b.clone(), &src);
            s.spawn(move || {
                let dst = b.enqueue_create_buffer::<u32>(n).unwrap();
                for _ in 0..20 {
                    dst.enqueue_fill(0).unwrap();
                    dst.enqueue_copy_from(src).unwrap();
                    assert!(dst.to_vec().unwrap() == pattern(n, 5), "a copy was torn");
                }
            });
        }
    });
    let aliases = b.shared_aliases();
    assert_eq!(aliases.kept, 1, "{aliases:?}");
    assert!((1..=40).contains(&aliases.imported), "{aliases:?}");
    drop(src);
    a.synchronize().unwrap();
    assert_eq!(b.shared_aliases().kept, 0);
    drop((a, b));
    assert_clean(&log_a, "the exporting context");
    assert_clean(&log_b, "the importing context");
}

#[test]
fn operations_on_an_exportable_buffer_wait_for_a_copy_to_another_context() {
    // One thread copies between the exportable buffer and buffers of
    // another context (both ways); another fills the exportable buffer
    // and reads it back. No operation fails (the copy is an operation of
    // the buffer, not a host borrow of it), and every read sees one
    // operation's whole result.
    for path in PATHS {
        let (a, b) = two_contexts(path);
        let (log_a, log_b) = (
            a.diagnostics().validation_log(),
            b.diagnostics().validation_log(),
        );
        let n = 4096;
        let rounds = 150u32;
        let shared = a.enqueue_create_exportable_buffer::<u32>(n).unwrap();
        shared.enqueue_fill(0).unwrap();
        let from = b.enqueue_create_buffer::<u32>(n).unwrap();
        from.enqueue_fill(7).unwrap();
        let to = b.enqueue_create_buffer::<u32>(n).unwrap();
        let uniform = |v: &[u32]| v.iter().all(|x| *x == v[0]);
        std::thread::scope(|s| {
            let (shared, from, to) = (&shared, &from, &to);
            s.spawn(move || {
                for i in 0..rounds {
                    if i % 2 == 0 {
                        shared.enqueue_copy_from(from).unwrap();
                    } else {
                        to.enqueue_copy_from(shared).unwrap();
                        let got = to.to_vec().unwrap();
                        assert!(uniform(&got), "{path:?}: a torn copy");
                    }
                }
            });
            s.spawn(move || {
                for i in 0..rounds {
                    let value = 100 + i;
                    shared.enqueue_fill(value).unwrap();
                    let got = shared.to_vec().unwrap();
                    assert!(uniform(&got), "{path:?}: a torn read");
                    assert!(got[0] == value || got[0] == 7, "{path:?}: read {}", got[0]);
                }
            });
        });
        // Two exportable buffers copied into each other from two threads:
        // each copy holds both ends, and neither waits for the other forever.
        let other = b.enqueue_create_exportable_buffer::<u32>(n).unwrap();
        other.enqueue_fill(9).unwrap();
        std::thread::scope(|s| {
            let (shared, other) = (&shared, &other);
            s.spawn(move || {
                for _ in 0..rounds / 3 {
                    shared.enqueue_copy_from(other).unwrap();
                }
            });
            s.spawn(move || {
                for _ in 0..rounds / 3 {
                    other.enqueue_copy_from(shared).unwrap();
                }
            });
        });
        assert_eq!(shared.to_vec().unwrap(), other.to_vec().unwrap());
        drop((shared, from, to, other));
        drop((a, b));
        assert_clean(&log_a, &format!("the exporting context, {path:?}"));
        assert_clean(&log_b, &format!("the other context, {path:?}"));
    }
}

/// Two threads import descriptors of one exported memory into two
/// contexts at once, many times (as ranks of one node do with a peer's
/// memory): every import succeeds and sees the data. Descriptors of one
/// export share one open file description (one file offset), which a
/// driver that reads a header through it (lavapipe: `lseek`, then `read`)
/// must not trip over: the import reopens such memory first
/// (`src/vk/external_memory.rs`).
#[test]
fn two_threads_importing_one_export_at_once() {
    let (a, b) = two_contexts(Path::Direct);
    let c = context_with(options(Path::Direct));
    let logs = [
        a.diagnostics().validation_log(),
        b.diagnostics().validation_log(),
        c.diagnostics().validation_log(),
    ];
    let n = 256;
    let x = a.enqueue_create_exportable_buffer::<u32>(n).unwrap();
    x.enqueue_copy_from(&pattern(n, 3)).unwrap();
    a.synchronize().unwrap();
    std::thread::scope(|s| {
        for to in [&b, &c] {
            let x = &x;
            s.spawn(move || {
                for round in 0..400 {
                    let e = x.export_fd(MemoryHandleType::OpaqueFd).unwrap();
                    // SAFETY: an export of `x`'s memory by vkcompute, with its own description.
                    let y = unsafe { to.import_buffer_fd::<u32>(e, n) }
                        .unwrap_or_else(|e| panic!("import {round}: {e}"));
                    if round % 50 == 0 {
                        assert_eq!(y.to_vec().unwrap(), pattern(n, 3));
                    }
                }
            });
        }
    });
    drop((x, a, b, c));
    for log in &logs {
        assert_clean(log, "a context");
    }
}
