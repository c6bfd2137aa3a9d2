//! vkcompute's unchecked entry points that this crate uses, each where
//! the crate itself guarantees what the call needs: the reduction
//! kernels, built from the checked-in SPIR-V without vkcompute's
//! validator, and the import of memory a peer rank exported.
//!
//! Why the kernels' build is sound: vkcompute's safe `Kernel::new`
//! accepts modules other than its own shipped ones only in builds with its
//! feature `validate`, which links SPIRV-Tools through shaderc, a native
//! build that users of this crate should not need. So these modules load
//! with `KernelBuilder::build_unvalidated`, whose contract is that the
//! module is valid SPIR-V. They are: the test `shipped_spirv` (feature
//! `shader-compiler`, run by `make mpi-test`) recompiles every
//! `shaders/*.comp` and fails unless the result is byte for byte the
//! checked-in module, and loads every checked-in module through the
//! validating `Kernel::new` (SPIRV-Tools' validator, as `spirv-val` does).
//! The modules are compiled into this crate with `include_bytes!`, so what
//! the test checked is what runs.

use vkcompute::{
    sharing::{ExportedMemoryFd, ExternalMemoryInfo},
    DeviceBuffer, DeviceContext, Kernel,
};

use super::fd::PeerFd;
use crate::element::KernelType;

/// Which of an element type's checked-in reduction kernels.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Shape {
    /// `reduce_*`: one element per invocation (the last one to three
    /// elements of a reduction).
    Scalar,
    /// `reduce4_*`: four elements per invocation, the operands in one
    /// binding at a stride.
    Wide,
    /// `reduce3_*`: four elements per invocation, up to three operands in
    /// bindings of their own (specialization constant 1 says how many).
    Operands3,
}

/// The checked-in modules, by the GLSL file they come from: per element
/// type the scalar kernel, the wide one and the one of three operands.
pub(crate) const SHIPPED: [(KernelType, Shape, &str, &[u8]); 18] = [
    (
        KernelType::F32,
        Shape::Scalar,
        "reduce_f32",
        include_bytes!("../../shaders/spv/reduce_f32.spv"),
    ),
    (
        KernelType::F64,
        Shape::Scalar,
        "reduce_f64",
        include_bytes!("../../shaders/spv/reduce_f64.spv"),
    ),
    (
        KernelType::I32,
        Shape::Scalar,
        "reduce_i32",
        include_bytes!("../../shaders/spv/reduce_i32.spv"),
    ),
    (
        KernelType::U32,
        Shape::Scalar,
        "reduce_u32",
        include_bytes!("../../shaders/spv/reduce_u32.spv"),
    ),
    (
        KernelType::I64,
        Shape::Scalar,
        "reduce_i64",
        include_bytes!("../../shaders/spv/reduce_i64.spv"),
    ),
    (
        KernelType::U64,
        Shape::Scalar,
        "reduce_u64",
        include_bytes!("../../shaders/spv/reduce_u64.spv"),
    ),
    (
        KernelType::F32,
        Shape::Wide,
        "reduce4_f32",
        include_bytes!("../../shaders/spv/reduce4_f32.spv"),
    ),
    (
        KernelType::F64,
        Shape::Wide,
        "reduce4_f64",
        include_bytes!("../../shaders/spv/reduce4_f64.spv"),
    ),
    (
        KernelType::I32,
        Shape::Wide,
        "reduce4_i32",
        include_bytes!("../../shaders/spv/reduce4_i32.spv"),
    ),
    (
        KernelType::U32,
        Shape::Wide,
        "reduce4_u32",
        include_bytes!("../../shaders/spv/reduce4_u32.spv"),
    ),
    (
        KernelType::I64,
        Shape::Wide,
        "reduce4_i64",
        include_bytes!("../../shaders/spv/reduce4_i64.spv"),
    ),
    (
        KernelType::U64,
        Shape::Wide,
        "reduce4_u64",
        include_bytes!("../../shaders/spv/reduce4_u64.spv"),
    ),
    (
        KernelType::F32,
        Shape::Operands3,
        "reduce3_f32",
        include_bytes!("../../shaders/spv/reduce3_f32.spv"),
    ),
    (
        KernelType::F64,
        Shape::Operands3,
        "reduce3_f64",
        include_bytes!("../../shaders/spv/reduce3_f64.spv"),
    ),
    (
        KernelType::I32,
        Shape::Operands3,
        "reduce3_i32",
        include_bytes!("../../shaders/spv/reduce3_i32.spv"),
    ),
    (
        KernelType::U32,
        Shape::Operands3,
        "reduce3_u32",
        include_bytes!("../../shaders/spv/reduce3_u32.spv"),
    ),
    (
        KernelType::I64,
        Shape::Operands3,
        "reduce3_i64",
        include_bytes!("../../shaders/spv/reduce3_i64.spv"),
    ),
    (
        KernelType::U64,
        Shape::Operands3,
        "reduce3_u64",
        include_bytes!("../../shaders/spv/reduce3_u64.spv"),
    ),
];

