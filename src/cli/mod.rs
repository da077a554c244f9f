//! The commands' helpers, at the top of the house: nothing on the request
//! path uses them. `v1compat sandbox` ([`quickstart`]), the container
//! healthcheck ([`probe`]), a port collision explained ([`bind`]) and the
//! tokio runtime the binary builds ([`runtime`]). The shadow tester's
//! commands live with it, in `shadow::cli`.

pub mod bind;
pub mod probe;
pub mod quickstart;
pub mod runtime;
