//! The definitions a CRD version publishes, as apiextensions-apiserver's OpenAPI builder makes them: the kind
//! (its structural schema with `metadata` as `ObjectMeta`, `apiVersion` and `kind`) and its list, in the v3
//! form and in the reduced v2 form kubectl's client-side validation reads.

use super::definitions::{API_VERSION_DESCRIPTION, KIND_DESCRIPTION, OBJECT_META, V3_PREFIX, gvk, list_schema};
use crate::resource::ResourceType;
use serde_json::{Map, Value, json};

const METADATA_DESCRIPTION: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

/// `systems.edgeless.update.v1alpha1.NodeVersion`: the reversed group, the version and the kind.
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let reversed: Vec<&str> = group.split('.').rev().collect();
    format!("{}.{version}.{kind}", reversed.join("."))
}

/// The v3 definitions of a custom resource type: `(kind name, kind schema)` and `(list name, list schema)`.
pub fn v3_definitions(rt: &ResourceType) -> [(String, Value); 2] {
    let kind_name = definition_name(&rt.group, &rt.version, &rt.kind);
    let list_kind = rt.custom().map(|c| c.list_kind.clone()).unwrap_or_else(|| format!("{}List", rt.kind));
    let mut schema = rt.custom().and_then(|c| c.schema.clone()).unwrap_or_else(|| json!({"type": "object"}));
    unfold(&mut schema);
    kube_native(&mut schema, true, false);
    schema["x-kubernetes-group-version-kind"] = gvk(&rt.group, &rt.version, &rt.kind);
    let list_name = definition_name(&rt.group, &rt.version, &list_kind);
    let list = list_schema(&kind_name, &rt.group, &rt.version, &rt.kind, &list_kind);
    [(kind_name, schema), (list_name, list)]
}

/// The v2 definitions of a custom resource type: value validations and `nullable` stripped, and what kubectl's
/// v2 parser cannot take removed (upstream `ToStructuralOpenAPIV2`).
pub fn v2_definitions(rt: &ResourceType) -> [(String, Value); 2] {
    let [(kind_name, _), (list_name, list)] = v3_definitions(rt);
    let schema = rt.custom().and_then(|c| c.schema.clone());
    let preserve = |s: &Value| s.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
    let mut v2 = match schema {
        Some(mut schema) if !preserve(&schema) => {
            strip_for_v2(&mut schema);
            kube_native(&mut schema, true, true);
            super::v2::schema(&schema)
        }
        _ => json!({"type": "object"}),
    };
    v2["x-kubernetes-group-version-kind"] = gvk(&rt.group, &rt.version, &rt.kind);
    [(kind_name, v2), (list_name, super::v2::schema(&list))]
}

const INT_OR_STRING: [&str; 2] = ["integer", "string"];

fn int_or_string_any_of() -> Value {
    json!(INT_OR_STRING.iter().map(|t| json!({"type": t})).collect::<Vec<_>>())
}

/// Upstream `Structural.Unfold`: an int-or-string field without the `anyOf` of its two types gets it.
fn unfold(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else { return };
    if map.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true) {
        let pattern = int_or_string_any_of();
        let has_any_of = map.get("anyOf") == Some(&pattern);
        let has_all_of =
            map.get("allOf").and_then(Value::as_array).and_then(|a| a.first()).and_then(|f| f.get("anyOf"))
                == Some(&pattern);
        if !has_any_of && !has_all_of {
            match map.get_mut("anyOf") {
                None => {
                    map.insert("anyOf".into(), pattern);
                }
                Some(_) => {
                    let mut all_of = map.get("allOf").and_then(Value::as_array).cloned().unwrap_or_default();
                    all_of.insert(0, json!({"anyOf": pattern}));
                    map.insert("allOf".into(), Value::Array(all_of));
                }
            }
        }
    }
    for key in ["properties"] {
        if let Some(Value::Object(children)) = map.get_mut(key) {
            children.values_mut().for_each(unfold);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = map.get_mut(key).filter(|c| c.is_object()) {
            unfold(child);
        }
    }
}

/// `metadata` as `ObjectMeta`, `apiVersion` and `kind` at the root and in every embedded resource.
fn kube_native(schema: &mut Value, root: bool, v2: bool) {
    let Some(map) = schema.as_object_mut() else { return };
    let preserve = map.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(|p| kube_native(p, false, v2));
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = map.get_mut(key).filter(|c| c.is_object()) {
            kube_native(child, false, v2);
        }
    }
    let embedded = map.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
    if !root && (!embedded || (v2 && preserve)) {
        return;
    }
    let properties = map.entry("properties").or_insert_with(|| json!({}));
    if let Some(properties) = properties.as_object_mut() {
        let mut meta = Map::new();
        meta.insert("$ref".into(), json!(format!("{V3_PREFIX}{OBJECT_META}")));
        meta.insert("description".into(), json!(METADATA_DESCRIPTION));
        properties.insert("metadata".into(), Value::Object(meta));
        properties.insert("apiVersion".into(), json!({"type": "string", "description": API_VERSION_DESCRIPTION}));
        properties.insert("kind".into(), json!({"type": "string", "description": KIND_DESCRIPTION}));
    }
    if embedded && !root {
        let required = map.entry("required").or_insert_with(|| json!([]));
        if let Some(required) = required.as_array_mut() {
            for key in ["kind", "apiVersion"] {
                if !required.iter().any(|r| r == key) {
                    required.push(json!(key));
                }
            }
        }
    }
}

