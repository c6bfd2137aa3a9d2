//! The blocking point-to-point checks of `ranks`: lengths, types, views, host and
//! device ends, pieces, mismatches and mapped buffers.

use super::*;

pub(crate) const LENGTHS: [usize; 4] = [0, 1, 7, 1003];

/// The checks of blocking `send` and `recv` (run on every path).
pub(crate) fn blocking_sends() -> Vec<Named> {
    vec![
        (
            "send_recv_device_lengths_and_types",
            send_recv_device_lengths_and_types,
        ),
        (
            "send_recv_views_at_odd_offsets",
            send_recv_views_at_odd_offsets,
        ),
        (
            "send_recv_host_and_device_ends",
            send_recv_host_and_device_ends,
        ),
        ("send_recv_in_many_pieces", send_recv_in_many_pieces),
        (
            "send_recv_mismatch_fails_on_both_ranks",
            send_recv_mismatch_fails_on_both_ranks,
        ),
        ("send_from_mapped_buffer", send_from_mapped_buffer),
        ("recv_into_mapped_buffer", recv_into_mapped_buffer),
    ]
}

// ---------------------------------------------------------------- errors

pub(crate) fn errors_return_is_set(t: &Ranks) -> Check {
    // SAFETY (test): plain MPI calls on the communicator's live handle; the
    // send goes to a rank that does not exist, which with
    // MPI_ERRORS_RETURN is an error code rather than an abort.
    #[allow(unsafe_code)]
    let (handler_is_return, rc) = unsafe {
        let mut handler = std::mem::zeroed();
        mpi::ffi::MPI_Comm_get_errhandler(t.comm.as_raw(), &mut handler);
        let same = handler == mpi::ffi::RSMPI_ERRORS_RETURN;
        mpi::ffi::MPI_Errhandler_free(&mut handler);
        let byte = 0u8;
        let rc = mpi::ffi::MPI_Send(
            (&byte as *const u8).cast(),
            1,
            mpi::ffi::RSMPI_UINT8_T,
            t.size + 5,
            0,
            t.comm.as_raw(),
        );
        (same, rc)
    };
    ensure(handler_is_return, || {
        "the communicator's error handler is not MPI_ERRORS_RETURN".into()
    })?;
    ensure(rc != 0, || {
        "MPI_Send to a rank that does not exist returned success".into()
    })
}

pub(crate) fn bad_arguments_are_refused_locally(t: &Ranks) -> Check {
    let buf = upload(t.ctx, &[1.0f32, 2.0])?;
    let c = t.comm;
    match c.send(&buf, t.size, 0) {
        Err(Error::InvalidRank { given, .. }) if given == t.size => {}
        other => return Err(format!("send to rank {}: {other:?}", t.size)),
    }
    match c.recv(&buf, -1, 0) {
        Err(Error::InvalidRank { .. }) => {}
        other => return Err(format!("recv from rank -1: {other:?}")),
    }
    match c.send(&buf, t.rank, 0) {
        Err(Error::SelfMessage { .. }) => {}
        other => return Err(format!("send to itself: {other:?}")),
    }
    match c.send(&buf, (t.rank + 1) % t.size, vkcompute_mpi::MAX_TAG + 1) {
        Err(Error::InvalidTag { .. }) => {}
        other => return Err(format!("send with a reserved tag: {other:?}")),
    }
    // Every rank passes the same bad root: every rank refuses it.
    match c.broadcast(&buf, t.size) {
        Err(Error::InvalidRank { .. }) => Ok(()),
        other => Err(format!("broadcast from rank {}: {other:?}", t.size)),
    }
}

// ---------------------------------------------------------- point to point

/// Rank 0 sends `msg(q)` to every other rank q, which checks it and sends
/// back `msg(q)` transformed by `reply`; rank 0 checks the replies.
pub(crate) fn exchange_with_zero<T: Value>(
    t: &Ranks,
    what: &str,
    len: usize,
    make: impl Fn(&[T]) -> Result<Box<dyn SendRecv<T>>, String>,
) -> Check {
    let msg = |q: i32| data::<T>(q + 10, len);
    if t.rank == 0 {
        for q in 1..t.size {
            let out = make(&msg(q))?;
            ok(&format!("{what}: send to {q}"), out.send(t.comm, q, 3))?;
            let back = make(&vec![T::small(0); len])?;
            ok(&format!("{what}: recv from {q}"), back.recv(t.comm, q, 4))?;
            same(
                &format!("{what}: reply of rank {q}"),
                &back.read()?,
                &msg(q + 1),
            )?;
        }
    } else {
        let into = make(&vec![T::small(0); len])?;
        ok(&format!("{what}: recv"), into.recv(t.comm, 0, 3))?;
        same(&format!("{what}: message"), &into.read()?, &msg(t.rank))?;
        let reply = make(&msg(t.rank + 1))?;
        ok(&format!("{what}: reply"), reply.send(t.comm, 0, 4))?;
    }
    Ok(())
}

