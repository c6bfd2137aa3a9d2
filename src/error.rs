//! The crate's one error type.
//!
//! Every variant is a cause a caller can act on, and its message says what
//! was asked, what the limit was, and where it helps, what to do about it.

use ash::vk;

/// The result type of every fallible call in this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in vkcompute.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The Vulkan loader (`libvulkan.so.1`, `vulkan-1.dll`, ...) could not be loaded.
    #[error(
        "the Vulkan loader could not be loaded ({detail}); install it: on Debian or Ubuntu \
         `apt install libvulkan1 mesa-vulkan-drivers` (the second package is lavapipe, Mesa's \
         CPU driver, for machines without a GPU); elsewhere your GPU vendor's driver or the \
         Vulkan SDK"
    )]
    LoaderMissing {
        /// What the loader library reported.
        detail: String,
    },

    /// The loader works but no Vulkan device (driver) is visible.
    #[error(
        "no Vulkan device found ({detail}); install a Vulkan driver: your GPU vendor's, or \
         where there is no GPU, Mesa's CPU driver lavapipe (Debian or Ubuntu: `apt install \
         mesa-vulkan-drivers`)"
    )]
    NoDevice {
        /// Why no device was found.
        detail: String,
    },

    /// A device was asked for (by index or name) that does not exist.
    #[error(
        "no Vulkan device matches {selector:?} (given by {origin}); the devices are: {available}"
    )]
    DeviceNotFound {
        /// The index or name substring asked for.
        selector: String,
        /// Where the selector came from (an option or `VKCOMPUTE_DEVICE`).
        origin: &'static str,
        /// The devices that exist, by index and name.
        available: String,
    },

    /// The device exists but lacks something vkcompute needs.
    #[error("device `{device}` cannot be used: {reason}")]
    UnsupportedDevice {
        /// The device's name.
        device: String,
        /// What it lacks.
        reason: String,
    },

    /// Validation was asked for but the Khronos validation layer is not installed.
    #[error(
        "validation was asked for but VK_LAYER_KHRONOS_validation is not installed; install it \
         (Debian or Ubuntu: `apt install vulkan-validationlayers`) or turn validation off"
    )]
    ValidationLayerMissing,

    /// A Vulkan call failed.
    #[error("{call} failed: {result}")]
    Vulkan {
        /// The Vulkan function that failed.
        call: &'static str,
        /// What it returned.
        result: vk::Result,
    },

    /// The device was lost: the context cannot run work any more.
    #[error("the device was lost during {call}; work on this device can no longer run")]
    DeviceLost {
        /// The Vulkan function that reported the loss.
        call: &'static str,
    },

    /// A kernel failed an assertion (`VK_ASSERT` of `vkcompute.glsl`): the
    /// invocation stopped (returned from the function it was in); the
    /// dispatch's other invocations and later commands ran. Returned once,
    /// by the first host wait on the stream after the dispatch completed.
    #[error("{0}")]
    KernelAssert(Box<KernelAssertion>),

    /// A host wait with a time limit ended before the work it waits for.
    /// Nothing changed: the work stays enqueued and runs on, and a later
    /// wait waits for it.
    #[error(
        "{op} waited {waited:?} and the work is still running (it stays enqueued; a later wait \
         waits for it; a kernel that never ends keeps the device busy: on GPUs the driver \
         resets it after its timeout and the context reports Error::DeviceLost)"
    )]
    Timeout {
        /// The call that waited.
        op: &'static str,
        /// How long it waited.
        waited: std::time::Duration,
    },

    /// Not enough device or host memory for an allocation.
    #[error("{}", out_of_memory_message(.what, *.bytes, .detail))]
    OutOfMemory {
        /// What was being allocated.
        what: String,
        /// How many bytes were asked for (0 where the failing call does
        /// not say: command buffers, descriptor pools and the like).
        bytes: u64,
        /// The limit that was hit and what to do about it.
        detail: String,
    },

    /// A size computation overflowed (`len * size_of::<T>()` and the like).
    #[error("{what}: {len} elements of {elem_size} bytes each overflow a 64-bit byte size")]
    SizeOverflow {
        /// The call and argument.
        what: String,
        /// The element count asked for.
        len: usize,
        /// The element size in bytes.
        elem_size: usize,
    },

    /// An operation that a graph cannot hold (it reads host memory when
    /// enqueued, or needs a path graphs do not capture).
    #[error("{op}: cannot be captured in a graph: {reason}")]
    NotCapturable {
        /// The call.
        op: &'static str,
        /// Why, and what to do instead.
        reason: String,
    },

    /// A replay's parameters do not fit the graph (a buffer it does not
    /// use, a dispatch it does not have, or substitutes that would overlap
    /// where the captured buffers did not).
    #[error("DeviceContext::enqueue_graph_with: invalid parameters: {reason}")]
    GraphParameter {
        /// What is wrong.
        reason: String,
    },

    /// The trace file could not be created.
    #[error("cannot write the trace file {path}: {detail}")]
    Trace {
        /// The path asked for.
        path: String,
        /// The system's message.
        detail: String,
    },

    /// A buffer or view of a zero-sized element type (such as `()`), which
    /// could hold no data however many elements it had.
    #[error("{what}: the element type `{type_name}` has no size, so its elements hold no data")]
    ZeroSizedElement {
        /// The call and argument.
        what: String,
        /// The element type.
        type_name: &'static str,
    },

    /// A buffer larger than a device limit allows.
    #[error("{what}: {bytes} bytes exceed the device's {limit_name} of {limit} bytes")]
    TooLarge {
        /// The call and argument.
        what: String,
        /// How many bytes were asked for.
        bytes: u64,
        /// The Vulkan limit that was exceeded.
        limit_name: &'static str,
        /// Its value on this device.
        limit: u64,
    },

    /// The two ends of a copy have different lengths.
    #[error(
        "{op}: length mismatch: the destination holds {dst_len} elements, the source {src_len}; \
         copy between views of equal length (`create_sub_buffer`, or slice the host side)"
    )]
    LengthMismatch {
        /// The call.
        op: &'static str,
        /// Elements in the destination.
        dst_len: usize,
        /// Elements in the source.
        src_len: usize,
    },

    /// An element range that does not lie inside the buffer.
    #[error("{op}: elements {offset}..{offset}+{len} are out of range for {buffer} of {buffer_len} elements")]
    OutOfRange {
        /// The call.
        op: &'static str,
        /// The buffer's type name.
        buffer: String,
        /// The first element asked for.
        offset: usize,
        /// How many elements were asked for.
        len: usize,
        /// How many elements the buffer has.
        buffer_len: usize,
    },

    /// An offset that breaks an alignment rule.
    #[error("{op}: byte offset {offset} is not a multiple of {alignment} ({rule})")]
    Misaligned {
        /// The call.
        op: &'static str,
        /// The byte offset.
        offset: u64,
        /// The alignment required.
        alignment: u64,
        /// The rule that requires it.
        rule: &'static str,
    },

    /// A copy between overlapping ranges of the same memory.
    #[error(
        "{op}: the source (byte {src_offset}) and destination (byte {dst_offset}) ranges of \
         {len} bytes overlap in the same buffer; copy through a temporary buffer"
    )]
    Overlap {
        /// The call.
        op: &'static str,
        /// The source's byte offset in the shared memory.
        src_offset: u64,
        /// The destination's byte offset in the shared memory.
        dst_offset: u64,
        /// Bytes to copy.
        len: u64,
    },

    /// An operation that needs sole ownership of a buffer found it shared.
    #[error("{op}: the buffer cannot be taken: {reason}")]
    Shared {
        /// The call.
        op: &'static str,
        /// Why not.
        reason: &'static str,
    },

    /// Work on a buffer that the host has borrowed (a mapping or a host
    /// slice is alive) in a way that conflicts with it.
    #[error("{op}: {buffer}; drop the mapping or host slice (or call `finish()`) first")]
    BufferMapped {
        /// The call.
        op: &'static str,
        /// How the host holds the buffer.
        buffer: String,
    },

    /// Two objects that must share a device do not.
    #[error("{op}: {detail}")]
    DifferentDevice {
        /// The call.
        op: &'static str,
        /// Which objects, on which devices.
        detail: String,
    },

    /// Bytes that are not a SPIR-V module.
    #[error("invalid SPIR-V: {reason}")]
    InvalidSpirv {
        /// What is wrong with it.
        reason: String,
    },

    /// User SPIR-V reached a safe loader in a build without the SPIR-V
    /// validator (feature `validate`).
    #[error(
        "kernel `{kernel}`: this build of vkcompute cannot validate user SPIR-V, and an invalid \
         module reaching the driver is undefined behaviour; enable vkcompute's feature \
         `validate` (SPIRV-Tools, linked through shaderc), or, if you can guarantee that the \
         module is valid SPIR-V for the device's Vulkan version, load it with the unsafe \
         `Kernel::new_unvalidated` or `KernelBuilder::build_unvalidated`"
    )]
    ValidatorUnavailable {
        /// The entry point asked for.
        kernel: String,
    },

    /// A kernel whose interface vkcompute cannot drive.
    #[error("kernel `{kernel}` cannot be loaded: {reason}")]
    UnsupportedKernel {
        /// The entry point.
        kernel: String,
        /// What it declares that vkcompute does not support.
        reason: String,
    },

    /// A kernel that addresses memory through pointers, refused by the safe
    /// API, which cannot bound where such a kernel reads and writes.
    #[error(
        "kernel `{kernel}` addresses memory through pointers ({found}); the safe API cannot bound \
         what it touches: load it with `KernelBuilder::allow_pointer_addressing` and \
         dispatch it with the unsafe `DeviceContext::enqueue_function_with_addresses`"
    )]
    PointerAddressing {
        /// The entry point.
        kernel: String,
        /// What was found: a capability, addressing model, storage class or
        /// instruction, or that the kernel was loaded for pointer addressing.
        found: String,
    },

    /// Two arguments of a dispatch whose byte ranges overlap in one buffer
    /// while the kernel writes at least one of them.
    #[error(
        "kernel `{kernel}`: arguments {first} and {second} overlap: {detail}; pass disjoint ranges"
    )]
    AliasedArguments {
        /// The entry point.
        kernel: String,
        /// The first argument's index.
        first: usize,
        /// The second argument's index.
        second: usize,
        /// Their byte ranges in the shared buffer, and which the kernel writes.
        detail: String,
    },

    /// GLSL that did not compile (the compiler's message, with line numbers).
    #[error("GLSL compilation failed:\n{message}")]
    ShaderCompilation {
        /// The compiler's message.
        message: String,
    },

    /// A specialization constant that the kernel does not declare, or of the wrong size.
    #[error("kernel `{kernel}`: specialization constant {id}: {reason}")]
    Specialization {
        /// The entry point.
        kernel: String,
        /// The `constant_id`.
        id: u32,
        /// What is wrong.
        reason: String,
    },

    /// The wrong number of buffers for a kernel.
    #[error("kernel `{kernel}` takes {expected} buffer argument(s) (bindings {bindings}), but {given} were given")]
    ArgumentCount {
        /// The entry point.
        kernel: String,
        /// How many it declares.
        expected: usize,
        /// Its binding numbers.
        bindings: String,
        /// How many were given.
        given: usize,
    },

    /// A buffer argument that does not suit its binding.
    #[error("kernel `{kernel}`, argument {index} (binding {binding}): {reason}")]
    Argument {
        /// The entry point.
        kernel: String,
        /// The argument's position.
        index: usize,
        /// Its binding number.
        binding: u32,
        /// What is wrong and what the limit is.
        reason: String,
    },

    /// Push constants of the wrong size.
    #[error("kernel `{kernel}` declares {expected} bytes of push constants, but the value given has {given}")]
    PushConstantSize {
        /// The entry point.
        kernel: String,
        /// Bytes declared.
        expected: u32,
        /// Bytes given.
        given: usize,
    },

    /// A grid with a zero dimension or beyond the device's limits.
    #[error("kernel `{kernel}`: grid {grid:?} is invalid: {reason}")]
    InvalidGrid {
        /// The entry point.
        kernel: String,
        /// The workgroup counts asked for.
        grid: [u32; 3],
        /// Which dimension and which limit.
        reason: String,
    },

    /// Something the device cannot do.
    #[error("{what} is not supported by device `{device}`")]
    Unsupported {
        /// What was asked.
        what: String,
        /// The device's name.
        device: String,
    },

    /// gpu-allocator reported an error other than running out of memory.
    #[error("memory allocation for {what} failed: {detail}")]
    Allocation {
        /// What was being allocated.
        what: String,
        /// gpu-allocator's message.
        detail: String,
    },

    /// A memory or semaphore handle that cannot be imported: not a handle
    /// of the kind given (a pipe, a socket, a closed descriptor), or one the
    /// driver refused.
    #[error("{op}: invalid {handle_type} handle: {detail}")]
    InvalidHandle {
        /// The call.
        op: &'static str,
        /// The handle type given.
        handle_type: &'static str,
        /// What is wrong with it.
        detail: String,
    },

    /// A handle exported by another physical device (or driver) than the
    /// importing context's: its recorded UUID differs.
    #[error("{op}: the handle comes from device {exporter} but this context's device `{device}` is {importer}; import it on a context of the exporting device")]
    ForeignDevice {
        /// The call.
        op: &'static str,
        /// The exporter's UUID (device or driver), in hex.
        exporter: String,
        /// This device's UUID, in hex.
        importer: String,
        /// This device's name.
        device: String,
    },

    /// Imported memory smaller than what was asked of it.
    #[error("{op}: {needed} bytes are needed but the imported memory has {available}")]
    ImportSize {
        /// The call.
        op: &'static str,
        /// Bytes the buffer (or its offset and size) needs.
        needed: u64,
        /// Bytes the handle's memory has.
        available: u64,
    },

    /// A buffer whose memory cannot be exported as asked: not created with
    /// `enqueue_create_exportable_buffer`, empty, or not exportable as this
    /// handle type.
    #[error("{op}: {reason}")]
    NotExportable {
        /// The call.
        op: &'static str,
        /// Why not.
        reason: String,
    },

    /// Two [`Event`](crate::Event)s that cannot be timed against each
    /// other: recorded on different queues, or the earlier one reached
    /// after the later.
    #[error("{op}: {reason}")]
    EventMismatch {
        /// The call.
        op: &'static str,
        /// Why not.
        reason: String,
    },

    /// An error that happened in `Drop` (a deferred write-back or free),
    /// returned by the next call on the same context.
    #[error("an earlier operation that ran in Drop failed: {0}")]
    Deferred(Box<Error>),
}

