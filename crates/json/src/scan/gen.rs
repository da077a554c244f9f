//! Generators of V2 result-page answers for the scanner's property tests
//! and those of the gateway's mappings (`ops::results`, `ops::catalog`):
//! valid JSON of every shape the scanner meets (escapes, surrogates,
//! numbers out of range, repeated keys, any whitespace, odd rows, rows
//! alike), rendered as text. Test builds only: the kernel's own tests, and
//! the gateway's through the `gen` feature of its dev-dependency.

use proptest::prelude::*;
use serde::Deserialize;
use serde_json::value::RawValue;

/// What serde makes of an answer: its `data.list`, raw, and nothing
/// else (the generated answers may repeat other members, which the
/// typed reader of a page refuses).
#[derive(Deserialize)]
pub struct Answer<'a> {
    #[serde(borrow)]
    pub data: Page<'a>,
}

#[derive(Deserialize)]
pub struct Page<'a> {
    #[serde(borrow)]
    pub list: &'a RawValue,
}

/// A JSON value to render.
#[derive(Debug, Clone)]
pub enum J {
    /// A scalar, as its JSON text.
    Lit(String),
    Arr(Vec<J>),
    /// Members, each key as its JSON text (quotes included).
    Obj(Vec<(String, J)>),
}

/// Keys as written: plain, empty, escaped (some spelling plain ones).
pub const KEYS: &[&str] = &[
    r#""title""#,
    r#""rating""#,
    r#""n""#,
    r#""""#,
    r#""list""#,
    r#""data""#,
    r#""\u0074itle""#,
    r#""a\"b""#,
    r#""é""#,
];

/// Plain column keys, as header keys (unescaped).
pub const HEADER_KEYS: &[&str] = &["title", "rating", "n", "", "list", "x"];

fn number() -> impl Strategy<Value = String> {
    prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| serde_json::Number::from_f64(f).unwrap().to_string()),
        "-?(0|[1-9][0-9]{0,25})(\\.[0-9]{1,4})?([eE][+-]?[0-9]{1,3})?",
        Just("1e400".to_owned()),
        Just("-1.8e308".to_owned()),
        Just("1.7976931348623157e308".to_owned()),
        Just("1e-400".to_owned()),
        Just("-0".to_owned()),
    ]
}

fn string() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        4 => "[a-zA-Z0-9 :/.-]{0,12}",
        1 => Just("é".to_owned()),
        1 => Just("😀".to_owned()),
        1 => Just(r#"\""#.to_owned()),
        1 => Just(r"\\".to_owned()),
        1 => Just(r"\n\t\/\b\f\r".to_owned()),
        1 => Just(r"\u00e9".to_owned()),
        1 => Just(r"\ud83d\ude00".to_owned()),
        1 => Just(r"\ud800".to_owned()),
        1 => Just(r"\udc00".to_owned()),
        1 => Just(r"\ud800\u0041".to_owned()),
        1 => Just(r"\uDBFF\uDFFF".to_owned()),
    ];
    prop::collection::vec(piece, 0..4).prop_map(|p| format!("\"{}\"", p.concat()))
}

pub fn scalar() -> impl Strategy<Value = J> {
    prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        number(),
        string(),
    ]
    .prop_map(J::Lit)
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        4 => prop::sample::select(KEYS).prop_map(str::to_owned),
        1 => string(),
    ]
}

pub fn value() -> impl Strategy<Value = J> {
    scalar().prop_recursive(4, 24, 5, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(J::Arr),
            prop::collection::vec((key(), inner), 0..5).prop_map(J::Obj),
        ]
    })
}

/// A result row: mostly an object of column keys, sometimes anything.
pub fn row() -> impl Strategy<Value = J> {
    prop_oneof![
        6 => prop::collection::vec((key(), value()), 0..6).prop_map(J::Obj),
        1 => value(),
    ]
}

/// A row's value where rows are alike: anything, or a string of one of a
/// few lengths (as rows repeat them), plain or not.
pub fn alike_value() -> impl Strategy<Value = J> {
    let piece = prop::sample::select(&["a", "é", "😀", r#"\""#, r"\\", r"\u00e9", "/"][..]);
    prop_oneof![
        2 => value(),
        2 => "[a-z0-9 ]{12}".prop_map(|s| J::Lit(format!("\"{s}\""))),
        1 => "[a-f0-9]{40}".prop_map(|s| J::Lit(format!("\"{s}\""))),
        1 => prop::collection::vec(piece, 12).prop_map(|p| J::Lit(format!("\"{}\"", p.concat()))),
    ]
}

/// Whitespace between tokens: chosen by a small generator from a seed, or
/// none at all (compact, as V2 writes it).
pub struct Ws(Option<u64>);

impl Ws {
    pub fn seeded(seed: u64) -> Ws {
        Ws(Some(seed))
    }

    pub fn none() -> Ws {
        Ws(None)
    }

    fn next(&mut self) -> &'static str {
        let Some(state) = &mut self.0 else {
            return "";
        };
        *state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        match (*state >> 33) % 8 {
            0 => " ",
            1 => "\n  ",
            2 => "\t",
            3 => "\r\n",
            _ => "",
        }
    }
}

/// `j` as JSON text, with `ws`'s whitespace between its tokens.
pub fn render(j: &J, ws: &mut Ws, out: &mut String) {
    match j {
        J::Lit(t) => out.push_str(t),
        J::Arr(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws.next());
                render(item, ws, out);
                out.push_str(ws.next());
            }
            out.push_str(ws.next());
            out.push(']');
        }
        J::Obj(members) => {
            out.push('{');
            for (i, (k, v)) in members.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(ws.next());
                out.push_str(k);
                out.push_str(ws.next());
                out.push(':');
                out.push_str(ws.next());
                render(v, ws, out);
                out.push_str(ws.next());
            }
            out.push('}');
        }
    }
}

