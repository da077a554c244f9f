//! v1compat placeholder

pub mod sandbox;
