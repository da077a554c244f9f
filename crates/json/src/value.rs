//! Lenient readers of V2 JSON held as a `Value`: the general reading of an
//! answer the typed readers ([`crate::wire`]) do not take, and of the
//! answers the gateway's operations read as a whole. V2 documents some
//! numbers as strings and its examples vary, so amounts and counts are read
//! either way, and absent lists read as empty.

use serde_json::Value;

/// Reads an object field of V2 data as a string, accepting numbers too (V2
/// documents some amounts as strings but examples vary).
#[inline]
pub fn string_of(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// Reads an integer field, accepting integral floats and numeric strings.
#[inline]
pub fn int_of(v: Option<&Value>) -> Option<i64> {
    match v? {
        Value::Number(n) => n.as_i64().or_else(|| n.as_f64().map(|f| f as i64)),
        Value::String(s) => s.trim().parse().ok(),
        _ => None,
    }
}

/// The items of a V2 list field, or an empty list if absent.
#[inline]
pub fn list_of<'v>(data: &'v Value, field: &str) -> &'v [Value] {
    data.get(field)
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or(&[])
}
