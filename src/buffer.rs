//! `DeviceBuffer<T>`: a typed view of device memory; the methods it shares
//! with `HostBuffer<T>` (the `typed_buffer!` macro); and `OwnedRawBuffer`,
//! a buffer taken out of vkcompute.

use std::marker::PhantomData;
use std::sync::Arc;

use ash::vk;
use bytemuck::Pod;

use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::resource::BufferMemory;
use crate::view::View;
use crate::vk::MemoryUsage;

/// A buffer and its memory handed over by [`DeviceBuffer::take_raw`]: the
/// caller owns them and frees them with [`free`](Self::free) (or
/// [`RawHandles::free_buffer`](crate::RawHandles::free_buffer)). It keeps
/// its device alive, so it may outlive every context. Dropped without being freed, the buffer is freed
/// when its device is destroyed (after the device is idle).
#[must_use = "the memory stays allocated until the device goes unless freed with `free`"]
pub struct OwnedRawBuffer {
    /// `Some` until freed or handed to the device.
    raw: Option<crate::vk::memory::RawBuffer>,
    device: Arc<crate::vk::Device>,
    size: u64,
    device_address: Option<u64>,
}

impl OwnedRawBuffer {
    /// The buffer handle.
    pub fn buffer(&self) -> vk::Buffer {
        self.raw.as_ref().map_or(vk::Buffer::null(), |r| r.buffer)
    }

    /// The device memory the buffer is bound to, and the buffer's offset in it.
    pub fn memory(&self) -> (vk::DeviceMemory, u64) {
        self.raw
            .as_ref()
            .map_or((vk::DeviceMemory::null(), 0), |r| r.memory())
    }

    /// The bytes of data (the `VkBuffer` may be a little larger).
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The buffer's device address, where the device supports it.
    pub fn device_address(&self) -> Option<u64> {
        self.device_address
    }

    /// Frees the buffer and its memory now.
    ///
    /// # Safety
    ///
    /// No work (submitted by vkcompute or by the caller) may still use the
    /// buffer, and nothing may use it afterwards.
    #[allow(
        unsafe_code,
        reason = "a public raw entry point: the caller answers for the buffer's last use"
    )]
    pub unsafe fn free(mut self) {
        if let Some(raw) = self.raw.take() {
            raw.destroy(&self.device);
        }
    }

    /// Whether the buffer belongs to the device of `ctx`.
    pub(crate) fn is_of(&self, ctx: &DeviceContext) -> bool {
        Arc::ptr_eq(&self.device, &ctx.stream.device)
    }
}

impl Drop for OwnedRawBuffer {
    fn drop(&mut self) {
        if let Some(raw) = self.raw.take() {
            // The caller's work may still use it: free it with the device.
            self.device.free_when_destroyed(raw);
        }
    }
}

impl std::fmt::Debug for OwnedRawBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OwnedRawBuffer")
            .field("buffer", &self.buffer())
            .field("size", &self.size)
            .field("device_address", &self.device_address)
            .finish()
    }
}

