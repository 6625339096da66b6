//! Server-side apply: merges an applied configuration into the live object, with per-manager field ownership.
//!
//! # Guarantees
//! - A field another manager owns, applied with a different value, is a conflict unless `force` is set; with
//!   `force` the applier takes the field over.
//! - Fields the manager applied before and leaves out now are removed, unless another manager owns them too.
//! - Applying the same configuration again changes nothing, not even `managedFields[].time`.

use super::managed::{self, FieldPath, ManagedEntry, Writer, object_field_set, remove_at, value_at};
use super::{ListKind, MergeSchema};
use serde_json::{Map, Value};

/// The manager that owns the fields of an untracked object when it is first applied to.
const BEFORE_FIRST_APPLY: &str = "before-first-apply";

/// A field owned by another manager that the apply would change.
#[derive(Debug, Clone, PartialEq)]
pub struct Conflict {
    /// The manager owning the field.
    pub manager: String,
    /// The field, as upstream prints it (`.spec.holderIdentity`).
    pub field: String,
}

/// Applies `applied` (a partial object) to `live` (absent on create) for `writer`. Returns the new object with
/// updated `managedFields`, or the conflicts.
pub fn server_side_apply(
    live: Option<&Value>,
    applied: &Value,
    writer: &Writer<'_>,
    force: bool,
    schema: &dyn MergeSchema,
) -> Result<Value, Vec<Conflict>> {
    let empty = Value::Object(Map::new());
    let existing = live.is_some();
    let live = live.unwrap_or(&empty);
    let mut entries = managed::read_entries(live);
    if entries.is_empty() && existing {
        // An object nobody tracked yet: its fields so far belong to `before-first-apply` (upstream
        // `skipNonAppliedManager`), so that the first apply conflicts with values it would change.
        let fields = object_field_set(live, schema);
        if !fields.is_empty() {
            entries.push(ManagedEntry {
                manager: BEFORE_FIRST_APPLY.to_owned(),
                operation: "Update".into(),
                api_version: writer.api_version.to_owned(),
                time: writer.now.to_owned(),
                subresource: None,
                fields,
            });
        }
    }
    let applied_set = object_field_set(applied, schema);

    let mut conflicts: Vec<(usize, FieldPath)> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        if entry.manager == writer.manager {
            continue;
        }
        for path in entry.fields.intersection(&applied_set) {
            if matches!(path.last(), Some(managed::PathElement::Key(_))) {
                continue;
            }
            if value_at(live, path) != value_at(applied, path) {
                conflicts.push((index, path.clone()));
            }
        }
    }
    if !conflicts.is_empty() && !force {
        return Err(conflicts
            .into_iter()
            .map(|(index, path)| Conflict {
                manager: entries[index].manager.clone(),
                field: managed::render_path(&path),
            })
            .collect());
    }
    for (index, path) in &conflicts {
        entries[*index].fields.remove(path);
    }

    let mut merged = merge(Some(live), applied, schema, &mut Vec::new());
    let own = entries.iter().position(|e| is_own(e, writer));
    if let Some(own) = own {
        let previously: Vec<FieldPath> = entries[own].fields.difference(&applied_set).cloned().collect();
        for path in previously {
            let shared =
                entries.iter().enumerate().any(|(i, e)| i != own && e.fields.iter().any(|p| p.starts_with(&path)));
            if !shared {
                remove_at(&mut merged, &path);
            }
        }
    }
    match own {
        Some(own) if entries[own].fields == applied_set => {}
        Some(own) => {
            entries[own].fields = applied_set;
            entries[own].time = writer.now.to_owned();
            entries[own].api_version = writer.api_version.to_owned();
        }
        None => entries.push(ManagedEntry {
            manager: writer.manager.to_owned(),
            operation: "Apply".into(),
            api_version: writer.api_version.to_owned(),
            time: writer.now.to_owned(),
            subresource: writer.subresource.map(str::to_owned),
            fields: applied_set,
        }),
    }
    entries.retain(|e| !e.fields.is_empty());
    managed::write_entries(&mut merged, &entries);
    Ok(merged)
}

fn is_own(entry: &ManagedEntry, writer: &Writer<'_>) -> bool {
    entry.manager == writer.manager && entry.operation == "Apply" && entry.subresource.as_deref() == writer.subresource
}

