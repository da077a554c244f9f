//! Prometheus text for the series the gateway's recorder keeps itself (the
//! histograms as counts a bucket, the fractional counters), written family
//! by family as the exporter writes its own, so both kinds share one writer
//! and `/metrics` reads as one document.

use std::collections::HashMap;

use metrics::{Key, SharedString};
use metrics_exporter_prometheus::formatting::{key_to_parts, write_help_line, write_type_line};

/// Appends `series` (sorted by key, so that a name's series stand together)
/// to `out`: for each name `# HELP` (when described) and `# TYPE kind`,
/// then each series as `write` writes it, given its name and labels, and a
/// blank line after each name.
pub(super) fn write_families<T>(
    out: &mut String,
    series: Vec<(Key, T)>,
    descriptions: &HashMap<String, SharedString>,
    kind: &str,
    mut write: impl FnMut(&mut String, &str, &[String], T),
) {
    let mut current: Option<String> = None;
    for (key, value) in series {
        let (name, labels) = key_to_parts(&key, None);
        if current.as_deref() != Some(name.as_str()) {
            if current.is_some() {
                out.push('\n');
            }
            if let Some(description) = descriptions.get(&name) {
                write_help_line(out, &name, description);
            }
            write_type_line(out, &name, kind);
            current = Some(name.clone());
        }
        write(out, &name, &labels, value);
    }
    if current.is_some() {
        out.push('\n');
    }
}
