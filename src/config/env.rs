//! Environment overrides: `V1COMPAT_SECTION__KEY=value` sets `key` in
//! `[section]` of the parsed file before it is typed and validated.
//!
//! A value is read as the type of the key it sets (the key's default says
//! which): a string key takes `123` or `true` as text, a number key must get
//! a number, a boolean key `true` or `false`, a list or table key a TOML
//! inline value (`["a", "b"]`, `{ old = "owner~name" }`). A problem names
//! the variable.
//!
//! Only names of the form `V1COMPAT_<SECTION>__<KEY>` are overrides, and an
//! override must name a key. Other `V1COMPAT_…` names (the test suite's
//! `V1COMPAT_BIN` and `V1COMPAT_BLESS`, say) are not configuration: they are
//! ignored with a warning, never an error.

use super::ENV_PREFIX;

/// Names in the `V1COMPAT_` space that are read elsewhere, not overrides.
const NOT_OVERRIDES: &[&str] = &["V1COMPAT_CONFIG"];

/// What applying the environment found.
#[derive(Debug, Default)]
pub(super) struct Applied {
    pub problems: Vec<String>,
    pub warnings: Vec<String>,
    /// `section.key` → the variable that set it.
    pub set: Vec<(String, String)>,
}

/// Applies every `V1COMPAT_…` override of `env` to `table`, typed by the
/// matching key of `defaults`.
pub(super) fn overlay(
    table: &mut toml::Table,
    defaults: &toml::Table,
    env: impl IntoIterator<Item = (String, String)>,
) -> Applied {
    let mut applied = Applied::default();
    let mut env: Vec<(String, String)> = env
        .into_iter()
        .filter(|(name, _)| name.starts_with(ENV_PREFIX) && !NOT_OVERRIDES.contains(&name.as_str()))
        .collect();
    // Sorted, so that problems and warnings come out in a stable order.
    env.sort();
    for (name, value) in env {
        let rest = &name[ENV_PREFIX.len()..];
        if !rest.contains("__") {
            applied.warnings.push(format!(
                "{name} is not a configuration override (those are named V1COMPAT_<SECTION>__<KEY>); ignored"
            ));
            continue;
        }
        let path: Vec<String> = rest.split("__").map(|p| p.to_ascii_lowercase()).collect();
        if path.iter().any(String::is_empty) {
            applied.problems.push(format!(
                "{name}: malformed override name (V1COMPAT_<SECTION>__<KEY>)"
            ));
            continue;
        }
        let key = path.join(".");
        let typed = match lookup(defaults, &path) {
            Some(default) => typed(default, &value),
            // A key without a default value (an optional one) in a known
            // section: read as TOML, else text; typing it against the
            // schema then names the variable if it does not fit.
            None if lookup(defaults, &path[..1]).is_some_and(toml::Value::is_table) => {
                Ok(inline(value.trim()).unwrap_or_else(|| toml::Value::String(value.clone())))
            }
            None => {
                applied
                    .problems
                    .push(format!("{name}: {key} is not a configuration key"));
                continue;
            }
        };
        match typed {
            Ok(v) => {
                set_path(table, &path, v);
                applied.set.push((key, name));
            }
            // What a secret's variable holds is never repeated.
            Err(expected)
                if path
                    .last()
                    .is_some_and(|k| crate::common::redact::is_secret(k)) =>
            {
                applied.problems.push(format!(
                    "{name}: {key} takes {expected} (the value given is not shown: a secret)"
                ))
            }
            Err(expected) => applied
                .problems
                .push(format!("{name}: {key} takes {expected}, not {value:?}")),
        }
    }
    applied
}

fn lookup<'a>(table: &'a toml::Table, path: &[String]) -> Option<&'a toml::Value> {
    let (first, rest) = path.split_first()?;
    let value = table.get(first)?;
    if rest.is_empty() {
        return Some(value);
    }
    lookup(value.as_table()?, rest)
}

/// Reads `text` as the type of `default`; the error says what was expected.
fn typed(default: &toml::Value, text: &str) -> Result<toml::Value, &'static str> {
    let t = text.trim();
    match default {
        toml::Value::String(_) => Ok(toml::Value::String(text.to_owned())),
        toml::Value::Integer(_) => t
            .replace('_', "")
            .parse::<i64>()
            .map(toml::Value::Integer)
            .map_err(|_| "a whole number"),
        toml::Value::Float(_) => t
            .parse::<f64>()
            .ok()
            .filter(|f| f.is_finite())
            .map(toml::Value::Float)
            .ok_or("a number"),
        toml::Value::Boolean(_) => match t.to_ascii_lowercase().as_str() {
            "true" => Ok(toml::Value::Boolean(true)),
            "false" => Ok(toml::Value::Boolean(false)),
            _ => Err("true or false"),
        },
        toml::Value::Array(_) => match inline(t) {
            Some(v @ toml::Value::Array(_)) => Ok(v),
            _ => Err("a TOML array such as [\"a\", \"b\"]"),
        },
        toml::Value::Table(_) => match inline(t) {
            Some(v @ toml::Value::Table(_)) => Ok(v),
            _ => Err("a TOML inline table such as { name = \"value\" }"),
        },
        toml::Value::Datetime(_) => Err("a date-time"),
    }
}

