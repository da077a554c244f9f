//! The house's rules, checked on the sources (`ARCHITECTURE.md`, "Invariants"):
//! the gateway's top modules import one way, down the table below; the
//! sandbox, the shared contract and the JSON kernel never depend on the
//! gateway, and the kernel on nothing but what reading and writing JSON
//! needs. A new import that runs up the table fails here, with the file that
//! makes it.
//!
//! Read as text, like a reviewer would: `crate::x` paths in code (comments,
//! strings and `#[cfg(test)]` modules left out; a test may reach anywhere).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The gateway's top modules, from the top of the house down. A module may
/// use those in a later layer (and those in its own layer only where
/// `SAME_LAYER` says so). Nothing runs up the table, with no exception
/// listed: a stage that needs the configuration owns a settings type, which
/// `config` builds and the layer above hands down (`ARCHITECTURE.md`).
const LAYERS: &[&[&str]] = &[
    &["cli"],
    &["app"],
    &["reload"],
    &["config"],
    &["edge"],
    &["shadow", "callbacks"],
    &["pipeline"],
    &["inventory"],
    &["ops"],
    &["error"],
    &["upstream"],
    &["telemetry"],
    &["v1", "v2", "paging", "differences", "openapi"],
    &["common"],
];

/// Imports within one layer that are allowed: the contract's registry of
/// differences names the V1 operations.
const SAME_LAYER: &[(&str, &str)] = &[("differences", "v1")];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// `text` with comments, string and char literals blanked and the test
/// module (`#[cfg(test)] mod …`, which sits last) dropped.
fn code_of(text: &str) -> String {
    let text = match text.find("\n#[cfg(test)]\nmod ") {
        Some(at) => &text[..at],
        None => text,
    };
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '/' if chars.get(i + 1) == Some(&'/') => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
                continue;
            }
            // A char literal (`'"'`, an escaped one); a lifetime (`'a`) is left be.
            '\'' if chars.get(i + 2) == Some(&'\'') && chars.get(i + 1) != Some(&'\\') => {
                i += 3;
                continue;
            }
            '\'' if chars.get(i + 1) == Some(&'\\') => {
                i += 2;
                while i < chars.len() && chars[i] != '\'' {
                    i += 1;
                }
                i += 1;
                continue;
            }
            '"' => {
                i += 1;
                while i < chars.len() && chars[i] != '"' {
                    i += if chars[i] == '\\' { 2 } else { 1 };
                }
                out.push_str("\"\"");
            }
            c => out.push(c),
        }
        i += 1;
    }
    out
}

/// The top modules `code` names through `crate::`, grouped imports included.
fn used_modules(code: &str) -> BTreeSet<String> {
    let mut used = BTreeSet::new();
    let mut rest = code;
    while let Some(at) = rest.find("crate::") {
        let after = &rest[at + "crate::".len()..];
        // `v1compat_contract::…` is another crate, not this one's `crate::`.
        let before = rest[..at].chars().next_back();
        let ours = !before.is_some_and(|c| c.is_alphanumeric() || c == '_');
        if ours {
            if let Some(group) = after.strip_prefix('{') {
                let mut depth = 0usize;
                let mut item = String::new();
                for c in group.chars() {
                    match c {
                        '{' => depth += 1,
                        '}' if depth == 0 => break,
                        '}' => depth -= 1,
                        ',' if depth == 0 => {
                            used.insert(first_segment(&item));
                            item.clear();
                            continue;
                        }
                        _ => {}
                    }
                    item.push(c);
                }
                used.insert(first_segment(&item));
            } else {
                used.insert(first_segment(after));
            }
        }
        rest = after;
    }
    used.retain(|m| !m.is_empty() && m != "self");
    used
}

fn first_segment(path: &str) -> String {
    path.trim()
        .chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        // A build's output (a fuzz folder's own `target`) is not source.
        if path.is_dir() && !path.ends_with("target") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every (importing module, imported module) pair of the gateway's `src/`,
/// with the files that make it.
fn imports() -> BTreeMap<(String, String), Vec<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut found: BTreeMap<(String, String), Vec<String>> = BTreeMap::new();
    for file in files {
        let rel = file.strip_prefix(&src).unwrap();
        let first = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let module = first.trim_end_matches(".rs").to_owned();
        if module == "lib" || module == "main" {
            continue;
        }
        let code = code_of(&std::fs::read_to_string(&file).unwrap());
        for used in used_modules(&code) {
            if used != module {
                found
                    .entry((module.clone(), used))
                    .or_default()
                    .push(rel.display().to_string());
            }
        }
    }
    found
}

