//! Strategic merge patch for the built-in kinds: JSON merge semantics plus per-field list strategies (merge by
//! key, merge as a set) and the directives `$patch`, `$retainKeys`, `$deleteFromPrimitiveList/<f>` and
//! `$setElementOrder/<f>`.
//!
//! # Guarantees
//! - Lists without a strategy in the [`MergeSchema`] are replaced whole, as upstream does for fields without a
//!   `patchStrategy` tag.
//! - Directives never end up in the stored object.

use super::{ListKind, MergeSchema};
use serde_json::{Map, Value};

/// Why a strategic merge patch was refused (422 upstream).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum StrategicPatchError {
    /// `$patch` with an unknown value.
    #[error("Unknown patch type: {0}")]
    UnknownDirective(String),
    /// A list element of a merge-by-key list without the key.
    #[error("map: {0} does not contain declared merge key: {1}")]
    MissingMergeKey(String, String),
    /// `$patch: delete` of the whole object.
    #[error("cannot delete the whole object with a strategic merge patch")]
    DeleteRoot,
    /// The patch is not a JSON object.
    #[error("strategic merge patch must be a JSON object")]
    NotAnObject,
}

const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Applies `patch` to `target` in place.
pub fn strategic_merge_patch(
    target: &mut Value,
    patch: &Value,
    schema: &dyn MergeSchema,
) -> Result<(), StrategicPatchError> {
    let patch = patch.as_object().ok_or(StrategicPatchError::NotAnObject)?;
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    let Value::Object(fields) = target else { return Err(StrategicPatchError::NotAnObject) };
    match merge_map(fields, patch, schema, &mut Vec::new())? {
        Outcome::Keep => Ok(()),
        Outcome::Delete => Err(StrategicPatchError::DeleteRoot),
    }
}

enum Outcome {
    Keep,
    Delete,
}

fn merge_map(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    schema: &dyn MergeSchema,
    path: &mut Vec<String>,
) -> Result<Outcome, StrategicPatchError> {
    match patch.get("$patch").and_then(Value::as_str) {
        Some("replace") => {
            *original = strip_directives(patch);
            return Ok(Outcome::Keep);
        }
        Some("delete") => return Ok(Outcome::Delete),
        Some("merge") | None => {}
        Some(other) => return Err(StrategicPatchError::UnknownDirective(other.to_owned())),
    }
    if let Some(keep) = patch.get("$retainKeys").and_then(Value::as_array) {
        original.retain(|key, _| keep.iter().any(|k| k.as_str() == Some(key)) || patch.contains_key(key));
    }
    let mut orders = Vec::new();
    for (key, value) in patch {
        if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            if let (Some(Value::Array(items)), Some(remove)) = (original.get_mut(field), value.as_array()) {
                items.retain(|item| !remove.contains(item));
            }
            continue;
        }
        if let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) {
            orders.push((field.to_owned(), value));
            continue;
        }
        if key.starts_with('$') {
            continue;
        }
        if value.is_null() {
            original.remove(key);
            continue;
        }
        path.push(key.clone());
        let outcome = merge_value(original.get_mut(key), value, schema, path)?;
        path.pop();
        match outcome {
            Merged::InPlace => {}
            Merged::Replace(new) => {
                original.insert(key.clone(), new);
            }
            Merged::Delete => {
                original.remove(key);
            }
        }
    }
    for (field, order) in orders {
        path.push(field.clone());
        let kind = schema.list_kind(path);
        path.pop();
        if let (Some(Value::Array(items)), Some(order)) = (original.get_mut(&field), order.as_array()) {
            reorder(items, order, &kind);
        }
    }
    Ok(Outcome::Keep)
}

enum Merged {
    InPlace,
    Replace(Value),
    Delete,
}

