//! Validation of a value against an OpenAPI v3 schema, with the messages kube-openapi's validator gives.
//!
//! Covers the keywords structural schemas use: `type`, `properties`, `required`,
//! `additionalProperties`, `items`, `enum`, `minimum`/`maximum` (and their `exclusive*` flags),
//! `minLength`/`maxLength`, `pattern`, `minItems`/`maxItems`, `format: date-time`, `nullable`,
//! `allOf`/`anyOf`/`oneOf` and `x-kubernetes-int-or-string`. Like kube-openapi, a keyword applies only to the
//! values it is about: `minimum` to numbers, `pattern` to strings (so an int-or-string field may carry both).
//!
//! # Guarantees
//! - Never panics, whatever the schema or the value: a keyword of the wrong type is ignored, as
//!   the schema was accepted when the CRD was created.
//! - Errors come in document order and carry the JSON path the API server prints (`spec.min`,
//!   `spec.items[2].name`).

use super::{ErrorKind, FieldError, FieldPath};
use regex::Regex;
use serde_json::{Map, Value};

/// Checks `object` against `schema`. An empty result means valid. Errors at the root are reported on the
/// field `<root>`.
pub fn validate(schema: &Value, object: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_at(schema, object, None, &mut String::new(), "<root>", &mut errors);
    errors
}

/// Checks an update of `old` to `object` with validation ratcheting (GA in 1.30; kubernetes/kubernetes
/// `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/validation/ratcheting.go`): the errors of a value
/// equal to the old value correlated with it are not reported (upstream turns them into warnings). Old values are
/// correlated through properties and map values, map-list items by their keys and other lists by index, except
/// `x-kubernetes-list-type: set` and `atomic` lists; below a value that cannot be correlated every error counts.
pub fn validate_update(schema: &Value, object: &Value, old: &Value) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_at(schema, object, Some(old), &mut String::new(), "<root>", &mut errors);
    errors
}

/// The old item correlated with `item`, the `index`th of a list of `schema` (`correlateOldValueForChildAtNewIndex`).
fn correlated_item<'a>(
    schema: &Map<String, Value>,
    old: Option<&'a Value>,
    item: &Value,
    index: usize,
) -> Option<&'a Value> {
    let old = old?.as_array()?;
    match schema.get("x-kubernetes-list-type").and_then(Value::as_str) {
        Some("map") => {
            let keys: Vec<&str> = schema
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .map(|k| k.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            old.iter().find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k)))
        }
        Some("set") | Some("atomic") => None,
        _ => old.get(index),
    }
}

/// Checks a value that sits at `base` (a schema's `default`, say) against `schema`. The errors carry `base`
/// plus the path inside the value; their messages name the path inside the value, as kube-openapi's messages
/// do for a validator rooted at the value (` in body should be ...` at its root).
pub fn validate_value_at(schema: &Value, value: &Value, base: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    validate_at(schema, value, None, &mut String::new(), "", &mut errors);
    for error in &mut errors {
        error.field = if error.field.is_empty() {
            base.to_string()
        } else if error.field.starts_with('[') {
            format!("{base}{}", error.field)
        } else {
            base.child(&error.field).to_string()
        };
    }
    errors
}

fn flag(schema: &Map<String, Value>, key: &str) -> bool {
    schema.get(key).and_then(Value::as_bool).unwrap_or(false)
}

fn describe(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Object(_) => "\"object\"".into(),
        Value::Array(_) => "\"array\"".into(),
        other => other.to_string(),
    }
}

