//! The shape of the code, checked: crates depend on each other one way
//! (engine, data ← physics ← workload, cluster ← scenario ← calibrate, net ← cli),
//! and the modules of a crate import each other in no cycle, of any length
//! (docs/architecture.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Each crate's layer: a crate may depend only on crates of lower layers.
const LAYERS: [(&str, u32); 9] = [
    ("engine", 0),
    ("data", 0),
    ("physics", 1),
    ("workload", 2),
    ("cluster", 2),
    ("scenario", 3),
    ("calibrate", 4),
    ("net", 4),
    ("cli", 5),
];

fn layer(name: &str) -> u32 {
    LAYERS.iter().find(|(n, _)| *n == name).unwrap_or_else(|| panic!("crate {name} has no layer in this test")).1
}

/// The `blis-*` crates in a manifest's `[dependencies]` (not dev-dependencies).
fn blis_dependencies(manifest: &str) -> Vec<String> {
    let mut in_deps = false;
    let mut deps = Vec::new();
    for line in manifest.lines() {
        let line = line.trim();
        if line.starts_with('[') {
            in_deps = line == "[dependencies]";
            continue;
        }
        if in_deps && let Some(name) = line.strip_prefix("blis-") {
            deps.push(name.split(['.', ' ', '=']).next().unwrap_or_default().to_string());
        }
    }
    deps
}

#[test]
fn crates_depend_one_way() {
    let mut seen = 0;
    for (name, rank) in LAYERS {
        let manifest = std::fs::read_to_string(crates_dir().join(name).join("Cargo.toml")).unwrap();
        for dep in blis_dependencies(&manifest) {
            assert!(layer(&dep) < rank, "blis-{name} depends on blis-{dep}, which is not below it");
            seen += 1;
        }
    }
    assert!(seen >= 15, "only {seen} dependencies found: is the manifest parsing right?");
    // Only the crates that do network I/O pull in tokio.
    for (name, _) in LAYERS {
        let manifest = std::fs::read_to_string(crates_dir().join(name).join("Cargo.toml")).unwrap();
        let deps = manifest.split("[dev-dependencies]").next().unwrap_or_default();
        assert_eq!(deps.contains("tokio"), name == "net", "{name}: tokio belongs to blis-net alone");
    }
}

/// Every `.rs` file under `dir`, as (module path, text).
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let rel = path.strip_prefix(src).unwrap().with_extension("");
                let mut name = rel.to_string_lossy().replace('/', "::");
                if let Some(parent) = name.strip_suffix("::mod") {
                    name = parent.to_string();
                }
                if name == "lib" || name == "main" {
                    name.clear();
                }
                out.insert(name, std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    out
}

/// The code of a file: without its unit-test module and without comments.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]\nmod tests {").next().unwrap_or_default();
    text.lines().filter(|l| !l.trim_start().starts_with("//")).collect::<Vec<_>>().join("\n")
}

/// The modules of the crate that `module`'s code names through `crate::` or `super::`.
fn references(module: &str, text: &str, known: &BTreeSet<String>) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let parent = module.rsplit_once("::").map_or("", |(p, _)| p);
    for (prefix, base) in [("crate::", String::new()), ("super::", parent.to_string())] {
        for (i, _) in text.match_indices(prefix) {
            let before = text[..i].chars().last();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let path: Vec<&str> = text[i + prefix.len()..]
                .split("::")
                .map(|seg| seg.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).next().unwrap_or_default())
                .take_while(|seg| !seg.is_empty())
                .collect();
            // The longest prefix of the path that is a module.
            for n in (1..=path.len()).rev() {
                let joined = path[..n].join("::");
                let candidate = if base.is_empty() { joined } else { format!("{base}::{joined}") };
                if known.contains(&candidate) {
                    if candidate != module {
                        out.insert(candidate);
                    }
                    break;
                }
            }
        }
    }
    out
}

