//! The `[connections]` section: deadlines and caps of the connection layer
//! (see [`super`]), read before anything is bound and validated with the
//! rest of the configuration.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `[connections]` as written in the TOML file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct ConnectionSection {
    /// Open client connections on the public listener; one more is answered
    /// with a 429 envelope and closed. Lowered at start-up to what the
    /// process's open-file limit allows.
    pub max_connections: usize,
    /// A request head (request line and headers) must arrive within this,
    /// counted from the moment the connection is ready for it. For HTTP/1.1
    /// this is also the longest a keep-alive connection waits idle.
    pub header_read_timeout_ms: u64,
    /// The whole request body must arrive within this, counted from the head.
    pub body_read_timeout_ms: u64,
    /// A connection with no request in progress for this long is closed
    /// (HTTP/2: GOAWAY, then close).
    pub idle_timeout_ms: u64,
    /// An answer that makes no progress towards the client for this long
    /// (the client stopped reading, or, on HTTP/2, gives it no flow-control
    /// window) closes the connection. An answer still being computed is
    /// not counted: the request's own deadlines bound that.
    pub write_timeout_ms: u64,
    /// Concurrent streams one HTTP/2 connection may open.
    pub http2_max_concurrent_streams: u32,
    /// After refusing an oversized body, at most this much of it is read and
    /// thrown away so the client, still writing, gets to read the refusal.
    pub max_discard_bytes: usize,
    /// ... and for at most this long.
    pub discard_timeout_ms: u64,
    /// Bytes the process holds at most for request bodies being read and
    /// answers their clients have not taken; past it new requests are
    /// answered 429 (see `conn::budget`).
    pub memory_budget_bytes: usize,
    /// Streams of one connection that may at once be in progress (reading
    /// a body, waiting on V2) or holding an answer not yet taken; one more
    /// request is answered 429.
    pub max_held_streams: usize,
}

impl Default for ConnectionSection {
    fn default() -> Self {
        ConnectionSection {
            max_connections: 4096,
            header_read_timeout_ms: 30_000,
            body_read_timeout_ms: 30_000,
            idle_timeout_ms: 60_000,
            write_timeout_ms: 30_000,
            http2_max_concurrent_streams: 100,
            max_discard_bytes: 16 << 20,
            discard_timeout_ms: 10_000,
            // A quarter of a 256 MB sidecar.
            memory_budget_bytes: 64 << 20,
            max_held_streams: 32,
        }
    }
}

/// [`ConnectionSection`] checked and in [`Duration`]s.
#[derive(Debug, Clone)]
pub struct ConnSettings {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub body_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub write_timeout: Duration,
    pub http2_max_concurrent_streams: u32,
    pub max_discard_bytes: usize,
    pub discard_timeout: Duration,
    /// The process's memory budget: one per configuration loaded, so the
    /// listeners started with one configuration share it.
    pub budget: std::sync::Arc<super::budget::MemoryBudget>,
    pub max_held_streams: usize,
}

impl Default for ConnSettings {
    fn default() -> Self {
        let mut problems = Vec::new();
        validate(&ConnectionSection::default(), &mut problems)
    }
}

/// Checks the section, adding one line per problem to `problems`.
pub(crate) fn validate(s: &ConnectionSection, problems: &mut Vec<String>) -> ConnSettings {
    if s.max_connections == 0 {
        problems.push("connections.max_connections: must be greater than 0".into());
    }
    for (key, v) in [
        (
            "connections.header_read_timeout_ms",
            s.header_read_timeout_ms,
        ),
        ("connections.body_read_timeout_ms", s.body_read_timeout_ms),
        ("connections.idle_timeout_ms", s.idle_timeout_ms),
        ("connections.write_timeout_ms", s.write_timeout_ms),
        ("connections.discard_timeout_ms", s.discard_timeout_ms),
    ] {
        if v == 0 {
            problems.push(format!("{key}: must be greater than 0"));
        }
    }
    if s.memory_budget_bytes < 1 << 20 {
        problems.push("connections.memory_budget_bytes: must be at least 1048576 (1 MiB)".into());
    }
    if s.max_held_streams == 0 {
        problems.push("connections.max_held_streams: must be greater than 0".into());
    }
    if s.http2_max_concurrent_streams == 0 {
        problems.push("connections.http2_max_concurrent_streams: must be greater than 0".into());
    }
    ConnSettings {
        max_connections: s.max_connections,
        header_read_timeout: Duration::from_millis(s.header_read_timeout_ms),
        body_read_timeout: Duration::from_millis(s.body_read_timeout_ms),
        idle_timeout: Duration::from_millis(s.idle_timeout_ms),
        write_timeout: Duration::from_millis(s.write_timeout_ms),
        http2_max_concurrent_streams: s.http2_max_concurrent_streams,
        max_discard_bytes: s.max_discard_bytes,
        discard_timeout: Duration::from_millis(s.discard_timeout_ms),
        budget: super::budget::process_budget(s.memory_budget_bytes),
        max_held_streams: s.max_held_streams.max(1),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_deadlines_and_caps_are_named() {
        let s = ConnectionSection {
            max_connections: 0,
            body_read_timeout_ms: 0,
            write_timeout_ms: 0,
            http2_max_concurrent_streams: 0,
            ..ConnectionSection::default()
        };
        let mut problems = Vec::new();
        validate(&s, &mut problems);
        assert_eq!(problems.len(), 4, "{problems:?}");
        for key in [
            "connections.max_connections",
            "connections.body_read_timeout_ms",
            "connections.write_timeout_ms",
            "connections.http2_max_concurrent_streams",
        ] {
            assert!(
                problems.iter().any(|p| p.starts_with(key)),
                "{key}: {problems:?}"
            );
        }
        let mut none = Vec::new();
        let d = validate(&ConnectionSection::default(), &mut none);
        assert!(none.is_empty());
        assert_eq!(d.header_read_timeout, Duration::from_secs(30));
        assert_eq!(d.write_timeout, Duration::from_secs(30));
    }
}
