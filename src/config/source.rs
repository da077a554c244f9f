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
    /// `line 12: …` or `V1COMPAT_…: …`. A variable set on the path or above
    /// it wins; else the longest prefix of the path the file has, so
    /// `shadow.ignore[1].path` falls back to `shadow.ignore[1]`.
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
        // A variable replaces its key's whole value, so one set on the path
        // or on any key above it (`V1COMPAT_WORKERS__ALIASES` for
        // `workers.aliases.old`) is where the value came from, whatever
        // lines the file has below that key.
        if let Some(var) = prefixes(path).find_map(|p| self.variables.get(p)) {
            return (unplaced, format!("{var}: {problem}"));
        }
        let line = prefixes(path).find_map(|p| self.lines.get(p)).copied();
        match line {
            Some(line) => (line, format!("line {line}: {problem}")),
            None => (unplaced, problem),
        }
    }
}

/// `a.b[1].c`, then `a.b[1]`, `a.b`, `a`: the path and the keys above it,
/// longest first.
fn prefixes(path: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(path), |p| p.rfind(['.', '[']).map(|cut| &p[..cut]))
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
    fn a_variable_that_set_a_whole_table_wins_over_the_lines_below_it() {
        let mut o = origins("[workers.aliases]\nold = \"x\"\n");
        o.variables
            .insert("workers.aliases".into(), "V1COMPAT_WORKERS__ALIASES".into());
        assert_eq!(
            place(&o, "workers.aliases.old: expected a string"),
            "V1COMPAT_WORKERS__ALIASES: workers.aliases.old: expected a string"
        );
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
