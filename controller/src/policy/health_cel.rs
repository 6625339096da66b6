//! The CEL of health checks (`spec.rollout.healthChecks[].expression`): compiled once when the spec is validated,
//! evaluated over each object the check reads.
//!
//! # Semantics
//! - The object is bound as `self`, as the API server binds the object a CRD's `x-kubernetes-validations` rule is
//!   about (kubernetes/kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/apiserver/schema/cel/
//!   validation.go`), here the whole object as the API server returns it (`apiVersion`, `kind`, `metadata`, `spec`,
//!   `status`, ...). No other variable exists: an expression that names one is refused when the spec is validated.
//! - JSON is given to CEL as upstream's `UnstructuredToVal` gives it: integers `int`, other numbers `double`,
//!   objects maps with string keys; a field whose value is null is absent ("Null valued fields are treated as
//!   absent fields in CEL expressions", the API reference of `x-kubernetes-validations[].rule`,
//!   `apiextensions.k8s.io/v1` `ValidationRule`; kubernetes.io/docs/reference/using-api/cel).
//! - Only `true` passes. A field that is absent is an error (`no such key`), not `false`, as in Kubernetes (guard
//!   it with `has(self.status.x)`); an error, a type error (`"a" > 1`) or a value other than a bool fails the check
//!   with the error as its message. Nothing here panics on what an object holds.
//! - The standard library and the strings extension (`lowerAscii`, `split`, ...), as Kubernetes' CEL environment
//!   has them. The object's schema is not known when the spec is validated (no I/O there): the fields it lacks, an
//!   expression that can never be a bool and operands of types no overload takes (`self.status.phase == 1`) are
//!   found once the kind is discovered, before the first read ([`super::health_types`]); any other type error
//!   (one the schema does not show, `"a" > 1` on a field the schema leaves open) shows when the check is
//!   evaluated, as a failing check naming it.

use cel::common::ast::{EntryExpr, Expr};
use cel::{Context, Env, IdedExpr, Program, Value as CelValue};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

/// The variable the object is bound to.
pub const OBJECT_VARIABLE: &str = "self";

/// The environment every expression is compiled and run in.
static ENV: LazyLock<Arc<Env>> = LazyLock::new(|| {
    let mut env = Env::stdlib();
    if let Err(error) = env.add_extension(cel::extensions::strings) {
        tracing::error!(%error, "the CEL strings extension could not be added");
    }
    Arc::new(env)
});

/// A compiled expression.
#[derive(Clone)]
pub struct Expression {
    source: String,
    program: Arc<Program>,
}

impl std::fmt::Debug for Expression {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Expression({:?})", self.source)
    }
}

impl PartialEq for Expression {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

impl Expression {
    /// Compiles `source`: a syntax error, or a reference to a variable other than `self`, is refused.
    pub fn compile(source: &str) -> Result<Expression, String> {
        let program = ENV.compile(source).map_err(|e| format!("does not compile: {}", one_line(&e.to_string())))?;
        let mut free = Vec::new();
        free_variables(program.expression(), &mut Vec::new(), &mut free);
        free.sort();
        free.dedup();
        if let Some(other) = free.iter().find(|v| *v != OBJECT_VARIABLE) {
            return Err(format!("refers to {other:?}; the only variable is {OBJECT_VARIABLE} (the object)"));
        }
        if free.is_empty() {
            return Err(format!("does not refer to {OBJECT_VARIABLE} (the object): it could never change"));
        }
        Ok(Expression { source: source.to_owned(), program: Arc::new(program) })
    }

    pub fn source(&self) -> &str {
        &self.source
    }

    /// The compiled program, for the type check (`super::health_types`).
    pub(super) fn program(&self) -> &Program {
        &self.program
    }

