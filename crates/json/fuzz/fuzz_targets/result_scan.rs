//! Fuzz target: arbitrary bytes as a V2 result-page answer. Whatever the
//! one-pass scanner (`scan::scan`) accepts, serde_json must read the
//! same way: valid JSON, the same rows, the same skeleton, the same head
//! (code, request id, count, headers), the same column formats. A body it
//! refuses goes to serde anyway, so refusing is allowed; accepting
//! something serde reads differently is the failure.
#![no_main]

use libfuzzer_sys::fuzz_target;
use serde_json::Value;

use v1compat_json::scan::scan;
use v1compat_json::v2::{DataEnvelope, V2ResultPage};
use v1compat_json::wire::OrDefault;

fuzz_target!(|input: &[u8]| {
    // The first byte picks the rows the columns are summed up over.
    let Some((&window, body)) = input.split_first() else {
        return;
    };
    let (from, to) = (usize::from(window >> 4), usize::from(window & 0x0f) + 1);
    let Some(scanned) = scan(body, from..from + to) else {
        return;
    };
    let whole: Value = serde_json::from_slice(body).expect("accepted a body serde refuses");
    let list = whole["data"]["list"]
        .as_array()
        .expect("accepted a body without a data.list array");
    let rows = &scanned.rows;
    assert_eq!(rows.len(), list.len());
    for (i, expected) in list.iter().enumerate() {
        let row: Value = serde_json::from_slice(rows.row(i)).expect("a row serde refuses");
        assert_eq!(&row, expected, "row {i}");
    }
    let mut emptied = whole.clone();
    emptied["data"]["list"] = Value::Array(Vec::new());
    let text = scanned.skeleton().expect("a skeleton that is not UTF-8");
    let skeleton: Value = serde_json::from_str(&text).expect("a skeleton serde refuses");
    assert_eq!(skeleton, emptied);
    // A head the scanner read is what the typed reading of the skeleton gives.
    if let Some(head) = &scanned.head {
        let typed: DataEnvelope<OrDefault<V2ResultPage>> =
            serde_json::from_str(&text).expect("a head read where the typed reading refuses");
        assert_eq!(head.code, typed.code);
        assert_eq!(head.request_id, typed.request_id.as_ref().map(|t| &*t.0));
        let page = typed.data.map(|p| p.0).unwrap_or_default();
        assert_eq!(head.page.count, page.count);
        let fields = |p: &V2ResultPage| -> Vec<[Option<String>; 3]> {
            p.headers
                .0
                .iter()
                .map(|h| [&h.0.key, &h.0.label, &h.0.format].map(|f| f.0.as_deref().map(str::to_owned)))
                .collect()
        };
        assert_eq!(fields(&head.page), fields(&page));
    }
    if rows.repeats() {
        return;
    }
    // Column formats as V1's header reads them: `number` when some value of
    // the rows summed up is a number and none is anything but a number or null.
    let summed = rows.summarised();
    assert!(summed.end <= list.len() && summed.start <= summed.end);
    let mut keys: Vec<&String> = list[summed.clone()]
        .iter()
        .filter_map(Value::as_object)
        .flat_map(|o| o.keys())
        .collect();
    keys.sort();
    keys.dedup();
    for key in keys {
        let values = list[summed.clone()]
            .iter()
            .filter_map(|r| r.as_object().and_then(|o| o.get(key.as_str())));
        let (mut seen, mut numbers_only) = (false, true);
        for v in values {
            match v {
                Value::Null => {}
                Value::Number(_) => seen = true,
                _ => {
                    seen = true;
                    numbers_only = false;
                }
            }
        }
        let expected = if seen && numbers_only { "number" } else { "text" };
        assert_eq!(rows.summary(key).format(), expected, "column {key:?}");
    }
});
