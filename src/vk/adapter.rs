//! Physical devices: what each one is and can do, and which one to use.

use std::ffi::{CStr, CString};

use ash::vk;

use super::conv;
use super::info::{ComputeLimits, DeviceInfo, DeviceSelector, SubgroupInfo};
use super::instance::Instance;
use crate::error::{Error, Result, VkResultExt};

/// The optional features vkcompute enables where a device has them.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Features {
    pub(crate) shader_int64: bool,
    pub(crate) shader_float64: bool,
    pub(crate) shader_int16: bool,
    pub(crate) storage_buffer_16bit: bool,
    pub(crate) uniform_and_storage_buffer_16bit: bool,
    pub(crate) storage_buffer_8bit: bool,
    pub(crate) uniform_and_storage_buffer_8bit: bool,
    pub(crate) shader_float16: bool,
    pub(crate) shader_int8: bool,
    pub(crate) buffer_device_address: bool,
    pub(crate) host_query_reset: bool,
    pub(crate) scalar_block_layout: bool,
    pub(crate) vulkan_memory_model: bool,
    pub(crate) vulkan_memory_model_device_scope: bool,
    pub(crate) shader_buffer_int64_atomics: bool,
    pub(crate) shader_shared_int64_atomics: bool,
    pub(crate) storage_push_constant_16: bool,
    pub(crate) storage_push_constant_8: bool,
    pub(crate) shader_integer_dot_product: bool,
    pub(crate) zero_initialize_workgroup_memory: bool,
    /// `VK_KHR_shader_non_semantic_info` (core in Vulkan 1.3).
    pub(crate) non_semantic_info: bool,
    pub(crate) subgroup_size_control: bool,
    pub(crate) compute_full_subgroups: bool,
    /// `maintenance4` (Vulkan 1.3; `LocalSizeId` needs it).
    pub(crate) maintenance4: bool,
    /// Variable pointers (Vulkan 1.1), which only kernels of the unsafe
    /// pointer path may use.
    pub(crate) variable_pointers_storage_buffer: bool,
    pub(crate) variable_pointers: bool,
    /// Float-controls properties (not features: always "enabled").
    pub(crate) float_controls: FloatControls,
    pub(crate) robust_buffer_access: bool,
    pub(crate) robust_buffer_access2: bool,
    pub(crate) timeline_semaphore: bool,
    pub(crate) synchronization2: bool,
}

/// The float-controls properties, each for 16-, 32- and 64-bit floats.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FloatControls {
    pub(crate) denorm_preserve: [bool; 3],
    pub(crate) denorm_flush_to_zero: [bool; 3],
    pub(crate) signed_zero_inf_nan_preserve: [bool; 3],
    pub(crate) rounding_mode_rte: [bool; 3],
    pub(crate) rounding_mode_rtz: [bool; 3],
}

