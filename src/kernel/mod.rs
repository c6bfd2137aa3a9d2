//! `Kernel`: a SPIR-V compute shader checked against its reflected
//! interface, and `DeviceContext::enqueue_function`, which dispatches it on
//! buffers after checking every argument against that interface and the
//! device's limits.
//!
//! The public types live here but for `KernelBuilder` (`builder.rs`);
//! loading (checks, pipeline, the cache) is in `load.rs`, dispatch checks and recording in `dispatch.rs`, and
//! `DeviceContext::execution_time` in `timing.rs`.

mod args;
mod builder;
mod cache;
mod dispatch;

mod load;
#[cfg(test)]
mod tests;
mod timing;
mod variants;

use std::borrow::Cow;
use std::sync::Arc;

use crate::context::DeviceContext;
use crate::error::Result;
use crate::reflect::{BindingInfo, Interface, SpecConstantInfo};
use crate::spirv_check::Trust;
use crate::view::View;
use crate::vk::pipeline::ComputePipeline;
use crate::vk::Device;

pub use builder::KernelBuilder;
use cache::Load;
pub(crate) use dispatch::write_extent;
use load::words_from_bytes;

/// A value for a specialization constant: see [`KernelBuilder::specialize`].
pub use vkcompute_spirv::SpecValue;

/// The number of workgroups of a dispatch in x, y and z.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Grid(pub [u32; 3]);

impl From<u32> for Grid {
    fn from(x: u32) -> Self {
        Grid([x, 1, 1])
    }
}

impl From<(u32, u32)> for Grid {
    fn from((x, y): (u32, u32)) -> Self {
        Grid([x, y, 1])
    }
}

impl From<(u32, u32, u32)> for Grid {
    fn from((x, y, z): (u32, u32, u32)) -> Self {
        Grid([x, y, z])
    }
}

impl From<[u32; 3]> for Grid {
    fn from(g: [u32; 3]) -> Self {
        Grid(g)
    }
}

/// A buffer (or view) passed to a kernel, made by `DeviceBuffer::arg`, or
/// several buffers passed to one binding that declares an array of
/// buffers, made by [`KernelArg::array`].
///
/// Arguments bind in the order of the kernel's bindings, by (set,
/// binding) ([`Kernel::bindings`]). An argument may instead say where it
/// goes with [`at`](KernelArg::at): then every argument of the dispatch
/// must, in any order.
#[derive(Clone, Copy)]
pub struct KernelArg<'a> {
    pub(crate) kind: ArgKind<'a>,
    /// The (set, binding) it fills, where it says.
    pub(crate) at: Option<(u32, u32)>,
}

/// What a [`KernelArg`] holds.
#[derive(Clone, Copy)]
pub(crate) enum ArgKind<'a> {
    Buffer(BufferArg<'a>),
    Array(&'a [KernelArg<'a>]),
}

/// One buffer (or view) as a kernel argument.
#[derive(Clone, Copy)]
pub(crate) struct BufferArg<'a> {
    pub(crate) view: &'a View,
    pub(crate) element_size: usize,
    pub(crate) type_name: fn() -> String,
    /// `std::any::type_name` of the element type.
    pub(crate) element: fn() -> &'static str,
    /// Made by `arg_reinterpret`: no element type check.
    pub(crate) reinterpret: bool,
}

impl<'a> KernelArg<'a> {
    /// One buffer as an argument (what `arg` and `arg_reinterpret` make).
    pub(crate) fn buffer(arg: BufferArg<'a>) -> Self {
        KernelArg {
            kind: ArgKind::Buffer(arg),
            at: None,
        }
    }

