//! Data-parallel training: logistic regression by gradient descent over
//! every rank's shard of one synthetic data set, under `mpirun -np N`
//! (`make mpi-test` runs it on 4 ranks).
//!
//! Each rank holds its shard on the device and, every step, computes the
//! gradient of the loss over that shard with its own kernel
//! (`shaders/train_gradient.comp`, as partial sums over blocks of 256
//! samples: lavapipe dropped the samples past the 5958th that one
//! invocation walked, which looks like llvmpipe's limit of 65535 loop
//! iterations in all), sums the gradients of every
//! rank with [`Communicator::allreduce`] (on the device: the arithmetic in
//! vkcompute-mpi's reduction kernels), and sums the blocks and updates its
//! weights with a second kernel (`shaders/train_step.comp`). Nothing
//! leaves the device until the end.
//!
//! It checks its own result and exits non-zero unless:
//! - every rank ends with the same weights, bit for bit (gathered with
//!   [`Communicator::allgather`]);
//! - rank 0's weights match a one-process run of the same training over
//!   the whole data set, with the same kernels on rank 0's device (the
//!   sums run in another order, so they agree to a tolerance, not in
//!   every bit: the largest difference is printed);
//! - the one-process run matches the same training on the CPU in `f64`,
//!   and the model predicts most labels right.
//!
//! The kernels are checked-in SPIR-V (`shaders/spv/`) that the test
//! `shipped_spirv` keeps equal to their GLSL, loaded through vkcompute's
//! validating `Kernel::new` (feature `validate`, which this
//! crate's `shader-compiler` turns on: hence the example's required
//! feature). Run it with
//! `cargo build -p vkcompute-mpi --features shader-compiler --example train`
//! and `mpirun -np 4 target/debug/examples/train`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "an example program"
)]

use std::process::ExitCode;

use vkcompute::{DeviceBuffer, DeviceContext, Kernel};
use vkcompute_mpi::{Communicator, ReduceOp};

/// Samples of every rank together.
const SAMPLES: usize = 6000;
/// Features of a sample, the last the constant 1 (the bias).
const FEATURES: usize = 9;
const STEPS: usize = 150;
const LEARNING_RATE: f32 = 0.5;
/// The kernels' workgroup size (`local_size_x`).
const WORKGROUP: usize = 64;
/// The samples of one partial sum of the gradient kernel.
const BLOCK: usize = 256;

const GRADIENT: &[u8] = include_bytes!("../shaders/spv/train_gradient.spv");
const STEP: &[u8] = include_bytes!("../shaders/spv/train_step.spv");

