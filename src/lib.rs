//! v1compat: a gateway that keeps legacy V1 clients of the Worker Run Service
//! (the CoreClaw Open API) working against its V2 API. `ARCHITECTURE.md` is
//! the longer map; this one lists the modules in the order a request meets
//! them.
//!
//! ```text
//! V1 client ─▶ edge       accept loop, connection cap, TLS, HTTP/1+2, deadlines, drain
//!           ─▶ pipeline   route, request id, key, body, in-flight slot, deadline,
//!                         answer, access line, request metrics
//!           ─▶ ops        V1 input → pure mapping → V2 call(s) → V1 data
//!           ─▶ upstream   the pooled V2 client: auth, deadlines, safe retries
//!           ─▶ error      every failure → one V1 envelope
//! V1 client ◀─ edge
//! ```
//!
//! Beside the path: `callbacks` (the relay), `inventory` (which clients still
//! call V1, relying on what), `shadow` (mirror, diff, capture, replay,
//! report), `telemetry` (logs, metrics). Above it: `config` (TOML and
//! environment → a validated configuration, and each stage's settings built
//! from it), `reload` (the running configuration and what replaces it), `app`
//! (start and drain), `cli` (the commands' helpers).
//! The contract as types and data: `v1`, `v2`, `paging`, `differences`,
//! `openapi`. Other crates of the workspace: `v1compat-contract` (the V1
//! dialects), `v1compat-json` (JSON written by hand), `v1compat-sandbox`
//! (the reference service the tests and `v1compat sandbox` run against).

// The request path, in order.
pub mod edge;
pub(crate) mod error;
pub mod ops;
pub mod pipeline;
pub mod upstream;

// Beside it.
pub mod callbacks;
pub mod inventory;
pub mod shadow;
pub mod telemetry;

// Above it: the composition root and the commands.
pub(crate) mod app;
pub mod cli;
pub mod config;
pub mod reload;

// Below everything: helpers any layer may use.
pub mod common;

// The contract, as types and data.
pub mod differences;
pub mod openapi;
pub mod paging;
pub mod v1;
pub mod v2;

pub use app::{run, run_reloading, run_with, Extras};
