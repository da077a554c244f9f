//! What every layer may use, depending on nothing of the gateway: the
//! request id carried from client to V2 ([`request_id`]), the deadlines a
//! request and its V2 attempts run under ([`deadline`]), the executor that
//! batches wake-ups for both sides' connections ([`coalesce`]), masking
//! secrets for display ([`redact`]) and what settings checks share
//! ([`checks`]).

pub mod checks;
pub mod coalesce;
pub mod deadline;
pub mod redact;
pub mod request_id;
