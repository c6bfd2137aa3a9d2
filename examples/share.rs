//! Moves a buffer between two processes without copying it: the parent
//! creates an exportable buffer, fills it, and passes its memory's file
//! descriptor to a child process (itself, run with `child`) over a Unix
//! socket (`SCM_RIGHTS`); the child imports the memory into its own
//! context, checks the data, adds 1 to every element with a kernel and
//! exits; the parent then reads the child's result from the same memory.
//!
//!     cargo run --example share
//!
//! Ordering is by completion: each side synchronizes before the other
//! touches the memory (the parent waits for the child to exit). Where the
//! device exports semaphores (`DeviceContext::export_semaphore_fd`), the two
//! could order their work on the device instead.

#[cfg(unix)]
#[path = "../tests/common/fdpass.rs"]
mod fdpass;

#[cfg(unix)]
fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    match args.next().as_deref() {
        Some("child") => child(&args.next().ok_or("child: no socket path")?),
        None => parent(),
        Some(other) => Err(format!("unknown argument `{other}`").into()),
    }
}

#[cfg(not(unix))]
fn main() {
    eprintln!("this example passes file descriptors: it runs on Unix only");
}

#[cfg(unix)]
const LEN: usize = 1 << 20;

#[cfg(unix)]
fn parent() -> Result<(), Box<dyn std::error::Error>> {
    use std::os::fd::AsFd;
    use vkcompute::{sharing::MemoryHandleType, DeviceContext};

    let ctx = DeviceContext::new()?;
    let buf = ctx.enqueue_create_exportable_buffer::<u32>(LEN)?;
    let data: Vec<u32> = (0..LEN as u32).collect();
    buf.enqueue_copy_from(&data)?;
    ctx.synchronize()?; // the child reads only after this work is done
    let exported = buf.export_fd(MemoryHandleType::OpaqueFd)?;
    let uuid: String = exported
        .info
        .device_uuid
        .unwrap_or_default()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    println!(
        "parent: exported {} bytes of `{}` (device {uuid}) as fd {:?}",
        exported.info.size,
        ctx.name(),
        exported.fd
    );

    let socket = std::env::temp_dir().join(format!("vkcompute-share-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&socket);
    let listener = std::os::unix::net::UnixListener::bind(&socket)?;
    let mut child = std::process::Command::new(std::env::current_exe()?)
        .arg("child")
        .arg(&socket)
        .spawn()?;
    let (stream, _) = listener.accept()?;
    std::fs::remove_file(&socket)?;
    fdpass::send_fd(&stream, exported.fd.as_fd(), &exported.info.to_bytes())?;
    drop(exported); // the child holds its own reference to the memory now
    let status = child.wait()?;
    if !status.success() {
        return Err(format!("the child failed: {status}").into());
    }
    let result = buf.to_vec()?;
    let expected: Vec<u32> = (1..=LEN as u32).collect();
    if result != expected {
        return Err("the parent does not see the child's writes".into());
    }
    println!("parent: sees the child's kernel result in the same memory: {buf}");
    Ok(())
}

#[cfg(unix)]
fn child(socket: &str) -> Result<(), Box<dyn std::error::Error>> {
    use vkcompute::{
        sharing::{ExportedMemoryFd, ExternalMemoryInfo},
        DeviceContext, Kernel,
    };

    let stream = std::os::unix::net::UnixStream::connect(socket)?;
    let mut info = [0u8; vkcompute::sharing::EXTERNAL_MEMORY_INFO_BYTES];
    let fd = fdpass::recv_fd(&stream, &mut info)?;
    let info = ExternalMemoryInfo::from_bytes(&info)?;
    let ctx = DeviceContext::new()?;
    let len = (info.size / 4) as usize;
    // SAFETY: the parent exported the descriptor with `export_fd` and sent
    // it with that export's own description; it keeps the memory alive
    // until this process is done.
    let buf = unsafe { ctx.import_buffer_fd::<u32>(ExportedMemoryFd { fd, info }, len) }?;
    let first = buf.create_sub_buffer::<u32>(0, 4)?.to_vec()?;
    println!("child: imported {len} elements into its own device, starting {first:?}");
    let kernel = Kernel::new(&ctx, vkcompute::shaders::ADD_ONE, "main")?;
    let n = u32::try_from(len)?;
    ctx.enqueue_function(&kernel, n.div_ceil(64), &[buf.arg()], &n)?;
    ctx.synchronize()?; // done before the parent reads
    println!("child: added 1 to every element on the device");
    Ok(())
}
