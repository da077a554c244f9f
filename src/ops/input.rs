//! Reading V1 input (JSON bodies and query strings) into typed values, with
//! errors that name the offending field. Nothing here talks to V2.

use serde_json::{Map, Value};

use crate::error::{GatewayError, Subject};
use crate::paging::Window;
use crate::v2::{Segment, SegmentError};

/// A V1 JSON body: an object, or absent/empty where V1 allowed that.
pub struct Body(Map<String, Value>);

impl Body {
    /// Parses a request body. An empty body is an empty object (V1 account
    /// info accepts none); anything else must be a JSON object.
    pub fn parse(bytes: &[u8]) -> Result<Body, GatewayError> {
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(Body(Map::new()));
        }
        match serde_json::from_slice::<Value>(bytes) {
            Ok(Value::Object(map)) => Ok(Body(map)),
            Ok(_) => Err(GatewayError::BadRequest(
                "body must be a JSON object".into(),
            )),
            Err(e) => Err(GatewayError::BadRequest(format!(
                "body is not valid JSON ({e})"
            ))),
        }
    }

    pub fn from_map(map: Map<String, Value>) -> Body {
        Body(map)
    }

    fn present(&self, field: &str) -> Option<&Value> {
        self.0.get(field).filter(|v| !v.is_null())
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
                    n.as_f64()
                        .filter(|f| f.fract() == 0.0 && f.abs() < 9e15)
                        .map(|f| f as i64)
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

    /// A required run identifier, checked to be one safe path segment. A
    /// V2 shortcut word (`last`) is well-formed but names no run: it is
    /// answered as the native V1 service answers an unknown run, 404 / 70001.
    pub fn run_slug(&self) -> Result<Segment, GatewayError> {
        let raw = self.req_str("run_slug")?;
        match Segment::run(raw.trim()) {
            Ok(seg) => Ok(seg),
            Err(SegmentError::Reserved) => Err(GatewayError::NotFound(Subject::Run)),
            Err(e) => Err(GatewayError::bad("run_slug", e)),
        }
    }

    /// The V1 page window, with V1's defaults and the configured maximum.
    /// V1 `page_index` is 1-based, so 0 is refused like any other page V1 never
    /// had (V2 reads `offset=0` as page 1, but that is V2's rule, not V1's).
    pub fn window(&self, default_size: u64, max_size: u64) -> Result<Window, GatewayError> {
        let page_index = match self.opt_int("page_index")? {
            None => 1,
            Some(i) if (1..=MAX_PAGE_INDEX).contains(&i) => i as u64,
            Some(_) => {
                return Err(GatewayError::bad(
                    "page_index",
                    format!("must be between 1 and {MAX_PAGE_INDEX}"),
                ))
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

pub fn id(raw: &str, field: &str) -> Result<Segment, GatewayError> {
    Segment::new(raw.trim()).map_err(|e| GatewayError::bad(field, e))
}

pub fn worker_id(raw: &str, field: &str) -> Result<Segment, GatewayError> {
    Segment::worker(raw.trim()).map_err(|e| GatewayError::bad(field, e))
}

/// A parsed V1 query string.
pub struct Query(Vec<(String, String)>);

impl Query {
    pub fn parse(raw: Option<&str>) -> Query {
        Query(
            url::form_urlencoded::parse(raw.unwrap_or("").as_bytes())
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    pub fn req(&self, name: &str) -> Result<&str, GatewayError> {
        match self.get(name) {
            Some(v) if !v.trim().is_empty() => Ok(v),
            _ => Err(GatewayError::bad(name, "is required")),
        }
    }

    pub fn opt_int(&self, name: &str) -> Result<Option<i64>, GatewayError> {
        match self.get(name) {
            None | Some("") => Ok(None),
            Some(v) => v
                .trim()
                .parse()
                .map(Some)
                .map_err(|_| GatewayError::bad(name, "must be an integer")),
        }
    }
}

/// A callback URL must be an absolute http(s) URL: V2 will POST to it.
pub fn callback_url(body: &Body, required: bool) -> Result<Option<String>, GatewayError> {
    let raw = if required {
        Some(body.req_str("callback_url")?)
    } else {
        body.opt_str("callback_url")?
            .filter(|s| !s.trim().is_empty())
    };
    match raw {
        None => Ok(None),
        // The URL parser silently drops tabs, CR and LF, so a URL carrying
        // them would be checked in one form and forwarded in another (and
        // CR/LF could split a header where V2 echoes it): refused outright.
        Some(s) if s.chars().any(char::is_control) => Err(GatewayError::bad(
            "callback_url",
            "must not contain control characters (CR, LF, tab, ...)",
        )),
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

    fn body(s: &str) -> Body {
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

    #[test]
    fn errors_name_the_field() {
        let b = body(r#"{"run_slug": 5, "page_size": "10", "is_async": "yes"}"#);
        assert!(msg(b.run_slug().unwrap_err()).contains("run_slug must be a string"));
        assert!(msg(b.window(10, 1000).unwrap_err()).contains("page_size must be an integer"));
        assert!(msg(b.opt_bool("is_async").unwrap_err()).contains("is_async"));
        assert!(msg(body("{}").run_slug().unwrap_err()).contains("run_slug is required"));
    }

    #[test]
    fn v2_shortcut_words_are_unknown_runs() {
        for word in ["last", "LAST", " Last "] {
            let b = Body::from_map(
                [("run_slug".to_owned(), Value::String(word.into()))]
                    .into_iter()
                    .collect(),
            );
            let r = b.run_slug().unwrap_err().render();
            assert_eq!(
                (r.status.as_u16(), r.envelope.code),
                (404, 70001),
                "{word:?}"
            );
        }
        assert!(body(r#"{"run_slug": "last1"}"#).run_slug().is_ok());
        assert!(body(r#"{"run_slug": "lastrun"}"#).run_slug().is_ok());
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
}
