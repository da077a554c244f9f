//! Placeholder for the pooled HTTPS client (settings only).
use super::*;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum AuthStyle {
    #[default]
    Bearer,
    ApiKeyHeader,
}

#[derive(Debug, Clone)]
pub struct RetrySettings {
    pub max_attempts: u32,
    pub base_backoff: Duration,
    pub max_backoff: Duration,
    pub budget_percent: f32,
    pub budget_min_per_sec: u32,
}

#[derive(Debug, Clone)]
pub struct UpstreamSettings {
    pub base_url: url::Url,
    pub connect_timeout: Duration,
    pub attempt_timeout: Duration,
    pub pool_idle_timeout: Duration,
    pub pool_max_idle_per_host: usize,
    pub max_response_bytes: usize,
    pub auth_style: AuthStyle,
    pub retry: RetrySettings,
    pub user_agent: String,
}

impl UpstreamSettings {
    pub fn new(base_url: url::Url) -> Self {
        UpstreamSettings {
            base_url,
            connect_timeout: Duration::from_secs(2),
            attempt_timeout: Duration::from_secs(10),
            pool_idle_timeout: Duration::from_secs(90),
            pool_max_idle_per_host: 64,
            max_response_bytes: 16 << 20,
            auth_style: AuthStyle::Bearer,
            retry: RetrySettings {
                max_attempts: 3,
                base_backoff: Duration::from_millis(50),
                max_backoff: Duration::from_secs(1),
                budget_percent: 0.2,
                budget_min_per_sec: 10,
            },
            user_agent: "v1compat".into(),
        }
    }
}

pub struct HttpUpstream {}

impl HttpUpstream {
    pub fn new(_settings: UpstreamSettings) -> Result<HttpUpstream, String> {
        Ok(HttpUpstream {})
    }
}

impl Upstream for HttpUpstream {
    fn call(&self, _call: V2Call, _request_id: &str) -> UpstreamFuture<'_> {
        Box::pin(async { Err(UpstreamFailure::Unreachable("not built".into())) })
    }
}
