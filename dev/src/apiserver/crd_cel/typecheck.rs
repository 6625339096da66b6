//! The type errors of a rule that can be found soundly without cel-go's checker: a field its object schema lacks,
//! an operator applied to operands of types it does not take, and a rule whose result is plainly not a bool.
//!
//! Upstream compiles a rule against the declared type of its schema node (`staging/src/k8s.io/apiextensions-
//! apiserver/pkg/apiserver/schema/cel/compilation.go`: `compilation failed: ERROR: <input>:1:5: undefined field
//! 'replica'` from cel-go's checker, located at the selection's `.`; `cel expression must evaluate to a bool` when
//! the output type is not bool). This finds only what is certain:
//! - `x.f` (not inside `has()`) where `x` is `self`, `oldSelf`, a comprehension variable over a list's items, a
//!   selection or an index reaching an object schema with neither `additionalProperties` nor
//!   `x-kubernetes-preserve-unknown-fields`, and `f` is none of its properties (nor `apiVersion`, `kind`,
//!   `metadata` at a resource's root; fields below `metadata` are not checked; a name with `__`, an escaped
//!   property name, is not checked);
//! - a rule that is a literal other than a bool, a list or map literal, or `self`/a selection reaching a string,
//!   number, integer, array or object schema.
//!
//! - an operator applied to operands of types no overload of it takes (`self.name == 1`: `found no matching
//!   overload for '_==_' applied to '(string, int)'`), [`super::overloads`].
//!
//! Only the first such error is reported (cel-go reports all of them).

use cel::Program;
use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::Value;

fn text<'a>(schema: &'a Value, key: &str) -> Option<&'a str> {
    schema.get(key).and_then(Value::as_str)
}

/// What a rule's type error reads as after `compilation failed: ` (`Err`) or on its own (the non-bool one).
pub enum TypeError {
    /// cel-go's checker issue, as printed after `compilation failed: `.
    Checker(String),
    /// `cel expression must evaluate to a bool`.
    NotBool,
}

/// The first type error of `program` (the rule `source`) on a node of `schema`.
pub fn type_error(program: &Program, source: &str, schema: &Value, resource_root: bool) -> Option<TypeError> {
    let mut checker = Checker { scope: Vec::new(), schema, resource_root, found: None };
    checker.visit(program.expression());
    if let Some((id, field)) = checker.found.take() {
        let start = program.source_info().offset_for(id).map_or(0, |(start, _)| start as usize);
        // cel-go places a selection at its `.`.
        let dot = if source.get(start..).is_some_and(|rest| rest.starts_with('.')) {
            start
        } else {
            source.get(..start).and_then(|before| before.rfind('.')).unwrap_or(start)
        };
        return Some(TypeError::Checker(located(source, dot, &format!("undefined field '{field}'"))));
    }
    // An operator applied to operands no overload takes: cel-go places it at the operator (the call's own offset).
    if let Some((id, message)) = super::overloads::first(&checker, program.expression()) {
        let start = program.source_info().offset_for(id).map_or(0, |(start, _)| start as usize);
        return Some(TypeError::Checker(located(source, start, &message)));
    }
    let not_bool = match &program.expression().expr {
        Expr::Literal(LiteralValue::Boolean(_)) => false,
        Expr::Literal(_) | Expr::List(_) | Expr::Map(_) => true,
        Expr::Ident(_) | Expr::Select(_) => {
            let checker = Checker { scope: Vec::new(), schema, resource_root, found: None };
            checker.node(program.expression()).is_some_and(|node| {
                !node.get("x-kubernetes-int-or-string").is_some_and(|v| v == &Value::Bool(true))
                    && matches!(text(node, "type"), Some("string" | "number" | "integer" | "array" | "object"))
            })
        }
        _ => false,
    };
    not_bool.then_some(TypeError::NotBool)
}

/// cel-go's rendering of an issue `message` at the byte offset `at` of `source`: its line and column, the line and a
/// pointer under the column.
fn located(source: &str, at: usize, message: &str) -> String {
    let before = source.get(..at).unwrap_or_default();
    let line = before.matches('\n').count() + 1;
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let column = before[line_start..].chars().count() + 1;
    let snippet = source.lines().nth(line - 1).unwrap_or_default();
    let pointer = format!("{:.>width$}", "^", width = column);
    format!("ERROR: <input>:{line}:{column}: {message}\n | {snippet}\n | {pointer}")
}

