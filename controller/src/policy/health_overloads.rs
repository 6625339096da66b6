//! The operator and function type errors of a health check's expression that the schema of its object shows: an
//! operand whose type the schema (or a literal) fixes, to which no overload of the operator applies. cel-go's
//! checker refuses these when the API server compiles a CRD's rule (kubernetes/kubernetes
//! `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/compilation.go`), with the message
//! `found no matching overload for '_==_' applied to '(string, int)'`; a check with one never passes.
//!
//! The overloads are those cel-go's standard library declares (google/cel-go `common/stdlib/standard.go`, checked by
//! `checker/checker.go` `resolveOverload`):
//! - `_==_`, `_!=_`: `(A, A)`, one type for both sides. Numbers of different types (`int`, `uint`, `double`) do not
//!   unify: `1 == 1.0` is refused by the checker (the runtime's heterogeneous equality does not make it pass the
//!   checker).
//! - `_<_`, `_<=_`, `_>_`, `_>=_`: `bool`, `string`, `bytes`, `timestamp`, `duration` with themselves, and the numbers
//!   with each other (the cross-type numeric overloads `less_int64_double`..., which an environment may or may not
//!   enable with `cel.CrossTypeNumericComparisons`): a number against a number is never flagged, whichever it is;
//!   there is no ordering of lists or maps.
//! - `_+_`: `int`, `uint`, `double`, `string`, `bytes`, `list(A)` with themselves; `_-_`, `_*_`, `_/_`: `int`, `uint`,
//!   `double` with themselves; `_%_`: `int`, `uint`; `-_`: `int`, `double` (timestamps and durations are not typed
//!   here: their operands are unknown).
//! - `!_`, `_&&_`, `_||_` and the condition of `_?_:_`: `bool`.
//! - `startsWith`, `endsWith`, `contains`, `matches`: a `string` receiver and argument; `size`: a `string`, `bytes`,
//!   `list` or `map`.
//!
//! Only what is certain: an operand whose type is not known (`x-kubernetes-int-or-string`, a schema without a
//! type, `x-kubernetes-preserve-unknown-fields`, a string with a `format` (Kubernetes types `date-time` as a
//! timestamp, `duration` as a duration, `byte` as bytes; built-in kinds' IntOrString is published as a string of
//! format `int-or-string`), `null`, a function this module does not type, `metadata` below the root) is never flagged. A schema
//! type maps to a CEL type as Kubernetes maps it (`staging/src/k8s.io/apiserver/pkg/cel/common/schemas.go`
//! `SchemaDeclType`): `integer` int, `number` double, `string` string, `boolean` bool, `array` list, `object`
//! with properties an object, with `additionalProperties` a map.

use super::health_types::{Checker, text};
use cel::common::ast::{ComprehensionExpr, EntryExpr, Expr, IdedExpr, LiteralValue};
use serde_json::Value;

/// The type of an operand, as far as it is known.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Bool,
    Int,
    Uint,
    Double,
    String,
    Bytes,
    List,
    Map,
}

impl Kind {
    fn number(self) -> bool {
        matches!(self, Kind::Int | Kind::Uint | Kind::Double)
    }
}

/// A known type, with the name cel-go gives it in its messages.
#[derive(Clone, Debug)]
struct Ty {
    kind: Kind,
    name: String,
}

impl Ty {
    fn of(kind: Kind) -> Ty {
        let name = match kind {
            Kind::Bool => "bool",
            Kind::Int => "int",
            Kind::Uint => "uint",
            Kind::Double => "double",
            Kind::String => "string",
            Kind::Bytes => "bytes",
            Kind::List => "list(dyn)",
            Kind::Map => "map(dyn, dyn)",
        };
        Ty { kind, name: name.to_owned() }
    }
}

/// The first operator or function applied to operands no overload of it takes, as cel-go's checker names it.
pub(super) fn mismatch(checker: &Checker<'_>, expr: &IdedExpr, kind: &str) -> Option<String> {
    Types { checker: checker.clone(), accumulators: Vec::new(), kind }.first(expr)
}

#[derive(Clone)]
struct Types<'s, 'k> {
    checker: Checker<'s>,
    /// The accumulators of the comprehensions around, innermost last, with their type.
    accumulators: Vec<(String, Option<Ty>)>,
    kind: &'k str,
}