/// A message end of some kind of buffer, for the exchanges above.
pub(crate) trait SendRecv<T> {
    fn send(&self, c: &Communicator, dest: i32, tag: i32) -> vkcompute_mpi::Result<()>;
    fn recv(&self, c: &Communicator, source: i32, tag: i32) -> vkcompute_mpi::Result<()>;
    fn isend<'c>(
        &self,
        c: &'c Communicator,
        dest: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>>;
    fn irecv<'c>(
        &self,
        c: &'c Communicator,
        source: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>>;
    fn read(&self) -> Result<Vec<T>, String>;
}

/// A whole device or host buffer as a message end.
enum Whole<T> {
    Dev(DeviceBuffer<T>),
    Host(HostBuffer<T>),
}

impl<T: Element> SendRecv<T> for Whole<T> {
    fn send(&self, c: &Communicator, dest: i32, tag: i32) -> vkcompute_mpi::Result<()> {
        match self {
            Whole::Dev(b) => c.send(b, dest, tag),
            Whole::Host(b) => c.send(b, dest, tag),
        }
    }
    fn recv(&self, c: &Communicator, source: i32, tag: i32) -> vkcompute_mpi::Result<()> {
        match self {
            Whole::Dev(b) => c.recv(b, source, tag),
            Whole::Host(b) => c.recv(b, source, tag),
        }
    }
    fn isend<'c>(
        &self,
        c: &'c Communicator,
        dest: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>> {
        match self {
            Whole::Dev(b) => c.isend(b, dest, tag),
            Whole::Host(b) => c.isend(b, dest, tag),
        }
    }
    fn irecv<'c>(
        &self,
        c: &'c Communicator,
        source: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>> {
        match self {
            Whole::Dev(b) => c.irecv(b, source, tag),
            Whole::Host(b) => c.irecv(b, source, tag),
        }
    }
    fn read(&self) -> Result<Vec<T>, String> {
        match self {
            Whole::Dev(b) => dev("to_vec", b.to_vec()),
            Whole::Host(b) => dev("to_vec", b.to_vec()),
        }
    }
}

pub(crate) fn device_end<'a, T: Element + 'static>(
    t: &'a Ranks,
) -> impl Fn(&[T]) -> Result<Box<dyn SendRecv<T>>, String> + 'a {
    move |host| Ok(Box::new(Whole::Dev(upload(t.ctx, host)?)) as Box<dyn SendRecv<T>>)
}

pub(crate) fn host_end<'a, T: Element + 'static>(
    t: &'a Ranks,
) -> impl Fn(&[T]) -> Result<Box<dyn SendRecv<T>>, String> + 'a {
    move |host| {
        let buf = dev(
            "host buffer",
            t.ctx.enqueue_create_host_buffer::<T>(host.len()),
        )?;
        dev("fill host buffer", buf.as_mut_slice()).map(|mut s| s.copy_from_slice(host))?;
        Ok(Box::new(Whole::Host(buf)) as Box<dyn SendRecv<T>>)
    }
}

pub(crate) fn send_recv_device_lengths_and_types(t: &Ranks) -> Check {
    for len in LENGTHS {
        exchange_with_zero::<f32>(t, &format!("f32 x {len}"), len, device_end(t))?;
        exchange_with_zero::<u8>(t, &format!("u8 x {len}"), len, device_end(t))?;
        exchange_with_zero::<i64>(t, &format!("i64 x {len}"), len, device_end(t))?;
        exchange_with_zero::<f16>(t, &format!("f16 x {len}"), len, device_end(t))?;
    }
    Ok(())
}

/// Views of a larger buffer at odd element offsets; the elements around
/// the view keep their value.
pub(crate) fn send_recv_views_at_odd_offsets(t: &Ranks) -> Check {
    for (offset, len) in [(3usize, 7usize), (1, 1003)] {
        let what = format!("u8 view at {offset}");
        exchange_with_zero::<u8>(t, &what, len, view_end(t, offset, 0xee))?;
        let what = format!("f32 view at {offset}");
        exchange_with_zero::<f32>(t, &what, len, view_end(t, offset, -9.0))?;
    }
    Ok(())
}

