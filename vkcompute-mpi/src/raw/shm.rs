//! Host memory that ranks of one node share: a `memfd` sealed at its
//! size, which each rank maps and imports into its own device
//! (`VK_EXT_external_memory_host`), so that what one device copies in,
//! the other copies out; how the same-node transport joins ranks on
//! different devices (or devices that cannot export memory).
//!
//! The seals make the memory safe to map from a peer's descriptor: a
//! `memfd` sealed against shrinking keeps its size, so no access within
//! the mapping falls past the file's end (`SIGBUS`), whatever the peer
//! does with its own copy of the descriptor; its maker allocates every
//! page up front (`fallocate`), so that a first touch does not need
//! memory the system may refuse. A peer could still punch holes in it
//! (the seals allow that): the peer is a rank of the same job, trusted
//! as MPI's bytes are. Each outbox keeps its descriptor, to announce it
//! again after a refusal: up to five per peer on the path.
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;

use vkcompute::{DeviceBuffer, DeviceContext};

use super::PeerFd;

/// The seals every shared memory carries: its size is fixed and the
/// seals too.
const SEALS: libc::c_int = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;

/// One mapping of a shared memory, unmapped when dropped (by vkcompute,
/// after the device memory over it is freed).
struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is shared memory that only the device reaches (the
// buffer over it is never mapped for the host); the value only unmaps it.
unsafe impl Send for Mapping {}
// SAFETY: as above: `&Mapping` gives no access to the memory.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the range mapped by `map`, unmapped once, after the
        // device memory over it (vkcompute drops this value last).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A `len`-byte shared mapping of `fd` at an address that is a multiple
/// of `align` ([`alignment`]: a power of two, at least the page size; `len`
/// a multiple of it): an anonymous reservation of `len + align` bytes, the
/// file mapped over its aligned part, the rest given back.
fn map(fd: &OwnedFd, len: usize, align: usize) -> io::Result<Mapping> {
    let reserve = len
        .checked_add(align)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "too large a mapping"))?;
    // SAFETY: an anonymous reservation, no access; the kernel picks the
    // address.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            reserve,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let start = (base as usize).next_multiple_of(align);
    let (head, tail) = (
        start - base as usize,
        reserve - (start - base as usize) - len,
    );
    // SAFETY: `start..start + len` lies inside the reservation made above,
    // which this function owns; MAP_FIXED replaces that part of it.
    let mapped = unsafe {
        libc::mmap(
            start as *mut libc::c_void,
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED | libc::MAP_FIXED,
            fd.as_raw_fd(),
            0,
        )
    };
    let failed = (mapped == libc::MAP_FAILED).then(io::Error::last_os_error);
    // SAFETY: the parts of the reservation before and after the mapping
    // (whole pages: `start`, `len` and `align` are multiples of the page
    // size), this function's own, which the mapping did not touch,
    // unmapped once. Where the mapping failed, its middle is left as it
    // is (leaked address space, no memory): a kernel may have removed it
    // before failing, and another thread may have mapped something there
    // since, which an unmap would take away.
    unsafe {
        if head > 0 {
            libc::munmap(base, head);
        }
        if tail > 0 {
            libc::munmap((start + len) as *mut libc::c_void, tail);
        }
    }
    match (failed, NonNull::new(start as *mut u8)) {
        (Some(e), _) => Err(e),
        (None, Some(ptr)) => Ok(Mapping { ptr, len }),
        // The kernel never places a mapping at address 0 unasked.
        (None, None) => Err(io::Error::other("a mapping at address 0")),
    }
}

/// The alignment of a shared mapping's address and size on `ctx`'s
/// device: its import alignment, at least the page size.
fn alignment(ctx: &DeviceContext) -> usize {
    // SAFETY: a plain query.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
    let import = ctx.host_import_alignment().unwrap_or(page);
    page.max(import).next_power_of_two()
}

