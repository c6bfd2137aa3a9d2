//! vkcompute-mpi's structure, checked on its sources as the core's
//! `tests/architecture.rs` checks the core's: the layers import one way
//! (no module imports one above it) and without a cycle, `unsafe` code is
//! in the raw layer only and says why it holds, `impl Communicator` is in
//! the façade only, and no source file is over 600 lines.
//!
//! The layers, bottom first (the crate's README, "Design"):
//!
//! - foundation: `error`, `element`, `kept` (allocations kept for reuse);
//! - raw: `raw`, every call into MPI, libc and vkcompute's unchecked
//!   entry points, and the only `unsafe`;
//! - wire: `wire`, the header, the tags and the point-to-point protocol;
//! - plan: `plan`, the pure planner (algorithm, chunks, pieces, steps);
//! - transport: `transport`, how data meets MPI or the peers (staged,
//!   mapped, same-node), with the copies and kernels on the device;
//! - exec: `exec`, the executor of a collective's steps in pieces;
//! - facade: `communicator`, the public `Communicator` and `Request`.
//!
//! A source names another module only as `crate::module::...` (never
//! through a name the crate root re-exports), which is what makes the
//! imports readable from the text.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    reason = "a test: a failure fails it"
)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const LAYERS: &[(&str, &[&str])] = &[
    ("foundation", &["error", "element", "kept"]),
    ("raw", &["raw"]),
    ("wire", &["wire"]),
    ("plan", &["plan"]),
    ("transport", &["transport"]),
    ("exec", &["exec"]),
    ("facade", &["communicator"]),
];

const MAX_LINES: usize = 600;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `src/`, sorted.
fn sources() -> Vec<PathBuf> {
    let mut todo = vec![src()];
    let mut out = Vec::new();
    while let Some(dir) = todo.pop() {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The top-level module of a file under `src/` (`None` for lib.rs).
fn module_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src()).unwrap();
    let first = rel.components().next()?.as_os_str().to_str()?;
    let name = first.trim_end_matches(".rs");
    (name != "lib").then(|| name.to_string())
}

/// A file's code: comments (doc comments too) and its unit tests left out.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests").next().unwrap();
    text.lines()
        .map(|l| l.split("//").next().unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

/// The names that follow `crate::` in `code` (the first segment of each
/// crate path; a `crate::{a, b}` group is refused by the callers, since it
/// hides what it imports).
fn crate_names(code: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let before = rest[..at].chars().next_back();
        let after = &rest[at + "crate::".len()..];
        rest = after;
        if before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let name: String = after
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '{')
            .collect();
        names.push(name);
    }
    names
}

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|(_, ms)| ms.contains(&module))
}

/// Each module of `files` (module, code) and the other modules it names;
/// and the names that are no module (a re-export, a group).
fn graph(files: &[(String, String)]) -> (BTreeMap<String, BTreeSet<String>>, Vec<String>) {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut strange = Vec::new();
    for (module, code) in files {
        let deps = graph.entry(module.clone()).or_default();
        for name in crate_names(code) {
            match layer_of(&name) {
                Some(_) if name != *module => {
                    deps.insert(name);
                }
                Some(_) => {}
                None => strange.push(format!("{module}: crate::{name}")),
            }
        }
    }
    (graph, strange)
}

/// The imports of `graph` that go up the layers, as sentences.
fn upward(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let mut up = Vec::new();
    for (module, deps) in graph {
        let Some(mine) = layer_of(module) else {
            up.push(format!("{module} is in no layer"));
            continue;
        };
        for dep in deps {
            if layer_of(dep).is_some_and(|theirs| theirs > mine) {
                up.push(format!(
                    "{module} ({}) imports {dep} ({})",
                    LAYERS[mine].0,
                    LAYERS[layer_of(dep).unwrap()].0
                ));
            }
        }
    }
    up
}

/// A cycle of `graph`, if it has one (depth first: an edge back to a
/// module still on the path).
fn cycle(graph: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        module: &str,
        graph: &BTreeMap<String, BTreeSet<String>>,
        done: &mut BTreeSet<String>,
        path: &mut Vec<String>,
    ) -> Option<Vec<String>> {
        if let Some(at) = path.iter().position(|m| m == module) {
            let mut found = path[at..].to_vec();
            found.push(module.to_string());
            return Some(found);
        }
        if done.contains(module) {
            return None;
        }
        path.push(module.to_string());
        for dep in graph.get(module).into_iter().flatten() {
            if let Some(found) = visit(dep, graph, done, path) {
                return Some(found);
            }
        }
        path.pop();
        done.insert(module.to_string());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|m| visit(m, graph, &mut done, &mut Vec::new()))
}

fn the_crate() -> Vec<(String, String)> {
    sources()
        .iter()
        .filter_map(|path| {
            let module = module_of(path)?;
            Some((module, code(&std::fs::read_to_string(path).unwrap())))
        })
        .collect()
}

#[test]
fn layers_import_one_way_and_without_a_cycle() {
    let (graph, strange) = graph(&the_crate());
    assert!(
        strange.is_empty(),
        "crate paths that name no module (name the module: crate::module::Item): {strange:#?}"
    );
    let up = upward(&graph);
    assert!(up.is_empty(), "imports up the layers: {up:#?}");
    assert_eq!(cycle(&graph), None, "an import cycle");
    for (layer, modules) in LAYERS {
        for module in *modules {
            assert!(
                graph.contains_key(*module),
                "layer {layer} names `{module}`, which is no module of src/"
            );
        }
    }
}

