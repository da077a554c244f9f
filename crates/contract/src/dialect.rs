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

/// One dialect choice: a closed set of values, each with the one name the
/// configuration spells it with (the gateway's `[compat]`, the sandbox's
/// `[v1]`). Everything that reads, checks, prints or lists a choice goes
/// through these names, so a value is spelled once, here.
pub trait Choice: Copy + Default + PartialEq + Sized + 'static {
    /// The key that sets the choice (a field of [`Dialect`]).
    const KEY: &'static str;
    /// Every value, the default first.
    const ALL: &'static [Self];

    /// The value's name, as the configuration spells it.
    fn name(self) -> &'static str;

    /// The value called `name`, if there is one.
    fn from_name(name: &str) -> Option<Self> {
        Self::ALL.iter().copied().find(|v| v.name() == name)
    }

    /// The allowed names, for a message: `http, 200`.
    fn names() -> String {
        let names: Vec<&str> = Self::ALL.iter().map(|v| v.name()).collect();
        names.join(", ")
    }

    /// The value called `name`, or a message naming the allowed values.
    fn parse(name: &str) -> Result<Self, String> {
        Self::from_name(name).ok_or_else(|| format!("{name:?} is not one of {}", Self::names()))
    }
}

/// Serde by name, for the choices (and so for [`Dialect`] as a table).
macro_rules! serde_by_name {
    ($($choice:ty),*) => {$(
        impl Serialize for $choice {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.name())
            }
        }

        impl<'de> Deserialize<'de> for $choice {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let name = String::deserialize(d)?;
                <$choice>::parse(&name).map_err(serde::de::Error::custom)
            }
        }
    )*};
}

serde_by_name!(BusinessErrorStatus, EmptyStoreSearch, MissingKeyStatus);

/// The HTTP status of V1 error envelopes (non-zero `code`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BusinessErrorStatus {
    /// The status V1-SKILL documents for the code (400, 401, 404, 429, 500).
    #[default]
    Http,
    /// 200 for business errors, whose `code` clients read; a key problem
    /// keeps its status (401 / 20001, or the missing key's 400 / 4000), as
    /// the one client that wants 200 tells keys apart only by status.
    Always200,
}

impl Choice for BusinessErrorStatus {
    const KEY: &'static str = "business_error_status";
    const ALL: &'static [Self] = &[Self::Http, Self::Always200];

    fn name(self) -> &'static str {
        match self {
            Self::Http => "http",
            Self::Always200 => "200",
        }
    }
}

/// What a store search with an empty `search` (`search=`) does.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EmptyStoreSearch {
    /// 400 / 4000 naming `search`.
    #[default]
    Refuse,
    /// Every worker, up to `limit` (V2 is asked without a keyword).
    All,
}

impl Choice for EmptyStoreSearch {
    const KEY: &'static str = "empty_store_search";
    const ALL: &'static [Self] = &[Self::Refuse, Self::All];

    fn name(self) -> &'static str {
        match self {
            Self::Refuse => "refuse",
            Self::All => "all",
        }
    }
}

/// The answer to a keyed operation sent without any key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum MissingKeyStatus {
    /// 401 / 20001, like a wrong key.
    #[default]
    Unauthorized,
    /// 400 / 4000 naming the `api-key` header.
    BadRequest,
}

impl Choice for MissingKeyStatus {
    const KEY: &'static str = "missing_key_status";
    const ALL: &'static [Self] = &[Self::Unauthorized, Self::BadRequest];

    fn name(self) -> &'static str {
        match self {
            Self::Unauthorized => "401",
            Self::BadRequest => "400",
        }
    }
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
    /// Each choice's key and the name of its value in this dialect, in the
    /// order of the fields: what a report or a message shows of it.
    pub fn settings(&self) -> [(&'static str, &'static str); 3] {
        [
            (BusinessErrorStatus::KEY, self.business_error_status.name()),
            (EmptyStoreSearch::KEY, self.empty_store_search.name()),
            (MissingKeyStatus::KEY, self.missing_key_status.name()),
        ]
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices_parse_from_their_config_spelling() {
        let s = BusinessErrorStatus::parse("200").unwrap();
        assert_eq!(s, BusinessErrorStatus::Always200);
        let s = BusinessErrorStatus::parse("http").unwrap();
        assert_eq!(s, BusinessErrorStatus::Http);
        let m = MissingKeyStatus::parse("400").unwrap();
        assert_eq!(m, MissingKeyStatus::BadRequest);
        let e = EmptyStoreSearch::parse("all").unwrap();
        assert_eq!(e, EmptyStoreSearch::All);
        // The key is named by whoever reads it (the gateway's configuration
        // prefixes `compat.business_error_status: `).
        let err = BusinessErrorStatus::parse("201").unwrap_err();
        assert_eq!(err, "\"201\" is not one of http, 200");
    }

    /// Each choice's names: one per value, the default first, each read
    /// back as its value, and written and read by serde as themselves.
    fn names_are_one_per_value<C: Choice + std::fmt::Debug + Serialize>() {
        assert_eq!(C::ALL.first(), Some(&C::default()), "{}", C::KEY);
        let mut names: Vec<&str> = C::ALL.iter().map(|v| v.name()).collect();
        for v in C::ALL {
            assert_eq!(C::from_name(v.name()), Some(*v));
            let t = toml::Table::try_from(std::collections::BTreeMap::from([("k", *v)])).unwrap();
            assert_eq!(t["k"].as_str(), Some(v.name()));
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), C::ALL.len(), "{}: a name used twice", C::KEY);
    }

    #[test]
    fn every_choice_is_named_once_and_keyed_by_its_field() {
        names_are_one_per_value::<BusinessErrorStatus>();
        names_are_one_per_value::<EmptyStoreSearch>();
        names_are_one_per_value::<MissingKeyStatus>();
        // `settings()` names the fields serde reads and writes, in order.
        let table = toml::Table::try_from(Dialect::default()).unwrap();
        let fields: Vec<&str> = table.keys().map(String::as_str).collect();
        let mut keys: Vec<&str> = Dialect::default().settings().map(|(k, _)| k).to_vec();
        keys.sort_unstable();
        assert_eq!(fields, keys);
        let values: Vec<&str> = Dialect::default().settings().map(|(_, v)| v).to_vec();
        assert_eq!(values, ["http", "refuse", "401"]);
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
