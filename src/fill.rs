//! `enqueue_fill` for elements of any width at any byte offset.
//!
//! - A range whose pattern repeats every 4 bytes and that starts and ends on
//!   4-byte boundaries is one `vkCmdFillBuffer`: the fastest fill there is.
//! - Elements of 1, 2, 4, 8 or 16 bytes elsewhere go to the fill kernel
//!   (`shaders/fill.comp`), which masks the words at either end.
//! - Other widths (3, 12, 32 bytes...) stage one tile of repeated elements
//!   and copy it over the range with one multi-region copy.

use std::sync::Arc;

use ash::vk;
use bytemuck::{Pod, Zeroable};
use smallvec::SmallVec;

use crate::enqueue::BufferAccess;
use crate::error::Result;
use crate::recorder::Command;
use crate::resource::BufferMemory;
use crate::stream::StreamHandle;
use crate::vk::pipeline::{ComputePipeline, Groups, PipelineBinding};
use crate::vk::Device;

/// How a fill is done.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum FillPlan {
    /// `vkCmdFillBuffer` with this 32-bit word.
    Word(u32),
    /// The fill kernel.
    Kernel,
    /// Copies of a staged tile.
    Tiles,
}

/// Chooses how to fill `len` bytes (more than zero) at byte `offset` with
/// copies of `element` (whose length divides `len`).
pub(crate) fn plan(offset: u64, len: u64, element: &[u8]) -> FillPlan {
    let s = element.len();
    if 16 % s != 0 {
        return FillPlan::Tiles;
    }
    let word_periodic = s <= 4 || element.chunks(4).all(|c| c == &element[..4]);
    if word_periodic && offset % 4 == 0 && len % 4 == 0 {
        let bytes: [u8; 4] = std::array::from_fn(|j| element[j % s]);
        return FillPlan::Word(u32::from_le_bytes(bytes));
    }
    FillPlan::Kernel
}

/// The fill kernel's push constants (`shaders/fill.comp`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Pod, Zeroable)]
pub(crate) struct FillParams {
    pattern: [u32; 4],
    first_word: u32,
    word_count: u32,
    head_mask: u32,
    tail_mask: u32,
}

/// One dispatch of the fill kernel: the binding and its parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct KernelChunk {
    /// Byte offset of the binding (a multiple of the storage-buffer alignment and of 4).
    pub(crate) bind_offset: u64,
    /// Byte size of the binding (at most `maxStorageBufferRange`).
    pub(crate) bind_size: u64,
    pub(crate) params: FillParams,
}

impl KernelChunk {
    /// The chunk's binding of `buffer`.
    pub(crate) fn binding(&self, buffer: vk::Buffer) -> vk::DescriptorBufferInfo {
        vk::DescriptorBufferInfo {
            buffer,
            offset: self.bind_offset,
            range: self.bind_size,
        }
    }

    /// The workgroups of the chunk's dispatch on `device`: 64 words a
    /// workgroup, grid-stride past the device's x limit.
    pub(crate) fn groups(&self, device: &Device) -> [u32; 3] {
        let max_groups = device.limits().max_compute_work_group_count[0].min(65_535) as u64;
        let groups = (self.params.word_count as u64).div_ceil(64).min(max_groups) as u32;
        [groups, 1, 1]
    }

    /// The push constants of the chunk's dispatch.
    pub(crate) fn push(&self) -> &[u8] {
        bytemuck::bytes_of(&self.params)
    }
}

/// [`kernel_chunks`] with `device`'s limits.
pub(crate) fn device_kernel_chunks(
    device: &Device,
    offset: u64,
    len: u64,
    element: &[u8],
) -> Vec<KernelChunk> {
    let limits = device.limits();
    kernel_chunks(
        offset,
        len,
        element,
        limits.min_storage_buffer_offset_alignment,
        limits.max_storage_buffer_range as u64,
    )
}

