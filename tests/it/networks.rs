//! Outbound networks: V2 behind a private CA (`upstream.ca_file`) and
//! behind an HTTP proxy (`HTTPS_PROXY` / `HTTP_PROXY` / `NO_PROXY`, read
//! with the configuration), for the V2 client and the shadow tester's
//! legacy client. The proxy is a tiny `CONNECT` proxy on port 0 that knows
//! one made-up host name, so a request that reaches V2 must have gone
//! through it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use crate::support::rid;
use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use v1compat::upstream::{HttpUpstream, Upstream, UpstreamFailure, V2Call};
use v1compat::v2::{Part, V2Path};

use crate::pki::TestCa;

const V2_BODY: &str = r#"{"code":0,"message":"ok","data":{"list":[]}}"#;

/// A V2 stand-in on 127.0.0.1:0, over TLS when `tls` is given; counts requests.
async fn serve_v2(tls: Option<rustls::ServerConfig>) -> (SocketAddr, Arc<Mutex<usize>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hits = Arc::new(Mutex::new(0));
    let acceptor = tls.map(|c| tokio_rustls::TlsAcceptor::from(Arc::new(c)));
    let counted = hits.clone();
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let (acceptor, hits) = (acceptor.clone(), counted.clone());
            tokio::spawn(async move {
                let service = service_fn(move |_req: http::Request<Incoming>| {
                    *hits.lock().unwrap() += 1;
                    async {
                        Ok::<_, Infallible>(Response::new(Full::new(Bytes::from_static(
                            V2_BODY.as_bytes(),
                        ))))
                    }
                });
                let builder = hyper_util::server::conn::auto::Builder::new(
                    hyper_util::rt::TokioExecutor::new(),
                );
                match acceptor {
                    Some(a) => {
                        // A client that refuses the certificate ends here.
                        let Ok(tls) = a.accept(stream).await else {
                            return;
                        };
                        let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                    }
                    None => {
                        let _ = builder
                            .serve_connection(TokioIo::new(stream), service)
                            .await;
                    }
                }
            });
        }
    });
    (addr, hits)
}

/// A `CONNECT` proxy on 127.0.0.1:0 that tunnels only to the `host:port`
/// names in `routes` (each mapped to a loopback address) and records every
/// `CONNECT` target it was asked for.
struct TinyProxy {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
}

impl TinyProxy {
    async fn start(routes: HashMap<String, SocketAddr>) -> TinyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let log = asked.clone();
        let routes = Arc::new(routes);
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (routes, log) = (routes.clone(), log.clone());
                tokio::spawn(async move {
                    let _ = tunnel(client, &routes, &log).await;
                });
            }
        });
        TinyProxy { addr, asked }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn asked(&self) -> Vec<String> {
        self.asked.lock().unwrap().clone()
    }
}

async fn tunnel(
    mut client: TcpStream,
    routes: &HashMap<String, SocketAddr>,
    log: &Mutex<Vec<String>>,
) -> std::io::Result<()> {
    // The request head, byte by byte up to its blank line (bounded).
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        if head.len() > 8192 {
            return Ok(());
        }
        head.push(client.read_u8().await?);
    }
    let head = String::from_utf8_lossy(&head).into_owned();
    let mut words = head.split_whitespace();
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    log.lock().unwrap().push(target.to_owned());
    let upstream = match routes.get(target) {
        Some(addr) if method == "CONNECT" => TcpStream::connect(addr).await.ok(),
        _ => None,
    };
    let Some(mut upstream) = upstream else {
        client
            .write_all(b"HTTP/1.1 502 Bad Gateway\r\ncontent-length: 0\r\n\r\n")
            .await?;
        return Ok(());
    };
    client
        .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
        .await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

fn env(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

fn upstream(config: &str, env: Vec<(String, String)>) -> HttpUpstream {
    let config = v1compat::config::load(config, env).unwrap_or_else(|e| panic!("{e}"));
    HttpUpstream::new(config.upstream).unwrap()
}

async fn call(up: &HttpUpstream) -> Result<StatusCode, UpstreamFailure> {
    let path = V2Path::new(&[Part::Lit("store")]);
    up.call(V2Call::get(path), &rid("req-net"))
        .await
        .map(|r| r.status)
}

#[tokio::test]
async fn a_private_ca_named_by_ca_file_is_trusted() {
    let ca = TestCa::new("private V2 CA");
    let (v2, hits) = serve_v2(Some(ca.leaf(&["localhost"]).server_config())).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let base = format!("https://localhost:{}", v2.port());

    let trusted = upstream(
        &format!(
            "[upstream]\nbase_url = \"{base}\"\nca_file = \"{}\"\n",
            ca_file.display()
        ),
        Vec::new(),
    );
    assert_eq!(call(&trusted).await.unwrap(), StatusCode::OK);
    assert_eq!(*hits.lock().unwrap(), 1);

    // Without the file the same server is refused before any request.
    let untrusted = upstream(&format!("[upstream]\nbase_url = \"{base}\"\n"), Vec::new());
    let err = call(&untrusted).await.unwrap_err();
    assert!(matches!(err, UpstreamFailure::Unreachable(_)), "{err:?}");
    assert_eq!(*hits.lock().unwrap(), 1);
}

#[test]
fn an_unusable_ca_file_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.pem");
    std::fs::write(&junk, "not a certificate").unwrap();
    for (path, expect) in [
        (junk.display().to_string(), "junk.pem"),
        (
            dir.path().join("missing.pem").display().to_string(),
            "missing.pem",
        ),
    ] {
        let err =
            v1compat::config::load(&format!("[upstream]\nca_file = \"{path}\"\n"), Vec::new())
                .unwrap_err()
                .to_string();
        assert!(
            err.contains("upstream.ca_file") && err.contains(expect),
            "{err}"
        );
    }
}

