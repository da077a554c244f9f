//! V1 dialects: the readings of V1 behaviour on which the public record
//! disagrees with itself, as named choices. The gateway reads them from
//! `[compat]` and applies them where a V1 answer is rendered ([`crate::error`])
//! or a V1 request is read ([`crate::ops`]); the sandbox's native V1 surface
//! takes the same choices (`[v1]` in its config), so both sides of a
//! differential or shadow comparison speak the same dialect.
//!
//! | Choice | Values (default first) | Who expects what |
//! |---|---|---|
//! | `business_error_status` | `http`, `200` | `http`: V1-SKILL, the spec, the PyPI SDK and the V1 CLI (400/401/404/429/500 with the V1 code; the SDK raises `CoreClawHTTPError`). `200`: the n8n V1 node 0.1.x ("the API always returns HTTP 200 with a `code` field"; it builds its error hints only from `code`), whose credential test still reads the key by HTTP status, so under `200` a key problem keeps its status (see [`Dialect::error_status`]) |
//! | `empty_store_search` | `refuse`, `all` | `refuse`: V1-DOCS ("must be non-empty; an empty search returns an error") and the spec (`search` required). `all`: the n8n V1 node's list dropdown, which sends `search=` and documents "empty lists everything" |
//! | `missing_key_status` | `401`, `400` | `401`: V1-SKILL and the spec (401 invalid API key, 20001). `400`: the n8n V1 node's credential test, which reads HTTP 400 as "missing key" and 401 as "invalid key" (400 answers carry 4000 and name the header) |

use serde::{Deserialize, Serialize};

/// The HTTP status of V1 error envelopes (non-zero `code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
pub enum BusinessErrorStatus {
    /// The status V1-SKILL documents for the code (400, 401, 404, 429, 500).
    #[default]
    #[serde(rename = "http")]
    Http,
    /// 200 for business errors, whose `code` clients read; a key problem
    /// keeps its status (401 / 20001, or the missing key's 400 / 4000), as
    /// the one client that wants 200 tells keys apart only by status.
    #[serde(rename = "200")]
    Always200,
}

/// What a store search with an empty `search` (`search=`) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EmptyStoreSearch {
    /// 400 / 4000 naming `search`.
    #[default]
    Refuse,
    /// Every worker, up to `limit` (V2 is asked without a keyword).
    All,
}

/// The answer to a keyed operation sent without any key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
pub enum MissingKeyStatus {
    /// 401 / 20001, like a wrong key.
    #[default]
    #[serde(rename = "401")]
    Unauthorized,
    /// 400 / 4000 naming the `api-key` header.
    #[serde(rename = "400")]
    BadRequest,
}

/// The three choices together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields, default)]
pub struct Dialect {
    pub business_error_status: BusinessErrorStatus,
    pub empty_store_search: EmptyStoreSearch,
    pub missing_key_status: MissingKeyStatus,
}

impl Dialect {
    /// The HTTP status a V1 error envelope is sent with under this dialect.
    /// `about_key` marks a key problem (an invalid key, 20001, or the answer
    /// to a missing one): it keeps its documented status in every dialect.
    ///
    /// Why `200` does not reach key problems: the only V1 client that expects
    /// HTTP 200 errors is the n8n V1 node, and its credential test
    /// (`POST /api/v1/account/info`) decides by status alone (401 "invalid
    /// key", 400 "missing key", any 2xx "connection successful"). A key
    /// problem sent as 200 would pass a wrong or empty key; every other V1
    /// client (spec, V1-SKILL, PyPI SDK, V1 CLI) expects 401 as well. So
    /// no published client is served by a key problem sent as 200.
    pub fn error_status(&self, documented: http::StatusCode, about_key: bool) -> http::StatusCode {
        match self.business_error_status {
            BusinessErrorStatus::Http => documented,
            BusinessErrorStatus::Always200 if about_key => documented,
            BusinessErrorStatus::Always200 => http::StatusCode::OK,
        }
    }
}

/// Parses one choice from its configuration spelling (`"http"`, `"200"`, …),
/// naming the allowed values on failure.
pub fn parse_choice<T: for<'de> Deserialize<'de>>(
    key: &str,
    value: &str,
    allowed: &str,
) -> Result<T, String> {
    T::deserialize(serde::de::value::StrDeserializer::<serde::de::value::Error>::new(value))
        .map_err(|_| format!("{key}: {value:?} is not one of {allowed}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_from_their_config_spelling() {
        let s: BusinessErrorStatus = parse_choice("k", "200", "").unwrap();
        assert_eq!(s, BusinessErrorStatus::Always200);
        let s: BusinessErrorStatus = parse_choice("k", "http", "").unwrap();
        assert_eq!(s, BusinessErrorStatus::Http);
        let m: MissingKeyStatus = parse_choice("k", "400", "").unwrap();
        assert_eq!(m, MissingKeyStatus::BadRequest);
        let e: EmptyStoreSearch = parse_choice("k", "all", "").unwrap();
        assert_eq!(e, EmptyStoreSearch::All);
        let err = parse_choice::<BusinessErrorStatus>("compat.x", "201", "http, 200").unwrap_err();
        assert_eq!(err, "compat.x: \"201\" is not one of http, 200");
    }

    #[test]
    fn only_the_200_dialect_changes_error_statuses() {
        use http::StatusCode;
        let d = Dialect::default();
        assert_eq!(
            d.error_status(StatusCode::NOT_FOUND, false),
            StatusCode::NOT_FOUND
        );
        assert_eq!(
            d.error_status(StatusCode::UNAUTHORIZED, true),
            StatusCode::UNAUTHORIZED
        );
        let d = Dialect {
            business_error_status: BusinessErrorStatus::Always200,
            ..Dialect::default()
        };
        assert_eq!(
            d.error_status(StatusCode::INTERNAL_SERVER_ERROR, false),
            StatusCode::OK
        );
        assert_eq!(
            d.error_status(StatusCode::BAD_REQUEST, false),
            StatusCode::OK
        );
    }

    #[test]
    fn key_problems_keep_their_status_in_the_200_dialect() {
        use http::StatusCode;
        let n8n = Dialect {
            business_error_status: BusinessErrorStatus::Always200,
            empty_store_search: EmptyStoreSearch::All,
            missing_key_status: MissingKeyStatus::BadRequest,
        };
        for status in [StatusCode::UNAUTHORIZED, StatusCode::BAD_REQUEST] {
            assert_eq!(n8n.error_status(status, true), status);
        }
    }

    #[test]
    fn a_sandbox_table_reads_the_same_spellings() {
        let d: Dialect =
            toml::from_str("business_error_status = \"200\"\nmissing_key_status = \"400\"\n")
                .unwrap();
        assert_eq!(d.business_error_status, BusinessErrorStatus::Always200);
        assert_eq!(d.missing_key_status, MissingKeyStatus::BadRequest);
        assert_eq!(d.empty_store_search, EmptyStoreSearch::Refuse);
    }
}
