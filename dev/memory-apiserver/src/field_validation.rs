//! Server-side field validation (`?fieldValidation=Strict|Warn|Ignore`): unknown and duplicate fields of a
//! request body, found as upstream's strict decoding finds them.
//!
//! Built-in kinds are checked against their OpenAPI definitions (the fields of the Go types); custom resources
//! against their CRD's structural schema (what pruning would drop) plus `ObjectMeta`. Duplicates are found in
//! the body as sent, which JSON parsers otherwise silently resolve to the last value.
//!
//! # Guarantees
//! - The messages are upstream's: `unknown field "spec.foo"`, `duplicate field "metadata.name"`; a Strict
//!   failure of a create or update is the 400 `Pod in version "v1" cannot be handled as a Pod: strict decoding
//!   error: unknown field "spec.foo"`.
//! - Never panics on any body or schema.

use crate::error::ApiError;
use crate::openapi::definitions::{self, OBJECT_META};
use crate::resource::ResourceType;
use crate::schema::{FieldError, FieldPath, prune};
use serde::de::{Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::Value;
use std::fmt;

/// What the client asked for with `fieldValidation`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FieldValidation {
    /// Unknown and duplicate fields are dropped silently.
    #[default]
    Ignore,
    /// They are dropped, and each is named in a `Warning` header (the default for HTTP requests).
    Warn,
    /// The request fails.
    Strict,
}

impl FieldValidation {
    /// Parses the query parameter (absent or empty means `Warn`); `options` names the options kind for the 422
    /// of an unsupported value (`CreateOptions`, `UpdateOptions`, `PatchOptions`).
    pub fn parse(value: Option<&str>, options: &str) -> Result<Self, ApiError> {
        match value.unwrap_or_default() {
            "" | "Warn" => Ok(FieldValidation::Warn),
            "Ignore" => Ok(FieldValidation::Ignore),
            "Strict" => Ok(FieldValidation::Strict),
            other => Err(ApiError::invalid_named(
                &format!("{options}.meta.k8s.io"),
                "meta.k8s.io",
                options,
                "",
                &[FieldError::not_supported(
                    &FieldPath::new("fieldValidation"),
                    &Value::String(other.to_owned()),
                    &["", "Ignore", "Strict", "Warn"],
                )],
            )),
        }
    }
}

/// A JSON (or YAML) document as sent: object members in order, duplicates kept.
#[derive(Debug, Clone, PartialEq)]
pub enum RawNode {
    /// An object's members.
    Object(Vec<(String, RawNode)>),
    /// A list.
    Array(Vec<RawNode>),
    /// Anything else.
    Scalar,
}

impl<'de> Deserialize<'de> for RawNode {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct RawVisitor;
        impl<'de> Visitor<'de> for RawVisitor {
            type Value = RawNode;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E>(self, _: bool) -> Result<RawNode, E> {
                Ok(RawNode::Scalar)
            }
            fn visit_i64<E>(self, _: i64) -> Result<RawNode, E> {
                Ok(RawNode::Scalar)
            }
            fn visit_u64<E>(self, _: u64) -> Result<RawNode, E> {
                Ok(RawNode::Scalar)
            }
            fn visit_f64<E>(self, _: f64) -> Result<RawNode, E> {
                Ok(RawNode::Scalar)
            }
            fn visit_str<E>(self, _: &str) -> Result<RawNode, E> {
                Ok(RawNode::Scalar)
            }
            fn visit_unit<E>(self) -> Result<RawNode, E> {
                Ok(RawNode::Scalar)
            }
            fn visit_none<E>(self) -> Result<RawNode, E> {
                Ok(RawNode::Scalar)
            }
            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<RawNode, D::Error> {
                RawNode::deserialize(d)
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawNode, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element()? {
                    items.push(item);
                }
                Ok(RawNode::Array(items))
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawNode, A::Error> {
                let mut members = Vec::new();
                while let Some((key, value)) = map.next_entry::<String, RawNode>()? {
                    members.push((key, value));
                }
                Ok(RawNode::Object(members))
            }
        }
        deserializer.deserialize_any(RawVisitor)
    }
}

impl RawNode {
    /// Parses a JSON body; `None` when it is not JSON (the caller's decoding reports that).
    pub fn parse_json(body: &[u8]) -> Option<RawNode> {
        serde_json::from_slice(body).ok()
    }

    /// Parses a YAML body.
    pub fn parse_yaml(body: &[u8]) -> Option<RawNode> {
        yaml_serde::from_slice(body).ok()
    }
}

/// One finding of strict decoding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Finding {
    Duplicate(String),
    Unknown(String),
}

impl fmt::Display for Finding {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Finding::Duplicate(path) => write!(f, "duplicate field {path:?}"),
            Finding::Unknown(path) => write!(f, "unknown field {path:?}"),
        }
    }
}

fn messages(findings: Vec<Finding>) -> Vec<String> {
    findings.iter().map(ToString::to_string).collect()
}

