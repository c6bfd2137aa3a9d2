//! `DeviceBuffer<T>`: a typed view of device memory, and the copy traits
//! that let one `enqueue_copy_from` / `enqueue_copy_to` take any other end.

use std::marker::PhantomData;
use std::mem::size_of;
use std::sync::Arc;

use ash::vk;
use bytemuck::Pod;

use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::resource::BufferMemory;
use crate::vk::MemoryUsage;

/// A byte range of buffer memory: what every typed buffer and view is.
/// (Public only to name it in the sealed copy traits; not reachable from outside.)
#[derive(Clone)]
pub struct View {
    pub(crate) memory: Arc<BufferMemory>,
    /// Byte offset in the memory.
    pub(crate) offset: u64,
    /// Bytes in the view.
    pub(crate) bytes: u64,
}

impl View {
    /// New memory of `len` elements of `T` for `ctx`; `kind` names it in errors.
    pub(crate) fn allocate<T: Pod>(
        ctx: &DeviceContext,
        len: usize,
        usage: MemoryUsage,
        kind: &str,
    ) -> Result<Self> {
        let what = format!("{kind}[{}] of {len} elements", dtype_name::<T>());
        check_element_size::<T>(&what)?;
        let bytes = Error::byte_size(&what, len, size_of::<T>())?;
        // The memory is whole 32-bit words (see `BufferMemory::new`).
        if bytes.checked_next_multiple_of(4).is_none() {
            return Err(Error::SizeOverflow {
                what,
                len,
                elem_size: size_of::<T>(),
            });
        }
        Ok(View {
            memory: BufferMemory::new(&ctx.shared, bytes, usage, &what)?,
            offset: 0,
            bytes,
        })
    }

    /// The context whose stream runs this view's commands.
    pub(crate) fn context(&self) -> DeviceContext {
        DeviceContext {
            shared: self.memory.owner(),
        }
    }

    /// Enqueues a copy from `src` into this view (which must have its length).
    pub(crate) fn copy_from(&self, op: &'static str, src: Source<'_>) -> Result<()> {
        let ctx = self.memory.owner();
        match src {
            Source::Host(bytes) => {
                check_len(op, self.bytes, bytes.len() as u64)?;
                ctx.upload(op, &self.memory, self.offset, bytes)
            }
            Source::View(src) => {
                check_len(op, self.bytes, src.bytes)?;
                if src.memory.device.id != self.memory.device.id {
                    return src.copy_between_devices(op, self);
                }
                ctx.copy(
                    op,
                    (&src.memory, src.offset),
                    (&self.memory, self.offset),
                    self.bytes,
                )
            }
        }
    }

    /// Copies this view into `dst` on another device: through memory both
    /// devices share where one end is exportable and the devices are one
    /// physical device (done when this returns), else through the host.
    fn copy_between_devices(&self, op: &'static str, dst: &View) -> Result<()> {
        match crate::external::copy_between_devices(op, self, dst) {
            Some(done) => done,
            None => self.copy_through_host(op, dst),
        }
    }

    /// Copies this view into `dst` on another device, through host memory:
    /// read here once this view's pending writes are done, then uploaded
    /// (staged at once) on `dst`'s stream.
    fn copy_through_host(&self, op: &'static str, dst: &View) -> Result<()> {
        let mut bytes = vec![0u8; self.bytes as usize];
        self.read_into(op, &mut bytes)?;
        dst.memory
            .owner()
            .upload(op, &dst.memory, dst.offset, &bytes)
    }

    /// Enqueues a copy of this view into `dst` (which must have its length),
    /// on this view's stream.
    pub(crate) fn copy_to(&self, op: &'static str, dst: &View) -> Result<()> {
        check_len(op, dst.bytes, self.bytes)?;
        if dst.memory.device.id != self.memory.device.id {
            return self.copy_between_devices(op, dst);
        }
        let ctx = self.memory.owner();
        ctx.copy(
            op,
            (&self.memory, self.offset),
            (&dst.memory, dst.offset),
            self.bytes,
        )
    }

    /// Copies the view into `out` (of its length), waiting for the work that
    /// writes it.
    pub(crate) fn read_into(&self, op: &'static str, out: &mut [u8]) -> Result<()> {
        check_len(op, out.len() as u64, self.bytes)?;
        self.memory
            .owner()
            .download(op, &self.memory, self.offset, out)
    }

    /// The view's contents as a new vector of `T`.
    pub(crate) fn to_vec<T: Pod>(&self, op: &'static str) -> Result<Vec<T>> {
        let len = (self.bytes / size_of::<T>().max(1) as u64) as usize;
        let mut out = vec![T::zeroed(); len];
        self.read_into(op, bytemuck::cast_slice_mut(&mut out))?;
        Ok(out)
    }

