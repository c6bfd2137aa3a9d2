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
        layout(std140, binding = 1) uniform Scale { float factor; vec3 shift; uint n; } scale;\n\
        void main() { data[0] = scale.factor + scale.shift.x + float(scale.n); }\n";
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
    assert!(
        code.contains("assert!(::core::mem::size_of::<Scale>() == 32);"),
        "{code}"
    );
}
