//! A kernel stays inside its own memory whatever its indices (issue 19):
//! dynamic indices into workgroup, function, private and push-constant
//! arrays, and dynamic vector and matrix components, are clamped into range
//! (an index out of range reads or writes the last element); workgroup
//! memory and push constants are checked against the device's limits after
//! specialization.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "test helpers: a failure fails the test"
)]
#![cfg(feature = "glsl")]

mod common;

use common::{on_each_descriptor_path, run_with, Path};
use vkcompute::{DeviceContext, Error, Kernel};

/// `shared uint s[16]` written and read at `p.idx + p.k * 1024`, an index
/// from push constants: on lavapipe this crashed the process in the first
/// dispatch (5 of 5 runs) before indices were bounded.
const SHARED_OUT_OF_RANGE: &str = r#"#version 450
layout(local_size_x = 64) in;
layout(std430, binding = 0) buffer Out { uint o[]; };
layout(push_constant) uniform P { uint idx; uint k; } p;
shared uint s[16];
void main() {
    uint i = gl_LocalInvocationID.x;
    if (i < 16u) s[i] = i;
    barrier();
    if (i == 0u) s[p.idx + p.k * 1024u] = 1000u;
    barrier();
    // Every element, then one read at the same far index.
    if (i < 16u) o[gl_WorkGroupID.x * 17u + i] = s[i];
    if (i == 16u) o[gl_WorkGroupID.x * 17u + 16u] = s[p.idx + p.k * 1024u + 1u];
}
"#;

#[test]
fn a_workgroup_index_out_of_range_is_clamped_to_the_last_element() {
    on_each_descriptor_path(|ctx| {
        let kernel = Kernel::from_glsl(ctx, SHARED_OUT_OF_RANGE, "main").unwrap();
        assert!(
            kernel.clamped_indices() >= 3,
            "{}",
            kernel.clamped_indices()
        );
        let groups = 4u32;
        let out = ctx
            .enqueue_create_buffer::<u32>(17 * groups as usize)
            .unwrap();
        for (idx, k) in [(3u32, 1000u32), (0, 0x7fff_ffff), (u32::MAX, 5), (7, 0)] {
            out.enqueue_fill(0xdead).unwrap();
            ctx.enqueue_function(&kernel, groups, &[out.arg()], &[idx, k])
                .unwrap();
            let seen = out.to_vec().unwrap();
            let at = idx.wrapping_add(k.wrapping_mul(1024));
            for g in 0..groups as usize {
                let got = &seen[g * 17..g * 17 + 17];
                let mut want: Vec<u32> = (0..16).collect();
                // In range: that element; out of range: the last one.
                want[at.min(15) as usize] = 1000;
                want.push(want[(at.wrapping_add(1)).min(15) as usize]);
                assert_eq!(got, want, "group {g}, idx {idx}, k {k}");
            }
        }
    });
}

/// Reads and writes out of range in every other kind of memory: a function
/// array, a private array, a push-constant array, a vector and a matrix.
const EVERY_KIND: &str = r#"#version 450
layout(local_size_x = 1) in;
layout(std430, binding = 0) buffer Out { uint o[]; };
layout(push_constant) uniform P { uint i; uint pc[4]; } p;
uint priv[4];
void main() {
    uint f[4] = uint[4](10u, 11u, 12u, 13u);
    for (int j = 0; j < 4; j++) priv[j] = 20u + uint(j);
    uvec4 v = uvec4(30u, 31u, 32u, 33u);
    mat4 m = mat4(1.0);
    m[3] = vec4(40.0, 41.0, 42.0, 43.0);
    o[0] = f[p.i];
    o[1] = priv[p.i];
    o[2] = p.pc[p.i];
    o[3] = v[p.i];
    o[4] = uint(m[p.i][p.i]);
    f[p.i] = 99u;
    o[5] = f[3];
    priv[p.i] = 98u;
    o[6] = priv[3];
    v[p.i] = 97u;
    o[7] = v.w;
    m[p.i][p.i] = 96.0;
    o[8] = uint(m[3][3]);
}
"#;

