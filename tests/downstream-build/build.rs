//! The crate's shaders, compiled, validated and typed by vkcompute-build.

fn main() {
    let built = vkcompute_build::Kernels::new("shaders")
        .include_dir("include")
        .define("FACTOR", "1.0")
        .shader("layout.comp", |s| s.specialize(0, 3u32))
        .shader("saxpy_typed.comp", |s| s.define("FACTOR", "2.0"))
        // The workgroup size of a `local_size_x_id` kernel, fixed here:
        // `weighted::LOCAL_SIZE` is [64, 1, 1].
        .shader("weighted.comp", |s| s.specialize(0, 64u32))
        .build();
    if let Err(e) = built {
        eprintln!("{e}");
        std::process::exit(1);
    }
}
