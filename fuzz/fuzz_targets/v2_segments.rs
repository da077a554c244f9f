//! Fuzz target: arbitrary text as a run, task or worker identifier. Whatever
//! the segment builder accepts must stay one path segment, decode back to
//! the identifier, and never be a V2 shortcut word in a run position.
#![no_main]

use libfuzzer_sys::fuzz_target;
use percent_encoding::percent_decode_str;

use v1compat::v2::{Part, Segment, V2Path, RESERVED_RUN_WORDS};

fuzz_target!(|raw: &str| {
    if let Ok(seg) = Segment::new(raw) {
        let path = V2Path::new(&[Part::Lit("worker-tasks"), Part::Id(&seg), Part::Lit("runs")]);
        let parts: Vec<&str> = path.path().split('/').collect();
        assert_eq!(parts.len(), 6, "{}", path.path());
        assert_eq!(percent_decode_str(parts[4]).decode_utf8().unwrap(), raw);
        assert!(raw != "." && raw != "..");
    }
    if let Ok(seg) = Segment::run(raw) {
        assert!(!RESERVED_RUN_WORDS
            .iter()
            .any(|w| seg.as_str().eq_ignore_ascii_case(w)));
        let path = V2Path::new(&[Part::Lit("worker-runs"), Part::Id(&seg), Part::Lit("log")]);
        assert_eq!(path.path().split('/').count(), 6, "{}", path.path());
    }
    if let Ok(seg) = Segment::worker(raw) {
        let path = V2Path::new(&[Part::Lit("workers"), Part::Id(&seg)]);
        assert_eq!(path.path().split('/').count(), 5, "{}", path.path());
        assert!(!seg.as_str().contains('/'));
    }
});
