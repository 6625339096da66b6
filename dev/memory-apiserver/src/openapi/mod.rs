//! The OpenAPI documents the server publishes, built from the registry of served types, so every built-in kind
//! and every CRD version appears as soon as it is served: `/openapi/v2` (JSON, or gnostic protobuf for
//! client-go) and `/openapi/v3` (the index of group versions with `serverRelativeURL` hashes, and one document
//! per group version).
//!
//! # Guarantees
//! - Every operation carries `x-kubernetes-group-version-kind` and `x-kubernetes-action`; creates, updates and
//!   patches list `fieldValidation`, so kubectl leaves field validation to the server.
//! - Every kind's definition carries `x-kubernetes-group-version-kind`, and every `$ref` of a document resolves
//!   inside it.
//! - The hash in the index is the hash of the document served at that URL now.

pub mod custom;
pub mod definitions;
pub mod paths;
pub mod protobuf;
pub mod v2;

use crate::resource::{Registry, ResourceType};
use definitions::V3_PREFIX;
use paths::{Names, resource_paths};
use serde_json::{Map, Value, json};
use std::collections::BTreeSet;
use std::hash::{Hash, Hasher};
use std::sync::Arc;

/// The media type of the protobuf v2 document, as the server names it in `Content-Type`.
pub const V2_PROTOBUF: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";
/// The older name of the same type, which client-go still asks for.
pub const V2_PROTOBUF_DEPRECATED: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";

/// The paths and the kinds' own definitions of a set of resource types (v3 form).
struct Parts {
    paths: Map<String, Value>,
    custom_v3: Map<String, Value>,
    custom_v2: Map<String, Value>,
}

fn parts(types: &[Arc<ResourceType>]) -> Parts {
    let builtin = definitions::builtin();
    let mut parts = Parts { paths: Map::new(), custom_v3: Map::new(), custom_v2: Map::new() };
    for rt in types {
        let (kind, list) = match rt.custom() {
            Some(_) => {
                let [(kind, schema), (list, list_schema)] = custom::v3_definitions(rt);
                parts.custom_v3.insert(kind.clone(), schema);
                parts.custom_v3.insert(list.clone(), list_schema);
                let [(kind2, schema2), (list2, list_schema2)] = custom::v2_definitions(rt);
                parts.custom_v2.insert(kind2, schema2);
                parts.custom_v2.insert(list2, list_schema2);
                (kind, list)
            }
            None => match builtin.kind_of(rt) {
                Some(name) => (name.to_owned(), format!("{name}List")),
                None => continue,
            },
        };
        parts.paths.extend(resource_paths(rt, &Names { kind: &kind, list: &list }));
    }
    parts
}

fn collect_refs(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::Object(map) => {
            if let Some(name) = map.get("$ref").and_then(Value::as_str).and_then(|r| r.strip_prefix(V3_PREFIX)) {
                out.push(name.to_owned());
            }
            map.values().for_each(|v| collect_refs(v, out));
        }
        Value::Array(list) => list.iter().for_each(|v| collect_refs(v, out)),
        _ => {}
    }
}

/// The definitions `roots` need: themselves and everything they reference, from the kinds' own definitions
/// and the built-in ones.
fn closure(paths: &Map<String, Value>, own: &Map<String, Value>) -> Map<String, Value> {
    let builtin = &definitions::builtin().schemas;
    let mut pending: Vec<String> = own.keys().cloned().collect();
    paths.values().for_each(|item| collect_refs(item, &mut pending));
    let mut seen = BTreeSet::new();
    let mut out = Map::new();
    while let Some(name) = pending.pop() {
        if !seen.insert(name.clone()) {
            continue;
        }
        let Some(schema) = own.get(&name).or_else(|| builtin.get(&name)) else { continue };
        collect_refs(schema, &mut pending);
        out.insert(name, schema.clone());
    }
    out
}

fn security() -> (Value, Value) {
    let scheme = json!({"BearerToken": {"type": "apiKey", "name": "authorization", "in": "header",
                                        "description": "Bearer Token authentication"}});
    (scheme, json!([{"BearerToken": []}]))
}

/// `/openapi/v3/api/v1` or `/openapi/v3/apis/{group}/{version}`: `None` when nothing is served there.
pub fn v3_group_version(registry: &Registry, path: &str, server_version: &str) -> Option<Value> {
    let (group, version) = match path.trim_matches('/').split('/').collect::<Vec<_>>().as_slice() {
        ["api", version] => (String::new(), (*version).to_owned()),
        ["apis", group, version] => ((*group).to_owned(), (*version).to_owned()),
        _ => return None,
    };
    let types = registry.types_of(&group, &version);
    if types.is_empty() {
        return None;
    }
    let parts = parts(&types);
    let schemas = closure(&parts.paths, &parts.custom_v3);
    let (schemes, security) = security();
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": server_version},
        "paths": parts.paths,
        "components": {"schemas": schemas, "securitySchemes": schemes},
        "security": security,
    }))
}

