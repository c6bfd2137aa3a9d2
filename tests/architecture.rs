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
            "capabilities",
            "reflect",
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
            "recorder",
            "stream",
            "spirv_check",
            "shader_build",
        ],
    ),
    ("resources", &["resource"]),
    ("operations", &["enqueue", "transfer", "fill", "interop"]),
    (
        "public",
        &[
            "options",
            "context",
            "view",
            "buffer",
            "host",
            "display",
            "kernel",
            "glsl",
            "graph",
            "external",
            "event",
            "guide",
            "testing",
            "indirect",
            "introspect",
        ],
    ),
];

const MAX_LINES: usize = 600;
const MAX_UNSAFE_BLOCKS_OUTSIDE_VK: usize = 10;

fn sources() -> Vec<PathBuf> {
    sources_under(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

/// The `.rs` files under `dir`, sorted.
fn sources_under(dir: &Path) -> Vec<PathBuf> {
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
    walk(dir, &mut out);
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

/// The first segments of the paths `code` names through `crate::` and
/// `$crate::`, including those inside `use crate::{...}` groups: module
/// names, or names the crate root re-exports.
fn crate_paths(code: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let bytes = code.as_bytes();
    let mut at = 0;
    while let Some(i) = code[at..].find("crate::") {
        let start = at + i + "crate::".len();
        at = start;
        // `crate::` inside a longer name (`my_crate::x`) is no crate path.
        let before = code[..start - "crate::".len()].chars().next_back();
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            continue;
        }
        if bytes.get(start) == Some(&b'{') {
            out.extend(
                group_items(&code[start..])
                    .iter()
                    .filter_map(|i| first_segment(i)),
            );
        } else {
            out.extend(first_segment(&code[start..]));
        }
    }
    out
}

/// The top-level items of the group `text` starts with (`{a::B, c}`), up
/// to its matching brace.
fn group_items(text: &str) -> Vec<String> {
    let mut items = Vec::new();
    let mut depth = 0;
    let mut item = String::new();
    for c in text.chars() {
        match c {
            '{' => {
                depth += 1;
                if depth > 1 {
                    item.push('{');
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    break;
                }
                item.push('}');
            }
            ',' if depth == 1 => items.push(std::mem::take(&mut item)),
            _ => item.push(c),
        }
    }
    items.push(item);
    items.retain(|i| !i.trim().is_empty());
    items
}

/// The name a path starts with.
fn first_segment(path: &str) -> Option<String> {
    let name: String = path
        .trim_start()
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
        .collect();
    (!name.is_empty()).then_some(name)
}

/// What a name at the crate root is: one of its modules, or a name that
/// lib.rs re-exports from one (`Some(module)`) or from another crate
/// (`None`), read from lib.rs's `mod` items and its top-level `use` and
/// `pub use` items, groups included.
fn root_names(lib: &str) -> BTreeMap<String, Option<String>> {
    let lib = code(lib);
    let mut modules = BTreeSet::new();
    for line in lib.lines() {
        let line = line.trim_start_matches("pub ");
        if let Some(rest) = line.strip_prefix("mod ") {
            modules.extend(first_segment(rest));
        }
    }
    let mut names: BTreeMap<String, Option<String>> = modules
        .iter()
        .map(|m| (m.clone(), Some(m.clone())))
        .collect();
    // Top-level items only: a `use` inside a module block is indented.
    let mut at = 0;
    while at < lib.len() {
        let rest = &lib[at..];
        let line_end = rest.find('\n').map_or(lib.len(), |i| at + i + 1);
        let item = rest
            .strip_prefix("pub use ")
            .or_else(|| rest.strip_prefix("use "));
        let (Some(item), Some(end)) = (item, rest.find(';')) else {
            at = line_end;
            continue;
        };
        let path = &item[..end - (rest.len() - item.len())];
        at += end + 1;
        let path = path
            .trim()
            .trim_start_matches("crate::")
            .trim_start_matches("self::");
        let module = first_segment(path).unwrap();
        let from = modules.contains(&module).then(|| module.clone());
        for leaf in leaves(path) {
            names.insert(leaf, from.clone());
        }
    }
    names
}

/// The names a `use` path brings into scope: the last segment of each of
/// its leaves, or the name after `as`.
fn leaves(path: &str) -> Vec<String> {
    match path.find('{') {
        Some(open) => group_items(&path[open..])
            .iter()
            .flat_map(|item| leaves(item.trim()))
            .collect(),
        None => {
            let path = path.trim();
            let name = match path.split_once(" as ") {
                Some((_, alias)) => alias.trim(),
                None => path.rsplit("::").next().unwrap().trim(),
            };
            vec![name.to_string()]
        }
    }
}

/// The top-level modules `code` imports: the modules its `crate::` paths
/// name, directly or through a re-export of the crate root (`roots`, from
/// [`root_names`]). Names re-exported from other crates import no module.
fn imports(code: &str, roots: &BTreeMap<String, Option<String>>) -> BTreeSet<String> {
    crate_paths(code)
        .into_iter()
        .filter_map(|name| match roots.get(&name) {
            Some(module) => module.clone(),
            None => {
                panic!("`crate::{name}` is neither a module of lib.rs nor one of its re-exports")
            }
        })
        .collect()
}

fn layer_of(module: &str) -> usize {
    LAYERS
        .iter()
        .position(|(_, modules)| modules.contains(&module))
        .unwrap_or_else(|| panic!("module `{module}` is in no layer of tests/architecture.rs"))
}

/// The module graph of `files` (each a top-level module and the code of
/// one of its files): each module and the other modules it imports.
fn module_graph(
    files: &[(String, String)],
    roots: &BTreeMap<String, Option<String>>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, code) in files {
        let deps = graph.entry(module.clone()).or_default();
        deps.extend(imports(code, roots).into_iter().filter(|dep| dep != module));
    }
    graph
}

/// The imports of `graph` that go up the layers, as sentences.
fn upward_imports(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut upward = Vec::new();
    for (module, deps) in graph {
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
    upward
}

fn lib_rs() -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap()
}

#[test]
fn modules_import_one_way_through_the_layers() {
    let files: Vec<(String, String)> = sources()
        .iter()
        .filter_map(|path| {
            let module = top_module(path)?;
            Some((module, code(&std::fs::read_to_string(path).unwrap())))
        })
        .collect();
    let graph = module_graph(&files, &root_names(&lib_rs()));
    let upward = upward_imports(&graph);
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
    assert!(lib_rs().contains("#![deny(unsafe_code)]"));
}

/// The kernel model (vkcompute-spirv), below the runtime and vkcompute-build:
/// no Vulkan, no file over 600 lines, and `unsafe` only in its binding of
/// the SPIRV-Tools validator, each block with its reason.
#[test]
fn the_kernel_model_has_no_vulkan_and_keeps_unsafe_in_the_validator_binding() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("vkcompute-spirv");
    let manifest = std::fs::read_to_string(root.join("Cargo.toml")).unwrap();
    let dependencies = manifest
        .split("[dependencies]")
        .nth(1)
        .and_then(|rest| rest.split("\n[").next())
        .unwrap();
    for vulkan in ["ash", "vkcompute ", "gpu-allocator"] {
        assert!(
            !dependencies.contains(vulkan),
            "vkcompute-spirv depends on {vulkan}"
        );
    }
    let lib = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    assert!(lib.contains("#![deny(unsafe_code)]"));
    for path in sources_under(&root.join("src")) {
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert!(
            lines.len() <= MAX_LINES,
            "{} has {} lines",
            path.display(),
            lines.len()
        );
        let validator = path.ends_with("validate.rs");
        for (i, line) in lines.iter().enumerate() {
            let code = line.split("//").next().unwrap();
            if !code.contains("unsafe {") && !code.contains("unsafe impl") {
                continue;
            }
            assert!(
                validator,
                "unsafe outside validate.rs: {}:{}",
                path.display(),
                i + 1
            );
            let above = &lines[i.saturating_sub(8)..=i];
            assert!(
                above.iter().any(|l| l.contains("SAFETY:")),
                "unsafe without a SAFETY reason: {}:{}",
                path.display(),
                i + 1
            );
        }
    }
}

