//! Keys and types, checked key by key so that one problem never hides the
//! next: serde stops at the first unknown key or wrong type, and its message
//! names neither the key nor the line. Each bad key is reported with its
//! path and taken out, so the rest still types and validates (its default
//! stands in).

use super::RawConfig;
use crate::common::checks::suggestion;

/// Removes the sections [`RawConfig`] does not have (the known ones are
/// read off its defaults) and names each one. Keys inside a section are
/// left to [`remove_mistyped`]: serde knows them all, optional ones too.
pub(super) fn remove_unknown(table: &mut toml::Table, known: &toml::Table) -> Vec<String> {
    let mut problems = Vec::new();
    table.retain(|section, _| {
        let ok = known.contains_key(section);
        if !ok {
            let names = known.keys().map(String::as_str);
            problems.push(format!(
                "{section}: unknown key{}",
                suggestion(section, names)
            ));
        }
        ok
    });
    problems
}

/// Types every `section.key` on its own against [`RawConfig`]; a key that
/// does not type is reported (down to the map entry or array element at
/// fault) and removed from `table`.
pub(super) fn remove_mistyped(table: &mut toml::Table) -> Vec<String> {
    let mut problems = Vec::new();
    let sections: Vec<String> = table.keys().cloned().collect();
    for section in sections {
        let Some(value) = table.get(&section).cloned() else {
            continue;
        };
        let Some(keys) = value.as_table() else {
            if let Err(why) = probe(&section, None, value.clone()) {
                problems.push(format!("{section}: {why}"));
                table.remove(&section);
            }
            continue;
        };
        for (key, value) in keys {
            if probe(&section, Some(key), value.clone()).is_ok() {
                continue;
            }
            problems.extend(locate(&section, key, value));
            if let Some(t) = table.get_mut(&section).and_then(toml::Value::as_table_mut) {
                t.remove(key);
            }
        }
    }
    problems
}

/// Names what is wrong in a value that does not type: the entries of a map
/// or the elements of an array that fail on their own, else the whole value.
fn locate(section: &str, key: &str, value: &toml::Value) -> Vec<String> {
    let mut found = locate_all(section, key, value);
    // What a secret's key was given is not repeated, only its kind.
    if crate::common::redact::is_secret(key) {
        for problem in &mut found {
            *problem = value_hidden(problem);
        }
    }
    found
}

/// `… found string "s3cret"` → `… found string (not shown: a secret)`.
fn value_hidden(problem: &str) -> String {
    match problem.split_once(", found ") {
        Some((before, found)) => {
            let kind = found.split_whitespace().next().unwrap_or("a value");
            format!("{before}, found {kind} (not shown: a secret)")
        }
        None => problem.to_owned(),
    }
}

fn locate_all(section: &str, key: &str, value: &toml::Value) -> Vec<String> {
    let path = format!("{section}.{key}");
    let mut found = Vec::new();
    match value {
        toml::Value::Table(entries) => {
            for (name, v) in entries {
                let alone = toml::Table::from_iter([(name.clone(), v.clone())]);
                if let Err(why) = probe(section, Some(key), toml::Value::Table(alone)) {
                    found.push(format!("{path}.{name}: {why}"));
                }
            }
        }
        toml::Value::Array(items) => {
            for (i, v) in items.iter().enumerate() {
                let alone = |v: toml::Value| probe(section, Some(key), toml::Value::Array(vec![v]));
                let Err(why) = alone(v.clone()) else {
                    continue;
                };
                // An element that is a table (`[[shadow.ignore]]`): the field
                // without which it types is the one at fault.
                let culprit = v.as_table().and_then(|fields| {
                    fields.keys().find(|f| {
                        let mut rest = fields.clone();
                        rest.remove(*f);
                        alone(toml::Value::Table(rest)).is_ok()
                    })
                });
                match culprit {
                    Some(field) => found.push(format!("{path}[{i}].{field}: {why}")),
                    None => found.push(format!("{path}[{i}]: {why}")),
                }
            }
        }
        _ => {}
    }
    if found.is_empty() {
        let why = probe(section, Some(key), value.clone())
            .err()
            .unwrap_or_default();
        found.push(format!("{path}: {why}"));
    }
    found
}

/// Types a config holding only `section.key = value` (every other key at its
/// default), and words serde's complaint for an operator.
fn probe(section: &str, key: Option<&str>, value: toml::Value) -> Result<(), String> {
    let inner = match key {
        Some(key) => toml::Value::Table(toml::Table::from_iter([(key.to_owned(), value)])),
        None => value,
    };
    let probe = toml::Table::from_iter([(section.to_owned(), inner)]);
    toml::Value::Table(probe)
        .try_into::<RawConfig>()
        .map(drop)
        .map_err(|e: toml::de::Error| plain(e.message()))
}

