//! The validation a `apiextensions.k8s.io/v1` CustomResourceDefinition gets on create and update, as
//! apiextensions-apiserver's `pkg/apis/apiextensions/validation` does it.
//!
//! Upstream validates the internal form of a CRD: per-version schemas, subresources, printer columns and
//! selectable fields that are identical in every version are moved to the top level first, so the errors of a
//! one-version CRD name `spec.validation.openAPIV3Schema...`, `spec.subresources...` and
//! `spec.additionalPrinterColumns[i]...`. This module does the same.
//!
//! # Guarantees
//! - The errors are upstream's, with its paths and messages (values of objects and lists are printed as JSON
//!   where Go prints its struct syntax).
//! - Every CRD the dev server admits is structural, has pruned and valid defaults, and passes upstream's
//!   OpenAPI-schema rules; `x-kubernetes-validations` rules are checked for form, not compiled (the dev server
//!   does not evaluate CEL).
//! - Conversion strategy `Webhook` is refused (the dev server has no webhooks), a deliberate deviation.
//!
//! # Assumptions
//! - The CRD went through the k8s-openapi type (wrong field types are a 400 before this runs).
//! - Upstream relaxes a rule on update when the stored CRD already broke it; the dev server never stores such a
//!   CRD, so every rule applies on update too.

mod openapi_schema;

use crate::resource::strategy::SUBDOMAIN_MESSAGE;
use crate::schema::{FieldError, FieldPath};
use crate::selector::label::is_dns_subdomain;
use serde_json::{Value, json};
use std::collections::BTreeSet;

/// At most this many selectable fields per version (upstream `MaxSelectableFields`).
const MAX_SELECTABLE_FIELDS: usize = 8;

const DNS1035_MESSAGE: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

const APPROVAL_ANNOTATION: &str = "api-approved.kubernetes.io";

/// The printer column types and formats upstream accepts, in the order its messages list them.
const COLUMN_TYPES: [&str; 5] = ["boolean", "date", "integer", "number", "string"];
const COLUMN_FORMATS: [&str; 8] = ["byte", "date", "date-time", "double", "float", "int32", "int64", "password"];

fn text<'a>(value: &'a Value, pointer: &str) -> &'a str {
    value.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn array<'a>(value: &'a Value, pointer: &str) -> &'a [Value] {
    value.pointer(pointer).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

/// `utilvalidation.IsDNS1035Label`: the messages, empty when valid.
fn dns1035_label(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > 63 {
        errors.push("must be no more than 63 characters".to_owned());
    }
    let bytes = value.as_bytes();
    let valid = bytes.first().is_some_and(u8::is_ascii_lowercase)
        && bytes.last().is_some_and(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.iter().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || *b == b'-');
    if !valid {
        errors.push(DNS1035_MESSAGE.to_owned());
    }
    errors
}

/// One place the internal form keeps a per-version concern: the top level (identical in every version) or
/// each version.
struct Placement<'a> {
    /// `spec.validation` / `spec.versions[i].schema` and the value there.
    locations: Vec<(FieldPath, Option<&'a Value>, Option<&'a str>)>,
}

/// Moves a per-version field to the top level when every version has the same value, as upstream's v1 to
/// internal conversion does; `top` is the top-level name (`validation`), `field` the per-version one.
fn place<'a>(versions: &'a [Value], field: &str, top: &str) -> Placement<'a> {
    let spec = FieldPath::new("spec");
    let values: Vec<Option<&Value>> =
        versions.iter().map(|v| v.get(field).filter(|x| !x.is_null() && *x != &json!([]))).collect();
    let identical = values.windows(2).all(|w| w[0] == w[1]);
    if identical {
        let value = values.first().copied().flatten();
        return Placement { locations: vec![(spec.child(top), value, None)] };
    }
    let locations = versions
        .iter()
        .zip(values)
        .enumerate()
        .map(|(i, (version, value))| {
            (spec.child("versions").index(i).child(field), value, version.get("name").and_then(Value::as_str))
        })
        .collect();
    Placement { locations }
}

