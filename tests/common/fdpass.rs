//! Passing a file descriptor and a few bytes over a Unix socket
//! (`SCM_RIGHTS`), which std cannot do on stable Rust.

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

/// Sends `payload` with a duplicate of `fd` attached.
pub fn send_fd(sock: &UnixStream, fd: BorrowedFd<'_>, payload: &[u8]) -> io::Result<()> {
    let mut iov = libc::iovec {
        iov_base: payload.as_ptr() as *mut libc::c_void,
        iov_len: payload.len(),
    };
    let mut control = control_buffer();
    let msg = message(&mut iov, &mut control);
    // SAFETY: the control buffer has room for one header with one int.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        (*cmsg).cmsg_level = libc::SOL_SOCKET;
        (*cmsg).cmsg_type = libc::SCM_RIGHTS;
        (*cmsg).cmsg_len = libc::CMSG_LEN(std::mem::size_of::<libc::c_int>() as u32) as _;
        std::ptr::write_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>(), fd.as_raw_fd());
    }
    // SAFETY: `msg` is fully initialised and refers to live buffers.
    let sent = unsafe { libc::sendmsg(sock.as_raw_fd(), &msg, 0) };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    if sent as usize != payload.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short sendmsg"));
    }
    Ok(())
}

/// Receives a descriptor and `payload.len()` bytes sent by [`send_fd`].
pub fn recv_fd(sock: &UnixStream, payload: &mut [u8]) -> io::Result<OwnedFd> {
    let mut iov = libc::iovec {
        iov_base: payload.as_mut_ptr().cast(),
        iov_len: payload.len(),
    };
    let mut control = control_buffer();
    let mut msg = message(&mut iov, &mut control);
    // SAFETY: `msg` refers to live buffers of the sizes given.
    let got = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if got < 0 {
        return Err(io::Error::last_os_error());
    }
    if got as usize != payload.len() {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "short recvmsg",
        ));
    }
    // SAFETY: the kernel filled the control buffer; the header is checked
    // before its data is read.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if cmsg.is_null()
            || (*cmsg).cmsg_level != libc::SOL_SOCKET
            || (*cmsg).cmsg_type != libc::SCM_RIGHTS
        {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "no descriptor attached",
            ));
        }
        let fd = std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast::<libc::c_int>());
        Ok(OwnedFd::from_raw_fd(fd))
    }
}
