//! The pipeline cache on disk (issue 12, warm start): a round trip between
//! devices, files that are corrupted, truncated or made for another device
//! are ignored, the option and the environment variable turn it off, and
//! devices writing at once never leave a torn file. Every test uses a
//! directory of its own under the system's temporary directory.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::path::{Path, PathBuf};

use common::{assert_clean, context_with, Path as MemoryPath, TempDir};
use vkcompute::{ContextOptions, DeviceContext, Kernel};

fn options(dir: &Path) -> ContextOptions {
    common::options(MemoryPath::Direct).pipeline_cache_dir(Some(dir.to_path_buf()))
}

/// Loads `VECTOR_ADD` with workgroup size `size`, runs it and checks it.
fn run_kernel(ctx: &DeviceContext, size: u32) {
    let kernel = Kernel::builder(vkcompute::shaders::VECTOR_ADD)
        .specialize(0, size)
        .build(ctx)
        .unwrap();
    let n = 1000usize;
    let a: Vec<f32> = (0..n).map(|i| i as f32 * 0.5 + 1.0).collect();
    let b: Vec<f32> = (0..n).map(|i| i as f32 * 0.25 + 2.0).collect();
    let (x, y, out) = (
        ctx.enqueue_create_buffer::<f32>(n).unwrap(),
        ctx.enqueue_create_buffer::<f32>(n).unwrap(),
        ctx.enqueue_create_buffer::<f32>(n).unwrap(),
    );
    x.enqueue_copy_from(&a[..]).unwrap();
    y.enqueue_copy_from(&b[..]).unwrap();
    let groups = (n as u32).div_ceil(size);
    ctx.enqueue_function(&kernel, groups, &[x.arg(), y.arg(), out.arg()], &(n as u32))
        .unwrap();
    let expected: Vec<f32> = a.iter().zip(&b).map(|(p, q)| p + q).collect();
    assert_eq!(out.to_vec().unwrap(), expected);
}

/// Opens a device with `options`, runs the kernel at each size, closes the
/// device (which writes the cache) and returns whether the cache was
/// loaded and the file it is saved to.
fn session(options: ContextOptions, sizes: &[u32]) -> (bool, Option<PathBuf>) {
    let ctx = context_with(options);
    let log = ctx.diagnostics().validation_log();
    let loaded = ctx.diagnostics().pipeline_cache_loaded();
    let file = ctx
        .diagnostics()
        .pipeline_cache_file()
        .map(Path::to_path_buf);
    for &size in sizes {
        run_kernel(&ctx, size);
    }
    drop(ctx);
    assert_clean(&log, "a pipeline-cache session");
    (loaded, file)
}

