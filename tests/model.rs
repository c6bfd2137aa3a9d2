//! Model-based random testing: random sequences of operations (create,
//! views, copies in every direction, fills of every width, mapping, kernel
//! dispatch, drops with work in flight, a second stream and a second
//! device) applied both to the runtime and to a host model of bytes per
//! buffer. After every synchronization every live buffer must match its
//! model byte for byte, and the validation layers must stay silent.
//! Failures shrink to a minimal sequence.
//!
//! `VKCOMPUTE_PROPTEST_CASES` sets the number of sequences per
//! configuration (default 64); `VKCOMPUTE_PROPTEST_OPS` their maximum length
//! (default 40).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use bytemuck::Pod;
use common::Path;
use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::{Config, TestCaseError, TestRunner};
use vkcompute::{shaders, DeviceBuffer, DeviceContext, Error, HostBuffer, Kernel};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum On {
    /// The first context.
    A,
    /// A second stream of A's device.
    B,
    /// A context on another (logical) device.
    C,
}

#[derive(Clone, Debug)]
enum Op {
    Create {
        host: bool,
        on: On,
        len: usize,
    },
    Upload {
        buf: Index,
        start: Index,
        len: Index,
        seed: u64,
    },
    Copy {
        src: Index,
        dst: Index,
        src_start: Index,
        dst_start: Index,
        len: Index,
    },
    Fill {
        buf: Index,
        width: usize,
        start: Index,
        count: Index,
        value: u64,
    },
    MapXor {
        buf: Index,
        start: Index,
        len: Index,
        mask: u8,
    },
    Dispatch {
        buf: Index,
        slot: Index,
        value: u32,
    },
    Drop {
        buf: Index,
    },
    Sync {
        on: On,
    },
}

fn on() -> impl Strategy<Value = On> {
    prop_oneof![Just(On::A), Just(On::B), Just(On::C)]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (any::<bool>(), on(), 0usize..1500).prop_map(|(host, on, len)| Op::Create { host, on, len }),
        3 => (any::<Index>(), any::<Index>(), any::<Index>(), any::<u64>())
            .prop_map(|(buf, start, len, seed)| Op::Upload { buf, start, len, seed }),
        4 => (any::<Index>(), any::<Index>(), any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(src, dst, src_start, dst_start, len)| Op::Copy { src, dst, src_start, dst_start, len }),
        4 => (any::<Index>(), prop::sample::select(vec![1usize, 2, 3, 4, 8, 16]), any::<Index>(), any::<Index>(), any::<u64>())
            .prop_map(|(buf, width, start, count, value)| Op::Fill { buf, width, start, count, value }),
        2 => (any::<Index>(), any::<Index>(), any::<Index>(), 1u8..)
            .prop_map(|(buf, start, len, mask)| Op::MapXor { buf, start, len, mask }),
        2 => (any::<Index>(), any::<Index>(), any::<u32>()).prop_map(|(buf, slot, value)| Op::Dispatch { buf, slot, value }),
        1 => any::<Index>().prop_map(|buf| Op::Drop { buf }),
        1 => on().prop_map(|on| Op::Sync { on }),
    ]
}

enum Buffer {
    Device(DeviceBuffer<u8>),
    Host(HostBuffer<u8>),
}

impl Buffer {
    fn read(&self) -> vkcompute::Result<Vec<u8>> {
        match self {
            Buffer::Device(b) => b.to_vec(),
            Buffer::Host(b) => b.to_vec(),
        }
    }
}

/// A view of either kind of buffer, as elements of `U`.
macro_rules! with_view {
    ($buf:expr, $u:ty, $start:expr, $len:expr, |$v:ident| $body:expr) => {
        match $buf {
            Buffer::Device(b) => {
                let $v = b.create_sub_buffer::<$u>($start, $len)?;
                $body
            }
            Buffer::Host(b) => {
                let $v = b.create_sub_buffer::<$u>($start, $len)?;
                $body
            }
        }
    };
}

struct Live {
    buffer: Buffer,
    model: Vec<u8>,
    on: On,
}

struct World {
    a: DeviceContext,
    b: DeviceContext,
    c: DeviceContext,
    store_ac: [Kernel; 2],
    live: Vec<Live>,
}

impl World {
    fn ctx(&self, on: On) -> &DeviceContext {
        match on {
            On::A => &self.a,
            On::B => &self.b,
            On::C => &self.c,
        }
    }

    fn check_all(&self) -> Result<(), TestCaseError> {
        for (i, live) in self.live.iter().enumerate() {
            let got = live
                .buffer
                .read()
                .map_err(|e| TestCaseError::fail(format!("reading buffer {i}: {e}")))?;
            prop_assert!(
                got == live.model,
                "buffer {} ({:?}, {} bytes) differs from its model",
                i,
                live.on,
                live.model.len()
            );
        }
        Ok(())
    }
}

fn fill_model(model: &mut [u8], start: usize, count: usize, element: &[u8]) {
    for i in 0..count {
        let at = (start + i) * element.len();
        model[at..at + element.len()].copy_from_slice(element);
    }
}

