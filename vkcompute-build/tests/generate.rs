//! `Kernels::generate` on shader trees made by each test: diagnostics with
//! file and line, includes and defines, `.spv` files taken as they are,
//! specialization defaults, targets, and the layouts of generated structs.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "tests")]

use std::path::PathBuf;

use vkcompute_build::{Kernels, Target};

/// A fresh folder with `files` (path, content) in it.
fn tree(name: &str, files: &[(&str, &str)]) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("vkcompute-build-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    for (path, content) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, content).unwrap();
    }
    dir
}

fn generated(kernels: &Kernels, dir: &std::path::Path) -> String {
    let built = kernels.generate(dir).unwrap();
    std::fs::read_to_string(built.path).unwrap()
}

const ADD: &str = "#version 450\nlayout(local_size_x = 64) in;\n\
    layout(std430, binding = 0) buffer Data { uint data[]; };\n\
    layout(push_constant) uniform Params { uint n; } params;\n\
    void main() { uint i = gl_GlobalInvocationID.x; if (i < params.n) data[i] += VALUE; }\n";

#[test]
fn compile_errors_print_as_file_line_message_relative_to_the_root() {
    let dir = tree(
        "messages",
        &[
            (
                "shaders/sub/two.comp",
                "#version 450\nlayout(local_size_x = 1) in;\nvoid main() {\n  nope();\n  uint x = nada;\n}\n",
            ),
            (
                "shaders/inc.comp",
                "#version 450\n#include \"helper.glsl\"\nlayout(local_size_x = 1) in;\nvoid main() {}\n",
            ),
            ("shaders/helper.glsl", "uint helper() { return missing; }\n"),
        ],
    );
    let e = Kernels::new(dir.join("shaders"))
        .generate(&dir)
        .unwrap_err();
    let text = e.to_string();
    // One line a problem, each `file:line: message`, the file relative to
    // the shader root (an included file by its own name): no compiler
    // header, no absolute path.
    let d = e.diagnostics();
    assert_eq!(text, d.join("\n"));
    for (file, line, word) in [
        ("helper.glsl", 1, "'missing' : undeclared identifier"),
        (
            "sub/two.comp",
            4,
            "'nope' : no matching overloaded function",
        ),
        ("sub/two.comp", 5, "'nada' : undeclared identifier"),
    ] {
        let want = format!("{file}:{line}: error: {word}");
        assert!(d.iter().any(|m| m.starts_with(&want)), "{want}\n{text}");
    }
    assert!(
        d.iter()
            .all(|m| m.starts_with("helper.glsl:1: ") || m.starts_with("sub/two.comp:")),
        "{text}"
    );
    assert!(!text.contains(&dir.display().to_string()), "{text}");
    assert!(!text.contains("compilation error"), "{text}");
}

#[test]
fn a_compile_error_names_the_file_and_line() {
    let dir = tree(
        "errors",
        &[
            ("good.comp", &ADD.replace("VALUE", "1u")),
            (
                "sub/bad.comp",
                "#version 450\nlayout(local_size_x = 1) in;\nvoid main() { nope(); }\n",
            ),
        ],
    );
    let e = Kernels::new(dir.join("")).generate(&dir).unwrap_err();
    let text = e.to_string();
    assert_eq!(e.diagnostics().len(), 1, "{text}");
    assert!(text.contains("bad.comp:3:"), "{text}");
    assert!(text.contains("nope"), "{text}");
}