#[test]
fn function_private_push_constant_vector_and_matrix_indices_are_clamped() {
    on_each_descriptor_path(|ctx| {
        let kernel = Kernel::from_glsl(ctx, EVERY_KIND, "main").unwrap();
        // One clamp at least for each kind (the optimizer merges some).
        assert!(
            kernel.clamped_indices() >= 5,
            "{}",
            kernel.clamped_indices()
        );
        let out = ctx.enqueue_create_buffer::<u32>(9).unwrap();
        let pc = [50u32, 51, 52, 53];
        for i in [4u32, 1000, 0x8000_0000, u32::MAX] {
            ctx.enqueue_function(&kernel, 1, &[out.arg()], &[i, pc[0], pc[1], pc[2], pc[3]])
                .unwrap();
            assert_eq!(
                out.to_vec().unwrap(),
                [13, 23, 53, 33, 43, 99, 98, 97, 96],
                "index {i}"
            );
        }
        // In range, the kernel does what it says.
        ctx.enqueue_function(
            &kernel,
            1,
            &[out.arg()],
            &[2u32, pc[0], pc[1], pc[2], pc[3]],
        )
        .unwrap();
        assert_eq!(out.to_vec().unwrap(), [12, 22, 52, 32, 1, 13, 23, 33, 43]);
    });
}

/// `shared uint s[N]`, with `N` a specialization constant, indexed out of
/// range: bounded at the specialized length.
const SPECIALIZED_SHARED: &str = r#"#version 450
layout(local_size_x = 1) in;
layout(constant_id = 0) const uint N = 16u;
layout(std430, binding = 0) buffer Out { uint o[]; };
layout(push_constant) uniform P { uint i; } p;
shared uint s[N];
shared uint t[N * 2u + 1u];
void main() {
    for (uint j = 0u; j < N; j++) s[j] = j;
    for (uint j = 0u; j < N * 2u + 1u; j++) t[j] = 100u + j;
    s[p.i] = 77u;
    o[0] = s[N - 1u];
    o[1] = t[p.i];
}
"#;

#[test]
fn arrays_sized_by_specialization_constants_are_bounded_at_their_specialized_length() {
    run_with(common::options(Path::Direct), "specialized", |ctx| {
        let out = ctx.enqueue_create_buffer::<u32>(2).unwrap();
        for n in [16u32, 5, 40] {
            let kernel = Kernel::glsl(SPECIALIZED_SHARED)
                .compile()
                .specialize(0, n)
                .build(ctx)
                .unwrap();
            ctx.enqueue_function(&kernel, 1, &[out.arg()], &[5000u32])
                .unwrap();
            assert_eq!(out.to_vec().unwrap(), [77, 100 + 2 * n], "N = {n}");
        }
    });
}

fn assert_refused(result: vkcompute::Result<Kernel>, needles: &[&str]) {
    match result {
        Err(Error::UnsupportedKernel { reason, .. }) => {
            for needle in needles {
                assert!(reason.contains(needle), "`{needle}` not in: {reason}");
            }
        }
        other => panic!("expected UnsupportedKernel, got {other:?}"),
    }
}

fn still_works(ctx: &DeviceContext) {
    let b = ctx.enqueue_create_buffer::<u32>(8).unwrap();
    b.enqueue_fill(3).unwrap();
    assert_eq!(b.to_vec().unwrap(), [3; 8]);
}

fn shared_of(elements: u32) -> String {
    format!(
        "#version 450\nlayout(local_size_x = 1) in;\n\
         layout(std430, binding = 0) buffer Out {{ uint o[]; }};\n\
         shared uint big[{elements}];\n\
         void main() {{ big[gl_LocalInvocationID.x] = 1u; barrier(); o[0] = big[0]; }}\n"
    )
}

