//! The integration suite, one binary: golden V1↔V2 cases, end-to-end
//! gateway and CLI tests, the differential test (native V1 vs translation),
//! the upstream client, the sandbox and shadow testing (its report also in
//! headless Chromium), each against in-process servers on port 0, and the
//! client conformance suite (the published V1 Python SDK against
//! `v1compat sandbox`).

mod architecture;
mod budget;
mod callbacks;
mod cli;
mod deploy;
mod differential;
mod docs_links;
mod future_sizes;
mod gateway;
mod golden;
mod image;
mod inventory;
mod named_keys;
mod networks;
mod openapi;
mod operations;
mod operator;
mod pipeline;
mod pki;
mod properties;
mod python_sdk;
mod reliability;
mod reload;
mod required_tools;
mod schemathesis;
mod shadow;
mod shadow_report;
mod signals;
mod support;
mod tls;
mod upstream;