/// Message ends that are views at `offset` of a larger buffer filled with
/// `fill`.
pub(crate) fn view_end<'a, T: Element + Debug + PartialEq + 'static>(
    t: &'a Ranks,
    offset: usize,
    fill: T,
) -> impl Fn(&[T]) -> Result<Box<dyn SendRecv<T>>, String> + 'a {
    move |host| {
        let parent = dev(
            "parent",
            t.ctx.enqueue_create_buffer::<T>(host.len() + offset + 5),
        )?;
        dev("fill", parent.enqueue_fill(fill))?;
        let view = dev("view", parent.create_sub_buffer::<T>(offset, host.len()))?;
        dev("upload", view.enqueue_copy_from(host))?;
        Ok(Box::new(Viewed {
            parent,
            view,
            offset,
        }) as Box<dyn SendRecv<T>>)
    }
}

/// A view whose `read` also checks that the parent around it is untouched.
pub(crate) struct Viewed<T> {
    parent: DeviceBuffer<T>,
    view: DeviceBuffer<T>,
    offset: usize,
}

impl<T: Element + Debug + PartialEq> SendRecv<T> for Viewed<T> {
    fn send(&self, c: &Communicator, dest: i32, tag: i32) -> vkcompute_mpi::Result<()> {
        c.send(&self.view, dest, tag)
    }
    fn recv(&self, c: &Communicator, source: i32, tag: i32) -> vkcompute_mpi::Result<()> {
        c.recv(&self.view, source, tag)
    }
    fn isend<'c>(
        &self,
        c: &'c Communicator,
        dest: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>> {
        c.isend(&self.view, dest, tag)
    }
    fn irecv<'c>(
        &self,
        c: &'c Communicator,
        source: i32,
        tag: i32,
    ) -> vkcompute_mpi::Result<Request<'c>> {
        c.irecv(&self.view, source, tag)
    }
    fn read(&self) -> Result<Vec<T>, String> {
        let all = dev("parent to_vec", self.parent.to_vec())?;
        let (len, o) = (self.view.len(), self.offset);
        let fill = all[0];
        if all[..o].iter().chain(&all[o + len..]).any(|x| *x != fill) {
            return Err(format!("elements outside the view at {o} changed: {all:?}"));
        }
        Ok(all[o..o + len].to_vec())
    }
}

pub(crate) fn send_recv_host_and_device_ends(t: &Ranks) -> Check {
    for len in [1usize, 7, 1003] {
        exchange_with_zero::<u32>(t, &format!("host u32 x {len}"), len, host_end(t))?;
    }
    // A host buffer at one end and a device buffer at the other.
    let len = 501;
    let msg = data::<i32>(42, len);
    if t.rank == 0 {
        let host = dev("host", t.ctx.enqueue_create_host_buffer::<i32>(len))?;
        dev("fill", host.as_mut_slice()).map(|mut s| s.copy_from_slice(&msg))?;
        for q in 1..t.size {
            ok("host to device: send", t.comm.send(&host, q, 5))?;
        }
        let back = dev("host", t.ctx.enqueue_create_host_buffer::<i32>(len))?;
        for q in 1..t.size {
            ok("device to host: recv", t.comm.recv(&back, q, 6))?;
            same(
                "device to host",
                &dev("read", back.to_vec())?,
                &data::<i32>(q, len),
            )?;
        }
    } else {
        let into = dev("create", t.ctx.enqueue_create_buffer::<i32>(len))?;
        ok("host to device: recv", t.comm.recv(&into, 0, 5))?;
        same("host to device", &dev("read", into.to_vec())?, &msg)?;
        let out = upload(t.ctx, &data::<i32>(t.rank, len))?;
        ok("device to host: send", t.comm.send(&out, 0, 6))?;
    }
    Ok(())
}

/// Messages much longer than the piece size (here 256 bytes) travel in
/// many pieces, each copy overlapping the transfer before it; the sender
/// and receiver may use different piece sizes.
pub(crate) fn send_recv_in_many_pieces(t: &Ranks) -> Check {
    let small = t.new_communicator()?;
    small.set_piece_bytes(if t.rank == 0 { 256 } else { 1000 });
    ensure(
        small.piece_bytes() == if t.rank == 0 { 256 } else { 1024 },
        || format!("piece size {}", small.piece_bytes()),
    )?;
    let st = Ranks { comm: &small, ..*t };
    for len in [63usize, 64, 65, 1003, 10_001] {
        exchange_with_zero::<f32>(&st, &format!("f32 x {len} in pieces"), len, device_end(t))?;
        exchange_with_zero::<u16>(
            &st,
            &format!("host u16 x {len} in pieces"),
            len,
            host_end(t),
        )?;
    }
    Ok(())
}