    /// Enqueues a fill of the view with copies of `value`.
    pub(crate) fn fill<T: Pod>(&self, op: &'static str, value: &T) -> Result<()> {
        if size_of::<T>() == 0 {
            return Ok(());
        }
        self.memory.owner().fill(
            op,
            &self.memory,
            self.offset,
            self.bytes,
            bytemuck::bytes_of(value),
        )
    }

    pub(crate) fn raw(&self) -> RawBufferRef {
        RawBufferRef {
            buffer: self.memory.handle(),
            offset: self.offset,
            size: self.bytes,
        }
    }

    /// A view of `len` elements of `U` starting `offset` elements of `U`
    /// into this view, checked for range and alignment.
    pub(crate) fn sub_view<U: Pod>(
        &self,
        op: &'static str,
        buffer: impl Fn() -> String,
        offset: usize,
        len: usize,
    ) -> Result<View> {
        check_element_size::<U>(op)?;
        let size = size_of::<U>();
        let out_of_range = || Error::OutOfRange {
            op,
            buffer: buffer(),
            offset,
            len,
            buffer_len: (self.bytes / size.max(1) as u64) as usize,
        };
        let start = Error::byte_size(op, offset, size).map_err(|_| out_of_range())?;
        let bytes = Error::byte_size(op, len, size).map_err(|_| out_of_range())?;
        if start.checked_add(bytes).is_none_or(|end| end > self.bytes) {
            return Err(out_of_range());
        }
        let absolute = self.offset + start;
        let align = std::mem::align_of::<U>() as u64;
        if absolute % align != 0 {
            return Err(Error::Misaligned {
                op,
                offset: absolute,
                alignment: align,
                rule: "the view's element type must be aligned in the buffer",
            });
        }
        Ok(View {
            memory: self.memory.clone(),
            offset: absolute,
            bytes,
        })
    }

    /// Moves the memory's deferred free and default stream to `ctx`.
    pub(crate) fn reassign(&self, op: &'static str, ctx: &DeviceContext) -> Result<()> {
        if ctx.shared.device.id != self.memory.device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: format!(
                    "a buffer of device `{}` cannot be owned by a context of device `{}`; copy it instead",
                    self.memory.device.name(),
                    ctx.name()
                ),
            });
        }
        self.memory.set_owner(ctx.shared.clone());
        Ok(())
    }

    /// The device address of the view's first byte, where the device has
    /// buffer device addresses.
    pub(crate) fn device_address(&self) -> Option<u64> {
        let raw = self.memory.raw()?;
        raw.device_address(&self.memory.device)
            .map(|a| a + self.offset)
    }
}

/// Refuses element types of no size: a buffer of them could hold nothing,
/// yet `len()` would count elements that no copy can carry.
pub(crate) fn check_element_size<T>(what: &str) -> Result<()> {
    if size_of::<T>() == 0 {
        return Err(Error::ZeroSizedElement {
            what: what.to_string(),
            type_name: std::any::type_name::<T>(),
        });
    }
    Ok(())
}

fn check_len(op: &'static str, dst_bytes: u64, src_bytes: u64) -> Result<()> {
    if dst_bytes != src_bytes {
        return Err(Error::LengthMismatch {
            op,
            dst_len: dst_bytes as usize,
            src_len: src_bytes as usize,
        });
    }
    Ok(())
}

/// The `VkBuffer` behind a buffer or view, and the byte range it covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RawBufferRef {
    /// The buffer handle (null for a buffer of zero bytes).
    pub buffer: vk::Buffer,
    /// The view's first byte in the buffer.
    pub offset: u64,
    /// The view's size in bytes.
    pub size: u64,
}

/// A buffer and its memory handed over by [`DeviceBuffer::take_raw`]: the
/// caller owns them and frees them with [`free`](Self::free) (or
/// [`DeviceContext::free_raw`]). It keeps its device alive, so it may
/// outlive every context. Dropped without being freed, the buffer is freed
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
    pub unsafe fn free(mut self) {
        if let Some(raw) = self.raw.take() {
            raw.destroy(&self.device);
        }
    }

    /// Whether the buffer belongs to the device of `ctx`.
    pub(crate) fn is_of(&self, ctx: &DeviceContext) -> bool {
        Arc::ptr_eq(&self.device, &ctx.shared.device)
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

/// Where a copy's data comes from.
#[doc(hidden)]
pub enum Source<'a> {
    /// Host memory, copied (or staged) at once.
    Host(&'a [u8]),
    /// Another buffer or view.
    View(&'a View),
}

mod sealed {
    pub trait Sealed {}
}
pub(crate) use sealed::Sealed;

/// What [`DeviceBuffer::enqueue_copy_from`] can copy from: host slices and
/// vectors of `T`, and other buffers of `T`.
pub trait CopySource<T>: sealed::Sealed {
    #[doc(hidden)]
    fn source(&self) -> Source<'_>;
}

/// What [`DeviceBuffer::enqueue_copy_to`] can copy into: other buffers of `T`.
pub trait CopyDestination<T>: sealed::Sealed {
    #[doc(hidden)]
    fn destination(&self) -> &View;
}

impl<T: Pod> sealed::Sealed for [T] {}
impl<T: Pod> CopySource<T> for [T] {
    fn source(&self) -> Source<'_> {
        Source::Host(bytemuck::cast_slice(self))
    }
}

impl<T: Pod> sealed::Sealed for Vec<T> {}
impl<T: Pod> CopySource<T> for Vec<T> {
    fn source(&self) -> Source<'_> {
        Source::Host(bytemuck::cast_slice(self))
    }
}

