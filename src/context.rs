//! `DeviceContext`: one device plus one stream. Making a context (from
//! options, from an application's raw Vulkan objects), new streams on its
//! device, the device-wide waits between streams, flushing and
//! synchronizing, and what the device and its memory report. Recording a
//! command is `enqueue.rs` (every operation goes through it); the stream
//! behind its lock is `stream/mod.rs`; transfers are `transfer.rs`,
//! fills `fill.rs`, options `options.rs`.

use std::sync::Arc;

use ash::vk;

use crate::error::{Error, Result};
use crate::garbage::GarbageList;
use crate::options::ContextOptions;
use crate::stream::StreamHandle;
use crate::trace::Tracer;
use crate::vk::{Adapter, Device, DeviceInfo, Enabled, Instance, MemoryInfo};

/// An application's Vulkan objects, lent to [`DeviceContext::from_raw`].
pub struct RawContext {
    /// The loader the instance was created with.
    pub entry: ash::Entry,
    /// The instance.
    pub instance: ash::Instance,
    /// The Vulkan version the instance was created for (`vk::API_VERSION_1_2` or newer).
    pub api_version: u32,
    /// The physical device of `device`.
    pub physical_device: vk::PhysicalDevice,
    /// The device, with `timelineSemaphore` enabled.
    pub device: ash::Device,
    /// A queue family with compute.
    pub queue_family_index: u32,
    /// Queues created in that family; vkcompute's streams use them in turn.
    pub queue_count: u32,
    /// `bufferDeviceAddress` is enabled on the device.
    pub buffer_device_address: bool,
    /// `synchronization2` is enabled on the device.
    pub synchronization2: bool,
    /// `VK_KHR_push_descriptor` is enabled on the device.
    pub push_descriptor: bool,
}

/// One device and one stream (an in-order queue of work).
///
/// Every `enqueue_*` call returns at once; its work runs after everything
/// enqueued before it on the same context. Cloning is cheap and gives
/// another handle to the same context.
///
/// ```
/// # fn main() -> vkcompute::Result<()> {
/// let ctx = vkcompute::DeviceContext::new()?;
/// let buf = ctx.enqueue_create_buffer::<u32>(4)?;
/// buf.enqueue_fill(7)?;
/// assert_eq!(buf.to_vec()?, [7, 7, 7, 7]);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct DeviceContext {
    pub(crate) stream: Arc<StreamHandle>,
}

/// Making a context (and more streams on its device), and waiting for its work.
impl DeviceContext {
    /// Opens the default device (see [`ContextOptions::device`]) with the
    /// settings of the environment.
    pub fn new() -> Result<Self> {
        Self::with_options(ContextOptions::new())
    }

    /// Opens a device as `options` say.
    pub fn with_options(options: ContextOptions) -> Result<Self> {
        let settings = options.resolve();
        let instance = Instance::new(
            settings.validation,
            settings.validation_fatal,
            settings.trace.is_some(),
        )?;
        let adapter = Adapter::choose(&instance, settings.device)?;
        log::info!("using Vulkan device {}", adapter.info);
        let asked = settings.device_options;
        let (push_descriptors, synchronization2) = (asked.push_descriptors, asked.synchronization2);
        let device = Device::new(instance, adapter, asked)?;
        if push_descriptors && device.push_descriptor.is_none() {
            log::info!(
                "`{}` lacks VK_KHR_push_descriptor: kernels bind through descriptor sets",
                device.name()
            );
        }
        if synchronization2 && !device.synchronization2() {
            log::info!(
                "`{}` lacks synchronization2: barriers use the original pipeline barrier",
                device.name()
            );
        }
        let tracer = match &settings.trace {
            Some(path) => Some(Arc::new(Tracer::create(path, settings.trace_commands)?)),
            None => None,
        };
        if settings.force_staging {
            log::info!("every host transfer goes through staging buffers (forced)");
        }
        Ok(DeviceContext {
            stream: StreamHandle::new(
                device.clone(),
                settings.force_staging,
                GarbageList::new(device),
                tracer,
                Arc::new(settings.printf.clone()),
            )?,
        })
    }