/// Validates a CRD (`old` on update). An empty result means valid.
pub fn validate(crd: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let spec_path = FieldPath::new("spec");
    let group = text(crd, "/spec/group");
    let plural = text(crd, "/spec/names/plural");
    let kind = text(crd, "/spec/names/kind");
    let name = text(crd, "/metadata/name");
    if old.is_none() && name != format!("{plural}.{group}") {
        errors.push(FieldError::invalid(
            &FieldPath::new("metadata").child("name"),
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }

    if group.is_empty() {
        errors.push(FieldError::required(&spec_path.child("group"), ""));
    } else if !is_dns_subdomain(group) {
        errors.push(FieldError::invalid(&spec_path.child("group"), &json!(group), SUBDOMAIN_MESSAGE));
    } else if !group.contains('.') {
        errors.push(FieldError::invalid(
            &spec_path.child("group"),
            &json!(group),
            "should be a domain with at least one dot",
        ));
    }
    match text(crd, "/spec/scope") {
        "Cluster" | "Namespaced" => {}
        "" => errors.push(FieldError::required(&spec_path.child("scope"), "")),
        other => {
            errors.push(FieldError::not_supported(&spec_path.child("scope"), &json!(other), &["Cluster", "Namespaced"]))
        }
    }
    let preserve_unknown = crd.pointer("/spec/preserveUnknownFields").and_then(Value::as_bool) == Some(true);
    if preserve_unknown {
        errors.push(FieldError::invalid(
            &spec_path.child("preserveUnknownFields"),
            &json!(true),
            "cannot set to true, set x-kubernetes-preserve-unknown-fields to true in spec.versions[*].schema instead",
        ));
    }

    let versions = array(crd, "/spec/versions");
    let schemas = place(versions, "schema", "validation");
    let subresources = place(versions, "subresources", "subresources");
    let columns = place(versions, "additionalPrinterColumns", "additionalPrinterColumns");
    let selectable = place(versions, "selectableFields", "selectableFields");
    let status_enabled = |version: Option<&str>| -> bool {
        subresources.locations.iter().any(|(_, value, name)| {
            (version.is_none() || name.is_none() || *name == version)
                && value.is_some_and(|s| s.get("status").is_some_and(|v| !v.is_null()))
        })
    };
    let schema_of = |version: Option<&str>| -> Option<&Value> {
        schemas
            .locations
            .iter()
            .find(|(_, _, name)| name.is_none() || *name == version)
            .and_then(|(_, value, _)| *value)
            .and_then(|v| v.get("openAPIV3Schema"))
    };

    let mut storage = 0;
    let mut names = BTreeSet::new();
    let mut unique = true;
    for (i, version) in versions.iter().enumerate() {
        let path = spec_path.child("versions").index(i);
        let version_name = text(version, "/name");
        if version.get("storage").and_then(Value::as_bool) == Some(true) {
            storage += 1;
        }
        if !names.insert(version_name) {
            unique = false;
        }
        let label_errors = dns1035_label(version_name);
        if !label_errors.is_empty() {
            errors.push(FieldError::invalid(&path.child("name"), &json!(version_name), &label_errors.join(",")));
        }
        validate_deprecation(version, &path, &mut errors);
    }
    // Schemas: required in every version, then each location's rules.
    let has_defaults = schemas.locations.iter().any(|(_, v, _)| v.is_some_and(|v| contains_key(v, "default")));
    if has_defaults && preserve_unknown {
        errors.push(FieldError::invalid(
            &spec_path.child("preserveUnknownFields"),
            &json!(true),
            "must be false in order to use defaults in the schema",
        ));
    }
    for (path, value, version) in &schemas.locations {
        match value.and_then(|v| v.get("openAPIV3Schema")).filter(|s| !s.is_null()) {
            Some(schema) => {
                let enabled = status_enabled(*version);
                errors.extend(openapi_schema::validate_location(schema, &path.child("openAPIV3Schema"), enabled));
            }
            None if version.is_some() => {
                errors.push(FieldError::required(&path.child("openAPIV3Schema"), ""));
            }
            None => {
                for i in 0..versions.len() {
                    let path = spec_path.child("versions").index(i).child("schema").child("openAPIV3Schema");
                    errors.push(FieldError::required(&path, ""));
                }
            }
        }
    }
    for (path, value, _) in &subresources.locations {
        if let Some(subresources) = value {
            validate_subresources(subresources, path, &mut errors);
        }
    }
    for (path, value, _) in &columns.locations {
        for (i, column) in value.and_then(|v| v.as_array()).into_iter().flatten().enumerate() {
            validate_column(column, &path.index(i), &mut errors);
        }
    }
    for (path, value, version) in &selectable.locations {
        let fields = value.and_then(|v| v.as_array()).map(Vec::as_slice).unwrap_or_default();
        if fields.is_empty() {
            continue;
        }
        match schema_of(*version) {
            Some(schema) => validate_selectable_fields(fields, schema, path, &mut errors),
            None => errors.push(FieldError::invalid(
                path,
                &json!(""),
                "may only be set when validations.schema is included",
            )),
        }
    }

    if !unique {
        errors.push(FieldError::invalid(
            &spec_path.child("versions"),
            &json!(versions),
            "must contain unique version names",
        ));
    }
    if storage != 1 {
        errors.push(FieldError::invalid(
            &spec_path.child("versions"),
            &json!(versions),
            "must have exactly one version marked as storage version",
        ));
    }

    let names_path = spec_path.child("names");
    let singular = match text(crd, "/spec/names/singular") {
        "" => kind.to_lowercase(),
        s => s.to_owned(),
    };
    let list_kind = match text(crd, "/spec/names/listKind") {
        "" if !kind.is_empty() => format!("{kind}List"),
        s => s.to_owned(),
    };
    if plural.is_empty() {
        errors.push(FieldError::required(&names_path.child("plural"), ""));
    }
    if singular.is_empty() {
        errors.push(FieldError::required(&names_path.child("singular"), ""));
    }
    if kind.is_empty() {
        errors.push(FieldError::required(&names_path.child("kind"), ""));
    }
    if list_kind.is_empty() {
        errors.push(FieldError::required(&names_path.child("listKind"), ""));
    }
    let spec_names = crd.pointer("/spec/names").cloned().unwrap_or_else(|| json!({}));
    validate_names(&spec_names, &singular, &list_kind, &names_path, &mut errors);
    validate_conversion(crd, &spec_path.child("conversion"), &mut errors);
    validate_stored_versions(old, versions, &mut errors);
    validate_approval(crd, old, group, &mut errors);

    if let Some(old) = old {
        let established = array(old, "/status/conditions").iter().any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Established")
                && c.get("status").and_then(Value::as_str) == Some("True")
        });
        // Upstream checks scope and kind only once the CRD is established, then group and plural always.
        let mut immutable = Vec::new();
        if established {
            immutable.push(("/spec/scope", spec_path.child("scope")));
            immutable.push(("/spec/names/kind", names_path.child("kind")));
        }
        immutable.push(("/spec/group", spec_path.child("group")));
        immutable.push(("/spec/names/plural", names_path.child("plural")));
        for (pointer, path) in immutable {
            let new = crd.pointer(pointer).cloned().unwrap_or(Value::Null);
            if old.pointer(pointer).cloned().unwrap_or(Value::Null) != new {
                errors.push(FieldError::invalid(&path, &new, "field is immutable"));
            }
        }
    }
    errors
}

