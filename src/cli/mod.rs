//! The commands' helpers, at the top of the house: nothing on the request
//! path uses them. `v1compat sandbox` ([`quickstart`]), the container
//! healthcheck ([`probe`]), a port collision explained ([`bind`]) and the
//! tokio runtime the binary builds ([`runtime`]). `v1compat replay` and
//! `v1compat report`, the shadow tester's commands ([`shadow`]).
//! `v1compat inventory`, the migration inventory's report ([`inventory`]).

pub mod bind;
pub mod inventory;
pub mod probe;
pub mod quickstart;
pub mod runtime;
pub mod shadow;
