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

/// The checked-in modules, by the GLSL file they come from: per element
/// type the scalar kernel (`reduce_*`, one element per invocation) and the
/// wide one (`reduce4_*`, four elements per invocation, `wide` true).
pub(crate) const SHIPPED: [(KernelType, bool, &str, &[u8]); 12] = [
    (
        KernelType::F32,
        false,
        "reduce_f32",
        include_bytes!("../../shaders/spv/reduce_f32.spv"),
    ),
    (
        KernelType::F64,
        false,
        "reduce_f64",
        include_bytes!("../../shaders/spv/reduce_f64.spv"),
    ),
    (
        KernelType::I32,
        false,
        "reduce_i32",
        include_bytes!("../../shaders/spv/reduce_i32.spv"),
    ),
    (
        KernelType::U32,
        false,
        "reduce_u32",
        include_bytes!("../../shaders/spv/reduce_u32.spv"),
    ),
    (
        KernelType::I64,
        false,
        "reduce_i64",
        include_bytes!("../../shaders/spv/reduce_i64.spv"),
    ),
    (
        KernelType::U64,
        false,
        "reduce_u64",
        include_bytes!("../../shaders/spv/reduce_u64.spv"),
    ),
    (
        KernelType::F32,
        true,
        "reduce4_f32",
        include_bytes!("../../shaders/spv/reduce4_f32.spv"),
    ),
    (
        KernelType::F64,
        true,
        "reduce4_f64",
        include_bytes!("../../shaders/spv/reduce4_f64.spv"),
    ),
    (
        KernelType::I32,
        true,
        "reduce4_i32",
        include_bytes!("../../shaders/spv/reduce4_i32.spv"),
    ),
    (
        KernelType::U32,
        true,
        "reduce4_u32",
        include_bytes!("../../shaders/spv/reduce4_u32.spv"),
    ),
    (
        KernelType::I64,
        true,
        "reduce4_i64",
        include_bytes!("../../shaders/spv/reduce4_i64.spv"),
    ),
    (
        KernelType::U64,
        true,
        "reduce4_u64",
        include_bytes!("../../shaders/spv/reduce4_u64.spv"),
    ),
];

/// The words of a checked-in module: the wide one or the scalar one.
fn words(kind: KernelType, wide: bool) -> Vec<u32> {
    let bytes = SHIPPED
        .iter()
        .find(|(k, w, _, _)| *k == kind && *w == wide)
        .map_or(&[][..], |(_, _, _, bytes)| *bytes);
    // The files are whole little-endian words (SPIR-V's byte order on every
    // machine this runs on; the test `shipped_spirv` loads them the same
    // way); reading them word by word makes their alignment irrelevant.
    bytes
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect()
}

/// The shipped kernel for `kind` (the wide one, four elements per
/// invocation, or the scalar one), its specialization constant 0 (a
/// `uint`) set to `constant`, built on `ctx`'s device.
pub(crate) fn shipped_kernel(
    ctx: &DeviceContext,
    (kind, wide): (KernelType, bool),
    constant: u32,
) -> vkcompute::Result<Kernel> {
    let words = words(kind, wide);
    let builder = Kernel::builder(&words).specialize(0, constant);
    // SAFETY: the module is one of the checked-in reduction kernels
    // (`SHIPPED`), valid SPIR-V for Vulkan 1.2 and later: the test
    // `shipped_spirv` runs SPIRV-Tools' validator over each and checks
    // that each is what its GLSL source compiles to (see the module
    // documentation). Specialization constant 0 is a `uint` that every
    // value suits.
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
