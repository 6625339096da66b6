//! Compiling `x-kubernetes-validations` rules, and the errors a CRD whose rules do not compile gets at write time.
//!
//! Checked against kubernetes/kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/
//! compilation.go` (`compileRule`: `compilation failed: <issues>`, `messageExpression compilation failed: ...`,
//! `UsesOldSelf` from the references to `oldSelf`) and `pkg/apis/apiextensions/validation/validation.go`
//! (`ValidateCustomResourceDefinitionOpenAPISchema`: the errors on `x-kubernetes-validations[i].rule` /
//! `.messageExpression` / `.optionalOldSelf`, and `oldSelf` forbidden below a list that is not a map list or
//! inside an atomic map).
//!
//! # Assumptions
//! - cel-rust has no type checker. A rule is refused at CRD write when it does not parse or names a variable other
//!   than `self` and `oldSelf` (cel-go's `undeclared reference`); type errors (a field the schema lacks, a
//!   non-boolean rule) surface when the rule is evaluated, as an error that refuses the object. A CRD upstream
//!   refuses for a type error is accepted here, and every object it validates with that rule is refused.
//! - The estimated cost limit is not computed (docs/dev-cluster.md).

use super::library::ENVIRONMENT;
use crate::apiserver::schema::{FieldError, FieldPath};
use cel::Program;
use cel::common::ast::{EntryExpr, Expr, IdedExpr};
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// Compiled programs by source, so that a rule is parsed once, not on every request.
static CACHE: LazyLock<Mutex<HashMap<String, Compiled>>> = LazyLock::new(Default::default);

/// A compiled program, or the detail of why it does not compile.
type Compiled = Result<Arc<Program>, String>;

/// At most this many sources are cached; the cache is emptied past it (rules change only with their CRD).
const CACHE_LIMIT: usize = 4096;

/// Names an expression may use besides its comprehension variables: the two variables, and the namespaces and
/// type names cel-go resolves (`int(x)`, `lists.range(3)`).
const GLOBALS: [&str; 18] = [
    "self",
    "oldSelf",
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
    "lists",
    "math",
    "strings",
    "optional",
    "cel",
];

/// Compiles `source` (cached): the program, or the detail upstream prints after `compilation failed: `.
pub fn program(source: &str) -> Result<Arc<Program>, String> {
    if let Some(found) = CACHE.lock().get(source) {
        return found.clone();
    }
    let compiled = compile_uncached(source);
    let mut cache = CACHE.lock();
    if cache.len() >= CACHE_LIMIT {
        cache.clear();
    }
    cache.insert(source.to_owned(), compiled.clone());
    compiled
}

fn compile_uncached(source: &str) -> Result<Arc<Program>, String> {
    // cel-rust prints a parse error's source line as `\n| line`, cel-go as `\n | line`.
    let program = ENVIRONMENT.compile(source).map_err(|e| e.to_string().replace("\n| ", "\n | "))?;
    let mut scope = Vec::new();
    if let Some(id) = undeclared(program.expression(), &mut scope) {
        let (name, expression_id) = id;
        let start = program.source_info().offset_for(expression_id).map_or(0, |(start, _)| start as usize);
        let before = source.get(..start).unwrap_or_default();
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let column = before[line_start..].chars().count() + 1;
        let snippet = source.lines().nth(line - 1).unwrap_or_default();
        let pointer = format!("{:.>width$}", "^", width = column);
        return Err(format!(
            "ERROR: <input>:{line}:{column}: undeclared reference to '{name}' (in container '')\n | {snippet}\n | {pointer}"
        ));
    }
    Ok(Arc::new(program))
}

/// The first identifier that is neither a comprehension variable in scope nor a global, with its node id.
fn undeclared<'e>(expression: &'e IdedExpr, scope: &mut Vec<&'e str>) -> Option<(&'e str, u64)> {
    match &expression.expr {
        Expr::Ident(name) => {
            let known = name.starts_with('@') || scope.contains(&name.as_str()) || GLOBALS.contains(&name.as_str());
            (!known).then_some((name.as_str(), expression.id))
        }
        Expr::Call(call) => call
            .target
            .as_deref()
            .and_then(|t| undeclared(t, scope))
            .or_else(|| call.args.iter().find_map(|a| undeclared(a, scope))),
        Expr::Comprehension(c) => {
            if let Some(found) = undeclared(&c.iter_range, scope).or_else(|| undeclared(&c.accu_init, scope)) {
                return Some(found);
            }
            let depth = scope.len();
            scope.push(&c.iter_var);
            if let Some(second) = &c.iter_var2 {
                scope.push(second);
            }
            scope.push(&c.accu_var);
            let found = [&c.loop_cond, &c.loop_step, &c.result].into_iter().find_map(|e| undeclared(e, scope));
            scope.truncate(depth);
            found
        }
        Expr::List(list) => list.elements.iter().find_map(|e| undeclared(e, scope)),
        Expr::Map(map) => map.entries.iter().find_map(|entry| match &entry.expr {
            EntryExpr::StructField(field) => undeclared(&field.value, scope),
            EntryExpr::MapEntry(e) => undeclared(&e.key, scope).or_else(|| undeclared(&e.value, scope)),
        }),
        Expr::Struct(s) => s.entries.iter().find_map(|entry| match &entry.expr {
            EntryExpr::StructField(field) => undeclared(&field.value, scope),
            EntryExpr::MapEntry(e) => undeclared(&e.key, scope).or_else(|| undeclared(&e.value, scope)),
        }),
        Expr::Select(select) => undeclared(&select.operand, scope),
        Expr::Literal(_) | Expr::Unspecified => None,
    }
}

