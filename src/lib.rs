//! v1compat placeholder
