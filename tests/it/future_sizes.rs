//! The two futures every translated request is made of, held to their
//! sizes: the pipeline's (admission, translation, the answer) and the V2
//! call's (its attempts). Each is copied whole when it is boxed, and with
//! many connections open what a request's futures take is what falls out
//! of the CPU's caches first (`deploy/bench/RESULTS.md`). A future that
//! grows past its bound fails here, so that it grows on purpose: boxing
//! a large, rarely taken branch is how they were brought under it.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::support::rid;
use bytes::Bytes;
use http::{HeaderMap, Method};
use v1compat::ops::run_records::detail_call;
use v1compat::pipeline::{BodyError, Pipeline, RawV1Request};
use v1compat::upstream::{HttpUpstream, Upstream};
use v1compat::v2::Segment;

/// The pipeline's future for one request, body reader boxed as the server
/// boxes it: 856 bytes on x86-64 when this bound was set.
const PIPELINE_BOUND: usize = 1024;
/// One V2 call, every attempt and the wait between them: 1,288 bytes on
/// x86-64 when this bound was set.
const V2_CALL_BOUND: usize = 1536;

fn pipeline_and_upstream() -> (Arc<Pipeline>, Arc<HttpUpstream>) {
    let cfg = v1compat::config::load(
        "[upstream]\nbase_url = \"http://127.0.0.1:9\"\n",
        Vec::new(),
    )
    .unwrap();
    let upstream = Arc::new(HttpUpstream::new(cfg.upstream.clone()).unwrap());
    let gateway = cfg.gateway(upstream.clone());
    (Arc::new(Pipeline::new(Arc::new(gateway))), upstream)
}

type BoxedBody = Pin<Box<dyn Future<Output = Result<Bytes, BodyError>> + Send>>;

#[tokio::test]
async fn a_requests_pipeline_future_stays_under_its_bound() {
    let (pipeline, _) = pipeline_and_upstream();
    let body: BoxedBody = Box::pin(std::future::ready(Ok(Bytes::new())));
    let raw = RawV1Request {
        settled: None,
        method: Method::POST,
        path: "/api/v1/run/detail".into(),
        query: None,
        headers: HeaderMap::new(),
        body,
        peer: None,
    };
    let answer = Pipeline::answer_by(pipeline, raw);
    let size = std::mem::size_of_val(&answer);
    assert!(
        size <= PIPELINE_BOUND,
        "the pipeline's future is {size} bytes, over its bound of {PIPELINE_BOUND}"
    );
}

#[tokio::test]
async fn a_v2_calls_future_stays_under_its_bound() {
    let (_, upstream) = pipeline_and_upstream();
    let call = detail_call(&Segment::new("01M8B35ENF3QHQVJCEJAR20SCG").unwrap());
    let future = upstream.call(call, &rid("01M8B35ENF3QHQVJCEJAR20SCH"));
    let size = std::mem::size_of_val(&*future);
    assert!(
        size <= V2_CALL_BOUND,
        "a V2 call's future is {size} bytes, over its bound of {V2_CALL_BOUND}"
    );
}
