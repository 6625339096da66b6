//! The estimated cost of CRD validation rules, refused at CRD write as kube-apiserver refuses it.
//!
//! Upstream (kubernetes/kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/
//! validation/validation.go` `getExpressionCost`, `getCostErrorMessage`, `cel_validation.go` `CELSchemaContext`,
//! `extractMaxElements`, `TotalCost`; `pkg/apiserver/schema/cel/compilation.go` `maxCardinality`;
//! `staging/src/k8s.io/apiserver/pkg/cel/common/schemas.go` `SchemaDeclType` and its size estimates; google/cel-go
//! `checker/cost.go`): a rule's cost is cel-go's estimated maximum cost of its expression, where the size of a
//! list, map or string reached from `self` is the schema's `maxItems`/`maxProperties`/`maxLength` (×4 for
//! strings) or, without one, as many elements as fit in a 3 MiB request; times the number of times the rule's
//! node can occur (the product of the `maxItems`/`maxProperties` above it, or, past an unbounded one,
//! 3 MiB / (its minimal serialized size + 1)). A rule above 10 000 000 (`StaticEstimatedCostLimit`) is refused on
//! `...x-kubernetes-validations[i].rule`; rules together above 100 000 000 (`StaticEstimatedCRDCostLimit`) refuse
//! the schema.
//!
//! # What the estimate covers
//! This is a **lower bound** of upstream's estimate, so that nothing upstream accepts is refused:
//! - each identifier costs 1 (the macros' accumulators too: cel-rust expands `all`, `exists`, `exists_one`, `map`
//!   and `filter` as cel-go's `parser/macro.go` does), a field selection on an object node 1, `size`, `!`, unary
//!   minus, `*`, `/`, `%`, `-`, indexing and the macros' `@not_strictly_false` 1, `+` on an accumulator and
//!   `<`/`<=`/`>`/`>=` with a number 1, `&&`/`||` the sum of their sides, `?:` the condition and the dearer
//!   branch, a list literal 10, a map literal 30 (cel-go `common/cost.go`), and every other function, comparison
//!   or literal 0 beyond its arguments (string comparisons cost by length upstream);
//! - `matches`, `contains`, `startsWith`, `endsWith` with a literal argument on a string reached from `self` cost
//!   as cel-go estimates them (`0.1` per character, `0.25` per regex character);
//! - a comprehension (`all`, `exists`, `exists_one`, `map`, `filter`) iterating a list or map reached from `self`
//!   (or from an enclosing comprehension's variable) costs its size times the cost of its loop condition and step,
//!   nested ones multiply; iterating anything else (a literal list, a function's result) counts as zero iterations;
//! - minimal serialized sizes are upstream's (`""` 2, numbers 1, `true` 4, `{}`/`[]` 2 plus required properties) or above
//!   them (formatted strings 64), which can only lower the counts.
//!
//! A refusal is therefore always one upstream makes. Its factor is exact when above 100 (`more than 100x`, the
//! usual case of an unbounded iteration); below, it is the factor of the lower bound and may be smaller than
//! upstream's. Upstream refuses more (costly calls of other functions, iterations over computed lists).
//! `messageExpression` costs are not counted.

use cel::common::ast::{EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::Value;
use std::collections::HashMap;

/// `StaticEstimatedCostLimit`.
pub const RULE_LIMIT: u64 = 10_000_000;
/// `StaticEstimatedCRDCostLimit`.
pub const CRD_LIMIT: u64 = 100_000_000;
/// `apiservercel.DefaultMaxRequestSizeBytes`.
const MAX_REQUEST: u64 = 3 * 1024 * 1024;

/// `getCostErrorMessage`.
pub fn cost_message(name: &str, cost: u64, limit: u64) -> String {
    let factor = cost as f64 / limit as f64;
    let factor = if factor > 100.0 {
        "more than 100x".to_owned()
    } else if factor < 1.5 {
        format!("{factor:.6}x")
    } else {
        format!("{factor:.1}x")
    };
    format!(
        "{name} exceeds budget by factor of {factor} (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
    )
}

fn text<'a>(schema: &'a Value, key: &str) -> Option<&'a str> {
    schema.get(key).and_then(Value::as_str)
}