fn merge_value(
    original: Option<&mut Value>,
    patch: &Value,
    schema: &dyn MergeSchema,
    path: &mut Vec<String>,
) -> Result<Merged, StrategicPatchError> {
    match (original, patch) {
        (Some(Value::Object(original)), Value::Object(patch)) => match merge_map(original, patch, schema, path)? {
            Outcome::Keep => Ok(Merged::InPlace),
            Outcome::Delete => Ok(Merged::Delete),
        },
        (_, Value::Object(patch)) => {
            let mut fresh = Map::new();
            match merge_map(&mut fresh, patch, schema, path)? {
                Outcome::Keep => Ok(Merged::Replace(Value::Object(fresh))),
                Outcome::Delete => Ok(Merged::Delete),
            }
        }
        (Some(Value::Array(original)), Value::Array(patch)) => {
            merge_list(original, patch, &schema.list_kind(path), schema, path)?;
            Ok(Merged::InPlace)
        }
        (_, Value::Array(patch)) => {
            let mut fresh = Vec::new();
            merge_list(&mut fresh, patch, &schema.list_kind(path), schema, path)?;
            Ok(Merged::Replace(Value::Array(fresh)))
        }
        (_, scalar) => Ok(Merged::Replace(scalar.clone())),
    }
}

fn is_replace_marker(item: &Value) -> bool {
    item.as_object().is_some_and(|m| m.len() == 1 && m.get("$patch").and_then(Value::as_str) == Some("replace"))
}

fn merge_list(
    original: &mut Vec<Value>,
    patch: &[Value],
    kind: &ListKind,
    schema: &dyn MergeSchema,
    path: &mut Vec<String>,
) -> Result<(), StrategicPatchError> {
    let replace = patch.iter().any(is_replace_marker);
    let items: Vec<&Value> = patch.iter().filter(|i| !is_replace_marker(i)).collect();
    match kind {
        ListKind::Atomic => {
            *original = items.into_iter().cloned().collect();
        }
        ListKind::Set => {
            if replace {
                original.clear();
            }
            for item in items {
                if !original.contains(item) {
                    original.push(item.clone());
                }
            }
        }
        ListKind::Map(keys) => {
            if replace {
                original.clear();
            }
            for item in items {
                let Some(fields) = item.as_object() else {
                    original.push(item.clone());
                    continue;
                };
                if keys.iter().all(|k| !fields.contains_key(k)) {
                    return Err(StrategicPatchError::MissingMergeKey(item.to_string(), keys.join(",")));
                }
                let same = |candidate: &Value| keys.iter().all(|k| candidate.get(k) == fields.get(k));
                if fields.get("$patch").and_then(Value::as_str) == Some("delete") {
                    original.retain(|candidate| !same(candidate));
                    continue;
                }
                match original.iter_mut().find(|candidate| same(candidate)) {
                    Some(Value::Object(existing)) => {
                        if let Outcome::Delete = merge_map(existing, fields, schema, path)? {
                            original.retain(|candidate| !same(candidate));
                        }
                    }
                    _ => {
                        let mut fresh = Map::new();
                        if let Outcome::Keep = merge_map(&mut fresh, fields, schema, path)? {
                            original.push(Value::Object(fresh));
                        }
                    }
                }
            }
        }
    }
    Ok(())
}

/// Puts the elements named in `order` first, in that order; the others follow in their current order.
fn reorder(items: &mut Vec<Value>, order: &[Value], kind: &ListKind) {
    let position = |item: &Value| {
        order.iter().position(|o| match kind {
            ListKind::Map(keys) => keys.iter().all(|k| o.get(k) == item.get(k)),
            _ => o == item,
        })
    };
    let mut indexed: Vec<(usize, usize, Value)> =
        items.drain(..).enumerate().map(|(i, item)| (position(&item).unwrap_or(usize::MAX), i, item)).collect();
    indexed.sort_by_key(|(p, i, _)| (*p, *i));
    items.extend(indexed.into_iter().map(|(_, _, item)| item));
}

