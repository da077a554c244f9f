//! The V1 writers: the JSON a V1 answer's `data` is, written by hand where
//! serde_json's general writer costs more than the answer is worth, once
//! the gateway has mapped V2's answer to V1's values. Each writes the bytes
//! serde would write for the same value (their tests compare the two).

mod answer;
mod result_page;
mod run;

pub use answer::{AnswerBytes, Json};
pub use result_page::{V1Header, V1ResultPage};
pub use run::V1Run;
