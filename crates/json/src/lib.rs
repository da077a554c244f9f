//! The JSON kernel of the v1compat gateway: the V2 answers read and the V1
//! answers written on the request path, between the gateway's V2 calls and
//! its mappings (`ops`). Pure functions and types over bytes, with no I/O
//! and no gateway types, so that they are tested, fuzzed and benchmarked on
//! their own (`benches/kernel.rs`, the fuzz targets of `fuzz/`). The crate
//! boundary costs nothing in what ships: the `dist` profile builds every
//! crate as one unit (`deploy/bench/RESULTS.md` has the figures).
//!
//! In the order a request uses them:
//!
//! - [`read`]: one call per V2 answer kind (a run, a run-list page, a
//!   result page, any other answer typed): the one-pass reader, else
//!   serde's typed reading. What neither takes (an error, data of another
//!   shape) is the general reading's, which the gateway does with
//!   [`v2::Envelope`] and [`value`].
//! - [`scan`]: the one-pass readers; [`wire`]: the lenient typed readers
//!   (serde); [`value`]: the same leniency over a `Value`.
//! - [`v2`]: what the readers give: the V2 envelope, run records, pages.
//! - [`v1`]: the V1 writers (a run record, a result page, the success
//!   envelope around a `data`); [`escape`]: JSON strings, sixteen bytes at
//!   a time.
//!
//! The small accessors the gateway calls a row or a field at a time are
//! `#[inline]`: a build without link-time optimisation (`release`, the
//! benches) then inlines them across the crate boundary as it did within
//! one crate.

pub mod escape;
pub mod read;
pub mod scan;
pub mod v1;
pub mod v2;
pub mod value;
pub mod wire;
