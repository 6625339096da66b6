//! Minimal JSON merge patches (RFC 7386) for Node writes.
//!
//! # Guarantees
//! - A patch holds only the keys whose value changes; a key set to `None` is sent as `null`
//!   (removed) only when it is present now.
//! - [`NodePatch::is_empty`] is true when nothing changes: callers skip the write, so a node with
//!   nothing to do costs no API request.

use serde_json::{Map, Value};
use std::collections::BTreeMap;

/// A merge patch of a Node's annotations and `spec.unschedulable`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NodePatch {
    annotations: Map<String, Value>,
    labels: Map<String, Value>,
    taints: Option<Value>,
    unschedulable: Option<bool>,
    resource_version: Option<String>,
}

impl NodePatch {
    /// The annotation changes that take `current` to `desired` (keys not named in `desired` are
    /// left alone).
    pub fn annotations<K: AsRef<str>>(
        current: Option<&BTreeMap<String, String>>,
        desired: impl IntoIterator<Item = (K, Option<String>)>,
    ) -> Self {
        let mut patch = NodePatch::default();
        changes_into(&mut patch.annotations, current, desired);
        patch
    }

    /// Also sets the labels of `desired` that `current` lacks or has with another value (no label is removed).
    pub fn add_labels(self, current: Option<&BTreeMap<String, String>>, desired: &BTreeMap<String, String>) -> Self {
        self.labels(current, desired.iter().map(|(k, v)| (k.as_str(), Some(v.clone()))))
    }

    /// Also takes the labels named in `desired` to their value there (`None`: removed), where `current` differs.
    pub fn labels<K: AsRef<str>>(
        mut self,
        current: Option<&BTreeMap<String, String>>,
        desired: impl IntoIterator<Item = (K, Option<String>)>,
    ) -> Self {
        changes_into(&mut self.labels, current, desired);
        self
    }

    /// Also replaces `spec.taints` by `want` (a merge patch replaces a list whole) when it differs from
    /// `current`.
    pub fn taints(mut self, current: &Value, want: Value) -> Self {
        if *current != want {
            self.taints = Some(want);
        }
        self
    }

    /// Also sets `spec.unschedulable` to `want` if it is not that now (`current` absent counts as
    /// false). Clearing it removes the field, as `kubectl uncordon` does.
    pub fn unschedulable(mut self, current: bool, want: bool) -> Self {
        if current != want {
            self.unschedulable = Some(want);
        }
        self
    }

    /// Makes the patch conditional: the API server refuses it with 409 Conflict if the Node's
    /// `metadata.resourceVersion` is no longer `rv`, so a decision taken on a stale view is never
    /// written. Does not make an empty patch non-empty.
    pub fn if_unchanged_since(mut self, rv: Option<String>) -> Self {
        self.resource_version = rv;
        self
    }

    /// Whether the patch changes nothing.
    pub fn is_empty(&self) -> bool {
        self.annotations.is_empty() && self.labels.is_empty() && self.taints.is_none() && self.unschedulable.is_none()
    }

    /// The annotation keys this patch sets or removes.
    pub fn changed_keys(&self) -> impl Iterator<Item = &str> {
        self.annotations.keys().map(String::as_str)
    }

    /// The `application/merge-patch+json` body.
    pub fn to_json(&self) -> Value {
        let mut patch = Map::new();
        let mut metadata = Map::new();
        if !self.annotations.is_empty() {
            metadata.insert("annotations".into(), Value::Object(self.annotations.clone()));
        }
        if !self.labels.is_empty() {
            metadata.insert("labels".into(), Value::Object(self.labels.clone()));
        }
        if let Some(rv) = &self.resource_version
            && !self.is_empty()
        {
            metadata.insert("resourceVersion".into(), Value::String(rv.clone()));
        }
        if !metadata.is_empty() {
            patch.insert("metadata".into(), Value::Object(metadata));
        }
        let mut spec = Map::new();
        if let Some(want) = self.unschedulable {
            spec.insert("unschedulable".into(), if want { Value::Bool(true) } else { Value::Null });
        }
        if let Some(taints) = &self.taints {
            spec.insert("taints".into(), taints.clone());
        }
        if !spec.is_empty() {
            patch.insert("spec".into(), Value::Object(spec));
        }
        Value::Object(patch)
    }
}