/// 64-bit FNV-1a, as the cache file's header holds it.
fn fnv(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The driver data of a cache file, checked as vkcompute checks it.
fn payload(file: &Path) -> Vec<u8> {
    let bytes = std::fs::read(file).unwrap();
    assert_eq!(&bytes[..8], b"VKCPIPE1");
    let len = u64::from_le_bytes(bytes[8..16].try_into().unwrap());
    let hash = u64::from_le_bytes(bytes[16..24].try_into().unwrap());
    let data = bytes[24..].to_vec();
    assert_eq!(data.len() as u64, len);
    assert_eq!(fnv(&data), hash);
    data
}

/// A cache file holding `data` with an intact vkcompute header.
fn with_header(data: &[u8]) -> Vec<u8> {
    let mut bytes = b"VKCPIPE1".to_vec();
    bytes.extend_from_slice(&(data.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&fnv(data).to_le_bytes());
    bytes.extend_from_slice(data);
    bytes
}

#[test]
fn the_cache_round_trips_between_devices() {
    let dir = TempDir::new("round-trip");
    let (loaded, file) = session(options(&dir.0), &[64, 128]);
    assert!(!loaded, "an empty directory has no cache");
    let file = file.expect("a cache file");
    assert!(file.starts_with(&dir.0), "{file:?}");
    // The driver's header: version one, then this device's vendor and
    // device IDs and cache UUID.
    let data = payload(&file);
    assert!(data.len() >= 32);
    assert_eq!(u32::from_le_bytes(data[4..8].try_into().unwrap()), 1);

    let (loaded, again) = session(options(&dir.0), &[64, 128, 256]);
    assert!(loaded, "the second device starts warm");
    assert_eq!(again.as_deref(), Some(file.as_path()));
    payload(&file);
    // Nothing is left beside the cache file.
    let names: Vec<_> = std::fs::read_dir(&dir.0).unwrap().collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn corrupted_truncated_and_foreign_files_are_ignored() {
    let dir = TempDir::new("bad-files");
    let (_, file) = session(options(&dir.0), &[64]);
    let file = file.unwrap();
    let good = std::fs::read(&file).unwrap();
    let data = payload(&file);

    let mut flipped = good.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 0xff;
    let mut foreign_vendor = data.clone();
    foreign_vendor[8] ^= 0x5a;
    let mut foreign_uuid = data.clone();
    foreign_uuid[20] ^= 0x01;
    let mut old_version = data.clone();
    old_version[4] = 7;
    let cases: Vec<(&str, Vec<u8>)> = vec![
        ("empty", Vec::new()),
        (
            "garbage",
            (0..4096u32).map(|i| (i * 37 % 251) as u8).collect(),
        ),
        ("truncated", good[..good.len() - 10].to_vec()),
        ("header only", good[..24].to_vec()),
        ("a flipped byte", flipped),
        ("another vendor", with_header(&foreign_vendor)),
        ("another driver (cache UUID)", with_header(&foreign_uuid)),
        ("an unknown header version", with_header(&old_version)),
        ("driver data alone", data.clone()),
    ];
    for (what, bytes) in cases {
        std::fs::write(&file, &bytes).unwrap();
        let (loaded, _) = session(options(&dir.0), &[64]);
        assert!(!loaded, "{what}: the file should have been ignored");
        // The device wrote a good cache back, which the next one loads.
        payload(&file);
        let (loaded, _) = session(options(&dir.0), &[64]);
        assert!(loaded, "{what}: the rewritten cache should load");
    }
}

#[test]
fn the_option_and_the_variable_turn_the_cache_off() {
    let dir = TempDir::new("off");
    let (loaded, file) = session(common::options(MemoryPath::Direct), &[64]);
    assert!(!loaded);
    assert_eq!(file, None);

    // The variable names the directory where the option is left alone...
    let unset = || ContextOptions::new().validation(true).force_staging(false);
    std::env::set_var("VKCOMPUTE_PIPELINE_CACHE", &dir.0);
    let (_, file) = session(unset(), &[64]);
    assert!(
        file.as_ref().is_some_and(|f| f.starts_with(&dir.0)),
        "{file:?}"
    );
    let (loaded, _) = session(unset(), &[64]);
    assert!(loaded);
    // ...`off` turns it off...
    std::env::set_var("VKCOMPUTE_PIPELINE_CACHE", "off");
    let (loaded, file) = session(unset(), &[64]);
    assert!(!loaded);
    assert_eq!(file, None);
    // ...and the option wins over the variable.
    let (loaded, file) = session(options(&dir.0), &[64]);
    assert!(loaded);
    assert!(file.is_some());
    std::env::remove_var("VKCOMPUTE_PIPELINE_CACHE");

    // With the cache off, nothing is written.
    let empty = TempDir::new("off-empty");
    let (_, file) = session(
        common::options(MemoryPath::Direct).pipeline_cache_dir(None),
        &[64, 128],
    );
    assert_eq!(file, None);
    assert_eq!(std::fs::read_dir(&empty.0).unwrap().count(), 0);
}

#[test]
fn devices_writing_at_once_never_leave_a_torn_file() {
    let dir = TempDir::new("concurrent");
    for round in 0..3u32 {
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let dir = &dir.0;
                s.spawn(move || {
                    // Each device makes pipelines of its own (its own
                    // workgroup sizes), so each writes a different cache.
                    // Without the validation layer, which can crash when
                    // devices are created while others record (see the
                    // Makefile): this test is about the files.
                    let sizes = [32 * (t + 1), 32 * (t + 1) + 8 * (round + 1)];
                    let ctx = DeviceContext::with_options(
                        ContextOptions::new()
                            .validation(false)
                            .pipeline_cache_dir(Some(dir.clone())),
                    )
                    .unwrap();
                    for size in sizes {
                        run_kernel(&ctx, size);
                    }
                });
            }
        });
        let files: Vec<PathBuf> = std::fs::read_dir(&dir.0)
            .unwrap()
            .map(|e| e.unwrap().path())
            .collect();
        assert_eq!(files.len(), 1, "round {round}: {files:?}");
        payload(&files[0]);
        let (loaded, _) = session(options(&dir.0), &[64]);
        assert!(loaded, "round {round}");
    }
}

