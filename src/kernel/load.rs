//! Loading a kernel: every check of the module against the device, the
//! specialization, and the pipeline.

use std::collections::HashMap;
use std::ffi::CString;
use std::sync::Arc;

use ash::vk;

use super::cache::{self, Load};
use super::{Kernel, KernelPipeline};
use crate::bounds;
use crate::capabilities;
use crate::capabilities::Feature;
use crate::context::DeviceContext;
use crate::error::{Error, Result};
use crate::reflect::{self, BindingInfo, BindingKind};
use crate::spirv_check;
use crate::spirv_rules;
use crate::spirv_words;
use crate::vk::pipeline::{ComputePipeline, DESCRIPTORS_PER_POOL};
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
    // What SPIRV-Tools lets through but drivers or layers choke on.
    spirv_rules::check(words).map_err(|reason| Error::InvalidSpirv { reason })?;
    spirv_rules::check_type_nesting(words).map_err(unsupported)?;
    let module = reflect::module_use(words);
    if let (false, Some(found)) = (pointers, module.pointers) {
        return Err(Error::PointerAddressing {
            kernel: label.to_string(),
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
        float_atomics: &module.float_atomics,
        float_modes: &module.float_modes,
    };
    capabilities::check(&declared, &device.capabilities, device.name()).map_err(unsupported)?;
    // Descriptors, read from the words (not yet by spirq, which is not
    // written against hostile input: it may panic or loop on an invalid
    // module, so it only sees one that passed the gate).
    reflect::check_entry_point(words, entry).map_err(unsupported)?;
    reflect::check_descriptors(words).map_err(unsupported)?;
    let limits = device.limits();
    let spec_u32: HashMap<u32, u32> = specialization
        .iter()
        .filter(|(_, b)| b.len() == 4)
        .map(|(id, b)| (*id, u32::from_le_bytes([b[0], b[1], b[2], b[3]])))
        .collect();
    let local_size = reflect::local_size(words, entry, &spec_u32)
        .ok_or_else(|| unsupported("its workgroup size could not be determined".into()))?;
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
    // Every structural check above runs first, so that a build without the
    // validator reports what is wrong with the module where it can; then
    // the gate: the validator, a shipped kernel, or the caller's promise.
    spirv_check::check_module(words, label, vulkan_1_3, trust)?;
    // spirq is not written against hostile input: a panic is an error too.
    let reflected = std::panic::catch_unwind(|| reflect::reflect(words, entry))
        .map_err(|_| Error::InvalidSpirv {
            reason: "the module could not be parsed".into(),
        })?
        .map_err(unsupported)?;
    for (id, bytes) in specialization {
        match reflected.spec_constants.iter().find(|s| s.id == *id) {
            None => {
                return Err(Error::Specialization {
                    kernel: label.to_string(),
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
                    kernel: label.to_string(),
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
    let frozen = spirv_rules::freeze(words, specialization);
    spirv_rules::check_constant_indices(&frozen).map_err(unsupported)?;
    if frozen != words {
        spirv_check::check_specialized(&frozen, words, label, vulkan_1_3, trust)?;
    }
    // The length this pipeline gives each runtime-sized array of buffers
    // (which specialization does not change).
    let runtime_lengths: Vec<(u32, u32)> = reflected
        .bindings
        .iter()
        .filter(|b| b.runtime_sized)
        .map(|b| {
            let n = array_lengths
                .iter()
                .find(|(binding, _)| *binding == b.binding)
                .map_or(1, |&(_, n)| n);
            (b.binding, n)
        })
        .collect();
    // The module as the pipeline runs it: specialized, its runtime-sized
    // arrays of buffers sized, with its indices bounded (src/bounds).
    let prepared = bounds::prepare(&frozen, entry, !unchecked_indices, &runtime_lengths)
        .map_err(unsupported)?;
    let mut reflected = reflected;
    if frozen != words {
        // The interface as specialized (an array in the push-constant
        // block, or an array of buffers, may have a specialization
        // constant for its length).
        let specialized = std::panic::catch_unwind(|| reflect::reflect(&frozen, entry))
            .map_err(|_| Error::InvalidSpirv {
                reason: "the specialized module could not be parsed".into(),
            })?
            .map_err(unsupported)?;
        reflected.push_size = specialized.push_size;
        reflected.bindings = specialized.bindings;
    }
    // The descriptors each binding holds: a runtime-sized array has the
    // length this pipeline is built for.
    let counts: Vec<u32> = reflected
        .bindings
        .iter()
        .map(|b| {
            match runtime_lengths
                .iter()
                .find(|(binding, _)| *binding == b.binding)
            {
                Some(&(_, n)) => n,
                None => b.array_len.unwrap_or(1),
            }
        })
        .collect();
    check_descriptor_counts(device, &reflected.bindings, &counts).map_err(unsupported)?;
    if prepared.words != frozen {
        spirv_check::check_instrumented(&prepared.words, vulkan_1_3)?;
    }
    check_workgroup_memory(&prepared.workgroup, limits.max_compute_shared_memory_size)
        .map_err(unsupported)?;
    if reflected.push_size > limits.max_push_constants_size {
        return Err(unsupported(format!(
            "{} bytes of push constants exceed the device's maxPushConstantsSize of {}",
            reflected.push_size, limits.max_push_constants_size
        )));
    }
    let entry_c = CString::new(entry)
        .map_err(|_| unsupported("the entry point name contains a NUL byte".into()))?;
    let pipeline = ComputePipeline::new(
        device,
        &prepared.words,
        &entry_c,
        reflected
            .bindings
            .iter()
            .zip(&counts)
            .map(|(b, &count)| {
                let ty = match b.kind {
                    BindingKind::StorageBuffer => vk::DescriptorType::STORAGE_BUFFER,
                    BindingKind::UniformBuffer => vk::DescriptorType::UNIFORM_BUFFER,
                };
                (b.binding, ty, count)
            })
            .collect(),
        reflected.push_size.next_multiple_of(4),
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
        interface: reflected,
        local_size,
        pointers,
        subgroup_size,
        unchecked_indices,
        clamped: prepared.clamped,
        counts,
        array_lengths: array_lengths.clone(),
        trust,
        variants: std::sync::Mutex::new(Vec::new()),
    })
}

/// Checks that the workgroup variables `used` fit in `limit` bytes
/// (`maxComputeSharedMemorySize`); the error names each variable and its
/// size.
fn check_workgroup_memory(used: &[bounds::WorkgroupVariable], limit: u32) -> Result<(), String> {
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
fn check_descriptor_counts(
    device: &Device,
    bindings: &[BindingInfo],
    counts: &[u32],
) -> Result<(), String> {
    let limits = device.limits();
    let count = |kind: BindingKind| -> u64 {
        bindings
            .iter()
            .zip(counts)
            .filter(|(b, _)| b.kind == kind)
            .map(|(_, &n)| u64::from(n))
            .sum()
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
            return Err(format!(
                "it binds {n} {what} buffers, more than the device's {name} ({limit})"
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
                "it binds {total} buffers, more than the device's {name} ({limit})"
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
