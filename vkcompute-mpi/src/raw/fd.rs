//! Passing a file descriptor and a few bytes over a Unix socket
//! (`SCM_RIGHTS`), which std cannot do on stable Rust: how the same-node
//! transport hands exported device memory to a peer process (MPI carries
//! bytes only, never descriptors); and the random bytes that name its
//! sockets.
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;

/// Room for one control message carrying one descriptor.
fn control_buffer() -> Vec<u8> {
    // SAFETY: CMSG_SPACE only computes a size.
    let space = unsafe { libc::CMSG_SPACE(std::mem::size_of::<libc::c_int>() as u32) };
    vec![0u8; space as usize]
}

/// A message of one data buffer and `control`; valid while both live.
fn message(iov: &mut libc::iovec, control: &mut [u8]) -> libc::msghdr {
    // SAFETY: an all-zero msghdr is valid (no buffers, no flags).
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = control.len() as _;
    msg
}

/// Sends `payload` with a duplicate of `fd` attached, in one message.
pub(crate) fn send_fd(sock: &UnixStream, fd: BorrowedFd<'_>, payload: &[u8]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut control = control_buffer();
    let msg = message(&mut iov, &mut control);
    // SAFETY: `control` has room for one header with one int (its size is
    // CMSG_SPACE of one int), so CMSG_FIRSTHDR is not null and its data
    // lies inside `control`.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd.as_raw_fd());
    }
    // SAFETY: `msg` is fully initialised and refers to live buffers.
    let sent = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    if sent as usize != payload.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"));
    }
    Ok(())
}

/// A descriptor a peer rank sent over the same-node transport's socket
/// ([`recv_fd_now`]): by the crate's protocol an export of the peer's
/// `DeviceBuffer::export_fd` or its shared host memory, which only
/// [`import_peer_memory`](super::import_peer_memory) and
/// [`import_shared_host`](super::import_shared_host) take.
pub(crate) struct PeerFd(pub(super) OwnedFd);

/// Takes a descriptor and `payload.len()` bytes sent by [`send_fd`] off
/// `sock` without blocking: the peer sends them before the MPI message
/// that announces them, so they are there when that message is. Nothing
/// there is [`io::ErrorKind::WouldBlock`].
pub(crate) fn recv_fd_now(sock: &UnixStream, payload: &mut [u8]) -> io::Result<PeerFd> {
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    let mut control = control_buffer();
    let mut msg = message(&mut iov, &mut control);
    let flags = libc::MSG_CMSG_CLOEXEC | libc::MSG_DONTWAIT;
    // SAFETY: `msg` refers to live buffers of the sizes given.
    let got = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, flags) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel filled the control buffer (of the size `msg`
    // gives); the header is checked before its data is read, and a
    // descriptor it carries is this process's to own from now on.
    let fd = unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
            || (*cmsg).cmsg_len as usize
                != libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as usize
        {
            None
        } else {
            let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
            Some(OwnedFd::from_raw_fd(fd))
        }
    };
    if got as usize != payload.len() || msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "a message of {got} bytes (flags {:#x}) where {} and one descriptor were due",
                msg.msg_flags,
                payload.len()
            ),
        ));
    }
    fd.map(PeerFd)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no descriptor attached"))
}

/// 16 bytes from the kernel's random source.
pub(crate) fn random_bytes() -> io::Result<[u8; 16]> {
    let mut name = [0u8; 16];
    let mut filled = 0;
    while filled < name.len() {
        let rest = &mut name[filled..];
        // SAFETY: `rest` is valid for writes of its length.
        let got = unsafe { libc::getrandom(rest.as_mut_ptr().cast(), rest.len(), 0) };
        if got < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        filled += got as usize;
    }
    Ok(name)
}