#[test]
fn workgroup_memory_past_the_device_limit_is_refused_by_name_size_and_limit() {
    run_with(common::options(Path::Direct), "workgroup limit", |ctx| {
        let limit = ctx.info().limits.max_shared_memory_bytes;
        let over = limit / 4 + 1;
        let refused = Kernel::from_glsl(ctx, &shared_of(over), "main");
        assert_refused(
            refused,
            &[
                "`big`",
                &format!("{} bytes", over * 4),
                "maxComputeSharedMemorySize",
                &limit.to_string(),
            ],
        );
        // Exactly at the limit loads and runs.
        let at = Kernel::from_glsl(ctx, &shared_of(limit / 4), "main").unwrap();
        let out = ctx.enqueue_create_buffer::<u32>(1).unwrap();
        ctx.enqueue_function(&at, 1, &[out.arg()], &()).unwrap();
        assert_eq!(out.to_vec().unwrap(), [1]);
        // The same through a specialization constant.
        let source = "#version 450\nlayout(local_size_x = 1) in;\n\
            layout(constant_id = 3) const uint N = 16u;\n\
            layout(std430, binding = 0) buffer Out { uint o[]; };\n\
            shared uint s[N];\n\
            void main() { s[0] = 2u; barrier(); o[0] = s[0]; }\n";
        let small = Kernel::glsl(source)
            .compile()
            .specialize(3, 16u32)
            .build(ctx)
            .unwrap();
        ctx.enqueue_function(&small, 1, &[out.arg()], &()).unwrap();
        assert_eq!(out.to_vec().unwrap(), [2]);
        let refused = Kernel::glsl(source)
            .compile()
            .specialize(3, 1u32 << 20)
            .build(ctx);
        assert_refused(
            refused,
            &["`s`", "4194304 bytes", "maxComputeSharedMemorySize"],
        );
        still_works(ctx);
    });
}

/// A push-constant block whose array length is a specialization constant.
const SPECIALIZED_PUSH: &str = r#"#version 450
layout(local_size_x = 1) in;
layout(constant_id = 0) const uint N = 4u;
layout(std430, binding = 0) buffer Out { uint o[]; };
layout(push_constant) uniform P { uint a[N]; } p;
void main() { o[0] = p.a[N - 1u]; o[1] = p.a[0]; }
"#;

#[test]
fn the_push_constant_size_is_the_specialized_one_and_is_checked_against_the_limit() {
    run_with(common::options(Path::Direct), "push constants", |ctx| {
        let four = Kernel::glsl(SPECIALIZED_PUSH).compile().build(ctx).unwrap();
        assert_eq!(four.push_constant_size(), 16);
        let eight = Kernel::glsl(SPECIALIZED_PUSH)
            .compile()
            .specialize(0, 8u32)
            .build(ctx)
            .unwrap();
        assert_eq!(eight.push_constant_size(), 32);
        let out = ctx.enqueue_create_buffer::<u32>(2).unwrap();
        let push: [u32; 8] = [1, 2, 3, 4, 5, 6, 7, 8];
        ctx.enqueue_function(&eight, 1, &[out.arg()], &push)
            .unwrap();
        assert_eq!(out.to_vec().unwrap(), [8, 1]);
        // Sixteen bytes are too few for the specialized block.
        assert!(ctx
            .enqueue_function(&eight, 1, &[out.arg()], &[1u32, 2, 3, 4])
            .is_err());
        let limit = ctx.info().limits.max_push_constants_bytes;
        let refused = Kernel::glsl(SPECIALIZED_PUSH)
            .compile()
            .specialize(0, limit / 4 + 1)
            .build(ctx);
        assert_refused(refused, &["maxPushConstantsSize", &limit.to_string()]);
        still_works(ctx);
    });
}

#[test]
fn the_shipped_tiled_matmul_matches_the_cpu() {
    on_each_descriptor_path(|ctx| {
        let kernel = Kernel::new(ctx, vkcompute::shaders::MATMUL, "main").unwrap();
        assert_eq!(kernel.local_size(), [16, 16, 1]);
        // Its tiles are indexed with invocation ids: bounded.
        assert!(
            kernel.clamped_indices() >= 4,
            "{}",
            kernel.clamped_indices()
        );
        let n = 48usize;
        let a: Vec<f32> = (0..n * n).map(|i| (i % 7) as f32 - 3.0).collect();
        let b: Vec<f32> = (0..n * n).map(|i| (i % 5) as f32 * 0.5).collect();
        let da = ctx.enqueue_create_buffer::<f32>(n * n).unwrap();
        let db = ctx.enqueue_create_buffer::<f32>(n * n).unwrap();
        let dc = ctx.enqueue_create_buffer::<f32>(n * n).unwrap();
        da.enqueue_copy_from(&a).unwrap();
        db.enqueue_copy_from(&b).unwrap();
        let groups = (n / 16) as u32;
        ctx.enqueue_function(
            &kernel,
            (groups, groups),
            &[da.arg(), db.arg(), dc.arg()],
            &(n as u32),
        )
        .unwrap();
        let got = dc.to_vec().unwrap();
        for r in 0..n {
            for c in 0..n {
                let want: f32 = (0..n).map(|k| a[r * n + k] * b[k * n + c]).sum();
                assert_eq!(got[r * n + c], want, "({r}, {c})");
            }
        }
    });
}

