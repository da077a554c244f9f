//! The worker catalog: what a worker is (identity, versions, system defaults, input
//! schema, output columns, run behaviour) and the built-in seed list that the sandbox
//! serves when the configuration does not replace it.
//!
//! The seed is fixed data, not generated, so slugs and schemas are stable across runs
//! and tests can name them directly.

use serde::Deserialize;
use serde_json::{json, Value};

/// Type of an output column; V1 result headers expose it as `format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ColumnType {
    Text,
    Number,
}

impl ColumnType {
    pub fn as_str(self) -> &'static str {
        match self {
            ColumnType::Text => "text",
            ColumnType::Number => "number",
        }
    }
}

/// One output column of a worker (a result header).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Column {
    pub key: String,
    pub label: String,
    #[serde(rename = "type")]
    pub kind: ColumnType,
}

/// Platform defaults reported in worker detail (`parameters.system`).
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct SystemDefaults {
    pub cpus: f64,
    /// Megabytes (V1 calls the field `memory_bytes`, V2 and run input `memory`).
    pub memory: u64,
    pub max_total_charge: u64,
    pub max_total_traffic: u64,
    pub execute_limit_time_seconds: u64,
    pub proxy_region: String,
}

impl Default for SystemDefaults {
    fn default() -> Self {
        SystemDefaults {
            cpus: 0.125,
            memory: 512,
            max_total_charge: 0,
            max_total_traffic: 0,
            execute_limit_time_seconds: 1800,
            proxy_region: "US".to_string(),
        }
    }
}

fn default_rows() -> u64 {
    20
}
fn default_min_duration() -> u64 {
    5
}
fn default_max_duration() -> u64 {
    20
}

/// A worker the sandbox can run. Also the `[[workers]]` table of the configuration.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerSpec {
    /// 26-character ULID-like slug.
    pub slug: String,
    /// Owner and name form the path: `owner~name` in V2, `owner/name` in V1.
    pub owner: String,
    pub name: String,
    pub title: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub readme: String,
    /// `vX.Y.Z` strings, oldest first; the last one is `latest`.
    pub versions: Vec<String>,
    #[serde(default)]
    pub system: SystemDefaults,
    /// The real descriptor form: `{"description": "...", "properties": [{name, type, ...}]}`.
    pub input_schema: Value,
    pub columns: Vec<Column>,
    /// Rows a run produces when the input does not say otherwise.
    #[serde(default = "default_rows")]
    pub default_rows: u64,
    /// Custom input parameter (integer) that sets the row count, if any.
    #[serde(default)]
    pub rows_param: Option<String>,
    /// Simulated run duration range in seconds (inclusive).
    #[serde(default = "default_min_duration")]
    pub min_duration_seconds: u64,
    #[serde(default = "default_max_duration")]
    pub max_duration_seconds: u64,
    /// When set, every run of this worker fails with this message.
    #[serde(default)]
    pub fail_message: Option<String>,
}

impl WorkerSpec {
    /// `owner~name`, the V2 path form.
    pub fn path(&self) -> String {
        format!("{}~{}", self.owner, self.name)
    }

    /// `owner/name`, the V1 path form.
    pub fn slash_path(&self) -> String {
        format!("{}/{}", self.owner, self.name)
    }

    pub fn latest_version(&self) -> &str {
        self.versions.last().map(String::as_str).unwrap_or("v1.0.0")
    }

    /// The schema's property array (empty when the schema has none).
    pub fn properties(&self) -> &[Value] {
        self.input_schema
            .get("properties")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or(&[])
    }

    /// Default value of a custom property, from the schema.
    pub fn property_default(&self, name: &str) -> Option<&Value> {
        self.properties()
            .iter()
            .find(|p| p.get("name").and_then(Value::as_str) == Some(name))
            .and_then(|p| p.get("default"))
    }
}

fn prop(name: &str, ty: &str, title: &str, editor: &str, default: Value, required: bool) -> Value {
    json!({
        "name": name,
        "type": ty,
        "title": title,
        "editor": editor,
        "default": default,
        "required": required,
        "description": format!("{title}."),
    })
}