#[derive(Clone)]
pub(super) struct Checker<'s> {
    /// Comprehension variables, innermost last, with the schema node each is bound to.
    scope: Vec<(String, Option<&'s Value>)>,
    schema: &'s Value,
    resource_root: bool,
    /// The first undefined field: the selection's id and the field.
    found: Option<(u64, String)>,
}

/// Whether `f` is a field of the object `node` (or the node's fields are open).
fn has_field(node: &Value, field: &str, resource_root: bool) -> bool {
    if node.get("additionalProperties").is_some()
        || node.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
        || text(node, "type") != Some("object")
        || field.contains("__")
        || (resource_root && matches!(field, "apiVersion" | "kind" | "metadata"))
    {
        return true;
    }
    node.get("properties").and_then(Value::as_object).is_some_and(|p| p.contains_key(field))
}

impl<'s> Checker<'s> {
    /// The checker inside comprehension `c`: its variables bound to the schema nodes of the range's items (or a
    /// map's values), the accumulator to none.
    pub(super) fn enter(&self, c: &ComprehensionExpr) -> Checker<'s> {
        let mut inner = self.clone();
        let range = self.node(&c.iter_range);
        let items = range.filter(|n| text(n, "type") == Some("array")).and_then(|n| n.get("items"));
        match &c.iter_var2 {
            // One variable over a list: its items; over a map: its keys (not a schema node).
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

    /// The schema node `e` reaches, and whether it is a resource's root.
    pub(super) fn reach(&self, e: &IdedExpr) -> Option<(&'s Value, bool)> {
        match &e.expr {
            Expr::Ident(name) => match self.scope.iter().rev().find(|(n, _)| n == name) {
                Some((_, node)) => node.map(|n| (n, embedded(n))),
                None if name == "self" || name == "oldSelf" => Some((self.schema, self.resource_root)),
                None => None,
            },
            Expr::Select(select) if !select.test => {
                let (operand, root) = self.reach(&select.operand)?;
                if root && select.field == "metadata" {
                    return None;
                }
                // A field of an object, or the value of a map's key (`self.labels.app`, `labels` a map).
                let child = match operand.get("properties").and_then(|p| p.get(&select.field)) {
                    Some(child) => child,
                    None => operand.get("additionalProperties").filter(|a| a.is_object())?,
                };
                Some((child, embedded(child)))
            }
            Expr::Call(call) if call.func_name == "_[_]" && call.target.is_none() && call.args.len() == 2 => {
                let (container, _) = self.reach(&call.args[0])?;
                let child = match text(container, "type")? {
                    "array" => container.get("items")?,
                    "object" => container.get("additionalProperties").filter(|a| a.is_object())?,
                    _ => return None,
                };
                Some((child, embedded(child)))
            }
            _ => None,
        }
    }

    fn node(&self, e: &IdedExpr) -> Option<&'s Value> {
        self.reach(e).map(|(node, _)| node)
    }