impl<'s> Types<'s, '_> {
    /// The type of a schema node (already resolved), `None` when it is open.
    fn schema(&self, node: &Value) -> Option<Ty> {
        if node.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true)
            || node.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true)
        {
            return None;
        }
        let kind = match text(node, "type")? {
            // A format: Kubernetes types `byte`, `duration`, `date`, `date-time` as bytes, a duration, a timestamp (not
            // modelled here), and IntOrString (`intstr.IntOrString`, an int or a string in the object) carries the
            // format `int-or-string` (with the type string in OpenAPI v2; v3 gives a `oneOf` and no type, open
            // anyway): any string with a format is open.
            "string" if node.get("format").is_some() => return None,
            "string" => Kind::String,
            "integer" => Kind::Int,
            "number" => Kind::Double,
            "boolean" => Kind::Bool,
            "array" => {
                let item = node.get("items").map(|i| self.checker.resolve(i)).and_then(|i| self.schema(i));
                let item = item.map_or("dyn".to_owned(), |t| t.name);
                return Some(Ty { kind: Kind::List, name: format!("list({item})") });
            }
            "object" => match node.get("additionalProperties").filter(|a| a.is_object()) {
                Some(values) => {
                    let value = self.schema(self.checker.resolve(values)).map_or("dyn".to_owned(), |t| t.name);
                    return Some(Ty { kind: Kind::Map, name: format!("map(string, {value})") });
                }
                None if node.get("properties").is_some() => return Some(Ty { kind: Kind::Map, name: "object".into() }),
                None => return None,
            },
            _ => return None,
        };
        Some(Ty::of(kind))
    }

    /// The type of `e`, `None` when it is not known.
    fn type_of(&self, e: &IdedExpr) -> Option<Ty> {
        if let Expr::Ident(name) = &e.expr
            && let Some((_, ty)) = self.accumulators.iter().rev().find(|(n, _)| n == name)
        {
            return ty.clone();
        }
        if let Some((node, root)) = self.checker.reach(e) {
            return if root { None } else { self.schema(node) };
        }
        let kind = match &e.expr {
            Expr::Literal(literal) => match literal {
                LiteralValue::Boolean(_) => Kind::Bool,
                LiteralValue::Int(_) => Kind::Int,
                LiteralValue::UInt(_) => Kind::Uint,
                LiteralValue::Double(_) => Kind::Double,
                LiteralValue::String(_) => Kind::String,
                LiteralValue::Bytes(_) => Kind::Bytes,
                LiteralValue::Null => return None,
            },
            Expr::List(_) => Kind::List,
            Expr::Map(_) => Kind::Map,
            Expr::Select(select) if select.test => Kind::Bool,
            Expr::Comprehension(c) => {
                let mut inner = self.clone();
                inner.checker = self.checker.enter(c);
                inner.accumulators.push((c.accu_var.clone(), self.type_of(&c.accu_init)));
                return inner.type_of(&c.result);
            }
            Expr::Call(call) => {
                let operand = |i: usize| call.args.get(i).and_then(|a| self.type_of(a));
                match (call.func_name.as_str(), &call.target) {
                    ("_==_" | "_!=_" | "_<_" | "_<=_" | "_>_" | "_>=_" | "!_" | "_&&_" | "_||_" | "@in", None) => {
                        Kind::Bool
                    }
                    ("@not_strictly_false", None) => Kind::Bool,
                    ("startsWith" | "endsWith" | "contains" | "matches", _) => Kind::Bool,
                    ("size" | "int", _) | ("indexOf" | "lastIndexOf", Some(_)) => Kind::Int,
                    ("uint", None) => Kind::Uint,
                    ("double", None) => Kind::Double,
                    ("string", None) => Kind::String,
                    ("bool", None) => Kind::Bool,
                    ("bytes", None) => Kind::Bytes,
                    ("lowerAscii" | "upperAscii" | "trim" | "replace" | "substring" | "charAt", Some(target))
                        if self.type_of(target).is_some_and(|t| t.kind == Kind::String) =>
                    {
                        Kind::String
                    }
                    ("split", Some(_)) => return Some(Ty { kind: Kind::List, name: "list(string)".into() }),
                    ("_+_" | "_-_" | "_*_" | "_/_" | "_%_", None) => {
                        let (a, b) = (operand(0)?, operand(1)?);
                        return (a.kind == b.kind).then_some(a);
                    }
                    ("-_", None) => return operand(0),
                    ("_?_:_", None) => {
                        let (a, b) = (operand(1)?, operand(2)?);
                        return (a.kind == b.kind && a.name == b.name).then_some(a);
                    }
                    _ => return None,
                }
            }
            _ => return None,
        };
        Some(Ty::of(kind))
    }

    /// The first type error in `e`, its operands' first.
    fn first(&self, e: &IdedExpr) -> Option<String> {
        match &e.expr {
            Expr::Select(select) => self.first(&select.operand),
            Expr::Call(call) => call
                .target
                .iter()
                .map(|t| &**t)
                .chain(&call.args)
                .find_map(|arg| self.first(arg))
                .or_else(|| self.call(&call.func_name, call.target.as_deref(), &call.args)),
            Expr::Comprehension(c) => self.comprehension(c),
            Expr::List(list) => list.elements.iter().find_map(|x| self.first(x)),
            Expr::Map(map) => map.entries.iter().find_map(|entry| match &entry.expr {
                EntryExpr::MapEntry(e) => self.first(&e.key).or_else(|| self.first(&e.value)),
                EntryExpr::StructField(f) => self.first(&f.value),
            }),
            Expr::Struct(s) => s.entries.iter().find_map(|entry| match &entry.expr {
                EntryExpr::MapEntry(e) => self.first(&e.key).or_else(|| self.first(&e.value)),
                EntryExpr::StructField(f) => self.first(&f.value),
            }),
            Expr::Ident(_) | Expr::Literal(_) | Expr::Unspecified => None,
        }
    }

    fn comprehension(&self, c: &ComprehensionExpr) -> Option<String> {
        if let Some(found) = self.first(&c.iter_range).or_else(|| self.first(&c.accu_init)) {
            return Some(found);
        }
        let mut inner = self.clone();
        inner.checker = self.checker.enter(c);
        inner.accumulators.push((c.accu_var.clone(), self.type_of(&c.accu_init)));
        [&c.loop_cond, &c.loop_step, &c.result].into_iter().find_map(|part| inner.first(part))
    }

    /// The type error of applying `function` to `target` and `args`, whose own errors were looked for.
    fn call(&self, function: &str, target: Option<&IdedExpr>, args: &[IdedExpr]) -> Option<String> {
        let types: Vec<Option<Ty>> = target.into_iter().chain(args).map(|a| self.type_of(a)).collect();
        let known = || types.iter().all(Option::is_some);
        let kinds: Vec<Kind> = types.iter().flatten().map(|t| t.kind).collect();
        let refused = match (function, target.is_some(), kinds.as_slice()) {
            ("_==_" | "_!=_", false, [a, b]) => a != b,
            ("_<_" | "_<=_" | "_>_" | "_>=_", false, [a, b]) => {
                !((a == b && !matches!(a, Kind::List | Kind::Map)) || (a.number() && b.number()))
            }
            ("_+_", false, [a, b]) => a != b || *a == Kind::Bool || *a == Kind::Map,
            ("_-_" | "_*_" | "_/_", false, [a, b]) => a != b || !a.number(),
            ("_%_", false, [a, b]) => a != b || !matches!(a, Kind::Int | Kind::Uint),
            ("-_", false, [a]) => !matches!(a, Kind::Int | Kind::Double),
            // Non-strict operators: each operand that is known must be a bool.
            ("!_" | "_&&_" | "_||_", false, _) => kinds.iter().any(|k| *k != Kind::Bool),
            ("_?_:_", false, _) => types[0].as_ref().is_some_and(|t| t.kind != Kind::Bool),
            ("startsWith" | "endsWith" | "contains" | "matches", true, _) => kinds.iter().any(|k| *k != Kind::String),
            ("size", _, [a]) => !matches!(a, Kind::String | Kind::Bytes | Kind::List | Kind::Map),
            _ => false,
        };
        // Every operand's type must be known for a strict overload: one not known could be any type. The
        // non-strict operators are refused by one operand alone.
        let partial = matches!(function, "!_" | "_&&_" | "_||_" | "_?_:_")
            || matches!(function, "startsWith" | "endsWith" | "contains" | "matches") && !kinds.is_empty();
        if !refused || !(known() || partial) {
            return None;
        }
        let shown: Vec<String> =
            types.iter().map(|t| t.as_ref().map_or("dyn".to_owned(), |t| t.name.clone())).collect();
        let applied = match target {
            Some(_) => format!("'{}.({})'", shown[0], shown[1..].join(", ")),
            None => format!("'({})'", shown.join(", ")),
        };
        let mut message = format!("found no matching overload for '{function}' applied to {applied}");
        let fields: Vec<String> = target
            .into_iter()
            .chain(args)
            .zip(&types)
            .filter_map(|(a, t)| {
                let path = super::health_cel::path_of(&a.expr).filter(|p| p.contains('.'))?;
                Some(format!("{path} is {} in the {} schema the API server publishes", t.as_ref()?.name, self.kind))
            })
            .collect();
        if !fields.is_empty() {
            message += &format!(" ({})", fields.join("; "));
        }
        Some(message)
    }
}

