//! Compute pipelines and the descriptors that bind buffers to them.
//!
//! Buffers bind as storage or uniform buffers, in one or several descriptor
//! sets: through push descriptors where the device has
//! `VK_KHR_push_descriptor` and the kernel uses one set, and through
//! descriptor sets from per-batch pools otherwise.

use std::ffi::CStr;
use std::sync::Arc;

use ash::vk;

use super::command::Cmd;
use super::Device;
use crate::error::{Result, VkResultExt};

/// One binding of a pipeline: a buffer or an array of buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PipelineBinding {
    pub(crate) set: u32,
    pub(crate) binding: u32,
    /// Storage or uniform buffer.
    pub(crate) ty: vk::DescriptorType,
    /// The buffers it holds.
    pub(crate) count: u32,
}

impl PipelineBinding {
    /// One storage buffer at `binding` of set 0.
    pub(crate) fn storage(binding: u32) -> Self {
        PipelineBinding {
            set: 0,
            binding,
            ty: vk::DescriptorType::STORAGE_BUFFER,
            count: 1,
        }
    }
}

/// A compute pipeline whose bindings are all buffers (storage or uniform),
/// in any descriptor sets.
pub(crate) struct ComputePipeline {
    /// One layout per set from 0 to the highest the kernel uses (a set it
    /// does not use has an empty one).
    pub(crate) set_layouts: smallvec::SmallVec<[vk::DescriptorSetLayout; 2]>,
    pub(crate) layout: vk::PipelineLayout,
    pub(crate) pipeline: vk::Pipeline,
    /// Its bindings, in (set, binding) order: the order arguments are
    /// given.
    pub(crate) bindings: Vec<PipelineBinding>,
    /// Whether its buffers bind through push descriptors: where the
    /// device has them, the kernel uses one set, and its descriptors fit
    /// in `maxPushDescriptors` (else through descriptor sets).
    pub(crate) pushes: bool,
    /// Bytes of push constants the shader declares.
    pub(crate) push_size: u32,
}

impl ComputePipeline {
    /// Creates the pipeline of `spirv`'s entry point `entry` (a module
    /// whose specialization constants are frozen into it: none is given).
    pub(crate) fn new(
        device: &Device,
        spirv: &[u32],
        entry: &CStr,
        bindings: Vec<PipelineBinding>,
        push_size: u32,
        required_subgroup_size: Option<u32>,
    ) -> Result<Self> {
        let raw = &device.raw;
        let module_info = vk::ShaderModuleCreateInfo::default().code(spirv);
        // SAFETY: valid SPIR-V words (the caller checked the header).
        let module = unsafe { raw.create_shader_module(&module_info, None) }
            .during("vkCreateShaderModule")?;
        let one_set = bindings.windows(2).all(|w| w[0].set == w[1].set);
        let mut pipeline = ComputePipeline {
            set_layouts: smallvec::SmallVec::new(),
            layout: vk::PipelineLayout::null(),
            pipeline: vk::Pipeline::null(),
            pushes: device.push_descriptor.is_some()
                && one_set
                && bindings.iter().map(|b| b.count).sum::<u32>()
                    <= device.adapter.max_push_descriptors,
            bindings,
            push_size,
        };
        let made = pipeline.build(device, module, entry, required_subgroup_size);
        // SAFETY: the module is only needed while the pipeline is created.
        unsafe { raw.destroy_shader_module(module, None) };
        match made {
            Ok(()) => Ok(pipeline),
            Err(e) => {
                pipeline.destroy(device);
                Err(e)
            }
        }
    }

