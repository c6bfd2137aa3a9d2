//! Physical devices: what each one is and can do, and which one to use.

use std::ffi::{CStr, CString};
use std::fmt;
use std::str::FromStr;

use ash::vk;

use super::conv;
use super::instance::Instance;
use crate::error::{Error, Result, VkResultExt};

/// What kind of processor a device is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// A GPU with its own memory.
    DiscreteGpu,
    /// A GPU sharing memory with the CPU.
    IntegratedGpu,
    /// A GPU of a virtual machine.
    VirtualGpu,
    /// The CPU itself (lavapipe, SwiftShader).
    Cpu,
    /// Anything else.
    Other,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DeviceKind::DiscreteGpu => "discrete GPU",
            DeviceKind::IntegratedGpu => "integrated GPU",
            DeviceKind::VirtualGpu => "virtual GPU",
            DeviceKind::Cpu => "CPU",
            DeviceKind::Other => "other",
        })
    }
}

/// A Vulkan device as [`DeviceContext::devices`](crate::DeviceContext::devices) lists it.
#[derive(Clone, Debug)]
pub struct DeviceInfo {
    /// Its position in the loader's list: what `VKCOMPUTE_DEVICE=<index>` selects.
    pub index: usize,
    /// The device name, such as `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub name: String,
    /// Discrete, integrated, virtual, CPU.
    pub kind: DeviceKind,
    /// The driver's name and version information.
    pub driver: String,
    /// The Vulkan version the device implements, as `major.minor.patch`.
    pub api_version: String,
    /// Bytes in the device's device-local memory heaps.
    pub memory_bytes: u64,
    /// Why vkcompute cannot use the device, or `None` when it can.
    pub unsupported: Option<String>,
}

impl fmt::Display for DeviceInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} ({}, driver {}, Vulkan {}, {})",
            self.index,
            self.name,
            self.kind,
            self.driver,
            self.api_version,
            conv::bytes_string(self.memory_bytes)
        )?;
        if let Some(reason) = &self.unsupported {
            write!(f, " [unusable: {reason}]")?;
        }
        Ok(())
    }
}

/// Which device a context should use.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeviceSelector {
    /// The device at this index of [`DeviceContext::devices`](crate::DeviceContext::devices).
    Index(usize),
    /// The most preferred device whose name contains this text (ignoring case).
    Name(String),
}

impl FromStr for DeviceSelector {
    type Err = std::convert::Infallible;

    /// A number selects by index, anything else by name.
    fn from_str(s: &str) -> std::result::Result<Self, Self::Err> {
        let s = s.trim();
        Ok(match s.parse::<usize>() {
            Ok(i) => DeviceSelector::Index(i),
            Err(_) => DeviceSelector::Name(s.to_string()),
        })
    }
}

impl From<usize> for DeviceSelector {
    fn from(i: usize) -> Self {
        DeviceSelector::Index(i)
    }
}

impl From<&str> for DeviceSelector {
    fn from(s: &str) -> Self {
        s.parse().unwrap_or_else(|never| match never {})
    }
}

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
    pub(crate) timeline_semaphore: bool,
    pub(crate) synchronization2: bool,
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
    /// The subgroup operations compute shaders may use (empty where the
    /// compute stage has none).
    pub(crate) compute_subgroup_operations: vk::SubgroupFeatureFlags,
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

        let mut driver = vk::PhysicalDeviceDriverProperties::default();
        let mut maintenance3 = vk::PhysicalDeviceMaintenance3Properties::default();
        let mut maintenance4 = vk::PhysicalDeviceMaintenance4Properties::default();
        let mut subgroup = vk::PhysicalDeviceSubgroupProperties::default();
        let mut props2 = vk::PhysicalDeviceProperties2::default().push_next(&mut maintenance3);
        if new_enough {
            props2 = props2.push_next(&mut driver).push_next(&mut subgroup);
        }
        if api_version >= vk::API_VERSION_1_3 {
            props2 = props2.push_next(&mut maintenance4);
        }
        // SAFETY: the chain holds only structs of the device's API version.
        unsafe { vki.get_physical_device_properties2(raw, &mut props2) };
        let properties = props2.properties;

        let mut features = Features::default();
        if new_enough {
            let mut v11 = vk::PhysicalDeviceVulkan11Features::default();
            let mut v12 = vk::PhysicalDeviceVulkan12Features::default();
            let mut v13 = vk::PhysicalDeviceVulkan13Features::default();
            let mut f2 = vk::PhysicalDeviceFeatures2::default()
                .push_next(&mut v11)
                .push_next(&mut v12);
            if api_version >= vk::API_VERSION_1_3 {
                f2 = f2.push_next(&mut v13);
            }
            // SAFETY: the chain holds only structs of the device's API version.
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

        // SAFETY: as above.
        let extensions = unsafe { vki.enumerate_device_extension_properties(raw) }
            .during("vkEnumerateDeviceExtensionProperties")?
            .iter()
            .filter_map(|p| p.extension_name_as_c_str().ok().map(CStr::to_owned))
            .collect();

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
            compute_subgroup_operations: if subgroup
                .supported_stages
                .contains(vk::ShaderStageFlags::COMPUTE)
            {
                subgroup.supported_operations
            } else {
                vk::SubgroupFeatureFlags::empty()
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
