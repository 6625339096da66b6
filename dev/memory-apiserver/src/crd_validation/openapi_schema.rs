//! The rules for one `openAPIV3Schema` of a CRD (upstream `validateCustomResourceDefinitionValidation` and
//! `ValidateCustomResourceDefinitionOpenAPISchema`): the root with a status subresource, structurality,
//! defaults, and the keyword and `x-kubernetes-*` rules of every node.

use crate::schema::structural::{Schema, flag, is_set, object, text, unsupported_field, validate_structural};
use crate::schema::{FieldError, FieldPath, prune, validate_value_at};
use serde_json::{Value, json};

/// The types a CRD schema may name, in the order upstream lists them.
const TYPES: [&str; 6] = ["array", "boolean", "integer", "number", "object", "string"];

/// The fields of a root schema with a status subresource may have, by their Go names (upstream
/// `allowedFieldsAtRootSchema`), which the error message lists.
const ALLOWED_AT_ROOT: [&str; 22] = [
    "Description",
    "Type",
    "Format",
    "Title",
    "Maximum",
    "ExclusiveMaximum",
    "Minimum",
    "ExclusiveMinimum",
    "MaxLength",
    "MinLength",
    "Pattern",
    "MaxItems",
    "MinItems",
    "UniqueItems",
    "MultipleOf",
    "Required",
    "Items",
    "Properties",
    "ExternalDocs",
    "Example",
    "XPreserveUnknownFields",
    "XValidations",
];

/// The JSON keys of `JSONSchemaProps` with their Go field names, in the Go struct's order.
const GO_FIELDS: [(&str, &str); 44] = [
    ("id", "ID"),
    ("$schema", "Schema"),
    ("$ref", "Ref"),
    ("description", "Description"),
    ("type", "Type"),
    ("format", "Format"),
    ("title", "Title"),
    ("default", "Default"),
    ("maximum", "Maximum"),
    ("exclusiveMaximum", "ExclusiveMaximum"),
    ("minimum", "Minimum"),
    ("exclusiveMinimum", "ExclusiveMinimum"),
    ("maxLength", "MaxLength"),
    ("minLength", "MinLength"),
    ("pattern", "Pattern"),
    ("maxItems", "MaxItems"),
    ("minItems", "MinItems"),
    ("uniqueItems", "UniqueItems"),
    ("multipleOf", "MultipleOf"),
    ("enum", "Enum"),
    ("maxProperties", "MaxProperties"),
    ("minProperties", "MinProperties"),
    ("required", "Required"),
    ("items", "Items"),
    ("allOf", "AllOf"),
    ("oneOf", "OneOf"),
    ("anyOf", "AnyOf"),
    ("not", "Not"),
    ("properties", "Properties"),
    ("additionalProperties", "AdditionalProperties"),
    ("patternProperties", "PatternProperties"),
    ("dependencies", "Dependencies"),
    ("additionalItems", "AdditionalItems"),
    ("definitions", "Definitions"),
    ("externalDocs", "ExternalDocs"),
    ("example", "Example"),
    ("nullable", "Nullable"),
    ("x-kubernetes-preserve-unknown-fields", "XPreserveUnknownFields"),
    ("x-kubernetes-embedded-resource", "XEmbeddedResource"),
    ("x-kubernetes-int-or-string", "XIntOrString"),
    ("x-kubernetes-list-map-keys", "XListMapKeys"),
    ("x-kubernetes-list-type", "XListType"),
    ("x-kubernetes-map-type", "XMapType"),
    ("x-kubernetes-validations", "XValidations"),
];

/// The `reason`s an `x-kubernetes-validations` rule may give.
const VALIDATION_REASONS: [&str; 4] =
    ["FieldValueDuplicate", "FieldValueForbidden", "FieldValueInvalid", "FieldValueRequired"];

fn is_meta_field(key: &str) -> bool {
    matches!(key, "metadata" | "kind" | "apiVersion")
}

