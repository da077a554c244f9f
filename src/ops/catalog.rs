//! The public catalog: store search, worker detail and proxy regions. V1
//! served these without a key; V2 worker detail needs one, so the client's
//! key or the configured service key is used. V1 never checked a key here, so
//! when V2 refuses the client's key the call is repeated once with the service
//! key (in [`Exchange::call`]).
//!
//! | V1 | V2 | rule |
//! |---|---|---|
//! | `GET /api/store?search=&limit=` | `GET /api/v2/store?keyword=&offset=&limit=` | `search` required, non-empty (`compat.empty_store_search = "all"`: `search=` sends no `keyword`, listing every worker); `limit` default 10 sent explicitly, at least 1, above `limits.max_page_size` (1,000) that many; above 100, 100-row pages fetched concurrently, cut at the first short page; a `search` over 200 characters matches nothing (empty list, V2 not asked) |
//! | `data.scraper[]` `{slug, title, description}` | `data.scraper[]` | exactly those three fields (`""` when absent); `name`, `path`, `username` dropped |
//! | `GET /api/scraper?slug=` | `GET /api/v2/workers/{id}` + `GET /api/v2/workers/{id}/input-schema` | concurrently; `owner/name` → `owner~name`; unknown → 404/50001 |
//! | `data.version`, `data.readme` | worker detail | `""` when absent |
//! | `data.parameters.system` | worker detail `parameters.system` | `cpus`, `memory_bytes` (or `memory`, per `compat.worker_memory_field`; read from either V2 name), `max_total_charge`, `max_total_traffic`, `execute_limit_time_seconds`; the shipped defaults (0.125, 512, 0, 0, 1800) when V2 omits one |
//! | `data.parameters.custom` | `input_schema` | `properties` as a V1 array whether V2 sends an array of property objects or a JSON-schema map; other descriptor keys kept; `description` `""` when absent. Falls back to the detail's `parameters.custom` when the schema call fails with anything but not-found |
//! | `GET /api/proxy/region` | `GET /api/v2/proxy/region` | `language` passed when given; `data` untouched |
//!
//! V1↔V2 differences here (see `COMPATIBILITY.md`): [`public_catalog_key`](crate::differences::PUBLIC_CATALOG_KEY), [`worker_memory_field`](crate::differences::WORKER_MEMORY_FIELD), [`empty_store_search`](crate::differences::EMPTY_STORE_SEARCH).

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use crate::error::{GatewayError, Subject};
use crate::ops::exchange::Read;
use crate::ops::input::Query;
use crate::ops::wire::{List, OrDefault, StrOrNum};
use crate::ops::{list_of, raw_json, string_of, Exchange};
use crate::paging::{Plan, Window};
use crate::upstream::V2Call;
use crate::v1::Json;
use crate::v2::{Part, Segment, V2Path};
use v1compat_contract::dialect::EmptyStoreSearch;

pub(crate) const STORE_DEFAULT_LIMIT: u64 = 10;

/// One V2 store page; no `keyword` lists every worker.
pub(crate) fn store_call(keyword: Option<&str>, offset: u64, limit: u64) -> V2Call {
    V2Call::get(
        V2Path::new(&[Part::Lit("store")])
            .query_opt("keyword", keyword)
            .query("offset", offset)
            .query("limit", limit),
    )
}

/// The V1 `search` as the V2 `keyword`: required and non-empty, except that
/// under `compat.empty_store_search = "all"` a present but empty `search=`
/// (the n8n V1 node's list dropdown) asks V2 for every worker.
pub(crate) fn store_keyword(
    query: &Query<'_>,
    empty: EmptyStoreSearch,
) -> Result<Option<String>, GatewayError> {
    let search = match (query.get("search"), empty) {
        (Some(s), EmptyStoreSearch::All) if s.trim().is_empty() => {
            query.note(&crate::differences::EMPTY_STORE_SEARCH);
            return Ok(None);
        }
        _ => query.req("search")?.trim(),
    };
    Ok(Some(search.to_owned()))
}

/// Longer than this, a `search` names no worker (V2's `keyword` matches a
/// title, slug or path) and is answered with an empty list without asking
/// V2, as V1 answered it.
pub(crate) const MAX_SEARCH_CHARS: usize = 200;