#[cfg(test)]
mod tests {
    use super::super::health_cel::Expression;
    use super::super::health_types::type_error;
    use serde_json::{Value, json};

    /// A document as the API server publishes a CRD's group version: a Widget with fields of every type.
    fn document() -> Value {
        json!({"components": {"schemas": {
            "com.example.v1.Widget": {"type": "object",
                "x-kubernetes-group-version-kind": [{"group": "example.com", "version": "v1", "kind": "Widget"}],
                "properties": {
                    "spec": {"type": "object", "properties": {
                        "replicas": {"type": "integer"}, "ratio": {"type": "number"}, "paused": {"type": "boolean"},
                        "name": {"type": "string"}, "port": {"x-kubernetes-int-or-string": true},
                        "created": {"type": "string", "format": "date-time"}, "free": {},
                        "surge": {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"}]},
                        "raw": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "items": {"type": "array", "items": {"allOf": [{"$ref": "#/components/schemas/com.example.v1.Item"}]}}}},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}, "ready": {"type": "integer"}}}}},
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
            "com.example.v1.Item": {"type": "object", "properties": {"count": {"type": "integer"}, "id": {"type": "string"}}}
        }}})
    }

    fn check(expression: &str) -> Option<String> {
        let e = Expression::compile(expression).unwrap_or_else(|e| panic!("{expression}: {e}"));
        type_error(&e, &document(), "example.com", "v1", "Widget")
    }

    fn refused(expression: &str, overload: &str) {
        let error = check(expression).unwrap_or_else(|| panic!("{expression} was not refused"));
        assert!(error.starts_with(&format!("found no matching overload for {overload}")), "{expression}: {error}");
    }

    #[test]
    fn health_equality_between_a_field_and_a_literal_of_another_type_is_refused_naming_both() {
        assert_eq!(
            check("self.status.phase == 1").as_deref(),
            Some(
                "found no matching overload for '_==_' applied to '(string, int)' (self.status.phase is string in \
                 the Widget schema the API server publishes)"
            )
        );
        refused("self.spec.replicas != 'three'", "'_!=_' applied to '(int, string)'");
        // Numbers of different types do not unify for the checker: int == double is refused.
        refused("self.spec.replicas == 1.0", "'_==_' applied to '(int, double)'");
        refused("self.spec.ratio == 1", "'_==_' applied to '(double, int)'");
        refused("self.spec.paused == 'true'", "'_==_' applied to '(bool, string)'");
        refused("self.spec.tags == 'a'", "'_==_' applied to '(list(string), string)'");
        refused("self.spec.labels['a'] == 1", "'_==_' applied to '(string, int)'");
        // A map's value selected as a field (`self.data.health` of a ConfigMap).
        refused("self.spec.labels.a == 1", "'_==_' applied to '(string, int)'");
        refused("self.status.phase == self.status.ready", "'_==_' applied to '(string, int)'");
        for fine in [
            "self.status.phase == 'Running'",
            "self.spec.replicas == self.status.ready",
            "self.spec.ratio == 0.5",
            "self.spec.port == 80 || self.spec.port == 'http'",
            "self.spec.free == 1",
            "self.spec.raw == 1",
            "self.spec.created == 'x'",
            // IntOrString as the API server publishes it for built-in kinds: a string of format int-or-string.
            "self.spec.surge == 1 || self.spec.surge == '25%'",
            "self.spec.tags == ['a']",
            "self.status.phase == null",
            "self.metadata.name == 1",
            "self.spec.labels == {'a': 'b'}",
        ] {
            assert_eq!(check(fine), None, "{fine}");
        }
    }

    #[test]
    fn health_ordering_between_mismatched_types_is_refused_numbers_with_each_other_are_not() {
        refused("self.status.phase > 1", "'_>_' applied to '(string, int)'");
        refused("self.spec.replicas <= 'x'", "'_<=_' applied to '(int, string)'");
        refused("self.spec.tags < ['a']", "'_<_' applied to '(list(string), list(dyn))'");
        refused("self.spec.paused >= 1", "'_>=_' applied to '(bool, int)'");
        for fine in [
            "self.spec.replicas > 1.5",
            "self.spec.ratio < 1",
            "self.spec.replicas >= 1u",
            "self.status.phase < 'b'",
            "self.spec.port > 1",
        ] {
            assert_eq!(check(fine), None, "{fine}");
        }
    }

    #[test]
    fn health_arithmetic_on_mismatched_types_is_refused() {
        refused("self.spec.replicas + 1.0 > 2", "'_+_' applied to '(int, double)'");
        refused("self.spec.replicas - self.spec.ratio > 0.0", "'_-_' applied to '(int, double)'");
        refused("self.status.phase * 2 == 'x'", "'_*_' applied to '(string, int)'");
        refused("self.spec.ratio % 2.0 == 0.0", "'_%_' applied to '(double, double)'");
        refused("-self.status.phase == 'x'", "'-_' applied to '(string)'");
        refused("self.spec.paused + self.spec.paused", "'_+_' applied to '(bool, bool)'");
        // The result of an arithmetic is typed: int + int compared to a string.
        refused("self.spec.replicas + 1 == 'x'", "'_==_' applied to '(int, string)'");
        for fine in [
            "self.spec.replicas + 1 > 2",
            "self.status.phase + 'x' == 'ax'",
            "self.spec.tags + ['x'] == ['a']",
            "self.spec.ratio * 2.0 > 1.0",
            "self.spec.port + 1 > 2",
            "-self.spec.replicas < 0",
        ] {
            assert_eq!(check(fine), None, "{fine}");
        }
    }

    #[test]
    fn health_string_functions_and_size_on_receivers_they_do_not_take_are_refused() {
        refused("self.spec.replicas.startsWith('1')", "'startsWith' applied to 'int.(string)'");
        refused("self.spec.tags.contains('a')", "'contains' applied to 'list(string).(string)'");
        refused("self.status.phase.endsWith(1)", "'endsWith' applied to 'string.(int)'");
        refused("self.spec.ratio.matches('^1')", "'matches' applied to 'double.(string)'");
        refused("self.spec.replicas.size() > 0", "'size' applied to 'int.()'");
        refused("size(self.spec.paused) > 0", "'size' applied to '(bool)'");
        for fine in [
            "self.status.phase.startsWith('Run')",
            "self.spec.labels['a'].contains('x')",
            "self.spec.tags.size() > 0 && self.spec.labels.size() > 0 && size(self.status.phase) > 0",
            "self.spec.port.startsWith('h')",
            "self.spec.free.contains('x')",
        ] {
            assert_eq!(check(fine), None, "{fine}");
        }
    }

    #[test]
    fn health_logical_operators_on_operands_that_are_not_bools_are_refused() {
        refused("!self.status.phase", "'!_' applied to '(string)'");
        refused("self.spec.paused && self.spec.replicas", "'_&&_' applied to '(bool, int)'");
        // One operand known not a bool is enough: `_||_` takes only bools.
        refused("self.spec.free || self.status.phase", "'_||_' applied to '(dyn, string)'");
        refused("self.spec.name ? true : false", "'_?_:_' applied to '(string, bool, bool)'");
        for fine in [
            "!self.spec.paused",
            "self.spec.paused || self.spec.free",
            "!has(self.spec.name) || self.spec.name == 'x'",
            "self.spec.paused ? self.spec.replicas > 1 : true",
        ] {
            assert_eq!(check(fine), None, "{fine}");
        }
    }

    #[test]
    fn health_comprehension_variables_are_typed_by_the_items_schema() {
        refused("self.spec.items.exists(i, i.count == 'x')", "'_==_' applied to '(int, string)'");
        refused("self.spec.items.all(i, i.id > 0)", "'_>_' applied to '(string, int)'");
        refused("self.spec.tags.exists(t, t + 1 == 'a')", "'_+_' applied to '(string, int)'");
        // A predicate that is no bool: the macro's `_||_` gets the item's type.
        refused("self.spec.items.exists(i, i.id)", "'_||_'");
        refused("self.spec.items.exists_one(i, i.count) ", "'_?_:_'");
        for fine in [
            "self.spec.items.exists(i, i.count > 1 && i.id == 'x')",
            "self.spec.items.exists_one(i, i.count == 1)",
            "self.spec.items.map(i, i.count).exists(c, c > 1)",
            "self.spec.items.filter(i, i.count > 1).size() == 0",
            "self.spec.labels.exists(k, k.startsWith('a'))",
            "self.spec.items.all(i, has(i.id))",
        ] {
            assert_eq!(check(fine), None, "{fine}");
        }
    }
}
