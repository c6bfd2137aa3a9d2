//! A randomized schedule of messages and collectives, the same on every
//! rank for one seed: MPI's matching order (the receives between a pair
//! with one tag match the sends in the order both were posted) across
//! blocking and non-blocking calls, requests waited for late, out of
//! order, tested, or dropped, messages of every size class (one piece,
//! several pieces, the same-node path's pieces with notes, more pending
//! than it has outboxes for), device buffers, host buffers and views, and
//! every collective between them while requests are pending.
//!
//! Every rank posts the events in the schedule's order (a receiver may
//! post two non-blocking receives of different tags the other way round),
//! so no blocking call waits on a call its peer has not reached: the
//! schedule cannot deadlock under MPI's rules, and any hang or mismatch
//! is the crate's. `VKCOMPUTE_MPI_MIXED=N` runs N events (default 48);
//! `VKCOMPUTE_MPI_SEED=S` another seed (default 36; `random`: rank 0
//! draws one and tells the others). A failure names the seed and event.

use mpi::traits::{Communicator as _, Root as _};

use super::*;

/// SplitMix64: one sequence for one seed, on every rank.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// What a message end is.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Device,
    Host,
    /// A view at this element offset of a larger device buffer.
    View(usize),
}

/// How a message end is posted.
#[derive(Clone, Copy, Debug)]
enum How {
    Blocking,
    /// Non-blocking, finished before the rank's event of this position
    /// (or at the end), dropped instead of waited for where `drop` (sends
    /// only: a dropped receive may be cancelled).
    Pending {
        due: usize,
        drop: bool,
    },
}

#[derive(Clone, Copy, Debug)]
enum Ty {
    U8,
    U32,
    F64,
}

#[derive(Clone, Copy, Debug)]
struct Message {
    from: i32,
    to: i32,
    tag: i32,
    len: usize,
    ty: Ty,
    send: (Kind, How),
    recv: (Kind, How),
}

#[derive(Clone, Copy, Debug)]
enum Collective {
    Barrier,
    Allreduce,
    Broadcast,
    Reduce,
    Allgather,
    ReduceScatter,
}

impl Collective {
    const ALL: [Collective; 6] = {
        use Collective::*;
        [
            Barrier,
            Allreduce,
            Broadcast,
            Reduce,
            Allgather,
            ReduceScatter,
        ]
    };
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Message(Message),
    /// Every rank: the collective, of this many u32 (a rank's block in
    /// allgather and reduce_scatter), with this root where it has one.
    Collective(Collective, usize, i32),
}

/// Element counts: empty, small, one piece and a little more (of the 64
/// KiB pieces the check sets), several, and more than the same-node
/// path's six noted pieces.
const LENGTHS: [usize; 10] = [0, 1, 7, 255, 1000, 4099, 9000, 16_387, 70_001, 200_003];

fn pending(rng: &mut Rng, k: usize, events: usize, drop: bool) -> How {
    if rng.chance(40) {
        return How::Blocking;
    }
    let due = if rng.chance(10) {
        events
    } else {
        k + 1 + rng.below(6)
    };
    How::Pending {
        due,
        drop: drop && rng.chance(15),
    }
}

fn kind(rng: &mut Rng) -> Kind {
    match rng.below(4) {
        0 | 1 => Kind::Device,
        2 => Kind::Host,
        _ => Kind::View(1 + rng.below(5)),
    }
}

/// The schedule for `events` events among `ranks` ranks (at most three
/// exchange messages; every rank takes part in the collectives).
fn schedule(seed: u64, events: usize, ranks: i32) -> Vec<Event> {
    let mut rng = Rng(seed);
    let p = ranks.min(3) as usize;
    (0..events)
        .map(|k| match rng.below(100) {
            0..=11 => {
                let which = Collective::ALL[rng.below(Collective::ALL.len())];
                let len = [1, 7, 1000, 70_000][rng.below(4)];
                let root = rng.below(ranks as usize) as i32;
                Event::Collective(which, len, root)
            }
            _ => {
                let from = rng.below(p);
                let to = (from + 1 + rng.below(p - 1)) % p;
                let len = match rng.below(10) {
                    0..=6 => LENGTHS[rng.below(6)],
                    7 | 8 => LENGTHS[6 + rng.below(3)],
                    _ => LENGTHS[9],
                };
                Event::Message(Message {
                    from: from as i32,
                    to: to as i32,
                    tag: rng.below(3) as i32,
                    len,
                    ty: [Ty::U8, Ty::U32, Ty::F64][rng.below(3)],
                    send: (kind(&mut rng), pending(&mut rng, k, events, true)),
                    recv: (kind(&mut rng), pending(&mut rng, k, events, false)),
                })
            }
        })
        .collect()
}

