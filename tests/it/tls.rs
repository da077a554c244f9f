//! TLS on the listeners: a client trusting the test CA reaches V1 on the
//! public listener and `/healthz` on the admin one; an untrusting client
//! and a plain-HTTP client get nothing; requests hyper cannot parse get the
//! V1 envelope inside the session; the certificate is read again on reload
//! and a bad replacement keeps the old one.

use std::net::SocketAddr;
use std::sync::Arc;

use bytes::Bytes;
use http::Request;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;
use serde_json::json;
use tokio::net::{TcpListener, TcpStream};

use crate::pki::TestCa;
use crate::support::{send, MockV2, Reply, TestGateway};

/// GET `path` over TLS trusting `client`'s roots; the status and body, or
/// the handshake or HTTP error.
pub(crate) async fn https_get(
    addr: SocketAddr,
    client: rustls::ClientConfig,
    path: &str,
) -> Result<(u16, Bytes, Vec<u8>), String> {
    let mut client = client;
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    let tcp = TcpStream::connect(addr).await.map_err(|e| e.to_string())?;
    let tls = connector
        .connect(ServerName::try_from("localhost").unwrap(), tcp)
        .await
        .map_err(|e| format!("handshake: {e}"))?;
    let peer_cert = tls
        .get_ref()
        .1
        .peer_certificates()
        .and_then(|c| c.first())
        .map(|c| c.to_vec())
        .unwrap_or_default();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(tls))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    let req = Request::get(path)
        .header("host", "localhost")
        .body(Empty::<Bytes>::new())
        .unwrap();
    let resp = sender.send_request(req).await.map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await.unwrap().to_bytes();
    Ok((status, body, peer_cert))
}

#[tokio::test]
async fn both_listeners_serve_tls_to_a_client_trusting_the_ca() {
    let ca = TestCa::new("listener CA");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&["localhost"]).write(dir.path());
    let v2 = MockV2::start(|_| Reply::ok(json!([{"region": "us"}]))).await;
    let config = format!(
        "[listen]\ntls_cert_file = \"{c}\"\ntls_key_file = \"{k}\"\n\
         admin_tls_cert_file = \"{c}\"\nadmin_tls_key_file = \"{k}\"\n\
         [upstream]\nbase_url = \"{}\"\n",
        v2.url(),
        c = cert.display(),
        k = key.display(),
    );
    let gw = TestGateway::over_http(&config).await;

    let (status, body, _) = https_get(gw.addr, ca.client_config(), "/api/proxy/region")
        .await
        .unwrap();
    assert_eq!(status, 200);
    let body: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body["data"], json!([{"region": "us"}]), "{body}");
    let (status, body, _) = https_get(gw.admin, ca.client_config(), "/healthz")
        .await
        .unwrap();
    assert_eq!((status, &body[..]), (200, &b"ok\n"[..]));

    // A client that does not trust the CA is refused in the handshake.
    let stranger = TestCa::new("another CA");
    let err = https_get(gw.addr, stranger.client_config(), "/api/proxy/region")
        .await
        .unwrap_err();
    assert!(err.starts_with("handshake"), "{err}");
    // Plain HTTP to a TLS port gets no HTTP answer.
    let plain = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::spawn(send(gw.addr, "GET", "/api/proxy/region", &[], None)),
    )
    .await
    .expect("the connection is closed, not left hanging");
    assert!(
        plain.is_err(),
        "plain HTTP got an answer from a TLS listener"
    );
    assert_eq!(v2.total(), 1);
}

