//! A concurrent model-based test: several threads run random operations
//! (uploads, downloads, copies, fills of two widths, whole-buffer mappings,
//! kernel dispatches, views, two streams, transfers of several staging
//! pieces) on buffers they share, and every observation must be explainable
//! by some order of the completed operations.
//!
//! Each buffer is cut into slots; each slot belongs to one thread, and only
//! that thread writes it, always stamping the whole slot with a value unique
//! to the write (a thread's stamps increase). A mapping rewrites the whole
//! buffer, so other threads' slots go through it too. Then:
//! - every slot read is uniform (no torn range);
//! - a thread reading its own slot sees exactly its last write (no lost
//!   write, no write resurrected after a later one);
//! - a thread reading another thread's slot sees one of that thread's
//!   stamps, never older than one it saw before.
//!
//! Runs on both memory paths under synchronization validation. The short
//! version runs in `make test`; `VKCOMPUTE_CONCURRENCY_OPS` sets the
//! operations per thread (default 120) for a long run.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::collections::HashMap;
use std::sync::Arc;
use std::thread;

use common::{on_each_path, Path, Rng};
use vkcompute::{shaders, DeviceBuffer, DeviceContext, Error, Kernel};

const THREADS: usize = 4;
/// Words in a slot of the small buffers.
const SLOT: usize = 64;
/// Slots per small buffer: two for each thread.
const SLOTS: usize = THREADS * 2;
/// Words in a slot of the large buffer: more than one 8 MiB staging piece.
const BIG_SLOT: usize = (8 << 20) / 4 + 4096;

/// What all threads share.
struct World {
    streams: [DeviceContext; 2],
    /// Small buffers, owned alternately by the two streams.
    buffers: Vec<DeviceBuffer<u32>>,
    /// Two slots of more than one staging piece, for threads 0 and 1.
    big: DeviceBuffer<u32>,
    add: Kernel,
    path: Path,
}

/// A stamp: a normal `f32` bit pattern (so the float kernel carries it
/// exactly) naming its thread in bits 20..24 and its order in the low bits.
fn stamp(thread: usize, n: u32) -> u32 {
    0x4000_0000 | ((thread as u32) << 20) | n
}

fn owner_of_stamp(v: u32) -> Option<usize> {
    (v & 0xff00_0000 == 0x4000_0000).then_some(((v >> 20) & 0xf) as usize)
}

/// One thread's knowledge.
struct Worker<'w> {
    world: &'w World,
    me: usize,
    rng: Rng,
    next: u32,
    /// My slots' last stamps, by (buffer, slot); buffer `usize::MAX` is the big one.
    mine: HashMap<(usize, usize), u32>,
    /// The newest stamp seen in other threads' slots.
    seen: HashMap<(usize, usize), u32>,
    ops: usize,
    refused: usize,
}

const BIG: usize = usize::MAX;

