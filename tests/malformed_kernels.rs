//! Malformed kernels: valid SPIR-V modules (the shipped kernels) mutated at
//! random (bit and byte flips, truncation, word swaps, duplications and
//! deletions, random words at random positions, header and word-count
//! corruption, instructions moved, repeated or dropped) and loaded through
//! every public loading call (`Kernel::new`, `Kernel::new` in both
//! byte orders, `Kernel::builder` with specialization constants) on one
//! validated context. Every load must return `Ok` or a kernel-loading error;
//! nothing may panic (not even a panic the library catches itself), hang or
//! make the validation layer speak, and the context must keep computing
//! correctly.
//!
//! `VKCOMPUTE_FUZZ_CASES` sets the number of mutated modules (default
//! 20,000, about 10 s); `VKCOMPUTE_FUZZ_SEED` the base seed (case `i`
//! uses seed `base + i`, so a failing case reruns alone with
//! `VKCOMPUTE_FUZZ_SEED=<base + i> VKCOMPUTE_FUZZ_CASES=1`).
//! `VKCOMPUTE_FUZZ_TRACE=<file>` writes each case to the file before loading
//! it, so that the file names the case that crashed the process.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]

mod common;

use std::panic::{self, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use common::{Path, Rng};
use vkcompute::{shaders, DeviceContext, Error, Kernel, KernelBuilder};

/// The valid modules every case starts from: (name, words, entry point).
/// The shipped kernels, and the hand-made modules of tests/spirv/ that say
/// things the other ways SPIR-V allows: decoration groups, specialization
/// expressions, several entry points, several descriptor sets, a
/// specialization constant without a `SpecId`, `debugPrintfEXT` calls (at
/// SPIR-V 1.0, and optimized at 1.5: the bench's printing saxpy), and one
/// module a load refuses: two `LocalSize` modes.
fn seeds() -> &'static [(&'static str, Vec<u32>, &'static str)] {
    static SEEDS: OnceLock<Vec<(&'static str, Vec<u32>, &'static str)>> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let mut seeds: Vec<(&'static str, Vec<u32>, &'static str)> = [
            ("SAXPY", shaders::SAXPY),
            ("MATMUL", shaders::MATMUL),
            ("VECTOR_ADD", shaders::VECTOR_ADD),
            ("REDUCE_SUM", shaders::REDUCE_SUM),
            ("STORE", shaders::STORE),
            ("FILL", shaders::FILL),
        ]
        .iter()
        .map(|(name, words)| (*name, words.to_vec(), "main"))
        .collect();
        for (name, entry) in [
            ("group_set1", "main"),
            ("smod_push", "main"),
            ("smod_buffers", "main"),
            ("two_entries", "small"),
            ("two_entries", "big"),
            ("two_local_sizes", "main"),
            ("spec_without_id", "main"),
            ("sets_and_spec_ops", "main"),
            ("printf_spirv10", "main"),
            ("../../examples/bench_cases/printf_saxpy_reached", "main"),
        ] {
            let path = format!("{}/tests/spirv/{name}.spv", env!("CARGO_MANIFEST_DIR"));
            let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let words = bytes
                .chunks_exact(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            seeds.push((name, words, entry));
        }
        seeds
    })
}

/// A case that runs longer than this is reported as a hang.
const HANG: Duration = Duration::from_secs(120);

fn env_u64(name: &str, default: u64) -> u64 {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

/// Opcodes whose last operands are literals: OpExecutionMode, OpTypeInt,
/// OpTypeFloat, OpTypeVector, OpConstant, OpSpecConstant, OpDecorate,
/// OpMemberDecorate.
const LITERAL_OPCODES: [u32; 8] = [16, 21, 22, 23, 43, 50, 71, 72];

/// The word offsets of the instructions after the header, as far as their
/// word counts chain.
fn instruction_starts(words: &[u32]) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut at = 5;
    while at < words.len() {
        let count = (words[at] >> 16) as usize;
        if count == 0 {
            break;
        }
        starts.push(at);
        at += count;
    }
    starts
}

/// The word range of the instruction starting at `at`, clamped to the module.
fn instruction_range(words: &[u32], at: usize) -> std::ops::Range<usize> {
    let count = ((words[at] >> 16) as usize).max(1);
    at..(at + count).min(words.len())
}

/// A word worth trying: small ids and counts, edges, or anything.
fn interesting_word(rng: &mut Rng, bound: u32) -> u32 {
    match rng.below(6) {
        0 => rng.below(u64::from(bound.max(1)) + 2) as u32,
        1 => [
            0,
            1,
            2,
            3,
            4,
            0xffff,
            0x1_0000,
            0x7fff_ffff,
            0x8000_0000,
            u32::MAX,
        ][rng.below(10) as usize],
        2 => rng.below(512) as u32,
        _ => rng.next_u64() as u32,
    }
}