/// Records in `changes` what takes `current` to `desired` for the keys `desired` names: a value set, or `null`
/// (removed); keys already as wanted are left out.
fn changes_into<K: AsRef<str>>(
    changes: &mut Map<String, Value>,
    current: Option<&BTreeMap<String, String>>,
    desired: impl IntoIterator<Item = (K, Option<String>)>,
) {
    for (key, want) in desired {
        let key = key.as_ref();
        match (current.and_then(|c| c.get(key)), want) {
            (Some(have), Some(want)) if *have == want => {}
            (None, None) => {}
            (_, Some(want)) => {
                changes.insert(key.to_owned(), Value::String(want));
            }
            (Some(_), None) => {
                changes.insert(key.to_owned(), Value::Null);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn labels_are_added_and_taints_replaced_only_when_they_change() {
        let labels = map(&[("pool", "a"), ("team", "x")]);
        let patch = NodePatch::default().add_labels(Some(&map(&[("pool", "a")])), &labels);
        assert_eq!(patch.to_json(), json!({"metadata": {"labels": {"team": "x"}}}));
        let patch = NodePatch::default().add_labels(Some(&labels), &labels).taints(&json!([]), json!([]));
        assert!(patch.is_empty());
        let taint = json!([{"key": "dedicated", "effect": "NoSchedule"}]);
        let patch = NodePatch::default().taints(&json!([]), taint.clone()).unschedulable(false, true);
        assert_eq!(patch.to_json(), json!({"spec": {"unschedulable": true, "taints": taint}}));
    }

    #[test]
    fn unchanged_values_make_an_empty_patch() {
        let current = map(&[("a", "1"), ("b", "2")]);
        let patch = NodePatch::annotations(Some(&current), [("a", Some("1".to_string())), ("c", None)]);
        assert!(patch.is_empty());
        assert_eq!(patch.to_json(), json!({}));
    }

    #[test]
    fn only_changed_keys_are_sent_and_removals_are_null() {
        let current = map(&[("a", "1"), ("b", "2"), ("other", "x")]);
        let patch = NodePatch::annotations(
            Some(&current),
            [("a", Some("1".to_string())), ("b", None), ("c", Some("3".to_string()))],
        );
        assert_eq!(patch.to_json(), json!({"metadata": {"annotations": {"b": null, "c": "3"}}}));
    }

    #[test]
    fn cordon_and_uncordon_touch_only_spec_unschedulable() {
        let cordon = NodePatch::annotations(None, [("a", Some("1".to_string()))]).unschedulable(false, true);
        assert_eq!(cordon.to_json(), json!({"metadata": {"annotations": {"a": "1"}}, "spec": {"unschedulable": true}}));
        let uncordon = NodePatch::default().unschedulable(true, false);
        assert_eq!(uncordon.to_json(), json!({"spec": {"unschedulable": null}}));
        assert!(NodePatch::default().unschedulable(true, true).is_empty());
    }

    #[test]
    fn a_precondition_rides_along_only_with_a_change() {
        let patch = NodePatch::annotations(None, [("a", Some("1".to_string()))]).if_unchanged_since(Some("42".into()));
        assert_eq!(patch.to_json(), json!({"metadata": {"annotations": {"a": "1"}, "resourceVersion": "42"}}));
        let empty = NodePatch::annotations(None, [("a", None::<String>)]).if_unchanged_since(Some("42".into()));
        assert!(empty.is_empty());
        assert_eq!(empty.to_json(), json!({}));
    }
}
