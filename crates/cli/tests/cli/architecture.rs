//! The shape of the code, checked: crates depend on each other one way
//! (engine ← data ← workload, cluster ← scenario ← calibrate, net ← cli),
//! and no two modules of a crate import each other (docs/architecture.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn crates_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Each crate's layer: a crate may depend only on crates of lower layers.
const LAYERS: [(&str, u32); 8] =
    [("engine", 0), ("data", 1), ("workload", 2), ("cluster", 2), ("scenario", 3), ("calibrate", 4), ("net", 4), ("cli", 5)];

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

#[test]
fn no_two_modules_import_each_other() {
    let mut pairs = Vec::new();
    let mut modules_seen = 0;
    for (name, _) in LAYERS {
        let mods = modules(&crates_dir().join(name).join("src"));
        modules_seen += mods.len();
        let known: BTreeSet<String> = mods.keys().cloned().collect();
        let deps: BTreeMap<&String, BTreeSet<String>> = mods.iter().map(|(m, text)| (m, references(m, &code(text), &known))).collect();
        for (a, refs) in &deps {
            for b in refs {
                if a.as_str() < b.as_str() && deps.get(b).is_some_and(|back| back.contains(a.as_str())) {
                    pairs.push(format!("{name}: {a} <-> {b}"));
                }
            }
        }
    }
    assert!(modules_seen > 100, "only {modules_seen} modules found");
    assert!(pairs.is_empty(), "modules that import each other: {pairs:?}");
}

#[test]
fn the_reference_finder_sees_crate_and_super_paths_but_not_comments() {
    let known: BTreeSet<String> = ["a", "b", "c", "c::d"].iter().map(|s| s.to_string()).collect();
    let text = code("use crate::a::Thing;\n// crate::b::Nope\nfn f() { super::d::g(); }\n");
    assert_eq!(references("c::e", &text, &known), ["a", "c::d"].iter().map(|s| s.to_string()).collect());
}