fn strip_directives(patch: &Map<String, Value>) -> Map<String, Value> {
    patch.iter().filter(|(k, _)| !k.starts_with('$')).map(|(k, v)| (k.clone(), v.clone())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct PodLike;

    impl MergeSchema for PodLike {
        fn list_kind(&self, path: &[String]) -> ListKind {
            match path.join(".").as_str() {
                "metadata.finalizers" => ListKind::Set,
                "spec.containers" => ListKind::Map(vec!["name".into()]),
                "spec.containers.env" => ListKind::Map(vec!["name".into()]),
                "status.conditions" => ListKind::Map(vec!["type".into()]),
                _ => ListKind::Atomic,
            }
        }
    }

    fn smp(mut target: Value, patch: Value) -> Value {
        strategic_merge_patch(&mut target, &patch, &PodLike).unwrap();
        target
    }

    #[test]
    fn finalizers_merge_as_a_set() {
        let got = smp(json!({"metadata": {"finalizers": ["a"]}}), json!({"metadata": {"finalizers": ["b", "a"]}}));
        assert_eq!(got, json!({"metadata": {"finalizers": ["a", "b"]}}));
    }

    #[test]
    fn conditions_merge_by_type_and_other_lists_replace() {
        let node = json!({"status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady"},
            {"type": "DiskPressure", "status": "False"}
        ], "images": [1, 2]}});
        let got = smp(
            node,
            json!({"status": {"conditions": [{"type": "Ready", "status": "False"}, {"type": "New", "status": "True"}], "images": [3]}}),
        );
        assert_eq!(
            got,
            json!({"status": {"conditions": [
                {"type": "Ready", "status": "False", "reason": "KubeletReady"},
                {"type": "DiskPressure", "status": "False"},
                {"type": "New", "status": "True"}
            ], "images": [3]}})
        );
    }

    #[test]
    fn null_clears_a_field() {
        assert_eq!(
            smp(json!({"spec": {"unschedulable": true, "x": 1}}), json!({"spec": {"unschedulable": null}})),
            json!({"spec": {"x": 1}})
        );
    }

    #[test]
    fn directives_delete_replace_reorder_and_retain() {
        let pod = json!({"spec": {"containers": [
            {"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}]},
            {"name": "b", "image": "2"}
        ]}, "metadata": {"finalizers": ["x", "y", "z"]}});
        let got = smp(
            pod.clone(),
            json!({"spec": {"containers": [{"name": "b", "$patch": "delete"}, {"name": "a", "env": [{"name": "Y", "value": "2"}]}]},
                   "metadata": {"$deleteFromPrimitiveList/finalizers": ["y"]}}),
        );
        assert_eq!(
            got,
            json!({"spec": {"containers": [{"name": "a", "image": "1", "env": [{"name": "X", "value": "1"}, {"name": "Y", "value": "2"}]}]},
                   "metadata": {"finalizers": ["x", "z"]}})
        );
        let got =
            smp(pod.clone(), json!({"spec": {"containers": [{"$patch": "replace"}, {"name": "c", "image": "3"}]}}));
        assert_eq!(got["spec"]["containers"], json!([{"name": "c", "image": "3"}]));
        let got = smp(pod.clone(), json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}}));
        assert_eq!(got["spec"]["containers"][0]["name"], "b");
        let got = smp(pod.clone(), json!({"spec": {"$patch": "replace", "other": 1}}));
        assert_eq!(got["spec"], json!({"other": 1}));
        let got = smp(json!({"s": {"a": 1, "b": 2, "c": 3}}), json!({"s": {"$retainKeys": ["a", "d"], "d": 4}}));
        assert_eq!(got, json!({"s": {"a": 1, "d": 4}}));
        let got = smp(pod, json!({"spec": {"$patch": "delete"}}));
        assert!(got.get("spec").is_none());
    }

    #[test]
    fn bad_patches_are_errors() {
        let mut pod = json!({"spec": {"containers": []}});
        assert!(strategic_merge_patch(&mut pod, &json!({"spec": {"$patch": "explode"}}), &PodLike).is_err());
        assert!(strategic_merge_patch(&mut pod, &json!({"spec": {"containers": [{"image": "x"}]}}), &PodLike).is_err());
        assert!(strategic_merge_patch(&mut pod, &json!([1]), &PodLike).is_err());
        assert!(strategic_merge_patch(&mut pod, &json!({"$patch": "delete"}), &PodLike).is_err());
    }
}