#[test]
fn defines_includes_and_per_shader_options_apply() {
    let dir = tree(
        "defines",
        &[
            (
                "shaders/one.comp",
                &ADD.replace("VALUE", "VALUE + helper()"),
            ),
            (
                "shaders/two.comp",
                &ADD.replace("VALUE", "VALUE + helper()"),
            ),
            ("inc/helper.glsl", "uint helper() { return EXTRA; }\n"),
        ],
    );
    let kernels = Kernels::new(dir.join("shaders"))
        .include_dir(dir.join("inc"))
        .define("VALUE", "1u")
        .define("EXTRA", "0u")
        .shader("two.comp", |s| s.define("EXTRA", "5u"));
    // The include is needed: without it, neither compiles.
    let missing = Kernels::new(dir.join("shaders")).define("VALUE", "1u");
    let sources = [
        ("one.comp", "#include \"helper.glsl\"\n"),
        ("two.comp", "#include \"helper.glsl\"\n"),
    ];
    for (file, include) in sources {
        let path = dir.join("shaders").join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text.replacen("layout(local", &format!("{include}layout(local"), 1);
        std::fs::write(&path, text).unwrap();
    }
    let e = missing.generate(&dir).unwrap_err();
    assert_eq!(e.diagnostics().len(), 2, "{e}");
    assert!(e.to_string().contains("helper.glsl"), "{e}");
    let code = generated(&kernels, &dir);
    assert!(
        code.contains("pub mod one {") && code.contains("pub mod two {"),
        "{code}"
    );
    assert!(code.contains("pub const LABEL: &str = \"two.comp\";"));
    // Options for a file that does not exist are an error.
    let e = Kernels::new(dir.join("shaders"))
        .shader("three.comp", |s| s)
        .generate(&dir)
        .unwrap_err();
    assert!(e.to_string().contains("three.comp"), "{e}");
}

#[test]
fn spirv_files_are_taken_as_they_are_and_validated() {
    let dir = tree("spv", &[("add.comp", &ADD.replace("VALUE", "1u"))]);
    let code = generated(&Kernels::new(&dir), &dir);
    // The words of the generated module, as a .spv file beside a bad one.
    let start = code.find("SPIRV: &[u32] = &[").unwrap() + "SPIRV: &[u32] = &[".len();
    let end = start + code[start..].find(']').unwrap();
    let words: Vec<u32> = code[start..end]
        .split(',')
        .map(|w| w.trim().parse().unwrap())
        .collect();
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    let spv_dir = tree("spv2", &[]);
    std::fs::create_dir_all(&spv_dir).unwrap();
    std::fs::write(spv_dir.join("copy.spv"), &bytes).unwrap();
    let copied = generated(&Kernels::new(&spv_dir), &spv_dir);
    assert!(copied.contains("pub mod copy {"), "{copied}");
    assert!(copied.contains(&code[start..end]));
    // A module SPIRV-Tools refuses fails the build, naming the file: the
    // same words with the bound cut below the ids used.
    let mut broken = bytes.clone();
    broken[12..16].copy_from_slice(&2u32.to_le_bytes());
    std::fs::write(spv_dir.join("broken.spv"), &broken).unwrap();
    let e = Kernels::new(&spv_dir).generate(&spv_dir).unwrap_err();
    assert!(e.to_string().starts_with("broken.spv: SPIRV-Tools"), "{e}");
}

#[test]
fn specialization_defaults_are_set_and_checked() {
    let source = "#version 450\nlayout(local_size_x = 1) in;\n\
        layout(constant_id = 7) const uint COUNT = 4u;\n\
        layout(std430, binding = 0) buffer Data { uint data[]; };\n\
        void main() { data[0] = COUNT; }\n";
    let dir = tree("spec", &[("spec.comp", source)]);
    let default = generated(&Kernels::new(&dir), &dir);
    let changed = generated(
        &Kernels::new(&dir).shader("spec.comp", |s| s.specialize(7, 9u32)),
        &dir,
    );
    assert!(
        default.contains("pub const SPEC_COUNT: u32 = 7;"),
        "{default}"
    );
    assert_ne!(default, changed);
    let e = Kernels::new(&dir)
        .shader("spec.comp", |s| s.specialize(8, 1u32))
        .generate(&dir)
        .unwrap_err();
    assert!(
        e.to_string().contains("no specialization constant 8"),
        "{e}"
    );
    let e = Kernels::new(&dir)
        .shader("spec.comp", |s| s.specialize(7, 1u64))
        .generate(&dir)
        .unwrap_err();
    assert!(
        e.to_string().contains("a 32-bit unsigned integer") && e.to_string().contains("U64(1)"),
        "{e}"
    );
}

