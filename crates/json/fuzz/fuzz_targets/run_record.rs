//! Fuzz target: arbitrary bytes as a V2 run-detail answer. Whatever the
//! one-pass reader (`scan::run_answer`) reads, serde's typed
//! reading (`DataEnvelope<Object<V2Run>>`) must read the same way: the
//! same code, request id and record. A body it refuses goes to serde
//! anyway, so refusing is allowed; reading something serde reads
//! differently, or refuses, is the failure.
#![no_main]

use libfuzzer_sys::fuzz_target;

use v1compat_json::scan::run_answer;
use v1compat_json::v2::{DataEnvelope, V2Run};
use v1compat_json::wire::Object;

fuzz_target!(|body: &[u8]| {
    let Some(read) = run_answer(body) else {
        return;
    };
    let text = std::str::from_utf8(body).expect("read a body that is not UTF-8");
    let typed: DataEnvelope<Object<V2Run>> =
        serde_json::from_str(text).expect("read a body the typed reading refuses");
    assert_eq!(read.code, typed.code);
    assert_eq!(read.request_id, typed.request_id.as_ref().map(|t| &*t.0));
    assert_eq!(Some(read.data), typed.data.map(|o| o.0));
});
