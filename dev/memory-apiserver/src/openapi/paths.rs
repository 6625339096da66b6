//! The operations of a served resource in OpenAPI v3 form (`paths`), as upstream's route builders lay them out:
//! the collection, the cross-namespace list, the object, and its subresources, each operation with its
//! `x-kubernetes-action`, `x-kubernetes-group-version-kind` and query parameters (`fieldValidation` among the
//! write options, which tells kubectl the server validates fields).

use super::definitions::{BINDING, DELETE_OPTIONS, EVICTION, PATCH, SCALE, STATUS, V3_PREFIX};
use crate::resource::ResourceType;
use serde_json::{Map, Value, json};

/// The definition names an operation set refers to.
pub struct Names<'a> {
    /// The kind's definition.
    pub kind: &'a str,
    /// The list kind's definition.
    pub list: &'a str,
}

/// Query parameters by option set, with the type of each.
const LIST_OPTIONS: [(&str, &str); 10] = [
    ("allowWatchBookmarks", "boolean"),
    ("continue", "string"),
    ("fieldSelector", "string"),
    ("labelSelector", "string"),
    ("limit", "integer"),
    ("resourceVersion", "string"),
    ("resourceVersionMatch", "string"),
    ("sendInitialEvents", "boolean"),
    ("timeoutSeconds", "integer"),
    ("watch", "boolean"),
];
const CREATE_OPTIONS: [(&str, &str); 3] =
    [("dryRun", "string"), ("fieldManager", "string"), ("fieldValidation", "string")];
const PATCH_OPTIONS: [(&str, &str); 4] =
    [("dryRun", "string"), ("fieldManager", "string"), ("fieldValidation", "string"), ("force", "boolean")];
const DELETE_OPTION_PARAMETERS: [(&str, &str); 4] = [
    ("dryRun", "string"),
    ("gracePeriodSeconds", "integer"),
    ("orphanDependents", "boolean"),
    ("propagationPolicy", "string"),
];

fn describe(name: &str) -> &'static str {
    match name {
        "fieldValidation" => {
            "fieldValidation instructs the server on how to handle objects in the request containing unknown or duplicate fields. Valid values are: - Ignore: ignores unknown/duplicate fields. - Warn: responds with a warning for each unknown/duplicate field, but successfully serves the request. - Strict: fails the request on unknown/duplicate fields."
        }
        "dryRun" => {
            "When present, indicates that modifications should not be persisted. Valid values are: - All: all dry run stages will be processed"
        }
        "fieldManager" => "fieldManager is a name associated with the actor or entity that is making these changes.",
        "force" => {
            "Force is going to \"force\" Apply requests. It means user will re-acquire conflicting fields owned by other people."
        }
        "labelSelector" => {
            "A selector to restrict the list of returned objects by their labels. Defaults to everything."
        }
        "fieldSelector" => {
            "A selector to restrict the list of returned objects by their fields. Defaults to everything."
        }
        "watch" => {
            "Watch for changes to the described resources and return them as a stream of add, update, and remove notifications."
        }
        "limit" => "limit is a maximum number of responses to return for a list call.",
        "continue" => "The continue option should be set when retrieving more results from the server.",
        "resourceVersion" => {
            "resourceVersion sets a constraint on what resource versions a request may be served from."
        }
        "resourceVersionMatch" => "resourceVersionMatch determines how resourceVersion is applied to list calls.",
        "timeoutSeconds" => "Timeout for the list/watch call.",
        "allowWatchBookmarks" => "allowWatchBookmarks requests watch events with type \"BOOKMARK\".",
        "sendInitialEvents" => {
            "`sendInitialEvents=true` may be set together with `watch=true` to stream the initial state first."
        }
        "gracePeriodSeconds" => "The duration in seconds before the object should be deleted.",
        "orphanDependents" => "Deprecated: please use the PropagationPolicy.",
        "propagationPolicy" => "Whether and how garbage collection will be performed.",
        "pretty" => "If 'true', then the output is pretty printed.",
        _ => "",
    }
}