    /// The stream's label: the one given with [`with_label`](Self::with_label),
    /// else `stream of <device name>`. Clones share it.
    pub fn label(&self) -> String {
        match &*self.stream.label.lock().unwrap_or_else(|e| e.into_inner()) {
            Some(label) => label.to_string(),
            None => format!("stream of {}", self.name()),
        }
    }

    /// Labels the stream (every clone of this context): `Debug` shows it,
    /// the trace names the stream's tracks by it, and where validation is
    /// on it is the stream's timeline semaphore's debug name.
    pub fn with_label(self, label: impl AsRef<str>) -> Self {
        let label = label.as_ref();
        crate::vk::name_object(&self.stream.device, self.stream.timeline.semaphore, label);
        {
            let stream = self.stream.lock();
            if let Some(t) = &stream.trace {
                t.tracer
                    .name_tracks((t.host, t.batches), label, self.stream.device.name());
            }
        }
        *self.stream.label.lock().unwrap_or_else(|e| e.into_inner()) = Some(label.into());
        self
    }

    /// Another context on the same device, with its own stream (timeline,
    /// and its own queue where the device has more than one). Buffers move
    /// freely between streams of a device: a command on one stream that
    /// touches a buffer another stream is using waits for that work on the
    /// device (a semaphore wait in the submission, no host block).
    pub fn new_stream(&self) -> Result<DeviceContext> {
        self.stream
            .device
            .check_alive("DeviceContext::new_stream")?;
        Ok(DeviceContext {
            stream: StreamHandle::new(
                self.stream.device.clone(),
                self.stream.force_staging,
                self.stream.garbage.clone(),
                self.stream.tracer.clone(),
                self.stream.printf.clone(),
            )?,
        })
    }

