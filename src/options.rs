//! How a context is opened: `ContextOptions`, each setting falling back to
//! its environment variable and then to its default.

use std::path::PathBuf;

use crate::vk::DeviceSelector;

/// How to open a [`DeviceContext`](crate::DeviceContext). Each setting left alone takes its
/// environment variable's value, or else the default.
#[derive(Clone, Debug, Default)]
pub struct ContextOptions {
    pub(crate) device: Option<DeviceSelector>,
    pub(crate) validation: Option<bool>,
    pub(crate) force_staging: Option<bool>,
    pub(crate) push_descriptors: Option<bool>,
    pub(crate) synchronization2: Option<bool>,
    pub(crate) trace: Option<std::path::PathBuf>,
    pub(crate) pipeline_cache_dir: Option<Option<PathBuf>>,
}

impl ContextOptions {
    /// Every setting at its default (or its environment variable).
    pub fn new() -> Self {
        Self::default()
    }

    /// The device to open, by index or by a substring of its name
    /// (`VKCOMPUTE_DEVICE`). Default: a discrete GPU, then an integrated,
    /// virtual, and last a CPU device.
    pub fn device(mut self, selector: impl Into<DeviceSelector>) -> Self {
        self.device = Some(selector.into());
        self
    }

    /// Enables `VK_LAYER_KHRONOS_validation` with synchronization validation
    /// (`VKCOMPUTE_VALIDATION=1`). Messages are collected:
    /// [`DeviceContext::validation_messages`](crate::DeviceContext::validation_messages). `VKCOMPUTE_VALIDATION=abort`
    /// also aborts the process on the first message, which makes any
    /// message fatal to a program or doctest (the variable is ignored where
    /// this option is set). Default: off.
    pub fn validation(mut self, on: bool) -> Self {
        self.validation = Some(on);
        self
    }

    /// Sends every host transfer through staging buffers, even where the
    /// device's memory is host visible (`VKCOMPUTE_FORCE_STAGING=1`). This is
    /// the path of a discrete GPU; the option lets it be tested anywhere.
    /// Default: off.
    pub fn force_staging(mut self, on: bool) -> Self {
        self.force_staging = Some(on);
        self
    }

    /// Uses `VK_KHR_push_descriptor` where the device has it
    /// (`VKCOMPUTE_PUSH_DESCRIPTORS=0` turns it off). Default: on.
    pub fn push_descriptors(mut self, on: bool) -> Self {
        self.push_descriptors = Some(on);
        self
    }

    /// Records synchronization2 barriers where the device has them
    /// (`VKCOMPUTE_SYNCHRONIZATION2=0` turns it off). Default: on.
    pub fn synchronization2(mut self, on: bool) -> Self {
        self.synchronization2 = Some(on);
        self
    }

    /// Writes a trace of the device work to `path` (`VKCOMPUTE_TRACE`), in
    /// the Chrome / Perfetto trace-event JSON format: per stream, a track
    /// with one slice per recorded command at its host enqueue time
    /// (copies, fills, dispatches with kernel and grid, transfers) and
    /// instants for barriers and waits, and a track with the device time
    /// of each submitted batch (timestamp queries). Streams made with
    /// [`DeviceContext::new_stream`](crate::DeviceContext::new_stream) write to the same file. The file is
    /// complete once the last context of the device is dropped. Default: off.
    pub fn trace(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.trace = Some(path.into());
        self
    }

    /// Where the pipeline cache is kept between processes: `Some(dir)`
    /// keeps it in `dir` (one file per physical device), `None` keeps none
    /// (`VKCOMPUTE_PIPELINE_CACHE=<dir>` or `=off`). Default: a per-user
    /// directory, `$XDG_CACHE_HOME/vkcompute`, else `~/.cache/vkcompute`.
    ///
    /// The file is read when the device opens, checked (vkcompute's own
    /// length and hash, then the driver's header: vendor ID, device ID and
    /// `pipelineCacheUUID` must be this device's) so that a truncated,
    /// stale or foreign file is ignored, and written when the device closes
    /// (the last context and buffer on it dropped) if new pipelines were
    /// made, through a temporary file renamed over the old one, so that
    /// processes writing at once never leave a torn file. Failing to read
    /// or write it is never an error: the cache only saves time.
    pub fn pipeline_cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.pipeline_cache_dir = Some(dir);
        self
    }

    pub(crate) fn resolved_pipeline_cache_dir(&self) -> Option<PathBuf> {
        if let Some(choice) = &self.pipeline_cache_dir {
            return choice.clone();
        }
        match std::env::var_os("VKCOMPUTE_PIPELINE_CACHE") {
            Some(v) if !v.is_empty() => {
                let off = matches!(
                    v.to_string_lossy().trim().to_ascii_lowercase().as_str(),
                    "off" | "0" | "false" | "no" | "none"
                );
                (!off).then(|| PathBuf::from(v))
            }
            _ => crate::vk::default_pipeline_cache_dir(),
        }
    }

    pub(crate) fn resolved_device(&self) -> Option<(DeviceSelector, &'static str)> {
        if let Some(d) = &self.device {
            return Some((d.clone(), "ContextOptions::device"));
        }
        std::env::var("VKCOMPUTE_DEVICE")
            .ok()
            .filter(|v| !v.trim().is_empty())
            .map(|v| (DeviceSelector::from(v.as_str()), "VKCOMPUTE_DEVICE"))
    }
}

/// A boolean setting: the option if set, else the variable, else `default`.
pub(crate) fn setting(option: Option<bool>, variable: &str, default: bool) -> bool {
    option.unwrap_or_else(|| match std::env::var(variable) {
        Ok(v) => matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        ),
        Err(_) => default,
    })
}

/// Whether `VKCOMPUTE_VALIDATION=abort` is set.
pub(crate) fn validation_aborts() -> bool {
    std::env::var("VKCOMPUTE_VALIDATION").is_ok_and(|v| v.trim().eq_ignore_ascii_case("abort"))
}