/// Validates the schema at `path` (`spec.validation.openAPIV3Schema`); `status_enabled` when the versions it
/// applies to have a status subresource.
pub fn validate_location(schema: &Value, path: &FieldPath, status_enabled: bool) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let Some(root) = schema.as_object() else { return errors };
    if status_enabled {
        for (key, go_name) in GO_FIELDS {
            let Some(value) = root.get(key).filter(|v| is_set(v)) else { continue };
            if go_name == "Type" {
                if value.as_str() != Some("object") {
                    errors.push(FieldError::invalid(
                        &path.child("type"),
                        value,
                        "only \"object\" is allowed as the type at the root of the schema if the status subresource is enabled",
                    ));
                    break;
                }
                continue;
            }
            if !ALLOWED_AT_ROOT.contains(&go_name) {
                errors.push(FieldError::invalid(
                    path,
                    schema,
                    &format!(
                        "only [{}] fields are allowed at the root of the schema if the status subresource is enabled",
                        ALLOWED_AT_ROOT.join(" ")
                    ),
                ));
                break;
            }
        }
    }
    if flag(root, "nullable") {
        errors.push(FieldError::forbidden(&path.child("nullable"), "nullable cannot be true at the root"));
    }
    // Errors that keep the schema from being read at all overlap with the keyword rules below: upstream shows
    // them only when those found nothing.
    let unreadable = unsupported_field(schema).map(|why| FieldError::invalid(path, &json!(""), &why));
    if unreadable.is_none() {
        let structural = validate_structural(schema, path);
        if structural.is_empty() {
            defaults(root, path, false, true, &mut errors);
        } else {
            errors.extend(structural);
        }
    }
    let validator = Validator { allow_defaults: true, defaults_reason: String::new(), inside_meta: false };
    keywords(root, path, &validator, true, &mut errors);
    if errors.is_empty()
        && let Some(error) = unreadable
    {
        errors.push(error);
    }
    // validation.go compiles the CEL rules only where no schema error was found (their types come from the
    // schema); here only when the whole schema has none.
    if errors.is_empty() {
        errors.extend(crate::crd_cel::schema_errors(schema, path));
    }
    errors
}

/// Defaults must be pruned (no unknown fields) and valid for their schema (upstream `ValidateDefaults`).
/// Follows `properties` and `items`, never `additionalProperties` (defaults are forbidden there).
fn defaults(s: &Schema, path: &FieldPath, inside_meta: bool, resource_root: bool, errors: &mut Vec<FieldError>) {
    let embedded = resource_root || flag(s, "x-kubernetes-embedded-resource");
    let inside_meta = inside_meta && !embedded;
    if let Some(default) = s.get("default").filter(|d| !d.is_null()) {
        let node = Value::Object(s.clone());
        let at = path.child("default");
        if !inside_meta {
            let mut pruned = default.clone();
            prune(&node, &mut pruned, embedded);
            if &pruned != default {
                errors.push(FieldError::invalid(&at, default, "must not have unknown fields"));
            }
        }
        errors.extend(validate_value_at(&node, default, &at));
    }
    if let Some(items) = object(s, "items") {
        defaults(items, &path.child("items"), inside_meta, false, errors);
    }
    for (key, child) in object(s, "properties").into_iter().flatten() {
        let Some(child) = child.as_object() else { continue };
        let child_meta = inside_meta || (embedded && is_meta_field(key));
        defaults(child, &path.child("properties").key(key), child_meta, false, errors);
    }
}

/// What upstream's `specStandardValidatorV3` carries down the schema.
#[derive(Clone)]
struct Validator {
    allow_defaults: bool,
    defaults_reason: String,
    inside_meta: bool,
}

impl Validator {
    fn forbidding_defaults(&self, reason: &str) -> Validator {
        Validator { allow_defaults: false, defaults_reason: reason.to_owned(), ..self.clone() }
    }