fn non_negative(schema: &Value, key: &str) -> Option<u64> {
    schema.get(key).and_then(Value::as_i64).map(|n| n.max(0) as u64)
}

fn int_or_string(schema: &Value) -> bool {
    schema.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true)
}

/// Whether the schema gives a CEL type (upstream leaves fields without one out).
fn typed(schema: &Value) -> bool {
    int_or_string(schema)
        || matches!(text(schema, "type"), Some("object" | "array" | "string" | "integer" | "number" | "boolean"))
}

/// The minimal serialized size of a value of `schema`, or more (`DeclType.MinSerializedSize`).
pub fn min_size(schema: &Value) -> u64 {
    if int_or_string(schema) {
        return 1;
    }
    match text(schema, "type") {
        Some("string") => match text(schema, "format") {
            Some("duration" | "date" | "date-time") => 64,
            _ => 2,
        },
        Some("integer" | "number") => 1,
        Some("boolean") => 4,
        Some("array") => 2,
        Some("object") if schema.get("additionalProperties").is_some_and(Value::is_object) => 2,
        Some("object") => {
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Value::as_array)
                .map(|r| r.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let properties = schema.get("properties").and_then(Value::as_object);
            2 + properties
                .into_iter()
                .flatten()
                .filter(|(name, prop)| {
                    required.contains(&name.as_str()) && typed(prop) && prop.get("default").is_none_or(Value::is_null)
                })
                .map(|(name, prop)| name.len() as u64 + min_size(prop) + 4)
                .fold(0u64, u64::saturating_add)
        }
        _ => 2,
    }
}

/// How many elements upstream assumes a list or map of `schema` may have, or a string's length.
fn max_elements(schema: &Value) -> Option<u64> {
    if int_or_string(schema) {
        return Some(non_negative(schema, "maxLength").map_or(MAX_REQUEST - 2, |n| n.saturating_mul(4)));
    }
    match text(schema, "type")? {
        "array" => {
            let items = schema.get("items").filter(|i| typed(i))?;
            Some(non_negative(schema, "maxItems").unwrap_or((MAX_REQUEST - 2) / (min_size(items) + 1)))
        }
        "object" => {
            let values = schema.get("additionalProperties").filter(|a| a.is_object() && typed(a))?;
            Some(non_negative(schema, "maxProperties").unwrap_or((MAX_REQUEST - 2) / (min_size(values) + 6)))
        }
        "string" => match text(schema, "format") {
            Some("byte" | "duration" | "date" | "date-time") => None,
            _ => match non_negative(schema, "maxLength") {
                Some(n) => Some(n.saturating_mul(4)),
                None => match schema.get("enum").and_then(Value::as_array) {
                    Some(values) if !values.is_empty() => {
                        Some(values.iter().filter_map(Value::as_str).map(|s| s.len() as u64).max().unwrap_or(0))
                    }
                    _ => Some(MAX_REQUEST - 2),
                },
            },
        },
        _ => None,
    }
}

/// The factor by which a node multiplies the occurrences of its children (`extractMaxElements`; `None` is
/// unbounded).
pub fn child_factor(schema: &Value) -> Option<u64> {
    match text(schema, "type") {
        Some("object") if schema.get("additionalProperties").is_some() => non_negative(schema, "maxProperties"),
        Some("array") => non_negative(schema, "maxItems"),
        _ => Some(1),
    }
}

/// How many times a rule of the node `schema` may run: `cardinality` (the bounded product above it), else
/// `maxCardinality(minSize)`.
pub fn occurrences(schema: &Value, cardinality: Option<u64>) -> u64 {
    cardinality.unwrap_or_else(|| MAX_REQUEST / (min_size(schema) + 1))
}