/// Applies one random mutation to `words` and says what it did.
fn mutate(rng: &mut Rng, words: &mut Vec<u32>, donors: &[&[u32]]) -> String {
    if words.is_empty() {
        words.push(rng.next_u64() as u32);
        return "pushed a random word into an empty module".into();
    }
    let n = words.len();
    let bound = words.get(3).copied().unwrap_or(64);
    let at = rng.below(n as u64) as usize;
    let starts = instruction_starts(words);
    match rng.below(19) {
        0 => {
            let bit = rng.below(32);
            words[at] ^= 1 << bit;
            format!("flipped bit {bit} of word {at}")
        }
        1 => {
            let byte = rng.below(4) * 8;
            let value = rng.below(256) as u32;
            words[at] = (words[at] & !(0xff << byte)) | (value << byte);
            format!("set byte {} of word {at} to {value:#04x}", byte / 8)
        }
        2 => {
            let len = rng.below(n as u64) as usize;
            words.truncate(len);
            format!("truncated to {len} words")
        }
        3 => {
            let other = rng.below(n as u64) as usize;
            words.swap(at, other);
            format!("swapped words {at} and {other}")
        }
        4 => {
            words.insert(at, words[at]);
            format!("duplicated word {at}")
        }
        5 => {
            words.remove(at);
            format!("deleted word {at}")
        }
        6 | 7 => {
            let value = interesting_word(rng, bound);
            words[at] = value;
            format!("set word {at} to {value:#x}")
        }
        8 => {
            let index = rng.below(5.min(n as u64)) as usize;
            let value = interesting_word(rng, bound);
            words[index] = value;
            format!("set header word {index} to {value:#x}")
        }
        9 if !starts.is_empty() => {
            let start = starts[rng.below(starts.len() as u64) as usize];
            let count = words[start] >> 16;
            let new = match rng.below(5) {
                0 => 0,
                1 => count.saturating_sub(1),
                2 => count + 1,
                3 => 1,
                _ => rng.below(0x1_0000) as u32,
            };
            words[start] = (new << 16) | (words[start] & 0xffff);
            format!("set the word count of the instruction at word {start} from {count} to {new}")
        }
        10 if !starts.is_empty() => {
            let start = starts[rng.below(starts.len() as u64) as usize];
            let opcode = if rng.below(2) == 0 {
                rng.below(420) as u32
            } else {
                rng.below(0x1_0000) as u32
            };
            let old = words[start] & 0xffff;
            words[start] = (words[start] & 0xffff_0000) | opcode;
            format!("changed the opcode at word {start} from {old} to {opcode}")
        }
        11 if !starts.is_empty() => {
            let start = starts[rng.below(starts.len() as u64) as usize];
            let inst: Vec<u32> = words[instruction_range(words, start)].to_vec();
            let to = starts[rng.below(starts.len() as u64) as usize];
            words.splice(to..to, inst);
            format!("copied the instruction at word {start} to word {to}")
        }
        12 if !starts.is_empty() => {
            let start = starts[rng.below(starts.len() as u64) as usize];
            let range = instruction_range(words, start);
            words.drain(range);
            format!("deleted the instruction at word {start}")
        }
        13 => {
            let donor = donors[rng.below(donors.len() as u64) as usize];
            let donor_starts = instruction_starts(donor);
            let from = donor_starts[rng.below(donor_starts.len() as u64) as usize];
            let inst: Vec<u32> = donor[instruction_range(donor, from)].to_vec();
            let to = if starts.is_empty() {
                n
            } else {
                starts[rng.below(starts.len() as u64) as usize]
            };
            words.splice(to..to, inst);
            format!("inserted another kernel's instruction (its word {from}) at word {to}")
        }
        17 | 18 => {
            // A constant made a specialization constant (`OpSpecConstant`
            // with a `SpecId` among the ids the builder sets), so that
            // specialization reaches types, sizes and the workgroup size.
            let constants: Vec<usize> = starts
                .iter()
                .copied()
                .filter(|&s| words[s] & 0xffff == 43 && words[s] >> 16 >= 4 && s + 3 < n)
                .collect();
            let Some(&decorate) = starts.iter().find(|&&s| words[s] & 0xffff == 71) else {
                return "found no decoration to put a SpecId by".into();
            };
            if constants.is_empty() {
                return "found no constant to specialize".into();
            }
            let start = constants[rng.below(constants.len() as u64) as usize];
            let id = words[start + 2];
            let spec_id = rng.below(4) as u32;
            words[start] = (words[start] & 0xffff_0000) | 50;
            words.splice(decorate..decorate, [0x4_0047, id, 1, spec_id]);
            format!("made the constant at word {start} (%{id}) specialization constant {spec_id}")
        }
        14..=16 => {
            // A literal the validator may accept: a decoration's value, a
            // workgroup size, a constant, a type's width or component count.
            let literals: Vec<usize> = starts
                .iter()
                .copied()
                .filter(|&s| LITERAL_OPCODES.contains(&(words[s] & 0xffff)))
                .collect();
            if literals.is_empty() {
                return "found no literal to change".into();
            }
            let start = literals[rng.below(literals.len() as u64) as usize];
            let range = instruction_range(words, start);
            let last = range.end - 1;
            let operand = if last > start + 2 && rng.below(3) == 0 {
                start + 2 + rng.below((last - start - 1) as u64) as usize
            } else {
                last
            };
            let value = interesting_word(rng, bound);
            let old = words[operand];
            words[operand] = value;
            format!(
                "set literal word {operand} (opcode {}) from {old:#x} to {value:#x}",
                words[start] & 0xffff
            )
        }
        _ => {
            let operand = (at + 1).min(n - 1);
            let value = interesting_word(rng, bound);
            words[operand] = value;
            format!("set word {operand} to {value:#x}")
        }
    }
}

/// How a case loads its module.
#[derive(Debug)]
enum Load {
    New,
    /// Bytes: little-endian or big-endian, then cut to `len` bytes.
    FromBytes {
        big_endian: bool,
        len: usize,
    },
    Builder(Vec<(u32, vkcompute::SpecValue)>),
}

struct Case {
    seed: u64,
    kernel: &'static str,
    steps: Vec<String>,
    words: Vec<u32>,
    entry: &'static str,
    load: Load,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "case seed {} from {}: {}",
            self.seed,
            self.kernel,
            self.steps.join("; ")
        )?;
        writeln!(f, "loaded with {:?}, entry {:?}", self.load, self.entry)?;
        let words: Vec<String> = self.words.iter().map(|w| format!("{w:#x}")).collect();
        write!(
            f,
            "module ({} words): &[{}]",
            self.words.len(),
            words.join(", ")
        )
    }
}

fn spec_value(rng: &mut Rng) -> vkcompute::SpecValue {
    use vkcompute::SpecValue::*;
    let edge = [0u32, 1, 7, 64, 256, 1024, 1 << 20, u32::MAX][rng.below(8) as usize];
    match rng.below(8) {
        0..=2 => U32(edge),
        3 => I32(edge as i32),
        4 => Bool(rng.below(2) == 0),
        5 => F32(edge as f32),
        6 => U64(u64::from(edge)),
        _ => F64(edge as f64),
    }
}

fn make_case(seed: u64) -> Case {
    let mut rng = Rng::new(seed);
    let seeds = seeds();
    let (kernel, valid, seed_entry) = &seeds[rng.below(seeds.len() as u64) as usize];
    let donors: Vec<&[u32]> = seeds.iter().map(|(_, w, _)| w.as_slice()).collect();
    let mut words = valid.clone();
    // Mostly one mutation (the module stays close to valid, so the checks
    // after validation run too), sometimes a few.
    let count = match rng.below(8) {
        0..=4 => 1,
        5 | 6 => 2,
        _ => 1 + rng.below(6) as usize,
    };
    let steps = (0..count)
        .map(|_| mutate(&mut rng, &mut words, &donors))
        .collect();
    let entry = match rng.below(32) {
        0 => "",
        1 => "mai",
        2 => "main\0",
        _ => seed_entry,
    };
    let load = match rng.below(3) {
        0 => Load::New,
        1 => {
            let full = words.len() * 4;
            let len = if rng.below(8) == 0 {
                rng.below(full as u64 + 1) as usize
            } else {
                full
            };
            Load::FromBytes {
                big_endian: rng.below(4) == 0,
                len,
            }
        }
        _ => Load::Builder(
            (0..rng.below(4))
                .map(|_| {
                    let id = if rng.below(2) == 0 {
                        0
                    } else {
                        rng.below(4) as u32
                    };
                    (id, spec_value(&mut rng))
                })
                .collect(),
        ),
    };
    Case {
        seed,
        kernel,
        steps,
        words,
        entry,
        load,
    }
}

