//! Pruning and defaulting of custom resources by a structural schema, as apiextensions-apiserver's `pruning`
//! and `defaulting` packages do them.
//!
//! Only the structural part of a schema counts here (`properties`, `additionalProperties`, `items`,
//! `x-kubernetes-preserve-unknown-fields`, `x-kubernetes-embedded-resource`, `nullable`, `default`); value
//! validations (`anyOf` ...) never keep a field.
//!
//! # Guarantees
//! - Never panics, whatever the schema or the value.
//! - `apiVersion`, `kind` and `metadata` of a resource (the root, and every embedded resource) are left alone.

use serde_json::{Map, Value};

/// What the structural part of a schema node says; `None` is the nil schema (nothing is known below it).
type Node<'a> = Option<&'a Map<String, Value>>;

fn node(schema: &Value) -> Node<'_> {
    schema.as_object()
}

fn flag(schema: Node<'_>, key: &str) -> bool {
    schema.and_then(|s| s.get(key)).and_then(Value::as_bool).unwrap_or(false)
}

fn property<'a>(schema: Node<'a>, key: &str) -> Option<Node<'a>> {
    schema.and_then(|s| s.get("properties")).and_then(Value::as_object).and_then(|p| p.get(key)).map(node)
}

/// `additionalProperties`: `None` when absent, `Some(None)` for `true`/`false` (a field is kept, nothing
/// below it is known), `Some(Some(schema))` for a schema.
fn additional(schema: Node<'_>) -> Option<Node<'_>> {
    match schema.and_then(|s| s.get("additionalProperties"))? {
        Value::Object(map) => Some(Some(map)),
        _ => Some(None),
    }
}

fn items(schema: Node<'_>) -> Node<'_> {
    schema.and_then(|s| s.get("items")).and_then(Value::as_object)
}

fn is_meta_field(key: &str) -> bool {
    matches!(key, "apiVersion" | "kind" | "metadata")
}

/// Removes the fields `schema` does not specify from `value` and returns their paths (`spec.foo`,
/// `spec.list[0].bar`), sorted, as strict decoding reports them. `is_resource_root` treats `value` as a
/// whole resource: its `apiVersion`, `kind` and `metadata` stay.
pub fn prune(schema: &Value, value: &mut Value, is_resource_root: bool) -> Vec<String> {
    let mut unknown = Vec::new();
    prune_at(node(schema), value, is_resource_root, &mut String::new(), &mut unknown);
    unknown.sort();
    unknown
}

fn child_path(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

fn prune_at(schema: Node<'_>, value: &mut Value, root: bool, path: &mut String, unknown: &mut Vec<String>) {
    if flag(schema, "x-kubernetes-preserve-unknown-fields") {
        skip_prune(schema, value, root, path, unknown);
        return;
    }
    let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
    match value {
        Value::Object(fields) => {
            let Some(_) = schema else {
                unknown.extend(fields.keys().map(|k| child_path(path, k)));
                fields.clear();
                return;
            };
            let nested = !path.is_empty();
            fields.retain(|key, _| {
                let known =
                    (embedded && is_meta_field(key)) || property(schema, key).is_some() || additional(schema).is_some();
                if !known && (!is_meta_field(key) || nested) {
                    unknown.push(child_path(path, key));
                }
                known
            });
            prune_members(schema, fields, embedded, path, unknown);
        }
        Value::Array(list) => prune_items(schema, list, prune_at, path, unknown),
        _ => {}
    }
}

/// Prunes each member that has a schema (a property or `additionalProperties`) by it; the `apiVersion`, `kind`
/// and `metadata` of a resource stay as they are.
fn prune_members(
    schema: Node<'_>,
    fields: &mut Map<String, Value>,
    embedded: bool,
    path: &mut String,
    unknown: &mut Vec<String>,
) {
    for (key, v) in fields.iter_mut() {
        if embedded && is_meta_field(key) {
            continue;
        }
        let Some(sub) = property(schema, key).or_else(|| additional(schema)) else { continue };
        let len = path.len();
        *path = child_path(path, key);
        prune_at(sub, v, false, path, unknown);
        path.truncate(len);
    }
}

type Pruner = fn(Node<'_>, &mut Value, bool, &mut String, &mut Vec<String>);

/// Prunes each item of a list by the list's `items` with `prune` (`[i]` in the paths).
fn prune_items(schema: Node<'_>, list: &mut [Value], prune: Pruner, path: &mut String, unknown: &mut Vec<String>) {
    for (i, item) in list.iter_mut().enumerate() {
        let len = path.len();
        path.push_str(&format!("[{i}]"));
        prune(items(schema), item, false, path, unknown);
        path.truncate(len);
    }
}

/// Under `x-kubernetes-preserve-unknown-fields`: unknown fields stay, known ones are pruned by their schema.
fn skip_prune(schema: Node<'_>, value: &mut Value, root: bool, path: &mut String, unknown: &mut Vec<String>) {
    let Some(_) = schema else { return };
    let embedded = root || flag(schema, "x-kubernetes-embedded-resource");
    match value {
        Value::Object(fields) => prune_members(schema, fields, embedded, path, unknown),
        Value::Array(list) => prune_items(schema, list, skip_prune, path, unknown),
        _ => {}
    }
}

fn nullable(schema: Node<'_>) -> bool {
    flag(schema, "nullable")
}

fn default_of(schema: Node<'_>) -> Option<&Value> {
    schema.and_then(|s| s.get("default"))
}

/// Removes `null`s of fields that are neither nullable nor defaulted, then fills in `default`s (missing fields,
/// and `null`s of non-nullable fields), as the API server does after decoding.
pub fn default(schema: &Value, value: &mut Value) {
    prune_nulls(node(schema), value);
    default_at(node(schema), value);
}

fn field_schema<'a>(schema: Node<'a>, key: &str) -> Node<'a> {
    property(schema, key).or_else(|| additional(schema)).flatten()
}

fn prune_nulls(schema: Node<'_>, value: &mut Value) {
    match value {
        Value::Object(fields) => {
            fields.retain(|key, v| {
                let sub = field_schema(schema, key);
                !(v.is_null() && sub.is_some() && !nullable(sub) && default_of(sub).is_none())
            });
            for (key, v) in fields.iter_mut() {
                prune_nulls(field_schema(schema, key), v);
            }
        }
        Value::Array(list) => list.iter_mut().for_each(|item| prune_nulls(items(schema), item)),
        _ => {}
    }
}

fn default_at(schema: Node<'_>, value: &mut Value) {
    let Some(map) = schema else { return };
    let non_nullable_null = |v: &Value, s: Node<'_>| v.is_null() && s.is_some() && !nullable(s);
    match value {
        Value::Object(fields) => {
            if let Some(properties) = map.get("properties").and_then(Value::as_object) {
                for (key, sub) in properties {
                    let Some(default) = sub.get("default") else { continue };
                    if fields.get(key).is_none_or(|v| non_nullable_null(v, node(sub))) {
                        fields.insert(key.clone(), default.clone());
                    }
                }
            }
            for (key, v) in fields.iter_mut() {
                if let Some(sub) = property(schema, key) {
                    default_at(sub, v);
                } else if let Some(sub) = additional(schema) {
                    if non_nullable_null(v, sub)
                        && let Some(default) = default_of(sub)
                    {
                        *v = default.clone();
                    }
                    default_at(sub, v);
                }
            }
        }
        Value::Array(list) => {
            let sub = items(schema);
            for item in list.iter_mut() {
                if non_nullable_null(item, sub)
                    && let Some(default) = default_of(sub)
                {
                    *item = default.clone();
                }
                default_at(sub, item);
            }
        }
        _ => {}
    }
}

/// Prunes a whole resource (see [`prune`]) and defaults it (see [`default`]); returns the pruned paths.
pub fn prune_and_default(schema: &Value, object: &mut Value) -> Vec<String> {
    let unknown = prune(schema, object, true);
    default(schema, object);
    unknown
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "image": {"type": "string"},
                "min": {"type": "integer"},
                "deadline": {"type": "string", "nullable": true},
                "mode": {"type": "string", "default": "Auto"},
                "retries": {"type": "integer", "default": 3},
                "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                         "properties": {"typed": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                "opaque": {"type": "object", "additionalProperties": true},
                "list": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                "pod": {"type": "object", "x-kubernetes-embedded-resource": true,
                        "properties": {"spec": {"type": "object"}}}
            }}
        }})
    }

    #[test]
    fn unknown_fields_are_removed_and_reported_sorted() {
        let mut object = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"}, "junk": 1,
            "spec": {"image": "a", "unknown": true, "list": [{"name": "n", "extra": 1}],
                     "free": {"anything": {"goes": 1}, "typed": {"a": "x", "b": "y"}},
                     "labels": {"k": "v"}, "opaque": {"k": {"deep": 1}},
                     "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}, "status": {}}}});
        let unknown = prune(&schema(), &mut object, true);
        assert_eq!(
            unknown,
            vec![
                "junk",
                "spec.free.typed.b",
                "spec.list[0].extra",
                "spec.opaque.k.deep",
                "spec.pod.status",
                "spec.unknown"
            ]
        );
        assert_eq!(
            object,
            json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
                "spec": {"image": "a", "list": [{"name": "n"}], "free": {"anything": {"goes": 1}, "typed": {"a": "x"}},
                         "labels": {"k": "v"}, "opaque": {"k": {}},
                         "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": {}}}})
        );
    }

    #[test]
    fn defaults_fill_missing_fields_and_non_nullable_nulls() {
        let mut object = json!({"spec": {"image": "a", "min": null, "deadline": null, "retries": null}});
        default(&schema(), &mut object);
        assert_eq!(object, json!({"spec": {"image": "a", "deadline": null, "mode": "Auto", "retries": 3}}));
    }

    #[test]
    fn malformed_schemas_do_not_panic() {
        for schema in [json!(null), json!({"properties": []}), json!({"items": 1}), json!({"additionalProperties": 3})]
        {
            let mut v = json!({"a": [1, {"b": null}]});
            prune_and_default(&schema, &mut v);
        }
    }
}
