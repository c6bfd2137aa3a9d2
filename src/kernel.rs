//! `Kernel`: a SPIR-V compute shader checked against its reflected
//! interface, and `DeviceContext::enqueue_function`, which dispatches it on
//! buffers after checking every argument against that interface and the
//! device's limits.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::{Arc, Weak};
use std::time::Duration;

use ash::vk;
use bytemuck::Pod;
use smallvec::SmallVec;

use crate::capabilities;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::record::BufferAccess;
use crate::reflect::{self, BindingInfo, Interface, SpecConstantInfo};
use crate::spirv_check::{self, Trust};
use crate::spirv_rules;
use crate::view::View;
use crate::vk::command::TimestampPool;
use crate::vk::pipeline::{ComputePipeline, Specialization};
use crate::vk::Device;

/// A value for a specialization constant.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum SpecValue {
    /// A `bool` constant (4 bytes in SPIR-V).
    Bool(bool),
    /// A 32-bit unsigned constant.
    U32(u32),
    /// A 32-bit signed constant.
    I32(i32),
    /// A 32-bit float constant.
    F32(f32),
    /// A 64-bit unsigned constant.
    U64(u64),
    /// A 64-bit signed constant.
    I64(i64),
    /// A 64-bit float constant.
    F64(f64),
}

impl SpecValue {
    fn bytes(self) -> Vec<u8> {
        match self {
            SpecValue::Bool(b) => u32::from(b).to_le_bytes().to_vec(),
            SpecValue::U32(v) => v.to_le_bytes().to_vec(),
            SpecValue::I32(v) => v.to_le_bytes().to_vec(),
            SpecValue::F32(v) => v.to_le_bytes().to_vec(),
            SpecValue::U64(v) => v.to_le_bytes().to_vec(),
            SpecValue::I64(v) => v.to_le_bytes().to_vec(),
            SpecValue::F64(v) => v.to_le_bytes().to_vec(),
        }
    }
}

macro_rules! spec_from {
    ($($t:ty => $v:ident),*) => {$(
        impl From<$t> for SpecValue {
            fn from(v: $t) -> Self {
                SpecValue::$v(v)
            }
        }
    )*};
}
spec_from!(bool => Bool, u32 => U32, i32 => I32, f32 => F32, u64 => U64, i64 => I64, f64 => F64);

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

/// A buffer (or view) passed to a kernel: made by `DeviceBuffer::arg`.
#[derive(Clone, Copy)]
pub struct KernelArg<'a> {
    pub(crate) view: &'a View,
    pub(crate) element_size: usize,
    pub(crate) type_name: fn() -> String,
}

/// A dispatch that passed every check: the buffer ranges it reads and
/// writes, its descriptors, push constants (padded to whole words) and grid.
pub(crate) struct CheckedDispatch<'a> {
    pub(crate) kernel: &'a Arc<KernelPipeline>,
    pub(crate) accesses: SmallVec<[BufferAccess<'a>; 8]>,
    pub(crate) infos: SmallVec<[vk::DescriptorBufferInfo; 8]>,
    pub(crate) push: SmallVec<[u8; 128]>,
    pub(crate) grid: [u32; 3],
}

/// The pipeline and interface behind a [`Kernel`], shared by every kernel
/// loaded from the same module, entry point and specialization on a device.
pub(crate) struct KernelPipeline {
    device: Arc<Device>,
    pipeline: ComputePipeline,
    words: Vec<u32>,
    entry: String,
    specialization: Vec<(u32, Vec<u8>)>,
    interface: Interface,
    local_size: [u32; 3],
    /// Loaded with [`KernelBuilder::allow_pointer_addressing`]: only
    /// [`DeviceContext::enqueue_function_with_addresses`] dispatches it.
    pointers: bool,
    /// The subgroup size the pipeline requires, if any.
    subgroup_size: Option<u32>,
}

/// How a kernel is loaded beside its module and entry point.
#[derive(Default)]
struct Load {
    /// Specialization constants (id, value bytes), sorted by id.
    specialization: Vec<(u32, Vec<u8>)>,
    pointers: bool,
    subgroup_size: Option<u32>,
    /// Who answers for the module's validity.
    trust: Trust,
}

