//! `View`: the byte range of buffer memory that every typed buffer and
//! view is, with the operations they share (copies, reads, fills,
//! sub-views, ownership), and the sealed copy traits that let one
//! `enqueue_copy_from` / `enqueue_copy_to` take any other end.

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
            memory: BufferMemory::new(&ctx.stream, bytes, usage, &what)?,
            offset: 0,
            bytes,
        })
    }

    /// The memory, offset and length of the view.
    pub(crate) fn range(&self) -> (&Arc<BufferMemory>, u64, u64) {
        (&self.memory, self.offset, self.bytes)
    }

    /// The context whose stream runs this view's commands.
    pub(crate) fn context(&self) -> DeviceContext {
        DeviceContext {
            stream: self.memory.owner(),
        }
    }

    /// Enqueues a copy from `src` into this view (which must have its
    /// length); `elem` is the element size lengths are counted in, in errors.
    pub(crate) fn copy_from(&self, op: &'static str, src: Source<'_>, elem: usize) -> Result<()> {
        let ctx = self.memory.owner();
        match src {
            Source::Host(bytes) => {
                check_len(op, self.bytes, bytes.len() as u64, elem)?;
                crate::transfer::upload(&ctx, op, &self.memory, self.offset, bytes)
            }
            Source::View(src) => {
                check_len(op, self.bytes, src.bytes, elem)?;
                if src.memory.device.id != self.memory.device.id {
                    return src.copy_between_devices(op, self);
                }
                crate::transfer::copy(
                    &ctx,
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
        match crate::interop::copy_between_devices(op, self.range(), dst.range()) {
            Some(done) => done,
            None => self.copy_through_host(op, dst),
        }
    }

    /// Copies this view into `dst` on another device, through host memory:
    /// read here once this view's pending writes are done, then uploaded
    /// (staged at once) on `dst`'s stream.
    fn copy_through_host(&self, op: &'static str, dst: &View) -> Result<()> {
        let mut bytes = vec![0u8; self.bytes as usize];
        self.read_into(op, &mut bytes, 1)?;
        crate::transfer::upload(&dst.memory.owner(), op, &dst.memory, dst.offset, &bytes)
    }

    /// Enqueues a copy of this view into `dst` (which must have its length),
    /// on this view's stream; `elem` as for [`copy_from`](Self::copy_from).
    pub(crate) fn copy_to(&self, op: &'static str, dst: &View, elem: usize) -> Result<()> {
        check_len(op, dst.bytes, self.bytes, elem)?;
        if dst.memory.device.id != self.memory.device.id {
            return self.copy_between_devices(op, dst);
        }
        let ctx = self.memory.owner();
        crate::transfer::copy(
            &ctx,
            op,
            (&self.memory, self.offset),
            (&dst.memory, dst.offset),
            self.bytes,
        )
    }

    /// Copies the view into `out` (of its length), waiting for the work that
    /// writes it; `elem` as for [`copy_from`](Self::copy_from).
    pub(crate) fn read_into(&self, op: &'static str, out: &mut [u8], elem: usize) -> Result<()> {
        check_len(op, out.len() as u64, self.bytes, elem)?;
        crate::transfer::download(&self.memory.owner(), op, &self.memory, self.offset, out)
    }

    /// The view's contents as a new vector of `T`.
    pub(crate) fn to_vec<T: Pod>(&self, op: &'static str) -> Result<Vec<T>> {
        let len = (self.bytes / size_of::<T>().max(1) as u64) as usize;
        let mut out = vec![T::zeroed(); len];
        self.read_into(op, bytemuck::cast_slice_mut(&mut out), size_of::<T>())?;
        Ok(out)
    }

    /// Enqueues a fill of the view with copies of `value`.
    pub(crate) fn fill<T: Pod>(&self, op: &'static str, value: &T) -> Result<()> {
        if size_of::<T>() == 0 {
            return Ok(());
        }
        crate::fill::fill(
            &self.memory.owner(),
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
        if ctx.stream.device.id != self.memory.device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: format!(
                    "a buffer of device `{}` cannot be owned by a context of device `{}`; copy it instead",
                    self.memory.device.name(),
                    ctx.name()
                ),
            });
        }
        self.memory.set_owner(ctx.stream.clone());
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

/// Checks that two ends of a copy hold the same bytes; the error counts
/// `elem`-byte elements (the caller's element type), as the caller does.
fn check_len(op: &'static str, dst_bytes: u64, src_bytes: u64, elem: usize) -> Result<()> {
    if dst_bytes != src_bytes {
        let elem = elem.max(1) as u64;
        return Err(Error::LengthMismatch {
            op,
            dst_len: (dst_bytes / elem) as usize,
            src_len: (src_bytes / elem) as usize,
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
pub(crate) use sealed::Sealed;

/// What [`DeviceBuffer::enqueue_copy_from`](crate::DeviceBuffer::enqueue_copy_from) can copy from: host slices and
/// vectors of `T`, and other buffers of `T`.
pub trait CopySource<T>: sealed::Sealed {
    #[doc(hidden)]
    fn source(&self) -> Source<'_>;
}

/// What [`DeviceBuffer::enqueue_copy_to`](crate::DeviceBuffer::enqueue_copy_to) can copy into: other buffers of `T`.
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