/// A 64-bit mix of `i` (splitmix64), for data that every rank makes alike.
fn mix(i: u64) -> u64 {
    let mut z = i.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A value in [0, 1) from `i`.
fn uniform(i: u64) -> f64 {
    (mix(i) >> 11) as f64 / (1u64 << 53) as f64
}

/// Sample `i` of the data set: its features and its label (0 or 1), drawn
/// from a true model with noise, so that no weights fit every label.
fn sample(i: usize) -> ([f32; FEATURES], f32) {
    let truth = [1.5, -2.0, 0.75, 0.0, 3.0, -1.0, 0.5, -0.25, 0.3];
    let mut x = [1.0f32; FEATURES];
    let mut z = 0.0f64;
    for (k, xk) in x.iter_mut().enumerate() {
        if k + 1 < FEATURES {
            *xk = (2.0 * uniform((i * FEATURES + k) as u64) - 1.0) as f32;
        }
        z += f64::from(*xk) * truth[k];
    }
    let p = 1.0 / (1.0 + (-z).exp());
    let label = if uniform(((SAMPLES + i) * FEATURES) as u64) < p {
        1.0
    } else {
        0.0
    };
    (x, label)
}

/// The samples `range` as a feature matrix (row-major) and labels.
fn data(range: std::ops::Range<usize>) -> (Vec<f32>, Vec<f32>) {
    let (mut x, mut y) = (Vec::new(), Vec::new());
    for i in range {
        let (xi, yi) = sample(i);
        x.extend_from_slice(&xi);
        y.push(yi);
    }
    (x, y)
}

/// One model's state on a device: its samples, weights and gradient (in
/// `blocks` rows of partial sums, each over `BLOCK` samples), and the two
/// kernels.
struct Model {
    ctx: DeviceContext,
    gradient_kernel: Kernel,
    step_kernel: Kernel,
    x: DeviceBuffer<f32>,
    y: DeviceBuffer<f32>,
    n: usize,
    blocks: usize,
    weights: DeviceBuffer<f32>,
    gradient: DeviceBuffer<f32>,
}

impl Model {
    /// The samples `range` on `ctx`'s device, the weights zero, the
    /// gradient in `blocks` rows (at least `range.len() / BLOCK`, rounded
    /// up; rows past the samples hold zeros).
    fn new(
        ctx: &DeviceContext,
        range: std::ops::Range<usize>,
        blocks: usize,
    ) -> vkcompute::Result<Model> {
        let (x, y) = data(range.clone());
        let n = range.len();
        let on_device = |v: &[f32]| -> vkcompute::Result<DeviceBuffer<f32>> {
            let b = ctx.enqueue_create_buffer::<f32>(v.len().max(1))?;
            if !v.is_empty() {
                b.enqueue_copy_from(v)?;
            }
            Ok(b)
        };
        let weights = ctx.enqueue_create_buffer::<f32>(FEATURES)?;
        weights.enqueue_fill(0.0)?;
        Ok(Model {
            gradient_kernel: Kernel::new(ctx, GRADIENT, "main")?,
            step_kernel: Kernel::new(ctx, STEP, "main")?,
            x: on_device(&x)?,
            y: on_device(&y)?,
            n,
            blocks,
            weights,
            gradient: ctx.enqueue_create_buffer::<f32>(blocks * FEATURES)?,
            ctx: ctx.clone(),
        })
    }

    /// Enqueues the gradient of the loss over this model's samples.
    fn enqueue_gradient(&self) -> vkcompute::Result<()> {
        let groups = (self.blocks * FEATURES).div_ceil(WORKGROUP) as u32;
        let args = [
            self.x.arg(),
            self.y.arg(),
            self.weights.arg(),
            self.gradient.arg(),
        ];
        let push: [u32; 4] = [
            self.n as u32,
            FEATURES as u32,
            BLOCK as u32,
            self.blocks as u32,
        ];
        self.ctx
            .enqueue_function(&self.gradient_kernel, groups, &args, &push)
    }

    /// Enqueues one step down the gradient, which sums `total` samples.
    fn enqueue_step(&self, total: usize) -> vkcompute::Result<()> {
        let groups = FEATURES.div_ceil(WORKGROUP) as u32;
        let scale = LEARNING_RATE / total as f32;
        let push: [u32; 3] = [FEATURES as u32, self.blocks as u32, scale.to_bits()];
        let args = [self.weights.arg(), self.gradient.arg()];
        self.ctx
            .enqueue_function(&self.step_kernel, groups, &args, &push)
    }
}

/// The same training on the CPU in `f64`.
fn train_on_host() -> Vec<f64> {
    let (x, y) = data(0..SAMPLES);
    let mut w = vec![0.0f64; FEATURES];
    for _ in 0..STEPS {
        let mut g = vec![0.0f64; FEATURES];
        for (xi, yi) in x.chunks_exact(FEATURES).zip(&y) {
            let z: f64 = xi.iter().zip(&w).map(|(a, b)| f64::from(*a) * b).sum();
            let residual = 1.0 / (1.0 + (-z).exp()) - f64::from(*yi);
            for (gj, xj) in g.iter_mut().zip(xi) {
                *gj += residual * f64::from(*xj);
            }
        }
        for (wj, gj) in w.iter_mut().zip(&g) {
            *wj -= f64::from(LEARNING_RATE) * gj / SAMPLES as f64;
        }
    }
    w
}

/// The share of labels that `w` predicts right.
fn accuracy(w: &[f32]) -> f64 {
    let right = (0..SAMPLES)
        .filter(|&i| {
            let (x, y) = sample(i);
            let z: f32 = x.iter().zip(w).map(|(a, b)| a * b).sum();
            (z > 0.0) == (y > 0.5)
        })
        .count();
    right as f64 / SAMPLES as f64
}

/// The largest difference between `a` and `b`, element by element.
fn largest_difference(a: &[f32], b: impl IntoIterator<Item = f64>) -> f64 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (f64::from(*x) - y).abs())
        .fold(0.0, f64::max)
}