/// Checks that `device` can run a kernel of workgroup `local_size` with
/// subgroups of `size` invocations.
fn check_subgroup_size(device: &Device, size: u32, local_size: [u32; 3]) -> Result<(), String> {
    let sub = &device.adapter.info.subgroup;
    if !sub.size_control {
        return Err(format!(
            "subgroup size {size} was required, but the device `{}` cannot require a subgroup \
             size in compute shaders (it needs subgroupSizeControl and compute in \
             requiredSubgroupSizeStages); its subgroups have {} invocations",
            device.name(),
            sub.size
        ));
    }
    if !size.is_power_of_two() || size < sub.min_size || size > sub.max_size {
        return Err(format!(
            "subgroup size {size} was required, but the device `{}` offers powers of two from \
             {} to {}",
            device.name(),
            sub.min_size,
            sub.max_size
        ));
    }
    let invocations: u64 = local_size.iter().map(|&d| u64::from(d)).product();
    let most = u64::from(sub.max_compute_workgroup_subgroups) * u64::from(size);
    if sub.max_compute_workgroup_subgroups > 0 && invocations > most {
        return Err(format!(
            "a workgroup of {invocations} invocations is more than maxComputeWorkgroupSubgroups \
             ({}) subgroups of {size}",
            sub.max_compute_workgroup_subgroups
        ));
    }
    Ok(())
}

impl KernelPipeline {
    pub(crate) fn pipeline(&self) -> &ComputePipeline {
        &self.pipeline
    }

    pub(crate) fn entry(&self) -> &str {
        &self.entry
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
/// storage-buffer bindings (in set 0), push-constant size, workgroup size
/// and specialization constants. A module that addresses memory through
/// pointers (physical storage buffers, pointer casts, variable pointers)
/// is refused with [`Error::PointerAddressing`]: see
/// [`KernelBuilder::allow_pointer_addressing`] for those.
/// Loading the same module, entry point and specialization again on a
/// device reuses the pipeline.
#[derive(Clone)]
pub struct Kernel {
    inner: Arc<KernelPipeline>,
}

/// Loads a [`Kernel`] with specialization constants: see [`Kernel::builder`].
pub struct KernelBuilder<'a> {
    words: &'a [u32],
    entry: String,
    specialization: Vec<(u32, SpecValue)>,
    pointers: bool,
    subgroup_size: Option<u32>,
}

impl KernelBuilder<'_> {
    /// The entry point's name (default `main`).
    pub fn entry(mut self, name: &str) -> Self {
        self.entry = name.to_string();
        self
    }

    /// Sets specialization constant `id` (GLSL `constant_id`, or the id in
    /// `local_size_x_id`) to `value`.
    pub fn specialize(mut self, id: u32, value: impl Into<SpecValue>) -> Self {
        self.specialization.retain(|(i, _)| *i != id);
        self.specialization.push((id, value.into()));
        self
    }

    /// Accepts a module that addresses memory through pointers (buffer
    /// device addresses: GLSL `GL_EXT_buffer_reference`, the
    /// `PhysicalStorageBufferAddresses` capability, pointer casts, variable
    /// pointers), which [`Kernel::new`] refuses.
    ///
    /// Loading such a kernel is harmless; running it is not, since its
    /// addresses come with each dispatch. So the kernel this builds is
    /// refused by [`DeviceContext::enqueue_function`] and runs only through
    /// the `unsafe` [`DeviceContext::enqueue_function_with_addresses`],
    /// whose caller lists the buffers the kernel reaches by address and
    /// answers for what it touches.
    pub fn allow_pointer_addressing(mut self) -> Self {
        self.pointers = true;
        self
    }

    /// Requires the kernel to run with subgroups of `size` invocations
    /// (`VkPipelineShaderStageRequiredSubgroupSizeCreateInfo`, Vulkan 1.3 or
    /// `VK_EXT_subgroup_size_control`). Loading fails with
    /// [`Error::UnsupportedKernel`] where the device cannot require a
    /// subgroup size for compute shaders, where `size` is not a power of two
    /// within [`SubgroupInfo::min_size`](crate::SubgroupInfo::min_size) ..=
    /// [`max_size`](crate::SubgroupInfo::max_size), or where the workgroup
    /// holds more than `maxComputeWorkgroupSubgroups` subgroups of that size.
    pub fn subgroup_size(mut self, size: u32) -> Self {
        self.subgroup_size = Some(size);
        self
    }

