//! Fuzz target: arbitrary bytes as a V2 run-list page. Whatever the
//! one-pass reader (`scan::run_list_answer`) reads, the general
//! reading (the envelope with its `data` as a `Value`, the records read out
//! of it by `RunPage::of_value`) must read the same way: the
//! same code, request id, count and records. A body it refuses goes to the
//! general reading anyway, so refusing is allowed; reading something the
//! general reading reads differently, or refuses, is the failure.
#![no_main]

use libfuzzer_sys::fuzz_target;

use v1compat_json::scan::run_list_answer;
use v1compat_json::v2::{Envelope, RunPage};

fuzz_target!(|body: &[u8]| {
    let Some(read) = run_list_answer(body) else {
        return;
    };
    let envelope: Envelope =
        serde_json::from_slice(body).expect("read a body the general reading refuses");
    let data = envelope.data.unwrap_or(serde_json::Value::Null);
    assert_eq!(read.code, envelope.code);
    assert_eq!(read.request_id.map(str::to_owned), envelope.request_id);
    assert_eq!(read.data, RunPage::of_value(&data));
});