fn contains_key(value: &Value, key: &str) -> bool {
    match value {
        Value::Object(map) => map.contains_key(key) || map.values().any(|v| contains_key(v, key)),
        Value::Array(list) => list.iter().any(|v| contains_key(v, key)),
        _ => false,
    }
}

fn validate_deprecation(version: &Value, path: &FieldPath, errors: &mut Vec<FieldError>) {
    let deprecated = version.get("deprecated").and_then(Value::as_bool) == Some(true);
    let Some(warning) = version.get("deprecationWarning").and_then(Value::as_str) else { return };
    let path = path.child("deprecationWarning");
    if !deprecated {
        errors.push(FieldError::invalid(&path, &json!(warning), "can only be set for deprecated versions"));
        return;
    }
    if warning.len() > 256 {
        errors.push(FieldError::invalid(&path, &json!(warning), "must be <= 256 characters long"));
    }
    if warning.is_empty() {
        errors.push(FieldError::invalid(&path, &json!(warning), "must not be an empty string"));
    }
    if let Some((i, _)) = warning.char_indices().find(|(_, c)| c.is_control()) {
        errors.push(FieldError::invalid(
            &path,
            &json!(warning),
            &format!("must only contain printable UTF-8 characters; non-printable character found at index {i}"),
        ));
    }
}

