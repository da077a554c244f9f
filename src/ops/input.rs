//! Reading V1 input (JSON bodies and query strings) into typed values, with
//! errors that name the offending field. Nothing here talks to V2.
//!
//! A value read more leniently than the native V1 surface reads it (an id
//! with blanks around it, `null` for an absent field, `10.0` for `10`) is
//! marked as the [`lenient_input`](crate::differences::LENIENT_INPUT)
//! difference where it is read, when the body or query was made with
//! [`Body::noting`] / [`Query::noting`].

use std::borrow::Cow;

use serde_json::{Map, Value};

use crate::differences::{Applied, Difference, LENIENT_INPUT, PAGE_INDEX_BOUND};
use crate::error::{GatewayError, Subject};
use crate::paging::Window;
use crate::v2::Segment;

/// The members of a JSON object, each value read as serde_json reads a
/// `Value`. Anything but an object is refused here and read again as a
/// `Value` by [`Body::parse`], whose refusal names the problem.
struct Members(Vec<(Name, Value)>);

/// A member's name: one the operations read is not copied.
type Name = Cow<'static, str>;

/// The member names V1 operations read. A name not here works all the
/// same; it is only copied out of the body.
const NAMES: &[&str] = &[
    "run_slug",
    "page_index",
    "page_size",
    "status",
    "scraper_slug",
    "task_slug",
    "callback_url",
    "is_async",
    "input",
    "format",
    "filter_keys",
    "limit",
    "version",
];

/// Reads a member's name as serde_json reads a `String` key (escapes and
/// all), without a copy when it is one of [`NAMES`].
struct NameSeed;

impl<'de> serde::de::DeserializeSeed<'de> for NameSeed {
    type Value = Name;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Name, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Name;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a string")
            }
            fn visit_str<E: serde::de::Error>(self, name: &str) -> Result<Name, E> {
                Ok(match NAMES.iter().find(|known| **known == name) {
                    Some(known) => Cow::Borrowed(known),
                    None => Cow::Owned(name.to_owned()),
                })
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        use serde::de::{Error, MapAccess, Visitor};
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Members, A::Error> {
                // serde_json does not tell an object's size: room for a
                // usual V1 body's few members.
                let mut members = Vec::with_capacity(4);
                while let Some(name) = map.next_key_seed(NameSeed)? {
                    // Left to `Value` itself (see `wire::RAW_VALUE_KEY`).
                    if name == crate::ops::wire::RAW_VALUE_KEY {
                        return Err(A::Error::custom("raw value"));
                    }
                    members.push((name, map.next_value::<Value>()?));
                }
                Ok(Members(members))
            }
        }
        d.deserialize_map(V)
    }
}

/// A record identifier as the client sent it (trimmed): one safe V2 path
/// segment, or a string no record can have as its id.
///
/// The native V1 service looked every id up as it came, so an id that cannot
/// be a single path segment (`../x`, `a/b`, control characters, longer than
/// [`MAX_ID_LEN`](crate::v2::MAX_ID_LEN)) or a V2 shortcut word (`last`) was
/// simply not found: 404 with the record's code (50001 worker, 60001 task,
/// 70001 run). The gateway answers the same, at the point where it would have
/// asked V2, so every other check of the request still comes first, as it did
/// on V1; such an id never reaches V2. The key is V2's to check, so with a
/// wrong key such an id is 404 where V1 said 401 (difference
/// `unknown_id_before_key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ident {
    Segment(Segment),
    /// Unknown-shaped: answered as an unknown record of this kind.
    Unknown(Subject),
}

impl Ident {
    fn of(checked: Result<Segment, crate::v2::SegmentError>, subject: Subject) -> Ident {
        match checked {
            Ok(seg) => Ident::Segment(seg),
            Err(_) => Ident::Unknown(subject),
        }
    }

