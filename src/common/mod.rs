//! What every layer may use, depending on nothing of the gateway: the
//! request id carried from client to V2 ([`request_id`]), the deadlines a
//! request and its V2 attempts run under ([`deadline`]), the executor that
//! batches wake-ups for both sides' connections ([`coalesce`]), masking
//! secrets for display ([`redact`]), escaping text into HTML ([`html`]),
//! where a store lives ([`store_kind`]), what settings checks share
//! ([`checks`]), address blocks ([`cidr`]), the swap cell a reload
//! stores the next settings into ([`live`]), the process's memory
//! budget, which the edge and the V2 client both count in ([`memory`]),
//! and the allocator under all of it ([`allocator`]).

pub mod allocator;
pub(crate) mod checks;
pub(crate) mod cidr;
pub(crate) mod coalesce;
pub mod deadline;
pub(crate) mod html;
pub(crate) mod live;
pub(crate) mod memory;
pub(crate) mod redact;
pub mod request_id;
pub(crate) mod store_kind;
