//! The type errors of a health check's expression that the schema of its object shows, found before the check is
//! first evaluated (`crate::health_checks` reads the OpenAPI v3 document of the object's group version from the
//! API server with the kind's discovery): a check with one never passes, whatever the object holds, and says why.
//!
//! As the API server's CRD rule compiler does with cel-go's checker (kubernetes/kubernetes
//! `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/compilation.go`: `undefined field 'x'`;
//! `cel expression must evaluate to a bool`), but only what is certain without a full checker (the same rules as
//! the dev cluster's CRD rule checker, `dev/memory-apiserver/src/crd_cel/typecheck.rs`):
//! - `x.f` (not inside `has()`) where `x` is `self`, a comprehension variable over a list's items, a selection or an
//!   index reaching an object schema with neither `additionalProperties` nor `x-kubernetes-preserve-unknown-fields`,
//!   and `f` is none of its properties (`apiVersion`, `kind` and `metadata` are always there at the root; fields
//!   below `metadata` are not checked);
//! - an expression that is `self` or a selection reaching a string, number, integer, array or object schema: it
//!   can never be a bool;
//! - an operator or function applied to operands of types no overload of it takes (`self.status.phase == 1`,
//!   `self.spec.replicas + 'x'`, `!self.status.phase`), [`super::health_overloads`].
//!
//! `$ref`s (`#/components/schemas/NAME`) and a lone `allOf` are followed, as the API server publishes them; a
//! schema without a type is taken as open.

use super::health_cel::Expression;
use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr};
use serde_json::Value;

/// The first type error of `expression` over objects of `group`/`version` `kind`, by the OpenAPI v3 `document` of
/// that group version; `None` when there is none, or the document does not describe the kind.
pub fn type_error(expression: &Expression, document: &Value, group: &str, version: &str, kind: &str) -> Option<String> {
    let schemas = document.get("components")?.get("schemas")?.as_object()?;
    let root = schemas.values().find(|s| {
        s.get("x-kubernetes-group-version-kind").and_then(Value::as_array).is_some_and(|gvks| {
            gvks.iter().any(|g| g["group"] == group && g["version"] == version && g["kind"] == kind)
        })
    })?;
    let checker = Checker { document, root, scope: Vec::new() };
    let expr = expression.program().expression();
    if let Some(field) = checker.clone().undefined(expr) {
        return Some(format!("undefined field '{field}' (the {kind} schema the API server publishes has none)"));
    }
    if let Some(error) = super::health_overloads::mismatch(&checker, expr, kind) {
        return Some(error);
    }
    match &expr.expr {
        Expr::Ident(_) | Expr::Select(_) => {
            let (node, _) = checker.reach(expr)?;
            let open = node.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
            match text(node, "type") {
                Some(t @ ("string" | "number" | "integer" | "array" | "object")) if !open => Some(format!(
                    "the expression is {a} {t}, never a bool",
                    a = if t == "array" || t == "object" || t == "integer" { "an" } else { "a" }
                )),
                _ => None,
            }
        }
        _ => None,
    }
}

/// The part of the OpenAPI v3 `document` of a group version that describes `kind`: its schema and those its
/// `$ref`s reach, as a document of their own (a group version's document is megabytes; a kind's part, kilobytes).
/// `None` when the document does not describe the kind.
pub fn kind_document(document: &Value, group: &str, version: &str, kind: &str) -> Option<Value> {
    let schemas = document.get("components")?.get("schemas")?.as_object()?;
    let (root, _) = schemas.iter().find(|(_, s)| {
        s.get("x-kubernetes-group-version-kind").and_then(Value::as_array).is_some_and(|gvks| {
            gvks.iter().any(|g| g["group"] == group && g["version"] == version && g["kind"] == kind)
        })
    })?;
    let mut kept = serde_json::Map::new();
    let mut todo = vec![root.clone()];
    while let Some(name) = todo.pop() {
        if kept.contains_key(&name) {
            continue;
        }
        let Some(schema) = schemas.get(&name) else { continue };
        refs(schema, &mut todo);
        kept.insert(name, schema.clone());
    }
    Some(serde_json::json!({"components": {"schemas": kept}}))
}

/// The schema names every `$ref` inside `schema` points to, into `out`.
fn refs(schema: &Value, out: &mut Vec<String>) {
    match schema {
        Value::Object(fields) => {
            for (key, value) in fields {
                match (key.as_str(), value.as_str().and_then(|r| r.strip_prefix("#/components/schemas/"))) {
                    ("$ref", Some(name)) => out.push(name.to_owned()),
                    _ => refs(value, out),
                }
            }
        }
        Value::Array(items) => items.iter().for_each(|item| refs(item, out)),
        _ => {}
    }
}