impl Worker<'_> {
    fn fresh(&mut self) -> u32 {
        self.next += 1;
        stamp(self.me, self.next)
    }

    /// A random slot of mine in a small buffer.
    fn my_slot(&mut self) -> (usize, usize) {
        let b = self.rng.below(self.world.buffers.len() as u64) as usize;
        let s = self.me + THREADS * self.rng.below(2) as usize;
        (b, s)
    }

    fn view(&self, (b, s): (usize, usize)) -> DeviceBuffer<u32> {
        if b == BIG {
            self.world.big.create_sub_buffer(s * BIG_SLOT, BIG_SLOT)
        } else {
            self.world.buffers[b].create_sub_buffer(s * SLOT, SLOT)
        }
        .expect("slots lie in their buffers")
    }

    fn where_(&self, what: &str) -> String {
        format!(
            "thread {} ({:?}), op {}: {what}",
            self.me, self.world.path, self.ops
        )
    }

    /// Checks what was read of slot `key`: uniform, and explainable.
    fn observe(&mut self, key: (usize, usize), words: &[u32]) {
        let first = words[0];
        if let Some(i) = words.iter().position(|&w| w != first) {
            panic!(
                "{}",
                self.where_(&format!(
                    "slot {key:?} is torn: word 0 holds {first:#x}, word {i} holds {:#x}",
                    words[i]
                ))
            );
        }
        let owner = if key.0 == BIG { key.1 } else { key.1 % THREADS };
        if owner == self.me {
            let want = self.mine.get(&key).copied().unwrap_or(0);
            assert_eq!(
                first,
                want,
                "{}",
                self.where_(&format!("my slot {key:?} lost my last write"))
            );
            return;
        }
        if first == 0 {
            assert!(
                !self.seen.contains_key(&key),
                "{}",
                self.where_(&format!("slot {key:?} went back to its initial zeros"))
            );
            return;
        }
        assert_eq!(
            owner_of_stamp(first),
            Some(owner),
            "{}",
            self.where_(&format!(
                "slot {key:?} holds {first:#x}, not a stamp of its owner"
            ))
        );
        let before = self.seen.insert(key, first).unwrap_or(0);
        assert!(
            first >= before,
            "{}",
            self.where_(&format!(
                "slot {key:?} went back from {before:#x} to {first:#x} (a write resurrected)"
            ))
        );
    }

    /// Checks a whole small buffer's contents.
    fn observe_buffer(&mut self, b: usize, words: &[u32]) {
        for s in 0..SLOTS {
            self.observe((b, s), &words[s * SLOT..(s + 1) * SLOT]);
        }
    }

    /// Runs `op`; a refusal because another thread maps the buffer is
    /// allowed (the operation did not happen), anything else fails.
    fn attempt<R>(&mut self, what: &str, op: impl FnOnce() -> vkcompute::Result<R>) -> Option<R> {
        match op() {
            Ok(r) => Some(r),
            Err(Error::BufferMapped { .. }) => {
                self.refused += 1;
                None
            }
            Err(e) => panic!("{}", self.where_(&format!("{what}: {e}"))),
        }
    }

    fn step(&mut self) {
        self.ops += 1;
        let world = self.world;
        match self.rng.below(100) {
            0..=14 => {
                let key = self.my_slot();
                let v = self.fresh();
                let view = self.view(key);
                if self
                    .attempt("upload", || view.enqueue_copy_from(&[v; SLOT][..]))
                    .is_some()
                {
                    self.mine.insert(key, v);
                }
            }
            15..=26 => {
                let key = self.my_slot();
                let v = self.fresh();
                let view = self.view(key);
                let done = if self.rng.below(2) == 0 {
                    self.attempt("fill u32", || view.enqueue_fill(v))
                } else {
                    // The same stamp through a 64-bit fill (kernel or tiles).
                    let wide = view.create_sub_buffer::<u64>(0, SLOT / 2).expect("aligned");
                    self.attempt("fill u64", || {
                        wide.enqueue_fill(u64::from(v) * 0x1_0000_0001)
                    })
                };
                if done.is_some() {
                    self.mine.insert(key, v);
                }
            }
            27..=38 => {
                // Stamp one slot of mine, then copy it into another (maybe
                // in a buffer of the other stream).
                let (src, dst) = (self.my_slot(), self.my_slot());
                if src == dst {
                    return;
                }
                let v = self.fresh();
                let (sv, dv) = (self.view(src), self.view(dst));
                if self.attempt("fill", || sv.enqueue_fill(v)).is_some() {
                    self.mine.insert(src, v);
                    if self.attempt("copy", || dv.enqueue_copy_from(&sv)).is_some() {
                        self.mine.insert(dst, v);
                    }
                }
            }
            39..=48 => {
                // The same through a kernel, on either stream.
                let (src, dst) = (self.my_slot(), self.my_slot());
                if src == dst {
                    return;
                }
                let v = self.fresh();
                let (sv, dv) = (self.view(src), self.view(dst));
                let on = &world.streams[self.rng.below(2) as usize];
                if self.attempt("fill", || sv.enqueue_fill(v)).is_some() {
                    self.mine.insert(src, v);
                    let zero = on.enqueue_create_buffer::<f32>(SLOT).expect("create");
                    zero.enqueue_fill(0.0).expect("fill a private buffer");
                    let launched = self.attempt("dispatch", || {
                        on.enqueue_function(
                            &world.add,
                            1,
                            &[sv.arg_reinterpret(), zero.arg(), dv.arg_reinterpret()],
                            &(SLOT as u32),
                        )
                    });
                    if launched.is_some() {
                        self.mine.insert(dst, v);
                    }
                }
            }
            49..=58 => {
                // A mapping of a whole buffer: read every slot, rewrite mine.
                let b = self.rng.below(world.buffers.len() as u64) as usize;
                let s = self.me + THREADS * self.rng.below(2) as usize;
                let v = self.fresh();
                let buffer = &world.buffers[b];
                if let Some(mut mapped) = self.attempt("map", || buffer.map_to_host()) {
                    let words = mapped.to_vec();
                    self.observe_buffer(b, &words);
                    mapped[s * SLOT..(s + 1) * SLOT].fill(v);
                    let finished = mapped.finish();
                    if let Err(e) = finished {
                        panic!("{}", self.where_(&format!("write-back: {e}")));
                    }
                    self.mine.insert((b, s), v);
                }
            }
            59..=78 => {
                let b = self.rng.below(world.buffers.len() as u64) as usize;
                if let Some(words) = self.attempt("to_vec", || world.buffers[b].to_vec()) {
                    self.observe_buffer(b, &words);
                }
            }
            79..=88 => {
                let key = self.my_slot();
                let view = self.view(key);
                if let Some(words) = self.attempt("slot to_vec", || view.to_vec()) {
                    self.observe(key, &words);
                }
            }
            89..=92 => {
                let on = &world.streams[self.rng.below(2) as usize];
                self.attempt("synchronize", || on.synchronize());
            }
            _ => {
                // Transfers of several staging pieces on the large buffer.
                if self.me < 2 {
                    let key = (BIG, self.me);
                    let v = self.fresh();
                    let view = self.view(key);
                    if self
                        .attempt("big upload", || {
                            view.enqueue_copy_from(&vec![v; BIG_SLOT][..])
                        })
                        .is_some()
                    {
                        self.mine.insert(key, v);
                    }
                }
                if let Some(words) = self.attempt("big to_vec", || world.big.to_vec()) {
                    for s in 0..2 {
                        self.observe((BIG, s), &words[s * BIG_SLOT..(s + 1) * BIG_SLOT]);
                    }
                }
            }
        }
    }
}