/// The value validations upstream strips from v2 (`StripValueValidations`), and `nullable`.
const VALUE_VALIDATIONS: [&str; 21] = [
    "format",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "uniqueItems",
    "multipleOf",
    "maxProperties",
    "minProperties",
    "required",
    "enum",
    "allOf",
    "anyOf",
    "oneOf",
    "not",
    "nullable",
];

fn strip_for_v2(schema: &mut Value) {
    let Some(map) = schema.as_object_mut() else { return };
    for key in VALUE_VALIDATIONS {
        map.remove(key);
    }
    if let Some(Value::Object(properties)) = map.get_mut("properties") {
        properties.values_mut().for_each(strip_for_v2);
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child) = map.get_mut(key).filter(|c| c.is_object()) {
            strip_for_v2(child);
        }
    }
    // kubectl's v2 parser cannot take fields and items below fields that keep unknown fields, nor arrays
    // without items, nor objects that keep unknown fields (upstream `ToStructuralOpenAPIV2`).
    let preserve = map.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
    if preserve {
        map.remove("items");
        map.remove("properties");
    }
    let ty = map.get("type").and_then(Value::as_str).unwrap_or_default().to_owned();
    if (ty == "array" && !map.contains_key("items")) || (preserve && ty == "object") {
        map.remove("type");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::resource_types;

    fn node_versions() -> ResourceType {
        let crd = shared::crd::all().into_iter().find(|c| c.spec.names.kind == "NodeVersion").unwrap();
        resource_types(&serde_json::to_value(crd).unwrap()).remove(0)
    }

    #[test]
    fn the_v3_definition_is_the_schema_with_kube_native_fields() {
        let [(name, schema), (list_name, list)] = v3_definitions(&node_versions());
        assert_eq!(name, "systems.edgeless.update.v1alpha1.NodeVersion");
        assert_eq!(list_name, "systems.edgeless.update.v1alpha1.NodeVersionList");
        assert_eq!(schema["properties"]["metadata"]["$ref"], format!("{V3_PREFIX}{OBJECT_META}"));
        assert_eq!(schema["properties"]["kind"]["type"], "string");
        let max = &schema["properties"]["spec"]["properties"]["rollout"]["properties"]["maxUnavailable"];
        assert_eq!(max["anyOf"], int_or_string_any_of());
        assert_eq!(max["minimum"], 1.0);
        assert_eq!(
            schema["x-kubernetes-group-version-kind"],
            gvk("update.edgeless.systems", "v1alpha1", "NodeVersion")
        );
        assert_eq!(list["properties"]["items"]["items"]["$ref"], format!("{V3_PREFIX}{name}"));
    }

    #[test]
    fn the_v2_definition_keeps_types_and_drops_what_v2_cannot_say() {
        let [(_, schema), (_, list)] = v2_definitions(&node_versions());
        let rollout = &schema["properties"]["spec"]["properties"]["rollout"]["properties"];
        assert_eq!(rollout["maxUnavailable"].get("anyOf"), None);
        assert_eq!(rollout["maxUnavailable"].get("minimum"), None);
        assert_eq!(rollout["maxUnavailable"].get("nullable"), None);
        assert_eq!(rollout["maxUnavailable"]["x-kubernetes-int-or-string"], true);
        assert_eq!(rollout["paused"]["type"], "boolean");
        assert_eq!(schema["properties"]["metadata"]["$ref"], format!("#/definitions/{OBJECT_META}"));
        assert!(list["properties"]["items"]["items"]["$ref"].as_str().unwrap().starts_with("#/definitions/"));
    }

    #[test]
    fn int_or_string_fields_are_unfolded() {
        let mut bare = json!({"type": "object", "properties": {"a": {"x-kubernetes-int-or-string": true},
            "b": {"x-kubernetes-int-or-string": true, "anyOf": [{"maxLength": 3}]}}});
        unfold(&mut bare);
        assert_eq!(bare["properties"]["a"]["anyOf"], int_or_string_any_of());
        assert_eq!(bare["properties"]["b"]["allOf"][0]["anyOf"], int_or_string_any_of());
    }
}