/// The device buffer over a mapping of `fd` (`len` bytes, a multiple of
/// `align`, [`alignment`] of `ctx`), its mapping kept by the buffer;
/// `mapping_error` makes the error of a mapping the kernel refused.
fn import(
    (ctx, align): (&DeviceContext, usize),
    fd: &OwnedFd,
    len: usize,
    mapping_error: impl FnOnce(io::Error) -> vkcompute::Error,
) -> vkcompute::Result<DeviceBuffer<u8>> {
    let mapping = map(fd, len, align).map_err(mapping_error)?;
    let ptr = mapping.ptr;
    // SAFETY: `ptr` addresses `len` bytes mapped readable and writable,
    // which stay mapped until `mapping` (moved into the buffer) drops;
    // they are a `memfd` sealed against shrinking (made so by `create`,
    // checked by `import_shared_host`), so no byte falls past its end;
    // the peer that shares it is a rank of the same job, trusted (as
    // MPI's bytes are) not to punch holes in it. No other reference to
    // them exists in this process. The peer's device writes them too, as
    // the same-node protocol orders.
    unsafe { ctx.import_host_mapping(ptr, len, Box::new(mapping)) }
}

/// New host memory of `len` bytes (a power of two, so a multiple of any
/// import alignment up to it) to share with the ranks of the node: a
/// sealed `memfd`, its pages allocated, mapped and imported into `ctx`'s
/// device. Returns the buffer and the descriptor to send to the peers.
pub(crate) fn create_shared_host(
    ctx: &DeviceContext,
    len: usize,
) -> vkcompute::Result<(DeviceBuffer<u8>, OwnedFd)> {
    let failed = |e: io::Error| vkcompute::Error::OutOfMemory {
        what: "shared host memory (a memfd)".into(),
        bytes: len as u64,
        detail: e.to_string(),
    };
    let align = alignment(ctx);
    if len % align != 0 {
        return Err(failed(io::Error::other(format!(
            "{len} bytes are not a multiple of the import alignment {align}"
        ))));
    }
    let size = libc::off_t::try_from(len)
        .map_err(|_| failed(io::Error::new(io::ErrorKind::InvalidInput, "too large")))?;
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // SAFETY: a plain system call with a NUL-terminated name.
    let raw = unsafe { libc::memfd_create(c"vkcompute-mpi".as_ptr(), flags) };
    if raw < 0 {
        return Err(failed(io::Error::last_os_error()));
    }
    // SAFETY: a new descriptor that nothing else owns.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    // SAFETY: a plain system call on the descriptor owned above.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), size) } != 0 {
        return Err(failed(io::Error::last_os_error()));
    }
    // shmem's fallocate stops at any signal (EINTR): it is tried again.
    let allocated = loop {
        // SAFETY: as above.
        if unsafe { libc::fallocate(fd.as_raw_fd(), 0, 0, size) } == 0 {
            break Ok(());
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            break Err(e);
        }
    };
    allocated.map_err(failed)?;
    // SAFETY: as above.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS) } != 0 {
        return Err(failed(io::Error::last_os_error()));
    }
    let buffer = import((ctx, align), &fd, len, failed)?;
    Ok((buffer, fd))
}

