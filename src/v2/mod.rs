//! V2 wire types: the paths the gateway may call (built only from validated,
//! percent-encoded segments, each carrying its metrics route label) and the
//! run status vocabulary. The envelope it reads back is the JSON kernel's
//! (`v1compat_json::v2`).

pub(crate) mod routes;

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use std::sync::{Mutex, PoisonError};

/// Everything but RFC 3986 "unreserved" characters is encoded, so a value can
/// never introduce `/`, `?`, `#`, `%`-sequences or `..` semantics.
const SEGMENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// Query values are encoded with the same set, commas included: V2 documents
/// `filter_keys` as a URL-encoded comma-separated string, so `,` goes as `%2C`.
const QUERY: &AsciiSet = SEGMENT;

/// A V2 path with its query, assembled from fixed literals and checked
/// identifiers only, and its metrics route label. There is no constructor
/// from a raw string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V2Path {
    /// The path, then the query as it is sent (`?name=value&…`, encoded):
    /// each value is written in as it is added, so neither the values nor
    /// the whole are copied again when the call is made.
    text: String,
    /// Where the path ends and the query, if any, begins.
    path_len: usize,
    /// The path with every identifier as `{id}`: the bounded `route` label
    /// of upstream metrics, known from how the path was built (interned per
    /// path shape, so no label string is built per call).
    route: &'static str,
}

/// An identifier that is safe to place as one path segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    id: String,
    /// Every byte is one that percent-encoding keeps (ids nearly always
    /// are): the path takes it as it is.
    plain: bool,
}

/// What [`Segment::new`] needs to know of an ASCII byte, one bit each.
const CONTROL: u8 = 1;
const FORBIDDEN: u8 = 2;
const NOT_DOT: u8 = 4;
const ENCODED: u8 = 8;

/// [`CONTROL`], [`FORBIDDEN`], [`NOT_DOT`] and [`ENCODED`] of every ASCII byte.
const ASCII_CLASS: [u8; 128] = {
    let mut class = [0u8; 128];
    let mut b = 0;
    while b < 128 {
        let c = b as u8;
        let mut bits = 0;
        if c < 0x20 || c == 0x7f {
            bits |= CONTROL;
        }
        if matches!(
            c,
            b'/' | b'\\' | b'?' | b'#' | b'%' | b' ' | b'"' | b'<' | b'>'
        ) {
            bits |= FORBIDDEN;
        }
        if c != b'.' {
            bits |= NOT_DOT;
        }
        if !(c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.' | b'~')) {
            bits |= ENCODED;
        }
        class[b] = bits;
        b += 1;
    }
    class
};

/// Why an identifier was refused before it reached V2.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SegmentError {
    #[error("must not be empty")]
    Empty,
    #[error("is longer than {0} characters")]
    TooLong(usize),
    #[error("contains a control character")]
    Control,
    #[error("contains a character not allowed in an identifier")]
    Forbidden,
    /// A word V2 reads as a shortcut in that position (`worker-runs/last`
    /// is the account's newest run), never an identifier.
    #[error("is a reserved word, not an identifier")]
    Reserved,
}

/// Words V2 reads as shortcuts where a run id stands: `worker-runs/last…`
/// acts on the account's newest run (facts §2, operations 17-22; the
/// worker-scoped `workers/{id}/runs/last…` forms are never built from a run
/// id). Compared without regard to case, since a case-insensitive router
/// upstream would read `LAST` the same way.
pub const RESERVED_RUN_WORDS: &[&str] = &["last"];

pub const MAX_ID_LEN: usize = 200;

