//! What the readers give the gateway of a V2 answer: its envelope, and the
//! `data` of the answers read typed (a run record, a run-list page, a result
//! page), each also read out of a `Value` when the general reading had it.

mod envelope;
mod result_page;
mod run;

pub use envelope::{DataEnvelope, Envelope, Text};
pub use result_page::{PageRows, ResultPage, V2Header, V2ResultPage};
pub use run::{RunPage, StatusField, V2Run};