/// Whether `program` reads `oldSelf` (a transition rule).
pub fn uses_old_self(program: &Program) -> bool {
    program.references().has_variable("oldSelf")
}

/// A rule as Go's `%#v` prints `apiextensions.ValidationRule` (the value of upstream's compile errors). A set
/// `reason` or `optionalOldSelf` is a pointer Go prints as an address; it is printed as `(0x0)` here.
pub fn go_rule(rule: &Value) -> String {
    let text = |key: &str| format!("{:?}", rule.get(key).and_then(Value::as_str).unwrap_or_default());
    let pointer = |key: &str, ty: &str| {
        if rule.get(key).is_some_and(|v| !v.is_null()) { format!("(*{ty})(0x0)") } else { format!("(*{ty})(nil)") }
    };
    format!(
        "apiextensions.ValidationRule{{Rule:{}, Message:{}, MessageExpression:{}, Reason:{}, FieldPath:{}, OptionalOldSelf:{}}}",
        text("rule"),
        text("message"),
        text("messageExpression"),
        pointer("reason", "apiextensions.FieldValueErrorReason"),
        text("fieldPath"),
        pointer("optionalOldSelf", "bool"),
    )
}

fn invalid_rule(path: &FieldPath, rule: &Value, detail: &str) -> FieldError {
    FieldError {
        field: path.to_string(),
        kind: crate::apiserver::schema::ErrorKind::Invalid,
        message: format!("Invalid value: {}: {detail}", go_rule(rule)),
    }
}

/// The CEL errors of a CRD schema at `path` (`spec.validation.openAPIV3Schema`): rules and message expressions
/// that do not compile, `oldSelf` where it cannot be correlated, `optionalOldSelf` without `oldSelf`.
pub fn schema_errors(schema: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut errors = Vec::new();
    walk(schema, path, None, &mut errors);
    errors
}

fn walk(schema: &Value, path: &FieldPath, uncorrelatable: Option<&FieldPath>, errors: &mut Vec<FieldError>) {
    let Some(node) = schema.as_object() else { return };
    for (i, rule) in node.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten().enumerate() {
        let at = path.child("x-kubernetes-validations").index(i);
        let source = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
        if source.trim().is_empty() {
            continue; // reported by the form checks
        }
        match program(source) {
            Err(detail) => errors.push(invalid_rule(&at.child("rule"), rule, &format!("compilation failed: {detail}"))),
            Ok(compiled) => {
                if uses_old_self(&compiled) {
                    if let Some(within) = uncorrelatable {
                        errors.push(FieldError::invalid(
                            &at.child("rule"),
                            &json!(source),
                            &format!(
                                "oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"
                            ),
                        ));
                    }
                } else if let Some(optional) = rule.get("optionalOldSelf").filter(|v| !v.is_null()) {
                    errors.push(FieldError::invalid(
                        &at.child("optionalOldSelf"),
                        optional,
                        "may not be set if oldSelf is not used in rule",
                    ));
                }
            }
        }
        let message_expression = rule.get("messageExpression").and_then(Value::as_str).unwrap_or_default();
        if !message_expression.trim().is_empty()
            && let Err(detail) = program(message_expression)
        {
            errors.push(invalid_rule(
                &at.child("messageExpression"),
                rule,
                &format!("messageExpression compilation failed: {detail}"),
            ));
        }
    }
    if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
        walk(additional, &path.child("additionalProperties"), uncorrelatable, errors);
    }
    let atomic_map = node.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
    for (key, child) in node.get("properties").and_then(Value::as_object).into_iter().flatten() {
        let within = if atomic_map { uncorrelatable.or(Some(path)) } else { uncorrelatable };
        walk(child, &path.child("properties").key(key), within, errors);
    }
    if let Some(items) = node.get("items") {
        let map_list = node.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
        let within = if map_list { uncorrelatable } else { uncorrelatable.or(Some(path)) };
        walk(items, &path.child("items"), within, errors);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_errors_and_undeclared_names_are_compile_errors() {
        let error = program("self.a ==").unwrap_err();
        assert!(error.starts_with("ERROR: <input>:1:"), "{error}");
        assert_eq!(
            program("self.a == other").unwrap_err(),
            "ERROR: <input>:1:11: undeclared reference to 'other' (in container '')\n | self.a == other\n | ..........^"
        );
        assert!(program("self.all(x, x > 0) && self.exists(y, y == 1) && self.map(z, z * 2) == [2]").is_ok());
        assert!(program("int(self.a) == 1 && lists.range(2) == [0, 1] && self == oldSelf").is_ok());
    }

    #[test]
    fn go_prints_the_rule_struct() {
        assert_eq!(
            go_rule(&json!({"rule": "self.a ==", "reason": "FieldValueForbidden"})),
            "apiextensions.ValidationRule{Rule:\"self.a ==\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(0x0), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}"
        );
    }
}
