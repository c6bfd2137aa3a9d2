//! Buffers at the size limits (issue 34): at 2^31 - 1, 2^31, 2^31 + 4,
//! 2^32 and 2^32 + 4 bytes, a buffer the device's limits allow is
//! created, uploaded, printed, copied every way (device to device, to and
//! from a host buffer, in a graph, to another context), filled on each
//! fill path, written through views near its end, bound to a kernel over
//! `maxStorageBufferRange` bytes and mapped, on both memory paths, and
//! every byte is compared with a host model; a buffer they do not allow is
//! refused with an error that names the limit. Which sizes a device allows
//! comes from its reported limits (`maxBufferSize`,
//! `maxMemoryAllocationSize`, the heap's size), never its name.
//!
//! A size that works holds up to three copies of itself in memory at once
//! (6 GiB at 2^31) and takes 10-20 s a memory path on this 2-core VM.
//! By default it runs on the direct path where `MemAvailable` holds it
//! with 1 GiB to spare (and says `skipped:` with the figures where it
//! does not); `VKCOMPUTE_LARGE_BUFFERS=all` runs both memory paths, `1`
//! the direct one whatever the machine has, `0` none.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

mod common;

use common::{context_with, options, Path, PATHS};
use vkcompute::{shaders, DeviceBuffer, DeviceContext, Error, Kernel};

/// The most bytes one buffer may have on `ctx`'s device, and the limit
/// that says so: the least of `maxBufferSize`, `maxMemoryAllocationSize`
/// and the largest device-local heap, in the order they are checked.
fn device_limits(ctx: &DeviceContext) -> Vec<(&'static str, u64)> {
    let limits = &ctx.info().limits;
    // SAFETY: the handles are the context's own, alive while it is.
    let memory = unsafe {
        ctx.raw()
            .instance()
            .get_physical_device_memory_properties(ctx.raw().physical_device())
    };
    let heap = memory.memory_heaps[..memory.memory_heap_count as usize]
        .iter()
        .filter(|h| h.flags.contains(ash::vk::MemoryHeapFlags::DEVICE_LOCAL))
        .map(|h| h.size)
        .max()
        .unwrap();
    let mut list = Vec::new();
    if let Some(max) = limits.max_buffer_size {
        list.push(("maxBufferSize", max));
    }
    list.push(("maxMemoryAllocationSize", limits.max_memory_allocation_size));
    list.push(("memory heap size", heap));
    list
}

/// The limit a buffer of `bytes` exceeds first, if any.
fn exceeded(ctx: &DeviceContext, bytes: u64) -> Option<(&'static str, u64)> {
    device_limits(ctx).into_iter().find(|&(_, max)| bytes > max)
}

/// The memory paths on which buffers of `bytes` run through every
/// operation: `VKCOMPUTE_LARGE_BUFFERS=0` none, `all` both, `1` the
/// direct one whatever the machine has; by default the direct one where
/// `MemAvailable` holds three such buffers and 1 GiB more (the staging
/// path adds nothing to the regions the device copies, and doubles the
/// time: `make test` keeps to its 20 minutes).
fn paths_to_run(bytes: u64) -> &'static [Path] {
    match std::env::var("VKCOMPUTE_LARGE_BUFFERS").as_deref() {
        Ok("0") => {
            println!("skipped: {bytes}-byte buffers (VKCOMPUTE_LARGE_BUFFERS=0)");
            return &[];
        }
        Ok("all") => return &PATHS,
        Ok("1") => return &[Path::Direct],
        _ => {}
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let available = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map(|kib| kib << 10);
    let need = 3 * bytes + (1 << 30);
    match available {
        Some(have) if have >= need => &[Path::Direct],
        other => {
            println!(
                "skipped: {bytes}-byte buffers need about {need} bytes of memory, \
                 MemAvailable is {other:?} (VKCOMPUTE_LARGE_BUFFERS=1 runs them anyway)"
            );
            &[]
        }
    }
}