/// The import cycles of a graph, of any length: its strongly connected
/// components of more than one module (Tarjan's algorithm), each sorted.
fn cycles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct Search<'g> {
        graph: &'g BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'g str, usize>,
        low: BTreeMap<&'g str, usize>,
        stack: Vec<&'g str>,
        on_stack: BTreeSet<&'g str>,
        found: Vec<Vec<String>>,
    }
    impl<'g> Search<'g> {
        fn visit(&mut self, v: &'g str) {
            let i = self.index.len();
            self.index.insert(v, i);
            self.low.insert(v, i);
            self.stack.push(v);
            self.on_stack.insert(v);
            for w in self.graph.get(v).into_iter().flatten() {
                if !self.index.contains_key(w.as_str()) {
                    self.visit(w);
                    let lw = self.low[w.as_str()];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(lw));
                } else if self.on_stack.contains(w.as_str()) {
                    let iw = self.index[w.as_str()];
                    self.low.entry(v).and_modify(|l| *l = (*l).min(iw));
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(w);
                    component.push(w.to_string());
                    if w == v {
                        break;
                    }
                }
                if component.len() > 1 {
                    component.sort();
                    self.found.push(component);
                }
            }
        }
    }
    let mut search =
        Search { graph, index: BTreeMap::new(), low: BTreeMap::new(), stack: Vec::new(), on_stack: BTreeSet::new(), found: Vec::new() };
    for v in graph.keys() {
        if !search.index.contains_key(v.as_str()) {
            search.visit(v);
        }
    }
    search.found
}

#[test]
fn no_modules_of_a_crate_import_each_other_in_a_cycle() {
    let mut found = Vec::new();
    let mut modules_seen = 0;
    for (name, _) in LAYERS {
        let mods = modules(&crates_dir().join(name).join("src"));
        modules_seen += mods.len();
        let known: BTreeSet<String> = mods.keys().cloned().collect();
        let graph: BTreeMap<String, BTreeSet<String>> =
            mods.iter().map(|(m, text)| (m.clone(), references(m, &code(text), &known))).collect();
        found.extend(cycles(&graph).into_iter().map(|c| format!("{name}: {}", c.join(" -> "))));
    }
    assert!(modules_seen > 100, "only {modules_seen} modules found");
    assert!(found.is_empty(), "modules that import each other, directly or around a cycle: {found:?}");
}

#[test]
fn the_cycle_finder_finds_cycles_of_every_length_and_nothing_else() {
    let graph = |edges: &[(&str, &str)]| {
        let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for (a, b) in edges {
            g.entry(a.to_string()).or_default().insert(b.to_string());
            g.entry(b.to_string()).or_default();
        }
        g
    };
    let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert!(cycles(&graph(&[("a", "b"), ("b", "c"), ("a", "c")])).is_empty());
    assert_eq!(cycles(&graph(&[("a", "b"), ("b", "a")])), vec![names(&["a", "b"])]);
    // calibrate's cycle of 2026-12: experiment -> vllm_log -> reproduce -> experiment.
    let four = graph(&[
        ("experiment", "vllm_log"),
        ("vllm_log", "reproduce"),
        ("reproduce", "normalized"),
        ("normalized", "experiment"),
        ("x", "experiment"),
    ]);
    assert_eq!(cycles(&four), vec![names(&["experiment", "normalized", "reproduce", "vllm_log"])]);
    let two = cycles(&graph(&[("a", "b"), ("b", "a"), ("c", "d"), ("d", "e"), ("e", "c")]));
    assert_eq!(two.len(), 2, "{two:?}");
}

#[test]
fn the_reference_finder_sees_crate_and_super_paths_but_not_comments() {
    let known: BTreeSet<String> = ["a", "b", "c", "c::d"].iter().map(|s| s.to_string()).collect();
    let text = code("use crate::a::Thing;\n// crate::b::Nope\nfn f() { super::d::g(); }\n");
    assert_eq!(references("c::e", &text, &known), ["a", "c::d"].iter().map(|s| s.to_string()).collect());
}

/// What a latency model can do is a capability of its `ModelKind`
/// (blis-physics): no other crate compares a model's name or kind.
#[test]
fn only_physics_compares_latency_models() {
    let names = ["roofline", "blackbox", "trained-physics", "unified-5", "physics-normalized"];
    let mut found = Vec::new();
    for (name, _) in LAYERS.iter().filter(|(n, _)| *n != "physics") {
        for (module, text) in modules(&crates_dir().join(name).join("src")) {
            let code = code(&text);
            for line in code.lines() {
                let compares = line.contains("==") || line.contains("!=") || line.contains("matches!(");
                let by_kind = line.contains("ModelKind::") && (compares || line.contains(".name()"));
                let by_name = compares && names.iter().any(|n| line.contains(&format!("\"{n}\"")));
                if by_kind || by_name {
                    found.push(format!("{name}::{module}: {}", line.trim()));
                }
            }
        }
    }
    assert!(found.is_empty(), "latency models compared outside blis-physics (ask ModelKind for a capability): {found:#?}");
}
