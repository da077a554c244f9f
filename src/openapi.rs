//! The OpenAPI 3.1 document of the V1 surface as the gateway serves it
//! (`openapi/v1.json`: the 13 operations, their query parameters and bodies
//! with ranges, every response envelope and error code). It sits beside the
//! request path: the admin listener serves it at `/openapi.json`, and the
//! tests hold it to the route table (`tests/it/openapi.rs`), to the golden
//! answers and to schemathesis runs against `v1compat sandbox`.

/// The document, as kept in the repository.
pub const V1_DOCUMENT: &str = include_str!("../openapi/v1.json");
