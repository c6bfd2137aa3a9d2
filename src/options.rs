//! How a context is opened: `ContextOptions`, each setting falling back to
//! its environment variable and then to its default, resolved once into
//! one `Settings` value.

use std::path::PathBuf;

use crate::stream::printf::PrintfOutput;
use crate::vk::{DeviceOptions, DeviceSelector};

/// The record buffer a dispatch of a printing kernel gets by default.
const PRINTF_BUFFER_BYTES: u64 = 256 << 10;

/// Every setting of a context, resolved once from its options, the
/// environment and the defaults (see [`ContextOptions::resolve`]).
#[derive(Clone, Debug)]
pub(crate) struct Settings {
    /// The device asked for, and who asked (the option or the variable).
    pub(crate) device: Option<(DeviceSelector, &'static str)>,
    /// The validation layer is on.
    pub(crate) validation: bool,
    /// Any validation message aborts the process.
    pub(crate) validation_fatal: bool,
    /// Every host transfer goes through staging buffers.
    pub(crate) force_staging: bool,
    /// Where the trace goes, if anywhere.
    pub(crate) trace: Option<PathBuf>,
    /// Whether a trace times every command on the device.
    pub(crate) trace_commands: bool,
    /// What the device is opened with (asked; the device grants what it has).
    pub(crate) device_options: DeviceOptions,
    /// Where kernels' printf lines go.
    pub(crate) printf: crate::stream::printf::Output,
}

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
    pub(crate) trace_commands: Option<bool>,
    pub(crate) pipeline_cache_dir: Option<Option<PathBuf>>,
    pub(crate) printf: Option<PrintfOutput>,
    pub(crate) printf_buffer_bytes: Option<u64>,
    pub(crate) printf_invocation_ids: Option<bool>,
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
    /// [`Diagnostics::validation_messages`](crate::Diagnostics::validation_messages). `VKCOMPUTE_VALIDATION=abort`
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

