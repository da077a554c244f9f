//! The one integration test binary: each module drives a piece of the
//! gateway through its public API against in-process servers on port 0.

mod upstream;