    /// Loads the kernel on `ctx`'s device.
    ///
    /// Without feature `validate`, only the kernels of
    /// [`shaders`](crate::shaders) load this way: see
    /// [`build_unvalidated`](Self::build_unvalidated).
    pub fn build(self, ctx: &DeviceContext) -> Result<Kernel> {
        self.load(ctx, Trust::Check)
    }

    /// Loads the kernel like [`build`](Self::build), but without the
    /// SPIR-V validator (which only builds with feature `validate` have);
    /// every other check still runs.
    ///
    /// # Safety
    ///
    /// The module must be valid SPIR-V for the Vulkan version of `ctx`'s
    /// device, as `spirv-val --target-env vulkan1.2` (or `vulkan1.3`) would
    /// accept it: invalid SPIR-V handed to the driver is undefined behaviour.
    pub unsafe fn build_unvalidated(self, ctx: &DeviceContext) -> Result<Kernel> {
        self.load(ctx, Trust::CallerVouches)
    }

    fn load(self, ctx: &DeviceContext, trust: Trust) -> Result<Kernel> {
        let mut spec: Vec<(u32, Vec<u8>)> = self
            .specialization
            .iter()
            .map(|(id, v)| (*id, v.bytes()))
            .collect();
        spec.sort_by_key(|(id, _)| *id);
        Kernel::load(
            ctx,
            self.words,
            &self.entry,
            Load {
                specialization: spec,
                pointers: self.pointers,
                subgroup_size: self.subgroup_size,
                trust,
            },
        )
    }
}

impl Kernel {
    /// Loads entry point `entry` of the SPIR-V module `spirv`.
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
    /// [`Error::ValidatorUnavailable`]: see [`Kernel::new_unvalidated`].
    pub fn new(ctx: &DeviceContext, spirv: &[u32], entry: &str) -> Result<Kernel> {
        Kernel::load(ctx, spirv, entry, Load::default())
    }

    /// Loads entry point `entry` of `spirv` like [`Kernel::new`], but
    /// without the SPIR-V validator (which only builds with feature
    /// `validate` have); every other check still runs.
    ///
    /// # Safety
    ///
    /// The module must be valid SPIR-V for the Vulkan version of `ctx`'s
    /// device, as `spirv-val --target-env vulkan1.2` (or `vulkan1.3`) would
    /// accept it: invalid SPIR-V handed to the driver is undefined behaviour.
    pub unsafe fn new_unvalidated(
        ctx: &DeviceContext,
        spirv: &[u32],
        entry: &str,
    ) -> Result<Kernel> {
        let load = Load {
            trust: Trust::CallerVouches,
            ..Load::default()
        };
        Kernel::load(ctx, spirv, entry, load)
    }

    /// Loads a kernel from SPIR-V bytes (a `.spv` file), checking their
    /// length and magic number.
    pub fn from_bytes(ctx: &DeviceContext, bytes: &[u8], entry: &str) -> Result<Kernel> {
        let words = words_from_bytes(bytes)?;
        Kernel::new(ctx, &words, entry)
    }

    /// Compiles GLSL compute-shader `source` at run time (feature `glsl`)
    /// and loads its `main` as entry point `entry`. A compile error carries
    /// the compiler's message with line numbers. For macro definitions,
    /// `#include`s, specialization constants, the target environment and
    /// the optimization level, use [`Kernel::glsl`].
    #[cfg(feature = "glsl")]
    pub fn from_glsl(ctx: &DeviceContext, source: &str, entry: &str) -> Result<Kernel> {
        let words = crate::shader_build::compile_glsl(source, "kernel.comp", entry)
            .map_err(|message| Error::ShaderCompilation { message })?;
        Kernel::new(ctx, &words, entry)
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
    pub fn builder(spirv: &[u32]) -> KernelBuilder<'_> {
        KernelBuilder {
            words: spirv,
            entry: "main".to_string(),
            specialization: Vec::new(),
            pointers: false,
            subgroup_size: None,
        }
    }