/// `len` bytes in which every byte depends on where it is: a block of
/// 1,000,003 (a prime) pseudo-random bytes, repeated, each repeat
/// starting with its index. A piece of a transfer that went missing, was
/// moved by any multiple of a power of two, or came from another piece
/// does not match.
fn pattern(len: usize, seed: u64) -> Vec<u8> {
    const BLOCK: usize = 1_000_003;
    let mut state = seed | 1;
    let block: Vec<u8> = (0..BLOCK)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect();
    let mut out = Vec::with_capacity(len);
    for (i, start) in (0..len).step_by(BLOCK).enumerate() {
        let n = BLOCK.min(len - start);
        out.extend_from_slice(&block[..n]);
        let stamp = (i as u64).to_le_bytes();
        let k = stamp.len().min(n);
        out[start..start + k].copy_from_slice(&stamp[..k]);
    }
    out
}

/// Fails with where `got` first differs from `want` and how many MiB
/// differ, if it does.
fn same(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    if got == want {
        return;
    }
    const MIB: usize = 1 << 20;
    let bad: Vec<usize> = (0..got.len().div_ceil(MIB))
        .filter(|&c| {
            let r = c * MIB..((c + 1) * MIB).min(got.len());
            got[r.clone()] != want[r]
        })
        .collect();
    let first = bad[0] * MIB;
    let at = first + (first..got.len()).position(|i| got[i] != want[i]).unwrap() - first;
    panic!(
        "{what}: {} of {} MiB differ, the first byte at {at} ({:#04x}, not {:#04x})",
        bad.len(),
        got.len().div_ceil(MIB),
        got[at],
        want[at]
    );
}

/// Fails with where `got` first differs from `byte` everywhere, if it does.
fn uniform(what: &str, got: &[u8], byte: u8) {
    let block = vec![byte; 1 << 20];
    if got.chunks(block.len()).all(|c| c == &block[..c.len()]) {
        return;
    }
    same(what, got, &vec![byte; got.len()]);
}

/// Fills `model` with copies of `element` (whose length divides its
/// length), a MiB at a time.
fn repeat(model: &mut [u8], element: &[u8]) {
    let block: Vec<u8> = element.iter().copied().cycle().take(1 << 20).collect();
    for chunk in model.chunks_mut(block.len()) {
        chunk.copy_from_slice(&block[..chunk.len()]);
    }
}

/// What `Display` prints for a buffer of `bytes` (1000 elements or more).
fn printed(bytes: &[u8]) -> String {
    let n = bytes.len();
    format!(
        "DeviceBuffer([{}, {}, {}, ..., {}, {}, {}])",
        bytes[0],
        bytes[1],
        bytes[2],
        bytes[n - 3],
        bytes[n - 2],
        bytes[n - 1]
    )
}

