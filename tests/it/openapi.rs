//! The V1 OpenAPI document (`openapi/v1.json`) against the code: the route
//! table and the document list the same operations, the admin listener serves
//! the document as kept in the repository, and every golden V1 answer
//! validates against the document's schema for its operation and status.

use std::collections::BTreeSet;

use http::Method;
use serde_json::{json, Value};
use v1compat::openapi::V1_DOCUMENT;
use v1compat::v1::route::{route, Operation};

use crate::golden;
use crate::support::{send, TestGateway};

fn document() -> Value {
    serde_json::from_str(V1_DOCUMENT).expect("openapi/v1.json is JSON")
}

/// (method, path, operationId) of every operation in the document.
fn documented(doc: &Value) -> BTreeSet<(String, String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().expect("paths") {
        for (method, op) in item.as_object().expect("path item") {
            let id = op["operationId"].as_str().expect("operationId").to_owned();
            out.insert((method.to_uppercase(), path.clone(), id));
        }
    }
    out
}

#[test]
fn the_route_table_and_the_document_list_the_same_operations() {
    let doc = document();
    assert_eq!(doc["openapi"], "3.1.0");
    let in_doc = documented(&doc);
    let in_code: BTreeSet<(String, String, String)> = Operation::ALL
        .iter()
        .map(|op| {
            let (m, p) = op.v1_endpoint();
            (m.to_string(), p.to_owned(), op.name().to_owned())
        })
        .collect();
    assert_eq!(in_doc, in_code);
    // And each documented method + path routes to the operation it names.
    for (m, p, id) in &in_doc {
        let method = Method::from_bytes(m.as_bytes()).unwrap();
        assert_eq!(route(&method, p).map(Operation::name), Some(id.as_str()));
    }
}

#[test]
fn keyed_operations_declare_the_key_and_public_ones_do_not() {
    let doc = document();
    for op in Operation::ALL {
        let (m, p) = op.v1_endpoint();
        let security = &doc["paths"][p][m.as_str().to_lowercase()]["security"];
        let keyed = security.as_array().is_some_and(|s| !s.is_empty());
        assert_eq!(keyed, !op.is_public(), "{}", op.name());
    }
}

#[tokio::test]
async fn the_admin_listener_serves_the_document() {
    let gw = TestGateway::over_http("[upstream]\nbase_url = \"http://127.0.0.1:9\"\n").await;
    let (status, headers, body) = send(gw.admin, "GET", "/openapi.json", &[], None).await;
    assert_eq!(status.as_u16(), 200);
    assert_eq!(headers["content-type"], "application/json");
    assert_eq!(body.as_ref(), V1_DOCUMENT.as_bytes());
}

/// A validator for the schema at `pointer` inside the document, with the
/// document's other schemas reachable by their `$ref`s.
fn validator_at(doc: &Value, pointer: &str) -> jsonschema::Validator {
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$ref": format!("#{pointer}"),
        "paths": doc["paths"],
        "components": doc["components"],
    });
    jsonschema::validator_for(&root).unwrap_or_else(|e| panic!("schema at {pointer}: {e}"))
}

fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}