    fn load(ctx: &DeviceContext, words: &[u32], entry: &str, load: Load) -> Result<Kernel> {
        let Load {
            specialization,
            pointers,
            subgroup_size,
            trust,
        } = load;
        check_header(words)?;
        let device = &ctx.shared.device;
        let mut cache = device.kernels();
        cache.retain(|w| w.strong_count() > 0);
        let hit = cache.iter().filter_map(Weak::upgrade).find(|k| {
            k.entry == entry
                && k.pointers == pointers
                && k.subgroup_size == subgroup_size
                && k.specialization == specialization
                && k.words == words
        });
        if let Some(inner) = hit {
            return Ok(Kernel { inner });
        }
        let unsupported = |reason: String| Error::UnsupportedKernel {
            kernel: entry.to_string(),
            reason,
        };
        let vulkan_1_3 = device.adapter.api_version >= vk::API_VERSION_1_3;
        spirv_check::check_module(words, entry, vulkan_1_3, trust)?;
        // What SPIRV-Tools lets through but drivers or layers choke on.
        spirv_rules::check(words).map_err(|reason| Error::InvalidSpirv { reason })?;
        let module = reflect::module_use(words);
        if let (false, Some(found)) = (pointers, module.pointers) {
            return Err(Error::PointerAddressing {
                kernel: entry.to_string(),
                found,
            });
        }
        let declared = capabilities::Declared {
            capabilities: &module.capabilities,
            extensions: &module.extensions,
            initialized_workgroup: module.initialized_workgroup,
            local_size_id: module.local_size_id,
            int64_atomics_buffer: module.int64_atomics_buffer,
            int64_atomics_shared: module.int64_atomics_shared,
            float_modes: &module.float_modes,
        };
        capabilities::check(
            &declared,
            &device.features,
            &device.adapter.info.subgroup,
            device.name(),
        )
        .map_err(unsupported)?;
        // spirq is not written against hostile input: a panic is an error too.
        let reflected = std::panic::catch_unwind(|| reflect::reflect(words, entry))
            .map_err(|_| Error::InvalidSpirv {
                reason: "the module could not be parsed".into(),
            })?
            .map_err(unsupported)?;
        for (id, bytes) in &specialization {
            match reflected.spec_constants.iter().find(|s| s.id == *id) {
                None => {
                    return Err(Error::Specialization {
                        kernel: entry.to_string(),
                        id: *id,
                        reason: format!(
                            "the kernel declares no such constant (it declares {:?})",
                            reflected
                                .spec_constants
                                .iter()
                                .map(|s| s.id)
                                .collect::<Vec<_>>()
                        ),
                    })
                }
                Some(s) if s.size as usize != bytes.len() => {
                    return Err(Error::Specialization {
                        kernel: entry.to_string(),
                        id: *id,
                        reason: format!(
                            "it is {} bytes wide but the value given has {}",
                            s.size,
                            bytes.len()
                        ),
                    })
                }
                Some(_) => {}
            }
        }
        let frozen = spirv_rules::freeze(words, &specialization);
        spirv_rules::check_constant_indices(&frozen).map_err(unsupported)?;
        if frozen != words {
            spirv_check::check_specialized(&frozen, words, entry, vulkan_1_3, trust)?;
        }
        let spec_u32: HashMap<u32, u32> = specialization
            .iter()
            .filter(|(_, b)| b.len() == 4)
            .map(|(id, b)| (*id, u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
            .collect();
        let local_size = reflect::local_size(words, entry, &spec_u32)
            .ok_or_else(|| unsupported("its workgroup size could not be determined".into()))?;
        let limits = device.limits();
        // Three 32-bit sizes: their product fits in a u128, not a u64.
        let invocations = local_size.iter().map(|&d| d as u128).product::<u128>();
        if local_size.contains(&0)
            || local_size
                .iter()
                .zip(limits.max_compute_work_group_size)
                .any(|(&d, max)| d > max)
            || invocations > limits.max_compute_work_group_invocations as u128
        {
            return Err(unsupported(format!(
                "workgroup size {local_size:?} exceeds the device's maxComputeWorkGroupSize {:?} or \
                 maxComputeWorkGroupInvocations {}",
                limits.max_compute_work_group_size, limits.max_compute_work_group_invocations
            )));
        }
        if let Some(size) = subgroup_size {
            check_subgroup_size(device, size, local_size).map_err(unsupported)?;
        }
        if reflected.push_size > limits.max_push_constants_size {
            return Err(unsupported(format!(
                "{} bytes of push constants exceed the device's maxPushConstantsSize of {}",
                reflected.push_size, limits.max_push_constants_size
            )));
        }
        let entry_c = CString::new(entry)
            .map_err(|_| unsupported("the entry point name contains a NUL byte".into()))?;
        let mut map_entries = Vec::new();
        let mut data = Vec::new();
        for (id, bytes) in &specialization {
            map_entries.push(vk::SpecializationMapEntry {
                constant_id: *id,
                offset: data.len() as u32,
                size: bytes.len(),
            });
            data.extend_from_slice(bytes);
        }
        let spec = (!map_entries.is_empty()).then_some(Specialization {
            entries: &map_entries,
            data: &data,
        });
        let pipeline = ComputePipeline::new(
            device,
            words,
            &entry_c,
            reflected.bindings.iter().map(|b| b.binding).collect(),
            reflected.push_size.next_multiple_of(4),
            spec,
            subgroup_size,
        )
        .map_err(|e| match e {
            // The module passed every check here, yet the driver refused it
            // (lavapipe fails on some modules SPIRV-Tools accepts).
            Error::Vulkan { call, result } => {
                unsupported(format!("the driver refused it: {call} returned {result:?}"))
            }
            e => e,
        })?;
        let inner = Arc::new(KernelPipeline {
            device: device.clone(),
            pipeline,
            words: words.to_vec(),
            entry: entry.to_string(),
            specialization,
            interface: reflected,
            local_size,
            pointers,
            subgroup_size,
        });
        cache.push(Arc::downgrade(&inner));
        Ok(Kernel { inner })
    }

    /// The entry point's name.
    pub fn entry_point(&self) -> &str {
        &self.inner.entry
    }

    /// The storage-buffer bindings, in the order arguments are given.
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

    /// Whether two kernels share one pipeline (same module, entry point and
    /// specialization on the same device).
    pub fn shares_pipeline_with(&self, other: &Kernel) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("entry", &self.inner.entry)
            .field("bindings", &self.inner.interface.bindings)
            .field("push_constant_size", &self.inner.interface.push_size)
            .field("local_size", &self.inner.local_size)
            .finish()
    }
}

/// SPIR-V words from bytes, in either byte order.
fn words_from_bytes(bytes: &[u8]) -> Result<Vec<u32>> {
    if bytes.len() % 4 != 0 || bytes.len() < 20 {
        return Err(Error::InvalidSpirv {
            reason: format!(
                "{} bytes is not a whole number of 32-bit words of at least a 5-word header",
                bytes.len()
            ),
        });
    }
    let mut words: Vec<u32> = bytes
        .chunks_exact(4)
        .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    if words[0] == reflect::MAGIC.swap_bytes() {
        words.iter_mut().for_each(|w| *w = w.swap_bytes());
    }
    Ok(words)
}

/// The bytes a kernel may write through a binding of `view`, as (offset,
/// length) in its memory, for ordering against other commands: an
/// out-of-range index may write past the view, within 4 bytes of its end
/// under robustBufferAccess2 (robustStorageBufferAccessSizeAlignment is at
/// most 4), anywhere in the buffer under robustBufferAccess alone, and
/// (where the device has neither) only the view is assumed.
pub(crate) fn write_extent(device: &Device, view: &View) -> (u64, u64) {
    let end = view.offset + view.bytes;
    let f = &device.features;
    if f.robust_buffer_access2 {
        let padded = end.next_multiple_of(4).min(view.memory.size.max(end));
        (view.offset, padded - view.offset)
    } else if f.robust_buffer_access {
        (0, view.memory.size.max(end))
    } else {
        (view.offset, view.bytes)
    }
}

/// Refuses two arguments whose byte ranges overlap in one buffer where the
/// kernel writes at least one of their bindings.
fn check_aliasing(k: &KernelPipeline, args: &[KernelArg<'_>]) -> Result<()> {
    let bindings = &k.interface.bindings;
    let range = |arg: &KernelArg<'_>| arg.view.offset..arg.view.offset + arg.view.bytes;
    for (first, (a, a_binding)) in args.iter().zip(bindings).enumerate() {
        for (second, (b, b_binding)) in args.iter().zip(bindings).enumerate().skip(first + 1) {
            if a_binding.read_only && b_binding.read_only {
                continue;
            }
            let (ra, rb) = (range(a), range(b));
            if Arc::ptr_eq(&a.view.memory, &b.view.memory) && ra.start < rb.end && rb.start < ra.end
            {
                let written = match (a_binding.read_only, b_binding.read_only) {
                    (false, false) => "both".to_string(),
                    (false, true) => format!("argument {first}"),
                    _ => format!("argument {second}"),
                };
                return Err(Error::AliasedArguments {
                    kernel: k.entry.clone(),
                    first,
                    second,
                    detail: format!(
                        "bytes {ra:?} and {rb:?} of one buffer, and the kernel writes {written}"
                    ),
                });
            }
        }
    }
    Ok(())
}

fn check_header(words: &[u32]) -> Result<()> {
    reflect::check_structure(words).map_err(|reason| Error::InvalidSpirv { reason })
}

impl DeviceContext {
    /// Enqueues a dispatch of `kernel` over `grid` workgroups (`n`, `(x, y)`
    /// or `(x, y, z)`), with `args` bound to its storage-buffer bindings in
    /// binding order and `push` as its push constants (`&()` for none).
    ///
    /// Everything is checked before anything reaches the driver: the number
    /// of buffers, each buffer's element size against the binding's array
    /// stride, binding size against `maxStorageBufferRange`, offset against
    /// `minStorageBufferOffsetAlignment`, the device of every buffer, the
    /// push-constant size, the grid against `maxComputeWorkGroupCount`, and
    /// that no two arguments overlap in one buffer where the kernel writes
    /// either ([`Error::AliasedArguments`]; read-only aliases are fine).
    ///
    /// A kernel loaded with [`KernelBuilder::allow_pointer_addressing`] is
    /// refused ([`Error::PointerAddressing`]): dispatch it with
    /// [`enqueue_function_with_addresses`](Self::enqueue_function_with_addresses).
    pub fn enqueue_function<P: Pod>(
        &self,
        kernel: &Kernel,
        grid: impl Into<Grid>,
        args: &[KernelArg<'_>],
        push: &P,
    ) -> Result<()> {
        let op = "DeviceContext::enqueue_function";
        if kernel.inner.pointers {
            return Err(Error::PointerAddressing {
                kernel: kernel.inner.entry.clone(),
                found: "it was loaded with `allow_pointer_addressing`".into(),
            });
        }
        self.dispatch(op, kernel, grid.into(), args, &[], bytemuck::bytes_of(push))
    }

    /// Enqueues a dispatch of a kernel that reaches buffers through device
    /// addresses (the seed's `DevicePassable` model), loaded with
    /// [`KernelBuilder::allow_pointer_addressing`] (or an ordinary kernel).
    /// `args` bind to its storage-buffer bindings as in
    /// [`enqueue_function`](Self::enqueue_function), with the same checks;
    /// `addressed` lists the buffers (or views) the kernel reaches through
    /// addresses, typically from [`DeviceBuffer::device_address`] passed in
    /// `push`. Each listed buffer counts as read and written by the
    /// dispatch: it stays alive until the dispatch completes even if every
    /// handle to it is dropped at once, and the dispatch is ordered after
    /// earlier work on it and before later work, like an argument.
    ///
    /// # Safety
    ///
    /// vkcompute cannot see the kernel's addresses, so the caller answers
    /// for them. For the whole execution of the dispatch:
    ///
    /// - every memory access the kernel makes through a pointer (a device
    ///   address, or a pointer derived from one) falls inside the byte range
    ///   of one buffer or view in `addressed`, or of one in `args`, and its
    ///   address was taken from that buffer on this device
    ///   ([`DeviceBuffer::device_address`]);
    /// - the kernel does not write, through addresses, a range it also
    ///   reaches through another argument or listed buffer, unless its own
    ///   synchronization makes those accesses race-free (vkcompute orders
    ///   the dispatch against other commands, not the kernel's invocations
    ///   against each other);
    /// - every value the kernel writes into a buffer is a valid value of
    ///   that buffer's element type (always so for the plain numeric
    ///   element types).
    ///
    /// [`DeviceBuffer::device_address`]: crate::DeviceBuffer::device_address
    pub unsafe fn enqueue_function_with_addresses<P: Pod>(
        &self,
        kernel: &Kernel,
        grid: impl Into<Grid>,
        args: &[KernelArg<'_>],
        addressed: &[KernelArg<'_>],
        push: &P,
    ) -> Result<()> {
        self.dispatch(
            "DeviceContext::enqueue_function_with_addresses",
            kernel,
            grid.into(),
            args,
            addressed,
            bytemuck::bytes_of(push),
        )
    }

    /// Checks a dispatch and records it; `addressed` buffers are noted as
    /// read and written, beside the bound `args`.
    fn dispatch(
        &self,
        op: &'static str,
        kernel: &Kernel,
        grid: Grid,
        args: &[KernelArg<'_>],
        addressed: &[KernelArg<'_>],
        push_bytes: &[u8],
    ) -> Result<()> {
        let d = self.check_dispatch(op, kernel, grid, args, addressed, push_bytes)?;
        let k = d.kernel;
        let keep = k.clone();
        let describe = || format!("kernel {} grid {:?}", k.entry, d.grid);
        self.shared
            .record_described(op, &describe, &d.accesses, |stream, cmd| {
                stream.keep_alive(keep);
                stream.record_dispatch(cmd, &k.pipeline, &d.infos, &d.push, d.grid)
            })
    }

    /// Checks a dispatch (everything `enqueue_function` documents) and
    /// returns what recording it needs.
    pub(crate) fn check_dispatch<'a>(
        &self,
        op: &'static str,
        kernel: &'a Kernel,
        grid: Grid,
        args: &[KernelArg<'a>],
        addressed: &[KernelArg<'a>],
        push_bytes: &[u8],
    ) -> Result<CheckedDispatch<'a>> {
        let k = &kernel.inner;
        let device = &self.shared.device;
        let name = || k.entry.clone();
        if k.device.id != device.id {
            return Err(Error::DifferentDevice {
                op,
                detail: format!(
                    "kernel `{}` was loaded on device `{}`, the context is on `{}`; load it on this context",
                    k.entry,
                    k.device.name(),
                    device.name()
                ),
            });
        }
        let bindings = &k.interface.bindings;
        if args.len() != bindings.len() {
            return Err(Error::ArgumentCount {
                kernel: name(),
                expected: bindings.len(),
                bindings: format!(
                    "{:?}",
                    bindings.iter().map(|b| b.binding).collect::<Vec<_>>()
                ),
                given: args.len(),
            });
        }
        if push_bytes.len() != k.interface.push_size as usize {
            return Err(Error::PushConstantSize {
                kernel: name(),
                expected: k.interface.push_size,
                given: push_bytes.len(),
            });
        }
        let Grid(grid) = grid;
        let limits = device.limits();
        for (axis, (&n, &max)) in grid
            .iter()
            .zip(&limits.max_compute_work_group_count)
            .enumerate()
        {
            if n == 0 || n > max {
                return Err(Error::InvalidGrid {
                    kernel: name(),
                    grid,
                    reason: format!(
                        "dimension {} is {n}; it must be between 1 and maxComputeWorkGroupCount[{axis}] = {max}",
                        ["x", "y", "z"][axis]
                    ),
                });
            }
        }
        check_aliasing(k, args)?;
        let mut accesses = SmallVec::with_capacity(args.len() + addressed.len());
        let mut infos = SmallVec::with_capacity(args.len());
        for (index, (arg, binding)) in args.iter().zip(bindings).enumerate() {
            let bad = |reason: String| Error::Argument {
                kernel: name(),
                index,
                binding: binding.binding,
                reason,
            };
            let view = arg.view;
            if view.bytes == 0 {
                return Err(bad(format!(
                    "{} is empty; a binding needs at least one element",
                    (arg.type_name)()
                )));
            }
            if let Err(strides) = binding.accepts(arg.element_size, view.bytes) {
                let declared = match strides.as_slice() {
                    [one] => format!("the binding's array has {one}-byte elements"),
                    many => format!(
                        "the binding's aliases have arrays of {many:?}-byte elements and its {} bytes \
                         are not a whole number of elements of each",
                        view.bytes
                    ),
                };
                return Err(bad(format!(
                    "{declared} but {} has {}-byte elements; pass a view of a matching type \
                     (`create_sub_buffer`)",
                    (arg.type_name)(),
                    arg.element_size
                )));
            }
            let max_range = limits.max_storage_buffer_range as u64;
            if view.bytes > max_range {
                return Err(bad(format!(
                    "{} bytes exceed the device's maxStorageBufferRange of {max_range} bytes; split the work",
                    view.bytes
                )));
            }
            let align = limits.min_storage_buffer_offset_alignment.max(1);
            if view.offset % align != 0 {
                return Err(Error::Misaligned {
                    op,
                    offset: view.offset,
                    alignment: align,
                    rule: "a buffer bound to a kernel must start at a multiple of minStorageBufferOffsetAlignment",
                });
            }
            let (offset, len) = if binding.read_only {
                (view.offset, view.bytes)
            } else {
                write_extent(device, view)
            };
            accesses.push(BufferAccess {
                memory: &view.memory,
                offset,
                len,
                write: !binding.read_only,
            });
            infos.push(vk::DescriptorBufferInfo {
                buffer: view.memory.handle(),
                offset: view.offset,
                range: view.bytes,
            });
        }
        accesses.extend(addressed.iter().map(|arg| BufferAccess {
            memory: &arg.view.memory,
            offset: arg.view.offset,
            len: arg.view.bytes,
            write: true,
        }));
        let mut push = SmallVec::from_slice(push_bytes);
        push.resize(push_bytes.len().next_multiple_of(4), 0);
        Ok(CheckedDispatch {
            kernel: k,
            accesses,
            infos,
            push,
            grid,
        })
    }

    /// The device time taken by the work `f` enqueues, run `iters` times:
    /// the total, measured with timestamp queries around it (the stream is
    /// synchronized before and after).
    pub fn execution_time(
        &self,
        mut f: impl FnMut(&DeviceContext) -> Result<()>,
        iters: usize,
    ) -> Result<Duration> {
        let device = &self.shared.device;
        let valid_bits = device
            .adapter
            .queue_family
            .map_or(0, |f| f.timestamp_valid_bits);
        if valid_bits == 0 {
            return Err(Error::Unsupported {
                what: "timestamp queries on the compute queue".into(),
                device: device.name().to_string(),
            });
        }
        let pool = Arc::new(TimestampPool::new(device, 1)?);
        // Every batch that records a query keeps the pool alive, so it is
        // destroyed only once no submitted work uses it, even where `f`
        // fails or panics.
        let ticks = self.time_between(&pool, &mut f, iters)?;
        let mask = if valid_bits >= 64 {
            u64::MAX
        } else {
            (1u64 << valid_bits) - 1
        };
        let elapsed = (ticks[1] & mask).wrapping_sub(ticks[0] & mask) & mask;
        let nanos = elapsed as f64 * device.limits().timestamp_period as f64;
        Ok(Duration::from_nanos(nanos.round() as u64))
    }

    fn time_between(
        &self,
        pool: &Arc<TimestampPool>,
        f: &mut impl FnMut(&DeviceContext) -> Result<()>,
        iters: usize,
    ) -> Result<[u64; 2]> {
        self.synchronize()?;
        self.shared.record("execution_time", &[], |stream, cmd| {
            // The pool lives until the batch completes.
            stream.keep_alive(pool.clone());
            pool.start(cmd, 0);
            Ok(())
        })?;
        for _ in 0..iters {
            f(self)?;
        }
        self.shared.record("execution_time", &[], |stream, cmd| {
            stream.keep_alive(pool.clone());
            // Its BOTTOM_OF_PIPE timestamp waits for all earlier commands.
            pool.end(cmd, 0);
            Ok(())
        })?;
        // Both queries were written by work that has completed once this
        // returns.
        self.synchronize()?;
        pool.read(0)
    }
}

/// The device's cache of loaded kernels.
pub(crate) type KernelCache = Vec<Weak<KernelPipeline>>;