/// `duplicate field "..."` for every member that repeats a key of its object, in document order.
pub fn duplicates(node: &RawNode) -> Vec<String> {
    let mut out = Vec::new();
    walk(node, None, &mut String::new(), &mut out, false);
    messages(out)
}

/// The strict-decoding errors of a built-in kind's body: duplicates and fields its type does not have, in
/// document order.
pub fn builtin_errors(rt: &ResourceType, node: &RawNode) -> Vec<String> {
    let definitions = definitions::builtin();
    let schema = definitions.kind_of(rt).and_then(|name| definitions.schemas.get(name));
    let mut out = Vec::new();
    walk(node, schema, &mut String::new(), &mut out, true);
    messages(out)
}

/// The strict-decoding errors of a body decoded into the type of the definition `name` (an `Eviction`).
pub fn definition_errors(name: &str, node: &RawNode) -> Vec<String> {
    let mut out = Vec::new();
    walk(node, definitions::builtin().schemas.get(name), &mut String::new(), &mut out, true);
    messages(out)
}

/// A JSON patch decoded strictly into its operations (`op`, `path`, `from`, `value`): each finding reads
/// `json patch unknown field "[0].foo"`.
pub fn json_patch_errors(node: &RawNode) -> Vec<String> {
    let operation = serde_json::json!({"type": "array", "items": {"type": "object", "properties": {
        "op": {"type": "string"}, "path": {"type": "string"}, "from": {"type": "string"}, "value": {}}}});
    let mut out = Vec::new();
    walk(node, Some(&operation), &mut String::new(), &mut out, true);
    out.iter().map(|f| format!("json patch {f}")).collect()
}

/// The unknown fields of a built-in kind's object (no duplicates: a parsed value has none).
pub fn builtin_unknown(rt: &ResourceType, object: &Value) -> Vec<String> {
    let definitions = definitions::builtin();
    let schema = definitions.kind_of(rt).and_then(|name| definitions.schemas.get(name));
    let mut out = Vec::new();
    walk(object, schema, &mut String::new(), &mut out, true);
    messages(out)
}

/// The strict-decoding errors of a custom resource: duplicates in the body (if given), then the fields pruning
/// drops and the unknown fields of `metadata`, sorted as upstream sorts them.
pub fn custom_errors(schema: Option<&Value>, object: &Value, body: Option<&RawNode>) -> Vec<String> {
    let mut out = body.map(duplicates).unwrap_or_default();
    let mut unknown: Vec<Finding> = match schema {
        Some(schema) => prune(schema, &mut object.clone(), true).into_iter().map(Finding::Unknown).collect(),
        None => Vec::new(),
    };
    if let Some(metadata) = object.get("metadata") {
        let definitions = definitions::builtin();
        let mut path = "metadata".to_owned();
        walk(metadata, definitions.schemas.get(OBJECT_META), &mut path, &mut unknown, true);
    }
    unknown.sort();
    out.extend(messages(unknown));
    out
}

/// What the walk needs of a document: its shape, with object members in order (duplicates only in a
/// [`RawNode`]).
enum Shape<'a, T> {
    Object(Box<dyn Iterator<Item = (&'a str, &'a T)> + 'a>),
    Array(&'a [T]),
    Scalar,
}

trait Document: Sized {
    fn shape(&self) -> Shape<'_, Self>;
}

impl Document for RawNode {
    fn shape(&self) -> Shape<'_, Self> {
        match self {
            RawNode::Object(members) => Shape::Object(Box::new(members.iter().map(|(k, v)| (k.as_str(), v)))),
            RawNode::Array(items) => Shape::Array(items),
            RawNode::Scalar => Shape::Scalar,
        }
    }
}

impl Document for Value {
    fn shape(&self) -> Shape<'_, Self> {
        match self {
            Value::Object(map) => Shape::Object(Box::new(map.iter().map(|(k, v)| (k.as_str(), v)))),
            Value::Array(items) => Shape::Array(items),
            _ => Shape::Scalar,
        }
    }
}

fn walk<T: Document>(node: &T, schema: Option<&Value>, path: &mut String, out: &mut Vec<Finding>, unknown: bool) {
    let definitions = definitions::builtin();
    let schema = schema.map(|s| definitions.resolve(s));
    match node.shape() {
        Shape::Object(members) => {
            let properties = schema.and_then(|s| s.get("properties")).and_then(Value::as_object);
            let additional = schema.and_then(|s| s.get("additionalProperties")).filter(|a| a.is_object());
            let preserve = schema
                .and_then(|s| s.get("x-kubernetes-preserve-unknown-fields"))
                .and_then(Value::as_bool)
                .unwrap_or(false);
            let mut seen: Vec<&str> = Vec::new();
            for (key, value) in members {
                let len = path.len();
                if len > 0 {
                    path.push('.');
                }
                path.push_str(key);
                if seen.contains(&key) {
                    out.push(Finding::Duplicate(path.clone()));
                } else {
                    seen.push(key);
                    match (properties, additional) {
                        (Some(p), _) if p.contains_key(key) => walk(value, p.get(key), path, out, unknown),
                        (_, Some(a)) => walk(value, Some(a), path, out, unknown),
                        (Some(_), None) => {
                            if unknown && !preserve {
                                out.push(Finding::Unknown(path.clone()));
                            }
                        }
                        // An object without properties is a map of anything (RawExtension, FieldsV1): only
                        // duplicates count below it.
                        (None, None) => walk(value, None, path, out, false),
                    }
                }
                path.truncate(len);
            }
        }
        Shape::Array(items) => {
            let sub = schema.and_then(|s| s.get("items"));
            for (i, item) in items.iter().enumerate() {
                let len = path.len();
                path.push_str(&format!("[{i}]"));
                walk(item, sub, path, out, unknown && sub.is_some());
                path.truncate(len);
            }
        }
        Shape::Scalar => {}
    }
}

