//! The least a translated run detail costs on v1compat's stack, for
//! `deploy/bench/instructions.sh`: beside the bare proxy (`bare_proxy.rs`,
//! which forwards a V2 request unchanged), this takes the V1 request
//! (`POST /api/v1/run/detail`, `{"run_slug":"…"}`, `api-key`), asks V2 for
//! the run (`GET /api/v2/worker-runs/{slug}`, `Authorization: Bearer`) and
//! answers V1's envelope, with the gateway's own readers and writer of the
//! run record (the JSON kernel's `read::run`, `V1Run::write_json`) and its
//! allocator. Nothing else: no routing but this one path, no checks of the
//! slug or the key, no limits, deadlines, retries, pool, request ids, logs
//! or metrics, one kept-alive V2 connection, and any failure a bare 502.
//! It is not part of the gateway; it tells what the translation itself
//! costs on hyper and tokio, and so how much of v1compat's cost is the
//! gateway's own work around it.
//!
//! With `headers` as a third argument it also sends and answers the
//! headers v1compat does (to V2: `accept`, `user-agent`, `x-request-id`;
//! to the client: `x-request-id`, `x-v2-request-id`,
//! `x-v1compat-upstream-calls`), the request id a fixed one.
//!
//! With `features` it does, besides the headers, the least each of the
//! gateway's own features on a run detail's path can cost, each in the
//! cheapest form it has (see [`features`]): a panic guard, the in-flight
//! limit and gauge, the client's request id or a new one, the key's check,
//! the body limit, the run id's check, a pool of V2 connections, one
//! deadline over the V2 call, the retry budget's deposit, the request and
//! upstream metrics with the gateway's recorder, and the access line's
//! level check. It measures how much room the translation leaves for them.
//!
//! ```text
//! cargo run --release --example bare_translation -- 127.0.0.1:0 http://127.0.0.1:8081 [headers|features]
//! ```
//!
//! Prints `listening on ADDR` once it accepts connections. Any other path
//! is forwarded as it came (for a readiness check).

use std::convert::Infallible;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;
use v1compat::ops::run_records::v1_run;
use v1compat::ops::Compat;
use v1compat_json::read;

#[path = "bare_translation/features.rs"]
mod features;

// The gateway's allocator, as its binary sets it.
#[global_allocator]
static ALLOCATOR: v1compat::common::allocator::Allocator = v1compat::common::allocator::Allocator;

type Upstream = Arc<Mutex<Option<SendRequest<Full<Bytes>>>>>;

/// What each request needs of the command line.
struct Target {
    /// `host:port` of V2.
    authority: String,
    /// The V2 request's headers, the key's value empty; with `headers`,
    /// v1compat's too, the request id's value set.
    to_v2: HeaderMap,
    /// The answer's headers: its type; with `headers`, v1compat's too,
    /// `x-v2-request-id` empty.
    to_client: HeaderMap,
}

impl Target {
    /// The maps each request copies and sets in place, as v1compat's V2
    /// client does: copying a map costs less than inserting its names.
    fn new(authority: String, headers: bool) -> Target {
        let mut to_v2 = HeaderMap::with_capacity(6);
        to_v2.insert(
            header::HOST,
            HeaderValue::from_str(&authority).expect("a host:port"),
        );
        let mut to_client = HeaderMap::with_capacity(6);
        to_client.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if headers {
            to_v2.insert(header::ACCEPT, HeaderValue::from_static("application/json"));
            to_v2.insert(
                header::USER_AGENT,
                HeaderValue::from_static("v1compat/0.1.0"),
            );
            to_v2.insert(X_REQUEST_ID, REQUEST_ID);
            to_client.insert(X_V2_REQUEST_ID, HeaderValue::from_static(""));
            to_client.insert(
                HeaderName::from_static("x-v1compat-upstream-calls"),
                HeaderValue::from_static("1"),
            );
            to_client.insert(X_REQUEST_ID, REQUEST_ID);
        }
        to_v2.insert(header::AUTHORIZATION, HeaderValue::from_static(""));
        Target {
            authority,
            to_v2,
            to_client,
        }
    }
}

fn main() {
    let runtime = v1compat::cli::runtime::build(0).expect("runtime");
    runtime.block_on(serve());
}

