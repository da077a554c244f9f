//! The configuration keys the sources and the documentation name: every
//! `section.key` in a code span of src/, docs/, config/, deploy/ and the
//! top-level Markdown pages (Rust doc comments included) is a key the
//! configuration reads, so no comment or page sends an operator to a key
//! that does not exist. Which keys exist is asked of `config::load` itself.
//! Off the request path: it reads the files only.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The files read, relative to the crate root.
fn files(root: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "COMPATIBILITY.md", "ARCHITECTURE.md"]
        .iter()
        .map(|f| root.join(f))
        .filter(|p| p.exists())
        .collect();
    for dir in ["src", "docs", "config", "deploy"] {
        walk(&root.join(dir), &mut files);
    }
    files.sort();
    files
}

fn walk(dir: &Path, files: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            walk(&path, files);
        } else if path
            .extension()
            .is_some_and(|e| ["rs", "md", "toml", "yaml", "yml"].iter().any(|x| e == *x))
        {
            files.push(path);
        }
    }
}

fn is_word(s: &str) -> bool {
    s.starts_with(|c: char| c.is_ascii_lowercase() || c == '_')
        && s.chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
}

/// The `(section, key)` a code span starts with, if it looks like one: two
/// lower-case words and a dot (`log.access`, `upstream.proxy.https`,
/// `admin.operator_api = false`). A file name (`retry.rs`) and a one-letter
/// placeholder (`compat.x = v`) are not keys.
fn named_key(span: &str) -> Option<(&str, &str)> {
    let first = span.split_whitespace().next()?;
    let mut parts = first.split('.');
    let section = parts.next()?;
    let key = parts.next()?;
    let key = &key[..key
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(key.len())];
    let file = ["rs", "md", "toml", "yaml", "yml", "json"].contains(&key);
    (is_word(section) && is_word(key) && key.len() > 1 && !file).then_some((section, key))
}

/// Every `(section, key)` named in a code span of `text`, with its line
/// (from 1).
fn named_keys(text: &str) -> Vec<(usize, String, String)> {
    let mut found = Vec::new();
    for (i, line) in text.lines().enumerate() {
        for span in line.split('`').skip(1).step_by(2) {
            if let Some((section, key)) = named_key(span) {
                found.push((i + 1, section.to_owned(), key.to_owned()));
            }
        }
    }
    found
}

/// Whether `[section]` is a section of the configuration that has no key
/// `key`. A section that is not one (`settings.access_log`, a Rust path) is
/// no concern of this test.
fn unknown(section: &str, key: &str) -> bool {
    let text = format!("[{section}]\n{key} = 0\n");
    match v1compat::config::load(&text, Vec::new()) {
        Ok(_) => false,
        Err(e) => e
            .to_string()
            .contains(&format!("{section}.{key}: unknown key")),
    }
}

#[test]
fn named_configuration_keys_exist() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    // Each distinct key once, with where it is first named.
    let mut named: BTreeMap<(String, String), String> = BTreeMap::new();
    for file in files(root) {
        let Ok(text) = std::fs::read_to_string(&file) else {
            continue;
        };
        let shown = file
            .strip_prefix(root)
            .unwrap_or(&file)
            .display()
            .to_string();
        for (line, section, key) in named_keys(&text) {
            named
                .entry((section, key))
                .or_insert_with(|| format!("{shown}:{line}"));
        }
    }
    assert!(
        named.contains_key(&("log".to_owned(), "access".to_owned())),
        "the files are read"
    );
    let wrong: Vec<String> = named
        .iter()
        .filter(|((section, key), _)| unknown(section, key))
        .map(|((section, key), at)| format!("{at}: {section}.{key} is not a key"))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn a_key_of_another_section_is_reported() {
    assert!(unknown("limits", "request_timeout_ms"));
    assert!(!unknown("upstream", "request_timeout_ms"));
    assert!(!unknown("settings", "access_log"), "not a section");
    assert_eq!(
        named_keys("a `limits.max_in_flight = 3`, `retry.rs`, `compat.x = v`, `self.live`"),
        [
            (1, "limits".to_owned(), "max_in_flight".to_owned()),
            (1, "self".to_owned(), "live".to_owned())
        ]
    );
}