fn load(ctx: &DeviceContext, case: &Case) -> vkcompute::Result<Kernel> {
    match &case.load {
        Load::New => Kernel::new(ctx, &case.words, case.entry),
        Load::FromBytes { big_endian, len } => {
            let mut bytes: Vec<u8> = case
                .words
                .iter()
                .flat_map(|w| {
                    if *big_endian {
                        w.to_be_bytes()
                    } else {
                        w.to_le_bytes()
                    }
                })
                .collect();
            bytes.truncate(*len);
            Kernel::new(ctx, &bytes, case.entry)
        }
        Load::Builder(spec) => {
            let builder: KernelBuilder<'_> = spec.iter().fold(
                Kernel::builder(&case.words).entry(case.entry),
                |b, (id, v)| b.specialize(*id, *v),
            );
            builder.build(ctx)
        }
    }
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct Saxpy {
    a: f32,
    n: u32,
}

/// Runs a shipped kernel on the context and checks its result.
fn assert_context_works(ctx: &DeviceContext) {
    let kernel = Kernel::new(ctx, shaders::SAXPY, "main").expect("load SAXPY");
    let n = 300u32;
    let xs: Vec<f32> = (0..n).map(|i| i as f32).collect();
    let x = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
    let y = ctx.enqueue_create_buffer::<f32>(n as usize).unwrap();
    x.enqueue_copy_from(&xs).unwrap();
    y.enqueue_fill(1.0).unwrap();
    ctx.enqueue_function(
        &kernel,
        (n.div_ceil(256), 1),
        &[x.arg(), y.arg()],
        &Saxpy { a: 3.0, n },
    )
    .unwrap();
    let want: Vec<f32> = xs.iter().map(|x| 3.0 * x + 1.0).collect();
    assert_eq!(y.to_vec().unwrap(), want, "SAXPY after malformed kernels");
}

/// What went wrong, grouped by the start of what was seen (digits dropped), with the first case of each group.
#[derive(Default)]
struct Findings(std::collections::BTreeMap<String, (u64, String)>);

impl Findings {
    fn add(&mut self, what: String, case: &Case) {
        let key: String = what
            .chars()
            .map(|c| if c == '\n' { ' ' } else { c })
            .filter(|c| !c.is_ascii_digit())
            .take(160)
            .collect();
        self.0
            .entry(key)
            .or_insert_with(|| (0, format!("{what}\n{case}")))
            .0 += 1;
    }

    fn report(&self) -> String {
        let report: Vec<String> = self
            .0
            .values()
            .map(|(count, first)| format!("{count} case(s), the first:\n{first}"))
            .collect();
        report.join("\n\n")
    }

    fn check(&self) {
        if !self.0.is_empty() {
            panic!("{} kind(s) of failure:\n\n{}", self.0.len(), self.report());
        }
    }
}

/// Whether `message` comes from the validation layer (invalid usage) rather
/// than from the driver.
fn from_the_layer(message: &vkcompute::validation::ValidationMessage) -> bool {
    ["VUID-", "UNASSIGNED", "SYNC-"]
        .iter()
        .any(|p| message.id.starts_with(p))
        || message.text.contains("Validation Error")
}

/// What the watchdog knows about the case in progress.
struct Current {
    started: Instant,
    case: Option<String>,
}

#[test]
fn mutated_kernels_load_or_fail_cleanly() {
    let cases = env_u64("VKCOMPUTE_FUZZ_CASES", 20_000);
    let base = env_u64("VKCOMPUTE_FUZZ_SEED", 0x5eed_0000);
    // A file that holds the case being loaded, for finding a crash.
    let trace = std::env::var_os("VKCOMPUTE_FUZZ_TRACE");
    // Every panic on this thread counts, even one the library catches.
    let panics = Arc::new(Mutex::new(Vec::<String>::new()));
    let fuzz_thread = std::thread::current().id();
    let previous_hook = Arc::new(panic::take_hook());
    {
        let panics = panics.clone();
        let previous_hook = previous_hook.clone();
        panic::set_hook(Box::new(move |info| {
            if std::thread::current().id() == fuzz_thread {
                panics.lock().unwrap().push(info.to_string());
            }
            previous_hook(info);
        }));
    }
    let current = Arc::new(Mutex::new(Current {
        started: Instant::now(),
        case: None,
    }));
    let finished = Arc::new(AtomicUsize::new(0));
    {
        let current = current.clone();
        let finished = finished.clone();
        std::thread::spawn(move || loop {
            std::thread::sleep(Duration::from_secs(1));
            if finished.load(Ordering::Relaxed) == 1 {
                return;
            }
            let now = current.lock().unwrap();
            if let Some(case) = &now.case {
                if now.started.elapsed() > HANG {
                    eprintln!("HANG: a load ran for more than {HANG:?}:\n{case}");
                    std::process::abort();
                }
            }
        });
    }

    let started = Instant::now();
    let mut loaded = 0u64;
    // Loaded with indices bounded: each of these modules was instrumented
    // and validated again (feature `validate`) before the driver saw it.
    let mut instrumented = 0u64;
    let mut findings = Findings::default();
    let mut driver_refusals = Findings::default();
    let mut errors: std::collections::BTreeMap<&'static str, u64> = Default::default();
    common::run_with(
        common::options(Path::Direct),
        "loading mutated kernels",
        |ctx| {
            let log = ctx.diagnostics().validation_log();
            assert_context_works(ctx);
            for i in 0..cases {
                let case = make_case(base.wrapping_add(i));
                {
                    let mut now = current.lock().unwrap();
                    now.started = Instant::now();
                    now.case = Some(case.to_string());
                }
                if let Some(path) = &trace {
                    std::fs::write(path, case.to_string()).expect("write the trace file");
                }
                let result = panic::catch_unwind(AssertUnwindSafe(|| load(ctx, &case)));
                current.lock().unwrap().case = None;
                let caught = std::mem::take(&mut *panics.lock().unwrap());
                if !caught.is_empty() {
                    findings.add(format!("panic: {}", caught.join(" / ")), &case);
                }
                let messages = log.take();
                let list = || {
                    let list: Vec<String> = messages.iter().map(|m| m.to_string()).collect();
                    list.join(" / ")
                };
                let refused_by_driver = matches!(
                    &result,
                    Ok(Err(Error::UnsupportedKernel { reason, .. })) if reason.contains("the driver refused it")
                );
                if refused_by_driver && messages.iter().all(|m| !from_the_layer(m)) {
                    // The driver says why it refuses a module; what it says
                    // is listed at the end.
                    if !messages.is_empty() {
                        driver_refusals.add(format!("driver: {}", list()), &case);
                    }
                } else if !messages.is_empty() {
                    findings.add(format!("validation: {}", list()), &case);
                }
                match result {
                    Err(_) => {}
                    Ok(Ok(kernel)) => {
                        loaded += 1;
                        instrumented += u64::from(kernel.clamped_indices() > 0);
                    }
                    Ok(Err(e)) => {
                        let kind = match &e {
                            Error::InvalidSpirv { .. } => "InvalidSpirv",
                            Error::UnsupportedKernel { .. } if refused_by_driver => {
                                "UnsupportedKernel (refused by the driver)"
                            }
                            Error::UnsupportedKernel { .. } => "UnsupportedKernel",
                            Error::Specialization { .. } => "Specialization",
                            // A mutation that turns a load into a bitcast of
                            // a pointer: the safe API refuses pointer use.
                            Error::PointerAddressing { .. } => "PointerAddressing",
                            _ => "other",
                        };
                        if kind == "other" || e.to_string().trim().is_empty() {
                            findings.add(format!("not a clear kernel-loading error: {e:?}"), &case);
                        }
                        *errors.entry(kind).or_default() += 1;
                    }
                }
                if (i + 1) % 1000 == 0 {
                    assert_context_works(ctx);
                }
                if (i + 1) % 10_000 == 0 {
                    eprintln!(
                        "{} cases in {:.0?}: {loaded} loaded, errors {errors:?}",
                        i + 1,
                        started.elapsed()
                    );
                }
            }
            assert_context_works(ctx);
        },
    );
    finished.store(1, Ordering::Relaxed);
    eprintln!(
        "{cases} mutated modules in {:.1?}: {loaded} loaded ({instrumented} with clamped \
         indices), errors {errors:?}",
        started.elapsed()
    );
    if !driver_refusals.0.is_empty() {
        eprintln!(
            "modules the driver refused, with its messages:\n\n{}",
            driver_refusals.report()
        );
    }
    findings.check();
    // Mutations keep some modules valid and break most.
    if cases >= 1000 {
        assert!(loaded > 0, "no mutated module loaded");
        assert!(instrumented > 0, "no loaded module had an index to bound");
        assert!(
            errors.values().sum::<u64>() > 0,
            "every mutated module loaded"
        );
    }
}