impl Segment {
    /// Validates a run, task or worker identifier. Slashes and backslashes,
    /// `?`, `#`, `%`, spaces, quotes, `<`, `>`, control characters and
    /// dot-only names are refused outright rather than encoded: no real identifier has them, and refusing keeps
    /// traversal attempts out of logs of the upstream too.
    pub fn new(raw: &str) -> Result<Segment, SegmentError> {
        if raw.is_empty() {
            return Err(SegmentError::Empty);
        }
        if raw.is_ascii() {
            // The usual id: one pass over its bytes, each looked up once.
            let seen = raw
                .bytes()
                .fold(0u8, |seen, b| seen | ASCII_CLASS[usize::from(b)]);
            if raw.len() > MAX_ID_LEN {
                return Err(SegmentError::TooLong(MAX_ID_LEN));
            }
            if seen & CONTROL != 0 {
                return Err(SegmentError::Control);
            }
            if seen & FORBIDDEN != 0 || seen & NOT_DOT == 0 {
                return Err(SegmentError::Forbidden);
            }
            return Ok(Segment {
                id: raw.to_owned(),
                plain: seen & ENCODED == 0,
            });
        }
        // One pass over the characters: the length is only known at the end,
        // so a character problem met first is remembered and reported after
        // it (the order of the checks is the order of the errors).
        let (mut chars, mut control, mut forbidden, mut dots_only) = (0usize, false, false, true);
        for c in raw.chars() {
            chars += 1;
            control |= c.is_control();
            forbidden |= matches!(c, '/' | '\\' | '?' | '#' | '%' | ' ' | '"' | '<' | '>');
            dots_only &= c == '.';
        }
        if chars > MAX_ID_LEN {
            return Err(SegmentError::TooLong(MAX_ID_LEN));
        }
        if control {
            return Err(SegmentError::Control);
        }
        if forbidden || dots_only {
            return Err(SegmentError::Forbidden);
        }
        Ok(Segment {
            id: raw.to_owned(),
            plain: false,
        })
    }

    /// A run identifier: a [`Segment::new`] that is also not one of V2's
    /// shortcut words ([`RESERVED_RUN_WORDS`]), so `worker-runs/{runId}/…`
    /// always names the run the client named.
    pub fn run(raw: &str) -> Result<Segment, SegmentError> {
        let seg = Segment::new(raw)?;
        if RESERVED_RUN_WORDS
            .iter()
            .any(|w| seg.id.eq_ignore_ascii_case(w))
        {
            return Err(SegmentError::Reserved);
        }
        Ok(seg)
    }

    /// A V1 worker id (`ULID` or `owner/name`) as a V2 `workerId`
    /// (`owner~name`). Exactly one `/` is allowed, between two non-empty parts.
    pub fn worker(raw: &str) -> Result<Segment, SegmentError> {
        match raw.split_once('/') {
            Some((owner, name)) if !owner.is_empty() && !name.is_empty() && !name.contains('/') => {
                let owner = Segment::new(owner)?;
                let name = Segment::new(name)?;
                Segment::new(&format!("{}~{}", owner.id, name.id))
            }
            Some(_) => Err(SegmentError::Forbidden),
            None => Segment::new(raw),
        }
    }

    pub fn as_str(&self) -> &str {
        &self.id
    }
}

impl V2Path {
    /// Joins fixed literal segments and identifiers. Literals are `'static`
    /// so only code, never input, can choose the route.
    pub fn new(parts: &[Part<'_>]) -> V2Path {
        // Room for the usual query too.
        let mut path = String::with_capacity(128);
        path.push_str("/api/v2");
        for part in parts {
            path.push('/');
            match part {
                Part::Lit(s) => path.push_str(s),
                Part::Id(seg) if seg.plain => path.push_str(seg.as_str()),
                Part::Id(seg) => path.extend(utf8_percent_encode(seg.as_str(), SEGMENT)),
            }
        }
        V2Path {
            path_len: path.len(),
            text: path,
            route: route_of(parts),
        }
    }

    pub fn query(mut self, name: &'static str, value: impl QueryValue) -> V2Path {
        let first = self.text.len() == self.path_len;
        self.text.push(if first { '?' } else { '&' });
        self.text.push_str(name);
        self.text.push('=');
        value.write_into(&mut self.text);
        self
    }

    pub fn query_opt(self, name: &'static str, value: Option<impl QueryValue>) -> V2Path {
        match value {
            Some(v) => self.query(name, v),
            None => self,
        }
    }

    /// The path alone, without its query (metrics and logs use
    /// [`V2Path::route`], which holds no identifier).
    pub fn path(&self) -> &str {
        &self.text[..self.path_len]
    }

    /// The `route` label: `/api/v2/worker-runs/{id}/log`. Identifiers never
    /// appear in it, whatever they look like.
    pub fn route(&self) -> &'static str {
        self.route
    }

    /// [`V2Path::path_and_query`], taking the path: its own buffer, not a
    /// copy.
    pub fn into_path_and_query(self) -> String {
        self.text
    }

    pub fn path_and_query(&self) -> &str {
        &self.text
    }
}

/// A value of a V2 query, written straight into its path as it is sent.
pub trait QueryValue {
    fn write_into(&self, out: &mut String);
}

impl QueryValue for str {
    fn write_into(&self, out: &mut String) {
        out.extend(utf8_percent_encode(self, QUERY));
    }
}

