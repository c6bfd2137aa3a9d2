//! The Vulkan instance: the loader, layers, the debug messenger.

use std::ffi::{c_char, CStr};
use std::sync::Arc;

use ash::vk;

use super::debug::{messenger_info, MessageLog};
use crate::error::{Error, Result, VkResultExt};

const VALIDATION_LAYER: &CStr = c"VK_LAYER_KHRONOS_validation";

/// An instance of the Vulkan API, with its debug messenger when validation is on.
pub(crate) struct Instance {
    pub(crate) entry: ash::Entry,
    pub(crate) raw: ash::Instance,
    /// The API version the instance was created for.
    pub(crate) api_version: u32,
    pub(crate) validation: bool,
    debug: Option<(ash::ext::debug_utils::Instance, vk::DebugUtilsMessengerEXT)>,
    /// Whether `VK_EXT_debug_utils` is enabled, so that objects can be named.
    named: bool,
    /// Where the messenger writes; its address is the messenger's user data.
    pub(crate) messages: Arc<MessageLog>,
    /// False for an instance the application lent us (`from_raw`).
    owned: bool,
}

impl Instance {
    /// Loads the Vulkan loader and creates an instance, with
    /// `VK_LAYER_KHRONOS_validation` and synchronization validation when
    /// `validation` is true; with `fatal`, the first message aborts the
    /// process; with `validation` or `names`, `VK_EXT_debug_utils` where the
    /// loader has it (object names).
    pub(crate) fn new(validation: bool, fatal: bool, names: bool) -> Result<Self> {
        // SAFETY: loading the system's Vulkan loader runs its initialisers,
        // which is what every Vulkan application does.
        let entry = unsafe { ash::Entry::load() }.map_err(|e| Error::LoaderMissing {
            detail: e.to_string(),
        })?;
        // SAFETY: a global-level call on a loaded entry.
        let loader_version = match unsafe { entry.try_enumerate_instance_version() } {
            Ok(Some(v)) => v,
            Ok(None) => vk::API_VERSION_1_0,
            Err(e) => return Err(Error::vk("vkEnumerateInstanceVersion", e)),
        };
        if loader_version < vk::API_VERSION_1_2 {
            return Err(Error::UnsupportedDevice {
                device: "the Vulkan loader".into(),
                reason: format!(
                    "it implements Vulkan {}, and vkcompute needs 1.2 or newer; update the loader \
                     (libvulkan1) or install the Vulkan SDK",
                    super::conv::version_string(loader_version)
                ),
            });
        }
        let api_version = loader_version.min(vk::API_VERSION_1_3);

        // SAFETY: a global-level call on a loaded entry.
        let layers = unsafe { entry.enumerate_instance_layer_properties() }
            .during("vkEnumerateInstanceLayerProperties")?;
        let has_layer = layers
            .iter()
            .any(|l| l.layer_name_as_c_str().is_ok_and(|n| n == VALIDATION_LAYER));
        if validation && !has_layer {
            return Err(Error::ValidationLayerMissing);
        }

        let mut extensions = instance_extensions(&entry, None)?;
        if validation {
            extensions.extend(instance_extensions(&entry, Some(VALIDATION_LAYER))?);
        }
        let has = |name: &CStr| extensions.iter().any(|e| e.as_c_str() == name);

        let mut enabled: Vec<*const c_char> = Vec::new();
        let mut flags = vk::InstanceCreateFlags::empty();
        if has(ash::khr::portability_enumeration::NAME) {
            // MoltenVK lists its devices only to instances that ask for portability ones.
            enabled.push(ash::khr::portability_enumeration::NAME.as_ptr());
            flags |= vk::InstanceCreateFlags::ENUMERATE_PORTABILITY_KHR;
        }
        // Object names for validation messages, and (where the context
        // traces) for the tools that read them; the messenger only with
        // validation.
        let debug_utils = (validation || names) && has(ash::ext::debug_utils::NAME);
        if debug_utils {
            enabled.push(ash::ext::debug_utils::NAME.as_ptr());
        }
        let validation_features = validation && has(ash::ext::validation_features::NAME);
        if validation_features {
            enabled.push(ash::ext::validation_features::NAME.as_ptr());
        }
        let layer_names: Vec<*const c_char> = if validation {
            vec![VALIDATION_LAYER.as_ptr()]
        } else {
            Vec::new()
        };

        let messages = Arc::new(MessageLog::new(fatal));
        let app = vk::ApplicationInfo::default()
            .application_name(c"vkcompute")
            .engine_name(c"vkcompute")
            .api_version(api_version);
        let enables = [vk::ValidationFeatureEnableEXT::SYNCHRONIZATION_VALIDATION];
        let mut features =
            vk::ValidationFeaturesEXT::default().enabled_validation_features(&enables);
        let mut messenger = messenger_info(&messages);
        let mut info = vk::InstanceCreateInfo::default()
            .flags(flags)
            .application_info(&app)
            .enabled_layer_names(&layer_names)
            .enabled_extension_names(&enabled);
        if debug_utils && validation {
            // Chained too, so that instance creation and destruction are reported.
            info = info.push_next(&mut messenger);
        }
        if validation_features {
            info = info.push_next(&mut features);
        }
        // SAFETY: every pointer in `info` refers to locals that outlive the call.
        let raw = match unsafe { entry.create_instance(&info, None) } {
            Ok(raw) => raw,
            Err(vk::Result::ERROR_INCOMPATIBLE_DRIVER) => {
                return Err(Error::NoDevice {
                    detail: "the loader found no driver (vkCreateInstance returned \
                             VK_ERROR_INCOMPATIBLE_DRIVER)"
                        .into(),
                })
            }
            Err(e) => return Err(Error::vk("vkCreateInstance", e)),
        };
        let mut instance = Instance {
            entry,
            raw,
            api_version,
            validation,
            debug: None,
            named: debug_utils,
            messages,
            owned: true,
        };
        if debug_utils && validation {
            let loader = ash::ext::debug_utils::Instance::new(&instance.entry, &instance.raw);
            let info = messenger_info(&instance.messages);
            // SAFETY: `info` is valid; the log it points to is kept in
            // `instance.messages` until after the messenger is destroyed.
            let messenger = unsafe { loader.create_debug_utils_messenger(&info, None) }
                .during("vkCreateDebugUtilsMessengerEXT")?;
            instance.debug = Some((loader, messenger));
        }
        Ok(instance)
    }

