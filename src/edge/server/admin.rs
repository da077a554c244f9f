//! The admin listener, beside the request path: `/healthz`, `/readyz`
//! (draining first, then V2 reachability, reported but never failing the
//! probe), `/metrics`, `/openapi.json` (the V1 contract,
//! [`crate::openapi`]), the migration inventory (`/inventory`) and the
//! callback relay's operator endpoints, both behind
//! [`super::operator`] (a bearer token, no cross-site requests). It
//! reads the live configuration per request; its connections, like the
//! public ones, belong to [`crate::edge::conn`].

use std::convert::Infallible;
use std::sync::Arc;

use bytes::Bytes;
use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::net::TcpListener;
use tower::ServiceBuilder;
use tower_http::catch_panic::CatchPanicLayer;
use tower_http::sensitive_headers::SetSensitiveRequestHeadersLayer;
use tower_http::trace::TraceLayer;

use super::reachability;
use crate::callbacks::Relay;
use crate::edge::conn::{self, Drain};
use crate::edge::{AdminSettings, LiveAdmin, Settings};
use crate::inventory::report::Format;
use crate::inventory::Inventory;
use crate::pipeline::API_KEY;
use crate::telemetry;

/// What the admin listener's operator endpoints answer for, each opened
/// once, before serving: the callback relay (`/callbacks/…`) and the
/// migration inventory (`/inventory`), when on.
pub struct OperatorEndpoints {
    pub relay: Option<Arc<Relay>>,
    pub inventory: Option<Arc<Inventory>>,
}

/// Serves `/healthz`, `/readyz`, `/metrics` and `/openapi.json`, and the
/// operator endpoints of `operated`.
pub async fn serve_admin(
    listener: TcpListener,
    tls: Option<crate::edge::tls::Acceptor>,
    settings: Settings,
    live: Arc<LiveAdmin>,
    operated: OperatorEndpoints,
    readiness: Drain,
    drain: Drain,
) -> std::io::Result<()> {
    let listener_conf = conn::Listener {
        name: "admin",
        tls,
        settings: settings.connections,
        grace: settings.grace_period,
        answers: conn::Answers {
            cut: || admin_text(StatusCode::SERVICE_UNAVAILABLE, "shutting down\n".into()),
            shed: || {
                admin_text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too many connections\n".into(),
                )
            },
            over_budget: || {
                admin_text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "memory budget used up\n".into(),
                )
            },
            protocol: None,
        },
    };
    let prometheus = telemetry::prometheus();
    // V2's reachability at start and every `upstream.health_check_interval_ms`,
    // so `v1compat_upstream_reachable` holds (and its alert can fire) where
    // nothing asks `/readyz`; until the admin listener stops.
    let checks = live.clone();
    let stopped = drain.clone();
    tokio::spawn(async move {
        tokio::select! {
            () = reachability::every_interval(&checks) => {}
            () = stopped.stopped() => {}
        }
    });
    // tower-http's layers, doing here what the public listener's front does
    // (`server::front`): keys never reach a log line, one span per request
    // (its failure log off), a panic is a 500 rather than a reset. The
    // admin port's few requests do not need the front's economy.
    let layers = ServiceBuilder::new()
        .layer(SetSensitiveRequestHeadersLayer::new([
            header::AUTHORIZATION,
            API_KEY,
        ]))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request<Incoming>| {
                    tracing::info_span!("admin", method = %req.method(), path = %req.uri().path())
                })
                .on_failure(()),
        )
        .layer(CatchPanicLayer::new());
    let service = layers.service_fn(move |req: Request<Incoming>| {
        let admin = live.load();
        let relay = operated.relay.clone();
        let inventory_of = operated.inventory.clone();
        let prometheus = prometheus.clone();
        let readiness = readiness.clone();
        async move {
            let text = admin_text;
            // The migration inventory: an operator endpoint too (it names
            // clients, their addresses and user-agents).
            if req.uri().path() == "/inventory" {
                if let Some(refused) = admin.operator.refuse(req.method(), req.headers()) {
                    return Ok::<_, Infallible>(refused);
                }
                return Ok(inventory(inventory_of.as_deref(), &admin, &req).await);
            }
            // Callback relay operator endpoints (/callbacks/...): only for
            // a caller `[admin]` lets in (`server::operator`).
            if req.uri().path().starts_with("/callbacks/") {
                if let Some(refused) = admin.operator.refuse(req.method(), req.headers()) {
                    return Ok::<_, Infallible>(refused);
                }
            }
            if let Some(relay) = &relay {
                if let Some(r) = relay
                    .admin(req.method(), req.uri().path(), req.uri().query())
                    .await
                {
                    return Ok::<_, Infallible>(r);
                }
            }
            let path = req.uri().path();
            // HEAD is GET without the body (hyper leaves it out); another
            // method on one of these paths is 405, saying which it takes.
            let method = match req.method() {
                &Method::HEAD => &Method::GET,
                m => m,
            };
            if method != Method::GET && ADMIN_PATHS.contains(&path) {
                let mut r = text(
                    StatusCode::METHOD_NOT_ALLOWED,
                    "method not allowed\n".into(),
                );
                r.headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
                return Ok(r);
            }
            let resp = match (method, path) {
                (&Method::GET, "/healthz") => text(StatusCode::OK, "ok\n".into()),
                // Draining comes first: a load balancer must stop sending
                // before the public listener stops accepting.
                (&Method::GET, "/readyz") if readiness.is_draining() => text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "not ready: draining\n".into(),
                ),
                // Ready means "this replica can serve V1": it is running with a
                // valid configuration and accepting. V2 reachability is
                // reported (body and gauge) but does not fail the probe: V2
                // is the same for every replica, so failing on it would take
                // them all out of the Service at once and turn V1 error
                // envelopes into refused connections.
                (&Method::GET, "/readyz") => {
                    let upstream = reachability::record(&admin).await;
                    text(StatusCode::OK, format!("ready\nupstream: {upstream}\n"))
                }
                (&Method::GET, "/openapi.json") => {
                    let mut r = Response::new(Full::new(Bytes::from_static(
                        crate::openapi::V1_DOCUMENT.as_bytes(),
                    )));
                    r.headers_mut().insert(
                        header::CONTENT_TYPE,
                        HeaderValue::from_static("application/json"),
                    );
                    r
                }
                (&Method::GET, "/metrics") => match &prometheus {
                    Some(h) => text(StatusCode::OK, h.render()),
                    None => text(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "metrics recorder unavailable\n".into(),
                    ),
                },
                _ => text(StatusCode::NOT_FOUND, "not found\n".into()),
            };
            Ok::<_, Infallible>(resp)
        }
    });
    conn::serve(listener, service, listener_conf, drain).await
}