fn ops_per_thread() -> usize {
    std::env::var("VKCOMPUTE_CONCURRENCY_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(120)
}

#[test]
fn concurrent_operations_are_linearizable_per_slot() {
    on_each_path(|ctx, path| {
        let second = ctx.new_stream().expect("a second stream");
        let streams = [ctx.clone(), second];
        let buffers: Vec<DeviceBuffer<u32>> = (0..4)
            .map(|i| {
                let b = streams[i % 2]
                    .enqueue_create_buffer::<u32>(SLOT * SLOTS)
                    .unwrap();
                b.enqueue_fill(0).unwrap();
                b
            })
            .collect();
        let big = ctx.enqueue_create_buffer::<u32>(BIG_SLOT * 2).unwrap();
        big.enqueue_fill(0).unwrap();
        let world = Arc::new(World {
            add: Kernel::new(ctx, shaders::VECTOR_ADD, "main").unwrap(),
            streams,
            buffers,
            big,
            path,
        });
        let ops = ops_per_thread();
        let workers: Vec<_> = (0..THREADS)
            .map(|me| {
                let world = world.clone();
                thread::spawn(move || {
                    let mut w = Worker {
                        world: &world,
                        me,
                        rng: Rng::new(0x5eed + me as u64 * 7919 + ops as u64),
                        next: 0,
                        mine: HashMap::new(),
                        seen: HashMap::new(),
                        ops: 0,
                        refused: 0,
                    };
                    for _ in 0..ops {
                        w.step();
                    }
                    // Finally every slot of mine holds my last write.
                    for b in 0..world.buffers.len() {
                        for s in [me, me + THREADS] {
                            let view = w.view((b, s));
                            // Other threads may still map the buffer: a
                            // read refused meanwhile is tried again.
                            let words = loop {
                                match view.to_vec() {
                                    Ok(words) => break words,
                                    Err(Error::BufferMapped { .. }) => thread::yield_now(),
                                    Err(e) => panic!("final read: {e}"),
                                }
                            };
                            w.observe((b, s), &words);
                        }
                    }
                    (w.ops, w.refused)
                })
            })
            .collect();
        let mut refused = 0;
        for w in workers {
            let (_, r) = w.join().expect("a worker failed");
            refused += r;
        }
        for s in &world.streams {
            s.synchronize().unwrap();
        }
        // Some operations met another thread's mapping: the test exercised
        // contention (a loose check: with these weights it always happens).
        eprintln!(
            "{path:?}: {} operations, {refused} refused by a mapping",
            ops * THREADS
        );
    });
}