/// Features of Vulkan 1.3 that a Vulkan 1.2 device offers through
/// extensions: which of those extensions to enable.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FeatureExtensions {
    pub(crate) integer_dot_product: bool,
    pub(crate) zero_initialize_workgroup_memory: bool,
    pub(crate) subgroup_size_control: bool,
    pub(crate) non_semantic_info: bool,
}

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
    pub(crate) features: Features,
    pub(crate) queue_family: Option<QueueFamily>,
    /// `maxMemoryAllocationSize` (Vulkan 1.1).
    pub(crate) max_allocation_size: u64,
    /// `maxBufferSize` (Vulkan 1.3), where the device reports it.
    pub(crate) max_buffer_size: Option<u64>,
    /// The extensions to enable for features a Vulkan 1.2 device offers
    /// that way (all off on Vulkan 1.3, where the features are core).
    pub(crate) feature_extensions: FeatureExtensions,
    /// `vendorID`, `deviceID` and `pipelineCacheUUID`: what a pipeline
    /// cache's header must match.
    pub(crate) vendor_id: u32,
    pub(crate) device_id: u32,
    pub(crate) pipeline_cache_uuid: [u8; vk::UUID_SIZE],
    /// `minImportedHostPointerAlignment` (`VK_EXT_external_memory_host`),
    /// 0 where the device lacks the extension.
    pub(crate) min_imported_host_pointer_alignment: u64,
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
        let has_robustness2 = has(ash::ext::robustness2::NAME);
        let is_v13 = api_version >= vk::API_VERSION_1_3;
        let feature_extensions = FeatureExtensions {
            integer_dot_product: !is_v13
                && new_enough
                && has(ash::khr::shader_integer_dot_product::NAME),
            zero_initialize_workgroup_memory: !is_v13
                && new_enough
                && has(ash::khr::zero_initialize_workgroup_memory::NAME),
            subgroup_size_control: !is_v13
                && new_enough
                && has(ash::ext::subgroup_size_control::NAME),
            non_semantic_info: !is_v13
                && new_enough
                && has(ash::khr::shader_non_semantic_info::NAME),
        };
        let size_control_props = is_v13 || feature_extensions.subgroup_size_control;

        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut maintenance4 = vk::PhysicalDeviceMaintenance4Properties::default();
        let mut subgroup_props = vk::PhysicalDeviceSubgroupProperties::default();
        let mut float_controls = vk::PhysicalDeviceFloatControlsProperties::default();
        let mut size_control = vk::PhysicalDeviceSubgroupSizeControlProperties::default();
        let mut ids = vk::PhysicalDeviceIDProperties::default();
        let mut host_import = vk::PhysicalDeviceExternalMemoryHostPropertiesEXT::default();
        let has_host_import = has(ash::ext::external_memory_host::NAME);
        let mut props2 = vk::PhysicalDeviceProperties2::default()
            .push_next(&mut maintenance3)
            .push_next(&mut ids);
        if has_host_import {
            props2 = props2.push_next(&mut host_import);
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

        let mut features = Features::default();
        if new_enough {
            let mut v11 = vk::PhysicalDeviceVulkan11Features::default();
            let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
            let mut robustness2 = vk::PhysicalDeviceRobustness2FeaturesEXT::default();
            let mut dot = vk::PhysicalDeviceShaderIntegerDotProductFeatures::default();
            let mut zero = vk::PhysicalDeviceZeroInitializeWorkgroupMemoryFeatures::default();
            let mut sizes = vk::PhysicalDeviceSubgroupSizeControlFeatures::default();
            let mut f2 = vk::PhysicalDeviceFeatures2::default()
                .push_next(&mut v11)
                .push_next(&mut v12);
            if api_version >= vk::API_VERSION_1_3 {
                f2 = f2.push_next(&mut v13);
            }
            if has_robustness2 {
                f2 = f2.push_next(&mut robustness2);
            }
            if feature_extensions.integer_dot_product {
                f2 = f2.push_next(&mut dot);
            }
            if feature_extensions.zero_initialize_workgroup_memory {
                f2 = f2.push_next(&mut zero);
            }
            if feature_extensions.subgroup_size_control {
                f2 = f2.push_next(&mut sizes);
            }
            // SAFETY: the chain holds only structs of the device's API version
            // and of extensions it offers.
            unsafe { vki.get_physical_device_features2(raw, &mut f2) };
            let v10 = f2.features;
            let on = |b: vk::Bool32| b == vk::TRUE;
            features = Features {
                shader_int64: on(v10.shader_int64),
                shader_float64: on(v10.shader_float64),
                shader_int16: on(v10.shader_int16),
                storage_buffer_16bit: on(v11.storage_buffer16_bit_access),
                uniform_and_storage_buffer_16bit: on(v11.uniform_and_storage_buffer16_bit_access),
                storage_buffer_8bit: on(v12.storage_buffer8_bit_access),
                uniform_and_storage_buffer_8bit: on(v12.uniform_and_storage_buffer8_bit_access),
                shader_float16: on(v12.shader_float16),
                shader_int8: on(v12.shader_int8),
                buffer_device_address: on(v12.buffer_device_address),
                host_query_reset: on(v12.host_query_reset),
                scalar_block_layout: on(v12.scalar_block_layout),
                vulkan_memory_model: on(v12.vulkan_memory_model),
                vulkan_memory_model_device_scope: on(v12.vulkan_memory_model_device_scope),
                shader_buffer_int64_atomics: on(v12.shader_buffer_int64_atomics),
                shader_shared_int64_atomics: on(v12.shader_shared_int64_atomics),
                storage_push_constant_16: on(v11.storage_push_constant16),
                storage_push_constant_8: on(v12.storage_push_constant8),
                shader_integer_dot_product: on(v13.shader_integer_dot_product)
                    || on(dot.shader_integer_dot_product),
                zero_initialize_workgroup_memory: on(v13.shader_zero_initialize_workgroup_memory)
                    || on(zero.shader_zero_initialize_workgroup_memory),
                non_semantic_info: is_v13 || feature_extensions.non_semantic_info,
                subgroup_size_control: on(v13.subgroup_size_control)
                    || on(sizes.subgroup_size_control),
                compute_full_subgroups: on(v13.compute_full_subgroups)
                    || on(sizes.compute_full_subgroups),
                maintenance4: on(v13.maintenance4),
                variable_pointers_storage_buffer: on(v11.variable_pointers_storage_buffer),
                variable_pointers: on(v11.variable_pointers),
                float_controls: {
                    let fc = &float_controls;
                    FloatControls {
                        denorm_preserve: [
                            on(fc.shader_denorm_preserve_float16),
                            on(fc.shader_denorm_preserve_float32),
                            on(fc.shader_denorm_preserve_float64),
                        ],
                        denorm_flush_to_zero: [
                            on(fc.shader_denorm_flush_to_zero_float16),
                            on(fc.shader_denorm_flush_to_zero_float32),
                            on(fc.shader_denorm_flush_to_zero_float64),
                        ],
                        signed_zero_inf_nan_preserve: [
                            on(fc.shader_signed_zero_inf_nan_preserve_float16),
                            on(fc.shader_signed_zero_inf_nan_preserve_float32),
                            on(fc.shader_signed_zero_inf_nan_preserve_float64),
                        ],
                        rounding_mode_rte: [
                            on(fc.shader_rounding_mode_rte_float16),
                            on(fc.shader_rounding_mode_rte_float32),
                            on(fc.shader_rounding_mode_rte_float64),
                        ],
                        rounding_mode_rtz: [
                            on(fc.shader_rounding_mode_rtz_float16),
                            on(fc.shader_rounding_mode_rtz_float32),
                            on(fc.shader_rounding_mode_rtz_float64),
                        ],
                    }
                },
                robust_buffer_access: on(v10.robust_buffer_access),
                robust_buffer_access2: has_robustness2 && on(robustness2.robust_buffer_access2),
                timeline_semaphore: on(v12.timeline_semaphore),
                synchronization2: api_version >= vk::API_VERSION_1_3 && on(v13.synchronization2),
            };
        }

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
        } else if !features.timeline_semaphore {
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
                    size_control: features.subgroup_size_control
                        && size_control
                            .required_subgroup_size_stages
                            .contains(vk::ShaderStageFlags::COMPUTE),
                    required_size_stages: size_control.required_subgroup_size_stages,
                    max_compute_workgroup_subgroups: size_control.max_compute_workgroup_subgroups,
                },
                limits: ComputeLimits::from_limits(&properties.limits),
                uuid: ids.device_uuid,
                driver_uuid: ids.driver_uuid,
                luid: (ids.device_luid_valid == vk::TRUE).then_some(ids.device_luid),
            },
            api_version,
            limits: properties.limits,
            memory,
            extensions,
            features,
            queue_family,
            max_allocation_size: maintenance3.max_memory_allocation_size,
            max_buffer_size: (api_version >= vk::API_VERSION_1_3)
                .then_some(maintenance4.max_buffer_size),
            feature_extensions,
            vendor_id: properties.vendor_id,
            device_id: properties.device_id,
            pipeline_cache_uuid: properties.pipeline_cache_uuid,
            min_imported_host_pointer_alignment: if has_host_import {
                host_import.min_imported_host_pointer_alignment
            } else {
                0
            },
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