/// A member of the answer the scanner reads the head from: mostly the
/// plain `usual` value, else anything.
fn head_value(usual: &'static str) -> impl Strategy<Value = J> {
    prop_oneof![
        4 => Just(J::Lit(usual.to_owned())),
        1 => scalar(),
        1 => value(),
    ]
}

/// A column header: mostly `key` and `label` strings, sometimes `format`,
/// other members, fields of other kinds or given twice, or not an object.
fn header() -> impl Strategy<Value = J> {
    let field = prop_oneof![
        3 => prop::sample::select(HEADER_KEYS).prop_map(|k| J::Lit(format!("\"{k}\""))),
        1 => value(),
    ];
    let name = prop::sample::select(
        &[
            r#""key""#,
            r#""label""#,
            r#""format""#,
            r#""x""#,
            r#""\u006bey""#,
        ][..],
    );
    prop_oneof![
        6 => (prop::sample::select(HEADER_KEYS), "[A-Za-z ]{0,8}").prop_map(|(k, l)| J::Obj(vec![
            (r#""key""#.into(), J::Lit(format!("\"{k}\""))),
            (r#""label""#.into(), J::Lit(format!("\"{l}\""))),
        ])),
        2 => prop::collection::vec((name.prop_map(str::to_owned), field), 0..4).prop_map(J::Obj),
        1 => value(),
    ]
}

/// A whole V2 answer around `rows`: the envelope's and the page's
/// members in any order, sometimes with a repeated or odd member.
pub fn answer() -> impl Strategy<Value = (String, usize)> {
    let headers = prop_oneof![
        6 => prop::collection::vec(header(), 0..4).prop_map(J::Arr),
        1 => value(),
    ];
    let page_extra = prop_oneof![
        4 => Just(vec![]),
        1 => value().prop_map(|v| vec![(r#""list""#.to_owned(), v)]),
        1 => value().prop_map(|v| vec![(r#""count""#.to_owned(), v)]),
        1 => value().prop_map(|v| vec![(r#""\u006cist""#.to_owned(), v)]),
    ];
    let top_extra = prop_oneof![
        4 => Just(vec![]),
        1 => value().prop_map(|v| vec![(r#""data""#.to_owned(), v)]),
        1 => value().prop_map(|v| vec![(r#""details""#.to_owned(), v)]),
        1 => value().prop_map(|v| vec![(r#""code""#.to_owned(), v)]),
        1 => value().prop_map(|v| vec![(r#""request_id""#.to_owned(), v)]),
    ];
    let envelope = (
        head_value("0"),
        head_value(r#""success""#),
        head_value(r#""r-1""#),
    );
    (
        prop::collection::vec(row(), 0..8),
        (headers, head_value("-")),
        page_extra,
        (top_extra, envelope),
        any::<u64>(),
    )
        .prop_flat_map(|(rows, (headers, count), page_extra, top, seed)| {
            let n = rows.len();
            // `-` stands for the number of rows.
            let count = match count {
                J::Lit(t) if t == "-" => J::Lit(n.to_string()),
                other => other,
            };
            let mut page = vec![
                (r#""count""#.to_owned(), count),
                (r#""headers""#.to_owned(), headers),
                (r#""list""#.to_owned(), J::Arr(rows)),
                (r#""page_index""#.to_owned(), J::Lit("1".into())),
            ];
            page.extend(page_extra);
            (Just(page).prop_shuffle(), Just(top), Just(seed), Just(n))
        })
        .prop_flat_map(
            |(page, (top_extra, (code, message, request_id)), seed, n)| {
                let mut top = vec![
                    (r#""code""#.to_owned(), code),
                    (r#""message""#.to_owned(), message),
                    (r#""data""#.to_owned(), J::Obj(page)),
                    (r#""request_id""#.to_owned(), request_id),
                ];
                top.extend(top_extra);
                (Just(top).prop_shuffle(), Just(seed), Just(n))
            },
        )
        .prop_map(|(top, seed, n)| {
            let mut out = String::new();
            let mut ws = Ws::seeded(seed);
            out.push_str(ws.next());
            render(&J::Obj(top), &mut ws, &mut out);
            out.push_str(ws.next());
            (out, n)
        })
}