#[test]
fn a_vulkan_1_3_target_is_validated_for_vulkan_1_3_only() {
    let dir = tree("target", &[("add.comp", &ADD.replace("VALUE", "1u"))]);
    let v12 = generated(&Kernels::new(&dir), &dir);
    let v13 = generated(&Kernels::new(&dir).target(Target::Vulkan1_3), &dir);
    assert!(v12.contains("Vulkan 1.2 and 1.3"), "{v12}");
    assert!(v13.contains("(SPIRV-Tools, Vulkan 1.3)"), "{v13}");
}

#[test]
fn generated_structs_follow_the_shaders_offsets() {
    let source = "#version 450\n#extension GL_ARB_gpu_shader_fp64 : require\n\
        layout(local_size_x = 1) in;\n\
        struct Item { vec3 pos; float w; uvec2 ids; };\n\
        layout(std430, binding = 0) buffer Items { Item items[]; };\n\
        layout(std430, binding = 1) buffer Dirs { vec3 dirs[]; };\n\
        layout(std430, binding = 2) buffer Mixed { uint count; float rest[]; } mixed;\n\
        layout(push_constant) uniform Push { double d; uint n; } p;\n\
        void main() { items[0].w = float(p.d) + dirs[0].x + mixed.rest[0] + float(p.n); }\n";
    let dir = tree("layout", &[("layout.comp", source)]);
    let code = generated(&Kernels::new(&dir), &dir);
    // Item: vec3 at 0, float at 12, uvec2 at 16: 24 bytes, natural layout.
    assert!(code.contains("pub struct Item {"), "{code}");
    assert!(
        code.contains("assert!(::core::mem::size_of::<Item>() == 24);"),
        "{code}"
    );
    assert!(
        code.contains("assert!(::core::mem::offset_of!(Item, ids) == 16);"),
        "{code}"
    );
    // vec3 elements have a stride of 16: a padded element struct.
    assert!(code.contains("pub struct DirsElement {"), "{code}");
    assert!(
        code.contains("assert!(::core::mem::size_of::<DirsElement>() == 16);"),
        "{code}"
    );
    assert!(code.contains("pub _pad0: [u8; 4],"), "{code}");
    assert!(
        code.contains("DirsElement { value, _pad0: [0; 4] }"),
        "{code}"
    );
    // 12 bytes with an 8-byte member: packed to keep its exact size.
    assert!(code.contains("#[repr(C, packed)]"), "{code}");
    assert!(
        code.contains("assert!(::core::mem::size_of::<Push>() == 12);"),
        "{code}"
    );
    // A block that is not one runtime array takes a KernelArg.
    assert!(code.contains("mixed: vkcompute::KernelArg<'_>"), "{code}");
    // std430 rounds Item's array stride up to its 16-byte alignment: 32.
    assert!(
        code.contains("items: &vkcompute::DeviceBuffer<ItemsElement>"),
        "{code}"
    );
    assert!(
        code.contains("assert!(::core::mem::size_of::<ItemsElement>() == 32);"),
        "{code}"
    );
    assert!(
        code.contains("dirs: &vkcompute::DeviceBuffer<DirsElement>"),
        "{code}"
    );
}

#[test]
fn a_uniform_block_is_a_typed_std140_struct() {
    let source = "#version 450\nlayout(local_size_x = 1) in;\n\
        layout(std430, binding = 0) buffer Data { float data[]; };\n\
        layout(std140, binding = 1) uniform Scale { float factor; vec3 shift; uint n; float w[3]; } scale;\n\
        void main() { data[0] = scale.factor + scale.shift.x + float(scale.n) + scale.w[2]; }\n";
    let dir = tree("uniform", &[("u.comp", source)]);
    let code = generated(&Kernels::new(&dir), &dir);
    assert!(
        code.contains("scale: &vkcompute::DeviceBuffer<Scale>"),
        "{code}"
    );
    assert!(
        code.contains("assert!(::core::mem::offset_of!(Scale, shift) == 16);"),
        "{code}"
    );
    // std140 gives each float of `w` a 16-byte slot: an element wrapper,
    // and the struct ends with the last slot's padding (80 bytes; the block
    // spans 68).
    for line in [
        "pub w: [ScaleWElement; 3],",
        "assert!(::core::mem::offset_of!(Scale, w) == 32);",
        "assert!(::core::mem::size_of::<Scale>() == 80);",
        "pub struct ScaleWElement {",
        "ScaleWElement { value, _pad0: [0; 12] }",
    ] {
        assert!(code.contains(line), "{line}\n{code}");
    }
}