fn fill_view<U: Pod>(buf: &Buffer, start: usize, count: usize, value: U) -> vkcompute::Result<()> {
    with_view!(buf, U, start, count, |v| v.enqueue_fill(value))
}

/// Applies `op` to the runtime and the model. Index choices that make no
/// sense for the current state (no buffers, say) skip the operation.
fn apply(world: &mut World, op: &Op) -> Result<(), TestCaseError> {
    let fail = |what: &str, e: Error| TestCaseError::fail(format!("{what}: {e}"));
    let n = world.live.len();
    match op {
        Op::Create { host, on, len } => {
            let ctx = world.ctx(*on);
            let buffer = if *host {
                Buffer::Host(
                    ctx.enqueue_create_host_buffer::<u8>(*len)
                        .map_err(|e| fail("create", e))?,
                )
            } else {
                Buffer::Device(
                    ctx.enqueue_create_buffer::<u8>(*len)
                        .map_err(|e| fail("create", e))?,
                )
            };
            // New memory is undefined: give it known contents first.
            let init: Vec<u8> = (0..*len).map(|i| (i * 7 + 1) as u8).collect();
            let r: vkcompute::Result<()> =
                (|| with_view!(&buffer, u8, 0, *len, |v| v.enqueue_copy_from(&init)))();
            r.map_err(|e| fail("initial upload", e))?;
            world.live.push(Live {
                buffer,
                model: init,
                on: *on,
            });
        }
        Op::Upload {
            buf,
            start,
            len,
            seed,
        } if n > 0 => {
            let live = &mut world.live[buf.index(n)];
            let total = live.model.len();
            let start = start.index(total + 1);
            let len = len.index(total - start + 1);
            let data: Vec<u8> = (0..len)
                .map(|i| (seed.wrapping_mul(i as u64 + 3) >> 17) as u8)
                .collect();
            let r: vkcompute::Result<()> =
                (|| with_view!(&live.buffer, u8, start, len, |v| v.enqueue_copy_from(&data)))();
            r.map_err(|e| fail("upload", e))?;
            live.model[start..start + len].copy_from_slice(&data);
        }
        Op::Copy {
            src,
            dst,
            src_start,
            dst_start,
            len,
        } if n > 0 => {
            let (si, di) = (src.index(n), dst.index(n));
            let (slen, dlen) = (world.live[si].model.len(), world.live[di].model.len());
            let len = len.index(slen.min(dlen) + 1);
            let s0 = src_start.index(slen - len + 1);
            let d0 = dst_start.index(dlen - len + 1);
            let overlapping = si == di && len > 0 && s0 < d0 + len && d0 < s0 + len;
            let (s, d) = (&world.live[si].buffer, &world.live[di].buffer);
            let r: vkcompute::Result<()> = (|| match (s, d) {
                (Buffer::Device(s), Buffer::Device(d)) => d
                    .create_sub_buffer::<u8>(d0, len)?
                    .enqueue_copy_from(&s.create_sub_buffer::<u8>(s0, len)?),
                (Buffer::Device(s), Buffer::Host(d)) => s
                    .create_sub_buffer::<u8>(s0, len)?
                    .enqueue_copy_to(&d.create_sub_buffer::<u8>(d0, len)?),
                (Buffer::Host(s), Buffer::Device(d)) => d
                    .create_sub_buffer::<u8>(d0, len)?
                    .enqueue_copy_from(&s.create_sub_buffer::<u8>(s0, len)?),
                (Buffer::Host(s), Buffer::Host(d)) => s
                    .create_sub_buffer::<u8>(s0, len)?
                    .enqueue_copy_to(&d.create_sub_buffer::<u8>(d0, len)?),
            })();
            match (r, overlapping) {
                (Err(Error::Overlap { .. }), true) => {}
                (Ok(()), false) => {
                    let bytes = world.live[si].model[s0..s0 + len].to_vec();
                    world.live[di].model[d0..d0 + len].copy_from_slice(&bytes);
                }
                (r, _) => {
                    return Err(TestCaseError::fail(format!(
                        "copy (overlapping: {overlapping}) gave {r:?}"
                    )))
                }
            }
        }
        Op::Fill {
            buf,
            width,
            start,
            count,
            value,
        } if n > 0 => {
            let live = &mut world.live[buf.index(n)];
            let slots = live.model.len() / width;
            let start = start.index(slots + 1);
            let count = count.index(slots - start + 1);
            let bytes = value.to_le_bytes();
            let wide: Vec<u8> = (0..16).map(|i| bytes[i % 8] ^ (i as u8)).collect();
            let r = match width {
                1 => fill_view(&live.buffer, start, count, bytes[0]),
                2 => fill_view(
                    &live.buffer,
                    start,
                    count,
                    u16::from_le_bytes([bytes[0], bytes[1]]),
                ),
                3 => fill_view(&live.buffer, start, count, [bytes[0], bytes[1], bytes[2]]),
                4 => fill_view(
                    &live.buffer,
                    start,
                    count,
                    u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]),
                ),
                8 => fill_view(&live.buffer, start, count, *value),
                _ => fill_view(
                    &live.buffer,
                    start,
                    count,
                    <[u8; 16]>::try_from(&wide[..]).unwrap(),
                ),
            };
            r.map_err(|e| fail("fill", e))?;
            let element: &[u8] = if *width == 16 {
                &wide
            } else {
                &bytes[..*width]
            };
            fill_model(&mut live.model, start, count, element);
        }
        Op::MapXor {
            buf,
            start,
            len,
            mask,
        } if n > 0 => {
            let live = &mut world.live[buf.index(n)];
            let total = live.model.len();
            let start = start.index(total + 1);
            let len = len.index(total - start + 1);
            let r: vkcompute::Result<()> = (|| match &live.buffer {
                Buffer::Device(b) => {
                    let view = b.create_sub_buffer::<u8>(start, len)?;
                    let mut m = view.map_to_host()?;
                    m.iter_mut().for_each(|v| *v ^= mask);
                    m.finish()
                }
                Buffer::Host(b) => {
                    let view = b.create_sub_buffer::<u8>(start, len)?;
                    let mut s = view.as_mut_slice()?;
                    s.iter_mut().for_each(|v| *v ^= mask);
                    Ok(())
                }
            })();
            r.map_err(|e| fail("map", e))?;
            live.model[start..start + len]
                .iter_mut()
                .for_each(|v| *v ^= mask);
        }
        Op::Dispatch { buf, slot, value } if n > 0 => {
            let live = &mut world.live[buf.index(n)];
            let ctx = match live.on {
                On::A => &world.a,
                On::B => &world.b,
                On::C => &world.c,
            };
            let kernel = &world.store_ac[usize::from(live.on == On::C)];
            let align = ctx.info().limits.min_storage_buffer_offset_alignment as usize;
            let words = live.model.len() / 4;
            if words == 0 {
                return Ok(());
            }
            // A u32 view at an aligned offset; the kernel writes one word of it.
            let first = (slot.index(words) * 4) / align * align / 4;
            let count = words - first;
            let index = (*value as usize) % count;
            let r: vkcompute::Result<()> = (|| {
                with_view!(&live.buffer, u32, first, count, |v| ctx.enqueue_function(
                    kernel,
                    1,
                    &[v.arg()],
                    &[index as u32, *value]
                ))
            })();
            r.map_err(|e| fail("dispatch", e))?;
            let at = (first + index) * 4;
            live.model[at..at + 4].copy_from_slice(&value.to_le_bytes());
        }
        Op::Drop { buf } if n > 0 => {
            world.live.swap_remove(buf.index(n));
        }
        Op::Sync { on } => {
            world
                .ctx(*on)
                .synchronize()
                .map_err(|e| fail("synchronize", e))?;
            world.check_all()?;
        }
        _ => {}
    }
    Ok(())
}

