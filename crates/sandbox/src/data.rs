//! Deterministic generators: hashes, result rows, log lines and time formatting.
//! Everything here is a pure function of its inputs (seed, run input, row index), so
//! the same run input always yields the same rows and a test can predict them.

use serde_json::{Map, Value};

use super::catalog::{ColumnType, WorkerSpec};

/// FNV-1a over the parts (with a separator), finished with a splitmix64 mix so that
/// nearby inputs give unrelated outputs.
pub(crate) fn hash(parts: &[&[u8]]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for part in parts {
        for b in part.iter().chain(std::iter::once(&0xffu8)) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
    }
    mix(h)
}

fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// 64 lowercase hex characters derived from `h` (the row data id format).
pub(crate) fn hex64(h: u64) -> String {
    (0..4u64)
        .map(|i| format!("{:016x}", mix(h ^ i.wrapping_mul(0x5851_f42d_4c95_7f2d))))
        .collect()
}

/// JSON text with object keys sorted at every level, so key order does not change
/// the hash of an input.
pub(crate) fn canonical(v: &Value) -> String {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let inner: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), canonical(&m[*k])))
                .collect();
            format!("{{{}}}", inner.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

/// Row `i` (0-based) of a run whose data seed is `data_seed`.
pub(crate) fn row(worker: &WorkerSpec, data_seed: u64, i: u64) -> Map<String, Value> {
    let mut m = Map::new();
    let base = hash(&[&data_seed.to_le_bytes(), &i.to_le_bytes()]);
    m.insert("__coreclaw_data_id__".into(), Value::String(hex64(base)));
    for c in &worker.columns {
        let h = hash(&[&base.to_le_bytes(), c.key.as_bytes()]);
        let v = match c.kind {
            ColumnType::Number => number_value(&c.key, h),
            ColumnType::Text => Value::String(text_value(&c.key, &c.label, i, h)),
        };
        m.insert(c.key.clone(), v);
    }
    m
}

fn number_value(key: &str, h: u64) -> Value {
    if key.contains("rating") {
        // 1.0 ..= 5.0 with one decimal.
        let tenths = 10 + (h % 41);
        serde_json::Number::from_f64(tenths as f64 / 10.0)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    } else if key.contains("price") {
        let cents = 100 + (h % 99_900);
        serde_json::Number::from_f64(cents as f64 / 100.0)
            .map(Value::Number)
            .unwrap_or(Value::Null)
    } else if key.contains("status_code") {
        Value::from([200u64, 200, 200, 301, 404][(h % 5) as usize])
    } else {
        Value::from(h % 10_000)
    }
}

const WORDS: &[&str] = &[
    "Amber", "Birch", "Cedar", "Delta", "Ember", "Fjord", "Grove", "Harbor", "Iris", "Juniper",
    "Kestrel", "Linden", "Maple", "Nova", "Orchid", "Pine",
];

fn text_value(key: &str, label: &str, i: u64, h: u64) -> String {
    let word = WORDS[(h % WORDS.len() as u64) as usize];
    let n = i + 1;
    if key.contains("url") || key == "page" {
        format!("https://example.com/{}/{n}", word.to_ascii_lowercase())
    } else if key.contains("phone") {
        format!("+1 555 {:04}", h % 10_000)
    } else if key.ends_with("_id") || key == "asin" {
        format!("{:010}", h % 10_000_000_000)
    } else if key.contains("currency") {
        "USD".to_string()
    } else {
        format!("{word} {label} {n}")
    }
}

/// A log level, numbered as in V1 (`type` 1-4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Level {
    Debug = 1,
    Info = 2,
    Warn = 3,
    Error = 4,
}

impl Level {
    pub(crate) fn word(self) -> &'static str {
        match self {
            Level::Debug => "DEBUG",
            Level::Info => "INFO",
            Level::Warn => "WARN",
            Level::Error => "ERROR",
        }
    }
}

/// One log entry of a run.
#[derive(Debug, Clone)]
pub(crate) struct LogLine {
    pub level: Level,
    pub group: String,
    pub content: String,
    pub timestamp_ms: i64,
}

impl LogLine {
    /// V1 object form.
    pub(crate) fn to_object(&self) -> Value {
        serde_json::json!({
            "type": self.level as i64,
            "group": self.group,
            "content": self.content,
            "timestamp": self.timestamp_ms,
        })
    }

    /// V2 string form: `2026-11-22T14:05:12.123Z INFO SYSTEM: ...`.
    pub(crate) fn to_text(&self) -> String {
        format!(
            "{} {} {}",
            iso_millis(self.timestamp_ms),
            self.level.word(),
            self.content
        )
    }
}

/// ISO-8601 UTC with milliseconds for a Unix time in ms.
pub(crate) fn iso_millis(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        (sod / 60) % 60,
        sod % 60
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian.
pub(crate) fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (if m <= 2 { y + 1 } else { y }, m, d)
}

/// (year, month) of a Unix time in seconds, at UTC+8 (the service's month boundary).
pub(crate) fn month_utc8(secs: i64) -> (i64, u32) {
    let (y, m, _) = civil_from_days((secs + 8 * 3600).div_euclid(86_400));
    (y, m)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::seed_workers;

    #[test]
    fn hex64_shape() {
        let h = hex64(hash(&[b"x"]));
        assert_eq!(h.len(), 64);
        assert!(h
            .chars()
            .all(|c| c.is_ascii_hexdigit() && !c.is_ascii_uppercase()));
        assert_ne!(h, hex64(hash(&[b"y"])));
    }

    #[test]
    fn canonical_ignores_key_order() {
        let a: Value = serde_json::from_str(r#"{"b":1,"a":{"y":[1,2],"x":"s"}}"#).unwrap();
        let b: Value = serde_json::from_str(r#"{"a":{"x":"s","y":[1,2]},"b":1}"#).unwrap();
        assert_eq!(canonical(&a), canonical(&b));
    }

    #[test]
    fn rows_are_deterministic_and_typed() {
        let w = &seed_workers()[0];
        let r1 = row(w, 42, 3);
        assert_eq!(r1, row(w, 42, 3));
        assert_ne!(r1, row(w, 42, 4));
        assert!(r1["rating"].is_number());
        assert!(r1["title"].is_string());
        assert_eq!(r1.len(), w.columns.len() + 1);
    }

    #[test]
    fn iso_formatting() {
        assert_eq!(iso_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso_millis(1_795_356_312_123), "2026-11-22T14:05:12.123Z");
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
    }

    #[test]
    fn month_boundary_is_utc8() {
        // 2026-11-30T16:00:00Z is 2026-12-01 00:00 at UTC+8.
        assert_eq!(month_utc8(1_796_054_400), (2026, 12));
        assert_eq!(month_utc8(1_796_054_399), (2026, 11));
    }
}