    fn build(
        &mut self,
        device: &Device,
        module: vk::ShaderModule,
        entry: &CStr,
        required_subgroup_size: Option<u32>,
    ) -> Result<()> {
        let raw = &device.raw;
        let sets = self.bindings.iter().map(|b| b.set + 1).max().unwrap_or(1);
        for set in 0..sets {
            let layout_bindings: Vec<_> = self
                .bindings
                .iter()
                .filter(|b| b.set == set)
                .map(|b| {
                    vk::DescriptorSetLayoutBinding::default()
                        .binding(b.binding)
                        .descriptor_type(b.ty)
                        .descriptor_count(b.count)
                        .stage_flags(vk::ShaderStageFlags::COMPUTE)
                })
                .collect();
            let flags = if self.pushes && !layout_bindings.is_empty() {
                vk::DescriptorSetLayoutCreateFlags::PUSH_DESCRIPTOR_KHR
            } else {
                vk::DescriptorSetLayoutCreateFlags::empty()
            };
            let set_info = vk::DescriptorSetLayoutCreateInfo::default()
                .flags(flags)
                .bindings(&layout_bindings);
            // SAFETY: a valid create info.
            let made = unsafe { raw.create_descriptor_set_layout(&set_info, None) }
                .during("vkCreateDescriptorSetLayout")?;
            self.set_layouts.push(made);
        }
        let ranges = [vk::PushConstantRange::default()
            .stage_flags(vk::ShaderStageFlags::COMPUTE)
            .offset(0)
            .size(self.push_size)];
        let ranges: &[vk::PushConstantRange] = if self.push_size > 0 { &ranges } else { &[] };
        let layout_info = vk::PipelineLayoutCreateInfo::default()
            .set_layouts(&self.set_layouts)
            .push_constant_ranges(ranges);
        // SAFETY: a valid create info.
        self.layout = unsafe { raw.create_pipeline_layout(&layout_info, None) }
            .during("vkCreatePipelineLayout")?;
        let mut stage = vk::PipelineShaderStageCreateInfo::default()
            .stage(vk::ShaderStageFlags::COMPUTE)
            .module(module)
            .name(entry);
        // The caller checked the size against the device's range and that
        // subgroupSizeControl is enabled for compute.
        let mut required = vk::PipelineShaderStageRequiredSubgroupSizeCreateInfo::default()
            .required_subgroup_size(required_subgroup_size.unwrap_or(0));
        if required_subgroup_size.is_some() {
            stage = stage.push_next(&mut required);
        }
        let info = vk::ComputePipelineCreateInfo::default()
            .stage(stage)
            .layout(self.layout);
        super::fault::allocation(device).during("vkCreateComputePipelines")?;
        // SAFETY: every handle in `info` is live; the cache belongs to this device.
        let pipelines =
            unsafe { raw.create_compute_pipelines(device.pipeline_cache, &[info], None) }
                .map_err(|(_, e)| e)
                .during("vkCreateComputePipelines")?;
        self.pipeline = pipelines[0];
        Ok(())
    }

    /// Destroys the pipeline's objects. The caller guarantees no submitted
    /// work uses them.
    pub(crate) fn destroy(&self, device: &Device) {
        // SAFETY: the caller guarantees the objects are unused; null handles
        // (from a failed construction) are ignored by the destroy calls.
        unsafe {
            device.raw.destroy_pipeline(self.pipeline, None);
            device.raw.destroy_pipeline_layout(self.layout, None);
            for &set_layout in &self.set_layouts {
                device.raw.destroy_descriptor_set_layout(set_layout, None);
            }
        }
    }
}

/// A descriptor pool of storage-buffer sets (for devices without push
/// descriptors); `batch_pool::DescriptorPools` hands them to batches.
/// Destroyed when dropped, by an owner whose work using its sets has
/// completed (a batch's pools come back only then; a graph recording's go
/// with the recording, which every batch executing it holds).
pub(crate) struct DescriptorPool {
    device: Arc<Device>,
    raw: vk::DescriptorPool,
}

const SETS_PER_POOL: u32 = 256;
/// Descriptors of each type in one pool: the most one kernel may bind.
pub(crate) const DESCRIPTORS_PER_POOL: u32 = 2048;