fn merge(live: Option<&Value>, applied: &Value, schema: &dyn MergeSchema, names: &mut Vec<String>) -> Value {
    match (live, applied) {
        (Some(Value::Object(live)), Value::Object(applied)) => {
            let mut result = live.clone();
            for (key, value) in applied {
                if value.is_null() {
                    result.remove(key);
                    continue;
                }
                names.push(key.clone());
                let merged = merge(live.get(key), value, schema, names);
                names.pop();
                result.insert(key.clone(), merged);
            }
            Value::Object(result)
        }
        (Some(Value::Array(live)), Value::Array(applied)) => match schema.list_kind(names) {
            ListKind::Atomic => Value::Array(applied.iter().map(strip_nulls).collect()),
            ListKind::Set => {
                let mut result = live.clone();
                for item in applied {
                    if !result.contains(item) {
                        result.push(item.clone());
                    }
                }
                Value::Array(result)
            }
            ListKind::Map(keys) => {
                let mut result = live.clone();
                for item in applied {
                    let key = managed::item_key(item, &keys);
                    let found = key.as_ref().and_then(|key| {
                        result.iter().position(|candidate| managed::item_key(candidate, &keys).as_ref() == Some(key))
                    });
                    match found {
                        Some(at) => {
                            let merged = merge(Some(&result[at]), item, schema, names);
                            result[at] = merged;
                        }
                        None => result.push(strip_nulls(item)),
                    }
                }
                Value::Array(result)
            }
        },
        (_, applied) => strip_nulls(applied),
    }
}

fn strip_nulls(value: &Value) -> Value {
    match value {
        Value::Object(fields) => Value::Object(
            fields.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), strip_nulls(v))).collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(strip_nulls).collect()),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    struct Lease;

    impl MergeSchema for Lease {
        fn list_kind(&self, path: &[String]) -> ListKind {
            match path.join(".").as_str() {
                "status.conditions" => ListKind::Map(vec!["type".into()]),
                _ => ListKind::Atomic,
            }
        }
    }

    fn writer(manager: &str) -> Writer<'_> {
        Writer { manager, api_version: "coordination.k8s.io/v1", subresource: None, now: "2026-01-01T00:00:00Z" }
    }

    fn lease(holder: &str) -> Value {
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
               "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}})
    }

    #[test]
    fn a_second_manager_conflicts_and_force_takes_the_field_over() {
        let first = server_side_apply(None, &lease("a"), &writer("a"), false, &Lease).unwrap();
        let conflicts = server_side_apply(Some(&first), &lease("b"), &writer("b"), false, &Lease).unwrap_err();
        assert_eq!(conflicts, vec![Conflict { manager: "a".into(), field: ".spec.holderIdentity".into() }]);
        let forced = server_side_apply(Some(&first), &lease("b"), &writer("b"), true, &Lease).unwrap();
        assert_eq!(forced["spec"]["holderIdentity"], "b");
        let entries = managed::read_entries(&forced);
        let a = entries.iter().find(|e| e.manager == "a").unwrap();
        assert_eq!(a.fields.len(), 1, "a keeps only leaseDurationSeconds, which b applied with the same value");
        assert!(server_side_apply(Some(&forced), &lease("a"), &writer("a"), false, &Lease).is_err());
    }

    #[test]
    fn the_same_value_is_shared_without_conflict() {
        let first = server_side_apply(None, &lease("a"), &writer("a"), false, &Lease).unwrap();
        let second = server_side_apply(Some(&first), &lease("a"), &writer("b"), false, &Lease).unwrap();
        assert_eq!(managed::read_entries(&second).len(), 2);
    }

    #[test]
    fn fields_left_out_are_removed_and_reapplying_changes_nothing() {
        let first = server_side_apply(None, &lease("a"), &writer("a"), false, &Lease).unwrap();
        let again = server_side_apply(Some(&first), &lease("a"), &writer("a"), false, &Lease).unwrap();
        assert_eq!(again, first);
        let smaller = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
                             "spec": {"holderIdentity": "a"}});
        let later = Writer { now: "2026-01-02T00:00:00Z", ..writer("a") };
        let applied = server_side_apply(Some(&again), &smaller, &later, false, &Lease).unwrap();
        assert!(applied["spec"].get("leaseDurationSeconds").is_none());
    }

    #[test]
    fn the_first_apply_to_an_untracked_object_conflicts_with_its_existing_values() {
        let untracked = lease("kubelet");
        let conflicts = server_side_apply(Some(&untracked), &lease("b"), &writer("b"), false, &Lease).unwrap_err();
        assert_eq!(
            conflicts,
            vec![Conflict { manager: "before-first-apply".into(), field: ".spec.holderIdentity".into() }]
        );
        let same = server_side_apply(Some(&untracked), &lease("kubelet"), &writer("b"), false, &Lease).unwrap();
        let managers: Vec<String> = managed::read_entries(&same).into_iter().map(|e| e.manager).collect();
        assert_eq!(managers, vec!["before-first-apply", "b"]);
    }

    #[test]
    fn list_maps_merge_by_key() {
        let live = json!({"status": {"conditions": [{"type": "A", "status": "1"}]}});
        let applied = json!({"status": {"conditions": [{"type": "B", "status": "2"}]}});
        let merged = server_side_apply(Some(&live), &applied, &writer("x"), false, &Lease).unwrap();
        assert_eq!(merged["status"]["conditions"], json!([{"type": "A", "status": "1"}, {"type": "B", "status": "2"}]));
    }
}