fn run_sequence(path: Path, push_descriptors: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let options = common::options(path).push_descriptors(push_descriptors);
    let a = common::context_with(options.clone());
    let c = common::context_with(options);
    let (log_a, log_c) = (
        a.diagnostics().validation_log(),
        c.diagnostics().validation_log(),
    );
    let b = a
        .new_stream()
        .map_err(|e| TestCaseError::fail(e.to_string()))?;
    let store_ac = [
        Kernel::new(&a, shaders::STORE, "main").map_err(|e| TestCaseError::fail(e.to_string()))?,
        Kernel::new(&c, shaders::STORE, "main").map_err(|e| TestCaseError::fail(e.to_string()))?,
    ];
    let mut world = World {
        a,
        b,
        c,
        store_ac,
        live: Vec::new(),
    };
    let result = ops
        .iter()
        .try_for_each(|op| apply(&mut world, op))
        .and_then(|()| {
            for ctx in [&world.a, &world.b, &world.c] {
                ctx.synchronize()
                    .map_err(|e| TestCaseError::fail(e.to_string()))?;
            }
            world.check_all()
        });
    drop(world);
    for log in [log_a, log_c] {
        let messages = log.messages();
        prop_assert!(messages.is_empty(), "validation messages: {:?}", messages);
    }
    result
}

fn env_number(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn check(path: Path, push_descriptors: bool) {
    let cases = env_number("VKCOMPUTE_PROPTEST_CASES", 64) as u32;
    let max_ops = env_number("VKCOMPUTE_PROPTEST_OPS", 40);
    let mut runner = TestRunner::new(Config {
        cases,
        failure_persistence: None,
        ..Config::default()
    });
    let strategy = prop::collection::vec(op(), 1..max_ops);
    if let Err(e) = runner.run(&strategy, |ops| run_sequence(path, push_descriptors, &ops)) {
        panic!("{e}");
    }
}

#[test]
fn random_sequences_match_the_model_direct_path_push_descriptors() {
    check(Path::Direct, true);
}

#[test]
fn random_sequences_match_the_model_staging_path_pooled_descriptors() {
    check(Path::Staging, false);
}