pub(super) fn text<'a>(schema: &'a Value, key: &str) -> Option<&'a str> {
    schema.get(key).and_then(Value::as_str)
}

#[derive(Clone)]
pub(super) struct Checker<'s> {
    document: &'s Value,
    root: &'s Value,
    /// Comprehension variables, innermost last, with the schema node each is bound to.
    scope: Vec<(String, Option<&'s Value>)>,
}

impl<'s> Checker<'s> {
    /// `node` with its `$ref` or lone `allOf` followed (at most 16 times: a cycle ends as it is).
    pub(super) fn resolve(&self, mut node: &'s Value) -> &'s Value {
        for _ in 0..16 {
            if let Some(name) = text(node, "$ref").and_then(|r| r.strip_prefix("#/components/schemas/")) {
                match self.document.get("components").and_then(|c| c.get("schemas")).and_then(|s| s.get(name)) {
                    Some(target) => node = target,
                    None => return node,
                }
            } else if let Some([only]) = node.get("allOf").and_then(Value::as_array).map(Vec::as_slice)
                && node.get("properties").is_none()
            {
                node = only;
            } else {
                return node;
            }
        }
        node
    }

    /// Whether `field` is a field of the object `node` (or the node's fields are open).
    fn has_field(&self, node: &Value, field: &str, root: bool) -> bool {
        if node.get("additionalProperties").is_some()
            || node.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
            || text(node, "type") != Some("object")
            || field.contains("__")
            || (root && matches!(field, "apiVersion" | "kind" | "metadata"))
        {
            return true;
        }
        node.get("properties").and_then(Value::as_object).is_some_and(|p| p.contains_key(field))
    }

    /// The schema node `e` reaches, and whether it is the object's root.
    pub(super) fn reach(&self, e: &IdedExpr) -> Option<(&'s Value, bool)> {
        match &e.expr {
            Expr::Ident(name) => match self.scope.iter().rev().find(|(n, _)| n == name) {
                Some((_, node)) => node.map(|n| (self.resolve(n), false)),
                None if name == super::health_cel::OBJECT_VARIABLE => Some((self.resolve(self.root), true)),
                None => None,
            },
            Expr::Select(select) if !select.test => {
                let (operand, root) = self.reach(&select.operand)?;
                if root && select.field == "metadata" {
                    return None;
                }
                // A field of an object, or the value of a map's key (`self.data.health`, `data` a map).
                let child = match operand.get("properties").and_then(|p| p.get(&select.field)) {
                    Some(child) => child,
                    None => operand.get("additionalProperties").filter(|a| a.is_object())?,
                };
                Some((self.resolve(child), false))
            }
            Expr::Call(call) if call.func_name == "_[_]" && call.target.is_none() && call.args.len() == 2 => {
                let (container, _) = self.reach(&call.args[0])?;
                let child = match text(container, "type")? {
                    "array" => container.get("items")?,
                    "object" => container.get("additionalProperties").filter(|a| a.is_object())?,
                    _ => return None,
                };
                Some((self.resolve(child), false))
            }
            _ => None,
        }
    }

    /// The checker inside comprehension `c`: its variables bound to the schema nodes of the range's items (or a
    /// map's values), the accumulator to none.
    pub(super) fn enter(&self, c: &ComprehensionExpr) -> Checker<'s> {
        let range = self.reach(&c.iter_range).map(|(n, _)| n);
        let items = range.filter(|n| text(n, "type") == Some("array")).and_then(|n| n.get("items"));
        let mut inner = self.clone();
        match &c.iter_var2 {
            None => inner.scope.push((c.iter_var.clone(), items)),
            Some(second) => {
                let values = range.and_then(|n| match text(n, "type") {
                    Some("array") => n.get("items"),
                    _ => n.get("additionalProperties").filter(|a| a.is_object()),
                });
                inner.scope.push((c.iter_var.clone(), None));
                inner.scope.push((second.clone(), values));
            }
        }
        inner.scope.push((c.accu_var.clone(), None));
        inner
    }

