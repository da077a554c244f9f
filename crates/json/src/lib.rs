//! The JSON kernel: the code on the request path that writes JSON text by
//! hand, where serde_json's general writer costs more than the answer is
//! worth. Pure functions over bytes, with no I/O and no gateway types, so it
//! can be tested, fuzzed and benchmarked on its own.

pub mod escape;