#[test]
fn a_device_closing_after_another_wrote_merges_its_pipelines_in() {
    let dir = TempDir::new("merge");
    // Two devices open at once on one directory; the first to close writes
    // the file, the second finds it changed and merges before writing.
    let first = context_with(options(&dir.0));
    let second = context_with(options(&dir.0));
    let logs = [
        first.diagnostics().validation_log(),
        second.diagnostics().validation_log(),
    ];
    run_kernel(&first, 32);
    run_kernel(&second, 64);
    let file = first
        .diagnostics()
        .pipeline_cache_file()
        .unwrap()
        .to_path_buf();
    drop(first);
    let after_first = payload(&file);
    drop(second);
    let merged = payload(&file);
    assert!(merged.len() >= after_first.len());
    for log in &logs {
        assert_clean(log, "merging pipeline caches");
    }
    let (loaded, _) = session(options(&dir.0), &[32, 64]);
    assert!(loaded);
}

/// [`session`] on another thread; fails the test if the device has not
/// opened, run and closed within a minute (a read that never ends).
fn session_within_a_minute(dir: &Path, what: &str) -> bool {
    let (tx, rx) = std::sync::mpsc::channel();
    let options = options(dir);
    std::thread::spawn(move || {
        let _ = tx.send(session(options, &[64]).0);
    });
    match rx.recv_timeout(std::time::Duration::from_secs(60)) {
        Ok(loaded) => loaded,
        Err(e) => panic!("{what}: the device did not open and close within a minute ({e})"),
    }
}

#[cfg(unix)]
#[test]
fn what_is_not_a_regular_file_is_never_read_as_a_cache() {
    let dir = TempDir::new("not-regular");
    let (_, file) = session(options(&dir.0), &[64]);
    let file = file.unwrap();
    let c_path = |p: &Path| {
        std::ffi::CString::new(std::os::unix::ffi::OsStrExt::as_bytes(p.as_os_str())).unwrap()
    };
    // A FIFO nobody writes (opening it to read would block for ever).
    std::fs::remove_file(&file).unwrap();
    let path = c_path(&file);
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
    assert!(!session_within_a_minute(&dir.0, "a FIFO"), "a FIFO loaded");
    // The device wrote its cache in the FIFO's place: it loads again.
    payload(&file);
    assert!(session_within_a_minute(&dir.0, "after the FIFO"));
    // A symbolic link to an endless device, and a directory.
    for (what, target) in [("/dev/zero", Some("/dev/zero")), ("a directory", None)] {
        std::fs::remove_file(&file).unwrap();
        match target {
            Some(target) => std::os::unix::fs::symlink(target, &file).unwrap(),
            None => std::fs::create_dir(&file).unwrap(),
        }
        assert!(!session_within_a_minute(&dir.0, what), "{what} loaded");
        if target.is_none() {
            std::fs::remove_dir(&file).unwrap();
            std::fs::write(&file, b"").unwrap();
        }
    }
    // A regular file over the size cap (a sparse one) is not read either.
    let f = std::fs::File::create(&file).unwrap();
    f.set_len(1 << 32).unwrap();
    drop(f);
    assert!(
        !session_within_a_minute(&dir.0, "a huge file"),
        "a huge file loaded"
    );
}