/// Splits a fill of `offset..offset+len` with `element` (1, 2, 4, 8 or 16
/// bytes) into dispatches whose bindings respect `min_align`
/// (`minStorageBufferOffsetAlignment`) and `max_range` (`maxStorageBufferRange`).
pub(crate) fn kernel_chunks(
    offset: u64,
    len: u64,
    element: &[u8],
    min_align: u64,
    max_range: u64,
) -> Vec<KernelChunk> {
    let align = min_align.max(4);
    let max_span = max_range / 4 * 4;
    let end = offset + len;
    let mut chunks = Vec::new();
    let mut start = offset;
    while start < end {
        let bind_offset = start / align * align;
        let chunk_end = end.min(bind_offset + max_span);
        let rel_start = start - bind_offset;
        let rel_end = chunk_end - bind_offset;
        let first_word = rel_start / 4;
        let last_word = (rel_end - 1) / 4;
        let tail_bytes = rel_end - 4 * last_word;
        let params = FillParams {
            pattern: rotated_pattern(element, offset, bind_offset),
            first_word: first_word as u32,
            word_count: (last_word - first_word + 1) as u32,
            head_mask: u32::MAX << (8 * (rel_start % 4)),
            tail_mask: if tail_bytes == 4 {
                u32::MAX
            } else {
                (1u32 << (8 * tail_bytes)) - 1
            },
        };
        chunks.push(KernelChunk {
            bind_offset,
            bind_size: chunk_end.next_multiple_of(4) - bind_offset,
            params,
        });
        start = chunk_end;
    }
    chunks
}

/// The 16 bytes that word `w` of a binding at byte `base` takes from
/// `pattern[w % 4]`, for a fill whose first element starts at byte `offset`.
fn rotated_pattern(element: &[u8], offset: u64, base: u64) -> [u32; 4] {
    let s = element.len() as u64;
    let byte = |i: u64| element[((base + i + 16 * s - offset % (16 * s)) % s) as usize];
    std::array::from_fn(|w| {
        let w = w as u64;
        u32::from_le_bytes([
            byte(4 * w),
            byte(4 * w + 1),
            byte(4 * w + 2),
            byte(4 * w + 3),
        ])
    })
}

/// The bytes of the staged tile for a fill of `len` bytes: a multiple of the
/// element size, at most `len`, large enough that few copy regions are needed.
pub(crate) fn tile_len(len: u64, element_size: u64) -> u64 {
    let target = (len / 256).clamp(64 << 10, 16 << 20);
    (target / element_size)
        .max(1)
        .saturating_mul(element_size)
        .min(len)
}

/// The fill kernel's pipeline, created once per device.
pub(crate) fn fill_pipeline(device: &Device) -> Result<Arc<ComputePipeline>> {
    device.internal_pipeline("fill", || build_fill_pipeline(device))
}

/// A new pipeline of the fill kernel.
fn build_fill_pipeline(device: &Device) -> Result<ComputePipeline> {
    ComputePipeline::new(
        device,
        crate::shaders::FILL,
        c"main",
        vec![PipelineBinding::storage(0)],
        std::mem::size_of::<FillParams>() as u32,
        None,
    )
}

/// One command of a fill planned as `Word` or `Kernel`: the bytes it
/// counts as written, and how it writes them.
pub(crate) struct FillStep {
    pub(crate) offset: u64,
    pub(crate) len: u64,
    how: StepKind,
}

enum StepKind {
    Word(u32),
    /// A dispatch of the fill kernel, with its binding.
    Chunk(
        KernelChunk,
        [vk::DescriptorBufferInfo; 1],
        Arc<ComputePipeline>,
    ),
}

/// The commands of a fill (of a plan other than `Tiles`), the same on a
/// stream and in a graph.
pub(crate) struct FillSteps {
    pub(crate) steps: SmallVec<[FillStep; 1]>,
}

impl FillSteps {
    /// The steps of a fill of `len` bytes (more than zero) of `dst` at
    /// byte `offset` with copies of `element`; `None` where the plan is
    /// `Tiles`.
    pub(crate) fn new(
        device: &Device,
        dst: vk::Buffer,
        offset: u64,
        len: u64,
        element: &[u8],
    ) -> Result<Option<Self>> {
        Ok(Some(match plan(offset, len, element) {
            FillPlan::Tiles => return Ok(None),
            FillPlan::Word(word) => FillSteps {
                steps: smallvec::smallvec![FillStep {
                    offset,
                    len,
                    how: StepKind::Word(word),
                }],
            },
            FillPlan::Kernel => {
                let pipeline = fill_pipeline(device)?;
                // The whole binding counts as written: the kernel touches
                // only the words of the range, but synchronization (and its
                // validation) works on descriptor ranges.
                let steps = device_kernel_chunks(device, offset, len, element)
                    .into_iter()
                    .map(|chunk| FillStep {
                        offset: chunk.bind_offset,
                        len: chunk.bind_size,
                        how: StepKind::Chunk(chunk, [chunk.binding(dst)], pipeline.clone()),
                    })
                    .collect();
                FillSteps { steps }
            }
        }))
    }
}