// Regression tests: each bug the mutations found, as the mutated module.
// Most start from STORE as glslang compiled it (a literal, so that they do
// not depend on the shipped kernels staying the same) with one word changed.

/// `shaders/store.comp` compiled: `data[index] = value`, with `index` and
/// `value` the push constants at offsets 0 and 4.
const STORE_WORDS: [u32; 175] = [
    0x07230203, 0x00010500, 0x000d000b, 0x0000001b, 0x00000000, 0x00020011, 0x00000001, 0x0006000b,
    0x00000001, 0x4c534c47, 0x6474732e, 0x3035342e, 0x00000000, 0x0003000e, 0x00000000, 0x00000001,
    0x0007000f, 0x00000005, 0x00000004, 0x6e69616d, 0x00000000, 0x0000000a, 0x0000000f, 0x00060010,
    0x00000004, 0x00000011, 0x00000001, 0x00000001, 0x00000001, 0x00040047, 0x00000007, 0x00000006,
    0x00000004, 0x00040048, 0x00000008, 0x00000000, 0x00000019, 0x00050048, 0x00000008, 0x00000000,
    0x00000023, 0x00000000, 0x00030047, 0x00000008, 0x00000002, 0x00040047, 0x0000000a, 0x00000022,
    0x00000000, 0x00040047, 0x0000000a, 0x00000021, 0x00000000, 0x00050048, 0x0000000d, 0x00000000,
    0x00000023, 0x00000000, 0x00050048, 0x0000000d, 0x00000001, 0x00000023, 0x00000004, 0x00030047,
    0x0000000d, 0x00000002, 0x00040047, 0x0000001a, 0x0000000b, 0x00000019, 0x00020013, 0x00000002,
    0x00030021, 0x00000003, 0x00000002, 0x00040015, 0x00000006, 0x00000020, 0x00000000, 0x0003001d,
    0x00000007, 0x00000006, 0x0003001e, 0x00000008, 0x00000007, 0x00040020, 0x00000009, 0x0000000c,
    0x00000008, 0x0004003b, 0x00000009, 0x0000000a, 0x0000000c, 0x00040015, 0x0000000b, 0x00000020,
    0x00000001, 0x0004002b, 0x0000000b, 0x0000000c, 0x00000000, 0x0004001e, 0x0000000d, 0x00000006,
    0x00000006, 0x00040020, 0x0000000e, 0x00000009, 0x0000000d, 0x0004003b, 0x0000000e, 0x0000000f,
    0x00000009, 0x00040020, 0x00000010, 0x00000009, 0x00000006, 0x0004002b, 0x0000000b, 0x00000013,
    0x00000001, 0x00040020, 0x00000016, 0x0000000c, 0x00000006, 0x00040017, 0x00000018, 0x00000006,
    0x00000003, 0x0004002b, 0x00000006, 0x00000019, 0x00000001, 0x0006002c, 0x00000018, 0x0000001a,
    0x00000019, 0x00000019, 0x00000019, 0x00050036, 0x00000002, 0x00000004, 0x00000000, 0x00000003,
    0x000200f8, 0x00000005, 0x00050041, 0x00000010, 0x00000011, 0x0000000f, 0x0000000c, 0x0004003d,
    0x00000006, 0x00000012, 0x00000011, 0x00050041, 0x00000010, 0x00000014, 0x0000000f, 0x00000013,
    0x0004003d, 0x00000006, 0x00000015, 0x00000014, 0x00060041, 0x00000016, 0x00000017, 0x0000000a,
    0x0000000c, 0x00000012, 0x0003003e, 0x00000017, 0x00000015, 0x000100fd, 0x00010038,
];
/// Word 4: the reserved schema word.
const SCHEMA_WORD: usize = 4;
/// The literal of `OpDecorate %data Binding 0`.
const BINDING_WORD: usize = 52;
/// The literal of `OpMemberDecorate %Push 0 Offset 0` (`index`).
const INDEX_OFFSET_WORD: usize = 57;
/// The value of the `OpConstant %uint 1` that every part of the
/// `WorkgroupSize` composite uses.
const WORKGROUP_ONE_WORD: usize = 132;

/// The decoration of `OpMemberDecorate %Data 0 NonReadable` (`data[]`).
const DATA_MEMBER_DECORATION_WORD: usize = 36;
/// The operand of `OpCapability Shader`.
const CAPABILITY_WORD: usize = 6;
/// The result type of `OpConstant %int 1`, and the component type of the
/// `uvec3` type of the `WorkgroupSize` composite.
const INT_CONSTANT_TYPE_WORD: usize = 118;
const UVEC3_COMPONENT_WORD: usize = 127;