/// A V2 store page's `data`, read without a `Value` tree: its `scraper` as
/// [`list_of`] reads it, each item's fields as [`string_of`] reads them (see
/// [`wire`](crate::ops::wire); strings borrow from the V2 body). A page
/// this cannot read (a field given twice, an object `Value` reads as raw
/// JSON text) is read as a `Value` instead, to the same answer. What serde
/// skips (a field V1 does not keep, what a kept one holds when it is
/// neither text nor a number) it does not judge: a number past `f64`'s
/// range or a lone surrogate there, which made the `Value` reading refuse
/// the whole answer, is passed over.
#[derive(Default, Deserialize)]
#[serde(default)]
struct V2StorePage<'a> {
    #[serde(borrow)]
    scraper: List<OrDefault<V2StoreItem<'a>>>,
}

/// The three fields V1 keeps of a V2 store item.
#[derive(Default, Deserialize)]
#[serde(default)]
struct V2StoreItem<'a> {
    #[serde(borrow)]
    slug: StrOrNum<'a>,
    #[serde(borrow)]
    title: StrOrNum<'a>,
    #[serde(borrow)]
    description: StrOrNum<'a>,
}

impl<'a> V2StoreItem<'a> {
    /// An item of a page read as a `Value`; anything but an object has none
    /// of the fields.
    fn of_value(item: &Value) -> V2StoreItem<'a> {
        let s = |k: &str| StrOrNum(string_of(item.get(k)).map(Cow::Owned));
        V2StoreItem {
            slug: s("slug"),
            title: s("title"),
            description: s("description"),
        }
    }

    fn v1(&self) -> V1StoreItem<'_> {
        V1StoreItem {
            slug: self.slug.or_default(),
            title: self.title.or_default(),
            description: self.description.or_default(),
        }
    }
}

/// A V1 store item: exactly these three fields, `""` where V2 has none.
#[derive(Serialize)]
struct V1StoreItem<'a> {
    slug: &'a str,
    title: &'a str,
    description: &'a str,
}

#[derive(Serialize)]
struct V1Store<'a> {
    scraper: Vec<V1StoreItem<'a>>,
}

pub(crate) async fn store_search(
    ex: &Exchange<'_>,
    query: &Query<'_>,
) -> Result<Json, GatewayError> {
    let search = store_keyword(query, ex.settings().compat.dialect.empty_store_search)?;
    let max = ex.settings().max_page_size;
    // V1 set no upper bound: a larger `limit` gets the first `max` items
    // (`limits.max_page_size`, which bounds the V2 calls), not a refusal.
    let limit = match query.opt_int("limit")? {
        None => STORE_DEFAULT_LIMIT,
        Some(l) if l >= 1 => {
            if l as u64 > max {
                query.note(&crate::differences::LENIENT_INPUT);
            }
            (l as u64).min(max)
        }
        Some(_) => return Err(GatewayError::bad("limit", "must be at least 1")),
    };
    if search
        .as_ref()
        .is_some_and(|s| s.chars().count() > MAX_SEARCH_CHARS)
    {
        return raw_json(&V1Store { scraper: vec![] });
    }
    let plan = Window {
        page_index: 1,
        page_size: limit,
    }
    .plan();
    // V2 store needs no key; one is sent when available for higher limits.
    let key = ex.key().ok();
    let fetched = ex
        .fetch_pages(plan.offsets.clone(), Subject::Other, |o| {
            store_call(search.as_deref(), o, plan.limit).with_key(key.clone())
        })
        .await?;
    let reads = fetched
        .iter()
        .map(|page| ex.read::<OrDefault<V2StorePage>>(page, Subject::Other))
        .collect::<Result<Vec<_>, _>>()?;
    v1_store(&plan, reads)
}

/// The V1 store page cut by `plan` from its V2 pages, each as
/// [`Exchange::read`] read it (typed, or its `data` as a `Value`).
fn v1_store(
    plan: &Plan,
    reads: Vec<Read<OrDefault<V2StorePage<'_>>>>,
) -> Result<Json, GatewayError> {
    let pages = reads
        .into_iter()
        .map(|read| match read {
            Read::Typed(page) => page
                .map(|page| page.0.scraper.0.into_iter().map(|item| item.0).collect())
                .unwrap_or_default(),
            Read::Untyped(data) => list_of(&data, "scraper")
                .iter()
                .map(V2StoreItem::of_value)
                .collect(),
        })
        .collect();
    let items: Vec<V2StoreItem> = plan.assemble(pages);
    raw_json(&V1Store {
        scraper: items.iter().map(V2StoreItem::v1).collect(),
    })
}