    /// The segment to send, or the V1 not-found answer for an id V2 must
    /// never see.
    pub fn known(&self) -> Result<&Segment, GatewayError> {
        match self {
            Ident::Segment(seg) => Ok(seg),
            Ident::Unknown(subject) => Err(GatewayError::NotFound(*subject)),
        }
    }
}

/// A V1 JSON body: the members of an object, or none where V1 allowed an
/// empty body. A list, not a map: a body has a handful of members, each
/// looked up by name once or twice, and a repeated name reads as its last
/// value, as in a map.
pub struct Body<'a> {
    members: Vec<(Name, Value)>,
    /// Where the differences read here are marked (none in tests).
    applied: Option<&'a Applied>,
}

impl Body<'static> {
    /// Parses a request body. An empty body is an empty object (V1 account
    /// info accepts none); anything else must be a JSON object.
    pub fn parse(bytes: &[u8]) -> Result<Body<'static>, GatewayError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Body::of(Vec::new()));
        }
        // Checked as UTF-8 in one step: read from bytes, serde checks each
        // string on its own, at about a hundred instructions a string more.
        if let Some(Members(members)) = std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| serde_json::from_str::<Members>(text).ok())
        {
            return Ok(Body::of(members));
        }
        // Not an object, or not JSON: read as any value, so the refusal
        // names the problem as serde_json's `Value` does.
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) => Ok(Body::from_map(map)),
            Ok(_) => Err(GatewayError::BadRequest(
                "body must be a JSON object".into(),
            )),
            Err(e) => Err(GatewayError::BadRequest(format!(
                "body is not valid JSON ({e})"
            ))),
        }
    }

    pub fn from_map(map: Map<String, Value>) -> Body<'static> {
        Body::of(map.into_iter().map(|(k, v)| (Cow::Owned(k), v)).collect())
    }

    fn of(members: Vec<(Name, Value)>) -> Body<'static> {
        Body {
            members,
            applied: None,
        }
    }

    /// The same body, marking in `applied` what it reads leniently.
    pub fn noting(self, applied: &Applied) -> Body<'_> {
        Body {
            members: self.members,
            applied: Some(applied),
        }
    }
}