#[test]
fn every_top_module_has_a_layer() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut missing = Vec::new();
    for entry in std::fs::read_dir(&src).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        let module = name.trim_end_matches(".rs");
        if !["lib", "main"].contains(&module) && layer_of(module).is_none() {
            missing.push(module.to_owned());
        }
    }
    assert!(
        missing.is_empty(),
        "src/ holds modules the layer table (tests/it/architecture.rs) does not place: {missing:?}"
    );
}

#[test]
fn imports_point_down_the_layers() {
    let mut wrong = Vec::new();
    for ((from, to), files) in imports() {
        let (Some(a), Some(b)) = (layer_of(&from), layer_of(&to)) else {
            wrong.push(format!(
                "{from} -> {to}: a module without a layer ({files:?})"
            ));
            continue;
        };
        let allowed = a < b || (a == b && SAME_LAYER.contains(&(from.as_str(), to.as_str())));
        if allowed {
            continue;
        }
        wrong.push(format!("{from} -> {to} runs up the layers, in {files:?}"));
    }
    assert!(
        wrong.is_empty(),
        "imports against the house's layers:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_reader_sees_grouped_imports_and_skips_comments_strings_and_tests() {
    let code = code_of(
        "use crate::{ops::{self, x}, v1};\n\
         // crate::edge in a comment\n\
         let s = \"crate::shadow\";\n\
         let c = v1compat_contract::dialect::Dialect::default();\n\
         crate::upstream::call();\n\
         #[cfg(test)]\nmod tests { use crate::cli; }\n",
    );
    let used: Vec<String> = used_modules(&code).into_iter().collect();
    assert_eq!(used, ["ops", "upstream", "v1"]);
}

/// A manifest of the repository, parsed.
fn manifest(path: &Path) -> toml::Table {
    std::fs::read_to_string(path).unwrap().parse().unwrap()
}

/// The names `manifest` lists in its `table` of dependencies, in order.
fn dependencies<'m>(manifest: &'m toml::Table, table: &str) -> Vec<&'m String> {
    manifest
        .get(table)
        .and_then(|d| d.as_table())
        .map(|deps| deps.keys().collect())
        .unwrap_or_default()
}

/// The members' manifests: the sandbox and the contract stay independent of
/// the gateway, so the differential test compares two implementations; the
/// JSON kernel (and its fuzz targets) too, so that it is tested, fuzzed and
/// benchmarked on its own.
#[test]
fn the_sandbox_and_the_contract_do_not_depend_on_the_gateway() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let manifests = [
        "crates/sandbox",
        "crates/contract",
        "crates/json",
        "crates/json/fuzz",
    ];
    for member in manifests {
        let dir = root.join(member);
        let manifest = manifest(&dir.join("Cargo.toml"));
        for table in ["dependencies", "dev-dependencies", "build-dependencies"] {
            assert!(
                !dependencies(&manifest, table)
                    .iter()
                    .any(|d| *d == "v1compat"),
                "{member} must not depend on the gateway ({table})"
            );
        }
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for file in files {
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            assert!(
                !code.contains("v1compat::"),
                "{} uses the gateway crate",
                file.display()
            );
        }
    }
    // The contract is serde types and nothing else of ours.
    let contract = manifest(&root.join("crates/contract/Cargo.toml"));
    let deps = dependencies(&contract, "dependencies");
    assert_eq!(deps, ["http", "serde"], "the contract's dependencies");
}

/// The JSON kernel needs serde and serde_json to read, bytes and itoa to
/// write, and nothing else; proptest only for the generators its `gen`
/// feature lends the gateway's property tests, never in what ships.
#[test]
fn the_json_kernel_depends_only_on_what_json_needs() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let kernel = manifest(&root.join("crates/json/Cargo.toml"));
    let mut deps = dependencies(&kernel, "dependencies");
    deps.sort();
    assert_eq!(
        deps,
        ["bytes", "itoa", "proptest", "serde", "serde_json"],
        "the JSON kernel's dependencies"
    );
    let optional = |name: &str| {
        kernel["dependencies"][name]
            .get("optional")
            .and_then(toml::Value::as_bool)
            == Some(true)
    };
    assert!(optional("proptest"), "proptest is the `gen` feature's only");
    assert!(dependencies(&kernel, "build-dependencies").is_empty());
    // The gateway takes the generators for its tests only.
    let gateway = manifest(&root.join("Cargo.toml"));
    let features = |table: &str| gateway[table]["v1compat-json"].get("features").cloned();
    assert_eq!(
        features("dependencies"),
        None,
        "the gateway's build of the kernel"
    );
    assert_eq!(
        features("dev-dependencies"),
        Some(toml::Value::Array(vec!["gen".into()]))
    );
}