/// The order in which `rank` posts the events: the schedule's, but where
/// two adjacent messages to this rank from one sender with different
/// tags are all non-blocking, their receives are posted the other way
/// round half the time.
fn order(events: &[Event], rank: i32, seed: u64) -> Vec<usize> {
    let mut rng = Rng(seed ^ 0x5eed);
    let mut order: Vec<usize> = (0..events.len()).collect();
    let mut k = 0;
    while k + 1 < events.len() {
        let swap = match (events[k], events[k + 1]) {
            (Event::Message(a), Event::Message(b)) => {
                let quiet = |m: &Message| {
                    matches!(m.send.1, How::Pending { .. })
                        && matches!(m.recv.1, How::Pending { .. })
                };
                a.to == rank
                    && (a.from, a.to) == (b.from, b.to)
                    && a.tag != b.tag
                    && quiet(&a)
                    && quiet(&b)
                    && rng.chance(50)
            }
            _ => false,
        };
        if swap {
            order.swap(k, k + 1);
            k += 2;
        } else {
            k += 1;
        }
    }
    order
}

/// Element `i` of message `id`, distinct from message to message.
trait Pattern: Element + Debug + PartialEq + 'static {
    fn at(id: usize, i: usize) -> Self;
}

impl Pattern for u8 {
    fn at(id: usize, i: usize) -> Self {
        (id.wrapping_mul(37) ^ i.wrapping_mul(11)) as u8
    }
}

impl Pattern for u32 {
    fn at(id: usize, i: usize) -> Self {
        (id as u32).wrapping_mul(2_654_435_761) ^ i as u32
    }
}

impl Pattern for f64 {
    fn at(id: usize, i: usize) -> Self {
        id as f64 * 1_048_576.0 + i as f64
    }
}

/// A request under way, with what finishes it: the receive's check of its
/// data (a send's end only kept alive).
struct Pending<'c> {
    due: usize,
    drop: bool,
    what: String,
    request: Request<'c>,
    then: Box<dyn FnOnce() -> Check>,
}

/// The first failure of a rank; the rank carries on with the schedule so
/// that its peers are not left waiting.
#[derive(Default)]
struct Outcome(Option<String>);

impl Outcome {
    fn note(&mut self, r: Check) {
        if let Err(e) = r {
            self.0.get_or_insert(e);
        }
    }
}

fn end<T: Pattern>(t: &Ranks, kind: Kind, host: &[T]) -> Result<Box<dyn SendRecv<T>>, String> {
    match kind {
        Kind::Device => device_end(t)(host),
        Kind::Host => host_end(t)(host),
        Kind::View(offset) => view_end(t, offset, T::at(usize::MAX, 0))(host),
    }
}

/// Posts this rank's side of message `id`; a blocking one is over (and
/// checked) on return, a non-blocking one is returned.
fn post<'c, T: Pattern>(
    t: &Ranks,
    comm: &'c Communicator,
    (id, m): (usize, Message),
    what: &str,
) -> Result<Option<Pending<'c>>, String> {
    let want: Vec<T> = (0..m.len).map(|i| T::at(id, i)).collect();
    if t.rank == m.from {
        let e = end::<T>(t, m.send.0, &want)?;
        match m.send.1 {
            How::Blocking => ok(&format!("{what}: send"), e.send(comm, m.to, m.tag)).map(|()| None),
            How::Pending { due, drop } => {
                let request = ok(&format!("{what}: isend"), e.isend(comm, m.to, m.tag))?;
                Ok(Some(Pending {
                    due,
                    drop,
                    what: format!("{what}: isend"),
                    request,
                    then: Box::new(move || {
                        std::mem::drop(e);
                        Ok(())
                    }),
                }))
            }
        }
    } else {
        let e = end::<T>(
            t,
            m.recv.0,
            &vec![<T as bytemuck::Zeroable>::zeroed(); m.len],
        )?;
        let what = what.to_string();
        match m.recv.1 {
            How::Blocking => {
                ok(&format!("{what}: recv"), e.recv(comm, m.from, m.tag))?;
                same(&format!("{what}: recv's data"), &e.read()?, &want).map(|()| None)
            }
            How::Pending { due, .. } => {
                let request = ok(&format!("{what}: irecv"), e.irecv(comm, m.from, m.tag))?;
                let w = format!("{what}: irecv's data");
                Ok(Some(Pending {
                    due,
                    drop: false,
                    what: format!("{what}: irecv"),
                    request,
                    then: Box::new(move || same(&w, &e.read()?, &want)),
                }))
            }
        }
    }
}

fn finish(p: Pending<'_>) -> Check {
    if p.drop {
        std::mem::drop(p.request);
    } else {
        ok(&p.what, p.request.wait())?;
    }
    (p.then)()
}

/// Finishes the requests of `pending` due by `position` (all of them with
/// `usize::MAX`), in an order of `rng`'s.
fn finish_due(pending: &mut Vec<Pending<'_>>, position: usize, rng: &mut Rng, out: &mut Outcome) {
    loop {
        let due: Vec<usize> = (0..pending.len())
            .filter(|&i| pending[i].due <= position)
            .collect();
        if due.is_empty() {
            return;
        }
        let p = pending.swap_remove(due[rng.below(due.len())]);
        out.note(finish(p));
    }
}