#[test]
fn hlsl_compute_shaders_compile_beside_glsl() {
    let source = "// y = x * factor, x in set 0 and y in set 1.\n\
        struct Params { float factor; uint n; };\n\
        [[vk::push_constant]] ConstantBuffer<Params> params;\n\
        StructuredBuffer<float> x : register(t1, space0);\n\
        RWStructuredBuffer<float> y : register(u0, space1);\n\
        [numthreads(64, 1, 1)]\n\
        void main(uint3 id : SV_DispatchThreadID) {\n\
            if (id.x < params.n) y[id.x] = x[id.x] * params.factor;\n\
        }\n";
    let dir = tree("hlsl", &[("scale.hlsl", source)]);
    let code = generated(&Kernels::new(&dir), &dir);
    // (set, binding) order: `x` (set 0, binding 1), then `y` (set 1,
    // binding 0); the push-constant block's struct; `main` the entry.
    let signature = "x: &vkcompute::DeviceBuffer<f32>,\n            \
        y: &vkcompute::DeviceBuffer<f32>,\n            push: &Params,";
    assert!(code.contains(signature), "{code}");
    assert!(
        code.contains("`y`: set 1, binding 0, elements of `f32`, written"),
        "{code}"
    );
    assert!(
        code.contains("`x`: binding 1, elements of `f32`, read only"),
        "{code}"
    );
    assert!(code.contains("pub const ENTRY: &str = \"main\";"), "{code}");
    assert!(
        code.contains("pub const LOCAL_SIZE: [u32; 3] = [64, 1, 1];"),
        "{code}"
    );
    // Another entry point, from the shader's options; HLSL has no
    // `#version`, and its errors are `file:line: message` too.
    let renamed = source.replace("void main(", "void scale(");
    let dir = tree("hlsl-entry", &[("k/scale.hlsl", &renamed)]);
    let code = generated(
        &Kernels::new(&dir).shader("k/scale.hlsl", |s| s.entry("scale")),
        &dir,
    );
    assert!(
        code.contains("pub const ENTRY: &str = \"scale\";"),
        "{code}"
    );
    let e = Kernels::new(&dir).generate(&dir).unwrap_err();
    assert_eq!(
        e.to_string(),
        "k/scale.hlsl: the HLSL source defines no function `main`, the entry point"
    );
}

#[test]
fn a_fixed_size_storage_block_is_a_typed_std430_struct() {
    let source = "#version 450\nlayout(local_size_x = 16) in;\n\
        layout(std430, binding = 0) buffer Counters { uint total; uint bins[16]; vec3 dirs[2]; } counters;\n\
        layout(std430, binding = 1) readonly buffer Limits { uint most; } limits;\n\
        layout(std430, binding = 2) buffer Mixed { uint count; float rest[]; } mixed;\n\
        void main() {\n\
            uint i = gl_LocalInvocationID.x;\n\
            atomicAdd(counters.bins[i], 1u);\n\
            atomicAdd(counters.total, min(i, limits.most));\n\
            counters.dirs[i % 2u].y = mixed.rest[i] + float(mixed.count);\n\
        }\n";
    let dir = tree("fixed", &[("hist.comp", source)]);
    let code = generated(&Kernels::new(&dir), &dir);
    // std430: `bins` right after `total`, a uint array at a stride of 4
    // (no wrapper); vec3 at a stride of 16 (a padded element).
    for line in [
        "counters: &vkcompute::DeviceBuffer<Counters>,",
        "limits: &vkcompute::DeviceBuffer<Limits>,",
        "mixed: vkcompute::KernelArg<'_>,",
        "pub bins: [u32; 16],",
        "pub dirs: [CountersDirsElement; 2],",
        "assert!(::core::mem::offset_of!(Counters, bins) == 4);",
        "assert!(::core::mem::offset_of!(Counters, dirs) == 80);",
        // The block spans 108 bytes; the last element's padding makes 112.
        "assert!(::core::mem::size_of::<Counters>() == 112);",
        "assert!(::core::mem::size_of::<CountersDirsElement>() == 16);",
        "`counters`: binding 0, a storage buffer (written) holding one `Counters` (std430);",
        "`limits`: binding 1, a storage buffer (read only) holding one `Limits` (std430);",
        "&[counters.arg(), limits.arg(), mixed],",
    ] {
        assert!(code.contains(line), "{line}\n{code}");
    }
}