/// A lower bound of upstream's estimated cost of one evaluation of `expression` on the node `schema`.
pub fn expression_cost(expression: &IdedExpr, schema: &Value) -> u64 {
    let mut estimator = Estimator { scope: HashMap::new(), accumulators: Vec::new() };
    estimator.scope.insert("self".to_owned(), vec![Some(schema)]);
    estimator.scope.insert("oldSelf".to_owned(), vec![Some(schema)]);
    estimator.cost(expression)
}

struct Estimator<'s> {
    /// Variables and the schema node each is bound to (innermost last).
    scope: HashMap<String, Vec<Option<&'s Value>>>,
    accumulators: Vec<String>,
}

fn ceil_factor(size: u64, factor: f64) -> u64 {
    (size as f64 * factor).ceil() as u64
}

fn string_literal(e: &IdedExpr) -> Option<u64> {
    match &e.expr {
        Expr::Literal(LiteralValue::String(s)) => Some(s.inner().chars().count() as u64),
        _ => None,
    }
}

impl<'s> Estimator<'s> {
    /// The schema node an expression reaches from a variable bound to one.
    fn node(&self, e: &IdedExpr) -> Option<&'s Value> {
        match &e.expr {
            Expr::Ident(name) => self.scope.get(name).and_then(|v| v.last().copied().flatten()),
            Expr::Select(select) if !select.test => {
                let operand = self.node(&select.operand)?;
                operand.get("properties")?.get(&select.field).filter(|p| typed(p))
            }
            Expr::Call(call) if call.func_name == "_[_]" && call.target.is_none() && call.args.len() == 2 => {
                let container = self.node(&call.args[0])?;
                match text(container, "type")? {
                    "array" => container.get("items"),
                    "object" => container.get("additionalProperties").filter(|a| a.is_object()),
                    _ => None,
                }
            }
            _ => None,
        }
    }

    fn string_size(&self, e: &IdedExpr) -> Option<u64> {
        let node = self.node(e)?;
        (text(node, "type") == Some("string") || int_or_string(node)).then(|| max_elements(node)).flatten()
    }

    fn cost(&mut self, e: &IdedExpr) -> u64 {
        match &e.expr {
            Expr::Literal(_) | Expr::Unspecified => 0,
            Expr::Ident(_) => 1,
            Expr::Select(select) => {
                let operand = self.cost(&select.operand);
                let object =
                    !select.test && self.node(&select.operand).is_some_and(|n| text(n, "type") == Some("object"));
                operand + u64::from(object)
            }
            // `common.ListCreateBaseCost`, `MapCreateBaseCost`, `StructCreateBaseCost`.
            Expr::List(list) => list.elements.iter().map(|x| self.cost(x)).fold(10, u64::saturating_add),
            Expr::Map(map) => self.entries(map.entries.iter().map(|e| &e.expr)).saturating_add(30),
            Expr::Struct(s) => self.entries(s.entries.iter().map(|e| &e.expr)).saturating_add(40),
            Expr::Call(call) => {
                // `lists.range(3)`: cel-go resolves a namespaced function by name, with no identifier to cost.
                let namespace = matches!(call.target.as_deref(), Some(IdedExpr { expr: Expr::Ident(name), .. })
                    if super::program::NAMESPACES.contains(&name.as_str())
                        && self.scope.get(name).is_none_or(Vec::is_empty));
                let target = call.target.as_deref().filter(|_| !namespace).map_or(0, |t| self.cost(t));
                let costs: Vec<u64> = call.args.iter().map(|a| self.cost(a)).collect();
                let args = costs.iter().fold(target, |a, b| a.saturating_add(*b));
                let own = match (call.func_name.as_str(), call.target.as_deref(), call.args.as_slice()) {
                    ("_?_:_", _, [_, _, _]) => return costs[0].saturating_add(costs[1].max(costs[2])),
                    ("matches", Some(target), [pattern]) => match (self.string_size(target), string_literal(pattern)) {
                        (Some(size), Some(length)) => {
                            ceil_factor(size + 1, 0.1).saturating_mul(ceil_factor(length, 0.25))
                        }
                        _ => 0,
                    },
                    ("contains", Some(target), [needle]) => match (self.string_size(target), string_literal(needle)) {
                        (Some(size), Some(length)) => ceil_factor(size, 0.1).saturating_mul(ceil_factor(length, 0.1)),
                        _ => 0,
                    },
                    ("startsWith" | "endsWith", Some(_), [affix]) => {
                        string_literal(affix).map_or(0, |l| ceil_factor(l, 0.1))
                    }
                    ("size" | "!_" | "-_" | "_*_" | "_/_" | "_%_" | "_-_" | "_[_]" | "@not_strictly_false", _, _) => 1,
                    // The accumulator of `exists_one` (an int) or `map`/`filter` (a list): O(1) additions.
                    ("_+_", None, [a, b]) if [a, b].iter().any(|x| self.is_accumulator(x)) => 1,
                    // Numeric comparisons are O(1); string ones cost by length (possibly 0).
                    ("_<_" | "_<=_" | "_>_" | "_>=_", None, [a, b]) if self.numeric(a) || self.numeric(b) => 1,
                    _ => 0,
                };
                args.saturating_add(own)
            }
            Expr::Comprehension(c) => {
                let range = self.cost(&c.iter_range);
                let init = self.cost(&c.accu_init);
                let node = self.node(&c.iter_range);
                let count = node
                    .filter(|n| matches!(text(n, "type"), Some("array" | "object")))
                    .and_then(max_elements)
                    .unwrap_or(0);
                let element = node.and_then(|n| match text(n, "type") {
                    Some("array") => n.get("items"),
                    Some("object") => n.get("additionalProperties").filter(|a| a.is_object()),
                    _ => None,
                });
                let is_list = node.is_some_and(|n| text(n, "type") == Some("array"));
                // One variable: a list's items or a map's keys; two: index and item, or key and value.
                let (first, second) = match (&c.iter_var2, is_list) {
                    (None, true) => (element, None),
                    (None, false) => (None, None),
                    (Some(_), _) => (None, element),
                };
                self.push(&c.iter_var, first);
                if let Some(var2) = &c.iter_var2 {
                    self.push(var2, second);
                }
                self.accumulators.push(c.accu_var.clone());
                let per_iteration = self.cost(&c.loop_cond).saturating_add(self.cost(&c.loop_step));
                self.accumulators.pop();
                self.pop(&c.iter_var);
                if let Some(var2) = &c.iter_var2 {
                    self.pop(var2);
                }
                self.accumulators.push(c.accu_var.clone());
                let result = self.cost(&c.result);
                self.accumulators.pop();
                range.saturating_add(init).saturating_add(result).saturating_add(count.saturating_mul(per_iteration))
            }
        }
    }

    fn is_accumulator(&self, e: &IdedExpr) -> bool {
        matches!(&e.expr, Expr::Ident(name) if self.accumulators.contains(name))
    }

    /// An int, uint or double literal, or a node of an integer or number schema.
    fn numeric(&self, e: &IdedExpr) -> bool {
        matches!(&e.expr, Expr::Literal(LiteralValue::Int(_) | LiteralValue::UInt(_) | LiteralValue::Double(_)))
            || self.node(e).is_some_and(|n| matches!(text(n, "type"), Some("integer" | "number")))
    }

    fn entries<'e>(&mut self, entries: impl Iterator<Item = &'e EntryExpr>) -> u64 {
        let mut sum = 0u64;
        for entry in entries {
            sum = sum.saturating_add(match entry {
                EntryExpr::StructField(field) => self.cost(&field.value),
                EntryExpr::MapEntry(e) => self.cost(&e.key).saturating_add(self.cost(&e.value)),
            });
        }
        sum
    }

    fn push(&mut self, name: &str, node: Option<&'s Value>) {
        self.scope.entry(name.to_owned()).or_default().push(node);
    }

    fn pop(&mut self, name: &str) {
        if let Some(stack) = self.scope.get_mut(name) {
            stack.pop();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn cost(rule: &str, schema: &Value) -> u64 {
        let program = super::super::program::program(rule).expect("the rule compiles");
        expression_cost(program.expression(), schema)
    }

    #[test]
    fn messages_print_the_factor_as_go_does() {
        assert_eq!(
            cost_message("estimated rule cost", 12_345_678, RULE_LIMIT),
            "estimated rule cost exceeds budget by factor of 1.234568x (try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)"
        );
        assert!(cost_message("x", 25_000_000, RULE_LIMIT).contains("factor of 2.5x "));
        assert!(cost_message("x", 2_000_000_000, RULE_LIMIT).contains("factor of more than 100x "));
    }

    #[test]
    fn sizes_follow_the_schema_bounds() {
        let strings = json!({"type": "array", "items": {"type": "string"}});
        assert_eq!(max_elements(&strings), Some((MAX_REQUEST - 2) / 3));
        assert_eq!(max_elements(&json!({"type": "array", "maxItems": 5, "items": {"type": "string"}})), Some(5));
        assert_eq!(max_elements(&json!({"type": "string", "maxLength": 10})), Some(40));
        let item = json!({"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}});
        assert_eq!(min_size(&item), 2 + 4 + 2 + 4);
        assert_eq!(occurrences(&json!({"type": "string"}), None), MAX_REQUEST / 3);
        assert_eq!(occurrences(&json!({"type": "string"}), Some(7)), 7);
    }

    #[test]
    fn iterations_multiply_and_bounds_bring_them_down() {
        let unbounded =
            json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "string"}}}});
        let n = (MAX_REQUEST - 2) / 3;
        let one = cost("self.items.all(x, x.size() < 10)", &unbounded);
        assert!(one >= n && one < RULE_LIMIT, "{one}");
        let nested = cost("self.items.all(x, self.items.all(y, x == y))", &unbounded);
        assert!(nested > 100 * RULE_LIMIT, "{nested}");
        let bounded = json!({"type": "object", "properties": {"items": {"type": "array", "maxItems": 10,
            "items": {"type": "string", "maxLength": 10}}}});
        assert!(cost("self.items.all(x, self.items.all(y, x == y))", &bounded) < 1000);
        // A regex over an unbounded string: 0.1 per character times 0.25 per pattern character.
        let text = json!({"type": "object", "properties": {"s": {"type": "string"}}});
        assert!(cost("self.s.matches('^[a-z]+$')", &text) >= ceil_factor(MAX_REQUEST - 1, 0.1) * 2);
        // Three integer comparisons per item of an unbounded list of objects: per item the loop condition
        // `@not_strictly_false(@result)` (2) and step `@result && ...` (1 + 3 x (x 1, .a 1, > 1)), as cel-go counts;
        // plus `self.items` (2) and the result `@result` (1).
        let objects = json!({"type": "object", "properties": {"items": {"type": "array", "items": {"type": "object",
            "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}}}}});
        assert_eq!(cost("self.items.all(x, x.a > 0 && x.b > 0 && x.c > 0)", &objects), n * 12 + 3);
        // Literal lists and maps have a base cost; `map` builds a one-element list per item.
        assert_eq!(cost("[1, 2] == [1] && {'a': 1} == {}", &unbounded), 10 + 10 + 30 + 30);
        let mapped = cost("self.items.map(x, x).size() > 0", &unbounded);
        // Per item: step `@result + [x]` = `+` 1, `@result` 1, the list 10 and `x` 1; condition `true` 0.
        assert_eq!(mapped, n * 13 + (1 + 1) + 10 + 1 + 1 + 1);
        // Iterating what no schema bounds counts nothing.
        assert!(cost("[1, 2, 3].all(x, x > 0)", &unbounded) < 20);
    }
}
