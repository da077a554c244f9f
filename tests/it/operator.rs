//! The admin listener's operator endpoints over HTTP: refused without the
//! configured bearer token, with another one, and for a browser's
//! cross-site form post; served with the token; closed when no token is
//! configured, off when turned off. Probes and metrics stay open.

use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use crate::support::{send, MockV2, TestGateway};

const TOKEN: &str = "operator-token-5b1e0c9d7a";

/// A gateway relaying callbacks (memory store), with `admin` as its `[admin]`.
async fn gateway(admin: &str) -> TestGateway {
    let config = format!(
        "[callbacks]\npublic_url = \"http://127.0.0.1:9\"\nsecret = \"operator-test-secret-0123\"\nstore = \"memory\"\n[admin]\n{admin}"
    );
    TestGateway::start(&config, Arc::new(MockV2::new(|_| unreachable!()))).await
}

async fn ask(
    gw: &TestGateway,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
) -> (u16, http::HeaderMap, Value) {
    let body = (method == "POST").then(|| Bytes::from_static(b"{}"));
    let (status, headers, body) = send(gw.admin, method, path, headers, body).await;
    let v = serde_json::from_slice(&body)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned()));
    (status.as_u16(), headers, v)
}

#[tokio::test]
async fn the_operator_api_needs_the_token_and_refuses_cross_site_posts() {
    let gw = gateway(&format!("operator_token = \"{TOKEN}\"\n")).await;
    let right = format!("Bearer {TOKEN}");
    let json = ("content-type", "application/json");

    // No token: 401, a Bearer challenge and a JSON body saying what is needed.
    for (method, path) in [
        ("GET", "/callbacks/events?state=done"),
        ("GET", "/callbacks/stats"),
        ("POST", "/callbacks/redeliver?since=0"),
    ] {
        let (status, headers, body) = ask(&gw, method, path, &[json]).await;
        assert_eq!(status, 401, "{method} {path}: {body}");
        assert!(
            headers["www-authenticate"]
                .to_str()
                .unwrap()
                .starts_with("Bearer"),
            "{headers:?}"
        );
        assert!(body["error"].as_str().unwrap().contains("Bearer"), "{body}");
        assert!(body.get("events").is_none(), "no data without the token");
    }

    // Another token: 401, never the data.
    let (status, headers, body) = ask(
        &gw,
        "GET",
        "/callbacks/events?state=done",
        &[("authorization", "Bearer operator-token-guessed-000")],
    )
    .await;
    assert_eq!(status, 401, "{body}");
    assert!(headers.contains_key("www-authenticate"));
    assert!(body.get("events").is_none(), "{body}");

    // The right token: served.
    let (status, _, body) = ask(
        &gw,
        "GET",
        "/callbacks/events?state=done",
        &[("authorization", &right)],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert!(body["events"].is_array(), "{body}");
    let (status, _, body) = ask(
        &gw,
        "POST",
        "/callbacks/redeliver?since=0",
        &[("authorization", &right), json],
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["redelivering"], 0, "{body}");

    // A form post or text/plain, as a page elsewhere can make a browser
    // send: refused even with the token, and so is a browser's cross-site
    // fetch.
    for ct in ["application/x-www-form-urlencoded", "text/plain"] {
        let (status, _, body) = ask(
            &gw,
            "POST",
            "/callbacks/redeliver?since=0",
            &[("authorization", &right), ("content-type", ct)],
        )
        .await;
        assert_eq!(status, 415, "{ct}: {body}");
    }
    let (status, _, _) = ask(
        &gw,
        "GET",
        "/callbacks/events",
        &[("authorization", &right), ("sec-fetch-site", "cross-site")],
    )
    .await;
    assert_eq!(status, 403);

    // Probes, metrics and the contract stay open.
    for path in ["/healthz", "/readyz", "/metrics", "/openapi.json"] {
        let (status, _, _) = send(gw.admin, "GET", path, &[], None).await;
        assert_eq!(status, 200, "{path}");
    }
}

#[tokio::test]
async fn without_a_token_the_operator_api_is_closed_and_it_can_be_turned_off() {
    let gw = gateway("").await;
    let (status, _, body) = ask(&gw, "GET", "/callbacks/events?state=done", &[]).await;
    assert_eq!(status, 403, "{body}");
    let says = body["error"].as_str().unwrap();
    assert!(says.contains("admin.operator_token"), "{says}");
    assert!(body.get("events").is_none());

    let gw = gateway(&format!(
        "operator_token = \"{TOKEN}\"\noperator_api = false\n"
    ))
    .await;
    let right = format!("Bearer {TOKEN}");
    let (status, _, body) = ask(&gw, "GET", "/callbacks/stats", &[("authorization", &right)]).await;
    assert_eq!(status, 404, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("operator_api"),
        "{body}"
    );
}

/// The token from the environment, as a Kubernetes Secret would be given.
#[test]
fn the_token_may_come_from_the_environment_and_is_masked_in_print() {
    let env = vec![(
        "V1COMPAT_ADMIN__OPERATOR_TOKEN".to_owned(),
        TOKEN.to_owned(),
    )];
    let loaded = v1compat::config::read("", env).unwrap();
    assert!(loaded.config.operator.has_token());
    let printed = v1compat::config::print::effective_toml(&loaded.effective);
    assert!(!printed.contains(TOKEN), "{printed}");
    assert!(
        printed.contains("operator_token = \"********\""),
        "{printed}"
    );
    assert!(!format!("{:?}", loaded.config).contains(TOKEN));
}