/// Imports the host memory a peer rank shared over the same-node
/// transport's socket (`fd`): refused, before anything is mapped, unless
/// it is a `memfd` sealed against shrinking, growing and further seals
/// (and not against writes), open for reading and writing, of a size
/// that is a whole number of the device's import alignment; the buffer
/// is as long as the memory.
pub(crate) fn import_shared_host(
    ctx: &DeviceContext,
    fd: PeerFd,
) -> vkcompute::Result<DeviceBuffer<u8>> {
    let fd = fd.0;
    let refused = |detail: String| vkcompute::Error::InvalidHandle {
        op: "vkcompute-mpi: importing a peer's shared host memory",
        handle_type: "memfd",
        detail,
    };
    // SAFETY: a plain system call on a descriptor this process owns; a
    // descriptor that is no memfd answers with an error (EINVAL).
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    let unwritable = libc::F_SEAL_WRITE | libc::F_SEAL_FUTURE_WRITE;
    if seals < 0 || seals & SEALS != SEALS || seals & unwritable != 0 {
        return Err(refused(format!(
            "not a writable memfd sealed at its size (seals {seals:#x})"
        )));
    }
    // SAFETY: as above.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    if flags < 0 || flags & libc::O_ACCMODE != libc::O_RDWR {
        return Err(refused("not open for reading and writing".into()));
    }
    let len = std::fs::File::from(fd.try_clone().map_err(|e| refused(e.to_string()))?)
        .metadata()
        .map_err(|e| refused(e.to_string()))?
        .len();
    let align = alignment(ctx);
    let len = usize::try_from(len)
        .ok()
        .filter(|&l| l > 0 && l % align == 0)
        .ok_or_else(|| refused(format!("{len} bytes, not a multiple of {align}")))?;
    import((ctx, align), &fd, len, |e| {
        refused(format!("mapping it: {e}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use vkcompute::{ContextOptions, DeviceContext};

    fn context() -> DeviceContext {
        DeviceContext::with_options(ContextOptions::new().pipeline_cache_dir(None))
            .expect("a context (lavapipe: run `make test`)")
    }

    /// A new descriptor of the same file as `fd`, as a peer's would be.
    fn peer(fd: &OwnedFd) -> PeerFd {
        PeerFd(fd.try_clone().unwrap())
    }

    /// What one context's device writes into shared host memory, another
    /// context's import of the memory's descriptor reads; a descriptor
    /// that is no sealed `memfd` is refused before anything is mapped.
    #[test]
    fn shared_host_memory_is_one_memory_and_only_sealed_memfds_import() {
        let (a, b) = (context(), context());
        let len = 64 << 10;
        let (x, fd) = create_shared_host(&a, len).unwrap();
        let y = import_shared_host(&b, peer(&fd)).unwrap();
        assert_eq!((x.len(), y.len()), (len, len));
        let words: Vec<u32> = (0..(len / 4) as u32).collect();
        let src = a.enqueue_create_buffer::<u32>(len / 4).unwrap();
        src.enqueue_copy_from(&words[..]).unwrap();
        (x.create_sub_buffer::<u32>(0, len / 4).unwrap())
            .enqueue_copy_from(&src)
            .unwrap();
        a.synchronize().unwrap();
        let read = y.create_sub_buffer::<u32>(0, len / 4).unwrap();
        assert_eq!(read.to_vec().unwrap(), words);
        // The size cannot change under the mappings.
        let file = std::fs::File::from(fd.try_clone().unwrap());
        assert!(file.set_len(4096).is_err());
        assert!(file.set_len(2 * len as u64).is_err());

        let refused = |fd: OwnedFd| match import_shared_host(&b, PeerFd(fd)) {
            Err(vkcompute::Error::InvalidHandle { detail, .. }) => detail,
            other => panic!("{:?}", other.map(|buf| buf.len())),
        };
        // A memfd without seals (its peer could shrink it).
        // SAFETY: a plain system call; the descriptor is then owned.
        let open =
            unsafe { OwnedFd::from_raw_fd(libc::memfd_create(c"t".as_ptr(), libc::MFD_CLOEXEC)) };
        std::fs::File::from(open.try_clone().unwrap())
            .set_len(len as u64)
            .unwrap();
        assert!(refused(open).contains("sealed"));
        // A pipe.
        let (r, _w) = std::io::pipe().unwrap();
        assert!(refused(OwnedFd::from(r)).contains("sealed"));
        // Sealed at its size, but against writes too; of a size that is
        // no whole number of pages; or open only for reading.
        let sealed = |size: usize, more: libc::c_int| {
            let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
            // SAFETY: plain system calls; the descriptor is then owned.
            let fd = unsafe { OwnedFd::from_raw_fd(libc::memfd_create(c"t".as_ptr(), flags)) };
            std::fs::File::from(fd.try_clone().unwrap())
                .set_len(size as u64)
                .unwrap();
            // SAFETY: as above.
            let sealed = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, SEALS | more) };
            assert_eq!(sealed, 0);
            fd
        };
        assert!(refused(sealed(len, libc::F_SEAL_WRITE)).contains("writable"));
        assert!(refused(sealed(len, libc::F_SEAL_FUTURE_WRITE)).contains("writable"));
        assert!(refused(sealed(len + 100, 0)).contains("multiple"));
        let good = sealed(len, 0);
        let path = format!("/proc/self/fd/{}", good.as_raw_fd());
        let read_only = std::fs::File::open(path).unwrap();
        assert!(refused(OwnedFd::from(read_only)).contains("reading and writing"));
        assert_eq!(import_shared_host(&b, peer(&good)).unwrap().len(), len);
        // Both contexts go on working.
        assert_eq!(read.to_vec().unwrap()[..3], [0, 1, 2]);
        drop((x, y, read));
        a.synchronize().unwrap();
        b.synchronize().unwrap();
    }
}
