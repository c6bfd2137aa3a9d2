//! The pipeline cache on disk: a device's `VkPipelineCache` is filled from
//! a file when the device opens and written back when it is destroyed, so
//! that a later process skips compiling the pipelines an earlier one made.
//!
//! One file per physical device, named after its vendor ID, device ID and
//! `pipelineCacheUUID`, in a per-user directory
//! (`$XDG_CACHE_HOME/vkcompute`, else `~/.cache/vkcompute`), or where
//! `ContextOptions::pipeline_cache_dir` or `VKCOMPUTE_PIPELINE_CACHE` say.
//!
//! The file is vkcompute's own 24-byte header (magic, payload length,
//! FNV-1a hash of the payload) followed by the driver's data. Before the
//! driver sees any of it, the header must check out and the driver's own
//! header must name this device (header version one, vendor ID, device ID,
//! pipeline cache UUID): a truncated, corrupted, stale or foreign file is
//! ignored. Before writing, what another device or process wrote since
//! this one read the file is merged in (`vkMergePipelineCaches`), so
//! devices closing one after another accumulate their pipelines. Writing
//! goes to a temporary file in the same directory that is then renamed
//! over the old one, so concurrent processes never leave a torn file.
//!
//! Only a regular file of at most [`MAX_FILE_LEN`] bytes is read: the file
//! is opened without blocking (a FIFO in its place would block for ever)
//! and what it is, and its length, come from the opened handle (no stat
//! before the open that another process could race); the read stops past
//! the cap. Anything else (a FIFO, a device, a directory, a symbolic link
//! to one, a file too large) is ignored with a log line, as a corrupt or
//! foreign file is, and the device starts with an empty cache.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use ash::vk;

use super::adapter::Adapter;
use crate::error::{Result, VkResultExt};

/// vkcompute's magic at the start of the file.
const MAGIC: &[u8; 8] = b"VKCPIPE1";
/// Magic, payload length (u64), payload hash (u64).
const HEADER_LEN: usize = 24;
/// The longest cache file read (header included): a compute pipeline
/// cache is far smaller, so anything longer is not one of ours.
pub(crate) const MAX_FILE_LEN: u64 = 256 << 20;
/// `VkPipelineCacheHeaderVersionOne`: header size, version, vendor ID,
/// device ID, UUID.
const DRIVER_HEADER_LEN: usize = 16 + vk::UUID_SIZE;

/// Where a device's pipeline cache lives on disk.
#[derive(Clone, Debug)]
pub(crate) struct DiskCache {
    /// The cache file of this physical device.
    pub(crate) file: PathBuf,
    /// The hash of the payload read at start (0 when none was).
    loaded_hash: u64,
}

/// The default cache directory: `$XDG_CACHE_HOME/vkcompute`, else
/// `$HOME/.cache/vkcompute`; `None` where neither variable is set.
pub(crate) fn default_dir() -> Option<PathBuf> {
    let nonempty = |v: &str| std::env::var_os(v).filter(|s| !s.is_empty());
    if let Some(xdg) = nonempty("XDG_CACHE_HOME") {
        return Some(PathBuf::from(xdg).join("vkcompute"));
    }
    nonempty("HOME").map(|home| PathBuf::from(home).join(".cache").join("vkcompute"))
}

/// 64-bit FNV-1a.
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([bytes[at], bytes[at + 1], bytes[at + 2], bytes[at + 3]])
}

impl DiskCache {
    /// The cache of `adapter` in `dir`, with the driver data of its file
    /// where that file is intact and made for this device.
    pub(crate) fn open(dir: &Path, adapter: &Adapter) -> (DiskCache, Option<Vec<u8>>) {
        let uuid: String = adapter
            .pipeline_cache_uuid
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let file = dir.join(format!(
            "pipelines-{:08x}-{:08x}-{uuid}.bin",
            adapter.vendor_id, adapter.device_id
        ));
        let data = read_cache_file(&file).and_then(|bytes| {
            let data = payload(&bytes, adapter).map(<[u8]>::to_vec);
            if data.is_none() {
                log::info!(
                    "ignoring the pipeline cache {}: corrupt, truncated or made for another \
                     device or driver",
                    file.display()
                );
            }
            data
        });
        let cache = DiskCache {
            file,
            loaded_hash: data.as_deref().map_or(0, hash),
        };
        (cache, data)
    }

    /// The driver data the file holds now, where it is intact, made for
    /// `adapter`, and not what this device loaded: another device (or
    /// process) wrote it since, and its pipelines are worth merging in.
    pub(crate) fn written_since(&self, adapter: &Adapter) -> Option<Vec<u8>> {
        let bytes = read_cache_file(&self.file)?;
        let data = payload(&bytes, adapter)?;
        (hash(data) != self.loaded_hash).then(|| data.to_vec())
    }

    /// Whether `data` (the driver's, from `vkGetPipelineCacheData`) differs
    /// from what was loaded, so that writing it is worth while.
    pub(crate) fn changed(&self, data: &[u8]) -> bool {
        hash(data) != self.loaded_hash
    }