impl DescriptorPool {
    /// A new pool on `device`.
    pub(crate) fn new(device: &Arc<Device>) -> Result<Self> {
        let sizes = [
            vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::STORAGE_BUFFER)
                .descriptor_count(DESCRIPTORS_PER_POOL),
            vk::DescriptorPoolSize::default()
                .ty(vk::DescriptorType::UNIFORM_BUFFER)
                .descriptor_count(DESCRIPTORS_PER_POOL),
        ];
        let info = vk::DescriptorPoolCreateInfo::default()
            .max_sets(SETS_PER_POOL)
            .pool_sizes(&sizes);
        super::fault::allocation(device).during("vkCreateDescriptorPool")?;
        // SAFETY: a valid create info.
        let raw = unsafe { device.raw.create_descriptor_pool(&info, None) }
            .during("vkCreateDescriptorPool")?;
        Ok(DescriptorPool {
            device: device.clone(),
            raw,
        })
    }

    /// A set of `layout` from this pool; `None` where the pool is full.
    /// Its user (a batch, a graph recording) holds the pool under one lock.
    pub(crate) fn allocate(
        &mut self,
        layout: vk::DescriptorSetLayout,
    ) -> Result<Option<vk::DescriptorSet>> {
        let device = &self.device;
        let layouts = [layout];
        let info = vk::DescriptorSetAllocateInfo::default()
            .descriptor_pool(self.raw)
            .set_layouts(&layouts);
        let sets = super::fault::allocation(device).and_then(|()| {
            // SAFETY: the pool and layout are live, and `&mut self` is the
            // pool's one user.
            unsafe { device.raw.allocate_descriptor_sets(&info) }
        });
        match sets {
            Ok(sets) => Ok(Some(sets[0])),
            Err(vk::Result::ERROR_OUT_OF_POOL_MEMORY | vk::Result::ERROR_FRAGMENTED_POOL) => {
                Ok(None)
            }
            Err(e) => Err(crate::Error::vk("vkAllocateDescriptorSets", e)),
        }
    }

    /// Frees every set, once the work that used them has completed;
    /// `false` where the reset failed (destroy the pool then).
    pub(crate) fn reset(&mut self) -> bool {
        let device = &self.device;
        // SAFETY: the work that used the pool's sets has completed (the
        // caller's contract: batch pools reset only after their batch).
        unsafe {
            device
                .raw
                .reset_descriptor_pool(self.raw, vk::DescriptorPoolResetFlags::empty())
        }
        .is_ok()
    }
}

impl Drop for DescriptorPool {
    fn drop(&mut self) {
        // SAFETY: no pending work uses the pool's sets (the owner drops it
        // only once that work completed), and it is destroyed once.
        unsafe { self.device.raw.destroy_descriptor_pool(self.raw, None) };
    }
}

/// What a command buffer has bound for compute dispatches, so that a
/// dispatch binds only what changed since the one before (a run of
/// dispatches of one kernel on the same buffers binds once). Forget it
/// whenever the command buffer's bound state may have changed otherwise.
#[derive(Default)]
pub(crate) struct Bound {
    /// Null where nothing is known to be bound.
    pipeline: vk::Pipeline,
    buffers: smallvec::SmallVec<[vk::DescriptorBufferInfo; 8]>,
    push: smallvec::SmallVec<[u8; 128]>,
}

impl Bound {
    /// Nothing is known to be bound any more (a new command buffer, or one
    /// whose state a secondary command buffer changed).
    pub(crate) fn forget(&mut self) {
        self.pipeline = vk::Pipeline::null();
    }
}

fn same_buffers(a: &[vk::DescriptorBufferInfo], b: &[vk::DescriptorBufferInfo]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(x, y)| x.buffer == y.buffer && x.offset == y.offset && x.range == y.range)
}

/// The workgroups of a dispatch: counts, or the three `u32` counts at a
/// byte offset (a multiple of 4, 12 bytes inside the buffer, which was
/// made with the indirect usage) of a buffer, read on the device.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Groups {
    Count([u32; 3]),
    Indirect { buffer: vk::Buffer, offset: u64 },
}