fn query(options: &[(&str, &str)]) -> Vec<Value> {
    options
        .iter()
        .map(|(name, ty)| {
            json!({"name": name, "in": "query", "description": describe(name), "schema": {"type": ty, "uniqueItems": true}})
        })
        .collect()
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("{V3_PREFIX}{name}")})
}

fn content(name: &str, types: &[&str]) -> Value {
    let schema = reference(name);
    Value::Object(types.iter().map(|t| ((*t).to_owned(), json!({"schema": schema}))).collect())
}

/// `readCoreV1NamespacedPod`: the operation id upstream derives.
fn operation_id(verb: &str, rt: &ResourceType, namespaced: bool, suffix: &str) -> String {
    let group = if rt.group.is_empty() { "core".to_owned() } else { rt.group.clone() };
    let camel: String = group
        .split(['.', '-'])
        .map(|part| {
            let mut chars = part.chars();
            chars.next().map(|c| c.to_uppercase().collect::<String>() + chars.as_str()).unwrap_or_default()
        })
        .collect();
    let mut version = rt.version.clone();
    if let Some(first) = version.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    let scope = if namespaced { "Namespaced" } else { "" };
    format!("{verb}{camel}{version}{scope}{}{suffix}", rt.kind)
}

/// The tag upstream gives a group version's operations (`core_v1`, `updateEdgelessSystems_v1alpha1`).
pub fn tag(rt: &ResourceType) -> String {
    if rt.group.is_empty() {
        return format!("core_{}", rt.version);
    }
    let mut parts = rt.group.split(['.', '-']);
    let mut camel = parts.next().unwrap_or_default().to_owned();
    for part in parts {
        let mut chars = part.chars();
        if let Some(c) = chars.next() {
            camel.extend(c.to_uppercase());
            camel.push_str(chars.as_str());
        }
    }
    format!("{camel}_{}", rt.version)
}

struct Operation<'a> {
    description: String,
    id: String,
    action: &'a str,
    gvk: Value,
    parameters: Vec<Value>,
    request: Option<(&'a str, &'a [&'a str])>,
    responses: Vec<(&'a str, &'a str, &'a str)>,
}

impl Operation<'_> {
    fn render(self, rt: &ResourceType) -> Value {
        let mut op = json!({
            "description": self.description,
            "operationId": self.id,
            "tags": [tag(rt)],
            "x-kubernetes-action": self.action,
            "x-kubernetes-group-version-kind": self.gvk,
        });
        if !self.parameters.is_empty() {
            op["parameters"] = Value::Array(self.parameters);
        }
        if let Some((schema, types)) = self.request {
            op["requestBody"] = json!({"content": content(schema, types)});
        }
        let mut responses = Map::new();
        for (code, description, schema) in self.responses {
            responses.insert(
                code.to_owned(),
                json!({"description": description, "content": content(schema, &["application/json", "application/yaml"])}),
            );
        }
        responses.insert("401".into(), json!({"description": "Unauthorized"}));
        op["responses"] = Value::Object(responses);
        op
    }
}

const WRITE_TYPES: [&str; 2] = ["application/json", "application/yaml"];
const PATCH_TYPES: [&str; 4] = [
    "application/apply-patch+yaml",
    "application/json-patch+json",
    "application/merge-patch+json",
    "application/strategic-merge-patch+json",
];
const CUSTOM_PATCH_TYPES: [&str; 3] =
    ["application/apply-patch+yaml", "application/json-patch+json", "application/merge-patch+json"];

fn path_parameter(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "required": true, "description": description,
           "schema": {"type": "string", "uniqueItems": true}})
}

fn pretty() -> Value {
    json!({"name": "pretty", "in": "query", "description": describe("pretty"), "schema": {"type": "string", "uniqueItems": true}})
}