fn type_name(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

fn has_type(value: &Value, wanted: &str) -> bool {
    match wanted {
        "number" => value.is_number(),
        "integer" => value.as_i64().is_some() || value.as_u64().is_some(),
        other => type_name(value) == other,
    }
}

fn validate_at(
    schema: &Value,
    value: &Value,
    old: Option<&Value>,
    path: &mut String,
    root: &str,
    errors: &mut Vec<FieldError>,
) {
    let Some(schema) = schema.as_object() else { return };
    if old == Some(value) {
        // Ratcheting: nothing found in a value equal to its old value counts.
        return;
    }
    let field = if path.is_empty() { root.to_owned() } else { path.clone() };
    let push = |errors: &mut Vec<FieldError>, kind, message: String| {
        errors.push(FieldError { field: field.clone(), kind, message });
    };

    if value.is_null() {
        if !flag(schema, "nullable") && schema.contains_key("type") {
            push(
                errors,
                ErrorKind::TypeInvalid,
                format!("Invalid value: \"null\": {field} in body must be of type {}: \"null\"", schema_type(schema)),
            );
        }
        return;
    }
    if flag(schema, "x-kubernetes-int-or-string") {
        if !(has_type(value, "integer") || value.is_string()) {
            push(
                errors,
                ErrorKind::TypeInvalid,
                format!(
                    "Invalid value: {}: {field} in body must be of type integer,string: {:?}",
                    describe(value),
                    type_name(value)
                ),
            );
            return;
        }
    } else if let Some(wanted) = schema.get("type").and_then(Value::as_str)
        && !has_type(value, wanted)
    {
        push(
            errors,
            ErrorKind::TypeInvalid,
            format!(
                "Invalid value: {}: {field} in body must be of type {wanted}: {:?}",
                describe(value),
                type_name(value)
            ),
        );
        return;
    }

    if let Some(allowed) = schema.get("enum").and_then(Value::as_array)
        && !allowed.contains(value)
    {
        let list: Vec<String> = allowed.iter().map(|v| v.to_string()).collect();
        push(
            errors,
            ErrorKind::NotSupported,
            format!("Unsupported value: {}: supported values: {}", value, list.join(", ")),
        );
    }

    match value {
        Value::String(s) => {
            let chars = s.chars().count() as u64;
            if let Some(min) = schema.get("minLength").and_then(Value::as_u64)
                && chars < min
            {
                push(
                    errors,
                    ErrorKind::Invalid,
                    format!("Invalid value: {s:?}: {field} in body should be at least {min} chars long"),
                );
            }
            if let Some(max) = schema.get("maxLength").and_then(Value::as_u64)
                && chars > max
            {
                push(errors, ErrorKind::TooLong, format!("Too long: may not be more than {max} bytes"));
            }
            if let Some(pattern) = schema.get("pattern").and_then(Value::as_str)
                && let Ok(re) = Regex::new(pattern)
                && !re.is_match(s)
            {
                push(
                    errors,
                    ErrorKind::Invalid,
                    format!("Invalid value: {s:?}: {field} in body should match '{pattern}'"),
                );
            }
            if schema.get("format").and_then(Value::as_str) == Some("date-time")
                && s.parse::<jiff::Timestamp>().is_err()
            {
                push(
                    errors,
                    ErrorKind::TypeInvalid,
                    format!("Invalid value: {s:?}: {field} in body must be of type date-time: {s:?}"),
                );
            }
        }
        Value::Number(n) => {
            let x = n.as_f64().unwrap_or(0.0);
            if let Some(min) = schema.get("minimum").and_then(Value::as_f64) {
                let exclusive = flag(schema, "exclusiveMinimum");
                if x < min || (exclusive && x == min) {
                    let op = if exclusive { "greater than" } else { "greater than or equal to" };
                    push(
                        errors,
                        ErrorKind::Invalid,
                        format!("Invalid value: {n}: {field} in body should be {op} {}", number(min)),
                    );
                }
            }
            if let Some(max) = schema.get("maximum").and_then(Value::as_f64) {
                let exclusive = flag(schema, "exclusiveMaximum");
                if x > max || (exclusive && x == max) {
                    let op = if exclusive { "less than" } else { "less than or equal to" };
                    push(
                        errors,
                        ErrorKind::Invalid,
                        format!("Invalid value: {n}: {field} in body should be {op} {}", number(max)),
                    );
                }
            }
        }
        Value::Array(items) => {
            if let Some(min) = schema.get("minItems").and_then(Value::as_u64)
                && (items.len() as u64) < min
            {
                push(
                    errors,
                    ErrorKind::Invalid,
                    format!("Invalid value: {}: {field} in body should have at least {min} items", items.len()),
                );
            }
            if let Some(max) = schema.get("maxItems").and_then(Value::as_u64)
                && (items.len() as u64) > max
            {
                push(errors, ErrorKind::TooMany, format!("Too many: {}: must have at most {max} items", items.len()));
            }
            if let Some(sub) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    let len = path.len();
                    path.push_str(&format!("[{i}]"));
                    validate_at(sub, item, correlated_item(schema, old, item, i), path, root, errors);
                    path.truncate(len);
                }
            }
        }
        Value::Object(fields) => {
            if let Some(required) = schema.get("required").and_then(Value::as_array) {
                for key in required.iter().filter_map(Value::as_str) {
                    if fields.get(key).is_none_or(Value::is_null) {
                        let child = join(path, key);
                        errors.push(FieldError {
                            field: child,
                            kind: ErrorKind::Required,
                            message: "Required value".into(),
                        });
                    }
                }
            }
            let properties = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties").filter(|a| a.is_object());
            for (key, v) in fields {
                if path.is_empty() && matches!(key.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                let Some(sub) = properties.and_then(|p| p.get(key)).or(additional) else { continue };
                let len = path.len();
                if !path.is_empty() {
                    path.push('.');
                }
                path.push_str(key);
                validate_at(sub, v, old.and_then(|o| o.get(key)), path, root, errors);
                path.truncate(len);
            }
        }
        Value::Bool(_) | Value::Null => {}
    }

    for combinator in ["allOf", "anyOf", "oneOf"] {
        let Some(branches) = schema.get(combinator).and_then(Value::as_array) else { continue };
        let results: Vec<Vec<FieldError>> = branches
            .iter()
            .map(|branch| {
                let mut branch_errors = Vec::new();
                validate_at(branch, value, old, &mut path.clone(), root, &mut branch_errors);
                branch_errors
            })
            .collect();
        match combinator {
            "allOf" => results.into_iter().for_each(|r| errors.extend(r)),
            _ => {
                let passing = results.iter().filter(|r| r.is_empty()).count();
                // When exactly one branch is for the value's type (int-or-string fields), its
                // errors say more than "must match anyOf".
                let typed: Vec<&Vec<FieldError>> = branches
                    .iter()
                    .zip(&results)
                    .filter(|(b, _)| b.get("type").and_then(Value::as_str).is_some_and(|t| has_type(value, t)))
                    .map(|(_, r)| r)
                    .collect();
                if passing == 0 && typed.len() == 1 && !typed[0].is_empty() {
                    errors.extend(typed[0].iter().cloned());
                } else if passing == 0 || (combinator == "oneOf" && passing > 1) {
                    push(
                        errors,
                        ErrorKind::Invalid,
                        format!("Invalid value: {}: {field} in body must match {combinator}", describe(value)),
                    );
                }
            }
        }
    }
}

