//! A small open-loop HTTP load generator for the fixed-rate latency targets of
//! `deploy/bench/run.sh`.
//!
//! Requests are sent on a fixed schedule (request `i` at `start + i / rate`),
//! whether or not earlier ones have answered, so a slow answer never delays the
//! next request (wrk, being closed-loop, would send less and hide the delay).
//! Each request's latency runs from the moment it is handed to the client to
//! the end of its body; all latencies are kept, sorted and printed as exact
//! percentiles. How far the sender fell behind its schedule is printed too: a
//! large lag means the generator, not the server, was the bottleneck.
//!
//! ```text
//! cargo run --release --example loadgen -- --url http://127.0.0.1:8080/api/v1/run/detail \
//!   --method POST --header 'api-key: sandbox-key' --body '{"run_slug":"..."}' \
//!   --rate 1000 --duration 10 [--warmup 2] [--json]
//! ```

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{HeaderName, HeaderValue, Method, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use tokio::sync::Mutex;

struct Args {
    url: http::Uri,
    method: Method,
    headers: Vec<(HeaderName, HeaderValue)>,
    body: Bytes,
    rate: f64,
    duration: f64,
    warmup: f64,
    json: bool,
}

fn usage() -> String {
    "usage: loadgen --url URL [--method M] [--header 'k: v']... [--body TEXT] \
     [--rate PER_SEC] [--duration SECS] [--warmup SECS] [--json]"
        .to_string()
}

fn parse_args() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let mut url = None;
    let mut method = Method::GET;
    let mut headers = Vec::new();
    let mut body = Bytes::new();
    let (mut rate, mut duration, mut warmup, mut json) = (1000.0, 10.0, 2.0, false);
    while let Some(flag) = it.next() {
        if flag == "--json" {
            json = true;
            continue;
        }
        let value = it.next().ok_or_else(|| format!("{flag} needs a value"))?;
        let num = |v: &str| -> Result<f64, String> {
            v.parse::<f64>()
                .ok()
                .filter(|n| n.is_finite() && *n >= 0.0)
                .ok_or_else(|| format!("{flag}: not a number: {v}"))
        };
        match flag.as_str() {
            "--url" => url = Some(value.parse().map_err(|e| format!("--url: {e}"))?),
            "--method" => method = value.parse().map_err(|e| format!("--method: {e}"))?,
            "--header" => {
                let (k, v) = value
                    .split_once(':')
                    .ok_or_else(|| format!("--header: expected 'name: value', got {value}"))?;
                headers.push((
                    HeaderName::try_from(k.trim()).map_err(|e| format!("--header: {e}"))?,
                    HeaderValue::try_from(v.trim()).map_err(|e| format!("--header: {e}"))?,
                ));
            }
            "--body" => body = Bytes::from(value),
            "--rate" => rate = num(&value)?,
            "--duration" => duration = num(&value)?,
            "--warmup" => warmup = num(&value)?,
            _ => return Err(format!("unknown flag {flag}\n{}", usage())),
        }
    }
    let url = url.ok_or_else(usage)?;
    if rate <= 0.0 || duration <= 0.0 {
        return Err("--rate and --duration must be positive".into());
    }
    Ok(Args {
        url,
        method,
        headers,
        body,
        rate,
        duration,
        warmup,
        json,
    })
}

/// What one phase (warm-up or measurement) collected.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u64>,
    errors: u64,
    bad_status: u64,
    max_lag_us: u64,
}

type HttpClient = Client<hyper_util::client::legacy::connect::HttpConnector, Full<Bytes>>;

async fn phase(client: &HttpClient, args: &Args, seconds: f64) -> Tally {
    let total = (args.rate * seconds).round() as u64;
    let interval = Duration::from_secs_f64(1.0 / args.rate);
    let tally = Arc::new(Mutex::new(Tally {
        latencies_us: Vec::with_capacity(total as usize),
        ..Tally::default()
    }));
    let start = tokio::time::Instant::now();
    let mut inflight = Vec::with_capacity(total as usize);
    for i in 0..total {
        let due = start + interval.mul_f64(i as f64);
        tokio::time::sleep_until(due).await;
        let lag = tokio::time::Instant::now().saturating_duration_since(due);
        let mut req = Request::builder()
            .method(args.method.clone())
            .uri(args.url.clone());
        for (k, v) in &args.headers {
            req = req.header(k, v);
        }
        if !args.body.is_empty() {
            req = req.header(http::header::CONTENT_TYPE, "application/json");
        }
        let req = match req.body(Full::new(args.body.clone())) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("loadgen: cannot build the request: {e}");
                tally.lock().await.errors += 1;
                continue;
            }
        };
        let client = client.clone();
        let tally = tally.clone();
        inflight.push(tokio::spawn(async move {
            let sent = Instant::now();
            let outcome = match client.request(req).await {
                Ok(resp) => {
                    let ok = resp.status().is_success();
                    resp.into_body().collect().await.map(|_| ok).ok()
                }
                Err(_) => None,
            };
            let took = sent.elapsed().as_micros() as u64;
            let mut t = tally.lock().await;
            t.max_lag_us = t.max_lag_us.max(lag.as_micros() as u64);
            match outcome {
                Some(true) => t.latencies_us.push(took),
                Some(false) => t.bad_status += 1,
                None => t.errors += 1,
            }
        }));
    }
    for h in inflight {
        let _ = h.await;
    }
    let mut t = std::mem::take(&mut *tally.lock().await);
    t.latencies_us.sort_unstable();
    t
}

fn pct(sorted: &[u64], p: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

fn main() -> ExitCode {
    let args = match parse_args() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("loadgen: {e}");
            return ExitCode::from(64);
        }
    };
    // One thread: the generator shares a core with the process under test.
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("loadgen: {e}");
            return ExitCode::FAILURE;
        }
    };
    rt.block_on(async {
        let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
        connector.set_nodelay(true);
        let client: HttpClient = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(30))
            .build(connector);
        if args.warmup > 0.0 {
            phase(&client, &args, args.warmup).await;
        }
        let t = phase(&client, &args, args.duration).await;
        let l = &t.latencies_us;
        let mean = if l.is_empty() {
            0
        } else {
            l.iter().sum::<u64>() / l.len() as u64
        };
        let (p50, p90, p99, p999, max) = (
            pct(l, 50.0),
            pct(l, 90.0),
            pct(l, 99.0),
            pct(l, 99.9),
            l.last().copied().unwrap_or(0),
        );
        if args.json {
            println!(
                "{{\"rate\":{},\"ok\":{},\"bad_status\":{},\"errors\":{},\"mean_us\":{mean},\"p50_us\":{p50},\"p90_us\":{p90},\"p99_us\":{p99},\"p999_us\":{p999},\"max_us\":{max},\"max_lag_us\":{}}}",
                args.rate,
                l.len(),
                t.bad_status,
                t.errors,
                t.max_lag_us
            );
        } else {
            println!(
                "{} ok, {} non-2xx, {} errors at {}/s for {}s\nlatency us: mean {mean} p50 {p50} p90 {p90} p99 {p99} p99.9 {p999} max {max}\nsender lag us: max {}",
                l.len(),
                t.bad_status,
                t.errors,
                args.rate,
                args.duration,
                t.max_lag_us
            );
        }
        if t.errors + t.bad_status > 0 {
            ExitCode::FAILURE
        } else {
            ExitCode::SUCCESS
        }
    })
}