fn validate_names(names: &Value, singular: &str, list_kind: &str, path: &FieldPath, errors: &mut Vec<FieldError>) {
    let plural = text(names, "/plural");
    let kind = text(names, "/kind");
    for (field, value, mixed_case) in
        [("plural", plural, false), ("singular", singular, false), ("kind", kind, true), ("listKind", list_kind, true)]
    {
        let checked = if mixed_case { value.to_lowercase() } else { value.to_owned() };
        let label_errors = dns1035_label(&checked);
        if !value.is_empty() && !label_errors.is_empty() {
            let detail = label_errors.join(",");
            let detail =
                if mixed_case { format!("may have mixed case, but should otherwise match: {detail}") } else { detail };
            errors.push(FieldError::invalid(&path.child(field), &json!(value), &detail));
        }
    }
    for (i, short) in array(names, "/shortNames").iter().enumerate() {
        let short = short.as_str().unwrap_or_default();
        let label_errors = dns1035_label(short);
        if !label_errors.is_empty() {
            errors.push(FieldError::invalid(
                &path.child("shortNames").index(i),
                &json!(short),
                &label_errors.join(","),
            ));
        }
    }
    if !kind.is_empty() && kind == list_kind {
        errors.push(FieldError::invalid(
            &path.child("listKind"),
            &json!(list_kind),
            "kind and listKind may not be the same",
        ));
    }
    for (i, category) in array(names, "/categories").iter().enumerate() {
        let category = category.as_str().unwrap_or_default();
        let label_errors = dns1035_label(category);
        if !label_errors.is_empty() {
            errors.push(FieldError::invalid(
                &path.child("categories").index(i),
                &json!(category),
                &label_errors.join(","),
            ));
        }
    }
}

/// `validateSimpleJSONPath`.
fn simple_json_path(path: &FieldPath, value: &str, errors: &mut Vec<FieldError>) -> bool {
    if value.is_empty() {
        errors.push(FieldError::invalid(path, &json!(value), "must not be empty"));
        false
    } else if !value.starts_with('.') {
        errors.push(FieldError::invalid(path, &json!(value), "must be a simple json path starting with ."));
        false
    } else {
        true
    }
}

fn validate_subresources(subresources: &Value, path: &FieldPath, errors: &mut Vec<FieldError>) {
    let Some(scale) = subresources.get("scale").filter(|s| !s.is_null()) else { return };
    for (field, prefix, under) in [
        ("specReplicasPath", ".spec.", "should be a json path under .spec"),
        ("statusReplicasPath", ".status.", "should be a json path under .status"),
    ] {
        let at = path.child(&format!("scale.{field}"));
        let value = text(scale, &format!("/{field}"));
        if value.is_empty() {
            errors.push(FieldError::required(&at, ""));
        } else if simple_json_path(&at, value, errors) && !value.starts_with(prefix) {
            errors.push(FieldError::invalid(&at, &json!(value), under));
        }
    }
    let selector = text(scale, "/labelSelectorPath");
    let at = path.child("scale.labelSelectorPath");
    if !selector.is_empty()
        && simple_json_path(&at, selector, errors)
        && !selector.starts_with(".spec.")
        && !selector.starts_with(".status.")
    {
        errors.push(FieldError::invalid(&at, &json!(selector), "should be a json path under either .spec or .status"));
    }
}