pub(crate) fn send_recv_mismatch_fails_on_both_ranks(t: &Ranks) -> Check {
    let last = t.size - 1;
    if t.rank == 0 {
        let five = upload(t.ctx, &[1.0f32; 5])?;
        match t.comm.send(&five, last, 7) {
            Err(Error::Mismatch { detail, .. }) if detail.contains("6") => {}
            other => return Err(format!("sending 5 f32 to a receiver of 6: {other:?}")),
        }
        let ints = upload(t.ctx, &[1u32; 5])?;
        match t.comm.send(&ints, last, 7) {
            Err(Error::Mismatch { .. }) => {}
            other => return Err(format!("sending u32 to a receiver of i32: {other:?}")),
        }
        // The pair still works afterwards.
        ok("send after the mismatches", t.comm.send(&five, last, 7))?;
    } else if t.rank == last {
        let six = upload(t.ctx, &[0.0f32; 6])?;
        match t.comm.recv(&six, 0, 7) {
            Err(Error::Mismatch { detail, .. }) if detail.contains("5") => {}
            other => return Err(format!("receiving 6 f32 from a sender of 5: {other:?}")),
        }
        same(
            "the buffer after a refused message",
            &dev("read", six.to_vec())?,
            &[0.0; 6],
        )?;
        let ints = upload(t.ctx, &[0i32; 5])?;
        match t.comm.recv(&ints, 0, 7) {
            Err(Error::Mismatch { .. }) => {}
            other => return Err(format!("receiving i32 from a sender of u32: {other:?}")),
        }
        let five = upload(t.ctx, &[0.0f32; 5])?;
        ok("recv after the mismatches", t.comm.recv(&five, 0, 7))?;
        same(
            "the message after the mismatches",
            &dev("read", five.to_vec())?,
            &[1.0; 5],
        )?;
    }
    Ok(())
}

/// A buffer the host maps fails its send on every path (on the direct one
/// the mapping is the memory itself; on the staging one it is a copy, and
/// vkcompute would still let the device read the buffer: the crate
/// refuses it all the same, as its documentation says), and the receiver
/// hears of it; an `isend` alike.
pub(crate) fn send_from_mapped_buffer(t: &Ranks) -> Check {
    let last = t.size - 1;
    let msg = data::<f32>(3, 9);
    if t.rank == 0 {
        let buf = upload(t.ctx, &msg)?;
        let mapped = dev("map", buf.map_to_host())?;
        let sent = t.comm.send(&buf, last, 8);
        let isent = t.comm.isend(&buf, last, 8).and_then(Request::wait);
        drop(mapped);
        for (what, result) in [("send", sent), ("isend", isent)] {
            match result {
                Err(e) if e.to_string().contains("mapped") => {}
                other => return Err(format!("{what} from a mapped buffer: {other:?}")),
            }
        }
    } else if t.rank == last {
        let into = upload(t.ctx, &[0.0f32; 9])?;
        for _ in 0..2 {
            match t.comm.recv(&into, 0, 8) {
                Err(Error::RemoteFailure {
                    failed: 0, reason, ..
                }) if reason.contains("mapped") => {}
                other => return Err(format!("recv from a mapped sender: {other:?}")),
            }
        }
        same("untouched", &dev("read", into.to_vec())?, &[0.0; 9])?;
    }
    Ok(())
}

/// Receiving into a mapped buffer fails with vkcompute's error there; the
/// message is taken off the wire (the sender completes, and the next
/// message between the two arrives whole).
pub(crate) fn recv_into_mapped_buffer(t: &Ranks) -> Check {
    let last = t.size - 1;
    let small = t.new_communicator()?;
    small.set_piece_bytes(256);
    let len = 300;
    if t.rank == 0 {
        let out = upload(t.ctx, &data::<f32>(1, len))?;
        ok("send to a mapped receiver", small.send(&out, last, 9))?;
        let next = upload(t.ctx, &data::<f32>(2, len))?;
        ok("the next send", small.send(&next, last, 9))?;
    } else if t.rank == last {
        let into = upload(t.ctx, &vec![0.0f32; len])?;
        let mapped = dev("map", into.map_to_host())?;
        let result = small.recv(&into, 0, 9);
        drop(mapped);
        match result {
            Err(e) if e.to_string().contains("mapped") => {}
            other => return Err(format!("recv into a mapped buffer: {other:?}")),
        }
        ok("the next recv", small.recv(&into, 0, 9))?;
        same(
            "the next message",
            &dev("read", into.to_vec())?,
            &data::<f32>(2, len),
        )?;
    }
    Ok(())
}

// ------------------------------------------------------ non-blocking p2p