/// The methods `DeviceBuffer` and `HostBuffer` share: both are a typed view
/// (`view`, `len`) of buffer memory, and differ only in the memory's kind and
/// in how the host reaches it.
macro_rules! typed_buffer {
    ($name:ident, $label:literal) => {
        impl<T> Clone for $name<T> {
            fn clone(&self) -> Self {
                $name {
                    view: self.view.clone(),
                    len: self.len,
                    _element: std::marker::PhantomData,
                }
            }
        }

        impl<T> $crate::view::Sealed for $name<T> {}

        impl<T: bytemuck::Pod> $crate::view::CopySource<T> for $name<T> {
            fn source(&self) -> $crate::view::Source<'_> {
                $crate::view::Source::View(&self.view)
            }
        }

        impl<T: bytemuck::Pod> $crate::view::CopyDestination<T> for $name<T> {
            fn destination(&self) -> &$crate::view::View {
                &self.view
            }
        }

        impl<T: bytemuck::Pod> $name<T> {
            #[doc = concat!("The type's name for messages: `", $label, "[float32]`.")]
            pub fn type_name() -> String {
                format!(concat!($label, "[{}]"), $crate::view::dtype_name::<T>())
            }

            /// The number of elements.
            pub fn len(&self) -> usize {
                self.len
            }

            /// Whether the buffer has no elements.
            pub fn is_empty(&self) -> bool {
                self.len == 0
            }

            /// The size in bytes.
            pub fn byte_len(&self) -> usize {
                self.view.bytes as usize
            }

            /// The context that owns the buffer (whose stream runs its
            /// `enqueue_*` calls and frees it).
            pub fn context(&self) -> $crate::DeviceContext {
                self.view.context()
            }

            /// Enqueues a copy into this buffer from `src`: a host slice,
            /// vector or array (copied or staged before this returns, so it
            /// can be reused at once), a device buffer or a host buffer.
            /// Lengths must match.
            pub fn enqueue_copy_from<S: $crate::CopySource<T> + ?Sized>(
                &self,
                src: &S,
            ) -> $crate::Result<()> {
                self.view.copy_from(
                    concat!($label, "::enqueue_copy_from"),
                    src.source(),
                    size_of::<T>(),
                )
            }

            /// Enqueues a copy of this buffer into a device or host buffer,
            /// on this buffer's stream. Lengths must match.
            pub fn enqueue_copy_to<D: $crate::CopyDestination<T> + ?Sized>(
                &self,
                dst: &D,
            ) -> $crate::Result<()> {
                self.view.copy_to(
                    concat!($label, "::enqueue_copy_to"),
                    dst.destination(),
                    size_of::<T>(),
                )
            }

            /// Enqueues a fill of every element with `value`.
            pub fn enqueue_fill(&self, value: T) -> $crate::Result<()> {
                self.view.fill(concat!($label, "::enqueue_fill"), &value)
            }

            /// A view of `len` elements of `U`, starting `offset` elements of
            /// `U` into this buffer (both counted in `U`, as the seed does).
            /// The view shares the memory and keeps it alive. Errors: the
            /// range does not lie inside this buffer
            /// ([`Error::OutOfRange`](crate::Error::OutOfRange)), or the byte
            /// offset does not suit `U`'s alignment
            /// ([`Error::Misaligned`](crate::Error::Misaligned)).
            pub fn create_sub_buffer<U: bytemuck::Pod>(
                &self,
                offset: usize,
                len: usize,
            ) -> $crate::Result<$name<U>> {
                let view = self.view.sub_view::<U>(
                    concat!($label, "::create_sub_buffer"),
                    || match self.view.memory.label() {
                        Some(label) => format!("{} `{label}`", Self::type_name()),
                        None => Self::type_name(),
                    },
                    offset,
                    len,
                )?;
                Ok($name {
                    view,
                    len,
                    _element: std::marker::PhantomData,
                })
            }

            /// Makes `ctx` the buffer's owner: its stream runs the buffer's
            /// `enqueue_*` calls and frees the memory. `ctx` must be on the
            /// same device ([`Error::DifferentDevice`](crate::Error::DifferentDevice)
            /// otherwise). Applies to the memory, so to every clone and view of it.
            pub fn reassign_ownership_to(&self, ctx: &$crate::DeviceContext) -> $crate::Result<()> {
                self.view
                    .reassign(concat!($label, "::reassign_ownership_to"), ctx)
            }

            /// This buffer as a kernel argument, for a storage- or
            /// uniform-buffer binding (the kernel's declaration decides
            /// which), for [`DeviceContext::enqueue_function`](crate::DeviceContext::enqueue_function).
            pub fn arg(&self) -> $crate::KernelArg<'_> {
                self.kernel_arg(false)
            }

            /// The buffer as a kernel argument whose element type may
            /// differ from the one the kernel declares (a `u32` buffer
            /// bound to a `float[]`, say): its bytes are taken as they are.
            /// [`arg`](Self::arg) refuses such a binding. Element sizes are
            /// checked either way.
            pub fn arg_reinterpret(&self) -> $crate::KernelArg<'_> {
                self.kernel_arg(true)
            }

            fn kernel_arg(&self, reinterpret: bool) -> $crate::KernelArg<'_> {
                $crate::KernelArg::buffer($crate::kernel::BufferArg {
                    view: &self.view,
                    element_size: std::mem::size_of::<T>(),
                    type_name: Self::type_name,
                    element: std::any::type_name::<T>,
                    reinterpret,
                })
            }

            /// The `VkBuffer`, byte offset and byte size behind this buffer,
            /// which keeps ownership of them.
            pub fn raw(&self) -> $crate::RawBufferRef {
                self.view.raw()
            }

            #[doc = concat!("The buffer's label: the one given with [`with_label`](Self::with_label), \
                else its type and length (`", $label, "[float32] of 1024 elements`). \
                Views and clones share their memory's label.")]
            pub fn label(&self) -> String {
                match self.view.memory.label() {
                    Some(label) => label.to_string(),
                    None => format!("{} of {} elements", Self::type_name(), self.len),
                }
            }

            /// Labels the buffer's memory (every clone and view of it):
            /// `Debug` shows the label, and where validation or tracing is
            /// on it is the `VkBuffer`'s debug-utils object name, so that
            /// validation messages and external tools name it. A buffer is named its type and length
            /// until labelled.
            pub fn with_label(self, label: impl AsRef<str>) -> Self {
                self.view.memory.set_label(label.as_ref());
                self
            }
        }
    };
}
pub(crate) use typed_buffer;