fn validate_column(column: &Value, path: &FieldPath, errors: &mut Vec<FieldError>) {
    if text(column, "/name").is_empty() {
        errors.push(FieldError::required(&path.child("name"), ""));
    }
    let types = format!("must be one of {}", COLUMN_TYPES.join(","));
    match text(column, "/type") {
        "" => errors.push(FieldError::required(&path.child("type"), &types)),
        t if !COLUMN_TYPES.contains(&t) => errors.push(FieldError::invalid(&path.child("type"), &json!(t), &types)),
        _ => {}
    }
    let format = text(column, "/format");
    if !format.is_empty() && !COLUMN_FORMATS.contains(&format) {
        errors.push(FieldError::invalid(
            &path.child("format"),
            &json!(format),
            &format!("must be one of {}", COLUMN_FORMATS.join(",")),
        ));
    }
    let json_path = text(column, "/jsonPath");
    if json_path.is_empty() {
        errors.push(FieldError::required(&path.child("JSONPath"), ""));
    } else {
        simple_json_path(&path.child("JSONPath"), json_path, errors);
    }
}

/// The schema a dotted path (`.spec.color`) names, if every step is a specified field.
fn field_schema<'a>(schema: &'a Value, json_path: &str) -> Result<(&'a Value, String), String> {
    let Some(rest) = json_path.strip_prefix('.') else {
        return Err(format!("must start with \".\": {json_path:?}"));
    };
    let mut node = schema;
    let mut root = String::new();
    for (i, step) in rest.split('.').enumerate() {
        if i == 0 {
            root = step.to_owned();
        }
        if step.is_empty() || step.contains('[') {
            return Err(format!("invalid field path element: {step:?}"));
        }
        node = match node.pointer(&format!("/properties/{}", step.replace('~', "~0").replace('/', "~1"))) {
            Some(child) => child,
            None => match node.get("additionalProperties").filter(|a| a.is_object()) {
                Some(child) => child,
                None => return Err(format!("does not refer to a valid field: {step:?}")),
            },
        };
    }
    Ok((node, root))
}

fn validate_selectable_fields(fields: &[Value], schema: &Value, path: &FieldPath, errors: &mut Vec<FieldError>) {
    let mut seen = BTreeSet::new();
    for (i, field) in fields.iter().enumerate() {
        let at = path.index(i).child("jsonPath");
        let json_path = text(field, "/jsonPath");
        if json_path.is_empty() {
            errors.push(FieldError::required(&at, ""));
            continue;
        }
        let (node, root) = match field_schema(schema, json_path) {
            Ok(found) => found,
            Err(why) => {
                errors.push(FieldError::invalid(&at, &json!(json_path), &format!("is an invalid path: {why}")));
                continue;
            }
        };
        if root == "metadata" {
            errors.push(FieldError::invalid(&at, &json!(json_path), "must not point to fields in metadata"));
        }
        if !matches!(text(node, "/type"), "string" | "boolean" | "integer") {
            errors.push(FieldError::invalid(
                &at,
                &json!(json_path),
                "must point to a field of type string, boolean or integer. Enum string fields and strings with formats are allowed.",
            ));
        }
        if !seen.insert(json_path.to_owned()) {
            errors.push(FieldError::duplicate(&at, &json!(json_path)));
        }
    }
    if seen.len() > MAX_SELECTABLE_FIELDS {
        errors.push(FieldError::too_many(path, seen.len(), MAX_SELECTABLE_FIELDS));
    }
}

