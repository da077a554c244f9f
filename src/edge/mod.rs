//! The edge: where a V1 client's bytes enter and leave. The accept loop and
//! its connection cap, HTTP/1 and HTTP/2 settings, head and body deadlines
//! and the drain ([`conn`]); TLS on an accepted connection ([`tls`]); HTTP
//! in and out around the pipeline, and the admin listener ([`server`]);
//! what it reads of the configuration ([`settings`]).
//!
//! Nothing here translates: a request leaves the edge as a
//! [`crate::pipeline::RawV1Request`] and its answer comes back as bytes.

pub(crate) mod conn;
pub mod server;
pub(crate) mod settings;
pub mod tls;

pub use settings::{AdminSettings, LiveAdmin, Settings};
