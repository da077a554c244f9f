//! The reload's guard against a half-written file, beside the request path:
//! a reload that would move clients' keys elsewhere (the V2 base URL, the
//! service key, the callback relay's public URL) from a file that sets fewer
//! keys than the running one (a truncated write, `: > file`, a `head` of it)
//! is refused. A whole file that changes those keys applies as usual; a
//! smaller one applies after a restart, which reads it as the start-up
//! file.

use crate::config::Config;

/// How many keys a configuration file sets: every value that is not a
/// table, arrays counting once; `None` when it does not parse (the load
/// reports why).
pub(crate) fn keys_set(text: &str) -> Option<usize> {
    let table: toml::Table = toml::from_str(text).ok()?;
    Some(count(&table))
}

fn count(table: &toml::Table) -> usize {
    table
        .values()
        .map(|v| match v {
            toml::Value::Table(t) => count(t),
            toml::Value::Array(items)
                if items.iter().all(toml::Value::is_table) && !items.is_empty() =>
            {
                items
                    .iter()
                    .filter_map(toml::Value::as_table)
                    .map(count)
                    .sum()
            }
            _ => 1,
        })
        .sum()
}

/// The keys that decide where clients' keys go, named when `new` changes
/// them.
pub(crate) fn destination_changes(old: &Config, new: &Config) -> Vec<&'static str> {
    let mut changed = Vec::new();
    if old.upstream.base_url != new.upstream.base_url {
        changed.push("upstream.base_url");
    }
    let key = |c: &Config| c.service_key.as_ref().map(|k| k.expose().to_owned());
    if key(old) != key(new) {
        changed.push("upstream.service_key");
    }
    if old.callbacks.relay != new.callbacks.relay {
        changed.push("callbacks.public_url");
    }
    changed
}

/// Why a reload is refused, when it is: the new file sets fewer keys than
/// the running one (`running` keys, `new` keys) and changes a destination.
pub(crate) fn refusal(running: usize, new: usize, changes: &[&str]) -> Option<String> {
    if new >= running || changes.is_empty() {
        return None;
    }
    Some(format!(
        "the file sets {new} keys where the running one set {running}, and would change {}: \
         it looks truncated, so it is not applied (write the whole file, or restart to apply it)",
        changes.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Config {
        crate::config::load(text, Vec::new()).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn keys_are_counted_through_tables_and_arrays_of_tables() {
        assert_eq!(keys_set(""), Some(0));
        assert_eq!(
            keys_set("[upstream]\nbase_url = \"http://a\"\nservice_key = \"k\"\n[shadow]\nunordered_paths = [\"a\", \"b\"]\n[[shadow.ignore]]\npath = \"p\"\n[[shadow.ignore]]\npath = \"q\"\n"),
            Some(5)
        );
        assert_eq!(keys_set("[upstream\n"), None);
    }

    #[test]
    fn a_smaller_file_that_moves_keys_elsewhere_is_refused() {
        let running =
            load("[upstream]\nbase_url = \"http://staging.example\"\nservice_key = \"k\"\n");
        let truncated = load("[upstream]\nbase_url = \"http://staging.example\"\n");
        let changes = destination_changes(&running, &truncated);
        assert_eq!(changes, ["upstream.service_key"]);
        let why = refusal(2, 1, &changes).expect("refused");
        assert!(why.contains("upstream.service_key"), "{why}");
        assert!(!why.contains("\"k\""), "no key values in the reason: {why}");
        // An empty file moves the base URL to the default.
        let empty = load("");
        assert_eq!(
            destination_changes(&running, &empty),
            ["upstream.base_url", "upstream.service_key"]
        );
        // A whole file may move them; a smaller one that keeps them applies.
        assert!(refusal(2, 2, &changes).is_none());
        assert!(refusal(2, 1, &[]).is_none());
    }
}
