//! Property tests (proptest) of the V1 decoders and the V2 path builder over
//! arbitrary input: every operation's decoding of arbitrary bodies and query
//! strings (through `ops::handle`, so every decoder the operations use is
//! covered) never panics, always ends in an answer or a V1 error, and every
//! V2 path it produces keeps each identifier inside its own segment and
//! never reaches a V2 shortcut (`worker-runs/last…`). The segment builder is
//! checked on its own as well. Bounded: a few hundred cases per property.

use std::sync::Arc;

use bytes::Bytes;
use percent_encoding::percent_decode_str;
use proptest::prelude::*;
use serde_json::{json, Map, Value};

use v1compat::ops::{self, Translator, V1Request};
use v1compat::upstream::ApiKey;
use v1compat::v1::route::Operation;
use v1compat::v2::{Part, Segment, V2Path, RESERVED_RUN_WORDS};

use crate::support::{MockV2, Reply};

/// A V2 that answers every call with a success envelope that has a little
/// of everything the operations read; the paths it was asked for are
/// checked afterwards.
fn v2() -> MockV2 {
    MockV2::new(|_| {
        Reply::ok(json!({
            "run_slug": "01KS2A1M515HG7PZX9STTB0KPH", "slug": "r", "status": "running",
            "list": [], "count": 0, "headers": [], "input_schema": {"properties": []},
            "version": "v1", "balance": "1.00", "download_url": "http://h/x"}))
    })
}

/// Characters that have broken path builders elsewhere, mixed with plain ones.
fn hostile_text() -> impl Strategy<Value = String> {
    let pieces = prop_oneof![
        Just("/".to_owned()),
        Just("..".to_owned()),
        Just(".".to_owned()),
        Just("?".to_owned()),
        Just("#".to_owned()),
        Just("%2e".to_owned()),
        Just("%2F".to_owned()),
        Just("\\".to_owned()),
        Just("\r\n".to_owned()),
        Just("\0".to_owned()),
        Just(" ".to_owned()),
        Just("~".to_owned()),
        Just("last".to_owned()),
        Just("LAST".to_owned()),
        Just("coreclaw/news".to_owned()),
        Just("01KS2A1M515HG7PZX9STTB0KPH".to_owned()),
        "[a-zA-Z0-9_-]{0,8}",
        any::<String>(),
    ];
    prop::collection::vec(pieces, 0..5).prop_map(|v| v.concat())
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        (-1e12f64..1e12).prop_map(|f| json!(f)),
        prop_oneof![
            Just(0i64),
            Just(1),
            Just(100),
            Just(101),
            Just(1000),
            Just(1001)
        ]
        .prop_map(|n| json!(n)),
        hostile_text().prop_map(Value::String),
    ];
    leaf.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::btree_map("[a-z_]{1,8}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
}

const FIELDS: &[&str] = &[
    "run_slug",
    "task_slug",
    "scraper_slug",
    "page_index",
    "page_size",
    "callback_url",
    "format",
    "filter_keys",
    "input",
    "is_async",
    "status",
    "version",
];

/// A body: arbitrary bytes, or a JSON object of V1 field names with
/// arbitrary values (the inputs that get past parsing).
fn body() -> impl Strategy<Value = Vec<u8>> {
    let object = prop::collection::vec((prop::sample::select(FIELDS), json_value()), 0..6)
        .prop_map(|fields| {
            let map: Map<String, Value> =
                fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
            serde_json::to_vec(&Value::Object(map)).unwrap()
        });
    prop_oneof![prop::collection::vec(any::<u8>(), 0..64), object]
}

fn query() -> impl Strategy<Value = Option<String>> {
    let names = prop::sample::select(&["slug", "search", "limit", "page", "language", "x"][..]);
    prop::option::of(
        prop::collection::vec((names, hostile_text()), 0..4).prop_map(|pairs| {
            pairs
                .into_iter()
                .map(|(k, v)| {
                    // Sometimes encoded, sometimes raw as a client might send.
                    if v.len() % 2 == 0 {
                        let v: String =
                            url::form_urlencoded::byte_serialize(v.as_bytes()).collect();
                        format!("{k}={v}")
                    } else {
                        format!("{k}={v}")
                    }
                })
                .collect::<Vec<_>>()
                .join("&")
        }),
    )
}