/// Every operation on a buffer of `size` bytes, on `ctx` (whose memory
/// path is `path`), every byte checked.
fn round_trip(ctx: &DeviceContext, path: Path, size: u64) {
    let what = |step: &str| format!("{size} bytes, {path:?} path: {step}");
    let n = usize::try_from(size).unwrap();
    let mut model = pattern(n, size);

    // Each copy goes into memory that differs from its source everywhere
    // (new, which the driver gives zeroed, or filled), so that a piece
    // of it that went missing shows. At most three buffers of `size`
    // live at once, the model included.

    // Uploaded from a slice, printed, copied into a host buffer (the copy
    // that crashed in lavapipe's memcpy), then device to device; each
    // device buffer checked through a mapping (the memory itself on the
    // direct path, read through staging on the other).
    let a = ctx.enqueue_create_buffer::<u8>(n).unwrap();
    a.enqueue_copy_from(&model[..]).unwrap();
    assert_eq!(a.to_string(), printed(&model), "{}", what("printed"));
    let h = ctx.enqueue_create_host_buffer::<u8>(n).unwrap();
    a.enqueue_copy_to(&h).unwrap();
    same(&what("to a host buffer"), &h.as_slice().unwrap(), &model);
    let host_printed = printed(&model).replacen("DeviceBuffer", "HostBuffer", 1);
    assert_eq!(
        h.to_string(),
        host_printed,
        "{}",
        what("host buffer printed")
    );
    let b = ctx.enqueue_create_buffer::<u8>(n).unwrap();
    b.enqueue_copy_from(&a).unwrap();
    drop(a);
    same(&what("device to device"), &b.map_to_host().unwrap(), &model);

    // A fill of bytes (vkCmdFillBuffer over whole words, the fill kernel
    // in several dispatches where the length is not whole words), then a
    // copy from the host buffer over it.
    b.enqueue_fill(0x5a).unwrap();
    uniform(&what("filled"), &b.map_to_host().unwrap(), 0x5a);
    b.enqueue_copy_from(&h).unwrap();
    drop(h);
    same(
        &what("from a host buffer"),
        &b.map_to_host().unwrap(),
        &model,
    );

    // In a graph, into a new buffer.
    let c = ctx.enqueue_create_buffer::<u8>(n).unwrap();
    let mut g = ctx.capture_graph();
    g.enqueue_copy_to(&b, &c).unwrap();
    let graph = g.finish().unwrap();
    ctx.enqueue_graph(&graph).unwrap();
    drop((graph, b));
    same(&what("in a graph"), &c.map_to_host().unwrap(), &model);
    let b = c;

    // Views near the end: written from a slice at an odd offset, filled
    // with 16-bit elements off a 4-byte boundary (the fill kernel).
    let tail = pattern(1 << 20, 7);
    let at = n - (1 << 20) - 3;
    let view = b.create_sub_buffer::<u8>(at, 1 << 20).unwrap();
    view.enqueue_copy_from(&tail[..]).unwrap();
    model[at..at + (1 << 20)].copy_from_slice(&tail);
    let halves = b.create_sub_buffer::<u16>((n - 2002) / 2, 1000).unwrap();
    halves.enqueue_fill(0xbeef).unwrap();
    let start = (n - 2002) / 2 * 2;
    repeat(&mut model[start..start + 2000], &0xbeefu16.to_le_bytes());

    // Past 2^32 bytes, where the buffer reaches so far: a view there.
    if n > 1 << 32 {
        let far = pattern(n - (1 << 32), 11);
        let view = b.create_sub_buffer::<u8>(1 << 32, far.len()).unwrap();
        view.enqueue_copy_from(&far[..]).unwrap();
        assert_eq!(view.to_vec().unwrap(), far, "{}", what("past 2^32"));
        model[1 << 32..].copy_from_slice(&far);
    }

    // A kernel bound to the last maxStorageBufferRange bytes (as far as
    // the alignment allows), adding 1 to the 32-bit words it reaches.
    let limits = &ctx.info().limits;
    let range = limits.max_storage_buffer_range as usize / 4 * 4;
    let align = limits.min_storage_buffer_offset_alignment.max(4) as usize;
    let offset = (n - range) / align * align;
    let bound = b.create_sub_buffer::<u32>(offset / 4, range / 4).unwrap();
    let add_one = Kernel::new(ctx, shaders::ADD_ONE, "main").unwrap();
    let groups = (range / 4 / 64).min(limits.max_workgroup_count[0] as usize);
    let reached = groups * 64;
    ctx.enqueue_function(&add_one, groups as u32, &[bound.arg()], &(reached as u32))
        .unwrap();
    for w in model[offset..offset + 4 * reached].chunks_exact_mut(4) {
        let v = u32::from_le_bytes(w.try_into().unwrap()).wrapping_add(1);
        w.copy_from_slice(&v.to_le_bytes());
    }
    // One element more than maxStorageBufferRange: refused.
    if offset >= align {
        let over = b
            .create_sub_buffer::<u32>((offset - align) / 4, range / 4 + align / 4)
            .unwrap();
        let e = ctx
            .enqueue_function(&add_one, 1, &[over.arg()], &0u32)
            .unwrap_err();
        assert!(e.to_string().contains("maxStorageBufferRange"), "{e}");
    }
    drop((bound, view, halves, add_one));
    same(
        &what("views and a kernel"),
        &b.map_to_host().unwrap(),
        &model,
    );

    // To a context of another device (through the host, or shared
    // memory), checked against `b` (checked above) a window at a time.
    drop(model);
    let other = context_with(options(path));
    let d = other.enqueue_create_buffer::<u8>(n).unwrap();
    d.enqueue_copy_from(&b).unwrap();
    const WINDOW: usize = 256 << 20;
    let (mut want, mut got) = (vec![0u8; WINDOW], vec![0u8; WINDOW]);
    for start in (0..n).step_by(WINDOW) {
        let len = WINDOW.min(n - start);
        let (want, got) = (&mut want[..len], &mut got[..len]);
        let window = |buf: &DeviceBuffer<u8>| buf.create_sub_buffer::<u8>(start, len).unwrap();
        window(&b).copy_to_slice(want).unwrap();
        window(&d).copy_to_slice(got).unwrap();
        same(&what(&format!("to another context, at {start}")), got, want);
    }
    drop((b, d));
    other.synchronize().unwrap();
    assert!(
        other.diagnostics().validation_messages().is_empty(),
        "{}",
        what("layer")
    );
}