/// Records a dispatch of `pipeline` over `groups` workgroups, with
/// `buffers` bound in the order of the pipeline's bindings and `push` as
/// its push constants, into any command buffer, with descriptor sets (where
/// push descriptors are off) from `allocate`, which must outlive every
/// execution of `cmd`; `bound` is what `cmd` has bound so far.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_dispatch_into(
    device: &Device,
    allocate: &mut dyn FnMut(vk::DescriptorSetLayout) -> Result<vk::DescriptorSet>,
    bound: &mut Bound,
    cmd: Cmd,
    pipeline: &ComputePipeline,
    buffers: &[vk::DescriptorBufferInfo],
    push: &[u8],
    groups: Groups,
) -> Result<()> {
    debug_assert_eq!(
        buffers.len(),
        pipeline
            .bindings
            .iter()
            .map(|b| b.count as usize)
            .sum::<usize>()
    );
    let cmd = cmd.raw();
    let same_pipeline = bound.pipeline == pipeline.pipeline;
    let rebind_buffers = !same_pipeline || !same_buffers(&bound.buffers, buffers);
    let repush = !push.is_empty() && (!same_pipeline || bound.push[..] != *push);
    // Each binding takes the next `count` buffers (one write per binding),
    // into the descriptor set `sets` gives for its set number.
    let writes = |sets: &dyn Fn(u32) -> vk::DescriptorSet| -> smallvec::SmallVec<[vk::WriteDescriptorSet<'_>; 8]> {
        let mut rest = buffers;
        pipeline
            .bindings
            .iter()
            .map(|b| {
                let (these, after) = rest.split_at((b.count as usize).min(rest.len()));
                rest = after;
                vk::WriteDescriptorSet::default()
                    .dst_set(sets(b.set))
                    .dst_binding(b.binding)
                    .descriptor_type(b.ty)
                    .buffer_info(these)
            })
            .collect()
    };
    let raw = &device.raw;
    let bind = vk::PipelineBindPoint::COMPUTE;
    if !same_pipeline {
        // SAFETY: `cmd` is recording; the pipeline is live (its kernel is
        // kept alive with the batch).
        unsafe { raw.cmd_bind_pipeline(cmd, bind, pipeline.pipeline) };
    }
    match device.push_descriptor.as_ref().filter(|_| pipeline.pushes) {
        // A kernel without bindings needs no descriptors, and a push of
        // none is invalid (descriptorWriteCount must be at least 1).
        _ if pipeline.bindings.is_empty() || !rebind_buffers => {}
        Some(push_descriptor) => {
            // The one set every binding is in.
            let set = pipeline.bindings[0].set;
            // SAFETY: `cmd` is recording with the pipeline bound; the
            // layout of `set` was made with the push descriptor flag, and
            // every buffer range was checked by the caller.
            unsafe {
                push_descriptor.cmd_push_descriptor_set(
                    cmd,
                    bind,
                    pipeline.layout,
                    set,
                    &writes(&|_| vk::DescriptorSet::null()),
                );
            }
        }
        None => {
            // One descriptor set for each set number the kernel uses.
            let mut sets: smallvec::SmallVec<[(u32, vk::DescriptorSet); 2]> =
                smallvec::SmallVec::new();
            for b in &pipeline.bindings {
                if sets.last().is_some_and(|(n, _)| *n == b.set) {
                    continue;
                }
                let layout = pipeline.set_layouts[b.set as usize];
                let set = allocate(layout).inspect_err(|_| {
                    // The pipeline may be bound already, with nothing to use.
                    bound.forget();
                })?;
                sets.push((b.set, set));
            }
            let find = |n: u32| {
                sets.iter()
                    .find(|(s, _)| *s == n)
                    .map_or(vk::DescriptorSet::null(), |(_, set)| *set)
            };
            // SAFETY: the sets are new and not in use; every buffer range
            // was checked by the caller; `cmd` is recording.
            unsafe { raw.update_descriptor_sets(&writes(&find), &[]) };
            for &(n, set) in &sets {
                // SAFETY: as above; `n` has a layout in the pipeline layout.
                unsafe { raw.cmd_bind_descriptor_sets(cmd, bind, pipeline.layout, n, &[set], &[]) };
            }
        }
    }
    // From here the pipeline and its descriptors are bound.
    bound.pipeline = pipeline.pipeline;
    if rebind_buffers {
        bound.buffers.clear();
        bound.buffers.extend_from_slice(buffers);
    }
    if repush {
        bound.push.clear();
        bound.push.extend_from_slice(push);
        // SAFETY: `push` is exactly the pipeline's push-constant size (checked
        // by the caller); `cmd` is recording.
        unsafe {
            raw.cmd_push_constants(cmd, pipeline.layout, vk::ShaderStageFlags::COMPUTE, 0, push)
        };
    }
    match groups {
        // SAFETY: `cmd` is recording with a compute pipeline and its
        // descriptors bound.
        Groups::Count([x, y, z]) => unsafe { raw.cmd_dispatch(cmd, x, y, z) },
        // SAFETY: as above; the counts lie inside the indirect buffer at an
        // offset that is a multiple of 4 (the caller's contract), and they
        // were clamped to maxComputeWorkGroupCount on the device before.
        Groups::Indirect { buffer, offset } => unsafe {
            raw.cmd_dispatch_indirect(cmd, buffer, offset)
        },
    }
    Ok(())
}