/// Requests hyper cannot parse, sent inside a TLS session: the V1 envelope
/// replaces hyper's empty 400 / 414 / 431 there too, written through the
/// session, and the connection closes after it.
#[tokio::test]
async fn protocol_level_refusals_over_tls_are_envelopes() {
    let ca = TestCa::new("listener CA");
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = ca.leaf(&["localhost"]).write(dir.path());
    let v2 = MockV2::untouchable().await;
    let config = format!(
        "[listen]\ntls_cert_file = \"{}\"\ntls_key_file = \"{}\"\n\
         [upstream]\nbase_url = \"{}\"\n",
        cert.display(),
        key.display(),
        v2.url(),
    );
    let gw = TestGateway::over_http(&config).await;
    let mut client = ca.client_config();
    client.alpn_protocols = vec![b"http/1.1".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(client));
    for (what, bytes, statuses) in crate::reliability::unparsable_requests() {
        let tcp = TcpStream::connect(gw.addr).await.unwrap();
        let mut tls = connector
            .connect(ServerName::try_from("localhost").unwrap(), tcp)
            .await
            .unwrap();
        crate::reliability::refused_with_an_envelope(&mut tls, what, &bytes, statuses).await;
    }
    assert_eq!(v2.total(), 0);
}

#[test]
fn half_a_tls_pair_or_a_mismatched_key_is_a_configuration_error() {
    let ca = TestCa::new("listener CA");
    let dir = tempfile::tempdir().unwrap();
    let (cert, _) = ca.leaf(&["localhost"]).write(dir.path());
    let other = tempfile::tempdir().unwrap();
    let (_, wrong_key) = ca.leaf(&["localhost"]).write(other.path());
    let err = v1compat::config::load(
        &format!(
            "[listen]\ntls_cert_file = \"{}\"\nadmin_tls_cert_file = \"{}\"\nadmin_tls_key_file = \"{}\"\n",
            cert.display(),
            cert.display(),
            wrong_key.display()
        ),
        Vec::new(),
    )
    .unwrap_err();
    let all = err.to_string();
    assert!(all.contains("listen.tls_key_file: required"), "{all}");
    // A key that is not the certificate's is the key file's problem.
    assert!(
        all.contains(&format!(
            "listen.admin_tls_key_file: the private key in {} does not belong to the certificate in {}",
            wrong_key.display(),
            cert.display()
        )),
        "{all}"
    );
    assert!(!all.contains("PRIVATE KEY"), "key material leaked: {all}");
    // A missing key file is named as the key file.
    let err = v1compat::config::load(
        &format!(
            "[listen]\ntls_cert_file = \"{}\"\ntls_key_file = \"/nonexistent/key.pem\"\n",
            cert.display()
        ),
        Vec::new(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("listen.tls_key_file: /nonexistent/key.pem:"),
        "{err}"
    );
}

/// Serves TLS handshakes with `acceptor` on a port-0 listener, answering
/// every request with 200.
async fn serve_with(acceptor: v1compat::edge::tls::Acceptor) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let acceptor = acceptor.clone();
            tokio::spawn(async move {
                let Some(stream) = v1compat::edge::tls::accept(Some(&acceptor), stream).await
                else {
                    return;
                };
                let service = hyper::service::service_fn(|_req| async {
                    Ok::<_, std::convert::Infallible>(http::Response::new(
                        http_body_util::Full::new(Bytes::from_static(b"ok")),
                    ))
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}

#[tokio::test]
async fn a_replaced_certificate_is_presented_after_reload_and_a_bad_one_is_not() {
    let (old_ca, new_ca) = (TestCa::new("old CA"), TestCa::new("new CA"));
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = old_ca.leaf(&["localhost"]).write(dir.path());
    let files = v1compat::edge::tls::TlsFiles { cert, key };
    let acceptor = v1compat::edge::tls::Acceptor::new(&files).unwrap();
    let addr = serve_with(acceptor.clone()).await;
    assert!(https_get(addr, old_ca.client_config(), "/").await.is_ok());
    assert_eq!(acceptor.reload(), Ok(false), "nothing changed");

    new_ca.leaf(&["localhost"]).write(dir.path());
    assert_eq!(acceptor.reload(), Ok(true));
    assert!(https_get(addr, new_ca.client_config(), "/").await.is_ok());
    assert!(https_get(addr, old_ca.client_config(), "/").await.is_err());

    // A half-written replacement: the key no longer matches. Refused, and
    // the working certificate stays.
    std::fs::write(&files.key, old_ca.leaf(&["localhost"]).key_pem).unwrap();
    let err = acceptor.reload().unwrap_err();
    assert!(err.contains("key.pem"), "{err}");
    assert!(https_get(addr, new_ca.client_config(), "/").await.is_ok());
}