impl FillStep {
    /// The step's command, filling `dst` (the buffer its steps were made for).
    pub(crate) fn command(&self, device: &Device, dst: vk::Buffer) -> Command<'_> {
        match &self.how {
            StepKind::Chunk(chunk, binding, pipeline) => Command::Dispatch {
                pipeline,
                buffers: binding,
                push: chunk.push(),
                groups: Groups::Count(chunk.groups(device)),
            },
            // Offset and size are multiples of 4 inside the buffer (the
            // plan says so).
            &StepKind::Word(word) => Command::FillWord {
                dst,
                offset: self.offset,
                len: self.len,
                word,
            },
        }
    }
}

/// The copy of a `Tiles` fill: `tile` bytes of whole elements at
/// `src_offset` in `src`, over `len` bytes of `dst` at `offset`.
pub(crate) fn tile_copy(
    (src, src_offset, tile): (vk::Buffer, u64, u64),
    dst: vk::Buffer,
    offset: u64,
    len: u64,
) -> Command<'static> {
    Command::Copy {
        src,
        dst,
        // Every region lies in the tile and in the range (the tile is
        // whole elements, at most the range's length).
        regions: (0..len)
            .step_by(tile as usize)
            .map(|at| vk::BufferCopy {
                src_offset,
                dst_offset: offset + at,
                size: tile.min(len - at),
            })
            .collect(),
    }
}

