//! What the gateway and the sandbox share, and nothing else: the V1 dialects
//! (the readings of V1 behaviour on which the public record disagrees with
//! itself). Both sides of a differential or shadow comparison take their
//! choices from here, so neither can drift from the other, and the sandbox
//! needs no part of the gateway to speak the same dialect.

pub mod dialect;