fn main() -> ExitCode {
    let universe = mpi::initialize().expect("MPI initialises once");
    let ctx = DeviceContext::new().expect("a Vulkan device");
    let comm = Communicator::new(&universe.world(), &ctx).expect("a communicator");
    let (rank, size) = (comm.rank() as usize, comm.size() as usize);
    let shard = rank * SAMPLES / size..(rank + 1) * SAMPLES / size;

    // Every rank's gradient has as many rows, so that they can be summed.
    let blocks = SAMPLES.div_ceil(size).div_ceil(BLOCK);
    let model = Model::new(&ctx, shard, blocks).expect("the shard on the device");
    for _ in 0..STEPS {
        model.enqueue_gradient().expect("gradient");
        comm.allreduce(&model.gradient, ReduceOp::Sum)
            .expect("allreduce of the gradients");
        model.enqueue_step(SAMPLES).expect("step");
    }
    let everyone = ctx.enqueue_create_buffer::<f32>(size * FEATURES).unwrap();
    comm.allgather(&model.weights, &everyone)
        .expect("allgather of the weights");
    let weights = model.weights.to_vec().unwrap();
    let all = everyone.to_vec().unwrap();
    let mut failures = Vec::new();
    for (r, theirs) in all.chunks_exact(FEATURES).enumerate() {
        let same = theirs
            .iter()
            .zip(&weights)
            .all(|(a, b)| a.to_bits() == b.to_bits());
        if !same {
            failures.push(format!(
                "rank {rank}: rank {r} ends with other weights: {theirs:?} vs {weights:?}"
            ));
        }
    }

    if rank == 0 {
        let alone = Model::new(&ctx, 0..SAMPLES, SAMPLES.div_ceil(BLOCK))
            .expect("the whole data set on the device");
        for _ in 0..STEPS {
            alone.enqueue_gradient().unwrap();
            alone.enqueue_step(SAMPLES).unwrap();
        }
        let alone = alone.weights.to_vec().unwrap();
        let host = train_on_host();
        let vs_alone = largest_difference(&weights, alone.iter().map(|v| f64::from(*v)));
        let vs_host = largest_difference(&alone, host.iter().copied());
        let right = accuracy(&weights);
        println!(
            "train: {size} ranks, {SAMPLES} samples, {STEPS} steps: weights {weights:?}; \
             largest difference from a one-process run {vs_alone:.3e}, one-process run from \
             f64 on the CPU {vs_host:.3e}; {:.1}% of labels predicted right",
            100.0 * right
        );
        if vs_alone > 1e-5 {
            failures.push(format!(
                "the weights differ from a one-process run by {vs_alone:.3e} (> 1e-5): {alone:?}"
            ));
        }
        if vs_host > 1e-5 {
            failures.push(format!(
                "the one-process run differs from f64 on the CPU by {vs_host:.3e} (> 1e-5): {host:?}"
            ));
        }
        if right < 0.75 {
            failures.push(format!(
                "only {:.1}% of labels predicted right",
                100.0 * right
            ));
        }
    }
    let failed = !failures.is_empty();
    for f in failures {
        eprintln!("train: FAILED: {f}");
    }
    // Every rank learns whether any failed, and exits accordingly.
    let verdict = ctx.enqueue_create_buffer::<u32>(1).unwrap();
    verdict.enqueue_fill(u32::from(failed)).unwrap();
    comm.allreduce(&verdict, ReduceOp::Max)
        .expect("allreduce of the verdicts");
    if verdict.to_vec().unwrap()[0] != 0 {
        return ExitCode::FAILURE;
    }
    ExitCode::SUCCESS
}