fn col(key: &str, label: &str, kind: ColumnType) -> Column {
    Column {
        key: key.to_string(),
        label: label.to_string(),
        kind,
    }
}

fn versions(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// The built-in worker list. Roles: a typical scraper, a small one, a bulk one
/// (> 2500 rows, for V1 pages over 1000), one that always fails, one that is slow
/// (for abort), and one from another owner.
pub fn seed_workers() -> Vec<WorkerSpec> {
    use ColumnType::{Number, Text};
    vec![
        WorkerSpec {
            slug: "01KBHMS6A8H6A3K5FJY11MQ99Z".into(),
            owner: "coreclaw".into(),
            name: "google-maps-scraper".into(),
            title: "Google Maps Scraper".into(),
            description: "Extract places, ratings and contact data from Google Maps.".into(),
            readme: "# Google Maps Scraper\n\nSearches Google Maps for the given keywords.\n"
                .into(),
            versions: versions(&["v1.0.0", "v1.2.1", "v1.2.6"]),
            system: SystemDefaults::default(),
            input_schema: json!({
                "description": "Search Google Maps by keyword and location.",
                "properties": [
                    prop("keywords", "array", "Search keywords", "stringList", json!(["coffee"]), true),
                    prop("location", "string", "Location", "textfield", json!("New York"), false),
                    prop("max_results", "integer", "Maximum results", "number", json!(50), false),
                ]
            }),
            columns: vec![
                col("title", "Title", Text),
                col("address", "Address", Text),
                col("rating", "Rating", Number),
                col("reviews", "Reviews", Number),
                col("phone", "Phone", Text),
                col("url", "URL", Text),
            ],
            default_rows: 50,
            rows_param: Some("max_results".into()),
            min_duration_seconds: 5,
            max_duration_seconds: 20,
            fail_message: None,
        },
        WorkerSpec {
            slug: "01KC2X8Q3R5T7V9W1Y3Z5B7D9F".into(),
            owner: "coreclaw".into(),
            name: "amazon-product-by-asin".into(),
            title: "Amazon Product By ASIN".into(),
            description: "Fetch Amazon product data for a list of ASINs.".into(),
            readme: "# Amazon Product By ASIN\n\nOne row per ASIN.\n".into(),
            versions: versions(&["v1.0.1", "v1.0.2"]),
            system: SystemDefaults::default(),
            input_schema: json!({
                "description": "ASINs to look up.",
                "properties": [
                    prop("asins", "array", "ASINs", "stringList", json!(["B000000001"]), true),
                    prop("country", "string", "Marketplace country", "select", json!("US"), false),
                    prop("max_items", "integer", "Maximum items", "number", json!(8), false),
                ]
            }),
            columns: vec![
                col("asin", "ASIN", Text),
                col("title", "Title", Text),
                col("price", "Price", Number),
                col("rating", "Rating", Number),
            ],
            default_rows: 8,
            rows_param: Some("max_items".into()),
            min_duration_seconds: 5,
            max_duration_seconds: 12,
            fail_message: None,
        },
        WorkerSpec {
            slug: "01KD4N6P8R0T2V4W6Y8Z0B2D4F".into(),
            owner: "coreclaw".into(),
            name: "tiktok-comments-bulk".into(),
            title: "TikTok Comments (bulk)".into(),
            description: "Collect comments of TikTok videos in bulk.".into(),
            readme: "# TikTok Comments (bulk)\n\nProduces thousands of rows.\n".into(),
            versions: versions(&["v2.0.0", "v2.1.0"]),
            system: SystemDefaults {
                cpus: 0.5,
                memory: 2048,
                ..SystemDefaults::default()
            },
            input_schema: json!({
                "description": "Video URLs to collect comments from.",
                "properties": [
                    prop("video_urls", "array", "Video URLs", "requestListSources",
                         json!([{"url": "https://www.tiktok.com/@demo/video/1"}]), true),
                    prop("max_comments", "integer", "Maximum comments", "number", json!(2600), false),
                ]
            }),
            columns: vec![
                col("comment_id", "Comment ID", Text),
                col("text", "Text", Text),
                col("likes", "Likes", Number),
                col("author", "Author", Text),
            ],
            default_rows: 2600,
            rows_param: Some("max_comments".into()),
            min_duration_seconds: 10,
            max_duration_seconds: 20,
            fail_message: None,
        },
        WorkerSpec {
            slug: "01KE6Q8S0T2V4W6Y8Z0A2C4E6G".into(),
            owner: "coreclaw".into(),
            name: "broken-news-scraper".into(),
            title: "News Scraper (broken)".into(),
            description: "A news scraper whose target site always times out.".into(),
            readme: "# News Scraper (broken)\n\nEvery run fails.\n".into(),
            versions: versions(&["v1.0.1"]),
            system: SystemDefaults::default(),
            input_schema: json!({
                "description": "News site to scrape.",
                "properties": [
                    prop("start_url", "string", "Start URL", "textfield", json!("https://news.example.com"), false),
                ]
            }),
            columns: vec![
                col("headline", "Headline", Text),
                col("published", "Published", Text),
            ],
            default_rows: 6,
            rows_param: None,
            min_duration_seconds: 4,
            max_duration_seconds: 8,
            fail_message: Some("Navigation timeout of 30000 ms exceeded".into()),
        },
        WorkerSpec {
            slug: "01KF8S0T2V4W6Y8Z0A2B4D6F8H".into(),
            owner: "coreclaw".into(),
            name: "slow-site-crawler".into(),
            title: "Slow Site Crawler".into(),
            description: "Crawls a slow website; runs take about ten minutes.".into(),
            readme: "# Slow Site Crawler\n\nLong runs, useful to try abort.\n".into(),
            versions: versions(&["v0.9.0", "v1.0.0"]),
            system: SystemDefaults::default(),
            input_schema: json!({
                "description": "Site to crawl.",
                "properties": [
                    prop("start_urls", "array", "Start URLs", "requestListSources",
                         json!([{"url": "https://slow.example.com"}]), true),
                    prop("max_pages", "integer", "Maximum pages", "number", json!(100), false),
                ]
            }),
            columns: vec![
                col("url", "URL", Text),
                col("status_code", "Status code", Number),
                col("title", "Title", Text),
            ],
            default_rows: 100,
            rows_param: Some("max_pages".into()),
            min_duration_seconds: 600,
            max_duration_seconds: 600,
            fail_message: None,
        },
        WorkerSpec {
            slug: "01KG0A2B4C6D8E0F2G4H6J8K0M".into(),
            owner: "acme".into(),
            name: "price-monitor".into(),
            title: "Price Monitor".into(),
            description: "Watch product prices on a list of shop pages.".into(),
            readme: "# Price Monitor\n\nOne row per watched page.\n".into(),
            versions: versions(&["v3.1.4"]),
            system: SystemDefaults::default(),
            input_schema: json!({
                "description": "Pages to watch.",
                "properties": [
                    prop("pages", "array", "Pages", "stringList", json!(["https://shop.example.com/p/1"]), true),
                    prop("currency", "string", "Currency", "select", json!("USD"), false),
                ]
            }),
            columns: vec![
                col("page", "Page", Text),
                col("price", "Price", Number),
                col("currency", "Currency", Text),
            ],
            default_rows: 12,
            rows_param: None,
            min_duration_seconds: 5,
            max_duration_seconds: 15,
            fail_message: None,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const CROCKFORD: &str = "0123456789ABCDEFGHJKMNPQRSTVWXYZ";

    #[test]
    fn seed_slugs_are_ulid_like_and_unique() {
        let workers = seed_workers();
        assert!(workers.len() >= 5);
        let mut seen = std::collections::HashSet::new();
        for w in &workers {
            assert_eq!(w.slug.len(), 26, "{}", w.slug);
            assert!(w.slug.chars().all(|c| CROCKFORD.contains(c)), "{}", w.slug);
            assert!(seen.insert(w.slug.clone()));
            assert!(!w.properties().is_empty());
        }
    }

    #[test]
    fn seed_has_the_special_roles() {
        let workers = seed_workers();
        assert!(workers.iter().any(|w| w.default_rows > 2500));
        assert!(workers.iter().any(|w| w.fail_message.is_some()));
        assert!(workers.iter().any(|w| w.min_duration_seconds >= 600));
    }
}
