//! What a context shows of itself, grouped away from its operations:
//! [`DeviceContext::diagnostics`] (the pipeline cache, validation
//! messages, live objects and memory held) and [`DeviceContext::raw`]
//! (the raw Vulkan handles and limits, with the unsafe `free_buffer`), for
//! tests, tools and applications that share the device; `trim` and
//! `is_staging_forced`.

use std::path::Path;

use ash::vk;

use crate::buffer::OwnedRawBuffer;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::stream::batches::LiveObjects;
use crate::vk::{ValidationLog, ValidationMessage};

/// Trimming pooled memory, and the ways to a context's diagnostics and raw
/// handles.
impl DeviceContext {
    /// Waits for the enqueued work, then frees the memory and objects kept
    /// pooled for reuse: the context's staging buffers, command buffers and
    /// descriptor pools, and the device's cache of retired buffers; and,
    /// where streams of the device were dropped, waits for the whole device
    /// to be idle and destroys their timeline semaphores (otherwise kept
    /// until the device goes). Live buffers are not affected.
    pub fn trim(&self) -> Result<()> {
        self.synchronize()?;
        self.stream.lock().trim()?;
        self.stream.device.release_cached_buffers();
        self.stream.device.destroy_retired_semaphores()
    }

    /// Whether host transfers always go through staging buffers on this
    /// context ([`ContextOptions::force_staging`](crate::ContextOptions::force_staging)).
    pub fn is_staging_forced(&self) -> bool {
        self.stream.force_staging
    }

    /// What the context shows of itself, for tests and tools: the
    /// pipeline cache, validation messages, live objects and memory held.
    pub fn diagnostics(&self) -> Diagnostics<'_> {
        Diagnostics { ctx: self }
    }

    /// The raw Vulkan handles and limits, for applications that share the
    /// device with other Vulkan code.
    pub fn raw(&self) -> RawHandles<'_> {
        RawHandles { ctx: self }
    }
}

/// A context's diagnostics: see [`DeviceContext::diagnostics`].
#[derive(Clone, Copy, Debug)]
pub struct Diagnostics<'a> {
    ctx: &'a DeviceContext,
}

impl<'a> Diagnostics<'a> {
    /// The file the device's pipeline cache is saved to when the device
    /// closes, or `None` where it keeps none (see
    /// [`ContextOptions::pipeline_cache_dir`](crate::ContextOptions::pipeline_cache_dir)).
    pub fn pipeline_cache_file(self) -> Option<&'a Path> {
        self.ctx.stream.device.pipeline_cache_file()
    }

    /// Whether the device's pipeline cache started from a file written by
    /// an earlier device (a warm start).
    pub fn pipeline_cache_loaded(self) -> bool {
        self.ctx.stream.device.pipeline_cache_loaded
    }

    /// Whether validation layers are enabled on this context.
    pub fn is_validation_enabled(self) -> bool {
        self.ctx.stream.device.instance.validation
    }

    /// The messages the validation layers (and loader and driver) have
    /// reported on this context's device so far.
    pub fn validation_messages(self) -> Vec<ValidationMessage> {
        self.ctx.stream.device.instance.messages.snapshot()
    }

    /// Like [`validation_messages`](Self::validation_messages), clearing them.
    pub fn take_validation_messages(self) -> Vec<ValidationMessage> {
        self.ctx.stream.device.instance.messages.take()
    }

    /// A handle to the device's messages that stays readable after the
    /// context is dropped, so that messages reported while the device is
    /// destroyed (objects leaked, say) are seen too.
    pub fn validation_log(self) -> ValidationLog {
        ValidationLog(self.ctx.stream.device.instance.messages.clone())
    }

    /// Counts of the Vulkan objects the context holds.
    pub fn live_objects(self) -> LiveObjects {
        self.ctx.stream.lock().live_objects()
    }

    /// How many streams of this context's device are alive (this one
    /// included): a stream goes when its last handle (a context, a buffer
    /// it owns, a graph waiting for it) is dropped, for finding leaks.
    pub fn live_streams(self) -> usize {
        self.ctx
            .stream
            .device
            .streams
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// How many timeline semaphores of dropped streams of this device wait
    /// to be destroyed: once the device is idle, which `trim` waits for,
    /// and which making a stream waits for where 64 of them wait (on a
    /// device vkcompute created), so that their number stays bounded.
    pub fn retired_timelines(self) -> usize {
        self.ctx.stream.device.retired_semaphore_count()
    }

    /// Bytes the device allocator has handed out to buffers in all (the
    /// sum of its allocations; [`DeviceContext::memory_info`]'s
    /// `allocated` counts the memory blocks it holds them in, which may be
    /// larger).
    pub fn allocated_bytes(self) -> u64 {
        self.ctx
            .stream
            .device
            .allocator()
            .generate_report()
            .total_allocated_bytes
    }
}

/// A context's raw Vulkan handles: see [`DeviceContext::raw`]. The queues
/// of [`queue_family_index`](Self::queue_family_index) are vkcompute's: it
/// submits to them from its own threads, and Vulkan requires access to a
/// queue to be externally synchronized, so do not submit to them yourself.
#[derive(Clone, Copy, Debug)]
pub struct RawHandles<'a> {
    ctx: &'a DeviceContext,
}

impl<'a> RawHandles<'a> {
    /// The `ash` device, for work outside vkcompute. Using it is `unsafe`
    /// in the usual `ash` way; objects made with it are the caller's to destroy.
    pub fn device(self) -> &'a ash::Device {
        &self.ctx.stream.device.raw
    }

    /// The `ash` instance the device was created from.
    pub fn instance(self) -> &'a ash::Instance {
        &self.ctx.stream.device.instance.raw
    }

    /// The physical device.
    pub fn physical_device(self) -> vk::PhysicalDevice {
        self.ctx.stream.device.adapter.raw
    }

    /// The queue family the context submits to.
    pub fn queue_family_index(self) -> u32 {
        self.ctx.stream.device.queue_family
    }

    /// The device's limits (`maxStorageBufferRange` and the like).
    pub fn limits(self) -> &'a vk::PhysicalDeviceLimits {
        self.ctx.stream.device.limits()
    }

    /// Frees a buffer taken with [`DeviceBuffer::take_raw`](crate::DeviceBuffer::take_raw)
    /// from a context of this device, as [`OwnedRawBuffer::free`]
    /// does. A buffer of another device is refused ([`Error::DifferentDevice`])
    /// and freed when its own device is destroyed.
    ///
    /// # Safety
    ///
    /// No work (submitted by vkcompute or by the caller) may still use the
    /// buffer, and nothing may use it afterwards.
    #[allow(
        unsafe_code,
        reason = "a public raw entry point: the caller answers for the buffer's last use"
    )]
    pub unsafe fn free_buffer(self, raw: OwnedRawBuffer) -> Result<()> {
        if !raw.is_of(self.ctx) {
            return Err(Error::DifferentDevice {
                op: "RawHandles::free_buffer",
                detail: "the buffer belongs to another device; it is freed when that device is \
                         destroyed, or free it with `OwnedRawBuffer::free`"
                    .into(),
            });
        }
        // SAFETY: the caller guarantees that nothing uses the buffer any more.
        unsafe { raw.free() };
        Ok(())
    }
}