    /// Several buffers (or views) as one argument, for a binding that
    /// declares an array of buffers (GLSL `buffer B { float d[]; } bufs[4];`):
    /// element `i` binds to `bufs[i]`. The array must have exactly the
    /// binding's length ([`BindingInfo::array_len`]), and each element is
    /// checked as a single argument is (element type and size, offset
    /// alignment, range, device), and for overlap with every other buffer
    /// the kernel writes. The elements may have different element types
    /// where the kernel's block allows it, and need not be distinct buffers
    /// where the kernel only reads them.
    ///
    /// ```
    /// # fn main() -> vkcompute::Result<()> {
    /// # let ctx = vkcompute::DeviceContext::new()?;
    /// let a = ctx.enqueue_create_buffer::<f32>(16)?;
    /// let b = ctx.enqueue_create_buffer::<f32>(16)?;
    /// let parts = [a.arg(), b.arg()];
    /// let arg = vkcompute::KernelArg::array(&parts);
    /// # let _ = arg;
    /// # Ok(()) }
    /// ```
    pub fn array(elements: &'a [KernelArg<'a>]) -> Self {
        KernelArg {
            kind: ArgKind::Array(elements),
            at: None,
        }
    }

    /// The same argument for binding `binding` of descriptor set `set`
    /// (GLSL `layout(set = 1, binding = 2)`): where one argument of a
    /// dispatch says where it goes, all must, and they may come in any
    /// order. Without it, arguments fill the kernel's bindings in (set,
    /// binding) order.
    ///
    /// ```
    /// # fn main() -> vkcompute::Result<()> {
    /// # let ctx = vkcompute::DeviceContext::new()?;
    /// let store = vkcompute::Kernel::new(&ctx, vkcompute::shaders::STORE, "main")?;
    /// let data = ctx.enqueue_create_buffer::<u32>(4)?;
    /// data.enqueue_fill(0)?;
    /// ctx.enqueue_function(&store, 1, &[data.arg().at(0, 0)], &[1u32, 7u32])?;
    /// assert_eq!(data.to_vec()?, [0, 7, 0, 0]);
    /// # Ok(()) }
    /// ```
    pub fn at(self, set: u32, binding: u32) -> Self {
        KernelArg {
            at: Some((set, binding)),
            ..self
        }
    }
}

/// The pipeline and interface behind a [`Kernel`], shared by every kernel
/// loaded from the same module, entry point and specialization on a device.
pub(crate) struct KernelPipeline {
    device: Arc<Device>,
    pipeline: ComputePipeline,
    words: Vec<u32>,
    entry: String,
    specialization: Vec<(u32, SpecValue)>,
    interface: Interface,
    local_size: [u32; 3],
    /// Loaded with [`KernelBuilder::allow_pointer_addressing`]: only
    /// [`DeviceContext::enqueue_function_with_addresses`] dispatches it.
    pointers: bool,
    /// The subgroup size the pipeline requires, if any.
    subgroup_size: Option<u32>,
    /// Loaded with [`KernelBuilder::unchecked_indices`].
    unchecked_indices: bool,
    /// How many indices the bounds instrumentation clamped.
    clamped: usize,
    /// Its `debugPrintfEXT` calls, where it has some: the record buffer
    /// binds after its other bindings.
    printf: Option<std::sync::Arc<vkcompute_spirv::printf::Printf>>,
    /// The descriptors each binding holds in this pipeline (in binding
    /// order): 1, a fixed array's length, or the length a runtime-sized
    /// array was built for.
    counts: Vec<u32>,
    /// The lengths of runtime-sized arrays it was loaded with (its cache
    /// key): (set, binding, length).
    array_lengths: Vec<(u32, u32, u32)>,
    /// Who answered for the module's validity, for its variants.
    trust: Trust,
    /// Pipelines of the same kernel for other lengths of its runtime-sized
    /// arrays of buffers, by those lengths (in binding order). Locked to
    /// look up, and held while a new length is built (rare: once per
    /// length a kernel is dispatched with).
    variants: std::sync::Mutex<Vec<(Vec<u32>, Arc<KernelPipeline>)>>,
}

impl KernelPipeline {
    pub(crate) fn pipeline(&self) -> &ComputePipeline {
        &self.pipeline
    }

    /// Whether descriptor `index` (counting each element of an array of
    /// buffers, in binding order) binds a uniform buffer (which must start
    /// at a multiple of `minUniformBufferOffsetAlignment`).
    pub(crate) fn binds_uniform(&self, index: usize) -> bool {
        let mut first = 0;
        for (b, &count) in self.interface.bindings.iter().zip(&self.counts) {
            let end = first + count as usize;
            if index < end {
                return b.kind == crate::reflect::BindingKind::UniformBuffer;
            }
            first = end;
        }
        false
    }
}

impl Drop for KernelPipeline {
    fn drop(&mut self) {
        // Batches that dispatch the kernel keep it alive until they complete,
        // so nothing uses the pipeline now.
        self.pipeline.destroy(&self.device);
    }
}

