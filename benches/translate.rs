//! Micro-benchmarks of the pure translation functions: what one V1 answer
//! costs to build from V2 data, without any I/O.

use criterion::{black_box, criterion_group, criterion_main, BatchSize, Criterion};
use serde_json::{json, Value};

use v1compat::config::Compat;
use v1compat::ops::{logs, records, results};
use v1compat::paging::Window;

fn run_record() -> Value {
    json!({"slug":"01KS2A1M515HG7PZX9STTB0KPH","scraper_slug":"01KJXYJ7KCHXM0PDZHQD5293XE","scraper_title":"News Scraper",
           "version":"v1.0.1","status":"running","results":4,"usage":"0.0217","traffic":0,"origin":"api_v2",
           "started_at":1773383784,"finished_at":0,"duration":0})
}

fn result_pages(rows: usize) -> (Window, Vec<Value>) {
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
            json!({"count": 5000, "headers": [{"key":"title","label":"Title"},{"key":"rating","label":"Rating"},{"key":"url","label":"URL"}], "list": list, "page_index": p, "page_size": plan.limit})
        })
        .collect();
    (window, pages)
}

fn bench(c: &mut Criterion) {
    let compat = Compat::default();
    let record = run_record();
    c.bench_function("run_record", |b| {
        b.iter(|| records::v1_record(black_box(&record), &compat))
    });

    for rows in [100usize, 1000] {
        let (window, pages) = result_pages(rows);
        let plan = window.plan();
        c.bench_function(&format!("result_page_{rows}_rows"), |b| {
            // The pages are consumed (their rows move into the answer): each
            // iteration gets a fresh copy, made outside the timed part.
            b.iter_batched(
                || pages.clone(),
                |pages| results::v1_result_page(window, &plan, black_box(pages)),
                BatchSize::LargeInput,
            )
        });
    }

    let lines: Vec<Value> = (0..100)
        .map(|i| {
            json!(format!(
                "2026-11-22T14:05:{:02}.123Z INFO SYSTEM: Subtask-[4976399099736] - step {i}",
                i % 60
            ))
        })
        .collect();
    let log =
        json!({"all_logs_url": "https://files.example/log", "list": lines, "result_count": 100});
    c.bench_function("log_page_100_string_lines", |b| {
        b.iter(|| logs::v1_log(black_box(&log)))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
