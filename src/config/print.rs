//! `check-config --print`: the effective configuration (file, defaults and
//! environment overrides merged) as TOML, with every secret masked so the
//! output can be pasted into a ticket.

use super::RawConfig;
use crate::common::redact::{is_secret, mask_url, MASK};

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
