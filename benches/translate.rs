//! Micro-benchmarks of the translation, without any I/O: from the V2 answer
//! bodies as they arrive (bytes) to the V1 envelope as it is sent (bytes),
//! which is the part of a request v1compat adds over a plain proxy.

use bytes::Bytes;
use criterion::{black_box, criterion_group, criterion_main, Criterion};
use serde_json::{json, Value};

use v1compat::differences::Applied;
use v1compat::ops::logs::V2Log;
use v1compat::ops::{logs, results, run_records, Compat, Read};
use v1compat::paging::Window;
use v1compat_json::escape::Texts;
use v1compat_json::read;
use v1compat_json::v2::{PageRows, ResultPage, V2Run};
use v1compat_json::wire::{Object, OrDefault};

fn envelope(data: Value) -> Bytes {
    Bytes::from(
        json!({"code": 0, "message": "success", "data": data, "request_id": "01KS2A1M515HG7PZX9STTB0KPH"})
            .to_string(),
    )
}

fn run_record() -> Bytes {
    envelope(
        json!({"slug":"01KS2A1M515HG7PZX9STTB0KPH","scraper_slug":"01KJXYJ7KCHXM0PDZHQD5293XE","scraper_title":"News Scraper",
           "version":"v1.0.1","status":"running","results":4,"usage":"0.0217","traffic":0,"origin":"api_v2",
           "started_at":1773383784,"finished_at":0,"duration":0}),
    )
}

/// The V2 pages (100 rows each, or fewer) a V1 window of `rows` rows reads.
fn result_pages(rows: usize) -> (Window, Vec<Bytes>) {
    let window = Window {
        page_index: 1,
        page_size: rows as u64,
    };
    let plan = window.plan();
    let pages = plan
        .offsets
        .clone()
        .map(|p| {
            let start = (p - 1) as usize * plan.limit as usize;
            let list: Vec<Value> = (start..start + plan.limit as usize)
                .map(|i| json!({"__coreclaw_data_id__": format!("{i:064x}"), "title": format!("Row {i}"), "rating": (i % 50) as f64 / 10.0, "url": format!("https://example.com/{i}")}))
                .collect();
            envelope(
                json!({"count": 5000, "headers": [{"key":"title","label":"Title"},{"key":"rating","label":"Rating"},{"key":"url","label":"URL"}], "list": list, "page_index": p, "page_size": plan.limit}),
            )
        })
        .collect();
    (window, pages)
}

fn log_page() -> Bytes {
    let lines: Vec<Value> = (0..100)
        .map(|i| {
            json!(format!(
                "2026-11-22T14:05:{:02}.123Z INFO SYSTEM: Subtask-[4976399099736] - step {i}",
                i % 60
            ))
        })
        .collect();
    envelope(
        json!({"all_logs_url": "https://files.example/log", "list": lines, "result_count": 100}),
    )
}

/// The typed reading of a V2 body, as `Exchange::read` does it (checked as
/// UTF-8 once, then read from the text).
fn typed<'a, T: serde::Deserialize<'a>>(body: &'a [u8]) -> Read<T> {
    Read::Typed(read::typed(body).expect("a V2 envelope").data)
}

fn bench(c: &mut Criterion) {
    let compat = Compat::default();
    let record = run_record();
    // As `run_records::run_detail` reads it: the kernel's reader of a run
    // (in one pass where the answer is plain, by serde otherwise).
    c.bench_function("run_record", |b| {
        b.iter(|| {
            let answer = read::run(black_box(&record)).expect("a run");
            let read = Read::Typed(answer.data);
            let v1 =
                run_records::detail_answer(read, answer.texts, &compat, &Applied::new()).unwrap();
            v1.into_envelope()
        })
    });
    // serde's typed reading alone, as before the one-pass reader.
    c.bench_function("run_record_serde", |b| {
        b.iter(|| {
            let typed = read::typed::<Object<V2Run>>(black_box(&record)).expect("a V2 envelope");
            let read = Read::Typed(typed.data.map(|o| o.0));
            let v1 = run_records::detail_answer(read, Texts::UNCHECKED, &compat, &Applied::new())
                .unwrap();
            v1.into_envelope()
        })
    });

    for rows in [100usize, 1000] {
        let (window, pages) = result_pages(rows);
        let plan = window.plan();
        c.bench_function(&format!("result_page_{rows}_rows"), |b| {
            b.iter(|| {
                // As `results::result_list`: the kernel's reader of a result
                // page over each answer, one pass of its scanner reading the
                // rest of the page too.
                let pages: Vec<ResultPage> = black_box(&pages)
                    .iter()
                    .enumerate()
                    .map(|(k, p)| {
                        let page = read::result_page(p, plan.part_of(k))
                            .and_then(|read| read.data)
                            .expect("a page the scanner reads");
                        debug_assert!(matches!(page.rows, PageRows::Scanned(_)));
                        page
                    })
                    .collect();
                let v1 = results::v1_result_page(window, &plan, &pages).to_json();
                v1.into_envelope()
            })
        });
    }

    let log = log_page();
    c.bench_function("log_page_100_string_lines", |b| {
        b.iter(|| {
            let v1 = logs::log_answer(typed::<OrDefault<V2Log>>(black_box(&log))).unwrap();
            v1.into_envelope()
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
