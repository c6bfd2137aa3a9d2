//! Loading a kernel: every check of the module against the device, the
//! specialization, and the pipeline.

use std::ffi::CString;
use std::sync::Arc;

use ash::vk;

use vkcompute_spirv::{
    self as model, bounds, rules, uses, words as spirv_words, Module, SpecValue,
};

use super::cache::{self, Load};
use super::{Kernel, KernelPipeline};
use crate::capabilities;
use crate::capabilities::Feature;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::reflect::{BindingInfo, BindingKind, Interface};
use crate::spirv_check;
use crate::vk::pipeline::{ComputePipeline, PipelineBinding, DESCRIPTORS_PER_POOL};
use crate::vk::Device;

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

impl Kernel {
    /// Loads `entry` of `words` on `ctx`'s device: from the cache where it
    /// was loaded before, else built (with no lock held) and cached.
    pub(super) fn load(
        ctx: &DeviceContext,
        words: &[u32],
        entry: &str,
        load: Load,
    ) -> Result<Kernel> {
        let label: Arc<str> = load.label.as_deref().unwrap_or(entry).into();
        check_header(words)?;
        let device = &ctx.stream.device;
        let key = cache::Key {
            device: device.id,
            words,
            entry,
            load: &load,
        };
        let inner = cache::get_or_build(&key, || build(device, words, entry, &label, &load))?;
        Ok(Kernel { inner, label })
    }
}