#[test]
fn the_checker_finds_an_upward_import_a_cycle_and_a_re_export() {
    let planted = |pairs: &[(&str, &str)]| {
        pairs
            .iter()
            .map(|(m, c)| (m.to_string(), code(c)))
            .collect::<Vec<_>>()
    };
    let (g, strange) = graph(&planted(&[
        ("raw", "use crate::communicator::Communicator;"),
        (
            "communicator",
            "use crate::raw::Comm; fn f(_: crate::Error) {}",
        ),
    ]));
    assert_eq!(upward(&g), ["raw (raw) imports communicator (facade)"]);
    assert_eq!(strange, ["communicator: crate::Error"]);
    let (g, _) = graph(&planted(&[
        ("transport", "use crate::exec::Team;"),
        ("exec", "use crate::transport::pool::StagingPool;"),
        (
            "wire",
            "use crate::error::Result; // crate::communicator in a comment",
        ),
    ]));
    assert_eq!(upward(&g), ["transport (transport) imports exec (exec)"]);
    let found = cycle(&g).expect("the planted cycle");
    assert_eq!(found.first(), found.last());
    assert!(g["wire"].contains("error") && !g["wire"].contains("communicator"));
    let (g, strange) = graph(&planted(&[("wire", "use crate::{raw, error};")]));
    assert!(g["wire"].is_empty() && strange == ["wire: crate::{raw"]);
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

/// The places of `unsafe` in `text` (a file of module `module`) outside
/// the raw layer, and those without their reason: a `// SAFETY:` line
/// within the eight lines above a block or impl, a `# Safety` section in
/// the doc above an `unsafe fn` or `unsafe trait`.
fn unsafe_places(module: Option<&str>, name: &str, text: &str) -> (Vec<String>, Vec<String>) {
    let lines: Vec<&str> = text.lines().collect();
    let (mut outside, mut unexplained) = (Vec::new(), Vec::new());
    for (i, line) in lines.iter().enumerate() {
        let code = line.split("//").next().unwrap();
        let block = code.contains("unsafe {") || code.contains("unsafe impl");
        let declared = code.contains("unsafe fn") || code.contains("unsafe trait");
        if !block && !declared {
            continue;
        }
        let place = format!("{name}:{}", i + 1);
        if module != Some("raw") {
            outside.push(place.clone());
        }
        let above = &lines[i.saturating_sub(8)..=i];
        let reason = if block {
            above.iter().any(|l| l.contains("SAFETY:"))
        } else {
            let doc = lines[..i].iter().rev().take_while(|l| {
                l.trim_start().starts_with("///") || l.trim_start().starts_with("#[")
            });
            doc.into_iter().any(|l| l.contains("# Safety"))
        };
        if !reason {
            unexplained.push(place);
        }
    }
    (outside, unexplained)
}

#[test]
fn unsafe_code_is_in_the_raw_layer_only_and_says_why() {
    let (mut outside, mut unexplained) = (Vec::new(), Vec::new());
    let mut allowed = Vec::new();
    for path in sources() {
        let text = std::fs::read_to_string(&path).unwrap();
        let name = path.strip_prefix(src()).unwrap().display().to_string();
        let (o, u) = unsafe_places(module_of(&path).as_deref(), &name, &text);
        outside.extend(o);
        unexplained.extend(u);
        if code(&text).contains("allow(unsafe_code")
            || code(&text).contains("allow(\n    unsafe_code")
        {
            allowed.push(name);
        }
    }
    assert!(outside.is_empty(), "unsafe outside src/raw/: {outside:#?}");
    assert!(
        unexplained.is_empty(),
        "unsafe without its reason: {unexplained:#?}"
    );
    assert_eq!(allowed, ["raw/mod.rs"], "where unsafe code is allowed");
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    assert!(lib.contains("#![deny(unsafe_code)]"));
}

#[test]
fn the_checker_finds_unsafe_outside_the_raw_layer_and_without_a_reason() {
    let text = "fn f() {\n    unsafe { g() }\n}\n";
    let (outside, unexplained) = unsafe_places(Some("wire"), "wire/op.rs", text);
    assert_eq!(
        (outside, unexplained.len()),
        (vec!["wire/op.rs:2".to_string()], 1)
    );
    let text = "// SAFETY: g has no precondition.\nunsafe { g() }\n/// Does h.\nunsafe fn h() {}\n";
    let (outside, unexplained) = unsafe_places(Some("raw"), "raw/x.rs", text);
    assert!(outside.is_empty());
    assert_eq!(unexplained, ["raw/x.rs:4"]);
}

#[test]
fn only_the_facade_implements_communicator() {
    let elsewhere: Vec<String> = sources()
        .into_iter()
        .filter(|path| module_of(path).as_deref() != Some("communicator"))
        .filter(|path| code(&std::fs::read_to_string(path).unwrap()).contains("impl Communicator"))
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        elsewhere.is_empty(),
        "impl Communicator outside src/communicator/: {elsewhere:#?}"
    );
}
