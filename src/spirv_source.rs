//! SPIR-V modules written as Rust source, one `pub static NAME: &[u32]` per
//! module (word-aligned by construction): shared by this crate's `build.rs`
//! and the `build` feature's `compile_shaders`.

use std::fmt::Write as _;

/// The name of the static for a shader file's stem: `reduce_sum` becomes
/// `REDUCE_SUM`; characters that cannot be in an identifier become `_`.
pub fn static_name(stem: &str) -> String {
    stem.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_uppercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Appends `pub static {name}: &[u32] = &[...];` holding `words`, documented
/// as the SPIR-V of `shown` (a file name).
pub fn append_static(generated: &mut String, name: &str, shown: &str, words: &[u32]) {
    // Writing to a String cannot fail.
    let _ = writeln!(generated, "/// SPIR-V of `{shown}`.");
    let _ = writeln!(generated, "pub static {name}: &[u32] = &[");
    for chunk in words.chunks(8) {
        let line: Vec<String> = chunk.iter().map(|w| format!("{w:#010x}")).collect();
        let _ = writeln!(generated, "    {},", line.join(", "));
    }
    let _ = writeln!(generated, "];");
}
