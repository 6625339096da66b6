//! The structural-schema rules of apiextensions-apiserver (`pkg/apiserver/schema`: `convert.go`,
//! `validation.go`, `complete.go`): what a CRD's `openAPIV3Schema` must be for the server to prune, default
//! and publish it.
//!
//! A structural schema specifies a type for every field, says everything about a field's shape outside of
//! the value validations (`allOf`, `anyOf`, `oneOf`, `not`), and keeps generic keywords (`type`,
//! `description`, `default`, `nullable`, `additionalProperties`, the `x-kubernetes-*` extensions) out of
//! them. The two exceptions are the int-or-string forms `anyOf: [{type: integer}, {type: string}]` and
//! `allOf: [{anyOf: [{type: integer}, {type: string}]}, ...]`.
//!
//! # Guarantees
//! - The errors are the ones upstream gives, with the same paths and messages, sorted as upstream sorts them
//!   (by their text).
//! - Never panics on any JSON.

use super::{FieldError, FieldPath};
use serde_json::{Map, Value, json};

/// A schema node.
pub(crate) type Schema = Map<String, Value>;

/// Where a schema node sits: it decides the message when `type` is missing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
    Root,
    Item,
    Field,
}

/// A string keyword of a schema node (`""` when absent).
pub(crate) fn text<'a>(s: &'a Schema, key: &str) -> &'a str {
    s.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// A boolean keyword of a schema node (`false` when absent).
pub(crate) fn flag(s: &Schema, key: &str) -> bool {
    s.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// An object keyword of a schema node.
pub(crate) fn object<'a>(s: &'a Schema, key: &str) -> Option<&'a Schema> {
    s.get(key).and_then(Value::as_object)
}

fn list<'a>(s: &'a Schema, key: &str) -> impl Iterator<Item = (usize, &'a Schema)> {
    s.get(key).and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_object).enumerate()
}

fn properties(s: &Schema) -> impl Iterator<Item = (&String, &Schema)> {
    object(s, "properties").into_iter().flatten().filter_map(|(k, v)| Some((k, v.as_object()?)))
}

fn property<'a>(s: &'a Schema, key: &str) -> Option<&'a Schema> {
    object(s, "properties").and_then(|p| p.get(key)).and_then(Value::as_object)
}

/// Why upstream's `NewStructural` cannot read a schema at all (keywords a CRD schema may not use), if it
/// cannot: `OpenAPIV3Schema '$ref' is not supported`.
pub fn unsupported_field(schema: &Value) -> Option<String> {
    let s = schema.as_object()?;
    for (key, name) in [
        ("id", "id"),
        ("$schema", "schema"),
        ("$ref", "$ref"),
        ("patternProperties", "patternProperties"),
        ("dependencies", "dependencies"),
        ("additionalItems", "additionalItems"),
        ("definitions", "definitions"),
    ] {
        let set = match s.get(key) {
            None | Some(Value::Null) => false,
            Some(Value::String(v)) => !v.is_empty(),
            Some(Value::Object(v)) => !v.is_empty() || key == "additionalItems",
            Some(_) => true,
        };
        if set {
            return Some(format!("OpenAPIV3Schema '{name}' is not supported"));
        }
    }
    if s.get("items").is_some_and(Value::is_array) {
        return Some("OpenAPIV3Schema 'items' must be a schema, but is an array".into());
    }
    if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        return Some("internal error: 'x-kubernetes-preserve-unknown-fields' must be true or undefined".into());
    }
    let children = ["items", "not", "additionalProperties"]
        .into_iter()
        .filter_map(|k| s.get(k))
        .chain(["allOf", "anyOf", "oneOf"].into_iter().flat_map(|k| s.get(k).and_then(Value::as_array)).flatten())
        .chain(object(s, "properties").into_iter().flat_map(|p| p.values()));
    children.filter(|c| c.is_object()).find_map(unsupported_field)
}

/// The structural-schema errors of a CRD schema rooted at `path`; empty when it is structural. Call it only
/// when [`unsupported_field`] found nothing.
pub fn validate_structural(schema: &Value, path: &FieldPath) -> Vec<FieldError> {
    let Some(s) = schema.as_object() else { return Vec::new() };
    let mut errors = Vec::new();
    invariants(s, Level::Root, path, &mut errors);
    value_validation_completeness(s, Some(s), path, path, &mut errors);
    errors.sort_by_key(ToString::to_string);
    errors
}

