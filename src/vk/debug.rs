//! The debug-utils messenger: every warning and error the validation layers
//! (or the loader and driver) report is kept in a [`MessageLog`], so that
//! tests can fail on it rather than scroll past it.

use std::ffi::{c_void, CStr};
use std::fmt;
use std::sync::Mutex;

use ash::vk;

use super::Device;

/// Names `handle` (an object of `device`) `name` for the validation layers'
/// messages and external tools, where debug utils are enabled (with
/// validation); nothing otherwise. A NUL in `name` becomes a space.
pub(crate) fn name_object<H: vk::Handle + Copy>(device: &Device, handle: H, name: &str) {
    if !device.instance.has_debug_utils() || handle.as_raw() == 0 {
        return;
    }
    let loader = device
        .debug_names
        .get_or_init(|| ash::ext::debug_utils::Device::new(&device.instance.raw, &device.raw));
    let Ok(name) = std::ffi::CString::new(name.replace('\0', " ")) else {
        return;
    };
    let info = vk::DebugUtilsObjectNameInfoEXT::default()
        .object_handle(handle)
        .object_name(&name);
    // SAFETY: the extension is enabled on the instance; `handle` is a live
    // object of `device` (its callers name what they just made or hold).
    let _ = unsafe { loader.set_debug_utils_object_name(&info) };
}

/// How serious a [`ValidationMessage`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Severity {
    /// A likely mistake or a performance problem.
    Warning,
    /// A violation of the Vulkan specification.
    Error,
}

/// One message from the validation layers, the loader or the driver.
#[derive(Clone, Debug)]
pub struct ValidationMessage {
    /// Warning or error.
    pub severity: Severity,
    /// The message's identifier (for validation errors the VUID, such as
    /// `VUID-VkBufferCreateInfo-size-00912`, or `SYNC-HAZARD-WRITE-AFTER-READ`).
    pub id: String,
    /// The message text.
    pub text: String,
}

impl fmt::Display for ValidationMessage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let severity = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(f, "[{severity}] {}: {}", self.id, self.text)
    }
}

/// The messages reported on one context's device, readable after the
/// context is gone (messages at device destruction, such as leaked objects,
/// arrive last).
#[derive(Clone, Debug)]
pub struct ValidationLog(pub(crate) std::sync::Arc<MessageLog>);

impl ValidationLog {
    /// A copy of every message so far.
    pub fn messages(&self) -> Vec<ValidationMessage> {
        self.0.snapshot()
    }

    /// Every message so far, removing them from the log.
    pub fn take(&self) -> Vec<ValidationMessage> {
        self.0.take()
    }
}

/// The messages collected from one Vulkan instance.
#[derive(Default, Debug)]
pub(crate) struct MessageLog {
    messages: Mutex<Vec<ValidationMessage>>,
    /// Abort the process on the first message (`VKCOMPUTE_VALIDATION=abort`).
    fatal: bool,
}

impl MessageLog {
    pub(crate) fn new(fatal: bool) -> Self {
        MessageLog {
            messages: Mutex::default(),
            fatal,
        }
    }

    fn push(&self, message: ValidationMessage) {
        // A poisoned lock only means another thread panicked while pushing;
        // the vector itself is still valid.
        let mut messages = self.messages.lock().unwrap_or_else(|e| e.into_inner());
        messages.push(message);
    }

    /// A copy of every message so far.
    pub(crate) fn snapshot(&self) -> Vec<ValidationMessage> {
        self.messages
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Every message so far, removing them from the log.
    pub(crate) fn take(&self) -> Vec<ValidationMessage> {
        std::mem::take(&mut *self.messages.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The messenger's create info: warnings and errors of every kind, delivered
/// to `callback` with `log` as its user data. The log must outlive the
/// messenger (the instance keeps it in an `Arc` and destroys the messenger first).
pub(crate) fn messenger_info(log: &MessageLog) -> vk::DebugUtilsMessengerCreateInfoEXT<'static> {
    vk::DebugUtilsMessengerCreateInfoEXT::default()
        .message_severity(
            vk::DebugUtilsMessageSeverityFlagsEXT::WARNING
                | vk::DebugUtilsMessageSeverityFlagsEXT::ERROR,
        )
        .message_type(
            vk::DebugUtilsMessageTypeFlagsEXT::GENERAL
                | vk::DebugUtilsMessageTypeFlagsEXT::VALIDATION
                | vk::DebugUtilsMessageTypeFlagsEXT::PERFORMANCE,
        )
        .pfn_user_callback(Some(callback))
        .user_data(log as *const MessageLog as *mut c_void)
}

unsafe extern "system" fn callback(
    severity: vk::DebugUtilsMessageSeverityFlagsEXT,
    _types: vk::DebugUtilsMessageTypeFlagsEXT,
    data: *const vk::DebugUtilsMessengerCallbackDataEXT<'_>,
    user_data: *mut c_void,
) -> vk::Bool32 {
    if data.is_null() || user_data.is_null() {
        return vk::FALSE;
    }
    // SAFETY: the layer passes a valid callback-data struct for the duration
    // of the call, and `user_data` is the `MessageLog` given in
    // `messenger_info`, which outlives the messenger.
    let (data, log) = unsafe { (&*data, &*(user_data as *const MessageLog)) };
    let text = |s: Option<&CStr>| {
        s.map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    };
    let message = ValidationMessage {
        severity: if severity.contains(vk::DebugUtilsMessageSeverityFlagsEXT::ERROR) {
            Severity::Error
        } else {
            Severity::Warning
        },
        // SAFETY: the strings are null or valid C strings while the call lasts.
        id: text(unsafe { data.message_id_name_as_c_str() }),
        // SAFETY: as above.
        text: text(unsafe { data.message_as_c_str() }),
    };
    match message.severity {
        Severity::Error => log::error!("validation {message}"),
        Severity::Warning => log::warn!("validation {message}"),
    }
    if log.fatal {
        log::error!("aborting on a validation message (VKCOMPUTE_VALIDATION=abort)");
        // The process ends here: where no logger shows errors, say why on
        // stderr rather than die silently (abort is an explicit debug mode).
        if !log::log_enabled!(log::Level::Error) {
            eprintln!("vkcompute: aborting on validation {message} (VKCOMPUTE_VALIDATION=abort)");
        }
        std::process::abort();
    }
    log.push(message);
    vk::FALSE
}