/// Entry points `a` and `b`, each with its own `shared uint[6144]` (24 KiB,
/// 48 KiB together), `b` indexing through `OpInBoundsAccessChain`: each
/// stores 9 at its invocation's index and copies it to `out[0]`
/// (assembled with spirv-as from the hostile review's module).
const TWO_ENTRY_POINTS: [u32; 213] = [
    0x07230203, 0x00010500, 0x00070000, 0x00000023, 0x00000000, 0x00020011, 0x00000001, 0x0003000e,
    0x00000000, 0x00000001, 0x0007000f, 0x00000005, 0x00000001, 0x00000061, 0x00000002, 0x00000003,
    0x00000004, 0x0007000f, 0x00000005, 0x00000005, 0x00000062, 0x00000002, 0x00000006, 0x00000004,
    0x00060010, 0x00000001, 0x00000011, 0x00000001, 0x00000001, 0x00000001, 0x00060010, 0x00000005,
    0x00000011, 0x00000001, 0x00000001, 0x00000001, 0x00040047, 0x00000002, 0x0000000b, 0x0000001b,
    0x00040047, 0x00000007, 0x00000006, 0x00000004, 0x00050048, 0x00000008, 0x00000000, 0x00000023,
    0x00000000, 0x00030047, 0x00000008, 0x00000002, 0x00040047, 0x00000004, 0x00000022, 0x00000000,
    0x00040047, 0x00000004, 0x00000021, 0x00000000, 0x00020013, 0x00000009, 0x00030021, 0x0000000a,
    0x00000009, 0x00040015, 0x0000000b, 0x00000020, 0x00000000, 0x00040017, 0x0000000c, 0x0000000b,
    0x00000003, 0x00040020, 0x0000000d, 0x00000001, 0x0000000c, 0x0004003b, 0x0000000d, 0x00000002,
    0x00000001, 0x0003001d, 0x00000007, 0x0000000b, 0x0003001e, 0x00000008, 0x00000007, 0x00040020,
    0x0000000e, 0x0000000c, 0x00000008, 0x0004003b, 0x0000000e, 0x00000004, 0x0000000c, 0x00040020,
    0x0000000f, 0x0000000c, 0x0000000b, 0x0004002b, 0x0000000b, 0x00000010, 0x00000000, 0x0004002b,
    0x0000000b, 0x00000011, 0x00000009, 0x0004002b, 0x0000000b, 0x00000012, 0x00001800, 0x0004001c,
    0x00000013, 0x0000000b, 0x00000012, 0x00040020, 0x00000014, 0x00000004, 0x00000013, 0x00040020,
    0x00000015, 0x00000004, 0x0000000b, 0x00040020, 0x00000016, 0x00000001, 0x0000000b, 0x0004003b,
    0x00000014, 0x00000003, 0x00000004, 0x0004003b, 0x00000014, 0x00000006, 0x00000004, 0x00050036,
    0x00000009, 0x00000001, 0x00000000, 0x0000000a, 0x000200f8, 0x00000017, 0x00050041, 0x00000016,
    0x00000018, 0x00000002, 0x00000010, 0x0004003d, 0x0000000b, 0x00000019, 0x00000018, 0x00050041,
    0x00000015, 0x0000001a, 0x00000003, 0x00000019, 0x0003003e, 0x0000001a, 0x00000011, 0x0004003d,
    0x0000000b, 0x0000001b, 0x0000001a, 0x00060041, 0x0000000f, 0x0000001c, 0x00000004, 0x00000010,
    0x00000010, 0x0003003e, 0x0000001c, 0x0000001b, 0x000100fd, 0x00010038, 0x00050036, 0x00000009,
    0x00000005, 0x00000000, 0x0000000a, 0x000200f8, 0x0000001d, 0x00050041, 0x00000016, 0x0000001e,
    0x00000002, 0x00000010, 0x0004003d, 0x0000000b, 0x0000001f, 0x0000001e, 0x00050042, 0x00000015,
    0x00000020, 0x00000006, 0x0000001f, 0x0003003e, 0x00000020, 0x00000011, 0x0004003d, 0x0000000b,
    0x00000021, 0x00000020, 0x00060041, 0x0000000f, 0x00000022, 0x00000004, 0x00000010, 0x00000010,
    0x0003003e, 0x00000022, 0x00000021, 0x000100fd, 0x00010038,
];

