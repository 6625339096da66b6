//! The OpenAPI v3 definitions (`components.schemas`) of the built-in kinds, generated from k8s-openapi's
//! schemars schemas and brought to the shapes upstream publishes.
//!
//! # Guarantees
//! - Every built-in kind of [`builtin_types`] has its definition (named as upstream names it,
//!   `io.k8s.api.core.v1.Pod`), a `...List` definition, and `x-kubernetes-group-version-kind`; every
//!   definition a `$ref` names is present.
//! - References are `#/components/schemas/NAME`, with sibling `description`s as upstream writes them.

use crate::patch::{ListKind, MergeSchema};
use crate::resource::schema::BuiltinSchema;
use crate::resource::{ResourceType, builtin_types};
use k8s_openapi::api::{autoscaling, core, policy};
use k8s_openapi::apimachinery::pkg::apis::meta::v1 as meta;
use schemars::JsonSchema;
use schemars::generate::{SchemaGenerator, SchemaSettings};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Where v3 documents keep their definitions.
pub const V3_PREFIX: &str = "#/components/schemas/";

/// The definition names of `ObjectMeta` and `ListMeta`, which custom resources use too.
pub const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
pub const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
pub const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
pub const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
pub const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
pub const WATCH_EVENT: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.WatchEvent";
pub const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";
pub const EVICTION: &str = "io.k8s.api.policy.v1.Eviction";
pub const BINDING: &str = "io.k8s.api.core.v1.Binding";

/// The definitions of the built-in kinds and what they reference.
pub struct Definitions {
    /// Every definition by name.
    pub schemas: Map<String, Value>,
    /// The definition of each built-in resource, by `group/version/plural` ([`ResourceType::store_id`] plus
    /// version).
    pub kinds: BTreeMap<String, String>,
}

impl Definitions {
    /// The definition name of a built-in resource type.
    pub fn kind_of(&self, rt: &ResourceType) -> Option<&str> {
        self.kinds.get(&key(rt)).map(String::as_str)
    }

    /// The definition a schema refers to, when it is a `$ref` (possibly with siblings).
    pub fn resolve<'a>(&'a self, schema: &'a Value) -> &'a Value {
        let mut schema = schema;
        // A chain of references ends; a cycle cannot occur in generated definitions, but stay bounded.
        for _ in 0..8 {
            match schema.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix(V3_PREFIX)) {
                Some(name) => match self.schemas.get(name) {
                    Some(target) => schema = target,
                    None => return schema,
                },
                None => return schema,
            }
        }
        schema
    }
}

fn key(rt: &ResourceType) -> String {
    format!("{}/{}/{}", rt.group, rt.version, rt.plural)
}

/// `x-kubernetes-group-version-kind` of one kind.
pub fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!([{"group": group, "version": version, "kind": kind}])
}

/// The definitions of the built-in kinds (built once).
pub fn builtin() -> &'static Definitions {
    static DEFINITIONS: OnceLock<Definitions> = OnceLock::new();
    DEFINITIONS.get_or_init(generate)
}

fn define<T: JsonSchema>(generator: &mut SchemaGenerator) -> String {
    generator.subschema_for::<T>();
    T::schema_name().into_owned()
}

