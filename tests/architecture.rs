//! The structure ARCHITECTURE.md's "Code layout" section states, checked on the
//! sources: modules import one way through the layers (no cycle), no
//! source file is over 600 lines, unsafe code stays in `src/vk/` but for at
//! most ten blocks, and every unsafe block and impl says why it holds.
#![allow(clippy::unwrap_used, clippy::expect_used, reason = "a test")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, bottom first, and their top-level modules. A module may
/// import modules of its own layer (without a cycle) and of layers below.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "foundation",
        &[
            "error",
            "hazard",
            "bounds",
            "capabilities",
            "reflect",
            "spirv_rules",
            "spirv_source",
            "shaders",
        ],
    ),
    ("vulkan", &["vk"]),
    (
        "submission",
        &[
            "trace",
            "garbage",
            "batch_pool",
            "staging",
            "stream",
            "submitter",
            "spirv_check",
            "shader_build",
        ],
    ),
    ("resources", &["resource"]),
    ("operations", &["record", "transfer", "fill", "interop"]),
    (
        "public",
        &[
            "options", "context", "view", "buffer", "host", "display", "kernel", "glsl", "graph",
            "external",
        ],
    ),
];

const MAX_LINES: usize = 600;
const MAX_UNSAFE_BLOCKS_OUTSIDE_VK: usize = 10;

fn sources() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    let mut out = Vec::new();
    walk(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut out);
    out.sort();
    out
}

/// The top-level module a source file belongs to (`None` for lib.rs).
fn top_module(path: &Path) -> Option<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let rel = path.strip_prefix(&src).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (name != "lib").then(|| name.to_string())
}

/// The code of a file without comments and without its unit tests.
fn code(text: &str) -> String {
    let text = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => text,
    };
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `code` names through `crate::` and `$crate::`
/// paths, including those inside `use crate::{...}` groups.
fn imports(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(i) = code[at..].find("crate::") {
        let start = at + i + "crate::".len();
        at = start;
        if bytes.get(start) == Some(&b'{') {
            // A group: its top-level items, up to the matching brace.
            let mut depth = 0;
            let mut item = String::new();
            for &c in &bytes[start..] {
                match c {
                    b'{' => {
                        depth += 1;
                        if depth > 1 {
                            item.push('{');
                        }
                    }
                    b'}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                        item.push('}');
                    }
                    b',' if depth == 1 => {
                        out.extend(first_segment(&item));
                        item.clear();
                    }
                    _ => item.push(c as char),
                }
            }
            out.extend(first_segment(&item));
        } else {
            out.extend(first_segment(&code[start..]));
        }
    }
    out
}

/// The module a path starts with, where it starts with a lower-case name.
fn first_segment(path: &str) -> Option<String> {
    let name: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    name.starts_with(|c: char| c.is_ascii_lowercase())
        .then_some(name)
}

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer of tests/architecture.rs"))
}

#[test]
fn modules_import_one_way_through_the_layers() {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in sources() {
        let Some(module) = top_module(&path) else {
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        let deps = graph.entry(module.clone()).or_default();
        for dep in imports(&code(&text)) {
            if dep != module {
                deps.insert(dep);
            }
        }
    }
    let mut upward = Vec::new();
    for (module, deps) in &graph {
        for dep in deps {
            if layer_of(dep) > layer_of(module) {
                upward.push(format!(
                    "{module} ({}) imports {dep} ({})",
                    LAYERS[layer_of(module)].0,
                    LAYERS[layer_of(dep)].0
                ));
            }
        }
    }
    assert!(upward.is_empty(), "imports up the layers: {upward:#?}");
    // No cycle, within a layer either: a depth-first search finds no edge
    // back to a module still on its path.
    fn visit<'a>(
        module: &'a str,
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        state: &mut BTreeMap<&'a str, bool>,
        path: &mut Vec<&'a str>,
    ) {
        match state.get(module) {
            Some(true) => return,
            Some(false) => panic!("an import cycle: {} -> {module}", path.join(" -> ")),
            None => {}
        }
        state.insert(module, false);
        path.push(module);
        for dep in graph.get(module).into_iter().flatten() {
            visit(dep, graph, state, path);
        }
        path.pop();
        state.insert(module, true);
    }
    let mut state = BTreeMap::new();
    for module in graph.keys() {
        visit(module, &graph, &mut state, &mut Vec::new());
    }
    // Every layer names only modules that exist.
    for (layer, modules) in LAYERS {
        for module in *modules {
            assert!(
                *module == "shaders" || graph.contains_key(*module),
                "layer {layer} names `{module}`, which is not a module of src/"
            );
        }
    }
}

#[test]
fn no_source_file_is_over_600_lines() {
    let long: Vec<String> = sources()
        .into_iter()
        .filter_map(|path| {
            let lines = std::fs::read_to_string(&path).unwrap().lines().count();
            (lines > MAX_LINES).then(|| format!("{} ({lines} lines)", path.display()))
        })
        .collect();
    assert!(long.is_empty(), "files over {MAX_LINES} lines: {long:#?}");
}

#[test]
fn unsafe_code_stays_in_the_vulkan_layer_and_says_why() {
    let mut outside = Vec::new();
    let mut unexplained = Vec::new();
    for path in sources() {
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let in_vk = top_module(&path).as_deref() == Some("vk");
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap();
            let block = code.contains("unsafe {") || code.contains("unsafe impl");
            if !block {
                continue;
            }
            let place = format!("{}:{}", path.display(), i + 1);
            // The reason stands in the comment lines just above.
            let above = &lines[i.saturating_sub(8)..=i];
            if !above.iter().any(|l| l.contains("SAFETY:")) {
                unexplained.push(place.clone());
            }
            if !in_vk && code.contains("unsafe {") {
                outside.push(place);
            }
        }
    }
    assert!(
        unexplained.is_empty(),
        "unsafe without a SAFETY reason: {unexplained:#?}"
    );
    assert!(
        outside.len() <= MAX_UNSAFE_BLOCKS_OUTSIDE_VK,
        "{} unsafe blocks outside src/vk (at most {MAX_UNSAFE_BLOCKS_OUTSIDE_VK}): {outside:#?}",
        outside.len()
    );
    // The crate denies unsafe code but where it allows it.
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    assert!(lib.contains("#![deny(unsafe_code)]"));
}