/// Every identifier in a V2 path stays one segment: decoded, none holds a
/// separator or a control character, none is a dot segment, and no run
/// position holds a shortcut word.
fn assert_safe(path_and_query: &str) {
    let path = path_and_query.split('?').next().unwrap();
    assert!(path.starts_with("/api/v2/"), "{path_and_query}");
    assert!(!path.contains('#'), "{path_and_query}");
    let segments: Vec<String> = path["/api/v2/".len()..]
        .split('/')
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    assert!(segments.len() <= 4, "{path_and_query}");
    for s in &segments {
        assert!(!s.is_empty(), "empty segment in {path_and_query}");
        assert!(s != "." && s != "..", "{path_and_query}");
        assert!(
            !s.chars()
                .any(|c| c.is_control() || matches!(c, '/' | '\\' | '?' | '#')),
            "{path_and_query}"
        );
    }
    if segments[0] == "worker-runs" && segments.len() > 1 {
        assert!(
            !RESERVED_RUN_WORDS
                .iter()
                .any(|w| segments[1].eq_ignore_ascii_case(w)),
            "shortcut reached: {path_and_query}"
        );
    }
}

fn translator(upstream: MockV2) -> Translator {
    let config = v1compat::config::load(
        "[upstream]\nbase_url = \"http://127.0.0.1:9\"\nservice_key = \"svc\"\n[workers]\nverify = false\n",
        Vec::new(),
    )
    .unwrap();
    Translator::new(Arc::new(upstream), config.translation())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 384, ..ProptestConfig::default() })]

    #[test]
    fn every_operation_decodes_arbitrary_input_safely(
        op in prop::sample::select(&Operation::ALL[..]),
        body in body(),
        query in query(),
        keyed in any::<bool>(),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let v2 = v2();
        let tr = translator(v2.clone());
        let req = V1Request {
            op,
            query,
            body: Bytes::from(body),
            key: keyed.then(|| ApiKey::new("client-key").unwrap()),
            request_id: v1compat::common::request_id::RequestId::from_static("prop"),
        };
        // An error must render as a V1 envelope; neither side may panic.
        if let Err(err) = rt.block_on(ops::handle(&tr, req)) {
            let r = err.render();
            prop_assert!(r.envelope.code != 0);
            prop_assert!(r.envelope.data.is_null());
        }
        for seen in v2.seen() {
            assert_safe(&seen.target);
        }
    }

    #[test]
    fn a_segment_is_one_segment_and_decodes_to_itself(raw in hostile_text()) {
        if let Ok(seg) = Segment::new(&raw) {
            let path = V2Path::new(&[Part::Lit("worker-tasks"), Part::Id(&seg), Part::Lit("runs")]);
            assert_safe(path.path_and_query());
            let encoded = path.path().split('/').nth(4).unwrap();
            prop_assert_eq!(percent_decode_str(encoded).decode_utf8().unwrap(), raw.as_str());
        }
        if let Ok(seg) = Segment::run(&raw) {
            let path = V2Path::new(&[Part::Lit("worker-runs"), Part::Id(&seg), Part::Lit("abort")]);
            assert_safe(path.path_and_query());
        }
        if let Ok(seg) = Segment::worker(&raw) {
            let path = V2Path::new(&[Part::Lit("workers"), Part::Id(&seg), Part::Lit("runs")]);
            assert_safe(path.path_and_query());
            prop_assert_eq!(raw.matches('/').count(), seg.as_str().matches('~').count() - raw.matches('~').count());
        }
    }

    #[test]
    fn query_values_never_leave_their_parameter(value in any::<String>()) {
        let path = V2Path::new(&[Part::Lit("store")]).query("keyword", &value).query("limit", 5);
        let pq = path.path_and_query();
        let query = pq.split_once('?').unwrap().1;
        let pairs: Vec<(String, String)> = url::form_urlencoded::parse(query.as_bytes()).into_owned().collect();
        prop_assert_eq!(pairs.len(), 2);
        prop_assert_eq!(&pairs[0], &("keyword".to_owned(), value.clone()));
        prop_assert_eq!(&pairs[1], &("limit".to_owned(), "5".to_owned()));
        prop_assert!(!pq.contains('#'));
    }
}