/// The shipped system defaults, for fields V2 leaves out.
const SYSTEM_DEFAULTS: [(&str, f64); 5] = [
    ("cpus", 0.125),
    ("memory", 512.0),
    ("max_total_charge", 0.0),
    ("max_total_traffic", 0.0),
    ("execute_limit_time_seconds", 1800.0),
];

fn number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        json!(v as i64)
    } else {
        json!(v)
    }
}

/// V1 `parameters.system` from the V2 worker detail.
pub(crate) fn v1_system(v2_system: Option<&Value>, memory_field: &str) -> Value {
    let src = v2_system.and_then(Value::as_object);
    let mut out = Map::new();
    for (name, default) in SYSTEM_DEFAULTS {
        let found = if name == "memory" {
            src.and_then(|s| s.get("memory_bytes").or_else(|| s.get("memory")))
        } else {
            src.and_then(|s| s.get(name))
        };
        let value = match found {
            Some(v @ Value::Number(_)) => v.clone(),
            Some(Value::String(s)) => s
                .trim()
                .parse::<f64>()
                .map(number)
                .unwrap_or_else(|_| number(default)),
            _ => number(default),
        };
        out.insert(
            if name == "memory" {
                memory_field.to_owned()
            } else {
                name.to_owned()
            },
            value,
        );
    }
    Value::Object(out)
}

/// V1 `parameters.custom` from a V2 input schema: the descriptor with
/// `properties` as an array of V1 property objects.
pub(crate) fn v1_custom(schema: &Value) -> Value {
    let Some(obj) = schema.as_object() else {
        return json!({ "properties": [], "description": "" });
    };
    let required: Vec<&str> = obj
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let properties: Vec<Value> = match obj.get("properties") {
        Some(Value::Array(items)) => items
            .iter()
            .map(|p| v1_property(p, None, &required))
            .collect(),
        Some(Value::Object(map)) => map
            .iter()
            .map(|(name, p)| v1_property(p, Some(name), &required))
            .collect(),
        _ => Vec::new(),
    };
    let is_json_schema_map = obj.get("properties").is_some_and(Value::is_object);
    let mut out = Map::new();
    for (k, v) in obj {
        // JSON-schema bookkeeping has no place in a V1 descriptor.
        if is_json_schema_map && matches!(k.as_str(), "type" | "required" | "$schema") {
            continue;
        }
        out.insert(k.clone(), v.clone());
    }
    out.insert("properties".into(), Value::Array(properties));
    if !out.get("description").is_some_and(Value::is_string) {
        out.insert("description".into(), json!(""));
    }
    Value::Object(out)
}

fn v1_property(p: &Value, name: Option<&str>, required: &[&str]) -> Value {
    let s = |k: &str| p.get(k).and_then(Value::as_str);
    let name = name.or_else(|| s("name")).unwrap_or_default().to_owned();
    let is_required = p
        .get("required")
        .and_then(Value::as_bool)
        .unwrap_or(required.contains(&name.as_str()));
    let mut out = p.as_object().cloned().unwrap_or_default();
    out.insert("name".into(), json!(name));
    out.insert("type".into(), json!(s("type").unwrap_or("string")));
    out.insert("title".into(), json!(s("title").unwrap_or(&name)));
    out.insert("editor".into(), json!(s("editor").unwrap_or("textfield")));
    out.insert(
        "default".into(),
        p.get("default").cloned().unwrap_or(Value::Null),
    );
    out.insert("required".into(), json!(is_required));
    out.insert("description".into(), json!(s("description").unwrap_or("")));
    Value::Object(out)
}

pub(crate) fn v1_worker_detail(
    detail: &Value,
    schema: Option<&Value>,
    memory_field: &str,
) -> Value {
    let params = detail.get("parameters");
    let custom_src = schema
        .or_else(|| params.and_then(|p| p.get("custom")))
        .cloned()
        .unwrap_or(Value::Null);
    json!({
        "version": string_of(detail.get("version")).unwrap_or_default(),
        "readme": string_of(detail.get("readme")).unwrap_or_default(),
        "parameters": {
            "system": v1_system(params.and_then(|p| p.get("system")), memory_field),
            "custom": v1_custom(&custom_src),
        },
    })
}