/// Fills `len` bytes of `dst` at byte `offset` with copies of `element`.
pub(crate) fn fill(
    handle: &StreamHandle,
    op: &'static str,
    dst: &Arc<BufferMemory>,
    offset: u64,
    len: u64,
    element: &[u8],
) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    debug_assert_eq!(len % element.len() as u64, 0);
    let write = |offset, len| BufferAccess {
        memory: dst,
        offset,
        len,
        write: true,
    };
    let buffer = dst.handle();
    let Some(fill) = FillSteps::new(&handle.device, buffer, offset, len, element)? else {
        let tile = tile_len(len, element.len() as u64);
        return crate::enqueue::onto(handle, op, &[write(offset, len)]).command(|stream| {
            let slice = stream.stage_upload(tile)?;
            // No device work uses the slice yet.
            slice.mapped.fill(element);
            let src = (slice.buffer, slice.offset, tile);
            Ok((tile_copy(src, buffer, offset, len), ()))
        });
    };
    // A fill of several dispatches holds the buffer's operations from
    // the first to the last, so no other operation on it sees the fill
    // half done.
    let _ops = dst.lock_ops(fill.steps.len() > 1);
    for step in &fill.steps {
        let access = [write(step.offset, step.len)];
        crate::enqueue::onto(handle, op, &access)
            .holding(Some(dst))
            .command(|_| Ok((step.command(&handle.device, buffer), ())))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// No lock is held while an internal pipeline is built: a build that
    /// itself needs another internal pipeline (re-entering the device's
    /// pipeline list) finishes instead of deadlocking, and a pipeline built
    /// while another thread built the same one gives way to it.
    #[test]
    fn internal_pipelines_build_with_no_lock_held() {
        let ctx = crate::context::tests::validated_context();
        let device = &ctx.stream.device;
        let build = || build_fill_pipeline(device);
        let mut inner = None;
        let outer = device
            .internal_pipeline("outer", || {
                // Re-enters while "outer" is being built: the fill
                // pipeline, and "outer" itself, as a racing thread would.
                let fill = fill_pipeline(device)?;
                assert!(Arc::ptr_eq(&fill, &fill_pipeline(device)?));
                inner = Some(device.internal_pipeline("outer", build)?);
                build()
            })
            .unwrap();
        // The build that finished second gave way: its pipeline was
        // destroyed, and both callers hold the first one.
        assert!(Arc::ptr_eq(&outer, inner.as_ref().unwrap()));
        let again = device
            .internal_pipeline("outer", || unreachable!("found without building"))
            .unwrap();
        assert!(Arc::ptr_eq(&outer, &again));
        assert!(ctx.diagnostics().validation_messages().is_empty());
    }

    /// Applies the kernel's arithmetic to a byte array, as the GPU would.
    fn run_kernel(memory: &mut [u8], chunk: &KernelChunk) {
        let p = chunk.params;
        for i in 0..p.word_count {
            let w = (p.first_word + i) as usize;
            let at = chunk.bind_offset as usize + 4 * w;
            assert!(
                4 * w + 4 <= chunk.bind_size as usize,
                "word {w} outside the binding"
            );
            let old = u32::from_le_bytes(memory[at..at + 4].try_into().unwrap());
            let mut mask = u32::MAX;
            if i == 0 {
                mask &= p.head_mask;
            }
            if i == p.word_count - 1 {
                mask &= p.tail_mask;
            }
            let value = (old & !mask) | (p.pattern[w & 3] & mask);
            memory[at..at + 4].copy_from_slice(&value.to_le_bytes());
        }
    }

    #[test]
    fn aligned_32_bit_fills_use_fill_buffer() {
        assert_eq!(plan(0, 64, &7u32.to_le_bytes()), FillPlan::Word(7));
        assert_eq!(plan(4, 8, &[1, 2]), FillPlan::Word(0x0201_0201));
        assert_eq!(plan(8, 16, &[9]), FillPlan::Word(0x0909_0909));
        assert_eq!(
            plan(0, 16, &[1, 2, 3, 4, 1, 2, 3, 4]),
            FillPlan::Word(0x0403_0201)
        );
    }

    #[test]
    fn unaligned_or_wide_fills_use_the_kernel_or_tiles() {
        assert_eq!(plan(1, 3, &[5]), FillPlan::Kernel);
        assert_eq!(plan(2, 4, &[1, 2]), FillPlan::Kernel);
        assert_eq!(plan(0, 16, &1u64.to_le_bytes()), FillPlan::Kernel);
        assert_eq!(plan(0, 12, &[1, 2, 3]), FillPlan::Tiles);
        assert_eq!(plan(0, 32, &[0u8; 32]), FillPlan::Tiles);
    }

    #[test]
    fn kernel_chunks_fill_exactly_the_range() {
        let elements: [&[u8]; 5] = [
            &[0xa1],
            &[0xb1, 0xb2],
            &[0xc1, 0xc2, 0xc3, 0xc4],
            &[1, 2, 3, 4, 5, 6, 7, 8],
            &[16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1],
        ];
        for element in elements {
            let s = element.len() as u64;
            for (align, max_range) in [(16, 1 << 20), (4, 64), (64, 96), (256, 256)] {
                for offset in (0..40).filter(|o| o % s == 0) {
                    for count in 1..30u64 {
                        let len = count * s;
                        let mut memory = vec![0x55u8; 4096];
                        for chunk in kernel_chunks(offset, len, element, align, max_range) {
                            assert_eq!(chunk.bind_offset % align.max(4), 0);
                            assert!(chunk.bind_size <= max_range);
                            run_kernel(&mut memory, &chunk);
                        }
                        for (i, &b) in memory.iter().enumerate() {
                            let i = i as u64;
                            let want = if (offset..offset + len).contains(&i) {
                                element[((i - offset) % s) as usize]
                            } else {
                                0x55
                            };
                            assert_eq!(
                                b, want,
                                "byte {i}, offset {offset}, len {len}, element {element:?}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn tiles_are_whole_elements_within_the_range() {
        assert_eq!(tile_len(12, 3), 12);
        assert_eq!(tile_len(3 << 20, 3) % 3, 0);
        assert!(tile_len(3 << 20, 3) <= 3 << 20);
        assert_eq!(tile_len(96, 32), 96);
        assert_eq!(tile_len(1 << 30, 24) % 24, 0);
    }
}