#[test]
fn each_entry_point_reaches_the_driver_with_its_own_workgroup_memory_only() {
    run_with(common::options(Path::Direct), "two entry points", |ctx| {
        let limit = ctx.info().limits.max_shared_memory_bytes;
        let out = ctx.enqueue_create_buffer::<u32>(1).unwrap();
        for entry in ["a", "b"] {
            let kernel = Kernel::builder(&TWO_ENTRY_POINTS).entry(entry).build(ctx);
            if limit < 24576 {
                assert_refused(kernel, &["maxComputeSharedMemorySize"]);
                continue;
            }
            // 48 KiB in the module, 24 KiB for each kernel: no validation
            // message (the harness fails on one), where the layer counts
            // every workgroup variable of the module it is given.
            let kernel = kernel.unwrap();
            out.enqueue_fill(0).unwrap();
            ctx.enqueue_function(&kernel, 1, &[out.arg()], &()).unwrap();
            assert_eq!(out.to_vec().unwrap(), [9], "entry {entry}");
        }
    });
}

#[test]
fn narrow_indices_reach_every_element_of_a_long_array() {
    run_with(common::options(Path::Direct), "narrow indices", |ctx| {
        let source = "#version 450\n\
            #extension GL_EXT_shader_explicit_arithmetic_types : require\n\
            layout(local_size_x = 1) in;\n\
            layout(std430, binding = 0) buffer Out { uint o[]; };\n\
            layout(push_constant) uniform P { uint k; } p;\n\
            layout(std430, binding = 1) buffer Big { uint big[40000]; };\n\
            shared uint s[256];\n\
            void main() {\n\
                for (uint j = 0u; j < 256u; j++) s[j] = j;\n\
                uint8_t i = uint8_t(p.k);\n\
                s[i] = 7777u;\n\
                o[0] = s[200]; o[1] = s[127]; o[2] = s[i];\n\
                uint f[256];\n\
                for (uint j = 0u; j < 256u; j++) f[j] = j;\n\
                o[3] = f[i];\n\
                big[39999] = 1u; big[32767] = 2u; big[35000] = 3u;\n\
                uint16_t h = uint16_t(p.k * 175u);\n\
                o[4] = big[h];\n\
            }\n";
        let kernel = Kernel::glsl(source).compile().build(ctx);
        let enabled = ctx.info().enabled.expect("a device vkcompute created");
        if !(enabled.shader_int8 && enabled.shader_int16) {
            assert!(
                kernel.is_err(),
                "int8/int16 without the features: {kernel:?}"
            );
            return;
        }
        let kernel = kernel.unwrap();
        let out = ctx.enqueue_create_buffer::<u32>(5).unwrap();
        // A fixed-length array in a storage block is clamped as a private
        // one is (clamp.rs looks at the array type, not its storage); a
        // private array of 40,000 takes lavapipe 90 s to compile.
        let big = ctx.enqueue_create_buffer::<u32>(40_000).unwrap();
        big.enqueue_fill(0).unwrap();
        // 200 as a uint8_t index; 200 * 175 = 35000 as a uint16_t one.
        ctx.enqueue_function(&kernel, 1, &[out.arg(), big.arg()], &200u32)
            .unwrap();
        assert_eq!(out.to_vec().unwrap(), [7777, 127, 7777, 200, 3]);
    });
}

