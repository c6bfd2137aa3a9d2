//! Physical devices: what each one is and can do, and which one to use.

use std::ffi::{CStr, CString};

use ash::vk;

use super::conv;
use super::info::{ComputeLimits, DeviceInfo, DeviceSelector, SubgroupInfo};
use super::instance::Instance;
use crate::capabilities::{Capabilities, Feature, FeatureStructs, FloatControls};
use crate::error::{Error, Result, VkResultExt};

/// The compute queue family chosen on a device.
#[derive(Clone, Copy, Debug)]
pub(crate) struct QueueFamily {
    pub(crate) index: u32,
    pub(crate) count: u32,
    pub(crate) timestamp_valid_bits: u32,
}

/// A physical device and everything vkcompute needs to know of it.
pub(crate) struct Adapter {
    pub(crate) raw: vk::PhysicalDevice,
    pub(crate) info: DeviceInfo,
    pub(crate) api_version: u32,
    pub(crate) limits: vk::PhysicalDeviceLimits,
    pub(crate) memory: vk::PhysicalDeviceMemoryProperties,
    pub(crate) extensions: Vec<CString>,
    /// What the device offers kernels (probed once; a device enables
    /// what it uses of it: `Capabilities::enabled_when_opened`).
    pub(crate) capabilities: Capabilities,
    pub(crate) queue_family: Option<QueueFamily>,
    /// `maxMemoryAllocationSize` (Vulkan 1.1).
    pub(crate) max_allocation_size: u64,
    /// `maxBufferSize` (Vulkan 1.3), where the device reports it.
    pub(crate) max_buffer_size: Option<u64>,
    /// `vendorID`, `deviceID` and `pipelineCacheUUID`: what a pipeline
    /// cache's header must match.
    pub(crate) vendor_id: u32,
    pub(crate) device_id: u32,
    pub(crate) pipeline_cache_uuid: [u8; vk::UUID_SIZE],
    /// `minImportedHostPointerAlignment` (`VK_EXT_external_memory_host`),
    /// 0 where the device lacks the extension.
    pub(crate) min_imported_host_pointer_alignment: u64,
    /// `maxPushDescriptors` (`VK_KHR_push_descriptor`), 0 where the device
    /// lacks the extension.
    pub(crate) max_push_descriptors: u32,
    /// `maxPerSetDescriptors` (Vulkan 1.1): a descriptor set layout with
    /// more may fail to be created.
    pub(crate) max_per_set_descriptors: u32,
    /// `driverID` (Vulkan 1.2), for driver workarounds only: what a device
    /// can do is read from its features and limits, never from this.
    pub(crate) driver_id: vk::DriverId,
}

impl Adapter {
    pub(crate) fn has_extension(&self, name: &CStr) -> bool {
        self.extensions.iter().any(|e| e.as_c_str() == name)
    }

    /// Reads a physical device's properties, features, queues and extensions.
    pub(crate) fn describe(
        instance: &Instance,
        raw: vk::PhysicalDevice,
        index: usize,
    ) -> Result<Self> {
        let vki = &instance.raw;
        // SAFETY: `raw` comes from this instance's enumeration.
        let basic = unsafe { vki.get_physical_device_properties(raw) };
        let api_version = basic.api_version.min(instance.api_version);
        let new_enough = api_version >= vk::API_VERSION_1_2;

        // SAFETY: `raw` comes from this instance's enumeration.
        let extensions: Vec<CString> = unsafe { vki.enumerate_device_extension_properties(raw) }
            .during("vkEnumerateDeviceExtensionProperties")?
            .iter()
            .filter_map(|p| p.extension_name_as_c_str().ok().map(CStr::to_owned))
            .collect();
        let has = |name: &CStr| extensions.iter().any(|e| e.as_c_str() == name);
        let is_v13 = api_version >= vk::API_VERSION_1_3;
        // Feature extensions only of Vulkan 1.2 devices (vkcompute uses no other).
        let mut structs = FeatureStructs::probing(is_v13, |name| new_enough && has(name));
        let size_control_props = is_v13
            || structs
                .extensions()
                .contains(&ash::ext::subgroup_size_control::NAME);

        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut maintenance4 = vk::PhysicalDeviceMaintenance4Properties::default();
        let mut subgroup_props = vk::PhysicalDeviceSubgroupProperties::default();
        let mut float_controls = vk::PhysicalDeviceFloatControlsProperties::default();
        let mut size_control = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
        let mut ids = vk::PhysicalDeviceIDProperties::default();
        let mut host_import = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
        let has_host_import = has(ash::ext::external_memory_host::NAME);
        let mut push_descriptor = vk::PhysicalDevicePushDescriptorPropertiesKHR::default();
        let has_push_descriptor = has(ash::khr::push_descriptor::NAME);
        let mut props2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut maintenance3)
            .push_next(&mut ids);
        if has_host_import {
            props2 = props2.push_next(&mut host_import);
        }
        if has_push_descriptor {
            props2 = props2.push_next(&mut push_descriptor);
        }
        if new_enough {
            props2 = props2
                .push_next(&mut driver)
                .push_next(&mut subgroup_props)
                .push_next(&mut float_controls);
        }
        if is_v13 {
            props2 = props2.push_next(&mut maintenance4);
        }
        if size_control_props {
            props2 = props2.push_next(&mut size_control);
        }
        // SAFETY: the chain holds only structs of the device's API version
        // and of extensions it offers.
        unsafe { vki.get_physical_device_properties2(raw, &mut props2) };
        let properties = props2.properties;
        let max_buffer_size = is_v13.then_some(maintenance4.max_buffer_size);

