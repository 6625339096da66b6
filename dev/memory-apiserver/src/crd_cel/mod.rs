//! `x-kubernetes-validations`: the CEL rules of a CRD's schema, evaluated on every create and update of its custom
//! resources as apiextensions-apiserver evaluates them, with validation ratcheting on update.
//!
//! Checked against kubernetes/kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/
//! validation.go` (1.30–1.33):
//! - each rule runs with `self` bound to the value of its schema node (null values are not validated); at the root
//!   of a resource `self.metadata` holds only `name` and `generateName` (`model.WithTypeAndObjectMeta`);
//! - a rule reading `oldSelf` (a transition rule) runs only on update and only where an old value is correlated:
//!   through object properties (not inside an `x-kubernetes-map-type: atomic` map) and map-list items matched by
//!   their keys; with `optionalOldSelf: true` it also runs without one, `oldSelf` then being `optional.none()`;
//! - a rule that is false gives `field.Invalid(path, <schema type>, detail)` (or Forbidden / Required / Duplicate
//!   per `reason`), the detail from `messageExpression` (if it evaluates to a non-empty one-line string), else
//!   `message`, else `failed rule: <rule>`; `fieldPath` moves the error below the node; the path of the root is
//!   `<nil>` as a nil `field.Path` prints; an evaluation error gives `<error> evaluating rule: <rule>`;
//! - ratcheting (`ratchetingOptions`, `common.CorrelatedObject`): on update, the error of a rule that does not read
//!   `oldSelf` is dropped when the value it is about, or its nearest correlatable ancestor, equals the old value
//!   (upstream sends it as a warning). Correlation follows properties and map values, map-list items by key, other
//!   lists by index except `set` and `atomic` ones.
//!
//! # Assumptions
//! - Strings with `format: date-time`, `duration` or `byte` are strings here (upstream binds timestamps, durations
//!   and bytes); the cel crate is built without its `chrono` feature.
//! - No runtime cost budget: cel-rust does not count the cost of an evaluation (docs/dev-cluster.md). The
//!   estimated cost is checked when the CRD is written ([`cost`]).

mod call;
mod checker;
pub mod compile;
pub mod cost;
pub mod format;
pub mod ip;
pub mod library;
pub mod netip;
mod overloads;
pub mod program;
pub mod quantity;
pub mod typecheck;
pub mod url;

use crate::schema::{ErrorKind, FieldError};
use cel::objects::OptionalValue;
use cel::{Context, Value as CelValue};
use serde_json::{Map, Value};
use std::sync::Arc;

pub use compile::schema_errors;

/// Whether `schema` has a rule anywhere (upstream's `hasXValidations`: without one there is no CEL validator).
pub fn has_rules(schema: &Value) -> bool {
    let Some(node) = schema.as_object() else { return false };
    node.get("x-kubernetes-validations").and_then(Value::as_array).is_some_and(|r| !r.is_empty())
        || node.get("properties").and_then(Value::as_object).is_some_and(|p| p.values().any(has_rules))
        || ["items", "additionalProperties"].iter().any(|k| node.get(*k).is_some_and(has_rules))
        || node.get("allOf").and_then(Value::as_array).is_some_and(|b| b.iter().any(has_rules))
}

/// The errors the rules of `schema` find in `object` (a create when `old` is `None`). Ratcheting applies on
/// update.
pub fn validate(schema: &Value, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    let node = Node { schema, value: object, old_self: old, correlated: old, ratchet: false, resource_root: true };
    node.validate(&Path::Root, &mut errors);
    errors
}

