//! v1compat: a gateway that keeps legacy V1 clients of the Worker Run Service
//! working against its V2 API.
pub mod upstream;
pub mod v2;