async fn serve() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(listen), Some(upstream)) = (args.first(), args.get(1)) else {
        eprintln!("usage: bare_translation LISTEN_ADDR UPSTREAM_URL (http://host:port) [headers]");
        std::process::exit(64);
    };
    let authority = upstream
        .strip_prefix("http://")
        .unwrap_or(upstream)
        .trim_end_matches('/')
        .to_owned();
    let mode = args.get(2).map(String::as_str);
    if !matches!(mode, None | Some("headers" | "features")) {
        eprintln!("the third argument is `headers` or `features`");
        std::process::exit(64);
    }
    let target = Arc::new(Target::new(authority, mode.is_some()));
    let features = (mode == Some("features")).then(|| Arc::new(features::Features::new()));
    let listener = TcpListener::bind(listen).await.expect("bind");
    println!("listening on {}", listener.local_addr().expect("address"));
    let conn: Upstream = Arc::new(Mutex::new(None));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (target, conn, features) = (target.clone(), conn.clone(), features.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (target, conn, features) = (target.clone(), conn.clone(), features.clone());
                async move {
                    Ok::<_, Infallible>(match &features {
                        Some(features) => features.answer(&target, req).await,
                        None => answer(&target, &conn, req).await,
                    })
                }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

#[derive(serde::Deserialize)]
struct DetailBody {
    run_slug: String,
}

/// The request id of every request, when the headers are sent.
const REQUEST_ID: HeaderValue = HeaderValue::from_static("01M8GYT122S8NFBZRREE901FW7");
const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const X_V2_REQUEST_ID: HeaderName = HeaderName::from_static("x-v2-request-id");

async fn answer(target: &Target, conn: &Upstream, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    if parts.uri.path() != "/api/v1/run/detail" {
        let forwarded = Request::from_parts(parts, Full::new(Bytes::new()));
        return match send(target, conn, forwarded).await {
            Some((head, body)) => Response::from_parts(head, Full::new(body)),
            None => status(StatusCode::BAD_GATEWAY),
        };
    }
    let key = parts.headers.get("api-key").cloned();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let Ok(input) = serde_json::from_slice::<DetailBody>(&body) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let Ok(uri) = format!("/api/v2/worker-runs/{}", input.run_slug).parse() else {
        return status(StatusCode::BAD_REQUEST);
    };
    let mut v2 = Request::new(Full::new(Bytes::new()));
    *v2.uri_mut() = uri;
    let mut headers = target.to_v2.clone();
    let bearer = key.and_then(|key| {
        HeaderValue::from_maybe_shared(Bytes::from([b"Bearer ", key.as_bytes()].concat())).ok()
    });
    match bearer {
        Some(bearer) => {
            if let Some(value) = headers
                .iter_mut()
                .find_map(|(name, value)| (name == header::AUTHORIZATION).then_some(value))
            {
                *value = bearer;
            }
        }
        None => {
            headers.remove(header::AUTHORIZATION);
        }
    }
    *v2.headers_mut() = headers;
    let Some((head, body)) = send(target, conn, v2).await else {
        return status(StatusCode::BAD_GATEWAY);
    };
    let Some(envelope) = v1_envelope(&body) else {
        return status(StatusCode::BAD_GATEWAY);
    };
    let mut resp = Response::new(Full::new(Bytes::from(envelope)));
    let mut headers = target.to_client.clone();
    if let Some(v2_id) = head.headers.get(X_REQUEST_ID) {
        for (name, value) in headers.iter_mut() {
            if name == X_V2_REQUEST_ID {
                *value = v2_id.clone();
            }
        }
    }
    *resp.headers_mut() = headers;
    resp
}

/// The V1 envelope of a V2 run-detail answer, as the gateway writes it;
/// `None` for an answer without a record, or one its reader of a run leaves
/// to the general reading.
fn v1_envelope(v2_body: &[u8]) -> Option<Vec<u8>> {
    let read = read::run(v2_body)?;
    static COMPAT: OnceLock<Compat> = OnceLock::new();
    let run = v1_run(read.data.as_ref()?, COMPAT.get_or_init(Compat::default));
    let mut envelope = Vec::with_capacity(512);
    envelope.extend_from_slice(b"{\"code\":0,\"message\":\"success\",\"data\":");
    run.write_json(&mut envelope, read.texts);
    envelope.push(b'}');
    Some(envelope)
}

/// `req` to V2 on the one kept connection (made when there is none); the
/// answer's head and whole body.
async fn send(
    target: &Target,
    conn: &Upstream,
    req: Request<Full<Bytes>>,
) -> Option<(http::response::Parts, Bytes)> {
    let mut slot = conn.lock().await;
    if slot.as_ref().is_none_or(|s| s.is_closed()) {
        let stream = TcpStream::connect(&target.authority).await.ok()?;
        let _ = stream.set_nodelay(true);
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
            .await
            .ok()?;
        tokio::spawn(connection);
        *slot = Some(sender);
    }
    let sender = slot.as_mut()?;
    sender.ready().await.ok()?;
    let answer = sender.send_request(req).await.ok()?;
    drop(slot);
    let (head, body) = answer.into_parts();
    let body = body.collect().await.ok()?.to_bytes();
    Some((head, body))
}

pub(crate) fn status(status: StatusCode) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = status;
    resp
}