impl Body<'_> {
    /// Marks `difference` as one this request's answer relies on.
    pub fn note(&self, difference: &Difference) {
        if let Some(applied) = self.applied {
            applied.note(difference);
        }
    }

    /// The segment `ident` names, or the not-found error the gateway
    /// answers without asking V2 (`unknown_id_before_key`).
    pub fn known<'i>(&self, ident: &'i Ident) -> Result<&'i Segment, GatewayError> {
        ident
            .known()
            .inspect_err(|_| self.note(&crate::differences::UNKNOWN_ID_BEFORE_KEY))
    }

    fn present(&self, field: &str) -> Option<&Value> {
        // Every name an operation reads is one that is not copied: a name
        // read here and missing from the list fails in any debug build (the
        // tests run every operation), not only by costing a copy.
        debug_assert!(
            NAMES.contains(&field),
            "{field:?} is read by an operation but missing from NAMES"
        );
        match self.last(field) {
            // `null` read as the field left out (`lenient_input`).
            Some(Value::Null) => {
                self.note(&LENIENT_INPUT);
                None
            }
            value => value,
        }
    }

    /// The last member named `name`, unless null (what the tests compare).
    #[cfg(test)]
    fn member(&self, name: &str) -> Option<&Value> {
        self.last(name).filter(|v| !v.is_null())
    }

    /// The last member named `name`, null included: a repeated name reads
    /// as its last value, as in a map.
    fn last(&self, name: &str) -> Option<&Value> {
        self.members
            .iter()
            .rev()
            .find(|(member, _)| member == name)
            .map(|(_, value)| value)
    }

    pub fn get(&self, field: &str) -> Option<&Value> {
        self.present(field)
    }

    pub fn opt_str(&self, field: &str) -> Result<Option<&str>, GatewayError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(GatewayError::bad(field, "must be a string")),
        }
    }

    /// [`Body::opt_str`] for a field V1 refused as `null` (400 / 4000, "must
    /// be a string"): `version` and the start-run `callback_url`. Reading
    /// `null` as absent is the gateway's leniency for the fields the
    /// `lenient_input` difference names, not for these.
    pub fn opt_str_not_null(&self, field: &str) -> Result<Option<&str>, GatewayError> {
        if matches!(self.last(field), Some(Value::Null)) {
            return Err(GatewayError::bad(field, "must be a string, got null"));
        }
        self.opt_str(field)
    }

    pub fn req_str(&self, field: &str) -> Result<&str, GatewayError> {
        match self.opt_str(field)? {
            Some(s) if !s.trim().is_empty() => Ok(s),
            _ => Err(GatewayError::bad(field, "is required")),
        }
    }

    pub fn opt_bool(&self, field: &str) -> Result<Option<bool>, GatewayError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::Bool(b)) => Ok(Some(*b)),
            Some(_) => Err(GatewayError::bad(field, "must be a boolean")),
        }
    }

    /// An integer field; V1 clients send numbers, and integral floats like
    /// `2.0` are accepted as the same value.
    pub fn opt_int(&self, field: &str) -> Result<Option<i64>, GatewayError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::Number(n)) => n
                .as_i64()
                .or_else(|| {
                    let whole = n
                        .as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                        .map(|f| f as i64);
                    if whole.is_some() {
                        self.note(&LENIENT_INPUT);
                    }
                    whole
                })
                .map(Some)
                .ok_or_else(|| GatewayError::bad(field, "must be an integer")),
            Some(_) => Err(GatewayError::bad(field, "must be an integer")),
        }
    }

    pub fn opt_object(&self, field: &str) -> Result<Option<&Map<String, Value>>, GatewayError> {
        match self.present(field) {
            None => Ok(None),
            Some(Value::Object(m)) => Ok(Some(m)),
            Some(_) => Err(GatewayError::bad(field, "must be an object")),
        }
    }

    /// A required run identifier. Missing, not a string or blank is 400 /
    /// 4000; anything else is an [`Ident`]: one safe path segment that is not
    /// a V2 shortcut word (`last`), or unknown-shaped, which names no run
    /// (404 / 70001 when it would be sent).
    pub fn run_slug(&self) -> Result<Ident, GatewayError> {
        let raw = self.req_str("run_slug")?;
        Ok(run_id(self.trimmed(raw)))
    }

    /// `raw`, marked `lenient_input` when blanks around it will be trimmed.
    pub fn trimmed<'v>(&self, raw: &'v str) -> &'v str {
        if raw.len() != raw.trim().len() {
            self.note(&LENIENT_INPUT);
        }
        raw
    }

    /// The V1 page window, with V1's defaults and the configured maximum.
    /// V1 `page_index` is 1-based, so 0 is refused like any other page V1 never
    /// had (V2 reads `offset=0` as page 1, but that is V2's rule, not V1's).
    pub fn window(&self, default_size: u64, max_size: u64) -> Result<Window, GatewayError> {
        let page_index = match self.opt_int("page_index")? {
            None => 1,
            Some(i) if (1..=MAX_PAGE_INDEX).contains(&i) => i as u64,
            Some(i) => {
                if i > MAX_PAGE_INDEX {
                    self.note(&PAGE_INDEX_BOUND);
                }
                return Err(GatewayError::bad(
                    "page_index",
                    format!("must be between 1 and {MAX_PAGE_INDEX}"),
                ));
            }
        };
        let page_size = match self.opt_int("page_size")? {
            None => default_size,
            Some(s) if s >= 1 && s as u64 <= max_size => s as u64,
            Some(_) => {
                return Err(GatewayError::bad(
                    "page_size",
                    format!("must be between 1 and {max_size}"),
                ))
            }
        };
        Ok(Window {
            page_index,
            page_size,
        })
    }
}