    /// Evaluates the expression over `object`: `Ok(())` when it is `true`, else what it found (the value of the
    /// left side of a top-level comparison, the error, or the value that is not a bool).
    pub fn evaluate(&self, object: &Value) -> Result<(), String> {
        let run = || {
            let mut context = Context::with_env(ENV.clone());
            context.add_variable_from_value(OBJECT_VARIABLE, to_cel(object));
            match self.program.execute(&context) {
                Ok(CelValue::Bool(true)) => Ok(()),
                Ok(CelValue::Bool(false)) => Err(match compared(self.program.expression(), &context) {
                    Some(seen) => format!("{} is false ({seen})", self.source),
                    None => format!("{} is false", self.source),
                }),
                Ok(other) => Err(format!("{} evaluates to {}, not a bool", self.source, shown(&other))),
                Err(error) => Err(format!("{}: {}", self.source, one_line(&error.to_string()))),
            }
        };
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(run))
            .unwrap_or_else(|_| Err(format!("{}: the CEL evaluation failed", self.source)))
    }
}

/// For a top-level comparison (`a == b`, `a < b`, ...), what its left side evaluated to: the value the check saw.
fn compared(expr: &IdedExpr, context: &Context<'_, '_>) -> Option<String> {
    let Expr::Call(call) = &expr.expr else { return None };
    let comparison = ["_==_", "_!=_", "_<_", "_<=_", "_>_", "_>=_", "@in"].contains(&call.func_name.as_str());
    let left = call.args.first().filter(|_| comparison && call.target.is_none())?;
    let written = path_of(&left.expr)?;
    let value = CelValue::resolve(left, context).ok()?;
    Some(format!("{written} is {}", shown(&value)))
}

/// `self.status.ceph.health` for a select chain from a variable.
pub(super) fn path_of(expr: &Expr) -> Option<String> {
    match expr {
        Expr::Ident(name) => Some(name.clone()),
        Expr::Select(select) if !select.test => Some(format!("{}.{}", path_of(&select.operand.expr)?, select.field)),
        _ => None,
    }
}

/// A value as CEL writes it, shortened.
fn shown(value: &CelValue) -> String {
    let text = match value {
        CelValue::String(s) => format!("{:?}", s.as_str()),
        CelValue::Int(i) => i.to_string(),
        CelValue::UInt(u) => format!("{u}u"),
        CelValue::Float(f) => f.to_string(),
        CelValue::Bool(b) => b.to_string(),
        CelValue::Null => "null".to_owned(),
        other => format!("{other:?}"),
    };
    let mut text = one_line(&text);
    if text.chars().count() > 200 {
        text = text.chars().take(200).collect::<String>() + "...";
    }
    text
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The variables `expr` reads that no comprehension binds (`bound`), into `free`.
fn free_variables(expr: &IdedExpr, bound: &mut Vec<String>, free: &mut Vec<String>) {
    match &expr.expr {
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(name) {
                free.push(name.clone());
            }
        }
        Expr::Select(select) => free_variables(&select.operand, bound, free),
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                free_variables(target, bound, free);
            }
            for arg in &call.args {
                free_variables(arg, bound, free);
            }
        }
        Expr::Comprehension(comprehension) => {
            free_variables(&comprehension.iter_range, bound, free);
            free_variables(&comprehension.accu_init, bound, free);
            let before = bound.len();
            bound.push(comprehension.iter_var.clone());
            bound.extend(comprehension.iter_var2.clone());
            bound.push(comprehension.accu_var.clone());
            for part in [&comprehension.loop_cond, &comprehension.loop_step, &comprehension.result] {
                free_variables(part, bound, free);
            }
            bound.truncate(before);
        }
        Expr::List(list) => list.elements.iter().for_each(|e| free_variables(e, bound, free)),
        Expr::Map(map) => {
            for entry in &map.entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => free_variables(&field.value, bound, free),
                    EntryExpr::MapEntry(entry) => {
                        free_variables(&entry.key, bound, free);
                        free_variables(&entry.value, bound, free);
                    }
                }
            }
        }
        Expr::Struct(structure) => {
            for entry in &structure.entries {
                match &entry.expr {
                    EntryExpr::StructField(field) => free_variables(&field.value, bound, free),
                    EntryExpr::MapEntry(entry) => {
                        free_variables(&entry.key, bound, free);
                        free_variables(&entry.value, bound, free);
                    }
                }
            }
        }
        Expr::Literal(_) | Expr::Unspecified => {}
    }
}