/// The words of a checked-in module.
fn words(kind: KernelType, shape: Shape) -> Vec<u32> {
    let bytes = SHIPPED
        .iter()
        .find(|(k, s, _, _)| *k == kind && *s == shape)
        .map_or(&[][..], |(_, _, _, bytes)| *bytes);
    // The files are whole little-endian words (SPIR-V's byte order on every
    // machine this runs on; the test `shipped_spirv` loads them the same
    // way); reading them word by word makes their alignment irrelevant.
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

/// The shipped kernel `shape` for `kind`, its specialization constant 0
/// (a `uint`, the operation) set to `op`, and for [`Shape::Operands3`]
/// constant 1 (a `uint`, how many operands: 1 to 3) to `count`, built on
/// `ctx`'s device.
pub(crate) fn shipped_kernel(
    ctx: &DeviceContext,
    (kind, shape): (KernelType, Shape),
    (op, count): (u32, u32),
) -> vkcompute::Result<Kernel> {
    let words = words(kind, shape);
    let builder = Kernel::builder(&words).specialize(0, op);
    let builder = match shape {
        Shape::Operands3 => builder.specialize(1, count),
        Shape::Scalar | Shape::Wide => builder,
    };
    // SAFETY: the module is one of the checked-in reduction kernels
    // (`SHIPPED`), valid SPIR-V for Vulkan 1.2 and later: the test
    // `shipped_spirv` runs SPIRV-Tools' validator over each and checks
    // that each is what its GLSL source compiles to (see the module
    // documentation). Specialization constant 0 is a `uint` that every
    // value suits, as does every value of constant 1 (`COUNT`, compared,
    // never an index).
    unsafe { builder.build_unvalidated(ctx) }
}

/// Imports `len` bytes of the memory a peer rank exported and sent over
/// the same-node transport's socket (`fd`, described by `info`, which
/// came with it).
pub(crate) fn import_peer_memory(
    ctx: &DeviceContext,
    fd: PeerFd,
    info: ExternalMemoryInfo,
    len: usize,
) -> vkcompute::Result<DeviceBuffer<u8>> {
    let exported = ExportedMemoryFd { fd: fd.0, info };
    // SAFETY: a `PeerFd` comes only off the socket of the same-node
    // transport, connected to a rank of the same job that authenticated
    // the connection with random bytes only the job's ranks know, and
    // that sends only exports of `DeviceBuffer::export_fd` with that
    // export's own description (`same_node`); the receiver trusts its
    // peer as it trusts MPI's bytes. Vulkan memory does not shrink.
    // vkcompute checks the UUIDs, the handle type and the sizes on top.
    unsafe { ctx.import_buffer_fd::<u8>(exported, len) }
}
