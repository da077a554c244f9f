//! The V2 result page's shape, as the typed readers see it: what the
//! scanner reads beside the rows (`count`, `headers`) and what serde reads
//! as a whole when the scanner declines. Here, below both, so the scanner
//! does not reach up into `ops::results` for its callers' types.

use serde::Deserialize;
use serde_json::value::RawValue;

use crate::ops::wire::{IntLike, List, OrDefault, StrOnly};

/// A V2 result page read without a `Value` tree: the rows stay the raw JSON
/// V2 sent, to be copied into the V1 page unchanged. (On the request path
/// the rows are found by `result_scan` and this reads the rest of the page;
/// it reads the rows too when the scanner declined.)
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct V2ResultPage<'a> {
    pub count: IntLike,
    #[serde(borrow)]
    pub headers: List<OrDefault<V2Header<'a>>>,
    #[serde(borrow)]
    pub list: List<&'a RawValue>,
}

/// A V2 column header; fields that are not strings read as absent.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct V2Header<'a> {
    #[serde(borrow)]
    pub key: StrOnly<'a>,
    #[serde(borrow)]
    pub label: StrOnly<'a>,
    #[serde(borrow)]
    pub format: StrOnly<'a>,
}