fn seed(t: &Ranks) -> u64 {
    let mut seed: u64 = match std::env::var("VKCOMPUTE_MPI_SEED").as_deref() {
        Ok("random") => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
        Ok(s) => s.parse().unwrap_or(36),
        Err(_) => 36,
    };
    let world = mpi::topology::SimpleCommunicator::world();
    world.process_at_rank(0).broadcast_into(&mut seed);
    if t.rank == 0 && seed != 36 {
        eprintln!("  mixed_messages_keep_their_order: seed {seed}");
    }
    seed
}

/// The randomized schedule (module documentation), on a communicator of
/// its own with pieces of 64 KiB.
pub(crate) fn mixed_messages_keep_their_order(t: &Ranks) -> Check {
    let events = std::env::var("VKCOMPUTE_MPI_MIXED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(48usize);
    let seed = seed(t);
    let comm = t.new_communicator()?;
    comm.set_piece_bytes(64 << 10);
    let schedule = schedule(seed, events, t.size);
    let mut rng = Rng(seed ^ ((t.rank as u64 + 1) << 40));
    let mut out = Outcome::default();
    let mut pending: Vec<Pending<'_>> = Vec::new();
    for (position, &k) in order(&schedule, t.rank, seed).iter().enumerate() {
        finish_due(&mut pending, position, &mut rng, &mut out);
        if !pending.is_empty() && rng.chance(20) {
            let i = rng.below(pending.len());
            let p = &mut pending[i];
            out.note(ok(&p.what, p.request.test()).map(|_| ()));
        }
        let what = format!("seed {seed}, event {k} ({:?})", schedule[k]);
        match schedule[k] {
            Event::Collective(which, len, root) => {
                out.note(collective(t, &comm, (which, len, root), &what))
            }
            Event::Message(m) if t.rank == m.from || t.rank == m.to => {
                let posted = match m.ty {
                    Ty::U8 => post::<u8>(t, &comm, (k, m), &what),
                    Ty::U32 => post::<u32>(t, &comm, (k, m), &what),
                    Ty::F64 => post::<f64>(t, &comm, (k, m), &what),
                };
                match posted {
                    Ok(Some(p)) => pending.push(p),
                    Ok(None) => {}
                    Err(e) => out.note(Err(e)),
                }
            }
            Event::Message(_) => {}
        }
    }
    finish_due(&mut pending, usize::MAX, &mut rng, &mut out);
    match out.0 {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// A collective of `len` u32 (sum where it reduces) between the
/// messages, checked against every rank's data: rank `r`'s element `i` is
/// `(r + 1) * (i % 5 + 1)`.
fn collective(
    t: &Ranks,
    comm: &Communicator,
    (which, len, root): (Collective, usize, i32),
    what: &str,
) -> Check {
    let of = |r: i32, i: usize| (r as u32 + 1) * (i as u32 % 5 + 1);
    let ranks = t.size as u32;
    let sum = |i: usize| (i as u32 % 5 + 1) * ranks * (ranks + 1) / 2;
    let mine = |n: usize| (0..n).map(|i| of(t.rank, i)).collect::<Vec<u32>>();
    let read = |b: &DeviceBuffer<u32>| dev("read", b.to_vec());
    let result = format!("{what}: result");
    match which {
        Collective::Barrier => ok(what, comm.barrier()),
        Collective::Allreduce => {
            let buf = upload(t.ctx, &mine(len))?;
            ok(what, comm.allreduce(&buf, ReduceOp::Sum))?;
            same(
                &result,
                &read(&buf)?,
                &(0..len).map(sum).collect::<Vec<_>>(),
            )
        }
        Collective::Broadcast => {
            let buf = upload(t.ctx, &mine(len))?;
            ok(what, comm.broadcast(&buf, root))?;
            let want: Vec<u32> = (0..len).map(|i| of(root, i)).collect();
            same(&result, &read(&buf)?, &want)
        }
        Collective::Reduce => {
            let buf = upload(t.ctx, &mine(len))?;
            ok(what, comm.reduce(&buf, ReduceOp::Sum, root))?;
            let want = if t.rank == root {
                (0..len).map(sum).collect()
            } else {
                mine(len)
            };
            same(&result, &read(&buf)?, &want)
        }
        Collective::Allgather => {
            let send = upload(t.ctx, &mine(len))?;
            let recv = upload(t.ctx, &vec![0u32; len * t.size as usize])?;
            ok(what, comm.allgather(&send, &recv))?;
            let want: Vec<u32> = (0..len * t.size as usize)
                .map(|j| of((j / len) as i32, j % len))
                .collect();
            same(&result, &read(&recv)?, &want)
        }
        Collective::ReduceScatter => {
            let send = upload(t.ctx, &mine(len * t.size as usize))?;
            let recv = upload(t.ctx, &vec![0u32; len])?;
            ok(what, comm.reduce_scatter(&send, &recv, ReduceOp::Sum))?;
            let block = t.rank as usize * len;
            let want: Vec<u32> = (0..len).map(|i| sum(block + i)).collect();
            same(&result, &read(&recv)?, &want)
        }
    }
}
