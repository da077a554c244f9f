//! `check-config --print`: the effective configuration (file, defaults and
//! environment overrides merged) as TOML, with every secret masked so the
//! output can be pasted into a ticket.

use super::RawConfig;

/// What a set secret prints as.
pub const MASK: &str = "********";

/// The effective configuration as TOML text, sections in the order of the
/// documented example, secrets masked.
pub fn effective_toml(raw: &RawConfig) -> String {
    let text = toml::to_string_pretty(raw).unwrap_or_default();
    let Ok(mut doc) = text.parse::<toml_edit::DocumentMut>() else {
        return text;
    };
    mask(doc.as_table_mut());
    doc.to_string()
}

/// A key holds a secret when its name says so (`service_key`, `…_token`,
/// `…secret…`, `…password…`).
pub(crate) fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    key == "key"
        || key.ends_with("_key")
        || key.ends_with("token")
        || key.contains("secret")
        || key.contains("password")
}

fn mask(table: &mut dyn toml_edit::TableLike) {
    for (key, item) in table.iter_mut() {
        match item {
            toml_edit::Item::Value(v) => mask_value(&key, v),
            toml_edit::Item::Table(t) => mask(t),
            toml_edit::Item::ArrayOfTables(tables) => tables.iter_mut().for_each(|t| mask(t)),
            toml_edit::Item::None => {}
        }
    }
}

fn mask_value(key: &str, value: &mut toml_edit::Value) {
    match value {
        toml_edit::Value::String(s) => {
            let masked = if is_secret(key) && !s.value().is_empty() {
                Some(MASK.to_owned())
            } else {
                mask_url_password(s.value())
            };
            if let Some(masked) = masked {
                *value = toml_edit::Value::from(masked);
            }
        }
        toml_edit::Value::InlineTable(t) => mask(t),
        toml_edit::Value::Array(items) => {
            // A list under a secret's name (callbacks.previous_secrets) is
            // masked entry by entry, like a single value.
            for item in items.iter_mut() {
                match item {
                    toml_edit::Value::InlineTable(t) => mask(t),
                    v @ toml_edit::Value::String(_) => mask_value(key, v),
                    _ => {}
                }
            }
        }
        _ => {}
    }
}

/// A URL-like value with a secret in it, masked (see [`mask_url`]); `None`
/// when there is nothing to mask.
fn mask_url_password(s: &str) -> Option<String> {
    let masked = mask_url(s);
    (masked != s).then_some(masked)
}

/// `text` as it may be shown in a message, a log line or `--print`, whether
/// or not it parses as a URL: a password in its userinfo
/// (`postgres://user:pw@host` → `postgres://user:********@host`), userinfo
/// without one (a token as the user name: `https://********@host`), and the
/// value of every query parameter whose name says secret (`?password=…`,
/// PostgreSQL's `sslpassword`, `…token…`, `…key…`) masked; so too
/// `password=…` in a PostgreSQL key/value connection string.
pub fn mask_url(text: &str) -> String {
    // No scheme: a key/value connection string, or a URL without its
    // scheme (`user:pw@proxy:3128`, as proxy variables are often set).
    let (scheme, rest) = match text.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None if text.contains('=') => return mask_key_values(text),
        None => (None, text),
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let authority = match authority.rsplit_once('@') {
        Some((userinfo, host)) => match userinfo.split_once(':') {
            Some((user, _)) => format!("{user}:{MASK}@{host}"),
            None => format!("{MASK}@{host}"),
        },
        None => authority.to_owned(),
    };
    let (path, fragment) = match tail.split_once('#') {
        Some((path, fragment)) => (path, Some(fragment)),
        None => (tail, None),
    };
    let mut shown = match scheme {
        Some(scheme) => format!("{scheme}://{authority}"),
        None => authority,
    };
    match path.split_once('?') {
        Some((path, query)) => {
            shown.push_str(path);
            shown.push('?');
            let pairs: Vec<String> = query
                .split('&')
                .map(|pair| match pair.split_once('=') {
                    Some((name, value)) if is_secret_parameter(name) && !value.is_empty() => {
                        format!("{name}={MASK}")
                    }
                    _ => pair.to_owned(),
                })
                .collect();
            shown.push_str(&pairs.join("&"));
        }
        None => shown.push_str(path),
    }
    if let Some(fragment) = fragment {
        shown.push('#');
        shown.push_str(fragment);
    }
    shown
}