/// True when a schema is structural.
pub fn is_structural(schema: &Value) -> bool {
    unsupported_field(schema).is_none() && validate_structural(schema, &FieldPath::default()).is_empty()
}

fn int_or_string_any_of(s: &Schema) -> bool {
    s.get("anyOf") == Some(&json!([{"type": "integer"}, {"type": "string"}]))
}

fn invariants(s: &Schema, level: Level, path: &FieldPath, errors: &mut Vec<FieldError>) {
    let ty = text(s, "type");
    if ty == "array" && s.get("items").is_none() {
        errors.push(FieldError::required(&path.child("items"), "must be specified"));
    }
    if let Some(items) = object(s, "items") {
        invariants(items, Level::Item, &path.child("items"), errors);
    }
    for (key, child) in properties(s) {
        invariants(child, Level::Field, &path.child("properties").key(key), errors);
    }
    if let Some(additional) = s.get("additionalProperties") {
        if level == Level::Root {
            errors.push(FieldError::forbidden(&path.child("additionalProperties"), "must not be used at the root"));
        }
        if let Some(additional) = additional.as_object() {
            invariants(additional, Level::Field, &path.child("additionalProperties"), errors);
        }
    }

    let int_or_string = flag(s, "x-kubernetes-int-or-string");
    let preserve = flag(s, "x-kubernetes-preserve-unknown-fields");
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    if int_or_string && preserve {
        errors.push(FieldError::invalid(
            &path.child("x-kubernetes-preserve-unknown-fields"),
            &json!(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
    if int_or_string && embedded {
        errors.push(FieldError::invalid(
            &path.child("x-kubernetes-embedded-resource"),
            &json!(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }

    let skip_any_of = int_or_string_any_of(s);
    let skip_first_all_of_any_of = list(s, "allOf").next().is_some_and(|(_, first)| int_or_string_any_of(first));
    value_validation(s, skip_any_of, skip_first_all_of_any_of, path, errors);

    let check_metadata = level == Level::Root || embedded;
    if embedded && ty != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        errors.push(if ty.is_empty() {
            FieldError::required(&path.child("type"), detail)
        } else {
            FieldError::invalid(&path.child("type"), &json!(ty), detail)
        });
    } else if ty.is_empty() && !int_or_string && !preserve {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        errors.push(FieldError::required(&path.child("type"), detail));
    }
    if embedded && s.get("additionalProperties").is_some() {
        errors.push(FieldError::forbidden(
            &path.child("additionalProperties"),
            "must not be used if x-kubernetes-embedded-resource is set",
        ));
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        errors.push(FieldError::invalid(&path.child("type"), &json!(ty), "must be object at the root"));
    }
    for meta in ["kind", "apiVersion"] {
        if let Some(field) = property(s, meta).filter(|_| check_metadata)
            && text(field, "type") != "string"
        {
            errors.push(FieldError::invalid(
                &path.child("properties").key(meta).child("type"),
                &json!(text(field, "type")),
                "must be string",
            ));
        }
    }
    if let Some(metadata) = property(s, "metadata") {
        metadata_invariants(metadata, check_metadata, level, &path.child("properties").key("metadata"), errors);
    }
    if embedded && !preserve && properties(s).next().is_none() {
        errors.push(FieldError::required(
            &path.child("properties"),
            "must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields",
        ));
    }
}

/// A keyword holds a value Go would see as set (not its zero value: null, `false`, `""`).
pub(crate) fn is_set(value: &Value) -> bool {
    match value {
        Value::Null | Value::Bool(false) => false,
        Value::String(s) => !s.is_empty(),
        _ => true,
    }
}

fn metadata_invariants(s: &Schema, check: bool, level: Level, path: &FieldPath, errors: &mut Vec<FieldError>) {
    if check && text(s, "type") != "object" {
        errors.push(FieldError::invalid(&path.child("type"), &json!(text(s, "type")), "must be object"));
    }
    if level != Level::Root {
        return;
    }
    // Only name and generateName may be restricted; everything else about metadata is implied.
    let names: Vec<&String> = properties(s).map(|(k, _)| k).collect();
    let only_names = !names.is_empty() && names.iter().all(|k| *k == "name" || *k == "generateName");
    let anything_else = s.iter().any(|(key, value)| match key.as_str() {
        "type" | "default" => false,
        "properties" => !only_names && value.as_object().is_some_and(|p| !p.is_empty()),
        _ => is_set(value),
    });
    if anything_else {
        errors.push(FieldError::forbidden(
            path,
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
}

fn value_validation(
    s: &Schema,
    skip_any_of: bool,
    skip_first_all_of_any_of: bool,
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if !skip_any_of {
        for (i, branch) in list(s, "anyOf") {
            nested(branch, false, false, &path.child("anyOf").index(i), errors);
        }
    }
    for (i, branch) in list(s, "allOf") {
        nested(branch, skip_first_all_of_any_of && i == 0, false, &path.child("allOf").index(i), errors);
    }
    for (i, branch) in list(s, "oneOf") {
        nested(branch, false, false, &path.child("oneOf").index(i), errors);
    }
    if let Some(not) = object(s, "not") {
        nested(not, false, false, &path.child("not"), errors);
    }
    let pattern = text(s, "pattern");
    if !pattern.is_empty()
        && let Err(error) = regex::Regex::new(pattern)
    {
        errors.push(FieldError::invalid(
            &path.child("pattern"),
            &json!(pattern),
            &format!("must be a valid regular expression, but isn't: {error}"),
        ));
    }
}

/// A schema inside `allOf`/`anyOf`/`oneOf`/`not`: value validations only.
fn nested(s: &Schema, skip_any_of: bool, skip_all_of_any_of: bool, path: &FieldPath, errors: &mut Vec<FieldError>) {
    value_validation(s, skip_any_of, skip_all_of_any_of, path, errors);
    if let Some(items) = object(s, "items") {
        nested(items, false, false, &path.child("items"), errors);
    }
    for (key, child) in properties(s) {
        nested(child, false, false, &path.child("properties").key(key), errors);
    }
    let forbid = |errors: &mut Vec<FieldError>, key: &str, detail: &str| {
        errors.push(FieldError::forbidden(&path.child(key), detail));
    };
    if !text(s, "type").is_empty() {
        forbid(errors, "type", "must be empty to be structural");
    }
    // `additionalProperties: false` is no value validation (nothing to check), `true` or a schema is.
    if s.get("additionalProperties").is_some_and(|a| a.is_object() || a == &Value::Bool(true)) {
        forbid(errors, "additionalProperties", "must be undefined to be structural");
    }
    if s.get("default").is_some_and(|d| !d.is_null()) {
        forbid(errors, "default", "must be undefined to be structural");
    }
    for key in ["title", "description"] {
        if !text(s, key).is_empty() {
            forbid(errors, key, "must be empty to be structural");
        }
    }
    if flag(s, "nullable") {
        forbid(errors, "nullable", "must be false to be structural");
    }
    for key in ["x-kubernetes-preserve-unknown-fields", "x-kubernetes-embedded-resource", "x-kubernetes-int-or-string"]
    {
        if flag(s, key) {
            forbid(errors, key, "must be false to be structural");
        }
    }
    if s.get("x-kubernetes-list-map-keys").and_then(Value::as_array).is_some_and(|k| !k.is_empty()) {
        forbid(errors, "x-kubernetes-list-map-keys", "must be empty to be structural");
    }
    for key in ["x-kubernetes-list-type", "x-kubernetes-map-type"] {
        if s.get(key).is_some_and(|v| !v.is_null()) {
            forbid(errors, key, "must be undefined to be structural");
        }
    }
    if s.get("x-kubernetes-validations").and_then(Value::as_array).is_some_and(|v| !v.is_empty()) {
        forbid(errors, "x-kubernetes-validations", "must be empty to be structural");
    }
    if property(s, "metadata").is_some() {
        errors.push(FieldError::forbidden(
            &path.child("properties").key("metadata"),
            "must not be specified in a nested context",
        ));
    }
}

/// Every field a value validation names must also be in the structural part (`complete.go`). Upstream checks
/// the value validations of the root schema (and what they contain), not those of nested fields.
fn value_validation_completeness(
    v: &Schema,
    s: Option<&Schema>,
    s_path: &FieldPath,
    v_path: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if s.is_none() {
        errors.push(FieldError::required(s_path, &format!("because it is defined in {v_path}")));
        return;
    }
    if let Some(not) = object(v, "not") {
        nested_completeness(not, s, s_path, &v_path.child("not"), errors);
    }
    for junctor in ["allOf", "anyOf", "oneOf"] {
        for (i, branch) in list(v, junctor) {
            nested_completeness(branch, s, s_path, &v_path.child(junctor).index(i), errors);
        }
    }
}

fn nested_completeness(
    v: &Schema,
    s: Option<&Schema>,
    s_path: &FieldPath,
    v_path: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    let Some(s) = s else {
        errors.push(FieldError::required(s_path, &format!("because it is defined in {v_path}")));
        return;
    };
    value_validation_completeness(v, Some(s), s_path, v_path, errors);
    if let Some(items) = object(v, "items") {
        nested_completeness(items, object(s, "items"), &s_path.child("items"), &v_path.child("items"), errors);
    }
    for (key, child) in properties(v) {
        let s_child = s_path.child("properties").key(key);
        let v_child = v_path.child("properties").key(key);
        match property(s, key) {
            Some(structural) => nested_completeness(child, Some(structural), &s_child, &v_child, errors),
            None => errors.push(FieldError::required(&s_child, &format!("because it is defined in {v_child}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(schema: Value) -> Vec<String> {
        let root = FieldPath::new("spec").child("validation").child("openAPIV3Schema");
        validate_structural(&schema, &root).iter().map(ToString::to_string).collect()
    }

    fn object_with(field: Value) -> Value {
        json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"f": field}}}})
    }

    const F: &str = "spec.validation.openAPIV3Schema.properties[spec].properties[f]";

    #[test]
    fn the_int_or_string_forms_are_structural() {
        let any_of = json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}],
                             "minimum": 1, "pattern": "^[0-9]+%$", "description": "d", "nullable": true});
        assert_eq!(errors(object_with(any_of)), Vec::<String>::new());
        let all_of = json!({"x-kubernetes-int-or-string": true,
            "allOf": [{"anyOf": [{"type": "integer"}, {"type": "string"}]}, {"maxLength": 4}]});
        assert_eq!(errors(object_with(all_of)), Vec::<String>::new());
        assert_eq!(errors(object_with(json!({"x-kubernetes-int-or-string": true}))), Vec::<String>::new());
    }

    #[test]
    fn value_validations_beside_the_types_in_any_of_are_not_structural() {
        // The NodeVersion form that a real API server refused.
        let broken = json!({"x-kubernetes-int-or-string": true, "anyOf": [
            {"type": "integer", "minimum": 1}, {"type": "string", "pattern": "^(100|[1-9][0-9]?)%$"}]});
        assert_eq!(
            errors(object_with(broken)),
            vec![
                format!("{F}.anyOf[0].type: Forbidden: must be empty to be structural"),
                format!("{F}.anyOf[1].type: Forbidden: must be empty to be structural"),
            ]
        );
    }

    #[test]
    fn generic_keywords_and_extensions_are_forbidden_inside_junctors() {
        let junctors = json!({"type": "string", "anyOf": [{"description": "d", "default": "x", "nullable": true,
            "title": "t", "additionalProperties": true}], "oneOf": [{"x-kubernetes-preserve-unknown-fields": true,
            "x-kubernetes-int-or-string": true, "x-kubernetes-embedded-resource": true}],
            "not": {"x-kubernetes-list-type": "set", "x-kubernetes-map-type": "atomic", "x-kubernetes-list-map-keys": ["k"],
                    "x-kubernetes-validations": [{"rule": "true"}], "properties": {"metadata": {}}}});
        assert_eq!(
            errors(object_with(junctors)),
            vec![
                format!("{F}.anyOf[0].additionalProperties: Forbidden: must be undefined to be structural"),
                format!("{F}.anyOf[0].default: Forbidden: must be undefined to be structural"),
                format!("{F}.anyOf[0].description: Forbidden: must be empty to be structural"),
                format!("{F}.anyOf[0].nullable: Forbidden: must be false to be structural"),
                format!("{F}.anyOf[0].title: Forbidden: must be empty to be structural"),
                format!("{F}.not.properties[metadata]: Forbidden: must not be specified in a nested context"),
                format!("{F}.not.x-kubernetes-list-map-keys: Forbidden: must be empty to be structural"),
                format!("{F}.not.x-kubernetes-list-type: Forbidden: must be undefined to be structural"),
                format!("{F}.not.x-kubernetes-map-type: Forbidden: must be undefined to be structural"),
                format!("{F}.not.x-kubernetes-validations: Forbidden: must be empty to be structural"),
                format!("{F}.oneOf[0].x-kubernetes-embedded-resource: Forbidden: must be false to be structural"),
                format!("{F}.oneOf[0].x-kubernetes-int-or-string: Forbidden: must be false to be structural"),
                format!("{F}.oneOf[0].x-kubernetes-preserve-unknown-fields: Forbidden: must be false to be structural"),
            ]
        );
    }

    #[test]
    fn every_specified_field_needs_a_type() {
        let untyped = json!({"properties": {"spec": {"properties": {"list": {"type": "array", "items": {}},
            "bare": {"type": "array"}, "free": {"x-kubernetes-preserve-unknown-fields": true}}}}});
        let root = "spec.validation.openAPIV3Schema";
        assert_eq!(
            errors(untyped),
            vec![
                format!("{root}.properties[spec].properties[bare].items: Required value: must be specified"),
                format!(
                    "{root}.properties[spec].properties[list].items.type: Required value: must not be empty for specified array items"
                ),
                format!("{root}.properties[spec].type: Required value: must not be empty for specified object fields"),
                format!("{root}.type: Required value: must not be empty at the root"),
            ]
        );
        assert_eq!(
            errors(json!({"type": "string"})),
            vec!["spec.validation.openAPIV3Schema.type: Invalid value: \"string\": must be object at the root"]
        );
    }

    #[test]
    fn extensions_must_agree() {
        let both = json!({"type": "object", "x-kubernetes-int-or-string": true,
            "x-kubernetes-preserve-unknown-fields": true, "x-kubernetes-embedded-resource": true});
        assert_eq!(
            errors(object_with(both)),
            vec![
                format!(
                    "{F}.x-kubernetes-embedded-resource: Invalid value: true: must be false if x-kubernetes-int-or-string is true"
                ),
                format!(
                    "{F}.x-kubernetes-preserve-unknown-fields: Invalid value: true: must be false if x-kubernetes-int-or-string is true"
                ),
            ]
        );
        let embedded = json!({"type": "string", "x-kubernetes-embedded-resource": true, "additionalProperties": {"type": "string"}});
        assert_eq!(
            errors(object_with(embedded)),
            vec![
                format!(
                    "{F}.additionalProperties: Forbidden: must not be used if x-kubernetes-embedded-resource is set"
                ),
                format!(
                    "{F}.properties: Required value: must not be empty if x-kubernetes-embedded-resource is true without x-kubernetes-preserve-unknown-fields"
                ),
                format!(
                    "{F}.type: Invalid value: \"string\": must be object if x-kubernetes-embedded-resource is true"
                ),
            ]
        );
    }

    #[test]
    fn metadata_may_only_restrict_name_and_generate_name_at_the_root() {
        let root = "spec.validation.openAPIV3Schema";
        let names = json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 20}, "generateName": {"type": "string"}}}}});
        assert_eq!(errors(names), Vec::<String>::new());
        let labels = json!({"type": "object", "properties": {"metadata": {"type": "object", "properties": {
            "labels": {"type": "object"}}}}});
        assert_eq!(
            errors(labels),
            vec![format!(
                "{root}.properties[metadata]: Forbidden: must not specify anything other than name and generateName, but metadata is implicitly specified"
            )]
        );
        let typed =
            json!({"type": "object", "properties": {"metadata": {"type": "string"}, "kind": {"type": "integer"}}});
        assert_eq!(
            errors(typed),
            vec![
                format!("{root}.properties[kind].type: Invalid value: \"integer\": must be string"),
                format!("{root}.properties[metadata].type: Invalid value: \"string\": must be object"),
            ]
        );
        assert_eq!(
            errors(json!({"type": "object", "additionalProperties": {"type": "string"}})),
            vec![format!("{root}.additionalProperties: Forbidden: must not be used at the root")]
        );
    }

    #[test]
    fn value_validations_at_the_root_must_name_structural_fields() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"a": {"type": "string"}}}},
            "anyOf": [{"properties": {"spec": {"properties": {"b": {"minLength": 1}}}}}, {"required": ["spec"]}]});
        let root = "spec.validation.openAPIV3Schema";
        assert_eq!(
            errors(schema),
            vec![format!(
                "{root}.properties[spec].properties[b]: Required value: because it is defined in {root}.anyOf[0].properties[spec].properties[b]"
            )]
        );
    }

    #[test]
    fn unsupported_keywords_are_named() {
        assert_eq!(
            unsupported_field(&json!({"$ref": "#/x"})).as_deref(),
            Some("OpenAPIV3Schema '$ref' is not supported")
        );
        assert_eq!(
            unsupported_field(&json!({"properties": {"a": {"items": [{"type": "string"}]}}})).as_deref(),
            Some("OpenAPIV3Schema 'items' must be a schema, but is an array")
        );
        assert_eq!(unsupported_field(&json!({"type": "object", "properties": {"a": {"type": "string"}}})), None);
        assert!(is_structural(&json!({"type": "object"})));
        assert!(!is_structural(&json!({})));
    }
}
