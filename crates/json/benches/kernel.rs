//! Micro-benchmarks of the JSON kernel alone, without any I/O: V2 answers
//! as they arrive (bytes) read by the entry points of `read`, and V1
//! answers as they are sent (bytes) written by `v1`. The gateway's mappings
//! (statuses, origin names, windows, header formats) are not the kernel's:
//! here the V1 values are taken as V2 gave them. The whole translation, the
//! mappings included, is `benches/translate.rs` at the repository root.
//!
//! ```text
//! cargo bench -p v1compat-json --bench kernel
//! ```

use std::borrow::Cow;
use std::ops::Range;

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};

use v1compat_json::escape::{json_string, Texts};
use v1compat_json::read;
use v1compat_json::v1::{Json, V1Header, V1ResultPage, V1Run};
use v1compat_json::v2::{DataEnvelope, PageRows, ResultPage, RunPage, StatusField, V2Run};
use v1compat_json::wire::Object;

/// A run-detail answer as the gateway reads it.
fn read_run(body: &[u8]) -> Option<(V2Run<'_>, Texts)> {
    let answer = read::run(body)?;
    Some((answer.data?, answer.texts))
}

/// A run-list page as the gateway reads it.
fn read_run_page(body: &[u8]) -> Option<(RunPage<'_>, Texts)> {
    let answer = read::run_page(body)?;
    Some((answer.data?, answer.texts))
}

/// A result page as the gateway reads it.
fn read_result_page(body: &[u8], part: Range<usize>) -> Option<ResultPage<'_>> {
    read::result_page(body, part)?.data
}

/// A V2 answer around `data`, as V2 sends it (compact).
fn envelope(data: Value) -> Bytes {
    Bytes::from(
        json!({"code": 0, "message": "success", "data": data, "request_id": "01KS2A1M515HG7PZX9STTB0KPH"})
            .to_string(),
    )
}

fn record(i: usize) -> Value {
    json!({"slug": format!("01KS2A1M515HG7PZX9STTB{i:04}"), "scraper_slug": "01KJXYJ7KCHXM0PDZHQD5293XE",
        "scraper_title": "News Scraper", "version": "v1.0.1", "status": "running", "results": 4,
        "usage": "0.0217", "traffic": 0, "origin": "api_v2", "started_at": 1773383784,
        "finished_at": 0, "duration": 0})
}

/// A run-list page of `n` records.
fn run_page(n: usize) -> Bytes {
    envelope(
        json!({"count": 5000, "list": (0..n).map(record).collect::<Vec<_>>(), "offset": 1, "limit": n}),
    )
}

/// The V2 pages of 100 rows each holding `rows` rows.
fn result_pages(rows: usize) -> Vec<Bytes> {
    (0..rows.div_ceil(100))
        .map(|p| {
            let list: Vec<Value> = (p * 100..p * 100 + 100)
                .map(|i| json!({"__coreclaw_data_id__": format!("{i:064x}"), "title": format!("Row {i}"), "rating": (i % 50) as f64 / 10.0, "url": format!("https://example.com/{i}")}))
                .collect();
            envelope(
                json!({"count": 5000, "headers": [{"key":"title","label":"Title"},{"key":"rating","label":"Rating"},{"key":"url","label":"URL"}], "list": list, "page_index": p + 1, "page_size": 100}),
            )
        })
        .collect()
}

/// The V1 record of a V2 one, the values as V2 gave them (the gateway's
/// status and origin mappings are not the kernel's).
fn v1_run<'a>(r: &'a V2Run<'a>) -> V1Run<'a> {
    let status = match r.status {
        StatusField::Number(Some(n)) => n,
        _ => 2,
    };
    V1Run::of_v2(r, status, r.origin.or_default())
}

fn record_json(run: &V2Run, texts: Texts) -> Json {
    let v1 = v1_run(run);
    Json::write_direct(512, |out| v1.write_json(out, texts))
}

/// The V1 page of whole V2 pages: V2's headers, each format from the
/// scanner's summary of its column.
fn v1_page<'a>(pages: &'a [ResultPage<'a>], page_size: u64) -> Json {
    let mut runs = Vec::new();
    for page in pages {
        page.rows.runs_into(0..page.rows.len(), &mut runs);
    }
    let headers = pages[0]
        .headers
        .iter()
        .map(|h| {
            let key = h.0.key.0.clone().unwrap_or_default();
            let format = match &pages[0].rows {
                PageRows::Scanned(rows) => rows.summary(&key).format(),
                PageRows::Raw(_) => "text",
            };
            V1Header {
                label: h.0.label.0.clone().unwrap_or_else(|| key.clone()),
                key,
                format: Cow::Borrowed(format),
            }
        })
        .collect();
    V1ResultPage {
        count: pages[0].count.unwrap_or(0),
        headers,
        runs,
        page_index: 1,
        page_size,
    }
    .to_json()
}

fn bench(c: &mut Criterion) {
    let body = envelope(record(0));
    c.bench_function("read_run", |b| {
        b.iter(|| {
            let (run, texts) = read_run(black_box(&body)).expect("a run");
            record_json(&run, texts).into_envelope()
        })
    });
    c.bench_function("read_run_serde", |b| {
        b.iter(|| {
            let text = std::str::from_utf8(black_box(&body)).unwrap();
            let env: DataEnvelope<Object<V2Run>> = serde_json::from_str(text).unwrap();
            record_json(&env.data.unwrap().0, Texts::UNCHECKED).into_envelope()
        })
    });
    let page = run_page(20);
    c.bench_function("read_run_page_20", |b| {
        b.iter(|| {
            let (page, texts) = read_run_page(black_box(&page)).expect("a page");
            let list: Vec<V1Run> = page.runs.iter().map(v1_run).collect();
            Json::write_direct(8192, |out| {
                out.extend_from_slice(b"{\"list\":[");
                for (i, r) in list.iter().enumerate() {
                    if i > 0 {
                        out.push(b',');
                    }
                    r.write_json(out, texts);
                }
                out.extend_from_slice(b"]}");
            })
            .into_envelope()
        })
    });
    for rows in [100usize, 1000] {
        let bodies = result_pages(rows);
        c.bench_function(&format!("read_result_page_{rows}_rows"), |b| {
            b.iter(|| {
                let pages: Vec<ResultPage> = black_box(&bodies)
                    .iter()
                    .map(|p| read_result_page(p, 0..100).expect("a page"))
                    .collect();
                v1_page(&pages, rows as u64).into_envelope()
            })
        });
    }
    let plain = "Cartes et itinéraires, 2026 edition: plain text of a usual length".repeat(2);
    let escaped = format!("{plain}\n\"quoted\"");
    for (name, text) in [("escape_plain", &plain), ("escape_escaped", &escaped)] {
        c.bench_function(name, |b| {
            let mut out = Vec::with_capacity(256);
            b.iter(|| {
                out.clear();
                json_string(&mut out, black_box(text));
                out.len()
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