/// A query parameter (or connection-string key) that carries a secret.
fn is_secret_parameter(name: &str) -> bool {
    let name = name.to_ascii_lowercase();
    is_secret(&name) || name.contains("passw") || name == "pwd" || name.contains("key")
}

/// `host=db password=pw` → `host=db password=********`: the secret values
/// of a key/value connection string, a quoted one to its closing quote.
fn mask_key_values(text: &str) -> String {
    let mut shown = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(eq) = rest.find('=') {
        let name_start = rest[..eq]
            .rfind(|c: char| c.is_whitespace())
            .map_or(0, |i| i + 1);
        let name = rest[name_start..eq].trim();
        let value = &rest[eq + 1..];
        let value_len = if let Some(quoted) = value.strip_prefix('\'') {
            quoted.find('\'').map_or(value.len(), |i| i + 2)
        } else {
            value.find(char::is_whitespace).unwrap_or(value.len())
        };
        shown.push_str(&rest[..=eq]);
        if is_secret_parameter(name) && value_len > 0 {
            shown.push_str(MASK);
        } else {
            shown.push_str(&value[..value_len]);
        }
        rest = &value[value_len..];
    }
    shown.push_str(rest);
    shown
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_and_the_rest_printed() {
        let mut raw = RawConfig::default();
        raw.upstream.service_key = "scraper_api_0123456789".into();
        raw.shadow.legacy_base_url = "https://ops:hunter2@legacy.example/".into();
        raw.callbacks.secret = "relay-secret-0123456789".into();
        raw.callbacks.previous_secrets = vec!["older-secret-9876543210".into()];
        raw.callbacks.store = "postgres://gw:pgpass42@db/v1compat".into();
        let text = effective_toml(&raw);
        for secret in [
            "relay-secret-0123456789",
            "older-secret-9876543210",
            "pgpass42",
        ] {
            assert!(!text.contains(secret), "{secret} printed: {text}");
        }
        assert!(!text.contains("scraper_api_0123456789"), "{text}");
        assert!(!text.contains("hunter2"), "{text}");
        assert!(text.contains("service_key = \"********\""), "{text}");
        assert!(text.contains("ops:********@legacy.example"), "{text}");
        assert!(
            text.contains("base_url = \"https://openapi.coreclaw.com\""),
            "{text}"
        );
        // The printed text is a configuration that loads back.
        let back: RawConfig = toml::from_str(&text).unwrap();
        assert_eq!(back.limits.max_in_flight, raw.limits.max_in_flight);
    }

    #[test]
    fn urls_are_masked_whether_or_not_they_parse() {
        for (text, shown) in [
            (
                "https://user:s3cretPW@host:99999",
                "https://user:********@host:99999",
            ),
            (
                "https://TOKEN@gw.example/v2",
                "https://********@gw.example/v2",
            ),
            (
                "postgres://u@h/db?sslmode=require&password=S3cretQ",
                "postgres://********@h/db?sslmode=require&password=********",
            ),
            (
                "postgres://h/db?application_name=gw&sslpassword=K3y#frag",
                "postgres://h/db?application_name=gw&sslpassword=********#frag",
            ),
            (
                "host=db user=gw password=pgpass42 dbname=v1",
                "host=db user=gw password=******** dbname=v1",
            ),
            (
                "host=db password='two words' dbname=v1",
                "host=db password=******** dbname=v1",
            ),
            (
                "https://openapi.coreclaw.com/api",
                "https://openapi.coreclaw.com/api",
            ),
            ("not a url", "not a url"),
            ("u:secret@p.example:1080", "u:********@p.example:1080"),
            (
                "redb:/var/lib/v1compat/callbacks.redb",
                "redb:/var/lib/v1compat/callbacks.redb",
            ),
        ] {
            assert_eq!(mask_url(text), shown, "{text}");
        }
    }

    #[test]
    fn an_unset_secret_prints_empty() {
        let text = effective_toml(&RawConfig::default());
        assert!(text.contains("service_key = \"\""), "{text}");
    }
}