    /// Writes `data` atomically: to a temporary file beside the cache
    /// file, then renamed over it. Failures (a read-only directory, a full
    /// disk) leave the old file and are otherwise ignored: the cache only
    /// saves time.
    pub(crate) fn save(&self, data: &[u8]) {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let Some(dir) = self.file.parent() else {
            return;
        };
        if std::fs::create_dir_all(dir).is_err() {
            return;
        }
        let tmp = self.file.with_extension(format!(
            "tmp.{}.{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let written = (|| -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(MAGIC)?;
            f.write_all(&(data.len() as u64).to_le_bytes())?;
            f.write_all(&hash(data).to_le_bytes())?;
            f.write_all(data)?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.file)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
    }
}

/// The bytes of the cache file at `path`, where it is a regular file of at
/// most [`MAX_FILE_LEN`] bytes; `None` (with a log line, but for a missing
/// file) otherwise. Never blocks on what is not a regular file.
fn read_cache_file(path: &Path) -> Option<Vec<u8>> {
    let ignore = |why: &dyn std::fmt::Display| {
        log::info!("ignoring the pipeline cache {}: {why}", path.display());
        None
    };
    let mut open = std::fs::OpenOptions::new();
    open.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // A FIFO opens at once for reading without a writer; on a regular
        // file the flag changes nothing.
        open.custom_flags(libc::O_NONBLOCK);
    }
    let file = match open.open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return None,
        Err(e) => return ignore(&e),
    };
    // What was opened, not what the path names now.
    let metadata = match file.metadata() {
        Ok(metadata) => metadata,
        Err(e) => return ignore(&e),
    };
    if !metadata.is_file() {
        return ignore(&"not a regular file");
    }
    if metadata.len() > MAX_FILE_LEN {
        return ignore(&format!("{} bytes, over {MAX_FILE_LEN}", metadata.len()));
    }
    let mut bytes = Vec::with_capacity(metadata.len() as usize);
    // It may grow while read: at most one byte past the cap is read.
    if let Err(e) = file.take(MAX_FILE_LEN + 1).read_to_end(&mut bytes) {
        return ignore(&e);
    }
    if bytes.len() as u64 > MAX_FILE_LEN {
        return ignore(&format!("grew over {MAX_FILE_LEN} bytes while read"));
    }
    Some(bytes)
}

/// The driver data of a cache file, where the file is intact and its
/// driver header names `adapter`.
fn payload<'a>(bytes: &'a [u8], adapter: &Adapter) -> Option<&'a [u8]> {
    if bytes.len() < HEADER_LEN || &bytes[..8] != MAGIC {
        return None;
    }
    let len = u64::from_le_bytes(bytes[8..16].try_into().ok()?);
    let stored_hash = u64::from_le_bytes(bytes[16..24].try_into().ok()?);
    let data = &bytes[HEADER_LEN..];
    if data.len() as u64 != len || hash(data) != stored_hash {
        return None;
    }
    matches_device(data, adapter).then_some(data)
}

/// Whether `data` starts with a `VkPipelineCacheHeaderVersionOne` of
/// `adapter`.
fn matches_device(data: &[u8], adapter: &Adapter) -> bool {
    if data.len() < DRIVER_HEADER_LEN {
        return false;
    }
    let header_size = u32_at(data, 0) as usize;
    header_size >= DRIVER_HEADER_LEN
        && header_size <= data.len()
        && u32_at(data, 4) == vk::PipelineCacheHeaderVersion::ONE.as_raw() as u32
        && u32_at(data, 8) == adapter.vendor_id
        && u32_at(data, 12) == adapter.device_id
        && data[16..DRIVER_HEADER_LEN] == adapter.pipeline_cache_uuid
}

/// The device's pipeline cache, from `initial` data where the driver
/// accepts it (else empty), and whether it came from that data.
pub(super) fn create_pipeline_cache(
    raw: &ash::Device,
    initial: Option<Vec<u8>>,
) -> Result<(vk::PipelineCache, bool)> {
    if let Some(data) = initial {
        let info = vk::PipelineCacheCreateInfo::default().initial_data(&data);
        // SAFETY: a valid create info; `data` was checked to start with this
        // device's cache header, and the driver checks the rest.
        if let Ok(cache) = unsafe { raw.create_pipeline_cache(&info, None) } {
            return Ok((cache, true));
        }
    }
    // SAFETY: a valid, empty create info.
    let cache = unsafe { raw.create_pipeline_cache(&vk::PipelineCacheCreateInfo::default(), None) }
        .during("vkCreatePipelineCache")?;
    Ok((cache, false))
}

/// Writes the device's pipeline cache `cache` to `disk`, where the data
/// changed since it was loaded; the device (`raw`, on `adapter`) is being
/// dropped, so no pipeline is being created.
pub(super) fn save_pipeline_cache(
    raw: &ash::Device,
    cache: vk::PipelineCache,
    disk: &DiskCache,
    adapter: &Adapter,
) {
    if let Some(theirs) = disk.written_since(adapter) {
        let info = vk::PipelineCacheCreateInfo::default().initial_data(&theirs);
        // SAFETY: a valid create info; the data was checked to start with
        // this device's cache header, and the driver checks the rest.
        if let Ok(other) = unsafe { raw.create_pipeline_cache(&info, None) } {
            // SAFETY: both caches belong to this device, the destination is
            // not among the sources, and no pipeline is being created (the
            // device is being dropped). A failed merge leaves ours as it was.
            unsafe {
                let _ = raw.merge_pipeline_caches(cache, &[other]);
                raw.destroy_pipeline_cache(other, None);
            }
        }
    }
    // SAFETY: the cache belongs to this device and is still alive.
    let Ok(data) = (unsafe { raw.get_pipeline_cache_data(cache) }) else {
        return;
    };
    if matches_device(&data, adapter) && disk.changed(&data) {
        disk.save(&data);
    }
}
