//! Fuzz target: arbitrary bytes as a V1 request (operation, query, body) run
//! through every operation's decoding and orchestration against a V2 double.
//! Fails on a panic, or on a V2 path where an identifier left its segment or
//! reached a V2 shortcut (`worker-runs/last…`).
#![no_main]

use std::sync::{Arc, Mutex, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use percent_encoding::percent_decode_str;

use v1compat::common::request_id::RequestId;
use v1compat::ops::{self, Translator, V1Request};
use v1compat::v1::route::Operation;
use v1compat::upstream::{ApiKey, Upstream, UpstreamFuture, V2Call, V2Reply};
use v1compat::v2::RESERVED_RUN_WORDS;

#[derive(Default)]
struct Recorder(Mutex<Vec<String>>);

impl Upstream for Recorder {
    fn call(&self, call: V2Call, _request_id: &RequestId) -> UpstreamFuture<'_> {
        self.0.lock().unwrap().push(call.path.path_and_query().to_owned());
        let body = r#"{"code":0,"message":"success","data":{"run_slug":"01KS2A1M515HG7PZX9STTB0KPH","list":[],"count":0,"headers":[],"input_schema":{"properties":[]},"version":"v1"}}"#;
        Box::pin(async move {
            Ok(V2Reply {
                status: http::StatusCode::OK,
                body: Bytes::from_static(body.as_bytes()),
                attempts: 1,
                retry_after: None,
            })
        })
    }
}

fn check(path_and_query: &str) {
    let path = path_and_query.split('?').next().unwrap();
    assert!(
        path.starts_with("/api/v2/") && !path.contains('#'),
        "{path_and_query}"
    );
    let segments: Vec<String> = path["/api/v2/".len()..]
        .split('/')
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    for s in &segments {
        assert!(!s.is_empty() && s != "." && s != "..", "{path_and_query}");
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
            "{path_and_query}"
        );
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap()
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let op = Operation::ALL[selector as usize % Operation::ALL.len()];
    // `query` NUL `body`: the query as (lossy) text, the body as bytes.
    let (query, body) = match rest.iter().position(|&b| b == 0) {
        Some(i) => (
            Some(String::from_utf8_lossy(&rest[..i]).into_owned()),
            &rest[i + 1..],
        ),
        None => (None, rest),
    };
    let recorder = Arc::new(Recorder::default());
    let config = v1compat::config::load(
        "[upstream]\nbase_url = \"http://127.0.0.1:9\"\nservice_key = \"svc\"\n[workers]\nverify = false\n",
        Vec::new(),
    )
    .unwrap();
    let tr = Translator::new(recorder.clone(), config.translation());
    let req = V1Request {
        op,
        query,
        body: Bytes::copy_from_slice(body),
        key: ApiKey::new("client-key"),
        request_id: RequestId::from_static("fuzz"),
    };
    if let Err(err) = runtime().block_on(ops::handle(&tr, req)) {
        let r = err.render();
        assert!(r.envelope.code != 0 && r.envelope.data.is_null());
    }
    for path in recorder.0.lock().unwrap().iter() {
        check(path);
    }
});