/// A compute kernel: a SPIR-V entry point with its pipeline, ready to
/// dispatch on a context of its device with
/// [`DeviceContext::enqueue_function`]. Cloning is cheap.
///
/// Loading checks the module (header, entry point, descriptor types, the
/// device features its capabilities need) and reflects its interface:
/// buffer bindings (in any descriptor sets), push-constant size, workgroup size
/// and specialization constants. A module that addresses memory through
/// pointers (physical storage buffers, pointer casts, variable pointers)
/// is refused with [`Error::PointerAddressing`](crate::Error::PointerAddressing): see
/// [`KernelBuilder::allow_pointer_addressing`] for those.
/// Loading the same module, entry point and specialization again on a
/// device reuses the pipeline.
#[derive(Clone)]
pub struct Kernel {
    inner: Arc<KernelPipeline>,
    /// What errors, `Debug` and traces call it.
    pub(crate) label: Arc<str>,
}

/// SPIR-V as [`Kernel::new`] and [`Kernel::builder`] take it: words
/// (`&[u32]`, as [`shaders`](crate::shaders) and `vkcompute-build` give
/// them) or the bytes of a `.spv` file (`&[u8]`, any alignment, either byte
/// order; its length is checked, and its header with the module).
pub trait Spirv: spirv_sealed::Sealed {
    /// The module's words.
    #[doc(hidden)]
    fn words(&self) -> Result<Cow<'_, [u32]>>;
}

mod spirv_sealed {
    pub trait Sealed {}
}

impl spirv_sealed::Sealed for [u32] {}
impl Spirv for [u32] {
    fn words(&self) -> Result<Cow<'_, [u32]>> {
        Ok(Cow::Borrowed(self))
    }
}

impl spirv_sealed::Sealed for [u8] {}
impl Spirv for [u8] {
    fn words(&self) -> Result<Cow<'_, [u32]>> {
        words_from_bytes(self).map(Cow::Owned)
    }
}

impl<const N: usize> spirv_sealed::Sealed for [u32; N] {}
impl<const N: usize> Spirv for [u32; N] {
    fn words(&self) -> Result<Cow<'_, [u32]>> {
        self[..].words()
    }
}

impl<const N: usize> spirv_sealed::Sealed for [u8; N] {}
impl<const N: usize> Spirv for [u8; N] {
    fn words(&self) -> Result<Cow<'_, [u32]>> {
        self[..].words()
    }
}

impl spirv_sealed::Sealed for Vec<u32> {}
impl Spirv for Vec<u32> {
    fn words(&self) -> Result<Cow<'_, [u32]>> {
        self[..].words()
    }
}

impl spirv_sealed::Sealed for Vec<u8> {}
impl Spirv for Vec<u8> {
    fn words(&self) -> Result<Cow<'_, [u32]>> {
        self[..].words()
    }
}

impl Kernel {
    /// Loads entry point `entry` of the SPIR-V module `spirv`: words, or
    /// the bytes of a `.spv` file ([`Spirv`]).
    ///
    /// ```
    /// # fn main() -> vkcompute::Result<()> {
    /// use vkcompute::{DeviceContext, Kernel};
    /// let ctx = DeviceContext::new()?;
    /// let store = Kernel::new(&ctx, vkcompute::shaders::STORE, "main")?;
    /// let data = ctx.enqueue_create_buffer::<u32>(4)?;
    /// data.enqueue_fill(0)?;
    /// ctx.enqueue_function(&store, 1, &[data.arg()], &[2u32, 42u32])?;
    /// assert_eq!(data.to_vec()?, [0, 0, 42, 0]);
    /// # Ok(()) }
    /// ```
    ///
    /// Without feature `validate`, only the kernels of
    /// [`shaders`](crate::shaders) load this way; other modules are an
    /// [`Error::ValidatorUnavailable`](crate::Error::ValidatorUnavailable):
    /// see [`Kernel::new_unvalidated`].
    pub fn new<S: Spirv + ?Sized>(ctx: &DeviceContext, spirv: &S, entry: &str) -> Result<Kernel> {
        Kernel::load(ctx, &spirv.words()?, entry, Load::default())
    }