/// serde says `invalid type: string "lots", expected u64`; an operator
/// reads `expected a whole number (0 or more), found string "lots"`.
pub(super) fn plain(message: &str) -> String {
    let message = message.trim();
    // `unknown field `base_ur`, expected one of `base_url`, `auth``
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (name, expected) = rest.split_once('`').unwrap_or((rest, ""));
        let names = expected.split('`').skip(1).step_by(2);
        return format!("unknown key{}", suggestion(name, names));
    }
    let (found, expected) = ["invalid type: ", "invalid value: "]
        .iter()
        .find_map(|p| message.strip_prefix(p))
        .and_then(|rest| rest.rsplit_once(", expected "))
        .map_or((None, message), |(f, e)| (Some(f), e));
    let expected = match expected {
        "u8" => "a whole number from 0 to 255",
        "u16" => "a whole number from 0 to 65535",
        "u32" => "a whole number from 0 to 4294967295",
        "u64" | "u128" | "usize" => "a whole number (0 or more)",
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number",
        "f32" | "f64" => "a number",
        "a boolean" => "true or false",
        "a sequence" => "an array",
        "a map" => "a table",
        other => other,
    };
    match found {
        Some(found) => format!("expected {expected}, found {found}"),
        None => expected.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_secret_was_given_is_not_repeated() {
        let value = toml::Value::String("FileSecretValue-0123456789".into());
        let problems = locate("callbacks", "previous_secrets", &value);
        assert_eq!(
            problems,
            ["callbacks.previous_secrets: expected an array, found string (not shown: a secret)"]
        );
        let problems = locate("upstream", "service_key", &toml::Value::Integer(12345678));
        assert!(!problems[0].contains("12345678"), "{problems:?}");
    }

    #[test]
    fn serde_words_become_plain_words() {
        assert_eq!(
            plain("invalid type: string \"lots\", expected u64"),
            "expected a whole number (0 or more), found string \"lots\""
        );
        assert_eq!(
            plain("invalid type: integer `1`, expected a boolean"),
            "expected true or false, found integer `1`"
        );
        assert_eq!(plain("missing field `path`"), "missing field `path`");
    }

    #[test]
    fn each_bad_key_is_named_and_removed() {
        let mut t: toml::Table = "[upstream]\nconnect_timeout_ms = \"lots\"\nauth = 5\nbase_url = \"http://x\"\n[workers.aliases]\na = \"b\"\nc = 1\n[shadow]\nunordered_paths = [\"a\", 2]\n"
            .parse()
            .unwrap();
        let problems = remove_mistyped(&mut t);
        assert_eq!(
            problems,
            [
                "shadow.unordered_paths[1]: expected a string, found integer `2`",
                "upstream.auth: expected a string, found integer `5`",
                "upstream.connect_timeout_ms: expected a whole number (0 or more), found string \"lots\"",
                "workers.aliases.c: expected a string, found integer `1`",
            ]
        );
        // What types stays; the rest now deserialises whole.
        assert_eq!(t["upstream"]["base_url"].as_str(), Some("http://x"));
        let raw: RawConfig = toml::Value::Table(t).try_into().unwrap();
        assert_eq!(
            raw.upstream.connect_timeout_ms,
            RawConfig::default().upstream.connect_timeout_ms
        );
    }

    #[test]
    fn a_bad_field_of_an_array_table_is_named() {
        let mut t: toml::Table = "[[shadow.ignore]]\npath = \"a\"\n[[shadow.ignore]]\npath = \"b\"\ncompare = \"fuzzy\"\n[[shadow.ignore]]\nreason = \"no path\"\n"
            .parse()
            .unwrap();
        let problems = remove_mistyped(&mut t);
        assert_eq!(problems.len(), 2, "{problems:?}");
        let mut t: toml::Table = "[upstream]\nbase_ur = \"x\"\nnonsense = 1\n"
            .parse()
            .unwrap();
        assert_eq!(
            remove_mistyped(&mut t),
            [
                "upstream.base_ur: unknown key (did you mean `base_url`?)",
                "upstream.nonsense: unknown key",
            ]
        );
        assert!(
            problems[0].starts_with("shadow.ignore[1].compare: unknown variant `fuzzy`"),
            "{problems:?}"
        );
        assert_eq!(problems[1], "shadow.ignore[2]: missing field `path`");
    }
}