/// Checks entry point `entry` of `words` against `device` and creates its
/// pipeline: what a load does where the cache has no such kernel.
fn build(
    device: &Arc<Device>,
    words: &[u32],
    entry: &str,
    label: &str,
    load: &Load,
) -> Result<KernelPipeline> {
    #[cfg(test)]
    super::tests::building(device.id);
    let Load {
        ref specialization,
        pointers,
        subgroup_size,
        trust,
        unchecked_indices,
        ref array_lengths,
        label: _,
    } = *load;
    device.check_alive("vkCreateComputePipelines")?;
    let unsupported = |reason: String| Error::UnsupportedKernel {
        kernel: label.to_string(),
        reason,
    };
    let vulkan_1_3 = device.adapter.api_version >= vk::API_VERSION_1_3;
    // SPIR-V 1.6 is Vulkan 1.3's (1.0 to 1.5 every Vulkan 1.2 device takes).
    if words[1] >= 0x0001_0600 && !vulkan_1_3 {
        return Err(unsupported(format!(
            "it is SPIR-V 1.6, which needs a Vulkan 1.3 device; `{}` is Vulkan {}.{} (compile \
             it for Vulkan 1.2)",
            device.name(),
            vk::api_version_major(device.adapter.api_version),
            vk::api_version_minor(device.adapter.api_version)
        )));
    }
    // What must hold before anything reads the module further, and what
    // SPIRV-Tools lets through but drivers or layers choke on.
    rules::check(words).map_err(|reason| Error::InvalidSpirv { reason })?;
    rules::check_type_nesting(words).map_err(unsupported)?;
    // The user's module, read for what loading needs before it is
    // prepared: its entry point, its specialization constants, and (for
    // an early, clear error) its use of pointers and device features.
    // Every decision below is taken again on the prepared module.
    let declared = Module::read(words).map_err(|reason| Error::InvalidSpirv { reason })?;
    declared.compute_entry(entry).map_err(unsupported)?;
    check_use(device, &uses::module_use(words), pointers, label)?;
    // The descriptors, read before the gate, so that even a build without
    // the validator says why a module cannot be bound.
    let declared_bindings = declared.bindings().map_err(unsupported)?;
    check_sets(device, declared_bindings.iter().map(|b| b.set)).map_err(unsupported)?;
    // The gate: a shipped kernel, or the caller's promise; with the
    // validator built in, it runs once, on the prepared module below.
    spirv_check::gate(words, label, vulkan_1_3, trust)?;
    let spec_constants = declared.spec_constants().map_err(unsupported)?;
    check_specialization(specialization, &spec_constants, label)?;
    // The module as the pipeline runs it: specialized, one entry point,
    // its runtime-sized arrays of buffers sized, with its indices bounded
    // (vkcompute_spirv::bounds); and its interface, read from it. A module
    // that fails here may be invalid: the validator says so where it can.
    let prepare = || -> Result<(Vec<u32>, bounds::Prepared)> {
        let spec_bytes: Vec<(u32, Vec<u8>)> = specialization
            .iter()
            .map(|(id, v)| (*id, v.bytes()))
            .collect();
        let frozen = rules::freeze(words, &declared, &spec_bytes);
        let frozen_model = Module::read(&frozen).map_err(unsupported)?;
        rules::check_constant_indices(&frozen, &frozen_model).map_err(unsupported)?;
        let prepared = bounds::prepare(
            &frozen,
            &frozen_model,
            entry,
            !unchecked_indices,
            array_lengths,
        )
        .map_err(unsupported)?;
        Ok((frozen, prepared))
    };
    let (frozen, prepared) =
        prepare().map_err(|e| spirv_check::explain(words, label, vulkan_1_3, trust, e))?;
    spirv_check::check_prepared(&prepared.words, &frozen, words, label, vulkan_1_3, trust)?;
    // Every check from here reads the prepared module.
    check_use(device, &uses::module_use(&prepared.words), pointers, label)?;
    let iface = &prepared.interface;
    let limits = device.limits();
    let local_size = iface.local_size;
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
    check_driver_limits(iface).map_err(unsupported)?;
    check_workgroup_memory(&iface.workgroup, limits.max_compute_shared_memory_size)
        .map_err(unsupported)?;
    let printf = prepared.printf.as_ref().map(|p| (p.set, p.binding));
    let interface = Interface::new(iface, &prepared.sized, &spec_constants, printf);
    if interface.push_size > limits.max_push_constants_size {
        return Err(unsupported(format!(
            "{} bytes of push constants exceed the device's maxPushConstantsSize of {}",
            interface.push_size, limits.max_push_constants_size
        )));
    }
    // The descriptors each binding holds: a runtime-sized array has the
    // length this pipeline is built for.
    let counts: Vec<u32> = iface
        .bindings
        .iter()
        .filter(|b| Some((b.set, b.binding)) != printf)
        .map(|b| match b.count {
            model::Count::One => 1,
            model::Count::Array(n) => n,
            model::Count::Runtime => 1,
        })
        .collect();
    check_descriptor_counts(device, &interface.bindings, &counts, printf.is_some())
        .map_err(unsupported)?;
    check_sets(device, interface.bindings.iter().map(|b| b.set)).map_err(unsupported)?;
    let entry_c = CString::new(entry)
        .map_err(|_| unsupported("the entry point name contains a NUL byte".into()))?;
    let pipeline = ComputePipeline::new(
        device,
        &prepared.words,
        &entry_c,
        interface
            .bindings
            .iter()
            .zip(&counts)
            .map(|(b, &count)| {
                let ty = match b.kind {
                    BindingKind::StorageBuffer => vk::DescriptorType::STORAGE_BUFFER,
                    BindingKind::UniformBuffer => vk::DescriptorType::UNIFORM_BUFFER,
                };
                PipelineBinding {
                    set: b.set,
                    binding: b.binding,
                    ty,
                    count,
                }
            })
            // The printf record buffer binds last (its binding follows
            // every other in its set, the last set).
            .chain(printf.map(|(set, binding)| PipelineBinding {
                set,
                binding,
                ty: vk::DescriptorType::STORAGE_BUFFER,
                count: 1,
            }))
            .collect(),
        interface.push_size.next_multiple_of(4),
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
    // Validation messages name the kernel (the first label of the module,
    // entry point and specialization: the pipeline is shared).
    crate::vk::name_object(device, pipeline.pipeline, label);
    Ok(KernelPipeline {
        device: device.clone(),
        pipeline,
        words: words.to_vec(),
        entry: entry.to_string(),
        specialization: specialization.clone(),
        interface,
        local_size,
        pointers,
        subgroup_size,
        unchecked_indices,
        clamped: prepared.clamped,
        printf: prepared.printf.map(Arc::new),
        counts,
        array_lengths: array_lengths.clone(),
        trust,
        variants: std::sync::Mutex::new(Vec::new()),
    })
}

/// Refuses what `module` uses that the safe API cannot bound (pointers,
/// unless the load allows them) or `device` lacks (capabilities and the
/// features they need).
fn check_use(device: &Device, module: &uses::ModuleUse, pointers: bool, label: &str) -> Result<()> {
    if let (false, Some(found)) = (pointers, &module.pointers) {
        return Err(Error::PointerAddressing {
            kernel: label.to_string(),
            found: found.clone(),
        });
    }
    let declared = capabilities::Declared {
        capabilities: &module.capabilities,
        extensions: &module.extensions,
        initialized_workgroup: module.initialized_workgroup,
        local_size_id: module.local_size_id,
        int64_atomics_buffer: module.int64_atomics_buffer,
        int64_atomics_shared: module.int64_atomics_shared,
        float_atomics: &module.float_atomics,
        float_modes: &module.float_modes,
    };
    capabilities::check(&declared, &device.capabilities, device.name()).map_err(|reason| {
        Error::UnsupportedKernel {
            kernel: label.to_string(),
            reason,
        }
    })
}

/// Checks each specialization value against the constant it sets: the
/// module declares the id, and the value is of the constant's kind.
fn check_specialization(
    given: &[(u32, SpecValue)],
    declared: &[model::SpecConstant],
    label: &str,
) -> Result<()> {
    for (id, value) in given {
        let error = |reason: String| Error::Specialization {
            kernel: label.to_string(),
            id: *id,
            reason,
        };
        match declared.iter().find(|s| s.id == *id) {
            None => {
                return Err(error(format!(
                    "the kernel declares no such constant (it declares {:?})",
                    declared.iter().map(|s| s.id).collect::<Vec<_>>()
                )))
            }
            Some(constant) => value.check(constant).map_err(error)?,
        }
    }
    Ok(())
}

/// Checks what the driver is asked to compile against the limits that
/// keep its compile bounded: the call depth and the private and function
/// memory per invocation.
fn check_driver_limits(iface: &model::Interface) -> Result<(), String> {
    if iface.call_depth > model::interface::MAX_CALL_DEPTH {
        return Err(format!(
            "its calls nest {} deep; vkcompute accepts at most {} (drivers inline calls, and \
             deep chains take minutes to compile)",
            iface.call_depth,
            model::interface::MAX_CALL_DEPTH
        ));
    }
    match iface.private_bytes {
        Some(b) if b <= model::interface::MAX_PRIVATE_BYTES => Ok(()),
        other => {
            Err(format!(
            "its private and function-local variables take {} per invocation; vkcompute accepts \
             at most {} bytes (drivers keep them per invocation, and large ones take minutes \
             and gigabytes to compile): put large arrays in a buffer or in shared memory",
            other.map_or_else(|| "more than 2^64 bytes".to_string(), |b| format!("{b} bytes")),
            model::interface::MAX_PRIVATE_BYTES
        ))
        }
    }
}

/// Checks that the descriptor sets a kernel uses fit the device's
/// `maxBoundDescriptorSets`.
fn check_sets(device: &Device, sets: impl Iterator<Item = u32>) -> Result<(), String> {
    let limit = device.limits().max_bound_descriptor_sets;
    match sets.max() {
        Some(set) if set >= limit => Err(format!(
            "it binds descriptor set {set}, but the device's maxBoundDescriptorSets is {limit} \
             (sets 0 to {})",
            limit.saturating_sub(1)
        )),
        _ => Ok(()),
    }
}

/// Checks that the workgroup variables `used` fit in `limit` bytes
/// (`maxComputeSharedMemorySize`); the error names each variable and its
/// size.
fn check_workgroup_memory(used: &[model::WorkgroupVariable], limit: u32) -> Result<(), String> {
    let total = used
        .iter()
        .try_fold(0u64, |sum, v| v.bytes.and_then(|b| sum.checked_add(b)));
    if total.is_some_and(|t| t <= u64::from(limit)) {
        return Ok(());
    }
    let each: Vec<String> = used
        .iter()
        .map(|v| match v.bytes {
            Some(b) => format!("`{}` ({}) {b} bytes", v.name, v.ty),
            None => format!(
                "`{}` ({}) of a size past 2^64 bytes or not known",
                v.name, v.ty
            ),
        })
        .collect();
    Err(format!(
        "its workgroup memory ({}) {} exceeds the device's maxComputeSharedMemorySize of {limit} \
         bytes",
        each.join(", "),
        match total {
            Some(t) => format!("totals {t} bytes, which"),
            None => "has no size that".to_string(),
        }
    ))
}

/// Checks that the buffers `bindings` declare fit the device's descriptor
/// limits (per stage, per set, and the descriptor pools vkcompute makes),
/// and that a device binding an array of buffers can index it
/// (`shader*BufferArrayDynamicIndexing`; the bounds pass clamps every
/// index into such an array, which makes even a constant index dynamic).
/// `printf`: the kernel calls `debugPrintfEXT`, so the pipeline binds the
/// record buffer too, one storage buffer more than `bindings`.
fn check_descriptor_counts(
    device: &Device,
    bindings: &[BindingInfo],
    counts: &[u32],
    printf: bool,
) -> Result<(), String> {
    let limits = device.limits();
    let count = |kind: BindingKind| -> u64 {
        let records = u64::from(printf && kind == BindingKind::StorageBuffer);
        bindings
            .iter()
            .zip(counts)
            .filter(|(b, _)| b.kind == kind)
            .map(|(_, &n)| u64::from(n))
            .sum::<u64>()
            + records
    };
    let records = if printf {
        " (one of them the printf record buffer, which its debugPrintfEXT calls need)"
    } else {
        ""
    };
    let kinds = [
        (
            BindingKind::StorageBuffer,
            "storage",
            limits.max_per_stage_descriptor_storage_buffers,
            "maxPerStageDescriptorStorageBuffers",
            limits.max_descriptor_set_storage_buffers,
            "maxDescriptorSetStorageBuffers",
            Feature::ShaderStorageBufferArrayDynamicIndexing,
        ),
        (
            BindingKind::UniformBuffer,
            "uniform",
            limits.max_per_stage_descriptor_uniform_buffers,
            "maxPerStageDescriptorUniformBuffers",
            limits.max_descriptor_set_uniform_buffers,
            "maxDescriptorSetUniformBuffers",
            Feature::ShaderUniformBufferArrayDynamicIndexing,
        ),
    ];
    for (kind, what, stage, stage_name, set, set_name, indexing) in kinds {
        let n = count(kind);
        let (limit, name) = [
            (u64::from(stage), stage_name),
            (u64::from(set), set_name),
            (
                u64::from(DESCRIPTORS_PER_POOL),
                "the 2048 of one kind vkcompute binds",
            ),
        ]
        .into_iter()
        .min_by_key(|(l, _)| *l)
        .unwrap_or((0, stage_name));
        if n > limit {
            let records = if kind == BindingKind::StorageBuffer {
                records
            } else {
                ""
            };
            return Err(format!(
                "it binds {n} {what} buffers{records}, more than the device's {name} ({limit})"
            ));
        }
        let arrays = bindings
            .iter()
            .any(|b| b.kind == kind && b.array_len.is_some());
        if arrays && !device.capabilities.has(indexing) {
            return Err(format!(
                "it declares an array of {what} buffers, which needs the device feature {} \
                 (its indices are clamped into range, so they are dynamic); `{}` lacks it",
                indexing.name(),
                device.name()
            ));
        }
    }
    let total = count(BindingKind::StorageBuffer) + count(BindingKind::UniformBuffer);
    for (limit, name) in [
        (limits.max_per_stage_resources, "maxPerStageResources"),
        (
            device.adapter.max_per_set_descriptors,
            "maxPerSetDescriptors",
        ),
    ] {
        if total > u64::from(limit) {
            return Err(format!(
                "it binds {total} buffers{records}, more than the device's {name} ({limit})"
            ));
        }
    }
    Ok(())
}

/// SPIR-V words from bytes, in either byte order.
pub(super) fn words_from_bytes(bytes: &[u8]) -> Result<Vec<u32>> {
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
    if words[0] == spirv_words::MAGIC.swap_bytes() {
        words.iter_mut().for_each(|w| *w = w.swap_bytes());
    }
    Ok(words)
}
fn check_header(words: &[u32]) -> Result<()> {
    spirv_words::check_structure(words).map_err(|reason| Error::InvalidSpirv { reason })
}