#[test]
fn specialization_expressions_that_spirv_leaves_undefined_are_refused() {
    run_with(
        common::options(Path::Direct),
        "undefined expressions",
        |ctx| {
            let source = "#version 450\nlayout(local_size_x = 1) in;\n\
            layout(constant_id = 0) const int A = 7;\n\
            layout(constant_id = 1) const int Z = 1;\n\
            const int B = A / -1;\n\
            const int C = A % Z;\n\
            layout(std430, binding = 0) buffer Out { int o[]; };\n\
            void main() { o[0] = B; o[1] = C; }\n";
            let build = |a: i32, z: i32| {
                Kernel::glsl(source)
                    .optimization(vkcompute::GlslOptimization::None)
                    .compile()
                    .specialize(0, a)
                    .specialize(1, z)
                    .build(ctx)
            };
            // INT_MIN / -1 crashed the process (SIGFPE in the layer and in
            // lavapipe) before the expressions were checked.
            assert_refused(build(i32::MIN, 1), &["undefined", "divided by -1"]);
            assert_refused(build(7, 0), &["undefined", "division by zero"]);
            let fine = build(7, 3).unwrap();
            let out = ctx.enqueue_create_buffer::<i32>(2).unwrap();
            ctx.enqueue_function(&fine, 1, &[out.arg()], &()).unwrap();
            assert_eq!(out.to_vec().unwrap(), [-7, 1]);
            still_works(ctx);
        },
    );
}

/// Structs that each hold two of the one before, `depth` deep, in shared
/// memory.
fn nested(depth: usize) -> String {
    let mut source = String::from(
        "#version 450\nlayout(local_size_x = 1) in;\n\
         layout(std430, binding = 0) buffer Out { uint o[]; };\n\
         struct S0 { uint a; uint b; };\n",
    );
    for d in 1..=depth {
        source += &format!("struct S{d} {{ S{} a; S{} b; }};\n", d - 1, d - 1);
    }
    let path = ".a".repeat(depth + 1);
    source += &format!(
        "shared S{depth} big;\nvoid main() {{ big{path} = 1u; barrier(); o[0] = big{path} + 1u; }}\n"
    );
    source
}

#[test]
fn types_that_nest_exponentially_are_refused_at_once() {
    run_with(common::options(Path::Direct), "nested types", |ctx| {
        let shallow = Kernel::glsl(&nested(6)).compile().build(ctx).unwrap();
        let out = ctx.enqueue_create_buffer::<u32>(1).unwrap();
        ctx.enqueue_function(&shallow, 1, &[out.arg()], &())
            .unwrap();
        assert_eq!(out.to_vec().unwrap(), [2]);
        // 2^25 members once written out: took minutes and gigabytes in
        // reflection before the check.
        let words = Kernel::glsl(&nested(24))
            .optimization(vkcompute::GlslOptimization::None)
            .compile()
            .into_words()
            .unwrap();
        let started = std::time::Instant::now();
        assert_refused(Kernel::new(ctx, &words, "main"), &["nests more than"]);
        assert!(started.elapsed() < std::time::Duration::from_secs(10));
        still_works(ctx);
    });
}

/// A push-constant array whose length is a specialization expression.
const PUSH_EXPRESSION: &str = r#"#version 450
layout(local_size_x = 1) in;
layout(constant_id = 0) const uint N = 1u;
layout(std430, binding = 0) buffer Out { uint o[]; };
layout(push_constant) uniform P { uint a[N * 2u + 1u]; } p;
void main() { o[0] = p.a[N * 2u]; o[1] = p.a[o[5]]; }
"#;

#[test]
fn a_push_constant_array_sized_by_an_expression_reaches_the_driver_with_its_size() {
    run_with(common::options(Path::Direct), "push expression", |ctx| {
        let kernel = Kernel::glsl(PUSH_EXPRESSION)
            .compile()
            .specialize(0, 4u32)
            .build(ctx)
            .unwrap();
        assert_eq!(kernel.push_constant_size(), 36);
        let out = ctx.enqueue_create_buffer::<u32>(6).unwrap();
        out.enqueue_fill(0).unwrap();
        let push: [u32; 9] = [1, 2, 3, 4, 5, 6, 7, 8, 9];
        // The layer reported VUID-VkComputePipelineCreateInfo-layout-00703
        // while the length was an unfolded expression.
        ctx.enqueue_function(&kernel, 1, &[out.arg()], &push)
            .unwrap();
        assert_eq!(&out.to_vec().unwrap()[..2], [9, 1]);
    });
}