/// Beyond this no V1 client pages; it keeps offset arithmetic far from overflow.
pub const MAX_PAGE_INDEX: i64 = 10_000_000;

/// An identifier V2 itself returned (a synchronous run's `run_slug`), to be
/// sent back: one that is not a safe segment is V2's error, not the client's.
pub fn id(raw: &str, field: &str) -> Result<Segment, GatewayError> {
    Segment::new(raw.trim()).map_err(|e| GatewayError::bad(field, e))
}

/// A client's run id ([`Segment::run`]).
pub fn run_id(raw: &str) -> Ident {
    Ident::of(Segment::run(raw.trim()), Subject::Run)
}

/// A client's task id ([`Segment::new`]).
pub fn task_id(raw: &str) -> Ident {
    Ident::of(Segment::new(raw.trim()), Subject::Task)
}

/// A client's worker id, `owner/name` becoming `owner~name`
/// ([`Segment::worker`]).
pub fn worker_id(raw: &str) -> Ident {
    Ident::of(Segment::worker(raw.trim()), Subject::Worker)
}

/// A parsed V1 query string, borrowing from it: a pair is copied only
/// where it was percent- or `+`-encoded.
pub struct Query<'a> {
    pairs: Vec<(Cow<'a, str>, Cow<'a, str>)>,
    /// Where the differences read here are marked (none in tests).
    applied: Option<&'a Applied>,
}