/// A buffer of `size` bytes where the device allows it (every operation,
/// on the paths `paths_to_run` gives); else the refusal naming the limit,
/// for device and host buffers, and the context working after it, on
/// both memory paths.
fn at_size(size: u64) {
    let probe = context_with(options(Path::Direct));
    let limit = exceeded(&probe, size);
    drop(probe);
    let paths = match limit {
        None => paths_to_run(size),
        Some(_) => &PATHS,
    };
    for &path in paths {
        common::run_with(options(path), &format!("{size} bytes"), |ctx| {
            match limit {
                None => round_trip(ctx, path, size),
                Some((name, limit)) => refused(ctx, size, name, limit),
            }
            ctx.trim().unwrap();
        });
    }
}

/// Buffers of `size` bytes, beyond `name` (`limit`), are refused, naming
/// it, and the context still works.
fn refused(ctx: &DeviceContext, size: u64, name: &str, limit: u64) {
    let n = usize::try_from(size).unwrap();
    let errors = [
        (size, ctx.enqueue_create_buffer::<u8>(n).map(drop)),
        (size, ctx.enqueue_create_host_buffer::<u8>(n).map(drop)),
        (
            n as u64 / 4 * 4,
            ctx.enqueue_create_buffer::<u32>(n / 4).map(drop),
        ),
    ];
    for (bytes, result) in errors {
        let e = result.unwrap_err();
        assert!(
            matches!(e, Error::TooLarge { limit_name, limit: l, .. } if limit_name == name && l == limit),
            "{bytes} bytes: expected TooLarge naming {name} ({limit}), got {e:?}"
        );
        let message = e.to_string();
        for part in [name.to_string(), limit.to_string(), bytes.to_string()] {
            assert!(message.contains(&part), "{part} not in: {message}");
        }
    }
    let small = ctx.enqueue_create_buffer::<u32>(16).unwrap();
    small.enqueue_fill(3).unwrap();
    assert_eq!(small.to_vec().unwrap(), vec![3; 16]);
}

#[test]
fn a_buffer_of_2_31_minus_1_bytes_works_or_is_refused() {
    at_size((1 << 31) - 1);
}

#[test]
fn a_buffer_of_2_31_bytes_works_or_is_refused() {
    at_size(1 << 31);
}

#[test]
fn a_buffer_of_2_31_plus_4_bytes_works_or_is_refused() {
    at_size((1 << 31) + 4);
}

#[test]
fn a_buffer_of_2_32_bytes_works_or_is_refused() {
    at_size(1 << 32);
}

#[test]
fn a_buffer_of_2_32_plus_4_bytes_works_or_is_refused() {
    at_size((1 << 32) + 4);
}