fn generate() -> Definitions {
    let settings = SchemaSettings::openapi3().with(|s| {
        s.meta_schema = None;
        s.transforms = Vec::new();
    });
    let mut generator = SchemaGenerator::new(settings);
    let mut kinds = BTreeMap::new();
    let mut kind_names = Vec::new();
    for rt in builtin_types() {
        let Some(kind) = rt.builtin() else { continue };
        let name = (kind.kind_type().define)(&mut generator);
        kinds.insert(key(&rt), name.clone());
        kind_names.push((name, rt.group.clone(), rt.version.clone(), rt.kind.clone()));
    }
    // What operations and subresources refer to.
    let extras = [
        (define::<meta::Status>(&mut generator), "", "v1", "Status"),
        (define::<meta::DeleteOptions>(&mut generator), "", "v1", "DeleteOptions"),
        (define::<meta::Patch>(&mut generator), "", "", ""),
        (define::<meta::WatchEvent<()>>(&mut generator), "", "v1", "WatchEvent"),
        (define::<meta::ListMeta>(&mut generator), "", "", ""),
        (define::<autoscaling::v1::Scale>(&mut generator), "autoscaling", "v1", "Scale"),
        (define::<policy::v1::Eviction>(&mut generator), "policy", "v1", "Eviction"),
        (define::<core::v1::Binding>(&mut generator), "", "v1", "Binding"),
    ];
    let mut schemas = generator.take_definitions(false);
    for (name, group, version, kind) in &kind_names {
        if let Some(schema) = schemas.get_mut(name) {
            schema["x-kubernetes-group-version-kind"] = gvk(group, version, kind);
        }
        let list_name = format!("{name}List");
        schemas.insert(list_name, list_schema(name, group, version, kind, &format!("{kind}List")));
    }
    for (name, group, version, kind) in extras {
        if !kind.is_empty()
            && let Some(schema) = schemas.get_mut(&name)
        {
            schema["x-kubernetes-group-version-kind"] = gvk(group, version, kind);
        }
    }
    for (name, schema) in schemas.iter_mut() {
        as_upstream_publishes(name, schema);
    }
    for rt in builtin_types() {
        let (Some(kind), Some(name)) = (rt.builtin(), kinds.get(&key(&rt))) else { continue };
        annotate_lists(&mut schemas, name, &BuiltinSchema(kind), &mut Vec::new());
    }
    Definitions { schemas, kinds }
}

/// How deep list annotation follows references (PodTemplateSpec sits 4 levels down in workloads; the
/// recursive JSONSchemaProps of CRDs would go on forever).
const ANNOTATION_DEPTH: usize = 10;

/// Marks the lists the server merges (by key, or as sets) with the extensions upstream's definitions carry
/// (`x-kubernetes-patch-strategy`, `x-kubernetes-patch-merge-key`, `x-kubernetes-list-type`,
/// `x-kubernetes-list-map-keys`): kubectl computes its strategic merge patches from them, and without them
/// treats every list as atomic. The server's own merge rules ([`BuiltinSchema`]) are the source, so what is
/// published is what the server does.
fn annotate_lists(schemas: &mut Map<String, Value>, name: &str, merge: &dyn MergeSchema, path: &mut Vec<String>) {
    if path.len() > ANNOTATION_DEPTH {
        return;
    }
    let properties: Vec<(String, Value)> =
        match schemas.get(name).and_then(|s| s.get("properties")).and_then(Value::as_object) {
            Some(p) => p.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
            None => return,
        };
    for (property, schema) in properties {
        path.push(property.clone());
        let is_array = schema.get("type").and_then(Value::as_str) == Some("array");
        let target = if is_array { schema.pointer("/items/$ref") } else { schema.get("$ref") };
        if is_array {
            let extensions = match merge.list_kind(path) {
                ListKind::Map(keys) => {
                    Some(json!({"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": keys,
                    "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": keys.first()}))
                }
                ListKind::Set => Some(json!({"x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"})),
                ListKind::Atomic => None,
            };
            if let Some(Value::Object(extensions)) = extensions
                && let Some(field) =
                    schemas.get_mut(name).and_then(|s| s.pointer_mut(&format!("/properties/{property}")))
                && let Some(field) = field.as_object_mut()
            {
                field.extend(extensions);
            }
        }
        if let Some(target) = target.and_then(Value::as_str).and_then(|r| r.strip_prefix(V3_PREFIX)) {
            annotate_lists(schemas, target, merge, path);
        }
        path.pop();
    }
}

