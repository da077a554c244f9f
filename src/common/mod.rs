//! Helpers every layer may use, depending on nothing of the gateway:
//! masking secrets for display ([`redact`]) and what settings checks share
//! ([`checks`]).

pub mod checks;
pub mod redact;