        let mut features = Default::default();
        if new_enough {
            let mut f2 = structs.chain();
            // SAFETY: the chain holds only structs of the device's API version
            // and of extensions it offers.
            unsafe { vki.get_physical_device_features2(raw, &mut f2) };
            let v10 = f2.features;
            structs.set_v10(v10);
            features = structs.read();
        }
        let capabilities = Capabilities {
            features,
            float_controls: FloatControls::from_properties(&float_controls),
            subgroup_stages: subgroup_props.supported_stages,
            subgroup_operations: subgroup_props.supported_operations,
        };

        // SAFETY: `raw` comes from this instance's enumeration.
        let families = unsafe { vki.get_physical_device_queue_family_properties(raw) };
        let queue_family = choose_queue_family(&families);

        // SAFETY: as above.
        let memory = unsafe { vki.get_physical_device_memory_properties(raw) };
        let memory_bytes = memory.memory_heaps[..memory.memory_heap_count as usize]
            .iter()
            .filter(|h| h.flags.contains(vk::MemoryHeapFlags::DEVICE_LOCAL))
            .map(|h| h.size)
            .sum();

        let name = properties
            .device_name_as_c_str()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_else(|_| format!("device {index}"));
        let driver_text = if new_enough {
            let n = driver
                .driver_name_as_c_str()
                .map(|s| s.to_string_lossy().into_owned());
            let i = driver
                .driver_info_as_c_str()
                .map(|s| s.to_string_lossy().into_owned());
            match (n, i) {
                (Ok(n), Ok(i)) if !i.is_empty() => format!("{n} {i}"),
                (Ok(n), _) => n,
                _ => format!("{:#x}", properties.driver_version),
            }
        } else {
            format!("{:#x}", properties.driver_version)
        };

        let unsupported = if !new_enough {
            Some(format!(
                "it implements Vulkan {} and vkcompute needs 1.2",
                conv::version_string(basic.api_version)
            ))
        } else if !capabilities.has(Feature::TimelineSemaphore) {
            Some("it has no timeline semaphores".to_string())
        } else if queue_family.is_none() {
            Some("it has no compute queue".to_string())
        } else {
            None
        };

