//! Where each value came from, so that a problem names its place: the line
//! of a key in the file, or the environment variable that set it. Built from
//! the file's syntax tree (toml_edit keeps spans; the serde view does not).

use std::collections::BTreeMap;

/// Key paths (`upstream.base_url`, `shadow.ignore[1]`, `workers.aliases.old`)
/// → the 1-based line of the key in the file, and → the variable that
/// overrode them.
#[derive(Debug, Default)]
pub(super) struct Origins {
    lines: BTreeMap<String, usize>,
    pub(super) variables: BTreeMap<String, String>,
}

impl Origins {
    /// Indexes every key of `doc` (parsed from `text`) by its path.
    pub(super) fn of_file(text: &str, doc: &toml_edit::ImDocument<&str>) -> Origins {
        let mut origins = Origins::default();
        let line_of = |offset: usize| text[..offset.min(text.len())].matches('\n').count() + 1;
        let mut index = |path: String, span: Option<std::ops::Range<usize>>| {
            if let Some(span) = span {
                origins.lines.entry(path).or_insert(line_of(span.start));
            }
        };
        walk_table(doc.as_table(), "", &mut index);
        origins
    }

    /// Prefixes `problem` (`path: message`) with where the path was set:
    /// `line 12: …` or `V1COMPAT_…: …`. The longest known prefix of the path
    /// wins, so `shadow.ignore[1].path` falls back to `shadow.ignore[1]`.
    /// Also gives the line, for ordering (`usize::MAX` when there is none).
    /// A problem that already starts with a variable name is left as it is.
    pub(super) fn place(&self, problem: String) -> (usize, String) {
        let unplaced = usize::MAX;
        let Some((path, _)) = problem.split_once(": ") else {
            return (unplaced, problem);
        };
        if path.contains(' ') || path.starts_with(super::ENV_PREFIX) {
            return (unplaced, problem);
        }
        let mut candidate = path;
        loop {
            if let Some(var) = self.variables.get(candidate) {
                return (unplaced, format!("{var}: {problem}"));
            }
            if let Some(&line) = self.lines.get(candidate) {
                return (line, format!("line {line}: {problem}"));
            }
            match candidate.rfind(['.', '[']) {
                Some(cut) => candidate = &candidate[..cut],
                None => return (unplaced, problem),
            }
        }
    }
}

fn walk_table(
    table: &toml_edit::Table,
    prefix: &str,
    index: &mut impl FnMut(String, Option<std::ops::Range<usize>>),
) {
    for (key, item) in table.iter() {
        let path = join(prefix, key);
        let key_span = table.key(key).and_then(toml_edit::Key::span);
        match item {
            toml_edit::Item::Table(t) => {
                index(path.clone(), key_span.or_else(|| t.span()));
                walk_table(t, &path, index);
            }
            toml_edit::Item::ArrayOfTables(tables) => {
                for (i, t) in tables.iter().enumerate() {
                    let element = format!("{path}[{i}]");
                    index(element.clone(), t.span());
                    walk_table(t, &element, index);
                }
                index(path, tables.iter().next().and_then(toml_edit::Table::span));
            }
            toml_edit::Item::Value(v) => {
                index(path.clone(), key_span.or_else(|| v.span()));
                walk_value(v, &path, index);
            }
            toml_edit::Item::None => {}
        }
    }
}

fn walk_value(
    value: &toml_edit::Value,
    path: &str,
    index: &mut impl FnMut(String, Option<std::ops::Range<usize>>),
) {
    match value {
        toml_edit::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let element = format!("{path}[{i}]");
                index(element.clone(), v.span());
                walk_value(v, &element, index);
            }
        }
        toml_edit::Value::InlineTable(t) => {
            for (key, v) in t.iter() {
                let child = join(path, key);
                index(child.clone(), t.key(key).and_then(toml_edit::Key::span));
                walk_value(v, &child, index);
            }
        }
        _ => {}
    }
}

fn join(prefix: &str, key: &str) -> String {
    if prefix.is_empty() {
        key.to_owned()
    } else {
        format!("{prefix}.{key}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn place(o: &Origins, problem: &str) -> String {
        o.place(problem.to_owned()).1
    }

    fn origins(text: &str) -> Origins {
        let doc = toml_edit::ImDocument::parse(text).unwrap();
        Origins::of_file(text, &doc)
    }

    #[test]
    fn keys_tables_and_array_elements_have_lines() {
        let o = origins(
            "[upstream]\nbase_url = \"x\"\n\n[shadow]\nunordered_paths = [\n  \"a\",\n  1,\n]\n[[shadow.ignore]]\npath = \"p\"\n[[shadow.ignore]]\npath = 2\n",
        );
        assert_eq!(
            place(&o, "upstream.base_url: bad"),
            "line 2: upstream.base_url: bad"
        );
        assert_eq!(
            place(&o, "shadow.unordered_paths[1]: bad"),
            "line 7: shadow.unordered_paths[1]: bad"
        );
        assert_eq!(
            place(&o, "shadow.ignore[1]: bad"),
            "line 11: shadow.ignore[1]: bad"
        );
        assert_eq!(
            place(&o, "shadow.ignore[1].path: bad"),
            "line 12: shadow.ignore[1].path: bad"
        );
        // A key the file does not have: the section's line.
        assert_eq!(
            place(&o, "upstream.auth: bad"),
            "line 1: upstream.auth: bad"
        );
        // Not about a key at all: unchanged.
        assert_eq!(place(&o, "nothing here"), "nothing here");
    }

    #[test]
    fn a_variable_wins_over_the_file() {
        let mut o = origins("[upstream]\nbase_url = \"x\"\n");
        o.variables.insert(
            "upstream.base_url".into(),
            "V1COMPAT_UPSTREAM__BASE_URL".into(),
        );
        assert_eq!(
            place(&o, "upstream.base_url: bad"),
            "V1COMPAT_UPSTREAM__BASE_URL: upstream.base_url: bad"
        );
    }
}