/// One synthetic file of module `module`, for the tests of the checker.
fn planted(module: &str, code: &str) -> Vec<(String, String)> {
    vec![(module.to_string(), code.to_string())]
}

#[test]
fn root_names_map_re_exports_to_their_modules() {
    let roots = root_names(&lib_rs());
    let defined_in = |name: &str| roots.get(name).cloned().flatten();
    assert_eq!(defined_in("DeviceContext").as_deref(), Some("context"));
    assert_eq!(defined_in("DeviceInfo").as_deref(), Some("vk"));
    // From a group spread over several lines.
    let spread =
        root_names("mod a;\nmod b;\npub use a::{\n    One,\n    Two,\n};\npub use b::Three;\n");
    assert_eq!(spread["Two"].as_deref(), Some("a"));
    assert_eq!(spread["Three"].as_deref(), Some("b"));
    // A module is itself; another crate's re-export is no module.
    assert_eq!(defined_in("vk").as_deref(), Some("vk"));
    assert!(roots.contains_key("ash") && defined_in("ash").is_none());
    // The names of a module block (`build`) are not at the root.
    assert!(!roots.contains_key("compile_glsl"));
}

#[test]
fn an_import_of_a_public_type_through_the_crate_root_in_the_vulkan_layer_is_reported() {
    let roots = root_names(&lib_rs());
    for code in [
        "use crate::DeviceContext;\nfn f(_: &DeviceContext) {}",
        "use crate::{vk::Device, DeviceContext};",
        "fn f(_: &crate::DeviceContext) {}",
    ] {
        let upward = upward_imports(&module_graph(&planted("vk", code), &roots));
        assert_eq!(
            upward,
            ["vk (vulkan) imports context (public)"],
            "planted in vk: {code}"
        );
    }
}

#[test]
fn an_import_of_a_lower_layer_through_the_crate_root_passes() {
    let roots = root_names(&lib_rs());
    let files = [
        planted("vk", "use crate::{Error, Result};\nuse crate::ash::vk;"),
        planted("buffer", "use crate::{DeviceContext, DeviceInfo, Error};"),
    ]
    .concat();
    let graph = module_graph(&files, &roots);
    assert_eq!(graph["vk"], BTreeSet::from(["error".to_string()]));
    assert_eq!(
        graph["buffer"],
        BTreeSet::from(["context", "vk", "error"].map(String::from))
    );
    // buffer imports context, which is of its own layer: allowed.
    assert!(upward_imports(&graph).is_empty());
}