/// JSON as upstream's `UnstructuredToVal` gives it to a rule: integers are `int` (a number past `i64` a `double`),
/// other numbers `double`, objects maps with string keys.
fn to_cel(value: &Value) -> CelValue {
    match value {
        Value::Null => CelValue::Null,
        Value::Bool(b) => CelValue::Bool(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => CelValue::Int(i),
            None => CelValue::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => CelValue::String(Arc::new(s.clone())),
        Value::Array(items) => CelValue::List(Arc::new(items.iter().map(to_cel).collect())),
        Value::Object(fields) => {
            let map: std::collections::HashMap<String, CelValue> =
                fields.iter().map(|(k, v)| (k.clone(), to_cel(v))).collect();
            CelValue::from(map)
        }
    }
}

/// A field path that may be upstream's nil root (`<nil>`).
#[derive(Clone)]
enum Path {
    Root,
    At(String),
}

impl Path {
    fn child(&self, name: &str) -> Path {
        match self {
            Path::Root => Path::At(name.to_owned()),
            Path::At(p) => Path::At(format!("{p}.{name}")),
        }
    }

    fn key(&self, key: &str) -> Path {
        match self {
            Path::Root => Path::At(format!("[{key}]")),
            Path::At(p) => Path::At(format!("{p}[{key}]")),
        }
    }

    fn index(&self, i: usize) -> Path {
        self.key(&i.to_string())
    }

    fn text(&self) -> String {
        match self {
            Path::Root => "<nil>".to_owned(),
            Path::At(p) => p.clone(),
        }
    }
}

/// One value under validation with what it is correlated with.
struct Node<'a> {
    schema: &'a Value,
    value: &'a Value,
    /// The old value `oldSelf` binds (upstream's CEL correlation).
    old_self: Option<&'a Value>,
    /// The old value ratcheting compares with (`CorrelatedObject`).
    correlated: Option<&'a Value>,
    /// A correlated ancestor equals its old value.
    ratchet: bool,
    /// The root of a resource (the object or an embedded resource).
    resource_root: bool,
}

fn text<'a>(schema: &'a Value, key: &str) -> Option<&'a str> {
    schema.get(key).and_then(Value::as_str)
}

