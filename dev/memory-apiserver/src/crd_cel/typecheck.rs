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

use super::checker::Checker;
use cel::Program;
use cel::common::ast::{Expr, LiteralValue};
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
    let mut checker = Checker::new(schema, resource_root);
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
            let checker = Checker::new(schema, resource_root);
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(rule: &str, schema: &Value, root: bool) -> Option<String> {
        let program = super::super::program::program(rule).expect("the rule parses");
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

    /// A schema with a field of each type the operator checks of [`super::super::overloads`] know.
    fn operator_spec() -> Value {
        json!({"type": "object", "properties": {
            "replicas": {"type": "integer"}, "ratio": {"type": "number"}, "name": {"type": "string"},
            "flag": {"type": "boolean"}, "port": {"x-kubernetes-int-or-string": true},
            "at": {"type": "string", "format": "date-time"}, "tags": {"type": "array", "items": {"type": "string"}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
            "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "ports": {"type": "array", "items": {"type": "object", "properties": {"number": {"type": "integer"}}}}}})
    }

    #[test]
    fn operands_no_overload_takes_are_refused_at_the_operator_as_cel_go_prints_them() {
        assert_eq!(
            check("self.name == 1", &operator_spec(), false).as_deref(),
            Some(
                "ERROR: <input>:1:11: found no matching overload for '_==_' applied to '(string, int)'\n | self.name \
                 == 1\n | ..........^"
            )
        );
        let refused = |rule: &str, message: &str| {
            let error = check(rule, &operator_spec(), false).unwrap_or_else(|| panic!("{rule} was not refused"));
            assert!(error.contains(&format!("found no matching overload for {message}\n")), "{rule}: {error}");
        };
        refused("self.replicas == 1.0", "'_==_' applied to '(int, double)'");
        refused("self.replicas != 'x'", "'_!=_' applied to '(int, string)'");
        refused("self.tags == 'a'", "'_==_' applied to '(list(string), string)'");
        refused("self.labels['a'] > 1", "'_>_' applied to '(string, int)'");
        refused("self.flag < 'x'", "'_<_' applied to '(bool, string)'");
        refused("self.replicas + 1.5 > 2.0", "'_+_' applied to '(int, double)'");
        refused("self.name * 2 == 'x'", "'_*_' applied to '(string, int)'");
        refused("!self.name", "'!_' applied to '(string)'");
        refused("self.flag && self.replicas", "'_&&_' applied to '(bool, int)'");
        refused("self.ports.all(p, p.number == 'x')", "'_==_' applied to '(int, string)'");
        let located = check("self.flag || self.replicas", &operator_spec(), false).unwrap();
        assert!(located.starts_with("ERROR: <input>:1:11: "), "{located}");
        for fine in [
            "self.name == 'x' && self.replicas > 1.5 && self.ratio < 1",
            "self.port == 1 || self.port == 'http'",
            "self.free == 1 && self.at == 'x'",
            "self.tags == ['a'] && self.tags + ['b'] == ['a', 'b']",
            "self.labels.all(k, k.size() > 1)",
            "self.ports.all(p, p.number > 0) && self.ports.exists_one(p, p.number == 1)",
            "self.ports == []",
            "!has(self.name) || self.name.startsWith('a')",
        ] {
            assert_eq!(check(fine, &operator_spec(), false), None, "{fine}");
        }
    }
}