/// The list kind `list_kind` of `kind` (whose definition is `item`), as upstream defines lists.
pub fn list_schema(item: &str, group: &str, version: &str, kind: &str, list_kind: &str) -> Value {
    json!({
        "description": format!("{list_kind} is a list of {kind}"),
        "type": "object",
        "required": ["items"],
        "properties": {
            "apiVersion": {"type": "string", "description": API_VERSION_DESCRIPTION},
            "kind": {"type": "string", "description": KIND_DESCRIPTION},
            "items": {"type": "array", "description": format!("List of {kind}s."),
                      "items": {"$ref": format!("{V3_PREFIX}{item}")}},
            "metadata": {"$ref": format!("{V3_PREFIX}{LIST_META}"),
                         "description": "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}
        },
        "x-kubernetes-group-version-kind": gvk(group, version, list_kind),
    })
}

/// TypeMeta's descriptions, as upstream's definitions carry them.
pub const API_VERSION_DESCRIPTION: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
pub const KIND_DESCRIPTION: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// Where k8s-openapi's schemas differ from upstream's published ones.
fn as_upstream_publishes(name: &str, schema: &mut Value) {
    match name {
        "io.k8s.apimachinery.pkg.util.intstr.IntOrString" => {
            let description = schema.get("description").cloned();
            *schema = json!({"format": "int-or-string", "oneOf": [{"type": "integer"}, {"type": "string"}]});
            if let Some(description) = description {
                schema["description"] = description;
            }
            return;
        }
        "io.k8s.apimachinery.pkg.api.resource.Quantity" => {
            let description = schema.get("description").cloned();
            *schema = json!({"oneOf": [{"type": "string"}, {"type": "number"}]});
            if let Some(description) = description {
                schema["description"] = description;
            }
            return;
        }
        _ => {}
    }
    // k8s-openapi requires `metadata` of every resource (its Rust field is not optional); upstream does not.
    let is_resource =
        schema.pointer("/properties/apiVersion").is_some() && schema.pointer("/properties/metadata").is_some();
    if is_resource && let Some(required) = schema.get_mut("required").and_then(Value::as_array_mut) {
        required.retain(|r| r != "metadata");
        if required.is_empty()
            && let Some(map) = schema.as_object_mut()
        {
            map.remove("required");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refs(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(r) = map.get("$ref").and_then(Value::as_str) {
                    out.push(r.to_owned());
                }
                map.values().for_each(|v| refs(v, out));
            }
            Value::Array(list) => list.iter().for_each(|v| refs(v, out)),
            _ => {}
        }
    }

    #[test]
    fn every_built_in_kind_has_a_definition_a_list_and_its_gvk() {
        let definitions = builtin();
        for rt in builtin_types() {
            let name = definitions.kind_of(&rt).unwrap_or_else(|| panic!("no definition for {}", rt.kind));
            let schema = &definitions.schemas[name];
            assert_eq!(schema["x-kubernetes-group-version-kind"], gvk(&rt.group, &rt.version, &rt.kind));
            assert!(definitions.schemas.contains_key(&format!("{name}List")), "{name}List");
            let required = schema.get("required").and_then(Value::as_array).cloned().unwrap_or_default();
            assert!(!required.contains(&json!("metadata")), "{name}");
        }
        assert_eq!(definitions.kind_of(&builtin_types()[2]), Some("io.k8s.api.core.v1.Pod"));
    }

    #[test]
    fn merged_lists_carry_the_patch_extensions_kubectl_reads() {
        let schemas = &builtin().schemas;
        let containers = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["containers"];
        assert_eq!(containers["x-kubernetes-patch-merge-key"], "name");
        assert_eq!(containers["x-kubernetes-patch-strategy"], "merge");
        assert_eq!(containers["x-kubernetes-list-map-keys"], json!(["name"]));
        let ports = &schemas["io.k8s.api.core.v1.Container"]["properties"]["ports"];
        assert_eq!(ports["x-kubernetes-patch-merge-key"], "containerPort");
        let finalizers = &schemas[OBJECT_META]["properties"]["finalizers"];
        assert_eq!(finalizers["x-kubernetes-list-type"], "set");
        let tolerations = &schemas["io.k8s.api.core.v1.PodSpec"]["properties"]["tolerations"];
        assert!(tolerations.get("x-kubernetes-patch-strategy").is_none());
    }

    #[test]
    fn every_reference_resolves() {
        let definitions = builtin();
        let mut all = Vec::new();
        refs(&Value::Object(definitions.schemas.clone()), &mut all);
        assert!(!all.is_empty());
        for r in all {
            let name = r.strip_prefix(V3_PREFIX).unwrap_or_else(|| panic!("{r}"));
            assert!(definitions.schemas.contains_key(name), "{r} dangles");
        }
        let pod_metadata = &definitions.schemas["io.k8s.api.core.v1.Pod"]["properties"]["metadata"];
        assert_eq!(definitions.resolve(pod_metadata)["properties"]["name"]["type"], "string");
    }
}
