//! The floor of v1compat's HTTP stack, for `deploy/bench/instructions.sh`:
//! the least a proxy built on the same crates (the tokio runtime v1compat
//! would choose on the same CPUs, hyper's HTTP/1.1 server and client
//! connections) spends per request. It forwards each request unchanged to
//! one upstream over a single kept-alive connection and copies the answer
//! back: no routing, no translation, no limits, deadlines, logs or
//! metrics. It is not part of
//! the gateway; it tells how much of v1compat's cost is the stack itself
//! and how much is the gateway's own work on top of it.
//!
//! ```text
//! cargo run --release --example bare_proxy -- 127.0.0.1:0 http://127.0.0.1:8081
//! ```
//!
//! Prints `listening on ADDR` once it accepts connections.

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

type Upstream = Arc<Mutex<Option<SendRequest<Full<Bytes>>>>>;

fn main() {
    let runtime = v1compat::cli::runtime::build(0).expect("runtime");
    runtime.block_on(proxy());
}

async fn proxy() {
    let mut args = std::env::args().skip(1);
    let (Some(listen), Some(upstream)) = (args.next(), args.next()) else {
        eprintln!("usage: bare_proxy LISTEN_ADDR UPSTREAM_URL (http://host:port)");
        std::process::exit(64);
    };
    let authority = upstream
        .strip_prefix("http://")
        .unwrap_or(&upstream)
        .trim_end_matches('/')
        .to_owned();
    let listener = TcpListener::bind(&listen).await.expect("bind");
    println!("listening on {}", listener.local_addr().expect("address"));
    let authority: Arc<str> = authority.into();
    let conn: Upstream = Arc::new(Mutex::new(None));
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (authority, conn) = (authority.clone(), conn.clone());
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| {
                let (authority, conn) = (authority.clone(), conn.clone());
                async move { Ok::<_, Infallible>(forward(&authority, &conn, req).await) }
            });
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

/// The request as it came, to the upstream; its answer, whole, back.
async fn forward(
    authority: &str,
    conn: &Upstream,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    let (parts, body) = req.into_parts();
    let Ok(body) = body.collect().await.map(|b| b.to_bytes()) else {
        return status(StatusCode::BAD_REQUEST);
    };
    let upstream_req = Request::from_parts(parts, Full::new(body));
    let mut slot = conn.lock().await;
    if slot.as_ref().is_none_or(|s| s.is_closed()) {
        let Ok(stream) = TcpStream::connect(authority).await else {
            return status(StatusCode::BAD_GATEWAY);
        };
        let _ = stream.set_nodelay(true);
        let Ok((send, connection)) =
            hyper::client::conn::http1::handshake(TokioIo::new(stream)).await
        else {
            return status(StatusCode::BAD_GATEWAY);
        };
        tokio::spawn(connection);
        *slot = Some(send);
    }
    let Some(send) = slot.as_mut() else {
        return status(StatusCode::BAD_GATEWAY);
    };
    if send.ready().await.is_err() {
        *slot = None;
        return status(StatusCode::BAD_GATEWAY);
    }
    let answer = match send.send_request(upstream_req).await {
        Ok(answer) => answer,
        Err(_) => {
            *slot = None;
            return status(StatusCode::BAD_GATEWAY);
        }
    };
    drop(slot);
    let (parts, body) = answer.into_parts();
    match body.collect().await {
        Ok(body) => Response::from_parts(parts, Full::new(body.to_bytes())),
        Err(_) => status(StatusCode::BAD_GATEWAY),
    }
}

fn status(status: StatusCode) -> Response<Full<Bytes>> {
    let mut resp = Response::new(Full::new(Bytes::new()));
    *resp.status_mut() = status;
    resp
}