/// JSON as upstream's `UnstructuredToVal` gives it to a rule: integers are `int` (a number past `i64` a `double`),
/// other numbers `double`, objects maps with string keys, without their null-valued fields (absent in CEL).
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
            let map: HashMap<String, CelValue> =
                fields.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), to_cel(v))).collect();
            CelValue::from(map)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ceph(health: serde_json::Value) -> Value {
        json!({"apiVersion": "ceph.rook.io/v1", "kind": "CephCluster", "metadata": {"name": "rook-ceph"},
               "status": {"ceph": {"health": health, "capacity": {"bytesUsed": 10}}}})
    }

    #[test]
    fn health_a_true_expression_passes_and_a_false_one_says_what_it_saw() {
        let e = Expression::compile(r#"self.status.ceph.health == "HEALTH_OK""#).unwrap();
        assert_eq!(e.evaluate(&ceph(json!("HEALTH_OK"))), Ok(()));
        let seen = e.evaluate(&ceph(json!("HEALTH_WARN"))).unwrap_err();
        assert_eq!(
            seen,
            r#"self.status.ceph.health == "HEALTH_OK" is false (self.status.ceph.health is "HEALTH_WARN")"#
        );
        let macros = Expression::compile(r#"self.status.ceph.capacity.all(k, self.status.ceph.capacity[k] < 100)"#);
        assert_eq!(macros.unwrap().evaluate(&ceph(json!("x"))), Ok(()));
    }

    #[test]
    fn health_a_missing_field_is_an_error_not_false_and_has_guards_it() {
        let e = Expression::compile(r#"self.status.ceph.health == "HEALTH_OK""#).unwrap();
        let error = e.evaluate(&json!({"status": {}})).unwrap_err();
        assert!(error.contains("No such key: ceph"), "{error}");
        let guarded = Expression::compile(r#"has(self.status.ceph) && self.status.ceph.health == "HEALTH_OK""#);
        let error = guarded.unwrap().evaluate(&json!({"status": {}})).unwrap_err();
        assert!(error.ends_with("is false"), "{error}");
    }

    #[test]
    fn health_a_type_error_or_a_value_that_is_no_bool_fails_named_never_true() {
        let e = Expression::compile(r#"self.status.ceph.health > 1"#).unwrap();
        let error = e.evaluate(&ceph(json!("HEALTH_OK"))).unwrap_err();
        assert!(error.starts_with("self.status.ceph.health > 1: "), "{error}");
        let e = Expression::compile("self.status.ceph.health").unwrap();
        assert_eq!(
            e.evaluate(&ceph(json!("HEALTH_OK"))),
            Err(r#"self.status.ceph.health evaluates to "HEALTH_OK", not a bool"#.into())
        );
        let e = Expression::compile("self.status.ceph.capacity.bytesUsed == 10").unwrap();
        assert_eq!(e.evaluate(&ceph(json!(null))), Ok(()));
        // A null field is absent, as in Kubernetes' CEL.
        let e = Expression::compile("!has(self.status.ceph.health)").unwrap();
        assert_eq!(e.evaluate(&ceph(json!(null))), Ok(()));
        assert!(e.evaluate(&ceph(json!("HEALTH_OK"))).is_err());
    }

    #[test]
    fn health_bad_expressions_are_refused_when_compiled() {
        assert!(Expression::compile("self.status ==").unwrap_err().starts_with("does not compile"));
        let other = Expression::compile("object.status.ready").unwrap_err();
        assert!(other.contains(r#""object""#), "{other}");
        assert!(Expression::compile("1 == 1").unwrap_err().contains("does not refer to self"));
        // Comprehension variables are bound, not free.
        assert!(Expression::compile("self.items.exists(i, i.ready)").is_ok());
        assert!(Expression::compile("self.items.exists(i, j.ready)").unwrap_err().contains(r#""j""#));
        assert!(Expression::compile("self.metadata.name.lowerAscii() == 'x'").is_ok());
    }
}