    /// Makes the work enqueued on this context from now on wait (on the
    /// device) for everything enqueued on `other` so far. `other` must be a
    /// stream of the same device.
    pub fn enqueue_wait_for(&self, other: &DeviceContext) -> Result<()> {
        let op = "DeviceContext::enqueue_wait_for";
        if other.stream.device.id != self.stream.device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: format!(
                    "a context of device `{}` cannot wait for one of device `{}` on the device; \
                     synchronize the other context on the host instead",
                    self.name(),
                    other.name()
                ),
            });
        }
        self.stream.wait_for(&other.stream)
    }

    /// Builds a context on an application's own Vulkan device, so that an
    /// engine that already has Vulkan can use vkcompute's buffers and
    /// kernels. The application keeps ownership of the instance and device:
    /// vkcompute destroys only what it creates on them.
    ///
    /// # Safety
    ///
    /// - Every handle in `raw` is valid, and `device` was created from
    ///   `physical_device` of `instance` with Vulkan 1.2 or newer and the
    ///   `timelineSemaphore` feature enabled, and with the other features
    ///   and extensions `raw` says are enabled.
    /// - The device was created with at least `queue_count` queues in
    ///   `queue_family_index`, which supports compute; the application does
    ///   not use those queues while vkcompute may submit to them (or
    ///   synchronizes externally).
    /// - The instance and device outlive the returned context, every clone
    ///   of it, and every buffer and kernel made from it.
    /// - `robustBufferAccess` is enabled on the device (the safe kernel API
    ///   relies on it: an out-of-range index in a kernel must not reach other
    ///   memory), and every kernel loaded on the context needs only device
    ///   features the application enabled (features cannot be read back
    ///   from a device, so vkcompute takes those the physical device has).
    #[allow(
        unsafe_code,
        reason = "a public raw entry point: the application's Vulkan objects"
    )]
    pub unsafe fn from_raw(raw: RawContext) -> Result<DeviceContext> {
        let instance = Instance::borrowed(raw.entry, raw.instance, raw.api_version);
        let physical = instance.physical_devices()?;
        let index = physical
            .iter()
            .position(|&p| p == raw.physical_device)
            .unwrap_or(0);
        let adapter = Adapter::describe(&instance, raw.physical_device, index)?;
        if let Some(reason) = &adapter.info.unsupported {
            return Err(Error::UnsupportedDevice {
                device: adapter.info.name.clone(),
                reason: reason.clone(),
            });
        }
        let enabled = Enabled {
            queue_family: raw.queue_family_index,
            queue_count: raw.queue_count.max(1),
            push_descriptors: raw.push_descriptor,
            memory_budget: false,
            external: Default::default(),
        };
        let claimed = (raw.buffer_device_address, raw.synchronization2);
        let device = Device::borrowed(instance, adapter, raw.device, enabled, claimed)?;
        // Of the settings, only the transfer path applies to an
        // application's device.
        let settings = ContextOptions::new().resolve();
        Ok(DeviceContext {
            stream: StreamHandle::new(
                device.clone(),
                settings.force_staging,
                GarbageList::new(device),
                None,
                Arc::new(settings.printf.clone()),
            )?,
        })
    }

    /// Every Vulkan device the loader sees, usable or not.
    pub fn devices() -> Result<Vec<DeviceInfo>> {
        let instance = Instance::new(false, false, false)?;
        Ok(Adapter::enumerate(&instance)?
            .into_iter()
            .map(|a| a.info)
            .collect())
    }

    /// The device's name, such as `llvmpipe (LLVM 15.0.6, 256 bits)`.
    pub fn name(&self) -> &str {
        self.stream.device.name()
    }

    /// What the device is: kind, driver, API version, memory.
    pub fn info(&self) -> &DeviceInfo {
        &self.stream.device.adapter.info
    }

    /// Submits the work enqueued so far without waiting for it. Also
    /// returns the error of an earlier submission of this stream that a
    /// buffer's `Drop` made (its work did not run), once.
    pub fn flush(&self) -> Result<()> {
        self.stream.device.check_alive("DeviceContext::flush")?;
        self.stream.flush()?;
        self.stream.lock().take_failed().map_or(Ok(()), Err)
    }

    /// Submits the work enqueued so far and waits until all of it is done;
    /// it waits even where a submission failed, so that nothing submitted
    /// is still running when it returns. Returns the first error: of this
    /// submission, of the wait, or of an earlier submission of this stream
    /// that a buffer's `Drop` made. Errors that arise in the `Drop` of a
    /// mapping or host slice belong to their buffer, not to the stream:
    /// the buffer's next operation returns them.
    pub fn synchronize(&self) -> Result<()> {
        self.stream.synchronize()
    }

    /// [`synchronize`](Self::synchronize), waiting at most `timeout`: where
    /// the work is not done by then, [`Error::Timeout`](crate::Error::Timeout),
    /// and nothing changed (the work stays submitted and runs on; a later
    /// wait waits for it, and returns any error an earlier submission
    /// kept). The way to wait for a kernel that may never end: on lavapipe
    /// such a kernel runs until the process ends (Mesa 22 stops each loop
    /// after 65,535 iterations; Mesa 25 does not), so a plain
    /// `synchronize`, a read of a buffer it writes, and dropping the
    /// context all wait for ever; on GPUs the driver resets the device
    /// after its own timeout (seconds), and every later call returns
    /// [`Error::DeviceLost`](crate::Error::DeviceLost).
    ///
    /// ```
    /// # fn main() -> vkcompute::Result<()> {
    /// # let ctx = vkcompute::DeviceContext::new()?;
    /// let x = ctx.enqueue_create_buffer::<u32>(1024)?;
    /// x.enqueue_fill(7)?;
    /// ctx.synchronize_timeout(std::time::Duration::from_secs(10))?;
    /// # Ok(()) }
    /// ```
    pub fn synchronize_timeout(&self, timeout: std::time::Duration) -> Result<()> {
        self.stream
            .synchronize_at_most("DeviceContext::synchronize_timeout", Some(timeout))
    }

    /// The device's memory: bytes of device-local memory free and in all,
    /// and what this device's allocator holds.
    pub fn memory_info(&self) -> MemoryInfo {
        MemoryInfo::of(&self.stream.device)
    }
}

