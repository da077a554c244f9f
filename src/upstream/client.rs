//! Placeholder for the pooled HTTPS client.
use super::*;

#[derive(Debug, Clone)]
pub struct UpstreamSettings {}

pub struct HttpUpstream {}

impl Upstream for HttpUpstream {
    fn call(&self, _call: V2Call, _request_id: &str) -> UpstreamFuture<'_> {
        Box::pin(async { Err(UpstreamFailure::Unreachable("not built".into())) })
    }
}