    fn in_meta(&self) -> Validator {
        Validator { inside_meta: true, ..self.clone() }
    }

    fn check(&self, s: &Schema, path: &FieldPath, errors: &mut Vec<FieldError>) {
        let ty = text(s, "type");
        if !ty.is_empty() && !TYPES.contains(&ty) {
            errors.push(FieldError::not_supported(&path.child("type"), &json!(ty), &TYPES));
        }
        if s.get("default").is_some_and(|d| !d.is_null()) && !self.allow_defaults {
            let detail = if self.defaults_reason.is_empty() {
                "must not be set".to_owned()
            } else {
                format!("must not be set {}", self.defaults_reason)
            };
            errors.push(FieldError::forbidden(&path.child("default"), &detail));
        }
        if !text(s, "id").is_empty() {
            errors.push(FieldError::forbidden(&path.child("id"), "id is not supported"));
        }
        if s.get("additionalItems").is_some_and(|v| !v.is_null()) {
            errors.push(FieldError::forbidden(&path.child("additionalItems"), "additionalItems is not supported"));
        }
        if object(s, "patternProperties").is_some_and(|p| !p.is_empty()) {
            errors.push(FieldError::forbidden(&path.child("patternProperties"), "patternProperties is not supported"));
        }
        if object(s, "definitions").is_some_and(|p| !p.is_empty()) {
            errors.push(FieldError::forbidden(&path.child("definitions"), "definitions is not supported"));
        }
        if s.get("dependencies").is_some_and(|v| !v.is_null()) {
            errors.push(FieldError::forbidden(&path.child("dependencies"), "dependencies is not supported"));
        }
        if s.get("$ref").is_some_and(|v| !v.is_null()) {
            errors.push(FieldError::forbidden(&path.child("$ref"), "$ref is not supported"));
        }
        if ty == "null" {
            errors.push(FieldError::forbidden(
                &path.child("type"),
                "type cannot be set to null, use nullable as an alternative",
            ));
        }
        if s.get("items").is_some_and(Value::is_array) {
            errors.push(FieldError::forbidden(&path.child("items"), "items must be a schema object and not an array"));
        }
        if self.inside_meta && flag(s, "x-kubernetes-embedded-resource") {
            errors.push(FieldError::forbidden(
                &path.child("x-kubernetes-embedded-resource"),
                "must not be used inside of resource meta",
            ));
        }
    }
}

fn each_schema(value: Option<&Value>) -> impl Iterator<Item = (usize, &Schema)> {
    value.and_then(Value::as_array).into_iter().flatten().filter_map(Value::as_object).enumerate()
}