impl QueryValue for String {
    fn write_into(&self, out: &mut String) {
        self.as_str().write_into(out);
    }
}

impl<T: QueryValue + ?Sized> QueryValue for &T {
    fn write_into(&self, out: &mut String) {
        (**self).write_into(out);
    }
}

/// Integers are written as `to_string` writes them, without its buffer:
/// digits and `-` need no encoding.
macro_rules! integer_query_values {
    ($($t:ty),*) => {$(
        impl QueryValue for $t {
            fn write_into(&self, out: &mut String) {
                out.push_str(itoa::Buffer::new().format(*self));
            }
        }
    )*};
}
integer_query_values!(i32, i64, u32, u64, usize);

/// The route label of a path's parts, interned: the set of routes is fixed
/// by the code (literals are `'static`, identifiers all read `{id}`), so the
/// table stays small, and a label costs neither an allocation nor a metric
/// key built from an owned string on each call.
fn route_of(parts: &[Part<'_>]) -> &'static str {
    /// A path's literals in order, `None` where an identifier goes.
    type Shape = Vec<Option<&'static str>>;
    static ROUTES: Mutex<Vec<(Shape, &'static str)>> = Mutex::new(Vec::new());
    let shape = parts.iter().map(|p| match p {
        Part::Lit(s) => Some(*s),
        Part::Id(_) => None,
    });
    let mut routes = ROUTES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((_, route)) = routes
        .iter()
        .find(|(known, _)| known.iter().copied().eq(shape.clone()))
    {
        return route;
    }
    let mut label = String::from("/api/v2");
    for part in shape.clone() {
        label.push('/');
        label.push_str(part.unwrap_or("{id}"));
    }
    let route: &'static str = Box::leak(label.into_boxed_str());
    routes.push((shape.collect(), route));
    route
}

/// A piece of a [`V2Path`].
pub enum Part<'a> {
    Lit(&'static str),
    Id(&'a Segment),
}

/// V2 run statuses as documented. Anything else does not parse (`None`);
/// the run mappers turn it into a V1 status by the `[compat]` rules
/// (`aborted_status`, `unknown_status`) rather than refuse it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunStatus {
    Ready,
    Running,
    Succeeded,
    Failed,
    Aborting,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Ready => "ready",
            RunStatus::Running => "running",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Aborting => "aborting",
        }
    }

    /// A status in any letter case, spaces around it ignored.
    pub fn parse(s: &str) -> Option<RunStatus> {
        const ALL: [RunStatus; 5] = [
            RunStatus::Ready,
            RunStatus::Running,
            RunStatus::Succeeded,
            RunStatus::Failed,
            RunStatus::Aborting,
        ];
        let s = s.trim();
        // Compared in place: no lower-cased copy for every record read.
        ALL.into_iter()
            .find(|status| status.as_str().eq_ignore_ascii_case(s))
    }

    pub fn is_completed(self) -> bool {
        matches!(self, RunStatus::Succeeded | RunStatus::Failed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traversal_never_reaches_another_path() {
        for bad in [
            "../users/account",
            "a/b?x=1",
            "..",
            ".",
            "a\r\nb",
            "a\0b",
            "",
            "x#y",
            "%2e%2e",
            "a b",
        ] {
            assert!(Segment::new(bad).is_err(), "{bad:?} accepted");
        }
        let id = Segment::new("01KS2A1M515HG7PZX9STTB0KPH").unwrap();
        let p = V2Path::new(&[Part::Lit("worker-runs"), Part::Id(&id), Part::Lit("log")]);
        assert_eq!(
            p.path_and_query(),
            "/api/v2/worker-runs/01KS2A1M515HG7PZX9STTB0KPH/log"
        );
    }

    /// The byte table of ASCII ids says what the character checks say, and
    /// an id marked plain is one percent-encoding leaves as it is.
    #[test]
    fn ascii_ids_are_judged_as_characters_are() {
        for b in 0u8..128 {
            let c = char::from(b);
            for raw in [format!("a{c}b"), format!("{c}"), format!("{c}{c}")] {
                let by_chars = {
                    let control = raw.chars().any(char::is_control);
                    let forbidden = raw
                        .chars()
                        .any(|c| matches!(c, '/' | '\\' | '?' | '#' | '%' | ' ' | '"' | '<' | '>'));
                    let dots_only = raw.chars().all(|c| c == '.');
                    if control {
                        Err(SegmentError::Control)
                    } else if forbidden || dots_only {
                        Err(SegmentError::Forbidden)
                    } else {
                        Ok(())
                    }
                };
                let seg = Segment::new(&raw);
                assert_eq!(
                    seg.as_ref().map(|_| ()).map_err(Clone::clone),
                    by_chars,
                    "{raw:?}"
                );
                if let Ok(seg) = seg {
                    let encoded: String = utf8_percent_encode(&raw, SEGMENT).collect();
                    assert_eq!(seg.plain, encoded == raw, "{raw:?}");
                }
            }
        }
        let long = "a".repeat(MAX_ID_LEN + 1);
        assert_eq!(Segment::new(&long), Err(SegmentError::TooLong(MAX_ID_LEN)));
        assert_eq!(
            Segment::new(&format!("{long}\u{1}")),
            Err(SegmentError::TooLong(MAX_ID_LEN))
        );
        assert!(Segment::new(&"a".repeat(MAX_ID_LEN)).is_ok());
    }

    #[test]
    fn non_ascii_ids_are_percent_encoded_as_one_segment() {
        let id = Segment::new("wörker:1").unwrap();
        let p = V2Path::new(&[Part::Lit("workers"), Part::Id(&id)]);
        assert_eq!(p.path(), "/api/v2/workers/w%C3%B6rker%3A1");
    }

    #[test]
    fn worker_paths_use_tilde() {
        assert_eq!(
            Segment::worker("coreclaw/google-maps").unwrap().as_str(),
            "coreclaw~google-maps"
        );
        assert_eq!(
            Segment::worker("01KBHMS6A8H6A3K5FJY11MQ99Z")
                .unwrap()
                .as_str(),
            "01KBHMS6A8H6A3K5FJY11MQ99Z"
        );
        for bad in ["a/b/c", "/b", "a/", "../x", "a/.."] {
            assert!(Segment::worker(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn routes_hold_no_identifier() {
        let id = Segment::new("01KS2A1M515HG7PZX9STTB0KPH").unwrap();
        let odd = Segment::new("wörker:1").unwrap();
        let log = V2Path::new(&[Part::Lit("worker-runs"), Part::Id(&id), Part::Lit("log")]);
        assert_eq!(log.route(), "/api/v2/worker-runs/{id}/log");
        let again = V2Path::new(&[Part::Lit("worker-runs"), Part::Id(&odd), Part::Lit("log")]);
        assert!(std::ptr::eq(log.route(), again.route()), "interned once");
        let store = V2Path::new(&[Part::Lit("store")]).query("keyword", "secret");
        assert_eq!(store.route(), "/api/v2/store");
        assert_eq!(
            V2Path::new(&[Part::Lit("workers"), Part::Id(&odd)]).route(),
            "/api/v2/workers/{id}"
        );
    }

    #[test]
    fn query_values_are_encoded() {
        let p = V2Path::new(&[Part::Lit("store")])
            .query("keyword", "a&b=c")
            .query("filter_keys", "title,price");
        assert_eq!(p.path(), "/api/v2/store");
        assert_eq!(
            p.path_and_query(),
            "/api/v2/store?keyword=a%26b%3Dc&filter_keys=title%2Cprice"
        );
        assert_eq!(
            p.into_path_and_query(),
            "/api/v2/store?keyword=a%26b%3Dc&filter_keys=title%2Cprice"
        );
        let bare = V2Path::new(&[Part::Lit("store")]);
        assert_eq!(bare.path(), "/api/v2/store");
        assert_eq!(bare.into_path_and_query(), "/api/v2/store");
        let p = V2Path::new(&[Part::Lit("worker-runs")])
            .query("offset", 200u64)
            .query_opt("status", None::<&str>)
            .query("keyword", "café / ü")
            .query_opt("limit", Some(-1i64));
        assert_eq!(
            p.path_and_query(),
            "/api/v2/worker-runs?offset=200&keyword=caf%C3%A9%20%2F%20%C3%BC&limit=-1"
        );
        assert_eq!(p.path(), "/api/v2/worker-runs");
    }

    #[test]
    fn statuses_round_trip() {
        for s in ["ready", "running", "succeeded", "failed", "aborting"] {
            assert_eq!(RunStatus::parse(s).unwrap().as_str(), s);
        }
        assert_eq!(RunStatus::parse("aborted"), None);
        assert_eq!(RunStatus::parse(" Succeeded "), Some(RunStatus::Succeeded));
        assert_eq!(RunStatus::parse("FAILED"), Some(RunStatus::Failed));
        assert_eq!(RunStatus::parse("readyy"), None);
    }
}