/// Loads `words` on a fresh validated context and returns the result; the
/// harness fails on any validation message.
fn load_on_fresh_context(
    words: &[u32],
    check: impl FnOnce(&DeviceContext, vkcompute::Result<Kernel>),
) {
    common::run_with(common::options(Path::Direct), "a regression case", |ctx| {
        check(ctx, Kernel::new(ctx, words, "main"));
        assert_context_works(ctx);
    });
}

/// Loads `words` on a fresh validated context and checks that it fails
/// with an error `is_kind` accepts whose message contains `needle`.
fn assert_refused(words: &[u32], is_kind: fn(&Error) -> bool, needle: &str) {
    load_on_fresh_context(words, |_, kernel| match kernel {
        Err(e) if is_kind(&e) => assert!(e.to_string().contains(needle), "{e}"),
        other => panic!("expected an error saying {needle:?}, got {other:?}"),
    });
}

/// Runs a STORE kernel once on four zeros with push constants `push`.
fn run_store<P: bytemuck::Pod>(ctx: &DeviceContext, kernel: &Kernel, push: &P) -> Vec<u32> {
    let data = ctx.enqueue_create_buffer::<u32>(4).unwrap();
    data.enqueue_fill(0).unwrap();
    ctx.enqueue_function(kernel, 1, &[data.arg()], push)
        .unwrap();
    data.to_vec().unwrap()
}

fn invalid_spirv(e: &Error) -> bool {
    matches!(e, Error::InvalidSpirv { .. })
}

fn unsupported(e: &Error) -> bool {
    matches!(e, Error::UnsupportedKernel { .. })
}

#[test]
fn the_literal_store_kernel_is_valid() {
    load_on_fresh_context(&STORE_WORDS, |ctx, kernel| {
        let kernel = kernel.expect("STORE_WORDS loads");
        assert_eq!(kernel.push_constant_size(), 8);
        assert_eq!(kernel.local_size(), [1, 1, 1]);
        assert_eq!(run_store(ctx, &kernel, &[2u32, 42]), [0, 0, 42, 0]);
    });
}

/// SPIRV-Tools accepted a non-zero schema word; lavapipe refused the module
/// with a driver message and `VK_ERROR_UNKNOWN`.
#[test]
fn a_nonzero_schema_word_is_invalid_spirv() {
    let mut words = STORE_WORDS;
    words[SCHEMA_WORD] = 0x8595_b600;
    assert_refused(&words, invalid_spirv, "schema word");
}

/// A binding number near `u32::MAX` made lavapipe run out of memory creating
/// the descriptor set layout (a driver message and `OutOfMemory`).
#[test]
fn a_huge_binding_number_is_refused() {
    let mut words = STORE_WORDS;
    words[BINDING_WORD] = 0xdbc1_7273;
    assert_refused(&words, unsupported, "binding number 3686888051");
}

/// A push-constant block whose first member lies after its last: spirq's
/// size ends at the last member (8 bytes), so the pipeline layout's range
/// was too short for the shader (VUID-VkComputePipelineCreateInfo-layout-00703).
#[test]
fn push_constant_members_out_of_order_are_sized_by_the_furthest() {
    let mut words = STORE_WORDS;
    words[INDEX_OFFSET_WORD] = 0x1c;
    load_on_fresh_context(&words, |ctx, kernel| {
        let kernel = kernel.expect("the module is valid");
        assert_eq!(kernel.push_constant_size(), 32);
        let mut push = [0u32; 8];
        push[7] = 3; // index, at offset 28
        push[1] = 42; // value, at offset 4
        assert_eq!(run_store(ctx, &kernel, &push), [0, 0, 0, 42]);
    });
}

/// A workgroup size of 0xb4775c69 in each dimension: the invocation count
/// overflowed a u64 (a panic in debug builds) before the limits were checked.
#[test]
fn a_workgroup_size_whose_product_overflows_is_refused() {
    let mut words = STORE_WORDS;
    words[WORKGROUP_ONE_WORD] = 0xb477_5c69;
    assert_refused(&words, unsupported, "workgroup size");
}

/// `OpCapability Tessellation` instead of `Shader`: SPIRV-Tools accepts it
/// (Tessellation implies Shader), but the device has no tessellation
/// feature enabled (VUID-VkShaderModuleCreateInfo-pCode-01091).
#[test]
fn a_capability_without_its_feature_is_refused() {
    let mut words = STORE_WORDS;
    words[CAPABILITY_WORD] = 3;
    assert_refused(&words, unsupported, "capability 3");
}

/// `RowMajor` on a member that is no matrix: invalid SPIR-V that SPIRV-Tools
/// accepts and lavapipe refuses (a driver message and `VK_ERROR_UNKNOWN`).
#[test]
fn a_matrix_layout_on_a_non_matrix_is_invalid_spirv() {
    let mut words = STORE_WORDS;
    words[DATA_MEMBER_DECORATION_WORD] = 4;
    assert_refused(
        &words,
        invalid_spirv,
        "decorated RowMajor but is not a matrix",
    );
}

/// A module SPIRV-Tools accepts and lavapipe refuses (the `WorkgroupSize`
/// composite's type becomes an `ivec3` of `uint` constants): the driver's
/// `VK_ERROR_UNKNOWN` was returned as a bare `Error::Vulkan`. It is now a
/// kernel-loading error saying the driver refused the module; the driver's
/// own message (not the validation layer's) is all the log may hold.
#[test]
fn a_module_the_driver_refuses_is_a_clear_error() {
    let mut words = STORE_WORDS;
    words.swap(INT_CONSTANT_TYPE_WORD, UVEC3_COMPONENT_WORD);
    common::run_with(
        common::options(Path::Direct),
        "a module the driver refuses",
        |ctx| {
            let log = ctx.diagnostics().validation_log();
            match Kernel::new(ctx, &words, "main") {
                Err(Error::UnsupportedKernel { reason, .. }) => {
                    assert!(reason.contains("the driver refused it"), "{reason}")
                }
                Err(Error::InvalidSpirv { .. }) => {}
                other => panic!("expected a kernel-loading error, got {other:?}"),
            }
            let layer: Vec<String> = log
                .take()
                .iter()
                .filter(|m| from_the_layer(m))
                .map(|m| m.to_string())
                .collect();
            assert!(layer.is_empty(), "validation-layer messages: {layer:?}");
            assert_context_works(ctx);
        },
    );
}