pub(crate) async fn worker_detail(
    ex: &Exchange<'_>,
    query: &Query<'_>,
) -> Result<Value, GatewayError> {
    let worker = ex.worker(query.req("slug")?);
    let worker: &Segment = ex.known(&worker)?;
    let key = ex.key()?;
    let detail_call =
        V2Call::get(V2Path::new(&[Part::Lit("workers"), Part::Id(worker)])).with_key(Some(key));
    let schema_call = V2Call::get(V2Path::new(&[
        Part::Lit("workers"),
        Part::Id(worker),
        Part::Lit("input-schema"),
    ]));
    let (detail, schema) = tokio::join!(
        ex.call(detail_call, Subject::Worker),
        ex.call(schema_call, Subject::Worker)
    );
    let detail = detail?;
    let schema = match schema {
        Ok(data) => data.get("input_schema").cloned(),
        Err(e) if e.is_unknown_worker() => return Err(e),
        Err(e) => {
            tracing::warn!(error = %e, "input schema unavailable; using the detail's parameters.custom");
            None
        }
    };
    Ok(v1_worker_detail(
        &detail,
        schema.as_ref(),
        ex.settings().compat.memory_field,
    ))
}

pub(crate) async fn proxy_regions(
    ex: &Exchange<'_>,
    query: &Query<'_>,
) -> Result<Value, GatewayError> {
    let language = query
        .get("language")
        .map(str::trim)
        .filter(|l| !l.is_empty());
    if language.is_some_and(|l| {
        l.len() > 16
            || !l
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    }) {
        return Err(GatewayError::bad(
            "language",
            "must be a language code such as en or zh",
        ));
    }
    let path =
        V2Path::new(&[Part::Lit("proxy"), Part::Lit("region")]).query_opt("language", language);
    ex.call(V2Call::get(path).with_key(ex.key().ok()), Subject::Other)
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A V2 store item as V1 gets it, read from a `Value` as before the
    /// typed reading: what both readings are held to.
    fn v1_store_item(item: &Value) -> Value {
        let s = |k: &str| string_of(item.get(k)).unwrap_or_default();
        json!({ "slug": s("slug"), "title": s("title"), "description": s("description") })
    }

    #[test]
    fn store_items_are_exactly_three_fields() {
        let page = r#"{"scraper":[{"slug":"s","name":"n","path":"o~n","title":"T","username":"o","description":"D"},{"title":"U"}]}"#;
        assert_eq!(
            typed(page).unwrap(),
            r#"{"scraper":[{"slug":"s","title":"T","description":"D"},{"slug":"","title":"U","description":""}]}"#
        );
    }

    /// V2 store pages of `n` items from `first` on, as text.
    fn store_page(first: usize, n: usize) -> String {
        let items: Vec<Value> = (first..first + n)
            .map(|i| json!({"slug": format!("s{i}"), "title": i, "name": "x"}))
            .collect();
        json!({ "scraper": items }).to_string()
    }

    #[test]
    fn a_window_of_pages_read_typed_and_as_values_is_cut_as_before() {
        // 180 items a V1 page, its second: V2 pages 2 to 4 of 100 items,
        // the first read typed, the second as a `Value`, the third short.
        let plan = Window {
            page_index: 2,
            page_size: 180,
        }
        .plan();
        assert_eq!(plan.offsets.clone().count(), 3);
        let texts = [
            store_page(100, 100),
            store_page(200, 100),
            store_page(300, 60),
        ];
        let reads = vec![
            Read::Typed(serde_json::from_str(&texts[0]).ok()),
            Read::Untyped(serde_json::from_str(&texts[1]).unwrap()),
            Read::Typed(serde_json::from_str(&texts[2]).ok()),
        ];
        let answer = v1_store(&plan, reads).unwrap();
        // As the `Value` reading cut it.
        let values: Vec<Value> = texts
            .iter()
            .map(|t| serde_json::from_str(t).unwrap())
            .collect();
        let rows = plan.assemble(
            values
                .iter()
                .map(|p| list_of(p, "scraper").iter().collect())
                .collect(),
        );
        let items: Vec<Value> = rows.into_iter().map(v1_store_item).collect();
        let expected = json!({ "scraper": items });
        let got: Value = serde_json::from_slice(&answer.data_bytes()).unwrap();
        assert_eq!(got, expected);
        assert_eq!(got["scraper"].as_array().unwrap().len(), 180);
        assert_eq!(got["scraper"][0]["slug"], "s180");
        assert_eq!(got["scraper"][179]["title"], "359");
        // No page at all, or one without data: no items.
        let none = v1_store(&plan, vec![Read::Typed(None)]).unwrap();
        assert_eq!(&*none.data_bytes(), br#"{"scraper":[]}"#);
    }

    /// A store page's `data` as the typed reading answers it, if it reads it.
    fn typed(data: &str) -> Option<String> {
        let page = serde_json::from_str::<OrDefault<V2StorePage>>(data).ok()?;
        let scraper = page.0.scraper.0.iter().map(|item| item.0.v1()).collect();
        Some(serde_json::to_string(&V1Store { scraper }).unwrap())
    }

    /// The same `data` as the general reading answers it.
    fn general(data: &str) -> String {
        let data: Value = serde_json::from_str(data).unwrap();
        let items: Vec<Value> = list_of(&data, "scraper")
            .iter()
            .map(v1_store_item)
            .collect();
        let by_value = serde_json::to_string(&json!({ "scraper": items })).unwrap();
        let read: Vec<V2StoreItem> = list_of(&data, "scraper")
            .iter()
            .map(V2StoreItem::of_value)
            .collect();
        let scraper = read.iter().map(V2StoreItem::v1).collect();
        assert_eq!(
            serde_json::to_string(&V1Store { scraper }).unwrap(),
            by_value
        );
        by_value
    }

    #[test]
    fn store_pages_read_typed_answer_as_read_as_values() {
        for data in [
            r#"{"scraper":[{"slug":"s","name":"n","path":"o~n","title":"T","username":"o","description":"D"}]}"#,
            r#"{"scraper":[{"slug":12,"title":1.5,"description":-3},{"slug":18446744073709551615,"title":1e3}]}"#,
            r#"{"scraper":[{"slug":null,"title":true,"description":{"a":[1]}},{"title":[1,{"b":2}]}]}"#,
            r#"{"scraper":[null,1,"x",[1,2],{},false]}"#,
            // The raw-value token later in an object is an ordinary key.
            r#"{"scraper":[{"slug":"a","$serde_json::private::RawValue":"x"}]}"#,
            r#"{"scraper":[{"slug":"a\"b\\c\u00e9\n\t","title":"\ud83d\ude00 é","description":"<\/>"}]}"#,
            r#"{"scraper":{"slug":"s"}}"#,
            r#"{"scraper":null}"#,
            r#"{"scraper":"x","other":[1]}"#,
            r#"{}"#,
            r#"[{"scraper":[{"slug":"s"}]}]"#,
            r#""x""#,
            "null",
            "5",
        ] {
            assert_eq!(typed(data), Some(general(data)), "{data}");
        }
    }

    #[test]
    fn store_pages_the_typed_reading_leaves_to_values() {
        for data in [
            // A field twice: `Value` keeps the last.
            r#"{"scraper":[{"slug":"a","slug":"b"}]}"#,
            r#"{"scraper":[],"scraper":[{"slug":"b"}]}"#,
            // serde_json's raw-value token: `Value` reads the text inside.
            r#"{"scraper":[{"$serde_json::private::RawValue":"{\"slug\":\"x\"}"}]}"#,
            r#"{"$serde_json::private::RawValue":"{\"scraper\":[{\"slug\":\"x\"}]}"}"#,
            // ... wherever it opens an object.
            r#"{"scraper":[{"slug":{"$serde_json::private::RawValue":"\"x\""}}]}"#,
            r#"{"scraper":{"$serde_json::private::RawValue":"[{\"slug\":\"x\"}]"}}"#,
        ] {
            assert_eq!(typed(data), None, "{data}");
            general(data);
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(1024))]
        /// Over generated pages (items with the kept fields, others, and
        /// keys spelled with escapes; values of every shape): where the
        /// `Value` reading reads a page, the typed reading reads it alike
        /// or leaves it. Where `Value` refuses one (a number past `f64`,
        /// a lone surrogate), the typed reading may still read it, if only
        /// in a field it skips: the V1 page is then answered rather than
        /// refused as garbled.
        #[test]
        fn generated_store_pages_read_typed_answer_as_read_as_values(
            data in store_data(),
            seed in proptest::prelude::any::<u64>(),
        ) {
            use v1compat_json::scan::gen::{render, Ws};
            let mut text = String::new();
            render(&data, &mut Ws::seeded(seed), &mut text);
            if serde_json::from_str::<Value>(&text).is_ok() {
                if let Some(typed) = typed(&text) {
                    proptest::prop_assert_eq!(typed, general(&text));
                }
            }
        }
    }

    fn store_data() -> impl proptest::strategy::Strategy<Value = v1compat_json::scan::gen::J> {
        use proptest::prelude::*;
        use v1compat_json::scan::gen::{scalar, value, J};
        // Each key once an item; spelled with escapes, two of them name a
        // field given plainly too (a field twice, left to `Value`).
        const KEYS: [&str; 7] = [
            r#""slug""#,
            r#""title""#,
            r#""description""#,
            r#""name""#,
            r#""\u0073lug""#,
            r#""t\u0069tle""#,
            r#""$serde_json::private::RawValue""#,
        ];
        let field = prop_oneof![
            3 => "[a-zA-Z0-9 é]{0,10}".prop_map(|s| J::Lit(format!("\"{s}\""))),
            2 => scalar(),
            1 => value(),
        ];
        let object = (
            prop::sample::subsequence(KEYS.to_vec(), 0..=4),
            prop::collection::vec(field, KEYS.len()),
        )
            .prop_map(|(keys, values)| {
                J::Obj(keys.into_iter().map(str::to_owned).zip(values).collect())
            });
        let item = prop_oneof![5 => object, 1 => value()];
        prop_oneof![
            4 => prop::collection::vec(item, 0..4)
                .prop_map(|items| J::Obj(vec![(r#""scraper""#.to_owned(), J::Arr(items))])),
            1 => value(),
        ]
    }

    #[test]
    fn empty_search_is_refused_or_lists_everything_by_dialect() {
        let q = |raw: &'static str| Query::parse(Some(raw));
        let refuse = EmptyStoreSearch::Refuse;
        let all = EmptyStoreSearch::All;
        assert_eq!(
            store_keyword(&q("search=%20maps"), refuse).unwrap(),
            Some("maps".into())
        );
        assert!(store_keyword(&q("search="), refuse).is_err());
        assert_eq!(store_keyword(&q("search="), all).unwrap(), None);
        assert_eq!(store_keyword(&q("search=%20&limit=5"), all).unwrap(), None);
        // Absent stays an error: every V1 source makes `search` required.
        assert!(store_keyword(&q("limit=5"), all).is_err());
        assert_eq!(
            store_call(None, 1, 10).path.path_and_query(),
            "/api/v2/store?offset=1&limit=10"
        );
    }

    #[test]
    fn system_reads_either_memory_name_and_fills_defaults() {
        let s = v1_system(
            Some(&json!({"cpus": 1, "memory": 1024, "proxy_region": "US"})),
            "memory_bytes",
        );
        assert_eq!(
            s,
            json!({"cpus":1,"memory_bytes":1024,"max_total_charge":0,"max_total_traffic":0,"execute_limit_time_seconds":1800})
        );
        let s = v1_system(None, "memory");
        assert_eq!(s["memory"], 512);
        assert_eq!(s["cpus"], 0.125);
    }

    #[test]
    fn custom_from_property_array() {
        let schema = json!({"description":"d","concurrency":{"fields":[]},"properties":[{"name":"startURLs","type":"array","title":"Start URLs","editor":"requestListSources","default":[],"required":true,"description":"x"}]});
        let c = v1_custom(&schema);
        assert_eq!(c["properties"][0], schema["properties"][0]);
        assert_eq!(c["concurrency"], json!({"fields":[]}));
    }

    #[test]
    fn custom_from_json_schema_map() {
        let schema = json!({"type":"object","required":["keyword"],"properties":{"keyword":{"type":"string"},"max":{"type":"integer","default":10,"title":"Max"}}});
        let c = v1_custom(&schema);
        assert_eq!(c["description"], "");
        assert!(c.get("type").is_none());
        let props = c["properties"].as_array().unwrap();
        assert_eq!(
            props[0],
            json!({"name":"keyword","type":"string","title":"keyword","editor":"textfield","default":null,"required":true,"description":""})
        );
        assert_eq!(props[1]["default"], 10);
        assert_eq!(props[1]["required"], false);
    }
}
