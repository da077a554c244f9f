//! Renames, off the request path: the field differences of one compared
//! pair turned into the findings a report counts. A field absent on one side
//! and another present only on the other side, in the same object and with
//! the same value, is one finding — a rename (`memory_bytes` on legacy,
//! `memory` translated) — instead of two unrelated ones.

use serde::Serialize;
use serde_json::Value;

use super::{normalise, FieldDiff};

/// One difference as a report counts it: a field that differs, or a field
/// that the other side holds under another name.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Finding {
    /// Concrete path: the field's, or for a rename the legacy side's.
    pub path: String,
    /// For a rename, the translated side's concrete path.
    pub renamed_to: Option<String>,
    pub legacy: Option<Value>,
    pub translated: Option<Value>,
}

/// What separates the two paths of a rename in a finding's key.
pub const RENAME_ARROW: &str = " → ";

impl Finding {
    /// The key findings are counted under: the normalised path, or for a
    /// rename both normalised paths joined by [`RENAME_ARROW`].
    pub fn key(&self) -> String {
        match &self.renamed_to {
            Some(to) => format!("{}{RENAME_ARROW}{}", normalise(&self.path), normalise(to)),
            None => normalise(&self.path),
        }
    }

    /// The concrete paths this finding touches (two for a rename).
    pub fn paths(&self) -> impl Iterator<Item = &str> {
        std::iter::once(self.path.as_str()).chain(self.renamed_to.as_deref())
    }
}

/// The object a field sits in and its own name: `data.a.b` → (`data.a`,
/// `b`). `None` for array elements, unordered multisets and the top-level
/// `http_status` / `body`: only object members can be renamed.
fn parent_and_name(path: &str) -> Option<(&str, &str)> {
    if path.ends_with(']') {
        return None;
    }
    match path.rsplit_once('.') {
        Some((parent, name)) => Some((parent, name)),
        None => Some(("", path)),
    }
}

/// Pairs the renames among one pair's differences. Every difference ends in
/// exactly one finding; a field removed on the translated side is paired
/// with the first field (in path order) added there in the same object with
/// an equal value, each used once. Findings keep path order.
pub fn findings(diffs: &[FieldDiff]) -> Vec<Finding> {
    let mut partner: Vec<Option<usize>> = vec![None; diffs.len()];
    let mut taken = vec![false; diffs.len()];
    for (i, d) in diffs.iter().enumerate() {
        let (Some(value), None, Some((parent, _))) =
            (&d.legacy, &d.translated, parent_and_name(&d.path))
        else {
            continue;
        };
        partner[i] = (0..diffs.len()).find(|&j| {
            let a = &diffs[j];
            !taken[j]
                && a.legacy.is_none()
                && a.translated.as_ref() == Some(value)
                && parent_and_name(&a.path).is_some_and(|(p, _)| p == parent)
        });
        if let Some(j) = partner[i] {
            taken[j] = true;
        }
    }
    diffs
        .iter()
        .enumerate()
        .filter(|(i, _)| !taken[*i])
        .map(|(i, d)| match partner[i] {
            Some(j) => Finding {
                path: d.path.clone(),
                renamed_to: Some(diffs[j].path.clone()),
                legacy: d.legacy.clone(),
                translated: diffs[j].translated.clone(),
            },
            None => Finding {
                path: d.path.clone(),
                renamed_to: None,
                legacy: d.legacy.clone(),
                translated: d.translated.clone(),
            },
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn diff(path: &str, legacy: Option<Value>, translated: Option<Value>) -> FieldDiff {
        FieldDiff {
            path: path.into(),
            legacy,
            translated,
        }
    }

    #[test]
    fn a_field_under_another_name_with_the_same_value_is_one_rename() {
        // Path order puts the translated `memory` before legacy's `memory_bytes`.
        let diffs = vec![
            diff("data.parameters.system.memory", None, Some(json!(512))),
            diff(
                "data.parameters.system.memory_bytes",
                Some(json!(512)),
                None,
            ),
        ];
        let f = findings(&diffs);
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].path, "data.parameters.system.memory_bytes");
        assert_eq!(
            f[0].renamed_to.as_deref(),
            Some("data.parameters.system.memory")
        );
        assert_eq!(
            f[0].key(),
            "data.parameters.system.memory_bytes → data.parameters.system.memory"
        );
        assert_eq!(f[0].legacy, Some(json!(512)));
        assert_eq!(f[0].translated, Some(json!(512)));
        assert_eq!(f[0].paths().count(), 2);
    }

    #[test]
    fn different_values_or_objects_are_not_renames() {
        let diffs = vec![
            diff("data.a.new", None, Some(json!(1))),
            diff("data.a.old", Some(json!(2)), None),
            diff("data.b.x", Some(json!(3)), None),
            diff("data.c.y", None, Some(json!(3))),
        ];
        let f = findings(&diffs);
        assert_eq!(f.len(), 4);
        assert!(f.iter().all(|f| f.renamed_to.is_none()));
        let keys: Vec<String> = f.iter().map(Finding::key).collect();
        assert_eq!(
            keys,
            vec!["data.a.new", "data.a.old", "data.b.x", "data.c.y"]
        );
    }

    #[test]
    fn each_added_field_pairs_once_and_values_changed_in_place_stay_fields() {
        let diffs = vec![
            diff("data.k1", Some(json!(0)), None),
            diff("data.k2", Some(json!(0)), None),
            diff("data.n", None, Some(json!(0))),
            diff("data.v", Some(json!(1)), Some(json!(2))),
        ];
        let f = findings(&diffs);
        let keys: Vec<String> = f.iter().map(Finding::key).collect();
        assert_eq!(keys, vec!["data.k1 → data.n", "data.k2", "data.v"]);
    }

    #[test]
    fn array_elements_and_top_level_fields_are_never_paired() {
        let diffs = vec![
            diff("data.list[1]", Some(json!("a")), None),
            diff("data.list[2]", None, Some(json!("a"))),
            diff("data.s[*]", Some(json!("b")), None),
        ];
        assert!(findings(&diffs).iter().all(|f| f.renamed_to.is_none()));
        let top = vec![
            diff("code", Some(json!(0)), None),
            diff("status", None, Some(json!(0))),
        ];
        let f = findings(&top);
        assert_eq!(f.len(), 1);
        assert_eq!(f[0].key(), "code → status");
        // Indices inside a rename's paths are normalised in its key.
        let f = findings(&[
            diff("data.list[3].a", Some(json!(1)), None),
            diff("data.list[3].b", None, Some(json!(1))),
        ]);
        assert_eq!(f[0].key(), "data.list[*].a → data.list[*].b");
    }
}