/// Upstream `ValidateCustomResourceDefinitionOpenAPISchema`, without compiling CEL.
fn keywords(s: &Schema, path: &FieldPath, validator: &Validator, root: bool, errors: &mut Vec<FieldError>) {
    validator.check(s, path, errors);
    if flag(s, "uniqueItems") {
        errors.push(FieldError::forbidden(
            &path.child("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    let has_properties = object(s, "properties").is_some_and(|p| !p.is_empty());
    if let Some(additional) = s.get("additionalProperties").filter(|a| !a.is_null()) {
        if has_properties && (additional.is_object() || additional == &Value::Bool(false)) {
            errors.push(FieldError::forbidden(
                &path.child("additionalProperties"),
                "additionalProperties and properties are mutual exclusive",
            ));
        }
        let sub = if validator.inside_meta {
            validator.forbidding_defaults("inside additionalProperties applying to object metadata")
        } else {
            validator.clone()
        };
        if let Some(additional) = additional.as_object() {
            keywords(additional, &path.child("additionalProperties"), &sub, false, errors);
        }
    }
    let embedded = flag(s, "x-kubernetes-embedded-resource");
    for (key, child) in object(s, "properties").into_iter().flatten() {
        let Some(child) = child.as_object() else { continue };
        let mut sub = validator.clone();
        if (root || embedded) && is_meta_field(key) {
            sub = sub.in_meta();
            if root {
                sub = sub.forbidding_defaults(&format!("in top-level {key}"));
            }
        }
        keywords(child, &path.child("properties").key(key), &sub, false, errors);
    }
    if let Some(not) = object(s, "not") {
        keywords(not, &path.child("not"), validator, false, errors);
    }
    for junctor in ["allOf", "oneOf", "anyOf"] {
        for (i, branch) in each_schema(s.get(junctor)) {
            keywords(branch, &path.child(junctor).index(i), validator, false, errors);
        }
    }
    for (key, definition) in object(s, "definitions").into_iter().flatten() {
        if let Some(definition) = definition.as_object() {
            keywords(definition, &path.child("definitions").key(key), validator, false, errors);
        }
    }
    match s.get("items") {
        Some(Value::Object(items)) => keywords(items, &path.child("items"), validator, false, errors),
        Some(Value::Array(_)) => {
            for (i, items) in each_schema(s.get("items")) {
                keywords(items, &path.child("items").index(i), validator, false, errors);
            }
        }
        _ => {}
    }
    for (key, dependency) in object(s, "dependencies").into_iter().flatten() {
        if let Some(dependency) = dependency.as_object() {
            keywords(dependency, &path.child("dependencies").key(key), validator, false, errors);
        }
    }
    extensions(s, path, errors);
}

fn extensions(s: &Schema, path: &FieldPath, errors: &mut Vec<FieldError>) {
    let ty = text(s, "type");
    if s.get("x-kubernetes-preserve-unknown-fields") == Some(&Value::Bool(false)) {
        errors.push(FieldError::invalid(
            &path.child("x-kubernetes-preserve-unknown-fields"),
            &json!(false),
            "must be true or undefined",
        ));
    }
    let type_must_be = |errors: &mut Vec<FieldError>, wanted: &str, because: &str| {
        let detail = format!("must be {wanted} if {because} is specified");
        errors.push(if ty.is_empty() {
            FieldError::required(&path.child("type"), &detail)
        } else {
            FieldError::invalid(&path.child("type"), &json!(ty), &detail)
        });
    };
    if let Some(map_type) = s.get("x-kubernetes-map-type").and_then(Value::as_str) {
        if ty != "object" {
            type_must_be(errors, "object", "x-kubernetes-map-type");
        }
        if map_type != "atomic" && map_type != "granular" {
            errors.push(FieldError::not_supported(
                &path.child("x-kubernetes-map-type"),
                &json!(map_type),
                &["atomic", "granular"],
            ));
        }
    }
    let list_type = s.get("x-kubernetes-list-type").and_then(Value::as_str);
    let items = object(s, "items");
    if let Some(list_type) = list_type {
        if ty != "array" {
            type_must_be(errors, "array", "x-kubernetes-list-type");
        } else if list_type == "set"
            && let Some(items) = items
        {
            let set_detail = "must be atomic as item of a list with x-kubernetes-list-type=set";
            match text(items, "type") {
                "array" => {
                    if let Some(inner) = items.get("x-kubernetes-list-type").and_then(Value::as_str)
                        && inner != "atomic"
                    {
                        let at = path.child("items").child("x-kubernetes-list-type");
                        errors.push(FieldError::invalid(&at, &json!(inner), set_detail));
                    }
                }
                "object" if items.get("x-kubernetes-map-type").and_then(Value::as_str) != Some("atomic") => {
                    // Upstream prints the items' list type here (nil), not their map type.
                    let at = path.child("items").child("x-kubernetes-map-type");
                    let shown = items.get("x-kubernetes-list-type").cloned().unwrap_or(Value::Null);
                    errors.push(FieldError::invalid(&at, &shown, set_detail));
                }
                _ => {}
            }
        }
        if !matches!(list_type, "atomic" | "set" | "map") {
            errors.push(FieldError::not_supported(
                &path.child("x-kubernetes-list-type"),
                &json!(list_type),
                &["atomic", "set", "map"],
            ));
        }
    }
    let keys: Vec<&str> = s
        .get("x-kubernetes-list-map-keys")
        .and_then(Value::as_array)
        .map(|k| k.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if !keys.is_empty() {
        let detail = "must be map if x-kubernetes-list-map-keys is non-empty";
        match list_type {
            None => errors.push(FieldError::required(&path.child("x-kubernetes-list-type"), detail)),
            Some(t) if t != "map" => {
                errors.push(FieldError::invalid(&path.child("x-kubernetes-list-type"), &json!(t), detail))
            }
            Some(_) => {}
        }
    }
    if list_type == Some("map") {
        map_list(s, &keys, path, errors);
    }
    if let Some(list_type @ ("set" | "map")) = list_type
        && let Some(items) = items
    {
        map_list_keys_and_set(items, list_type, &keys, path, errors);
    }
    validation_rules(s, path, errors);
}

fn map_list(s: &Schema, keys: &[&str], path: &FieldPath, errors: &mut Vec<FieldError>) {
    if keys.is_empty() {
        errors.push(FieldError::required(
            &path.child("x-kubernetes-list-map-keys"),
            "must not be empty if x-kubernetes-list-type is map",
        ));
    }
    let Some(items) = s.get("items") else {
        errors.push(FieldError::required(&path.child("items"), "must have a schema if x-kubernetes-list-type is map"));
        return;
    };
    let Some(items) = items.as_object() else {
        errors.push(FieldError::invalid(
            &path.child("items"),
            items,
            "must only have a single schema if x-kubernetes-list-type is map",
        ));
        return;
    };
    let items_type = text(items, "type");
    if items_type != "object" {
        errors.push(FieldError::invalid(
            &path.child("items").child("type"),
            &json!(items_type),
            "must be object if parent array's x-kubernetes-list-type is map",
        ));
        return;
    }
    let mut seen = Vec::new();
    for key in keys {
        match object(items, "properties").and_then(|p| p.get(*key)).and_then(Value::as_object) {
            Some(property) => {
                if matches!(text(property, "type"), "array" | "object") {
                    errors.push(FieldError::invalid(
                        &path.child("items").child("properties").key(key).child("type"),
                        &json!(items_type),
                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                    ));
                }
            }
            None => errors.push(FieldError::invalid(
                &path.child("x-kubernetes-list-map-keys"),
                &json!(keys),
                "entries must all be names of item properties",
            )),
        }
        if seen.contains(key) {
            errors.push(FieldError::invalid(
                &path.child("x-kubernetes-list-map-keys"),
                &json!(keys),
                "must not contain duplicate entries",
            ));
        }
        seen.push(*key);
    }
}

/// Items of set and map lists are not nullable; map keys are required or defaulted, and not nullable.
fn map_list_keys_and_set(
    items: &Schema,
    list_type: &str,
    keys: &[&str],
    path: &FieldPath,
    errors: &mut Vec<FieldError>,
) {
    if flag(items, "nullable") {
        errors.push(FieldError::forbidden(
            &path.child("items").child("nullable"),
            &format!("cannot be nullable when x-kubernetes-list-type is {list_type}"),
        ));
    }
    if list_type != "map" {
        return;
    }
    let required: Vec<&str> = items
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    for key in keys {
        let Some(property) = object(items, "properties").and_then(|p| p.get(*key)).and_then(Value::as_object) else {
            continue;
        };
        let at = path.child("items").child("properties").key(key);
        if !required.contains(key) && property.get("default").is_none_or(Value::is_null) {
            errors.push(FieldError::required(
                &at.child("default"),
                "this property is in x-kubernetes-list-map-keys, so it must have a default or be a required property",
            ));
        }
        if flag(property, "nullable") {
            errors.push(FieldError::forbidden(
                &at.child("nullable"),
                "this property is in x-kubernetes-list-map-keys, so it cannot be nullable",
            ));
        }
    }
}

fn has_newlines(text: &str) -> bool {
    text.contains('\n') || text.contains('\r')
}

/// The form of `x-kubernetes-validations` rules (their CEL is compiled in [`crate::crd_cel::compile`]).
fn validation_rules(s: &Schema, path: &FieldPath, errors: &mut Vec<FieldError>) {
    for (i, rule) in s.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let at = path.child("x-kubernetes-validations").index(i);
        let field = |key: &str| rule.get(key).and_then(Value::as_str).unwrap_or_default();
        let (expression, message, message_expression) = (field("rule"), field("message"), field("messageExpression"));
        if expression.trim().is_empty() {
            errors.push(FieldError::required(&at.child("rule"), "rule is not specified"));
        } else if !message.is_empty() && message.trim().is_empty() {
            errors.push(FieldError::invalid(
                &at.child("message"),
                &json!(message),
                "message must be non-empty if specified",
            ));
        } else if has_newlines(message.trim()) {
            errors.push(FieldError::invalid(
                &at.child("message"),
                &json!(message),
                "message must not contain line breaks",
            ));
        } else if has_newlines(expression.trim()) && message.trim().is_empty() {
            errors.push(FieldError::required(
                &at.child("message"),
                "message must be specified if rule contains line breaks",
            ));
        }
        if !message_expression.is_empty() && message_expression.trim().is_empty() {
            errors.push(FieldError::required(
                &at.child("messageExpression"),
                "messageExpression must be non-empty if specified",
            ));
        }
        if let Some(reason) = rule.get("reason").and_then(Value::as_str)
            && !VALIDATION_REASONS.contains(&reason)
        {
            errors.push(FieldError::not_supported(&at.child("reason"), &json!(reason), &VALIDATION_REASONS));
        }
        let field_path = field("fieldPath");
        if !field_path.is_empty() && field_path.trim().is_empty() {
            errors.push(FieldError::invalid(
                &at.child("fieldPath"),
                &json!(field_path),
                "fieldPath must be non-empty if specified",
            ));
        }
        if has_newlines(field_path) {
            errors.push(FieldError::invalid(
                &at.child("fieldPath"),
                &json!(field_path),
                "fieldPath must not contain line breaks",
            ));
        }
        if !field_path.is_empty() && !field_path_valid(s, field_path) {
            errors.push(FieldError::invalid(
                &at.child("fieldPath"),
                &json!(field_path),
                "fieldPath must be a valid path",
            ));
        }
    }
}

/// A rule's `fieldPath` (`.spec.replicas`, `.labels['app']`) names fields of the schema (`cel.ValidFieldPath`:
/// `[...]` takes a single-quoted property or map key, never a list index).
fn field_path_valid(s: &Schema, field_path: &str) -> bool {
    let mut node = s;
    let mut rest = field_path;
    while !rest.is_empty() {
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            let (name, tail) = after.split_at(end);
            if name.is_empty() {
                return false;
            }
            node = match object(node, "properties").and_then(|p| p.get(name)).and_then(Value::as_object) {
                Some(child) => child,
                None => return false,
            };
            rest = tail;
        } else if let Some(after) = rest.strip_prefix('[') {
            let Some(end) = after.find(']') else { return false };
            let inside = &after[..end];
            node = if inside.starts_with('\'') {
                let key = inside.trim_matches('\'');
                match object(node, "properties").and_then(|p| p.get(key)).and_then(Value::as_object) {
                    Some(child) => child,
                    None => match object(node, "additionalProperties") {
                        Some(child) => child,
                        None => return false,
                    },
                }
            } else {
                return false;
            };
            rest = &after[end + 1..];
        } else {
            return false;
        }
    }
    true
}