    fn visit(&mut self, e: &IdedExpr) {
        if self.found.is_some() {
            return;
        }
        match &e.expr {
            Expr::Select(select) => {
                self.visit(&select.operand);
                if !select.test
                    && self.found.is_none()
                    && let Some((operand, root)) = self.reach(&select.operand)
                    && !has_field(operand, &select.field, root)
                {
                    self.found = Some((e.id, select.field.clone()));
                }
            }
            Expr::Call(call) => {
                if let Some(target) = call.target.as_deref() {
                    self.visit(target);
                }
                for arg in &call.args {
                    self.visit(arg);
                }
            }
            Expr::Comprehension(c) => {
                self.visit(&c.iter_range);
                self.visit(&c.accu_init);
                let range = self.node(&c.iter_range);
                let items = range.filter(|n| text(n, "type") == Some("array")).and_then(|n| n.get("items"));
                let depth = self.scope.len();
                match &c.iter_var2 {
                    // One variable over a list: its items; over a map: its keys (not a schema node).
                    None => self.scope.push((c.iter_var.clone(), items)),
                    Some(second) => {
                        let values = range.and_then(|n| match text(n, "type") {
                            Some("array") => n.get("items"),
                            _ => n.get("additionalProperties").filter(|a| a.is_object()),
                        });
                        self.scope.push((c.iter_var.clone(), None));
                        self.scope.push((second.clone(), values));
                    }
                }
                self.scope.push((c.accu_var.clone(), None));
                self.visit(&c.loop_cond);
                self.visit(&c.loop_step);
                self.visit(&c.result);
                self.scope.truncate(depth);
            }
            Expr::List(list) => list.elements.iter().for_each(|x| self.visit(x)),
            Expr::Map(map) => map.entries.iter().for_each(|entry| self.entry(&entry.expr)),
            Expr::Struct(s) => s.entries.iter().for_each(|entry| self.entry(&entry.expr)),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => {}
        }
    }

    fn entry(&mut self, entry: &EntryExpr) {
        match entry {
            EntryExpr::StructField(field) => self.visit(&field.value),
            EntryExpr::MapEntry(e) => {
                self.visit(&e.key);
                self.visit(&e.value);
            }
        }
    }
}

fn embedded(schema: &Value) -> bool {
    schema.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(rule: &str, schema: &Value, root: bool) -> Option<String> {
        let program = super::super::compile::program(rule).expect("the rule parses");
        type_error(&program, rule, schema, root).map(|e| match e {
            TypeError::Checker(detail) => detail,
            TypeError::NotBool => "not bool".to_owned(),
        })
    }

    #[test]
    fn fields_the_schema_lacks_are_undefined() {
        let spec = json!({"type": "object", "properties": {
            "replicas": {"type": "integer"}, "name": {"type": "string"}, "flag": {"type": "boolean"},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "ports": {"type": "array", "items": {"type": "object", "properties": {"protocol": {"type": "string"}}}}}});
        assert_eq!(
            check("self.replica > 1", &spec, false).as_deref(),
            Some("ERROR: <input>:1:5: undefined field 'replica'\n | self.replica > 1\n | ....^")
        );
        assert_eq!(
            check("self.ports.all(p, p.prot == 'TCP')", &spec, false).as_deref(),
            Some(
                "ERROR: <input>:1:20: undefined field 'prot'\n | self.ports.all(p, p.prot == 'TCP')\n | ...................^"
            )
        );
        assert_eq!(check("self.ports[0].protocl == 'TCP'", &spec, false).map(|e| e.contains("'protocl'")), Some(true));
        for fine in [
            "self.replicas > 1 && !has(self.replica)",
            "self.labels.foo == 'x' && self.free.anything == 1",
            "self.ports.all(p, p.protocol == 'TCP')",
            "self.labels.all(k, k.size() > 1)",
            "self.flag",
        ] {
            assert_eq!(check(fine, &spec, false), None, "{fine}");
        }
        // At a resource's root: apiVersion, kind and metadata (not checked below) are always there.
        let root = json!({"type": "object", "properties": {"spec": spec}});
        assert_eq!(check("self.metadata.name == 'x' && self.kind == 'X' && self.spec.replicas > 0", &root, true), None);
        assert!(check("self.kind == 'X'", &root, false).is_some());
        assert!(check("self.spec.replicaz > 0", &root, true).is_some());
    }

    #[test]
    fn plainly_non_boolean_rules_are_refused() {
        let spec = json!({"type": "object", "properties": {"name": {"type": "string"}, "flag": {"type": "boolean"},
            "port": {"x-kubernetes-int-or-string": true}}});
        assert_eq!(check("self.name", &spec, false).as_deref(), Some("not bool"));
        assert_eq!(check("1", &spec, false).as_deref(), Some("not bool"));
        assert_eq!(check("self", &spec, false).as_deref(), Some("not bool"));
        for fine in ["self.flag", "true", "self.name == 'x'", "self.port"] {
            assert_eq!(check(fine, &spec, false), None, "{fine}");
        }
    }
}
