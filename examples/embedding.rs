//! Embedding vkcompute in an application that already has Vulkan: the
//! application makes its own instance and device with `ash`, lends them to
//! vkcompute, uses vkcompute's buffers and kernels, and destroys its objects
//! itself afterwards.
//!
//!     cargo run --example embedding

use std::ffi::CStr;

use vkcompute::ash::{self, vk};
use vkcompute::{shaders, DeviceContext, Kernel, RawContext};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The application's own Vulkan set-up, as any engine would do it.
    // SAFETY: loading the system's Vulkan loader.
    let entry = unsafe { ash::Entry::load()? };
    let app = vk::ApplicationInfo::default()
        .application_name(c"embedding example")
        .api_version(vk::API_VERSION_1_2);
    // SAFETY: a valid create info.
    let instance = unsafe {
        entry.create_instance(
            &vk::InstanceCreateInfo::default().application_info(&app),
            None,
        )?
    };
    // SAFETY: `instance` is live.
    let physical = unsafe { instance.enumerate_physical_devices()? }
        .into_iter()
        .next()
        .ok_or("no Vulkan device")?;
    // SAFETY: `physical` belongs to `instance`.
    let families = unsafe { instance.get_physical_device_queue_family_properties(physical) };
    let family = families
        .iter()
        .position(|f| f.queue_flags.contains(vk::QueueFlags::COMPUTE))
        .ok_or("no compute queue")? as u32;
    let priorities = [1.0];
    let queues = [vk::DeviceQueueCreateInfo::default()
        .queue_family_index(family)
        .queue_priorities(&priorities)];
    let mut v12 = vk::PhysicalDeviceVulkan12Features::default().timeline_semaphore(true);
    // vkcompute's safe kernels rely on robust buffer access (see `from_raw`).
    let v10 = vk::PhysicalDeviceFeatures::default().robust_buffer_access(true);
    let info = vk::DeviceCreateInfo::default()
        .queue_create_infos(&queues)
        .enabled_features(&v10)
        .push_next(&mut v12);
    // SAFETY: a valid create info for a device of this instance.
    let device = unsafe { instance.create_device(physical, &info, None)? };
    // SAFETY: as above.
    let name = unsafe { instance.get_physical_device_properties(physical) };
    let name = name.device_name_as_c_str().unwrap_or(c"?").to_owned();

    {
        // SAFETY: the handles are valid; the device has timeline semaphores,
        // robust buffer access (saxpy needs no other feature) and one compute queue, which the application leaves to vkcompute
        // while the context lives; instance and device outlive the context.
        let ctx = unsafe {
            DeviceContext::from_raw(RawContext {
                entry: entry.clone(),
                instance: instance.clone(),
                api_version: vk::API_VERSION_1_2,
                physical_device: physical,
                device: device.clone(),
                queue_family_index: family,
                queue_count: 1,
                buffer_device_address: false,
                synchronization2: false,
                push_descriptor: false,
            })?
        };
        let store = Kernel::new(&ctx, shaders::STORE, "main")?;
        let data = ctx.enqueue_create_buffer::<u32>(8)?;
        data.enqueue_fill(1)?;
        ctx.enqueue_function(&store, 1, &[data.arg()], &[3u32, 99u32])?;
        let got = data.to_vec()?;
        println!("on the application's device {}: {data}", name_str(&name));
        if got != [1, 1, 1, 99, 1, 1, 1, 1] {
            return Err(format!("wrong result {got:?}").into());
        }
        // The context (and everything vkcompute made on the device) goes here.
    }

    // The application destroys what it created.
    // SAFETY: vkcompute's objects are gone; nothing else uses the device.
    unsafe {
        device.device_wait_idle()?;
        device.destroy_device(None);
        instance.destroy_instance(None);
    }
    println!("checked: vkcompute ran on a device it did not create, and left it to its owner");
    Ok(())
}

fn name_str(name: &CStr) -> String {
    name.to_string_lossy().into_owned()
}