fn schema_type(schema: &Map<String, Value>) -> &str {
    schema.get("type").and_then(Value::as_str).unwrap_or("object")
}

fn number(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 { format!("{}", x as i64) } else { x.to_string() }
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() { key.to_owned() } else { format!("{path}.{key}") }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn schema() -> Value {
        json!({
            "type": "object",
            "required": ["spec"],
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["image", "goal"],
                    "properties": {
                        "image": {"type": "string", "minLength": 1, "maxLength": 10},
                        "goal": {"type": "string", "enum": ["Join", "Leave"]},
                        "min": {"type": "integer", "format": "int32", "minimum": 0.0},
                        "deadline": {"type": "string", "format": "date-time", "nullable": true},
                        "name": {"type": "string", "pattern": "^[a-z]+$"},
                        "surge": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                        "tags": {"type": "array", "maxItems": 2, "items": {"type": "string", "minLength": 1}},
                        "args": {"type": "object", "additionalProperties": {"type": "string"}},
                        "mode": {"type": "string", "default": "Auto"},
                        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}
                    }
                }
            }
        })
    }

    fn errors(object: Value) -> Vec<String> {
        validate(&schema(), &object).iter().map(ToString::to_string).collect()
    }

    #[test]
    fn a_valid_object_has_no_errors() {
        let ok = json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "a"},
            "spec": {"image": "img", "goal": "Join", "min": 0, "deadline": "2022-07-04T08:33:18+00:00",
                     "name": "abc", "surge": "10%", "tags": ["a"], "args": {"k": "v"}}});
        assert_eq!(errors(ok), Vec::<String>::new());
    }

    #[test]
    fn each_keyword_reports_the_api_server_message() {
        let bad = json!({"spec": {"image": "", "goal": "Explode", "min": -1, "deadline": "tomorrow",
            "name": "ABC", "surge": true, "tags": ["", "b", "c"], "args": {"k": 1}}});
        assert_eq!(
            errors(bad),
            vec![
                "spec.args.k: Invalid value: 1: spec.args.k in body must be of type string: \"integer\"",
                "spec.deadline: Invalid value: \"tomorrow\": spec.deadline in body must be of type date-time: \"tomorrow\"",
                "spec.goal: Unsupported value: \"Explode\": supported values: \"Join\", \"Leave\"",
                "spec.image: Invalid value: \"\": spec.image in body should be at least 1 chars long",
                "spec.min: Invalid value: -1: spec.min in body should be greater than or equal to 0",
                "spec.name: Invalid value: \"ABC\": spec.name in body should match '^[a-z]+$'",
                "spec.surge: Invalid value: true: spec.surge in body must be of type integer,string: \"boolean\"",
                "spec.tags: Too many: 3: must have at most 2 items",
                "spec.tags[0]: Invalid value: \"\": spec.tags[0] in body should be at least 1 chars long",
            ]
        );
    }

    #[test]
    fn missing_required_fields_and_wrong_types_are_reported() {
        assert_eq!(errors(json!({})), vec!["spec: Required value"]);
        assert_eq!(
            errors(json!({"spec": {"image": "0123456789a"}})),
            vec!["spec.goal: Required value", "spec.image: Too long: may not be more than 10 bytes"]
        );
        assert_eq!(
            errors(json!({"spec": "x"})),
            vec!["spec: Invalid value: \"x\": spec in body must be of type object: \"string\""]
        );
        assert_eq!(
            errors(json!({"spec": {"image": "a", "goal": "Join", "min": 1.5}})),
            vec!["spec.min: Invalid value: 1.5: spec.min in body must be of type integer: \"number\""]
        );
    }

    #[test]
    fn a_value_at_a_base_path_reports_the_base_and_names_itself_relative() {
        let schema = json!({"type": "object", "properties": {"n": {"type": "integer", "minimum": 1}}});
        let base = FieldPath::new("spec").child("default");
        let errors: Vec<String> =
            validate_value_at(&schema, &json!({"n": 0}), &base).iter().map(ToString::to_string).collect();
        assert_eq!(errors, vec!["spec.default.n: Invalid value: 0: n in body should be greater than or equal to 1"]);
        let errors: Vec<String> =
            validate_value_at(&schema, &json!("x"), &base).iter().map(ToString::to_string).collect();
        assert_eq!(errors, vec!["spec.default: Invalid value: \"x\":  in body must be of type object: \"string\""]);
    }

    #[test]
    fn int_or_string_fields_apply_minimum_to_numbers_and_pattern_to_strings() {
        let schema = json!({"type": "object", "properties": {"m": {"x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}], "minimum": 1, "pattern": "^[0-9]+%$"}}});
        assert!(validate(&schema, &json!({"m": 3})).is_empty());
        assert!(validate(&schema, &json!({"m": "10%"})).is_empty());
        let errors: Vec<String> = validate(&schema, &json!({"m": 0})).iter().map(ToString::to_string).collect();
        assert_eq!(errors, vec!["m: Invalid value: 0: m in body should be greater than or equal to 1"]);
        let errors: Vec<String> = validate(&schema, &json!({"m": "ten"})).iter().map(ToString::to_string).collect();
        assert_eq!(errors, vec!["m: Invalid value: \"ten\": m in body should match '^[0-9]+%$'"]);
    }

    /// ratcheting.go: only values equal to their correlated old value are excused.
    #[test]
    fn updates_are_ratcheted_per_correlated_value() {
        let schema = json!({"type": "object", "properties": {
            "name": {"type": "string", "maxLength": 3},
            "byIndex": {"type": "array", "items": {"type": "string", "maxLength": 3}},
            "set": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string", "maxLength": 3}},
            "byKey": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"],
                "items": {"type": "object", "required": ["k"], "properties": {"k": {"type": "string"}, "v": {"type": "string", "maxLength": 3}}}},
            "map": {"type": "object", "additionalProperties": {"type": "string", "maxLength": 3}}}});
        let old = json!({"name": "long", "byIndex": ["long"], "set": ["long"], "byKey": [{"k": "a", "v": "long"}],
            "map": {"a": "long"}});
        let fields =
            |new: Value| -> Vec<String> { validate_update(&schema, &new, &old).into_iter().map(|e| e.field).collect() };
        // Unchanged: nothing. A set's items are never correlated, but the unchanged set itself is.
        assert!(fields(old.clone()).is_empty());
        assert!(
            fields(json!({"name": "long", "byIndex": ["long", "ok"], "set": ["long"], "map": {"a": "long", "b": "ok"},
            "byKey": [{"k": "b", "v": "ok"}, {"k": "a", "v": "long"}]}))
            .is_empty()
        );
        // Changed or new invalid values, and a set that changed, are reported.
        assert_eq!(
            fields(json!({"name": "longer", "byIndex": ["ok", "long"], "set": ["long", "ok"],
                "byKey": [{"k": "b", "v": "long"}], "map": {"a": "long", "b": "long"}})),
            vec!["byIndex[1]", "byKey[0].v", "map.b", "name", "set[0]"]
        );
    }

    #[test]
    fn malformed_schemas_do_not_panic() {
        for schema in
            [json!(null), json!({"type": 3}), json!({"pattern": "("}), json!({"properties": []}), json!({"items": 1})]
        {
            let _ = validate(&schema, &json!({"a": [1, "b", null]}));
        }
    }
}
