//! What the type checks of a rule ([`super::typecheck`], [`super::overloads`]) walk it with: the schema node each
//! expression reaches, and the first field a rule selects that its object schema lacks.

use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr};
use serde_json::Value;

fn text<'a>(schema: &'a Value, key: &str) -> Option<&'a str> {
    schema.get(key).and_then(Value::as_str)
}

/// Walks a rule with the schema node each expression reaches (through `self`, `oldSelf`, comprehension
/// variables, selections and indexes), noting the first selection of a field the node lacks.
#[derive(Clone)]
pub(super) struct Checker<'s> {
    /// Comprehension variables, innermost last, with the schema node each is bound to.
    scope: Vec<(String, Option<&'s Value>)>,
    schema: &'s Value,
    resource_root: bool,
    /// The first undefined field: the selection's id and the field.
    pub(super) found: Option<(u64, String)>,
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
    /// A checker of a rule on `schema` (a resource's root when `resource_root`), before it has found anything.
    pub(super) fn new(schema: &'s Value, resource_root: bool) -> Self {
        Checker { scope: Vec::new(), schema, resource_root, found: None }
    }

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

    pub(super) fn node(&self, e: &IdedExpr) -> Option<&'s Value> {
        self.reach(e).map(|(node, _)| node)
    }

    pub(super) fn visit(&mut self, e: &IdedExpr) {
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