impl Node<'_> {
    fn validate(&self, path: &Path, errors: &mut Vec<FieldError>) {
        if self.value.is_null() {
            return;
        }
        let ratchet = self.ratchet || self.correlated.is_some_and(|old| old == self.value);
        self.rules(self.schema, path, ratchet, errors);
        for branch in self.schema.get("allOf").and_then(Value::as_array).into_iter().flatten() {
            // validation.go: allOf errors are ratcheted only through the nearest correlatable parent.
            self.rules(branch, path, self.ratchet, errors);
        }
        match self.value {
            Value::Object(fields) => self.validate_fields(fields, path, ratchet, errors),
            Value::Array(items) => self.validate_items(items, path, ratchet, errors),
            _ => {}
        }
    }

    fn validate_fields(&self, fields: &Map<String, Value>, path: &Path, ratchet: bool, errors: &mut Vec<FieldError>) {
        let properties = self.schema.get("properties").and_then(Value::as_object);
        let additional = self.schema.get("additionalProperties").filter(|a| a.is_object());
        let correlatable = text(self.schema, "x-kubernetes-map-type") != Some("atomic");
        for (key, value) in fields {
            let (schema, child_path) = match properties.and_then(|p| p.get(key)) {
                Some(schema) => (schema, path.child(key)),
                None => match additional {
                    Some(schema) => (schema, path.key(key)),
                    None => continue,
                },
            };
            let type_meta = self.resource_root && matches!(key.as_str(), "apiVersion" | "kind");
            let node = Node {
                schema,
                value,
                old_self: self.old_self.filter(|_| correlatable).and_then(|old| old.get(key)),
                correlated: self.correlated.filter(|_| !type_meta).and_then(|old| old.get(key)),
                ratchet: ratchet && !type_meta,
                resource_root: schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true),
            };
            node.validate(&child_path, errors);
        }
    }

    fn validate_items(&self, items: &[Value], path: &Path, ratchet: bool, errors: &mut Vec<FieldError>) {
        let Some(schema) = self.schema.get("items") else { return };
        let list_type = text(self.schema, "x-kubernetes-list-type");
        let keys: Vec<&str> = self
            .schema
            .get("x-kubernetes-list-map-keys")
            .and_then(Value::as_array)
            .map(|k| k.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        let by_keys = |old: &'_ Value, item: &Value| -> Option<Value> {
            let old_items = old.as_array()?;
            old_items.iter().find(|o| keys.iter().all(|k| o.get(*k) == item.get(*k))).cloned()
        };
        for (i, item) in items.iter().enumerate() {
            let old_self = match list_type {
                Some("map") => self.old_self.and_then(|old| by_keys(old, item)),
                _ => None,
            };
            let correlated = match list_type {
                Some("map") => self.correlated.and_then(|old| by_keys(old, item)),
                Some("set") | Some("atomic") => None,
                _ => self.correlated.and_then(|old| old.get(i)).cloned(),
            };
            let node = Node {
                schema,
                value: item,
                old_self: old_self.as_ref(),
                correlated: correlated.as_ref(),
                ratchet,
                resource_root: schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true),
            };
            node.validate(&path.index(i), errors);
        }
    }

    /// `self` as upstream binds it: at a resource root, `metadata` keeps only `name` and `generateName`.
    fn self_value(&self, value: &Value) -> CelValue {
        if !self.resource_root {
            return to_cel(value);
        }
        let mut trimmed = value.clone();
        if let Some(metadata) = trimmed.get_mut("metadata").and_then(Value::as_object_mut) {
            metadata.retain(|k, _| k == "name" || k == "generateName");
        }
        to_cel(&trimmed)
    }

    /// Evaluates the rules of `schema` (the node's own, or an allOf branch's) on this node.
    fn rules(&self, schema: &Value, path: &Path, ratchet: bool, errors: &mut Vec<FieldError>) {
        let Some(rules) = schema.get("x-kubernetes-validations").and_then(Value::as_array) else { return };
        if rules.is_empty() {
            return;
        }
        let node_type = text(self.schema, "type").unwrap_or_default();
        let invalid = |path: &Path, detail: String| FieldError {
            field: path.text(),
            kind: ErrorKind::Invalid,
            message: format!("Invalid value: {node_type:?}: {detail}"),
        };
        let self_value = self.self_value(self.value);
        let old_value = self.old_self.map(|old| self.self_value(old));
        for rule in rules {
            let source = text(rule, "rule").unwrap_or_default();
            if source.trim().is_empty() {
                continue;
            }
            let message = text(rule, "message").unwrap_or_default().trim();
            let shown = if message.is_empty() { source.trim() } else { message };
            let program = match program::program(source) {
                Ok(program) => program,
                Err(detail) => {
                    errors.push(invalid(path, format!("rule compile error: compilation failed: {detail}")));
                    continue;
                }
            };
            let uses_old_self = program::uses_old_self(&program);
            let optional = rule.get("optionalOldSelf").and_then(Value::as_bool) == Some(true);
            if uses_old_self && old_value.is_none() && !optional {
                continue;
            }
            let mut context = Context::with_env(library::ENVIRONMENT.clone());
            context.add_variable_from_value("self", self_value.clone());
            let old_binding = match (&old_value, optional) {
                (Some(old), true) => Some(CelValue::Opaque(Arc::new(OptionalValue::of(old.clone())))),
                (None, true) => Some(CelValue::Opaque(Arc::new(OptionalValue::none()))),
                (Some(old), false) => Some(old.clone()),
                (None, false) => None,
            };
            if let Some(old) = old_binding {
                context.add_variable_from_value("oldSelf", old);
            }
            match program.execute(&context) {
                Ok(CelValue::Bool(true)) => continue,
                Ok(CelValue::Bool(false)) => {}
                Ok(other) => {
                    errors.push(invalid(
                        path,
                        format!("rule did not evaluate to a bool ({other:?}) evaluating rule: {shown}"),
                    ));
                    continue;
                }
                Err(error) => {
                    let detail = match &error {
                        cel::ExecutionError::NoSuchOverload(_) => format!(
                            "'{error}': call arguments did not match a supported operator, function or macro signature for rule: {shown}"
                        ),
                        // A library function's error is its message alone, as cel-go's `types.NewErr` prints;
                        // `no such overload` is reported as validation.go reports a runtime overload error.
                        cel::ExecutionError::FunctionError { message, .. }
                            if message.starts_with(call::NO_SUCH_OVERLOAD) =>
                        {
                            format!(
                                "'{message}': call arguments did not match a supported operator, function or macro signature for rule: {shown}"
                            )
                        }
                        cel::ExecutionError::FunctionError { message, .. } => {
                            format!("{message} evaluating rule: {shown}")
                        }
                        _ => format!("{error} evaluating rule: {shown}"),
                    };
                    errors.push(invalid(path, detail));
                    continue;
                }
            }
            if !uses_old_self && ratchet {
                continue;
            }
            let at = match text(rule, "fieldPath").map(str::trim).filter(|p| !p.is_empty()) {
                Some(field_path) => normalized(self.schema, field_path).map_or_else(
                    || path.clone(),
                    |relative| match path {
                        Path::Root => Path::At(relative),
                        Path::At(p) if relative.starts_with('[') => Path::At(format!("{p}{relative}")),
                        Path::At(p) => Path::At(format!("{p}.{relative}")),
                    },
                ),
                None => path.clone(),
            };
            let detail = self.message_expression(rule, &self_value, old_value.as_ref()).unwrap_or_else(|| {
                if message.is_empty() { format!("failed rule: {shown}") } else { message.to_owned() }
            });
            let error = match text(rule, "reason") {
                Some("FieldValueForbidden") => {
                    FieldError { field: at.text(), kind: ErrorKind::Forbidden, message: format!("Forbidden: {detail}") }
                }
                Some("FieldValueRequired") => FieldError {
                    field: at.text(),
                    kind: ErrorKind::Required,
                    message: format!("Required value: {detail}"),
                },
                Some("FieldValueDuplicate") => FieldError {
                    field: at.text(),
                    kind: ErrorKind::Duplicate,
                    message: format!("Duplicate value: {node_type:?}"),
                },
                _ => invalid(&at, detail),
            };
            errors.push(error);
        }
    }

    /// The trimmed result of the rule's `messageExpression`, when it evaluates to a non-empty one-line string
    /// (`evalMessageExpression`; on failure upstream logs and falls back to `message`).
    fn message_expression(&self, rule: &Value, self_value: &CelValue, old: Option<&CelValue>) -> Option<String> {
        let source = text(rule, "messageExpression").filter(|s| !s.trim().is_empty())?;
        let program = program::program(source).ok()?;
        let mut context = Context::with_env(library::ENVIRONMENT.clone());
        context.add_variable_from_value("self", self_value.clone());
        if let Some(old) = old {
            context.add_variable_from_value("oldSelf", old.clone());
        }
        match program.execute(&context) {
            Ok(CelValue::String(s)) => {
                let trimmed = s.trim();
                // celconfig.MaxEvaluatedMessageExpressionSizeBytes is 5 KiB.
                (!trimmed.is_empty() && !trimmed.contains('\n') && trimmed.len() <= 5 * 1024)
                    .then(|| trimmed.to_owned())
            }
            _ => None,
        }
    }
}

/// A rule's `fieldPath` as upstream's `ValidFieldPath` normalizes it: `.spec.replicas` → `spec.replicas`,
/// `['a.b']` → `a.b` on a property, `[a.b]` on a map key.
fn normalized(schema: &Value, field_path: &str) -> Option<String> {
    let mut node = schema;
    let mut out = String::new();
    let mut rest = field_path;
    while !rest.is_empty() {
        let name;
        if let Some(after) = rest.strip_prefix('.') {
            let end = after.find(['.', '[']).unwrap_or(after.len());
            name = &after[..end];
            rest = &after[end..];
        } else if let Some(after) = rest.strip_prefix("['") {
            let end = after.find("']")?;
            name = &after[..end];
            rest = &after[end + 2..];
        } else {
            return None;
        }
        if let Some(child) = node.get("properties").and_then(|p| p.get(name)) {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(name);
            node = child;
        } else if let Some(child) = node.get("additionalProperties").filter(|a| a.is_object()) {
            out.push_str(&format!("[{name}]"));
            node = child;
        } else {
            return None;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests;