impl std::fmt::Debug for DeviceContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DeviceContext")
            .field("label", &self.label())
            .field("device", &self.name())
            .field("force_staging", &self.stream.force_staging)
            .finish()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A context on lavapipe with validation on and no pipeline cache on disk.
    pub(crate) fn validated_context() -> DeviceContext {
        DeviceContext::with_options(
            ContextOptions::new()
                .validation(true)
                .pipeline_cache_dir(None),
        )
        .expect("lavapipe")
    }

    #[test]
    fn an_error_kept_from_drop_belongs_to_its_buffer() {
        let ctx = validated_context();
        let log = ctx.diagnostics().validation_log();
        let buf = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        let other = ctx.enqueue_create_buffer::<u32>(4).unwrap();
        buf.view.memory.keep_error(Error::Overlap {
            op: "a write-back in Drop",
            src_offset: 0,
            dst_offset: 0,
            len: 4,
        });
        // Another buffer's operations and the context's own calls do not see it.
        other.enqueue_fill(5).unwrap();
        ctx.synchronize().unwrap();
        assert_eq!(other.to_vec().unwrap(), [5; 4]);
        // The buffer's next operation returns it, once, and does nothing.
        match buf.enqueue_fill(1) {
            Err(Error::Deferred(inner)) => assert!(matches!(*inner, Error::Overlap { .. })),
            other => panic!("expected the kept error, got {other:?}"),
        }
        buf.enqueue_fill(2).unwrap();
        assert_eq!(buf.to_vec().unwrap(), [2; 4]);
        // A stream failure kept from a drop: `synchronize` still waits for
        // the work submitted before (long enough to be seen running).
        let big = ctx.enqueue_create_buffer::<u32>(32 << 20).unwrap();
        big.enqueue_fill(3).unwrap();
        ctx.stream.flush().unwrap();
        ctx.stream.lock().set_failed(Error::ValidationLayerMissing);
        assert!(matches!(ctx.synchronize(), Err(Error::Deferred(_))));
        let submitted = ctx.stream.timeline.submitted();
        assert!(ctx.stream.timeline.is_complete(submitted));
        assert_eq!(ctx.stream.lock().live_objects().batches_in_flight, 0);
        ctx.synchronize().unwrap();
        drop((buf, big, other, ctx));
        assert!(log.messages().is_empty(), "{:?}", log.messages());
    }

    #[test]
    fn execution_time_never_destroys_its_queries_under_running_work() {
        let ctx = validated_context();
        let log = ctx.diagnostics().validation_log();
        let big = ctx.enqueue_create_buffer::<u32>(32 << 20).unwrap();
        // A stream failure kept from a drop made `synchronize` return before
        // waiting, and `execution_time` destroyed its pool under the work.
        ctx.stream.lock().set_failed(Error::ValidationLayerMissing);
        let timed = ctx.execution_time(|_| big.enqueue_fill(1), 2);
        assert!(matches!(timed, Err(Error::Deferred(_))), "{timed:?}");
        // A panic inside the closure: the pool goes once its work is done.
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            ctx.execution_time(
                |_| {
                    big.enqueue_fill(2)?;
                    panic!("a user's closure panics");
                },
                1,
            )
        }));
        assert!(panicked.is_err());
        ctx.synchronize().unwrap();
        let elapsed = ctx.execution_time(|_| big.enqueue_fill(3), 1).unwrap();
        assert!(elapsed > std::time::Duration::ZERO);
        assert_eq!(
            big.create_sub_buffer::<u32>(7, 1)
                .unwrap()
                .to_vec()
                .unwrap(),
            [3]
        );
        drop((big, ctx));
        // Destroying the device reports any query pool left alive.
        assert!(log.messages().is_empty(), "{:?}", log.messages());
    }
}