/// `GET /inventory`: the migration inventory's report, in the format the
/// caller asks for (`?format=text|json|html`, else by `Accept`).
async fn inventory(
    inventory: Option<&Inventory>,
    admin: &AdminSettings,
    req: &Request<Incoming>,
) -> Response<Full<Bytes>> {
    if !matches!(*req.method(), Method::GET | Method::HEAD) {
        let mut r = admin_text(
            StatusCode::METHOD_NOT_ALLOWED,
            "method not allowed\n".into(),
        );
        r.headers_mut()
            .insert(header::ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let Some(inventory) = inventory else {
        return admin_text(
            StatusCode::NOT_FOUND,
            "the migration inventory is off (inventory.enabled = false)\n".into(),
        );
    };
    let accept = req
        .headers()
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok());
    let format = match Format::negotiate(req.uri().query(), accept) {
        Ok(f) => f,
        Err(e) => return admin_text(StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    match inventory.report(&admin.inventory).await {
        Ok(report) => {
            let mut r = Response::new(Full::new(Bytes::from(report.render(format))));
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            );
            h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
            // The page carries no script and loads nothing: say so.
            h.insert(
                header::CONTENT_SECURITY_POLICY,
                HeaderValue::from_static("default-src 'none'; style-src 'unsafe-inline'"),
            );
            r
        }
        Err(e) => admin_text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the inventory store cannot be read: {e}\n"),
        ),
    }
}

/// The admin listener's own paths (the callback relay's come before them).
const ADMIN_PATHS: &[&str] = &["/healthz", "/readyz", "/openapi.json", "/metrics"];

fn admin_text(status: StatusCode, body: String) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body)));
    *r.status_mut() = status;
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4"),
    );
    r
}