/// The path items of one resource type, keyed by path.
pub fn resource_paths(rt: &ResourceType, names: &Names<'_>) -> Map<String, Value> {
    let prefix =
        if rt.group.is_empty() { format!("/api/{}", rt.version) } else { format!("/apis/{}/{}", rt.group, rt.version) };
    let gvk = json!({"group": rt.group, "version": rt.version, "kind": rt.kind});
    let namespace = path_parameter("namespace", "object name and auth scope, such as for teams and projects");
    let name = path_parameter("name", &format!("name of the {}", rt.kind));
    let kind = rt.kind.as_str();
    let patch_types: &[&str] = if rt.custom().is_some() { &CUSTOM_PATCH_TYPES } else { &PATCH_TYPES };
    let deleted = if rt.custom().is_some() { STATUS } else { names.kind };
    let mut paths = Map::new();

    let list = |id: String| Operation {
        description: format!("list or watch objects of kind {kind}"),
        id,
        action: "list",
        gvk: gvk.clone(),
        parameters: query(&LIST_OPTIONS),
        request: None,
        responses: vec![("200", "OK", names.list)],
    };
    let (collection, item_scope) = if rt.namespaced {
        let all = format!("{prefix}/{}", rt.plural);
        let op = list(operation_id("list", rt, false, "ForAllNamespaces")).render(rt);
        paths.insert(all, json!({"get": op, "parameters": [pretty()]}));
        (format!("{prefix}/namespaces/{{namespace}}/{}", rt.plural), vec![namespace.clone()])
    } else {
        (format!("{prefix}/{}", rt.plural), Vec::new())
    };
    let namespaced = rt.namespaced;
    let mut collection_item = json!({
        "get": list(operation_id("list", rt, namespaced, "")).render(rt),
        "post": Operation {
            description: format!("create a {kind}"),
            id: operation_id("create", rt, namespaced, ""),
            action: "post",
            gvk: gvk.clone(),
            parameters: query(&CREATE_OPTIONS),
            request: Some((names.kind, &WRITE_TYPES)),
            responses: vec![("200", "OK", names.kind), ("201", "Created", names.kind), ("202", "Accepted", names.kind)],
        }
        .render(rt),
        "delete": Operation {
            description: format!("delete collection of {kind}"),
            id: operation_id("deletecollection", rt, namespaced, ""),
            action: "deletecollection",
            gvk: gvk.clone(),
            parameters: [query(&LIST_OPTIONS), query(&DELETE_OPTION_PARAMETERS)].concat(),
            request: Some((DELETE_OPTIONS, &["application/json"])),
            responses: vec![("200", "OK", STATUS)],
        }
        .render(rt),
    });
    collection_item["parameters"] = Value::Array([item_scope.clone(), vec![pretty()]].concat());
    paths.insert(collection.clone(), collection_item);

    let object_parameters = Value::Array([vec![name.clone()], item_scope.clone(), vec![pretty()]].concat());
    let object_ops = |suffix: &str, sub: &str, schema: &str, op_gvk: &Value, patch_request: &str| {
        let title = if sub.is_empty() { String::new() } else { format!(" {sub} of") };
        let id_suffix = if sub.is_empty() {
            String::new()
        } else {
            let mut s = sub.to_owned();
            if let Some(first) = s.get_mut(0..1) {
                first.make_ascii_uppercase();
            }
            s
        };
        let mut item = json!({
            "get": Operation {
                description: format!("read{title} the specified {kind}"),
                id: operation_id("read", rt, namespaced, &id_suffix),
                action: "get",
                gvk: op_gvk.clone(),
                parameters: Vec::new(),
                request: None,
                responses: vec![("200", "OK", schema)],
            }
            .render(rt),
            "put": Operation {
                description: format!("replace{title} the specified {kind}"),
                id: operation_id("replace", rt, namespaced, &id_suffix),
                action: "put",
                gvk: op_gvk.clone(),
                parameters: query(&CREATE_OPTIONS),
                request: Some((schema, &WRITE_TYPES)),
                responses: vec![("200", "OK", schema), ("201", "Created", schema)],
            }
            .render(rt),
            "patch": Operation {
                description: format!("partially update{title} the specified {kind}"),
                id: operation_id("patch", rt, namespaced, &id_suffix),
                action: "patch",
                gvk: op_gvk.clone(),
                parameters: query(&PATCH_OPTIONS),
                request: Some((patch_request, patch_types)),
                responses: vec![("200", "OK", schema), ("201", "Created", schema)],
            }
            .render(rt),
        });
        if sub.is_empty() {
            item["delete"] = Operation {
                description: format!("delete a {kind}"),
                id: operation_id("delete", rt, namespaced, ""),
                action: "delete",
                gvk: op_gvk.clone(),
                parameters: query(&DELETE_OPTION_PARAMETERS),
                request: Some((DELETE_OPTIONS, &["application/json"])),
                responses: vec![("200", "OK", deleted), ("202", "Accepted", deleted)],
            }
            .render(rt);
        }
        item["parameters"] = object_parameters.clone();
        (format!("{collection}/{{name}}{suffix}"), item)
    };
    let (path, item) = object_ops("", "", names.kind, &gvk, PATCH);
    paths.insert(path, item);
    if rt.status_subresource {
        let (path, item) = object_ops("/status", "status", names.kind, &gvk, PATCH);
        paths.insert(path, item);
    }
    if rt.scale.is_some() {
        let scale_gvk = json!({"group": "autoscaling", "version": "v1", "kind": "Scale"});
        let (path, item) = object_ops("/scale", "scale", SCALE, &scale_gvk, PATCH);
        paths.insert(path, item);
    }
    for sub in &rt.other_subresources {
        let (schema, group, version, sub_kind) = match *sub {
            "eviction" => (EVICTION, "policy", "v1", "Eviction"),
            "binding" => (BINDING, "", "v1", "Binding"),
            _ => continue,
        };
        let mut id_suffix = (*sub).to_owned();
        if let Some(first) = id_suffix.get_mut(0..1) {
            first.make_ascii_uppercase();
        }
        let op = Operation {
            description: format!("create {sub} of a {kind}"),
            id: operation_id("create", rt, namespaced, &id_suffix),
            action: "post",
            gvk: json!({"group": group, "version": version, "kind": sub_kind}),
            parameters: query(&CREATE_OPTIONS),
            request: Some((schema, &WRITE_TYPES)),
            responses: vec![("200", "OK", schema), ("201", "Created", schema), ("202", "Accepted", schema)],
        }
        .render(rt);
        paths.insert(format!("{collection}/{{name}}/{sub}"), json!({"post": op, "parameters": object_parameters}));
    }
    paths
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::builtin_types;

    #[test]
    fn a_namespaced_resource_has_the_upstream_operations() {
        let pods = builtin_types().into_iter().find(|t| t.plural == "pods").unwrap();
        let names = Names { kind: "io.k8s.api.core.v1.Pod", list: "io.k8s.api.core.v1.PodList" };
        let paths = resource_paths(&pods, &names);
        let keys: Vec<&str> = paths.keys().map(String::as_str).collect();
        assert_eq!(
            keys,
            vec![
                "/api/v1/namespaces/{namespace}/pods",
                "/api/v1/namespaces/{namespace}/pods/{name}",
                "/api/v1/namespaces/{namespace}/pods/{name}/binding",
                "/api/v1/namespaces/{namespace}/pods/{name}/eviction",
                "/api/v1/namespaces/{namespace}/pods/{name}/status",
                "/api/v1/pods",
            ]
        );
        let patch = &paths["/api/v1/namespaces/{namespace}/pods/{name}"]["patch"];
        assert_eq!(patch["operationId"], "patchCoreV1NamespacedPod");
        assert_eq!(patch["x-kubernetes-group-version-kind"], json!({"group": "", "version": "v1", "kind": "Pod"}));
        assert!(
            patch["parameters"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["name"] == "fieldValidation" && p["in"] == "query")
        );
        assert_eq!(paths["/api/v1/pods"]["get"]["operationId"], "listCoreV1PodForAllNamespaces");
        assert_eq!(paths["/api/v1/pods"]["get"]["tags"], json!(["core_v1"]));
        let eviction = &paths["/api/v1/namespaces/{namespace}/pods/{name}/eviction"]["post"];
        assert_eq!(eviction["x-kubernetes-group-version-kind"]["kind"], "Eviction");
    }
}