impl<T: Pod, const N: usize> sealed::Sealed for [T; N] {}
impl<T: Pod, const N: usize> CopySource<T> for [T; N] {
    fn source(&self) -> Source<'_> {
        Source::Host(bytemuck::cast_slice(self))
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

        impl<T> $crate::buffer::Sealed for $name<T> {}

        impl<T: bytemuck::Pod> $crate::buffer::CopySource<T> for $name<T> {
            fn source(&self) -> $crate::buffer::Source<'_> {
                $crate::buffer::Source::View(&self.view)
            }
        }

        impl<T: bytemuck::Pod> $crate::buffer::CopyDestination<T> for $name<T> {
            fn destination(&self) -> &$crate::buffer::View {
                &self.view
            }
        }

        impl<T: bytemuck::Pod> $name<T> {
            #[doc = concat!("The type's name for messages: `", $label, "[float32]`.")]
            pub fn type_name() -> String {
                format!(concat!($label, "[{}]"), $crate::buffer::dtype_name::<T>())
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
                self.view
                    .copy_from(concat!($label, "::enqueue_copy_from"), src.source())
            }

            /// Enqueues a copy of this buffer into a device or host buffer,
            /// on this buffer's stream. Lengths must match.
            pub fn enqueue_copy_to<D: $crate::CopyDestination<T> + ?Sized>(
                &self,
                dst: &D,
            ) -> $crate::Result<()> {
                self.view
                    .copy_to(concat!($label, "::enqueue_copy_to"), dst.destination())
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
                    Self::type_name,
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

            /// This buffer as a kernel argument (bound as a storage buffer),
            /// for [`DeviceContext::enqueue_function`](crate::DeviceContext::enqueue_function).
            pub fn arg(&self) -> $crate::KernelArg<'_> {
                $crate::KernelArg {
                    view: &self.view,
                    element_size: std::mem::size_of::<T>(),
                    type_name: Self::type_name,
                }
            }

            /// The `VkBuffer`, byte offset and byte size behind this buffer,
            /// which keeps ownership of them.
            pub fn raw(&self) -> $crate::RawBufferRef {
                self.view.raw()
            }
        }
    };
}
pub(crate) use typed_buffer;

/// The element type's name in the seed's vocabulary: `float32`, `uint8`,
/// `bfloat16`..., or Rust's name for other types.
pub(crate) fn dtype_name<T>() -> String {
    let rust = std::any::type_name::<T>();
    let name = match rust {
        "f16" | "half::binary16::f16" => "float16",
        "bf16" | "half::bfloat::bf16" => "bfloat16",
        "f32" => "float32",
        "f64" => "float64",
        "u8" => "uint8",
        "u16" => "uint16",
        "u32" => "uint32",
        "u64" => "uint64",
        "u128" => "uint128",
        "usize" => "index",
        "i8" => "int8",
        "i16" => "int16",
        "i32" => "int32",
        "i64" => "int64",
        "i128" => "int128",
        "isize" => "index",
        other => other,
    };
    name.to_string()
}

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
        self.view
            .read_into("DeviceBuffer::copy_to_slice", bytemuck::cast_slice_mut(dst))
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
    /// uses them has completed. Only a whole buffer with no other clone or
    /// view can be taken ([`Error::Shared`] otherwise: the buffer is
    /// returned inside the error's context unchanged). Free the result with
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
        if let Err(e) = self.view.memory.wait_for_host_access(true) {
            return Err((self, e));
        }
        let len = self.len;
        let memory = match Arc::try_unwrap(self.view.memory) {
            Ok(memory) => memory,
            Err(memory) => {
                let back = DeviceBuffer {
                    view: View {
                        memory,
                        offset: 0,
                        bytes: self.view.bytes,
                    },
                    len,
                    _element: PhantomData,
                };
                return Err((
                    back,
                    Error::Shared {
                        op,
                        reason: "other clones or views of it are alive",
                    },
                ));
            }
        };
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
            .field("len", &self.len)
            .field("raw", &self.raw())
            .finish()
    }
}
