//! The integration suite, one binary: golden V1↔V2 cases, end-to-end
//! gateway tests against a mock V2, and the sandbox.

mod golden;
mod support;