/// `shaders/fill.comp` compiled, with the array length of its push-constant
/// block (`uint pattern[4]`, followed by members at offsets 16 to 28) made
/// specialization constant 1 (default 4).
const FILL_WITH_SPECIALIZED_LENGTH: [u32; 480] = [
    0x07230203, 0x00010500, 0x000d000b, 0x0000006e, 0x00000000, 0x00020011, 0x00000001, 0x0006000b,
    0x00000001, 0x4c534c47, 0x6474732e, 0x3035342e, 0x00000000, 0x0003000e, 0x00000000, 0x00000001,
    0x0009000f, 0x00000005, 0x00000004, 0x6e69616d, 0x00000000, 0x0000000b, 0x00000013, 0x00000020,
    0x00000054, 0x00060010, 0x00000004, 0x00000011, 0x00000040, 0x00000001, 0x00000001, 0x00040047,
    0x0000001c, 0x00000001, 0x00000001, 0x00040047, 0x0000000b, 0x0000000b, 0x00000018, 0x00040047,
    0x00000013, 0x0000000b, 0x0000001c, 0x00040047, 0x0000001d, 0x00000006, 0x00000004, 0x00050048,
    0x0000001e, 0x00000000, 0x00000023, 0x00000000, 0x00050048, 0x0000001e, 0x00000001, 0x00000023,
    0x00000010, 0x00050048, 0x0000001e, 0x00000002, 0x00000023, 0x00000014, 0x00050048, 0x0000001e,
    0x00000003, 0x00000023, 0x00000018, 0x00050048, 0x0000001e, 0x00000004, 0x00000023, 0x0000001c,
    0x00030047, 0x0000001e, 0x00000002, 0x00040047, 0x00000051, 0x00000006, 0x00000004, 0x00050048,
    0x00000052, 0x00000000, 0x00000023, 0x00000000, 0x00030047, 0x00000052, 0x00000002, 0x00040047,
    0x00000054, 0x00000022, 0x00000000, 0x00040047, 0x00000054, 0x00000021, 0x00000000, 0x00040047,
    0x00000066, 0x0000000b, 0x00000019, 0x00020013, 0x00000002, 0x00030021, 0x00000003, 0x00000002,
    0x00040015, 0x00000006, 0x00000020, 0x00000000, 0x00040017, 0x00000009, 0x00000006, 0x00000003,
    0x00040020, 0x0000000a, 0x00000001, 0x00000009, 0x0004003b, 0x0000000a, 0x0000000b, 0x00000001,
    0x0004002b, 0x00000006, 0x0000000c, 0x00000000, 0x00040020, 0x0000000d, 0x00000001, 0x00000006,
    0x0004002b, 0x00000006, 0x00000010, 0x00000040, 0x0004003b, 0x0000000a, 0x00000013, 0x00000001,
    0x00040032, 0x00000006, 0x0000001c, 0x00000004, 0x0004001c, 0x0000001d, 0x00000006, 0x0000001c,
    0x0007001e, 0x0000001e, 0x0000001d, 0x00000006, 0x00000006, 0x00000006, 0x00000006, 0x00040020,
    0x0000001f, 0x00000009, 0x0000001e, 0x0004003b, 0x0000001f, 0x00000020, 0x00000009, 0x00040015,
    0x00000021, 0x00000020, 0x00000001, 0x0004002b, 0x00000021, 0x00000022, 0x00000002, 0x00040020,
    0x00000023, 0x00000009, 0x00000006, 0x00020014, 0x00000026, 0x0004002b, 0x00000021, 0x00000029,
    0x00000001, 0x0004002b, 0x00000021, 0x0000002f, 0x00000000, 0x0004002b, 0x00000006, 0x00000031,
    0x00000003, 0x0004002b, 0x00000006, 0x00000036, 0xffffffff, 0x0004002b, 0x00000021, 0x0000003b,
    0x00000003, 0x0004002b, 0x00000006, 0x00000043, 0x00000001, 0x0004002b, 0x00000021, 0x00000048,
    0x00000004, 0x0003001d, 0x00000051, 0x00000006, 0x0003001e, 0x00000052, 0x00000051, 0x00040020,
    0x00000053, 0x0000000c, 0x00000052, 0x0004003b, 0x00000053, 0x00000054, 0x0000000c, 0x00040020,
    0x00000056, 0x0000000c, 0x00000006, 0x0006002c, 0x00000009, 0x00000066, 0x00000010, 0x00000043,
    0x00000043, 0x00050036, 0x00000002, 0x00000004, 0x00000000, 0x00000003, 0x000200f8, 0x00000005,
    0x00050041, 0x0000000d, 0x0000000e, 0x0000000b, 0x0000000c, 0x0004003d, 0x00000006, 0x0000000f,
    0x0000000e, 0x00050084, 0x00000006, 0x00000011, 0x0000000f, 0x00000010, 0x00050041, 0x0000000d,
    0x00000014, 0x00000013, 0x0000000c, 0x0004003d, 0x00000006, 0x00000015, 0x00000014, 0x000200f9,
    0x00000016, 0x000200f8, 0x00000016, 0x000700f5, 0x00000006, 0x00000067, 0x00000015, 0x00000005,
    0x00000065, 0x00000019, 0x00050041, 0x00000023, 0x00000024, 0x00000020, 0x00000022, 0x0004003d,
    0x00000006, 0x00000025, 0x00000024, 0x000500b0, 0x00000026, 0x00000027, 0x00000067, 0x00000025,
    0x000400f6, 0x00000018, 0x00000019, 0x00000000, 0x000400fa, 0x00000027, 0x00000017, 0x00000018,
    0x000200f8, 0x00000017, 0x00050041, 0x00000023, 0x0000002a, 0x00000020, 0x00000029, 0x0004003d,
    0x00000006, 0x0000002b, 0x0000002a, 0x00050080, 0x00000006, 0x0000002d, 0x0000002b, 0x00000067,
    0x000500c7, 0x00000006, 0x00000032, 0x0000002d, 0x00000031, 0x00060041, 0x00000023, 0x00000033,
    0x00000020, 0x0000002f, 0x00000032, 0x0004003d, 0x00000006, 0x00000034, 0x00000033, 0x000500aa,
    0x00000026, 0x00000038, 0x00000067, 0x0000000c, 0x000300f7, 0x0000003a, 0x00000000, 0x000400fa,
    0x00000038, 0x00000039, 0x0000003a, 0x000200f8, 0x00000039, 0x00050041, 0x00000023, 0x0000003c,
    0x00000020, 0x0000003b, 0x0004003d, 0x00000006, 0x0000003d, 0x0000003c, 0x000500c7, 0x00000006,
    0x0000003f, 0x00000036, 0x0000003d, 0x000200f9, 0x0000003a, 0x000200f8, 0x0000003a, 0x000700f5,
    0x00000006, 0x00000069, 0x00000036, 0x00000017, 0x0000003f, 0x00000039, 0x00050082, 0x00000006,
    0x00000044, 0x00000025, 0x00000043, 0x000500aa, 0x00000026, 0x00000045, 0x00000067, 0x00000044,
    0x000300f7, 0x00000047, 0x00000000, 0x000400fa, 0x00000045, 0x00000046, 0x00000047, 0x000200f8,
    0x00000046, 0x00050041, 0x00000023, 0x00000049, 0x00000020, 0x00000048, 0x0004003d, 0x00000006,
    0x0000004a, 0x00000049, 0x000500c7, 0x00000006, 0x0000004c, 0x00000069, 0x0000004a, 0x000200f9,
    0x00000047, 0x000200f8, 0x00000047, 0x000700f5, 0x00000006, 0x0000006a, 0x00000069, 0x0000003a,
    0x0000004c, 0x00000046, 0x000500ab, 0x00000026, 0x0000004e, 0x0000006a, 0x00000036, 0x000300f7,
    0x00000050, 0x00000000, 0x000400fa, 0x0000004e, 0x0000004f, 0x00000050, 0x000200f8, 0x0000004f,
    0x00060041, 0x00000056, 0x00000057, 0x00000054, 0x0000002f, 0x0000002d, 0x0004003d, 0x00000006,
    0x00000058, 0x00000057, 0x000400c8, 0x00000006, 0x0000005a, 0x0000006a, 0x000500c7, 0x00000006,
    0x0000005b, 0x00000058, 0x0000005a, 0x000500c7, 0x00000006, 0x0000005e, 0x00000034, 0x0000006a,
    0x000500c5, 0x00000006, 0x0000005f, 0x0000005b, 0x0000005e, 0x000200f9, 0x00000050, 0x000200f8,
    0x00000050, 0x000700f5, 0x00000006, 0x0000006d, 0x00000034, 0x00000047, 0x0000005f, 0x0000004f,
    0x00060041, 0x00000056, 0x00000062, 0x00000054, 0x0000002f, 0x0000002d, 0x0003003e, 0x00000062,
    0x0000006d, 0x000200f9, 0x00000019, 0x000200f8, 0x00000019, 0x00050080, 0x00000006, 0x00000065,
    0x00000067, 0x00000011, 0x000200f9, 0x00000016, 0x000200f8, 0x00000018, 0x000100fd, 0x00010038,
];