/// A short stable hash of a document, for the index's cache-busting URLs.
pub fn hash(value: &Value) -> String {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    value.to_string().hash(&mut hasher);
    format!("{:016X}", hasher.finish())
}

/// `/openapi/v3`: every served group version with the URL of its document.
pub fn v3_index(registry: &Registry, server_version: &str) -> Value {
    let mut group_versions = vec![("api/v1".to_owned())];
    for (group, versions) in registry.groups() {
        group_versions.extend(versions.iter().map(|v| format!("apis/{group}/{v}")));
    }
    let mut paths = Map::new();
    for path in group_versions {
        if let Some(document) = v3_group_version(registry, &path, server_version) {
            let url = format!("/openapi/v3/{path}?hash={}", hash(&document));
            paths.insert(path, json!({"serverRelativeURL": url}));
        }
    }
    json!({"paths": paths})
}

/// `/openapi/v2`: every path and definition in v2 form.
pub fn v2_document(registry: &Registry, server_version: &str) -> Value {
    let types: Vec<Arc<ResourceType>> = registry.types().cloned().collect();
    let parts = parts(&types);
    let builtin = &definitions::builtin().schemas;
    let mut definitions: Map<String, Value> =
        builtin.iter().map(|(name, schema)| (name.clone(), v2::builtin_definition(name, schema))).collect();
    definitions.extend(parts.custom_v2);
    let paths: Map<String, Value> =
        parts.paths.iter().map(|(path, item)| (path.clone(), v2::path_item(item))).collect();
    let (schemes, security) = security();
    json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": server_version},
        "paths": paths,
        "definitions": definitions,
        "securityDefinitions": schemes,
        "security": security,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::resource_types;

    fn registry_with_operator_crds() -> Registry {
        let mut registry = Registry::new();
        for crd in shared::crd::all() {
            let crd = serde_json::to_value(crd).unwrap();
            let name = crd["metadata"]["name"].as_str().unwrap().to_owned();
            registry.set_crd_types(&name, resource_types(&crd));
        }
        registry
    }

    fn refs_resolve(document: &Value, prefix: &str, definitions: &Value) {
        let mut refs = Vec::new();
        fn walk(value: &Value, prefix: &str, out: &mut Vec<String>) {
            match value {
                Value::Object(map) => {
                    if let Some(r) = map.get("$ref").and_then(Value::as_str) {
                        out.push(r.strip_prefix(prefix).unwrap_or_else(|| panic!("{r}")).to_owned());
                    }
                    map.values().for_each(|v| walk(v, prefix, out));
                }
                Value::Array(list) => list.iter().for_each(|v| walk(v, prefix, out)),
                _ => {}
            }
        }
        walk(document, prefix, &mut refs);
        assert!(!refs.is_empty());
        for r in refs {
            assert!(definitions.get(&r).is_some(), "{r} dangles");
        }
    }

    #[test]
    fn the_index_lists_every_group_version_and_each_document_is_whole() {
        let registry = registry_with_operator_crds();
        let index = v3_index(&registry, "v1.33.0");
        let paths = index["paths"].as_object().unwrap();
        for expected in ["api/v1", "apis/apps/v1", "apis/policy/v1", "apis/update.edgeless.systems/v1alpha1"] {
            let url = paths[expected]["serverRelativeURL"].as_str().unwrap();
            assert!(url.starts_with(&format!("/openapi/v3/{expected}?hash=")), "{url}");
        }
        let document = v3_group_version(&registry, "apis/update.edgeless.systems/v1alpha1", "v1.33.0").unwrap();
        refs_resolve(&document, V3_PREFIX, &document["components"]["schemas"]);
        let node_version = &document["components"]["schemas"]["systems.edgeless.update.v1alpha1.NodeVersion"];
        assert_eq!(node_version["x-kubernetes-group-version-kind"][0]["kind"], "NodeVersion");
        let get = &document["paths"]["/apis/update.edgeless.systems/v1alpha1/nodeversions"]["get"];
        assert_eq!(get["x-kubernetes-group-version-kind"]["kind"], "NodeVersion");
        let core = v3_group_version(&registry, "api/v1", "v1.33.0").unwrap();
        refs_resolve(&core, V3_PREFIX, &core["components"]["schemas"]);
        assert!(v3_group_version(&registry, "apis/nope/v1", "v1.33.0").is_none());
    }

    #[test]
    fn the_v2_document_holds_every_definition_it_refers_to() {
        let registry = registry_with_operator_crds();
        let document = v2_document(&registry, "v1.33.0");
        refs_resolve(&document["paths"], v2::V2_PREFIX, &document["definitions"]);
        refs_resolve(&document["definitions"], v2::V2_PREFIX, &document["definitions"]);
        let patch = &document["paths"]["/api/v1/nodes/{name}"]["patch"];
        assert!(patch["parameters"].as_array().unwrap().iter().any(|p| p["name"] == "fieldValidation"));
        assert_eq!(
            document["definitions"]["io.k8s.apimachinery.pkg.util.intstr.IntOrString"]["format"],
            "int-or-string"
        );
        assert!(protobuf::encode(&document).len() > 100_000);
    }
}