impl<'a> Query<'a> {
    pub fn parse(raw: Option<&'a str>) -> Query<'a> {
        Query {
            pairs: url::form_urlencoded::parse(raw.unwrap_or("").as_bytes()).collect(),
            applied: None,
        }
    }

    /// The same query, marking in `applied` what it reads leniently.
    pub fn noting(self, applied: &'a Applied) -> Query<'a> {
        Query {
            applied: Some(applied),
            ..self
        }
    }

    /// Marks `difference` as applied to this request.
    pub fn note(&self, difference: &Difference) {
        if let Some(applied) = self.applied {
            applied.note(difference);
        }
    }

    /// The last value given for `name`: V1 read a repeated parameter
    /// (`?search=a&search=b`) as its last value.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_ref())
    }

    pub fn req(&self, name: &str) -> Result<&str, GatewayError> {
        match self.get(name) {
            Some(v) if !v.trim().is_empty() => Ok(v),
            _ => Err(GatewayError::bad(name, "is required")),
        }
    }

    /// An integer parameter; one too large for an `i64` is `i64::MAX` (or
    /// `i64::MIN`; every caller bounds it far inside those), not a refusal:
    /// it is still an integer.
    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, GatewayError> {
        match self.get(name).map(str::trim) {
            None => Ok(None),
            Some("") => {
                self.note(&LENIENT_INPUT);
                Ok(None)
            }
            Some(v) => match v.parse() {
                Ok(n) => Ok(Some(n)),
                Err(_) if is_whole_number(v.strip_prefix('+').unwrap_or(v)) => {
                    self.note(&LENIENT_INPUT);
                    Ok(Some(i64::MAX))
                }
                Err(_) if v.strip_prefix('-').is_some_and(is_whole_number) => {
                    self.note(&LENIENT_INPUT);
                    Ok(Some(i64::MIN))
                }
                Err(_) => Err(GatewayError::bad(name, "must be an integer")),
            },
        }
    }
}

/// Digits only, at least one.
fn is_whole_number(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// A callback URL must be an absolute http(s) URL: V2 will POST to it.
pub fn callback_url(body: &Body<'_>, required: bool) -> Result<Option<String>, GatewayError> {
    let raw = if required {
        Some(body.req_str("callback_url")?)
    } else {
        // Only `""` is V1's "no callback"; a blank one (`" "`) V1 refused as
        // not a URL, and so does the check below.
        body.opt_str_not_null("callback_url")?
            .filter(|s| !s.is_empty())
    };
    match raw {
        None => Ok(None),
        // The URL parser silently drops tabs, CR and LF, so a URL carrying
        // them would be checked in one form and forwarded in another (and
        // CR/LF could split a header where V2 echoes it): refused outright,
        // though V1 accepted it (difference `callback_url_checks`).
        Some(s) if s.chars().any(char::is_control) => {
            body.note(&crate::differences::CALLBACK_URL_CHECKS);
            Err(GatewayError::bad(
                "callback_url",
                "must not contain control characters (CR, LF, tab, ...)",
            ))
        }
        Some(s) => match url::Url::parse(s.trim()) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {
                Ok(Some(s.trim().to_owned()))
            }
            _ => Err(GatewayError::bad(
                "callback_url",
                "must be an absolute http or https URL",
            )),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(s: &str) -> Body<'static> {
        Body::parse(s.as_bytes()).unwrap_or_else(|e| panic!("{e}"))
    }

    fn msg(e: GatewayError) -> String {
        e.render().envelope.message
    }

    #[test]
    fn bodies_must_be_objects() {
        assert!(Body::parse(b"").is_ok());
        assert!(Body::parse(b"  \n").is_ok());
        for bad in [&b"[]"[..], b"\"x\"", b"{", b"nul", b"\xff"] {
            assert!(Body::parse(bad).is_err());
        }
    }

    /// Bodies read as members say what the same bodies read as a `Value` say.
    #[test]
    fn members_read_as_a_value_reads_them() {
        for text in [
            r#"{"run_slug":"r1","page_size":10}"#,
            r#"{"a":1,"a":null,"b":{"c":[1,2]},"a":"last"}"#,
            r#"{"run_slug":"caf\u00e9","x":1.5e3}"#,
            r#"  {"n": -0, "big": 18446744073709551615 }  "#,
            r#"{"$serde_json::private::RawValue":"1"}"#,
            // Read by `Value` (the member reader leaves the key to it): an
            // object when the key is not the first, the text's object when
            // it is.
            r#"{"a":1,"$serde_json::private::RawValue":"x"}"#,
            r#"{"$serde_json::private::RawValue":"{\"a\":1}"}"#,
            r#"{"a":1}x"#,
            r#"{"a":1e400}"#,
            r#"[1e400]"#,
            r#"[1,2]"#,
            r#"5"#,
            r#"{"a":"\ud800"}"#,
        ]
        .map(str::as_bytes)
        .into_iter()
        // Not UTF-8, in a value and in a key: the body is checked as
        // UTF-8 before the member reader sees it.
        .chain([
            &b"{\"a\":\"\xff\"}"[..],
            b"{\"a\xc3\":1}",
            b"{\"a\":\"\xe2\x82\"}",
        ]) {
            let shown = String::from_utf8_lossy(text);
            let general = match serde_json::from_slice::<Value>(text) {
                Ok(Value::Object(map)) => Ok(map),
                Ok(_) => Err("body must be a JSON object".to_owned()),
                Err(e) => Err(format!("body is not valid JSON ({e})")),
            };
            match (Body::parse(text), general) {
                (Ok(body), Ok(map)) => {
                    for name in map.keys().map(String::as_str).chain(["absent"]) {
                        assert_eq!(
                            body.member(name),
                            map.get(name).filter(|v| !v.is_null()),
                            "{shown}"
                        );
                    }
                }
                (Err(e), Err(expected)) => assert!(msg(e).ends_with(&expected), "{shown}"),
                (got, expected) => panic!("{shown}: {:?} against {expected:?}", got.is_ok()),
            }
        }
    }

    /// A name the operations read is not copied, however it is written;
    /// any other is read all the same.
    #[test]
    fn known_names_are_not_copied() {
        let b = body(r#"{"run_slug":"r1","run\u005fslug":"r2","other":1,"page_size":5}"#);
        let borrowed: Vec<bool> = b
            .members
            .iter()
            .map(|(n, _)| matches!(n, Cow::Borrowed(_)))
            .collect();
        assert_eq!(borrowed, [true, true, false, true]);
        assert_eq!(b.req_str("run_slug").unwrap(), "r2");
        assert_eq!(b.member("other"), Some(&Value::from(1)));
        assert_eq!(b.opt_int("page_size").unwrap(), Some(5));
    }

    /// An operation that reads a name missing from `NAMES` fails in a
    /// debug build.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "missing from NAMES")]
    fn a_name_read_and_not_listed_is_caught() {
        let _ = body(r#"{"other":1}"#).get("other");
    }

    /// Found by schemathesis: `limit=138567107851090002968576` is an
    /// integer, and was refused as not one.
    #[test]
    fn query_integers_too_large_for_i64_are_read_as_the_largest() {
        let q = |raw: &'static str| Query::parse(Some(raw)).opt_int("limit");
        assert_eq!(q("limit=138567107851090002968576").unwrap(), Some(i64::MAX));
        assert_eq!(q("limit=+99999999999999999999").unwrap(), Some(i64::MAX));
        assert_eq!(q("limit=%2012").unwrap(), Some(12));
        assert_eq!(q("limit=").unwrap(), None);
        assert_eq!(q("limit=-99999999999999999999").unwrap(), Some(i64::MIN));
        for bad in ["limit=1.5", "limit=x", "limit=%2B", "limit=-"] {
            assert!(q(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_name_the_field() {
        let b = body(r#"{"run_slug": 5, "page_size": "10", "is_async": "yes"}"#);
        assert!(msg(b.run_slug().unwrap_err()).contains("run_slug must be a string"));
        assert!(msg(b.window(10, 1000).unwrap_err()).contains("page_size must be an integer"));
        assert!(msg(b.opt_bool("is_async").unwrap_err()).contains("is_async"));
        assert!(msg(body("{}").run_slug().unwrap_err()).contains("run_slug is required"));
    }

    fn with(field: &str, value: &str) -> Body<'static> {
        Body::from_map(
            [(field.to_owned(), Value::String(value.into()))]
                .into_iter()
                .collect(),
        )
    }

    fn status_and_code(e: GatewayError) -> (u16, i64) {
        let r = e.render();
        (r.status.as_u16(), r.envelope.code)
    }

    #[test]
    fn v2_shortcut_words_are_unknown_runs() {
        for word in ["last", "LAST", " Last "] {
            let id = with("run_slug", word).run_slug().unwrap();
            assert_eq!(
                status_and_code(id.known().unwrap_err()),
                (404, 70001),
                "{word:?}"
            );
        }
        for fine in ["last1", "lastrun"] {
            let id = with("run_slug", fine).run_slug().unwrap();
            assert_eq!(id.known().unwrap().as_str(), fine);
        }
    }

    #[test]
    fn unknown_shaped_ids_name_no_record() {
        let long = "x".repeat(crate::v2::MAX_ID_LEN + 1);
        for raw in [
            "../users/account",
            "a/b",
            "a\r\nb",
            "a\u{0}b",
            "..",
            "a#b",
            "a b",
            "%2e%2e",
            long.as_str(),
        ] {
            let run = with("run_slug", raw).run_slug().unwrap();
            assert_eq!(run, Ident::Unknown(Subject::Run), "{raw:?}");
            assert_eq!(status_and_code(run.known().unwrap_err()), (404, 70001));
            let task = task_id(raw);
            assert_eq!(status_and_code(task.known().unwrap_err()), (404, 60001));
        }
        for raw in ["a/b/c", "/x", "a/", "a/..", "../x", "a b"] {
            let w = worker_id(raw);
            assert_eq!(status_and_code(w.known().unwrap_err()), (404, 50001));
        }
        assert_eq!(worker_id(" a/b ").known().unwrap().as_str(), "a~b");
        assert_eq!(task_id(" T1 ").known().unwrap().as_str(), "T1");
        // Blank is not an id at all: 400 / 4000, as on V1.
        for blank in ["", "  ", "\t"] {
            let e = with("run_slug", blank).run_slug().unwrap_err();
            assert_eq!(status_and_code(e), (400, 4000), "{blank:?}");
        }
    }

    #[test]
    fn windows_have_defaults_and_bounds() {
        let w = body("{}").window(10, 1000).unwrap();
        assert_eq!((w.page_index, w.page_size), (1, 10));
        let w = body(r#"{"page_index": 1, "page_size": 1000}"#)
            .window(10, 1000)
            .unwrap();
        assert_eq!((w.page_index, w.page_size), (1, 1000));
        assert!(body(r#"{"page_index": 0}"#).window(10, 1000).is_err());
        assert!(body(r#"{"page_size": 1001}"#).window(10, 1000).is_err());
        assert!(body(r#"{"page_size": 0}"#).window(10, 1000).is_err());
        assert!(body(r#"{"page_index": -1}"#).window(10, 1000).is_err());
        assert!(body(r#"{"page_index": 1.5}"#).window(10, 1000).is_err());
        assert_eq!(
            body(r#"{"page_index": 2.0}"#)
                .window(10, 1000)
                .unwrap()
                .page_index,
            2
        );
    }

    #[test]
    fn callback_urls_are_checked() {
        assert!(
            callback_url(&body(r#"{"callback_url": "https://h.example/cb"}"#), true)
                .unwrap()
                .is_some()
        );
        assert!(callback_url(&body("{}"), false).unwrap().is_none());
        assert!(callback_url(&body("{}"), true).is_err());
        assert!(callback_url(&body(r#"{"callback_url": "ftp://x"}"#), false).is_err());
        assert!(callback_url(&body(r#"{"callback_url": "not a url"}"#), false).is_err());
        for bad in [
            r#"{"callback_url": "https://h.example/c\r\nb"}"#,
            r#"{"callback_url": "https://h.exa\nmple/cb"}"#,
            r#"{"callback_url": "https://h.example/cb\r\n"}"#,
            r#"{"callback_url": "https://h.example/\tcb"}"#,
        ] {
            let err = callback_url(&body(bad), false).unwrap_err();
            assert!(msg(err).contains("control characters"), "{bad}");
        }
    }

    /// Found by a differential review against the native V1 surface: an
    /// optional `callback_url` of `" "` or `null` started a run without a
    /// callback, where V1 refused both (400 / 4000). `""` stays "none".
    #[test]
    fn a_blank_or_null_optional_callback_url_is_refused_as_on_v1() {
        let err = callback_url(&body(r#"{"callback_url": " "}"#), false).unwrap_err();
        assert!(msg(err).contains("callback_url must be an absolute"));
        let err = callback_url(&body(r#"{"callback_url": null}"#), false).unwrap_err();
        assert!(msg(err).contains("callback_url must be a string"));
        assert_eq!(
            callback_url(&body(r#"{"callback_url": ""}"#), false).unwrap(),
            None
        );
        // Blanks around a URL are still V1's URL (its parser trims them).
        assert_eq!(
            callback_url(&body(r#"{"callback_url": " http://h/cb "}"#), false).unwrap(),
            Some("http://h/cb".to_owned())
        );
        // The last of repeated members counts, as in every other field.
        assert!(callback_url(
            &body(r#"{"callback_url": null, "callback_url": ""}"#),
            false
        )
        .unwrap()
        .is_none());
        assert!(callback_url(
            &body(r#"{"callback_url": "", "callback_url": null}"#),
            false
        )
        .is_err());
    }
}