    /// Loads entry point `entry` of `spirv` like [`Kernel::new`], but
    /// without the SPIR-V validator (which only builds with feature
    /// `validate` have); every other check still runs. The way to load
    /// your own module (a `.spv` file, say) on a build without feature
    /// `validate`.
    ///
    /// # Safety
    ///
    /// The module must be valid SPIR-V for the Vulkan version of `ctx`'s
    /// device, as `spirv-val --target-env vulkan1.2` (or `vulkan1.3`) would
    /// accept it: invalid SPIR-V handed to the driver is undefined behaviour.
    #[allow(
        unsafe_code,
        reason = "a public entry point whose caller vouches for the module"
    )]
    pub unsafe fn new_unvalidated<S: Spirv + ?Sized>(
        ctx: &DeviceContext,
        spirv: &S,
        entry: &str,
    ) -> Result<Kernel> {
        let load = Load {
            trust: Trust::CallerVouches,
            ..Load::default()
        };
        Kernel::load(ctx, &spirv.words()?, entry, load)
    }

    /// Compiles GLSL compute-shader `source` at run time (feature `glsl`)
    /// and loads its `main` as entry point `entry`. A compile error carries
    /// the compiler's message with line numbers. For macro definitions,
    /// `#include`s, specialization constants, the target environment and
    /// the optimization level, use [`Kernel::glsl`].
    #[cfg(feature = "glsl")]
    #[cfg_attr(docsrs, doc(cfg(feature = "glsl")))]
    pub fn from_glsl(ctx: &DeviceContext, source: &str, entry: &str) -> Result<Kernel> {
        Kernel::glsl(source)
            .entry(entry)
            .warnings_as_errors(true)
            .compile()
            .build(ctx)
    }

    /// A builder, to set specialization constants before loading:
    ///
    /// ```
    /// # fn main() -> vkcompute::Result<()> {
    /// # let ctx = vkcompute::DeviceContext::new()?;
    /// let add = vkcompute::Kernel::builder(vkcompute::shaders::VECTOR_ADD)
    ///     .specialize(0, 128u32) // local_size_x_id = 0
    ///     .build(&ctx)?;
    /// assert_eq!(add.local_size(), [128, 1, 1]);
    /// # Ok(()) }
    /// ```
    pub fn builder<S: Spirv + ?Sized>(spirv: &S) -> KernelBuilder<'_> {
        KernelBuilder::of(spirv.words())
    }
}

impl Kernel {
    /// The entry point's name.
    pub fn entry_point(&self) -> &str {
        &self.inner.entry
    }

    /// What errors, `Debug` and traces call the kernel: the label it was
    /// loaded with ([`KernelBuilder::label`], or for GLSL the
    /// `GlslSource::file_name` of feature `glsl`) or else its entry
    /// point's name. A kernel is labelled when loaded: the same module
    /// loaded under another label is another `Kernel` over the same
    /// pipeline ([`shares_pipeline_with`](Self::shares_pipeline_with)).
    pub fn label(&self) -> String {
        self.label.to_string()
    }

    /// The buffer bindings (storage and uniform), in the order arguments
    /// are given: (set, binding).
    pub fn bindings(&self) -> &[BindingInfo] {
        &self.inner.interface.bindings
    }

    /// Bytes of push constants the kernel declares (0 if none).
    pub fn push_constant_size(&self) -> u32 {
        self.inner.interface.push_size
    }

    /// The workgroup size, with specialization applied.
    pub fn local_size(&self) -> [u32; 3] {
        self.inner.local_size
    }

    /// The specialization constants the kernel declares.
    pub fn spec_constants(&self) -> &[SpecConstantInfo] {
        &self.inner.interface.spec_constants
    }

    /// How many dynamic indices loading bounded: the clamps the pipeline's
    /// module has (0 for a kernel loaded with
    /// [`KernelBuilder::unchecked_indices`], or one that indexes only its
    /// buffers and constant positions).
    pub fn clamped_indices(&self) -> usize {
        self.inner.clamped
    }

    /// Whether two kernels share one pipeline (same module, entry point and
    /// specialization on the same device).
    pub fn shares_pipeline_with(&self, other: &Kernel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("label", &self.label)
            .field("entry", &self.inner.entry)
            .field("bindings", &self.inner.interface.bindings)
            .field("push_constant_size", &self.inner.interface.push_size)
            .field("local_size", &self.inner.local_size)
            .finish()
    }
}