#[tokio::test]
async fn https_proxy_carries_tls_to_a_private_ca_upstream() {
    let ca = TestCa::new("private V2 CA");
    let (v2, hits) = serve_v2(Some(ca.leaf(&["v2.test"]).server_config())).await;
    // `v2.test` does not resolve: only the proxy knows where it is, so an
    // answer proves the request went through it; TLS still ends at V2.
    let target = format!("v2.test:{}", v2.port());
    let proxy = TinyProxy::start(HashMap::from([(target.clone(), v2)])).await;
    let dir = tempfile::tempdir().unwrap();
    let ca_file = dir.path().join("ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let config = format!(
        "[upstream]\nbase_url = \"https://{target}/\"\nca_file = \"{}\"\n",
        ca_file.display()
    );

    let up = upstream(
        &config,
        env(&[
            ("HTTPS_PROXY", &proxy.url()),
            ("NO_PROXY", "localhost,127.0.0.1"),
        ]),
    );
    assert_eq!(call(&up).await.unwrap(), StatusCode::OK);
    assert_eq!(call(&up).await.unwrap(), StatusCode::OK);
    assert_eq!(*hits.lock().unwrap(), 2);
    // One tunnel, reused by the pool.
    assert_eq!(proxy.asked(), vec![target.clone()]);

    // Lower-case names count too (curl's rule); NO_PROXY naming the host
    // sends the request direct, where `v2.test` does not resolve.
    let up = upstream(
        &config,
        env(&[("https_proxy", &proxy.url()), ("no_proxy", ".test")]),
    );
    let err = call(&up).await.unwrap_err();
    assert!(matches!(err, UpstreamFailure::Unreachable(_)), "{err:?}");
    assert_eq!(proxy.asked().len(), 1, "NO_PROXY bypassed the proxy");
}

#[tokio::test]
async fn http_proxy_is_used_for_plain_http_and_an_unknown_target_is_unreachable() {
    let (v2, hits) = serve_v2(None).await;
    let target = format!("v2.test:{}", v2.port());
    let proxy = TinyProxy::start(HashMap::from([(target.clone(), v2)])).await;
    let up = upstream(
        &format!("[upstream]\nbase_url = \"http://{target}\"\n"),
        env(&[("HTTP_PROXY", &proxy.url())]),
    );
    assert_eq!(call(&up).await.unwrap(), StatusCode::OK);
    assert_eq!(*hits.lock().unwrap(), 1);
    assert_eq!(proxy.asked(), vec![target]);

    // A proxy that refuses the tunnel: the call fails as unreachable.
    let up = upstream(
        "[upstream]\nbase_url = \"http://elsewhere.test:81\"\n",
        env(&[("HTTP_PROXY", &proxy.url())]),
    );
    let err = call(&up).await.unwrap_err();
    assert!(matches!(err, UpstreamFailure::Unreachable(_)), "{err:?}");
    assert_eq!(proxy.asked().last().unwrap(), "elsewhere.test:81");
}

#[test]
fn an_unusable_proxy_is_a_configuration_error_naming_the_variable() {
    let err = v1compat::config::load("", env(&[("HTTPS_PROXY", "socks5://p.example:1080")]))
        .unwrap_err()
        .to_string();
    assert!(err.contains("HTTPS_PROXY"), "{err}");
}

#[tokio::test]
async fn the_shadow_legacy_client_goes_through_the_proxy() {
    let (legacy, hits) = serve_v2(None).await;
    let target = format!("legacy.test:{}", legacy.port());
    let proxy = TinyProxy::start(HashMap::from([(target.clone(), legacy)])).await;
    let vars = env(&[("HTTP_PROXY", &proxy.url())]);
    let proxy_env = v1compat::upstream::ProxyEnv::from_vars(vars.iter().map(|(k, v)| (&**k, &**v)));
    let base = url::Url::parse(&format!("http://{target}/")).unwrap();
    let client = v1compat::shadow::legacy::LegacyClient::new(&base, &proxy_env).unwrap();
    let call = v1compat::shadow::legacy::V1Call {
        method: http::Method::GET,
        path: "/api/store".into(),
        query: None,
        headers: http::HeaderMap::new(),
        body: Bytes::new(),
    };
    let answer = client
        .send(&call, std::time::Duration::from_secs(5), 1 << 20)
        .await
        .unwrap();
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(*hits.lock().unwrap(), 1);
    assert_eq!(proxy.asked(), vec![target]);
}