/// A TOML value written inline (`[1, 2]`, `{ a = "b" }`).
fn inline(text: &str) -> Option<toml::Value> {
    format!("v = {text}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RawConfig;

    fn apply(pairs: &[(&str, &str)]) -> (toml::Table, Applied) {
        let defaults = toml::Table::try_from(RawConfig::default()).unwrap();
        let mut table = toml::Table::new();
        let env = pairs.iter().map(|(a, b)| (a.to_string(), b.to_string()));
        let applied = overlay(&mut table, &defaults, env);
        (table, applied)
    }

    #[test]
    fn a_secret_that_does_not_type_is_not_repeated() {
        let (_, a) = apply(&[(
            "V1COMPAT_CALLBACKS__PREVIOUS_SECRETS",
            "s3cretPW-0123456789",
        )]);
        assert_eq!(a.problems.len(), 1, "{:?}", a.problems);
        assert!(!a.problems[0].contains("s3cretPW"), "{:?}", a.problems);
        assert!(a.problems[0].contains("callbacks.previous_secrets takes a TOML array"));
    }

    #[test]
    fn values_take_the_type_of_their_key() {
        let (t, a) = apply(&[
            ("V1COMPAT_UPSTREAM__SERVICE_KEY", "123"),
            ("V1COMPAT_UPSTREAM__AUTH", "true"),
            ("V1COMPAT_LIMITS__MAX_IN_FLIGHT", "64"),
            ("V1COMPAT_RETRY__BUDGET_PERCENT", "0.5"),
            ("V1COMPAT_WORKERS__VERIFY", "FALSE"),
            ("V1COMPAT_SHADOW__UNORDERED_PATHS", "[\"data.x[*]\"]"),
            ("V1COMPAT_WORKERS__ALIASES", "{ old = \"owner~name\" }"),
        ]);
        assert!(a.problems.is_empty(), "{:?}", a.problems);
        assert_eq!(t["upstream"]["service_key"].as_str(), Some("123"));
        assert_eq!(t["upstream"]["auth"].as_str(), Some("true"));
        assert_eq!(t["limits"]["max_in_flight"].as_integer(), Some(64));
        assert_eq!(t["retry"]["budget_percent"].as_float(), Some(0.5));
        assert_eq!(t["workers"]["verify"].as_bool(), Some(false));
        assert_eq!(
            t["shadow"]["unordered_paths"][0].as_str(),
            Some("data.x[*]")
        );
        assert_eq!(t["workers"]["aliases"]["old"].as_str(), Some("owner~name"));
        assert_eq!(a.set.len(), 7);
    }

    #[test]
    fn problems_name_the_variable_and_what_it_takes() {
        let (_, a) = apply(&[
            ("V1COMPAT_UPSTREAM__CONNECT_TIMEOUT_MS", "lots"),
            ("V1COMPAT_WORKERS__VERIFY", "yes"),
            ("V1COMPAT_UPSTREM__BASE_URL", "http://x"),
            ("V1COMPAT_UPSTREAM____X", "1"),
        ]);
        assert_eq!(
            a.problems,
            [
                "V1COMPAT_UPSTREAM__CONNECT_TIMEOUT_MS: upstream.connect_timeout_ms takes a whole number, not \"lots\"",
                "V1COMPAT_UPSTREAM____X: malformed override name (V1COMPAT_<SECTION>__<KEY>)",
                "V1COMPAT_UPSTREM__BASE_URL: upstrem.base_url is not a configuration key",
                "V1COMPAT_WORKERS__VERIFY: workers.verify takes true or false, not \"yes\"",
            ]
        );
    }

    #[test]
    fn other_names_in_the_space_are_warnings() {
        let (t, a) = apply(&[
            ("V1COMPAT_BIN", "target/debug/v1compat"),
            ("V1COMPAT_BLESS", "1"),
            ("V1COMPAT_CONFIG", "/etc/v1compat.toml"),
            ("PATH", "/usr/bin"),
        ]);
        assert!(t.is_empty());
        assert!(a.problems.is_empty());
        assert_eq!(a.warnings.len(), 2, "{:?}", a.warnings);
        assert!(a.warnings[0].starts_with("V1COMPAT_BIN is not a configuration override"));
    }
}