    /// Whether a trace also times every command on the device
    /// (`VKCOMPUTE_TRACE_COMMANDS`), with timestamps around each: the
    /// device track then shows each command's own slice inside its batch's.
    /// Timestamps cost device time: on lavapipe 10,000 small dependent
    /// dispatches took 3.4x and 23x as long as untraced in two runs on a
    /// busy 2-core VM (`bench --case trace_overhead`, which measures it on
    /// your machine); off, batches alone are timed. Default: on.
    pub fn trace_commands(mut self, on: bool) -> Self {
        self.trace_commands = Some(on);
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

    /// Where kernels' `debugPrintfEXT` lines go: standard output (the
    /// default), the `log` crate, or a function of yours
    /// ([`PrintfOutput::callback`]). Lines come once the dispatch that
    /// printed them completed (on the next flush or wait of the stream),
    /// in the order of dispatches, and within one dispatch in the order
    /// its invocations appended them. See the
    /// [printf guide](crate::guide::printf).
    pub fn printf(mut self, output: PrintfOutput) -> Self {
        self.printf = Some(output);
        self
    }

    /// The bytes of records one dispatch of a printing kernel may write
    /// (`VKCOMPUTE_PRINTF_BYTES`); records past them are dropped, and one
    /// line says how many. Each record of a kernel takes the room of its
    /// largest call's record (16 bytes, and 4 a 32-bit value, rounded up to
    /// 16). The buffer holds at least one record (a setting under 64 bytes
    /// is taken as 64), and at most what one binding covers
    /// (`maxStorageBufferRange`, 128 MiB on lavapipe). Default: 256 KiB.
    pub fn printf_buffer_bytes(mut self, bytes: u64) -> Self {
        self.printf_buffer_bytes = Some(bytes);
        self
    }

    /// Whether printf lines on standard output or the log carry the
    /// printing invocation's global id beside the kernel's label
    /// (`[label (x, y, z)] text`). A callback always gets it. Default: off.
    pub fn printf_invocation_ids(mut self, on: bool) -> Self {
        self.printf_invocation_ids = Some(on);
        self
    }

    /// Every setting, resolved: the option where set, else its
    /// environment variable, else the default.
    pub(crate) fn resolve(&self) -> Settings {
        // `VKCOMPUTE_VALIDATION=abort` (only where the option is unset)
        // turns validation on and makes any message fatal.
        let validation_fatal = self.validation.is_none() && validation_aborts();
        Settings {
            device: self.resolved_device(),
            validation: setting(self.validation, "VKCOMPUTE_VALIDATION", false) || validation_fatal,
            validation_fatal,
            force_staging: setting(self.force_staging, "VKCOMPUTE_FORCE_STAGING", false),
            trace: self
                .trace
                .clone()
                .or_else(|| std::env::var_os("VKCOMPUTE_TRACE").map(Into::into)),
            trace_commands: setting(self.trace_commands, "VKCOMPUTE_TRACE_COMMANDS", true),
            device_options: DeviceOptions {
                pipeline_cache_dir: self.resolved_pipeline_cache_dir(),
                push_descriptors: setting(
                    self.push_descriptors,
                    "VKCOMPUTE_PUSH_DESCRIPTORS",
                    true,
                ),
                synchronization2: setting(
                    self.synchronization2,
                    "VKCOMPUTE_SYNCHRONIZATION2",
                    true,
                ),
            },
            printf: crate::stream::printf::Output {
                sink: self.printf.clone().unwrap_or_default(),
                buffer_bytes: self
                    .printf_buffer_bytes
                    .or_else(|| {
                        std::env::var("VKCOMPUTE_PRINTF_BYTES")
                            .ok()?
                            .trim()
                            .parse()
                            .ok()
                    })
                    .unwrap_or(PRINTF_BUFFER_BYTES)
                    .clamp(64, 1 << 30),
                invocation_ids: self.printf_invocation_ids.unwrap_or(false),
            },
        }
    }

    fn resolved_pipeline_cache_dir(&self) -> Option<PathBuf> {
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

    fn resolved_device(&self) -> Option<(DeviceSelector, &'static str)> {
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
fn setting(option: Option<bool>, variable: &str, default: bool) -> bool {
    option.unwrap_or_else(|| match std::env::var(variable) {
        Ok(v) => matches!(
            v.trim().to_ascii_lowercase().as_str(),
            "1" | "true" | "yes" | "on"
        ),
        Err(_) => default,
    })
}

/// Whether `VKCOMPUTE_VALIDATION=abort` is set.
fn validation_aborts() -> bool {
    std::env::var("VKCOMPUTE_VALIDATION").is_ok_and(|v| v.trim().eq_ignore_ascii_case("abort"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Options that are set win over the environment, and resolve into one
    /// value with every setting the context and its device use.
    #[test]
    fn set_options_resolve_as_set() {
        let dir = PathBuf::from("/nonexistent/vkcompute-cache");
        let settings = ContextOptions::new()
            .device(1)
            .validation(false)
            .force_staging(true)
            .push_descriptors(false)
            .synchronization2(false)
            .trace("/tmp/vkcompute-settings-trace.json")
            .pipeline_cache_dir(Some(dir.clone()))
            .resolve();
        assert!(matches!(
            settings.device,
            Some((DeviceSelector::Index(1), "ContextOptions::device"))
        ));
        assert!(!settings.validation && !settings.validation_fatal);
        assert!(settings.force_staging);
        assert_eq!(
            settings.trace.as_deref(),
            Some(std::path::Path::new("/tmp/vkcompute-settings-trace.json"))
        );
        assert!(!settings.device_options.push_descriptors);
        assert!(!settings.device_options.synchronization2);
        assert_eq!(settings.device_options.pipeline_cache_dir, Some(dir));
        let none = ContextOptions::new().pipeline_cache_dir(None).resolve();
        assert_eq!(none.device_options.pipeline_cache_dir, None);
    }
}
