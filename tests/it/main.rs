//! The integration suite, one binary: golden V1↔V2 cases, end-to-end
//! gateway and CLI tests, the differential test (native V1 vs translation),
//! the upstream client, the sandbox and shadow testing, each against
//! in-process servers on port 0, and the client conformance suite (the
//! published V1 Python SDK against `v1compat sandbox`).

mod architecture;
mod budget;
mod callbacks;
mod cli;
mod deploy;
mod differential;
mod future_sizes;
mod gateway;
mod golden;
mod image;
mod networks;
mod openapi;
mod operations;
mod pipeline;
mod pki;
mod properties;
mod python_sdk;
mod reliability;
mod reload;
mod required_tools;
mod schemathesis;
mod shadow;
mod support;
mod tls;
mod upstream;