#[test]
fn spec_lists_each_settable_constant_with_its_built_in_value() {
    let source = "#version 450\n\
        #extension GL_EXT_shader_explicit_arithmetic_types : require\n\
        layout(local_size_x_id = 5) in;\n\
        layout(constant_id = 0) const uint N = 4u;\n\
        layout(constant_id = 1) const bool useGain = true;\n\
        layout(constant_id = 2) const float GAIN = 1.5;\n\
        layout(constant_id = 3) const int OFFSET = -2;\n\
        layout(constant_id = 4) const double D = 0.25;\n\
        layout(constant_id = 6) const int64_t BIG = -5000000000l;\n\
        layout(constant_id = 7) const float16_t HALF = float16_t(0.5);\n\
        layout(std430, binding = 0) buffer Data { float data[]; };\n\
        void main() {\n\
            uint i = gl_GlobalInvocationID.x;\n\
            float g = useGain ? GAIN : 1.0;\n\
            data[i] = g * float(N) + float(OFFSET) + float(D) + float(BIG) + float(HALF);\n\
        }\n";
    let dir = tree("specstruct", &[("s.comp", source)]);
    let code = generated(
        &Kernels::new(&dir).shader("s.comp", |s| s.specialize(0, 8u32).specialize(5, 32u32)),
        &dir,
    );
    for line in [
        "pub n: u32,",
        "pub use_gain: bool,",
        "pub gain: f32,",
        "pub offset: i32,",
        "pub d: f64,",
        "pub local_size_x: u32,",
        "pub big: i64,",
        "Spec { n: 8, use_gain: true, gain: 1.5, offset: -2, d: 0.25, local_size_x: 32, big: -5000000000 }",
        "let Spec { n, use_gain, gain, offset, d, local_size_x, big } = *spec;",
        ".specialize(SPEC_USE_GAIN, use_gain)",
        ".specialize(SPEC_LOCAL_SIZE_X, local_size_x)",
        "pub const SPEC_USE_GAIN: u32 = 1;",
        "pub const LOCAL_SIZE: [u32; 3] = [32, 1, 1];",
        "/// `useGain`, `constant_id = 1` (built in: `true`).",
        "/// `constant_id = 5`, the workgroup size in x (built in: `32`).",
        "not in `Spec` (a 16-bit float; the id `vkcompute::KernelBuilder::specialize` takes).",
        "`HALF`, `constant_id = 7` (a 16-bit float)",
    ] {
        assert!(code.contains(line), "{line}\n{code}");
    }
    assert!(!code.contains("pub half:"), "{code}");
    // A shader without constants: an empty `Spec`, and `load_with` still.
    let dir = tree("nospec", &[("add.comp", &ADD.replace("VALUE", "1u"))]);
    let code = generated(&Kernels::new(&dir), &dir);
    assert!(code.contains("pub struct Spec {\n    }"), "{code}");
    assert!(code.contains("pub fn load_with("), "{code}");
}

#[test]
fn a_printf_record_buffer_is_no_parameter() {
    let source = "#version 450\n#extension GL_EXT_debug_printf : require\n\
        layout(local_size_x = 1) in;\n\
        layout(std430, binding = 0) buffer Data { uint data[]; };\n\
        void main() { debugPrintfEXT(\"data[0] = %u\", data[0]); data[0] += 1u; }\n";
    let dir = tree("printf", &[("p.comp", source)]);
    let code = generated(&Kernels::new(&dir), &dir);
    assert!(
        code.contains("&[data.arg()], &())"),
        "only `data` is an argument:\n{code}"
    );
}