    /// Wraps an instance the application created; it is not destroyed on drop.
    pub(crate) fn borrowed(entry: ash::Entry, raw: ash::Instance, api_version: u32) -> Self {
        Instance {
            entry,
            raw,
            api_version,
            validation: false,
            debug: None,
            named: false,
            messages: Arc::new(MessageLog::default()),
            owned: false,
        }
    }

    /// The physical devices, or [`Error::NoDevice`] when there are none.
    /// Whether `VK_EXT_debug_utils` is enabled (with validation or
    /// tracing), so that objects can be named.
    pub(crate) fn has_debug_utils(&self) -> bool {
        self.named
    }

    pub(crate) fn physical_devices(&self) -> Result<Vec<vk::PhysicalDevice>> {
        // SAFETY: `raw` is a live instance.
        match unsafe { self.raw.enumerate_physical_devices() } {
            Ok(list) if list.is_empty() => Err(Error::NoDevice {
                detail: "the loader found drivers but they report no device".into(),
            }),
            Ok(list) => Ok(list),
            Err(vk::Result::ERROR_INITIALIZATION_FAILED) => Err(Error::NoDevice {
                detail: "vkEnumeratePhysicalDevices returned VK_ERROR_INITIALIZATION_FAILED".into(),
            }),
            Err(e) => Err(Error::vk("vkEnumeratePhysicalDevices", e)),
        }
    }
}

impl Drop for Instance {
    fn drop(&mut self) {
        if let Some((loader, messenger)) = self.debug.take() {
            // SAFETY: the messenger was created from this instance and is destroyed once.
            unsafe { loader.destroy_debug_utils_messenger(messenger, None) };
        }
        if self.owned {
            // SAFETY: every child object (the device) was destroyed before the
            // instance is dropped: `Device` holds the instance and drops it last.
            unsafe { self.raw.destroy_instance(None) };
        }
    }
}

/// The names of the instance extensions the loader (or `layer`) offers.
fn instance_extensions(entry: &ash::Entry, layer: Option<&CStr>) -> Result<Vec<std::ffi::CString>> {
    // SAFETY: a global-level call on a loaded entry.
    let props = unsafe { entry.enumerate_instance_extension_properties(layer) }
        .during("vkEnumerateInstanceExtensionProperties")?;
    Ok(props
        .iter()
        .filter_map(|p| p.extension_name_as_c_str().ok().map(CStr::to_owned))
        .collect())
}