        Ok(Adapter {
            raw,
            info: DeviceInfo {
                index,
                name,
                kind: conv::device_kind(properties.device_type),
                driver: driver_text,
                api_version: conv::version_string(basic.api_version),
                memory_bytes,
                unsupported,
                enabled: None,
                subgroup: SubgroupInfo {
                    size: subgroup_props.subgroup_size,
                    min_size: if size_control_props {
                        size_control.min_subgroup_size
                    } else {
                        subgroup_props.subgroup_size
                    },
                    max_size: if size_control_props {
                        size_control.max_subgroup_size
                    } else {
                        subgroup_props.subgroup_size
                    },
                    supported_stages: subgroup_props.supported_stages,
                    supported_operations: subgroup_props.supported_operations,
                    size_control: capabilities.has(Feature::SubgroupSizeControl)
                        && size_control
                            .required_subgroup_size_stages
                            .contains(vk::ShaderStageFlags::COMPUTE),
                    required_size_stages: size_control.required_subgroup_size_stages,
                    max_compute_workgroup_subgroups: size_control.max_compute_workgroup_subgroups,
                },
                limits: ComputeLimits::from_limits(
                    &properties.limits,
                    maintenance3.max_memory_allocation_size,
                    max_buffer_size,
                ),
                uuid: ids.device_uuid,
                driver_uuid: ids.driver_uuid,
                luid: (ids.device_luid_valid == vk::TRUE).then_some(ids.device_luid),
            },
            api_version,
            limits: properties.limits,
            memory,
            extensions,
            capabilities,
            queue_family,
            max_allocation_size: maintenance3.max_memory_allocation_size,
            max_buffer_size,
            vendor_id: properties.vendor_id,
            device_id: properties.device_id,
            pipeline_cache_uuid: properties.pipeline_cache_uuid,
            min_imported_host_pointer_alignment: if has_host_import {
                host_import.min_imported_host_pointer_alignment
            } else {
                0
            },
            max_push_descriptors: if has_push_descriptor {
                push_descriptor.max_push_descriptors
            } else {
                0
            },
            max_per_set_descriptors: maintenance3.max_per_set_descriptors,
            driver_id: driver.driver_id,
        })
    }

    /// Every physical device of `instance`, described.
    pub(crate) fn enumerate(instance: &Instance) -> Result<Vec<Adapter>> {
        instance
            .physical_devices()?
            .into_iter()
            .enumerate()
            .map(|(i, pd)| Adapter::describe(instance, pd, i))
            .collect()
    }

    /// The device `selector` names, or else the most preferred usable one:
    /// a discrete GPU, then integrated, virtual, and the CPU last.
    pub(crate) fn choose(
        instance: &Instance,
        selector: Option<(DeviceSelector, &'static str)>,
    ) -> Result<Adapter> {
        let mut adapters = Adapter::enumerate(instance)?;
        let list = || {
            adapters
                .iter()
                .map(|a| format!("{}: {}", a.info.index, a.info.name))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let chosen = match &selector {
            Some((DeviceSelector::Index(i), _)) => adapters.iter().position(|a| a.info.index == *i),
            Some((DeviceSelector::Name(n), _)) => {
                let needle = n.to_lowercase();
                adapters
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| a.info.name.to_lowercase().contains(&needle))
                    .min_by_key(|(_, a)| {
                        (a.info.unsupported.is_some(), conv::preference(a.info.kind))
                    })
                    .map(|(pos, _)| pos)
            }
            None => adapters
                .iter()
                .enumerate()
                .filter(|(_, a)| a.info.unsupported.is_none())
                .min_by_key(|(_, a)| conv::preference(a.info.kind))
                .map(|(pos, _)| pos),
        };
        let Some(pos) = chosen else {
            return Err(match selector {
                Some((sel, origin)) => Error::DeviceNotFound {
                    selector: match sel {
                        DeviceSelector::Index(i) => i.to_string(),
                        DeviceSelector::Name(n) => n,
                    },
                    origin,
                    available: list(),
                },
                None => Error::NoDevice {
                    detail: format!("no device is usable: {}", {
                        adapters
                            .iter()
                            .map(|a| a.info.to_string())
                            .collect::<Vec<_>>()
                            .join("; ")
                    }),
                },
            });
        };
        let adapter = adapters.swap_remove(pos);
        if let Some(reason) = &adapter.info.unsupported {
            return Err(Error::UnsupportedDevice {
                device: adapter.info.name.clone(),
                reason: reason.clone(),
            });
        }
        Ok(adapter)
    }
}

/// A queue family with compute (and a timestamp counter where one exists),
/// preferring a compute family without graphics, which runs beside a
/// renderer's work rather than between it.
fn choose_queue_family(families: &[vk::QueueFamilyProperties]) -> Option<QueueFamily> {
    families
        .iter()
        .enumerate()
        .filter(|(_, f)| f.queue_flags.contains(vk::QueueFlags::COMPUTE) && f.queue_count > 0)
        .min_by_key(|(_, f)| {
            (
                f.timestamp_valid_bits == 0,
                f.queue_flags.contains(vk::QueueFlags::GRAPHICS),
            )
        })
        .map(|(i, f)| QueueFamily {
            index: i as u32,
            count: f.queue_count,
            timestamp_valid_bits: f.timestamp_valid_bits,
        })
}