/// The 400 of a create or update that failed strict decoding.
pub fn strict_decoding_error(rt: &ResourceType, errors: &[String]) -> ApiError {
    strict_decoding_error_of(&rt.kind, &rt.version, errors)
}

/// The 400 of a body of `kind` in `version` that failed strict decoding.
pub fn strict_decoding_error_of(kind: &str, version: &str, errors: &[String]) -> ApiError {
    ApiError::bad_request(format!(
        "{kind} in version \"{version}\" cannot be handled as a {kind}: strict decoding error: {}",
        errors.join(", ")
    ))
}

/// The 422 of a patch whose result failed strict decoding: `patch: Invalid value: "...": strict decoding
/// error: ...`, on an empty kind and name as upstream sends it.
pub fn strict_patch_error(shown: &str, errors: &[String]) -> ApiError {
    let error = FieldError::invalid(
        &FieldPath::new("patch"),
        &Value::String(shown.to_owned()),
        &format!("strict decoding error: {}", errors.join(", ")),
    );
    ApiError::invalid_named("", "", "", "", &[error])
}

/// A `Warning` header value for one message (`299 - "unknown field \"spec.x\""`).
pub fn warning_header(message: &str) -> String {
    let escaped = message.replace('\\', "\\\\").replace('"', "\\\"");
    format!("299 - \"{escaped}\"")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resource::builtin_types;
    use serde_json::json;

    fn rt(plural: &str) -> ResourceType {
        builtin_types().into_iter().find(|t| t.plural == plural).unwrap()
    }

    #[test]
    fn unknown_and_duplicate_fields_of_built_ins_are_found_in_document_order() {
        let body = br#"{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "a", "name": "b", "labelz": {}},
            "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "x"}}, "template": {"metadata": {"labels": {"app": "x"}},
            "spec": {"containers": [{"name": "c", "image": "i", "imagePullPolicy": "Always", "bogus": 1}]}}, "strategy": {"rollingUpdate": {"maxSurge": 1}}},
            "extra": true}"#;
        let node = RawNode::parse_json(body).unwrap();
        assert_eq!(
            builtin_errors(&rt("deployments"), &node),
            vec![
                "duplicate field \"metadata.name\"",
                "unknown field \"metadata.labelz\"",
                "unknown field \"spec.template.spec.containers[0].bogus\"",
                "unknown field \"extra\"",
            ]
        );
        let clean = br#"{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {"k": "v"},
            "managedFields": [{"manager": "m", "fieldsV1": {"f:data": {".": {}}}}]}, "data": {"x": "y"}}"#;
        assert_eq!(builtin_errors(&rt("configmaps"), &RawNode::parse_json(clean).unwrap()), Vec::<String>::new());
        assert_eq!(
            builtin_unknown(&rt("nodes"), &json!({"spec": {"unschedulable": true, "cordoned": true}})),
            vec!["unknown field \"spec.cordoned\""]
        );
    }

    #[test]
    fn custom_resources_report_what_pruning_drops_and_unknown_metadata() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}}});
        let object = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "n", "nmae": "m"}, "spec": {"a": "x", "b": 1}});
        let body = RawNode::parse_json(br#"{"spec": {"a": "x", "a": "y"}}"#).unwrap();
        assert_eq!(
            custom_errors(Some(&schema), &object, Some(&body)),
            vec!["duplicate field \"spec.a\"", "unknown field \"metadata.nmae\"", "unknown field \"spec.b\""]
        );
    }

    #[test]
    fn the_directive_parses_as_upstream_validates_it() {
        assert_eq!(FieldValidation::parse(None, "CreateOptions").unwrap(), FieldValidation::Warn);
        assert_eq!(FieldValidation::parse(Some("Strict"), "CreateOptions").unwrap(), FieldValidation::Strict);
        let error = FieldValidation::parse(Some("strict"), "PatchOptions").unwrap_err();
        assert_eq!(error.code, 422);
        assert_eq!(
            error.message,
            "PatchOptions.meta.k8s.io \"\" is invalid: fieldValidation: Unsupported value: \"strict\": supported values: \"\", \"Ignore\", \"Strict\", \"Warn\""
        );
        assert_eq!(warning_header("unknown field \"spec.x\""), r#"299 - "unknown field \"spec.x\"""#);
    }
}