/// A buffer of `T` in device memory, or a view of one.
///
/// Cloning is cheap: the clone refers to the same memory. The memory is
/// freed when the last clone and view are dropped *and* the stream has
/// passed the last work that uses it, so dropping a buffer right after
/// enqueueing work on it is safe.
///
/// ```
/// # fn main() -> vkcompute::Result<()> {
/// let ctx = vkcompute::DeviceContext::new()?;
/// let x = ctx.enqueue_create_buffer::<f32>(3)?;
/// x.enqueue_copy_from(&[1.0, 2.0, 3.0])?;
/// let y = ctx.enqueue_create_buffer::<f32>(3)?;
/// y.enqueue_copy_from(&x)?;
/// assert_eq!(y.to_vec()?, [1.0, 2.0, 3.0]);
///
/// // A view of other elements over the same memory: bytes 5 and 6 of `words`.
/// let words = ctx.enqueue_create_buffer::<u32>(4)?;
/// words.enqueue_fill(0)?;
/// words.create_sub_buffer::<u8>(5, 2)?.enqueue_fill(0xff)?;
/// assert_eq!(words.to_vec()?, [0, 0x00ff_ff00, 0, 0]);
/// # Ok(()) }
/// ```
pub struct DeviceBuffer<T> {
    pub(crate) view: View,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

typed_buffer!(DeviceBuffer, "DeviceBuffer");

/// Device buffers.
impl DeviceContext {
    /// A buffer of `len` elements of `T` in device memory. Its contents are
    /// undefined until written (as with `cudaMalloc`).
    pub fn enqueue_create_buffer<T: Pod>(&self, len: usize) -> Result<DeviceBuffer<T>> {
        DeviceBuffer::new(self, len)
    }
}

impl<T: Pod> DeviceBuffer<T> {
    /// A buffer of `len` elements over `view` (of their size).
    pub(crate) fn from_view(view: View, len: usize) -> Self {
        DeviceBuffer {
            view,
            len,
            _element: PhantomData,
        }
    }

    pub(crate) fn new(ctx: &DeviceContext, len: usize) -> Result<Self> {
        let view = View::allocate::<T>(ctx, len, MemoryUsage::Device, "DeviceBuffer")?;
        Ok(DeviceBuffer {
            view,
            len,
            _element: PhantomData,
        })
    }

    /// Copies the buffer into `dst` (of the same length), waiting for the
    /// work that writes the buffer. A blocking call: an asynchronous write
    /// into a borrowed slice could not be safe.
    pub fn copy_to_slice(&self, dst: &mut [T]) -> Result<()> {
        self.view.read_into(
            "DeviceBuffer::copy_to_slice",
            bytemuck::cast_slice_mut(dst),
            size_of::<T>(),
        )
    }

    /// The buffer's contents, waiting for the work that writes it.
    pub fn to_vec(&self) -> Result<Vec<T>> {
        self.view.to_vec("DeviceBuffer::to_vec")
    }

    /// The device address of the first element, where the device supports
    /// buffer device addresses (`None` otherwise, and for empty buffers).
    pub fn device_address(&self) -> Option<u64> {
        self.view.device_address()
    }

    /// Hands the buffer and its memory to the caller, once the work that
    /// uses them has completed. Only a whole buffer with no other clone,
    /// view or graph using it can be taken ([`Error::Shared`] otherwise:
    /// the buffer is returned inside the error's context unchanged); that
    /// is checked before the wait, so no work enqueued through a clone
    /// dropped meanwhile is left behind. Free the result with
    /// [`OwnedRawBuffer::free`].
    pub fn take_raw(self) -> std::result::Result<OwnedRawBuffer, (Self, Error)> {
        let op = "DeviceBuffer::take_raw";
        if self.view.bytes == 0 {
            return Err((
                self,
                Error::Shared {
                    op,
                    reason: "it is empty: there is no Vulkan buffer to take",
                },
            ));
        }
        if self.view.offset != 0 || self.view.bytes != self.view.memory.size {
            return Err((
                self,
                Error::Shared {
                    op,
                    reason: "it is a view of a larger buffer",
                },
            ));
        }
        let len = self.len;
        let back = |memory: Arc<BufferMemory>| DeviceBuffer {
            view: View {
                memory,
                offset: 0,
                bytes: self.view.bytes,
            },
            len,
            _element: PhantomData,
        };
        // Uniqueness first, then the wait: once this is the memory's only
        // handle, nothing can enqueue work on it any more, so the work the
        // wait sees is all the work there will be. (Waiting first would
        // miss what a clone enqueued meanwhile before it dropped.)
        let memory = match Arc::try_unwrap(self.view.memory) {
            Ok(memory) => memory,
            Err(memory) => {
                return Err((
                    back(memory),
                    Error::Shared {
                        op,
                        reason: "other clones or views of it are alive",
                    },
                ));
            }
        };
        if let Err(e) = memory.wait_for_host_access(true) {
            return Err((back(Arc::new(memory)), e));
        }
        let size = memory.size;
        let device = memory.device.clone();
        let raw = memory.into_raw();
        Ok(OwnedRawBuffer {
            device_address: raw.as_ref().and_then(|r| r.device_address(&device)),
            raw,
            device,
            size,
        })
    }
}

impl<T: Pod> std::fmt::Debug for DeviceBuffer<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(&Self::type_name())
            .field("label", &self.label())
            .field("len", &self.len)
            .field("raw", &self.raw())
            .finish()
    }
}
