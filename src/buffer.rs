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
        let bytes = Error::byte_size(&what, len, size_of::<T>())?;
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
                ctx.copy(
                    op,
                    (&src.memory, src.offset),
                    (&self.memory, self.offset),
                    self.bytes,
                )
            }
        }
    }

    /// Enqueues a copy of this view into `dst` (which must have its length),
    /// on this view's stream.
    pub(crate) fn copy_to(&self, op: &'static str, dst: &View) -> Result<()> {
        check_len(op, dst.bytes, self.bytes)?;
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

impl<T> sealed::Sealed for DeviceBuffer<T> {}
impl<T: Pod> CopySource<T> for DeviceBuffer<T> {
    fn source(&self) -> Source<'_> {
        Source::View(&self.view)
    }
}
impl<T: Pod> CopyDestination<T> for DeviceBuffer<T> {
    fn destination(&self) -> &View {
        &self.view
    }
}

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
/// # Ok(()) }
/// ```
pub struct DeviceBuffer<T> {
    pub(crate) view: View,
    len: usize,
    _element: PhantomData<fn() -> T>,
}

impl<T> Clone for DeviceBuffer<T> {
    fn clone(&self) -> Self {
        DeviceBuffer {
            view: self.view.clone(),
            len: self.len,
            _element: PhantomData,
        }
    }
}

impl<T: Pod> DeviceBuffer<T> {
    pub(crate) fn new(ctx: &DeviceContext, len: usize) -> Result<Self> {
        let view = View::allocate::<T>(ctx, len, MemoryUsage::Device, "DeviceBuffer")?;
        Ok(DeviceBuffer {
            view,
            len,
            _element: PhantomData,
        })
    }

    /// The type's name for messages: `DeviceBuffer[float32]`.
    pub fn type_name() -> String {
        format!("DeviceBuffer[{}]", dtype_name::<T>())
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

    /// The context that owns the buffer (whose stream frees it).
    pub fn context(&self) -> DeviceContext {
        self.view.context()
    }

    /// Enqueues a copy into this buffer from `src`: a host slice, vector or
    /// array (copied or staged before this returns, so it can be reused at
    /// once), or another buffer. Lengths must match.
    pub fn enqueue_copy_from<S: CopySource<T> + ?Sized>(&self, src: &S) -> Result<()> {
        self.view
            .copy_from("DeviceBuffer::enqueue_copy_from", src.source())
    }

    /// Enqueues a copy of this buffer into `dst`, on this buffer's stream.
    /// Lengths must match.
    pub fn enqueue_copy_to<D: CopyDestination<T> + ?Sized>(&self, dst: &D) -> Result<()> {
        self.view
            .copy_to("DeviceBuffer::enqueue_copy_to", dst.destination())
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

    /// Enqueues a fill of every element with `value`.
    pub fn enqueue_fill(&self, value: T) -> Result<()> {
        self.view.fill("DeviceBuffer::enqueue_fill", &value)
    }

    /// The `VkBuffer`, byte offset and byte size behind this buffer, which
    /// keeps ownership of them.
    pub fn raw(&self) -> RawBufferRef {
        self.view.raw()
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
