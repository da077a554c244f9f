//! The integration suite, one binary: golden V1↔V2 cases, end-to-end
//! gateway tests, the upstream client, the sandbox and shadow testing, each
//! against in-process servers on port 0.

mod golden;
mod sandbox;
mod shadow;
mod support;
mod upstream;