#[test]
fn every_golden_answer_validates_against_its_schema() {
    let doc = document();
    let mut checked = 0;
    let mut problems = Vec::new();
    for (file, case) in golden::cases() {
        let name = file.display().to_string();
        let method = Method::from_bytes(case.v1.method.as_bytes()).unwrap();
        let path = case.v1.path.split('?').next().unwrap_or_default();
        let status = case.expect.status.to_string();
        // The document describes the default dialect. An error sent with HTTP
        // 200 under `business_error_status = "200"` is the envelope of one
        // of the operation's documented error statuses.
        let as_200 = case.config.contains("business_error_status = \"200\"")
            && status == "200"
            && case.expect.body["code"] != 0;
        let pointers: Vec<String> = match route(&method, path) {
            Some(op) => {
                let (m, p) = op.v1_endpoint();
                let m = m.as_str().to_lowercase();
                let responses = &doc["paths"][p][&m]["responses"];
                let statuses: Vec<String> = if as_200 {
                    let all = responses.as_object().expect("responses").keys();
                    all.filter(|s| *s != "200").cloned().collect()
                } else if responses.get(&status).is_some() {
                    vec![status.clone()]
                } else {
                    problems.push(format!("{name}: status {status} is not documented"));
                    continue;
                };
                statuses
                    .iter()
                    .map(|s| {
                        format!(
                            "/paths/{}/{m}/responses/{s}/content/application~1json/schema",
                            escape(p)
                        )
                    })
                    .collect()
            }
            // No operation: the V1 404 envelope of an unknown route.
            None => vec!["/components/schemas/Error404".to_owned()],
        };
        let mut errors = Vec::new();
        for pointer in &pointers {
            let validator = validator_at(&doc, pointer);
            errors = validator
                .iter_errors(&case.expect.body)
                .map(|e| format!("{} at {}", e, e.instance_path))
                .collect();
            if errors.is_empty() {
                break;
            }
        }
        if !errors.is_empty() {
            problems.push(format!("{name}: {}", errors.join("; ")));
        }
        checked += 1;
    }
    assert!(checked >= 40, "only {checked} golden answers checked");
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

/// The schemas do reject what they must: a wrong code for the status, a
/// missing field of a run record, an extra envelope field.
#[test]
fn the_schemas_are_not_vacuous() {
    let doc = document();
    let detail = validator_at(
        &doc,
        "/paths/~1api~1v1~1run~1detail/post/responses/200/content/application~1json/schema",
    );
    let record = json!({"status": 3, "err_msg": "", "slug": "R", "scraper_title": "T", "scraper_slug": "S",
        "results": 1, "usage": "0.1", "started_at": 1, "finished_at": 2, "duration": 1, "origin": "api",
        "traffic": 0, "version": "v1.0.0"});
    assert!(detail.is_valid(&json!({"code": 0, "message": "success", "data": record})));
    let mut missing = record.clone();
    missing.as_object_mut().unwrap().remove("err_msg");
    assert!(!detail.is_valid(&json!({"code": 0, "message": "success", "data": missing})));
    assert!(!detail
        .is_valid(&json!({"code": 0, "message": "success", "data": record, "request_id": "x"})));
    let not_found = validator_at(
        &doc,
        "/paths/~1api~1v1~1run~1detail/post/responses/404/content/application~1json/schema",
    );
    assert!(not_found
        .is_valid(&json!({"code": 70001, "message": "Run record does not exist", "data": null})));
    assert!(!not_found.is_valid(&json!({"code": 4000, "message": "x", "data": null})));
}

/// Found by schemathesis: the contract allowed callback URLs the gateway
/// refuses (`http://U5:86431`, a port above 65535; a tab or newline around it). Now a sample of URLs gets
/// the same verdict from the contract's `callback_url` and from the gateway.
#[test]
fn callback_urls_the_contract_allows_are_the_ones_the_gateway_accepts() {
    use v1compat::ops::input::{callback_url, Body};
    let doc = document();
    let schema = validator_at(
        &doc,
        "/paths/~1api~1v1~1rerun/post/requestBody/content/application~1json/schema/properties/callback_url",
    );
    for (url, ok) in [
        ("https://hooks.example/cb", true),
        ("http://127.0.0.1:9/callback", false), // an IPv4 host: accepted by the gateway, outside the pattern
        ("http://U5:8643", true),
        ("http://U5:86431", false),
        ("http://U5:65536", false),
        ("http://a.b-c.example:65535/x/y", true),
        ("ftp://x.example", false),
        // Found by schemathesis once the gateway refused control characters
        // in callback URLs: blanks around the URL are spaces only.
        ("  https://hooks.example/cb ", true),
        ("\thttps://hooks.example/cb", false),
        ("https://hooks.example/cb\n", false),
        ("http://", false),
    ] {
        let body = Body::parse(json!({ "callback_url": url }).to_string().as_bytes()).unwrap();
        let gateway = callback_url(&body, true).is_ok();
        assert_eq!(schema.is_valid(&json!(url)), ok, "contract on {url}");
        if ok {
            assert!(
                gateway,
                "the contract allows {url} but the gateway refuses it"
            );
        }
    }
}