    /// The first field selected that the schema does not have.
    fn undefined(&mut self, e: &IdedExpr) -> Option<String> {
        match &e.expr {
            Expr::Select(select) => {
                if let Some(found) = self.undefined(&select.operand) {
                    return Some(found);
                }
                let (operand, root) = self.reach(&select.operand)?;
                (!select.test && !self.has_field(operand, &select.field, root)).then(|| select.field.clone())
            }
            Expr::Call(call) => {
                call.target.iter().map(|t| &**t).chain(&call.args).find_map(|arg| self.clone().undefined(arg))
            }
            Expr::Comprehension(c) => {
                if let Some(found) = self.undefined(&c.iter_range).or_else(|| self.undefined(&c.accu_init)) {
                    return Some(found);
                }
                let inner = self.enter(c);
                [&c.loop_cond, &c.loop_step, &c.result].into_iter().find_map(|part| inner.clone().undefined(part))
            }
            Expr::List(list) => list.elements.iter().find_map(|x| self.clone().undefined(x)),
            Expr::Map(map) => map.entries.iter().find_map(|entry| self.clone().entry(&entry.expr)),
            Expr::Struct(s) => s.entries.iter().find_map(|entry| self.clone().entry(&entry.expr)),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => None,
        }
    }

    fn entry(&mut self, entry: &EntryExpr) -> Option<String> {
        match entry {
            EntryExpr::StructField(field) => self.undefined(&field.value),
            EntryExpr::MapEntry(e) => self.clone().undefined(&e.key).or_else(|| self.undefined(&e.value)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A document as the API server publishes `/openapi/v3/api/v1`: ConfigMap and Pod, their metadata by `$ref`.
    fn document() -> Value {
        json!({"components": {"schemas": {
            "io.k8s.api.core.v1.ConfigMap": {"type": "object",
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "ConfigMap"}],
                "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
                    "metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]},
                    "data": {"type": "object", "additionalProperties": {"type": "string"}}}},
            "io.k8s.api.core.v1.Pod": {"type": "object",
                "x-kubernetes-group-version-kind": [{"group": "", "version": "v1", "kind": "Pod"}],
                "properties": {"status": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodStatus"}]}}},
            "io.k8s.api.core.v1.PodStatus": {"type": "object", "properties": {
                "phase": {"type": "string"},
                "conditions": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/io.k8s.api.core.v1.PodCondition"}]}}}},
            "io.k8s.api.core.v1.PodCondition": {"type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}},
            "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {"type": "object", "properties": {"name": {"type": "string"}}}
        }}})
    }

    fn check(expression: &str, kind: &str) -> Option<String> {
        type_error(&Expression::compile(expression).unwrap(), &document(), "", "v1", kind)
    }

    #[test]
    fn health_fields_the_schema_lacks_are_type_errors_followed_through_refs() {
        assert_eq!(
            check("self.dta.health == 'HEALTH_OK'", "ConfigMap").as_deref(),
            Some("undefined field 'dta' (the ConfigMap schema the API server publishes has none)")
        );
        let typo = check("self.status.conditions.exists(c, c.typ == 'Ready')", "Pod");
        assert!(typo.is_some_and(|e| e.starts_with("undefined field 'typ'")));
        assert!(check("self.status.phase.size() > 0 && self.status.phaze == 'x'", "Pod").is_some());
        for fine in [
            "self.data.health == 'HEALTH_OK'",
            "self.metadata.name == 'x' && self.metadata.anything == 'y' && self.kind == 'ConfigMap'",
            "!has(self.data.nothing) || self.data['x'] == 'y'",
        ] {
            assert_eq!(check(fine, "ConfigMap"), None, "{fine}");
        }
        assert_eq!(check("self.status.conditions.exists(c, c.type == 'Ready' && c.status == 'True')", "Pod"), None);
        // A kind the document does not describe is not checked.
        assert_eq!(check("self.whatever == 1", "Secret"), None);
    }

    #[test]
    fn health_a_kinds_part_of_the_document_holds_what_its_refs_reach_and_checks_the_same() {
        let pod = kind_document(&document(), "", "v1", "Pod").unwrap();
        let mut names: Vec<&String> = pod["components"]["schemas"].as_object().unwrap().keys().collect();
        names.sort();
        assert_eq!(
            names,
            ["io.k8s.api.core.v1.Pod", "io.k8s.api.core.v1.PodCondition", "io.k8s.api.core.v1.PodStatus"]
        );
        let e = Expression::compile("self.status.conditions.exists(c, c.typ == 'Ready')").unwrap();
        assert!(type_error(&e, &pod, "", "v1", "Pod").is_some_and(|e| e.starts_with("undefined field 'typ'")));
        assert_eq!(kind_document(&document(), "", "v1", "Secret"), None);
    }

    #[test]
    fn health_an_expression_that_can_never_be_a_bool_is_a_type_error() {
        assert_eq!(check("self.status.phase", "Pod").as_deref(), Some("the expression is a string, never a bool"));
        assert_eq!(check("self.data", "ConfigMap").as_deref(), Some("the expression is an object, never a bool"));
        assert_eq!(check("self.status.phase == 'Running'", "Pod"), None);
    }
}