/// Valid with its default length, but specialized to 256 the array overlaps
/// the members after it: the validation layer, which validates the module
/// with its specialization applied, reported
/// VUID-VkPipelineShaderStageCreateInfo-pSpecializationInfo-06719.
#[test]
fn a_specialization_that_makes_the_module_invalid_is_refused() {
    let words = &FILL_WITH_SPECIALIZED_LENGTH;
    common::run_with(
        common::options(Path::Direct),
        "specialized lengths",
        |ctx| {
            let default = Kernel::new(ctx, words, "main").expect("valid with its default length");
            assert_eq!(default.spec_constants().len(), 1);
            Kernel::builder(words)
                .specialize(1, 4u32)
                .build(ctx)
                .expect("valid with the default length given explicitly");
            // The kernel model refuses it, reading the specialized module,
            // before the validator runs (and in builds without one).
            match Kernel::builder(words).specialize(1, 256u32).build(ctx) {
                Err(Error::UnsupportedKernel { reason, .. }) => {
                    assert!(
                        reason.contains("overlap") && reason.contains("06719"),
                        "{reason}"
                    )
                }
                other => panic!("expected UnsupportedKernel, got {other:?}"),
            }
            assert_context_works(ctx);
        },
    );
}

/// `shaders/fill.comp` compiled, with two words swapped so that it reads
/// `pattern[0xffffffff]` of its push constants' `uint pattern[4]` (an
/// `OpAccessChain` with a constant index out of bounds).
const FILL_WITH_CONSTANT_INDEX_OUT_OF_BOUNDS: [u32; 476] = [
    0x07230203, 0x00010500, 0x000d000b, 0x0000006e, 0x00000000, 0x00020011, 0x00000001, 0x0006000b,
    0x00000001, 0x4c534c47, 0x6474732e, 0x3035342e, 0x00000000, 0x0003000e, 0x00000000, 0x00000001,
    0x0009000f, 0x00000005, 0x00000004, 0x6e69616d, 0x00000000, 0x0000000b, 0x00000013, 0x00000020,
    0x00000054, 0x00060010, 0x00000004, 0x00000011, 0x00000040, 0x00000001, 0x00000001, 0x00040047,
    0x0000000b, 0x0000000b, 0x00000018, 0x00040047, 0x00000013, 0x0000000b, 0x0000001c, 0x00040047,
    0x0000001d, 0x00000006, 0x00000004, 0x00050048, 0x0000001e, 0x00000000, 0x00000023, 0x00000000,
    0x00050048, 0x0000001e, 0x00000001, 0x00000023, 0x00000010, 0x00050048, 0x0000001e, 0x00000002,
    0x00000023, 0x00000014, 0x00050048, 0x0000001e, 0x00000003, 0x00000023, 0x00000018, 0x00050048,
    0x0000001e, 0x00000004, 0x00000023, 0x0000001c, 0x00030047, 0x0000001e, 0x00000002, 0x00040047,
    0x00000051, 0x00000006, 0x00000004, 0x00050048, 0x00000052, 0x00000000, 0x00000023, 0x00000000,
    0x00030047, 0x00000052, 0x00000002, 0x00040047, 0x00000054, 0x00000022, 0x00000000, 0x00040047,
    0x00000054, 0x00000021, 0x00000000, 0x00040047, 0x00000066, 0x0000000b, 0x00000019, 0x00020013,
    0x00000002, 0x00030021, 0x00000003, 0x00000002, 0x00040015, 0x00000006, 0x00000020, 0x00000000,
    0x00040017, 0x00000009, 0x00000006, 0x00000003, 0x00040020, 0x0000000a, 0x00000001, 0x00000009,
    0x0004003b, 0x0000000a, 0x0000000b, 0x00000001, 0x0004002b, 0x00000006, 0x0000000c, 0x00000000,
    0x00040020, 0x0000000d, 0x00000001, 0x00000006, 0x0004002b, 0x00000006, 0x00000010, 0x00000040,
    0x0004003b, 0x0000000a, 0x00000013, 0x00000001, 0x0004002b, 0x00000006, 0x0000001c, 0x00000004,
    0x0004001c, 0x0000001d, 0x00000006, 0x0000001c, 0x0007001e, 0x0000001e, 0x0000001d, 0x00000006,
    0x00000006, 0x00000006, 0x00000006, 0x00040020, 0x0000001f, 0x00000009, 0x0000001e, 0x0004003b,
    0x0000001f, 0x00000020, 0x00000009, 0x00040015, 0x00000021, 0x00000020, 0x00000001, 0x0004002b,
    0x00000021, 0x00000022, 0x00000002, 0x00040020, 0x00000023, 0x00000009, 0x00000006, 0x00020014,
    0x00000026, 0x0004002b, 0x00000021, 0x00000029, 0x00000001, 0x0004002b, 0x00000021, 0x0000002f,
    0x00000000, 0x0004002b, 0x00000006, 0x00000031, 0x00000003, 0x0004002b, 0x00000006, 0x00000036,
    0xffffffff, 0x0004002b, 0x00000021, 0x0000003b, 0x00000003, 0x0004002b, 0x00000006, 0x00000043,
    0x00000001, 0x0004002b, 0x00000021, 0x00000048, 0x00000004, 0x0003001d, 0x00000051, 0x00000006,
    0x0003001e, 0x00000052, 0x00000051, 0x00040020, 0x00000053, 0x0000000c, 0x00000052, 0x0004003b,
    0x00000053, 0x00000054, 0x0000000c, 0x00040020, 0x00000056, 0x0000000c, 0x00000006, 0x0006002c,
    0x00000009, 0x00000066, 0x00000010, 0x00000043, 0x00000043, 0x00050036, 0x00000002, 0x00000004,
    0x00000000, 0x00000003, 0x000200f8, 0x00000005, 0x00050041, 0x0000000d, 0x0000000e, 0x0000000b,
    0x0000000c, 0x0004003d, 0x00000006, 0x0000000f, 0x0000000e, 0x00050084, 0x00000006, 0x00000011,
    0x0000000f, 0x00000010, 0x00050041, 0x0000000d, 0x00000014, 0x00000013, 0x0000000c, 0x0004003d,
    0x00000006, 0x00000015, 0x00000014, 0x000200f9, 0x00000016, 0x000200f8, 0x00000016, 0x000700f5,
    0x00000006, 0x00000067, 0x00000015, 0x00000005, 0x00000065, 0x00000019, 0x00050041, 0x00000023,
    0x00000024, 0x00000020, 0x00000022, 0x0004003d, 0x00000006, 0x00000025, 0x00000024, 0x000500b0,
    0x00000026, 0x00000027, 0x00000067, 0x00000025, 0x000400f6, 0x00000018, 0x00000019, 0x00000000,
    0x000400fa, 0x00000027, 0x00000017, 0x00000018, 0x000200f8, 0x00000017, 0x00050041, 0x00000023,
    0x0000002a, 0x00000020, 0x00000029, 0x0004003d, 0x00000006, 0x0000002b, 0x0000002a, 0x00050080,
    0x00000006, 0x0000002d, 0x0000002b, 0x00000067, 0x000500c7, 0x00000006, 0x00000032, 0x0000002d,
    0x00000031, 0x00060041, 0x00000023, 0x00000033, 0x00000020, 0x0000002f, 0x00000036, 0x0004003d,
    0x00000006, 0x00000034, 0x00000033, 0x000500aa, 0x00000026, 0x00000038, 0x00000067, 0x0000000c,
    0x000300f7, 0x0000003a, 0x00000000, 0x000400fa, 0x00000038, 0x00000039, 0x0000003a, 0x000200f8,
    0x00000039, 0x00050041, 0x00000023, 0x0000003c, 0x00000020, 0x0000003b, 0x0004003d, 0x00000006,
    0x0000003d, 0x0000003c, 0x000500c7, 0x00000006, 0x0000003f, 0x00000036, 0x0000003d, 0x000200f9,
    0x0000003a, 0x000200f8, 0x0000003a, 0x000700f5, 0x00000006, 0x00000069, 0x00000036, 0x00000017,
    0x0000003f, 0x00000039, 0x00050082, 0x00000006, 0x00000044, 0x00000025, 0x00000043, 0x000500aa,
    0x00000026, 0x00000045, 0x00000067, 0x00000044, 0x000300f7, 0x00000047, 0x00000000, 0x000400fa,
    0x00000045, 0x00000046, 0x00000047, 0x000200f8, 0x00000046, 0x00050041, 0x00000023, 0x00000049,
    0x00000020, 0x00000048, 0x0004003d, 0x00000006, 0x0000004a, 0x00000049, 0x000500c7, 0x00000006,
    0x0000004c, 0x00000069, 0x0000004a, 0x000200f9, 0x00000047, 0x000200f8, 0x00000047, 0x000700f5,
    0x00000006, 0x0000006a, 0x00000069, 0x0000003a, 0x0000004c, 0x00000046, 0x000500ab, 0x00000026,
    0x0000004e, 0x0000006a, 0x00000032, 0x000300f7, 0x00000050, 0x00000000, 0x000400fa, 0x0000004e,
    0x0000004f, 0x00000050, 0x000200f8, 0x0000004f, 0x00060041, 0x00000056, 0x00000057, 0x00000054,
    0x0000002f, 0x0000002d, 0x0004003d, 0x00000006, 0x00000058, 0x00000057, 0x000400c8, 0x00000006,
    0x0000005a, 0x0000006a, 0x000500c7, 0x00000006, 0x0000005b, 0x00000058, 0x0000005a, 0x000500c7,
    0x00000006, 0x0000005e, 0x00000034, 0x0000006a, 0x000500c5, 0x00000006, 0x0000005f, 0x0000005b,
    0x0000005e, 0x000200f9, 0x00000050, 0x000200f8, 0x00000050, 0x000700f5, 0x00000006, 0x0000006d,
    0x00000034, 0x00000047, 0x0000005f, 0x0000004f, 0x00060041, 0x00000056, 0x00000062, 0x00000054,
    0x0000002f, 0x0000002d, 0x0003003e, 0x00000062, 0x0000006d, 0x000200f9, 0x00000019, 0x000200f8,
    0x00000019, 0x00050080, 0x00000006, 0x00000065, 0x00000067, 0x00000011, 0x000200f9, 0x00000016,
    0x000200f8, 0x00000018, 0x000100fd, 0x00010038,
];

/// SPIRV-Tools accepts the module; the validation layer crashed the process
/// in vkCreateShaderModule (a segmentation fault, after 400,000 mutations).
#[test]
fn a_constant_index_out_of_bounds_is_refused() {
    assert_refused(
        &FILL_WITH_CONSTANT_INDEX_OUT_OF_BOUNDS,
        unsupported,
        "indexes element 4294967295 of a composite of 4",
    );
}

/// `OpExtension "SPV_KHR_shader_clock"` added after the capability: valid
/// SPIR-V, but the device has no VK_KHR_shader_clock enabled.
#[test]
fn an_extension_the_device_lacks_is_refused() {
    let name = b"SPV_KHR_shader_clock\0\0\0\0";
    let mut extension = vec![((1 + name.len() as u32 / 4) << 16) | 10];
    extension.extend(
        name.chunks(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])),
    );
    let mut words = STORE_WORDS.to_vec();
    words.splice(CAPABILITY_WORD + 1..CAPABILITY_WORD + 1, extension);
    assert_refused(&words, unsupported, "SPV_KHR_shader_clock");
}