fn validate_conversion(crd: &Value, path: &FieldPath, errors: &mut Vec<FieldError>) {
    let Some(conversion) = crd.pointer("/spec/conversion").filter(|c| !c.is_null()) else { return };
    let strategy = text(conversion, "/strategy");
    match strategy {
        "None" => {
            if conversion.get("webhook").is_some_and(|w| !w.is_null()) {
                errors.push(FieldError::forbidden(
                    &path.child("webhook"),
                    "should not be set when strategy is not set to Webhook",
                ));
            }
        }
        // Upstream accepts a well-formed webhook; the dev server cannot call one.
        "Webhook" => errors.push(FieldError::forbidden(
            &path.child("strategy"),
            "the dev API server converts with strategy None only (it has no conversion webhooks)",
        )),
        "" => errors.push(FieldError::required(&path.child("strategy"), "")),
        other => errors.push(FieldError::not_supported(&path.child("strategy"), &json!(other), &["None", "Webhook"])),
    }
}

fn storage_versions(versions: &[Value]) -> Vec<String> {
    versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_owned))
        .collect()
}

/// `status.storedVersions` after the write (the old ones plus the storage version), and that each is still
/// served: a version data may be stored in cannot go away before a storage migration.
fn validate_stored_versions(old: Option<&Value>, versions: &[Value], errors: &mut Vec<FieldError>) {
    let mut stored: Vec<String> = old
        .map(|o| array(o, "/status/storedVersions").iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default();
    for version in storage_versions(versions) {
        if !stored.contains(&version) {
            stored.push(version);
        }
    }
    let path = FieldPath::new("status").child("storedVersions");
    if stored.is_empty() {
        errors.push(FieldError::invalid(&path, &json!([]), "must have at least one stored version"));
        return;
    }
    let names: Vec<&str> = versions.iter().filter_map(|v| v.get("name").and_then(Value::as_str)).collect();
    for (i, version) in stored.iter().enumerate() {
        if !names.contains(&version.as_str()) {
            errors.push(FieldError::invalid(
                &path.index(i),
                &json!(version),
                &format!(
                    "missing from spec.versions; {version} was previously a storage version, and must remain in spec.versions until a storage migration ensures no data remains persisted in {version} and removes {version} from status.storedVersions"
                ),
            ));
        }
    }
}

/// CRDs in `k8s.io` and `kubernetes.io` groups need the API-approval annotation.
fn validate_approval(crd: &Value, old: Option<&Value>, group: &str, errors: &mut Vec<FieldError>) {
    let protected = group == "k8s.io"
        || group.ends_with(".k8s.io")
        || group == "kubernetes.io"
        || group.ends_with(".kubernetes.io");
    if !protected {
        return;
    }
    let annotation = |object: &Value| {
        object
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(APPROVAL_ANNOTATION))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let state = |value: &str| -> u8 {
        if value.is_empty() {
            0
        } else if value.starts_with("unapproved") {
            1
        } else if value
            .split_once("://")
            .is_some_and(|(scheme, rest)| !scheme.is_empty() && !rest.is_empty() && !rest.starts_with('/'))
        {
            2
        } else {
            3
        }
    };
    let new = annotation(crd);
    if old.is_some_and(|o| state(&annotation(o)) == state(&new)) {
        return;
    }
    let path = FieldPath::new("metadata").child("annotations").key(APPROVAL_ANNOTATION);
    match state(&new) {
        0 => errors.push(FieldError::required(
            &path,
            &format!("protected groups must have approval annotation {APPROVAL_ANNOTATION:?}, see https://github.com/kubernetes/enhancements/pull/1111"),
        )),
        3 => errors.push(FieldError::invalid(
            &path,
            &json!(new),
            &format!("protected groups must have approval annotation {APPROVAL_ANNOTATION:?} with either a URL or a reason starting with \"unapproved\", see https://github.com/kubernetes/enhancements/pull/1111"),
        )),
        _ => {}
    }
}

#[cfg(test)]
mod tests;