/// A failed kernel assertion ([`Error::KernelAssert`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KernelAssertion {
    /// The kernel's label.
    pub kernel: String,
    /// The source file, where the module kept line information (GLSL
    /// compiled by vkcompute keeps it), else empty.
    pub file: String,
    /// The line of the assertion.
    pub line: u32,
    /// The message, its values formatted.
    pub message: String,
    /// The global invocation id that failed.
    pub invocation: [u32; 3],
}

impl std::fmt::Display for KernelAssertion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "kernel `{}` failed an assertion at ", self.kernel)?;
        if !self.file.is_empty() {
            write!(f, "{}, ", self.file)?;
        }
        write!(
            f,
            "line {}, invocation {:?}: {}",
            self.line, self.invocation, self.message
        )
    }
}

impl Error {
    /// The error for a failed Vulkan call, with device loss and memory
    /// exhaustion given their own variants.
    pub(crate) fn vk(call: &'static str, result: vk::Result) -> Self {
        match result {
            vk::Result::ERROR_DEVICE_LOST => Error::DeviceLost { call },
            vk::Result::ERROR_OUT_OF_DEVICE_MEMORY | vk::Result::ERROR_OUT_OF_HOST_MEMORY => {
                Error::OutOfMemory {
                    what: call.to_string(),
                    bytes: 0,
                    detail: format!("the driver returned {result}"),
                }
            }
            result => Error::Vulkan { call, result },
        }
    }

    /// `len * elem_size` as a byte count, or the overflow error for `what`.
    pub(crate) fn byte_size(what: &str, len: usize, elem_size: usize) -> Result<u64> {
        len.checked_mul(elem_size)
            .and_then(|b| u64::try_from(b).ok())
            .ok_or_else(|| Error::SizeOverflow {
                what: what.to_string(),
                len,
                elem_size,
            })
    }
}

/// The message of [`Error::OutOfMemory`]: the size only where it is known.
fn out_of_memory_message(what: &str, bytes: u64, detail: &str) -> String {
    if bytes == 0 {
        format!("out of memory in {what}; {detail}")
    } else {
        format!("out of memory: {what} needs {bytes} bytes; {detail}")
    }
}

/// Adds the name of the failing Vulkan call to an `ash` result.
pub(crate) trait VkResultExt<T> {
    /// Turns a failed call into [`Error::Vulkan`] (or its specific variants).
    fn during(self, call: &'static str) -> Result<T>;
}

impl<T> VkResultExt<T> for std::result::Result<T, vk::Result> {
    fn during(self, call: &'static str) -> Result<T> {
        self.map_err(|result| Error::vk(call, result))
    }
}
