//! Environment overrides: `V1COMPAT_SECTION__KEY=value` sets `key` in
//! `[section]` of the parsed file before it is typed and validated.

use super::ENV_PREFIX;

/// Applies every `V1COMPAT_…` variable of `env` to `table`; returns the
/// problems found.
pub(super) fn overlay(
    table: &mut toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, value) in env {
        let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
            continue;
        };
        let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
        if path.iter().any(String::is_empty) {
            problems.push(format!("{name}: malformed override name"));
            continue;
        }
        set_path(table, &path, scalar(&value));
    }
    problems
}

fn scalar(text: &str) -> toml::Value {
    let probe = format!("v = {text}");
    match probe
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
    {
        Some(v @ (toml::Value::Integer(_) | toml::Value::Float(_) | toml::Value::Boolean(_))) => v,
        _ => toml::Value::String(text.to_owned()),
    }
}

fn set_path(table: &mut toml::Table, path: &[String], value: toml::Value) {
    let (last, parents) = match path.split_last() {
        Some(split) => split,
        None => return,
    };
    let mut cur = table;
    for p in parents {
        let entry = cur
            .entry(p.clone())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()));
        if !entry.is_table() {
            *entry = toml::Value::Table(toml::Table::new());
        }
        cur = match entry.as_table_mut() {
            Some(t) => t,
            None => return,
        };
    }
    cur.insert(last.clone(), value);
}
