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
//! - cel-rust has no type checker. A rule is refused at CRD write when it does not parse, names a variable other
//!   than `self` and `oldSelf` (cel-go's `undeclared reference`), or has a type error [`super::typecheck`] can
//!   find for certain (a field its object schema lacks, a plainly non-boolean rule); other type errors surface
//!   when the rule is evaluated, as an error that refuses the object.
//! - The estimated cost is a lower bound of upstream's ([`super::cost`] says what it covers): a rule refused for
//!   its cost is one upstream refuses; upstream refuses some more.

use super::cost;
use super::program::{program, uses_old_self};
use super::typecheck::{self, TypeError};
use crate::schema::{FieldError, FieldPath};
use serde_json::{Value, json};

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
        kind: crate::schema::ErrorKind::Invalid,
        message: format!("Invalid value: {}: {detail}", go_rule(rule)),
    }
}

/// The CEL errors of a CRD schema at `path` (`spec.validation.openAPIV3Schema`): rules and message expressions
/// that do not compile, `oldSelf` where it cannot be correlated, `optionalOldSelf` without `oldSelf`, and rules
/// whose estimated cost is above the limits ([`super::cost`]).
pub fn schema_errors(schema: &Value, path: &FieldPath) -> Vec<FieldError> {
    let mut walker = Walker { errors: Vec::new(), total: 0, most_expensive: Vec::new() };
    // The root occurs once (`RootCELContext`).
    walker.walk(schema, path, None, Some(1), true);
    let mut errors = walker.errors;
    // validation.go: the total of all rules above `StaticEstimatedCRDCostLimit` refuses the schema, naming the
    // (at most 4) rules that contributed at least 1 % of it.
    if walker.total > cost::CRD_LIMIT {
        for (rule, _) in &walker.most_expensive {
            errors.push(FieldError::forbidden(
                rule,
                "contributed to estimated rule & messageExpression cost total exceeding cost limit for entire OpenAPIv3 schema",
            ));
        }
        errors.push(FieldError::forbidden(
            path,
            &cost::cost_message(
                "x-kubernetes-validations estimated rule & messageExpression cost total for entire OpenAPIv3 schema",
                walker.total,
                cost::CRD_LIMIT,
            ),
        ));
    }
    errors
}

struct Walker {
    errors: Vec<FieldError>,
    /// `TotalCost.Total`.
    total: u64,
    /// `TotalCost.MostExpensive`: the 4 dearest rules of at least 1 % of the CRD limit, dearest first.
    most_expensive: Vec<(FieldPath, u64)>,
}

impl Walker {
    /// `cardinality`: how many times the node may occur (`CELSchemaContext.MaxCardinality`, `None` unbounded).
    /// `resource_root`: the node is a resource's root (the CRD's, or an embedded resource).
    fn walk(
        &mut self,
        schema: &Value,
        path: &FieldPath,
        uncorrelatable: Option<&FieldPath>,
        cardinality: Option<u64>,
        resource_root: bool,
    ) {
        let Some(node) = schema.as_object() else { return };
        let context = Context { uncorrelatable, cardinality, resource_root };
        for (i, rule) in
            node.get("x-kubernetes-validations").and_then(Value::as_array).into_iter().flatten().enumerate()
        {
            let at = path.child("x-kubernetes-validations").index(i);
            self.rule(schema, rule, &at, &context);
        }
        let embedded =
            |child: &Value| child.get("x-kubernetes-embedded-resource").and_then(Value::as_bool) == Some(true);
        if let Some(additional) = node.get("additionalProperties").filter(|a| a.is_object()) {
            let inner = child_cardinality(schema, cardinality);
            self.walk(additional, &path.child("additionalProperties"), uncorrelatable, inner, embedded(additional));
        }
        let atomic_map = node.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic");
        for (key, child) in node.get("properties").and_then(Value::as_object).into_iter().flatten() {
            let within = if atomic_map { uncorrelatable.or(Some(path)) } else { uncorrelatable };
            let inner = child_cardinality(schema, cardinality);
            self.walk(child, &path.child("properties").key(key), within, inner, embedded(child));
        }
        if let Some(items) = node.get("items") {
            let map_list = node.get("x-kubernetes-list-type").and_then(Value::as_str) == Some("map");
            let within = if map_list { uncorrelatable } else { uncorrelatable.or(Some(path)) };
            let inner = child_cardinality(schema, cardinality);
            self.walk(items, &path.child("items"), within, inner, embedded(items));
        }
    }

    fn rule(&mut self, schema: &Value, rule: &Value, at: &FieldPath, context: &Context<'_>) {
        let Context { uncorrelatable, cardinality, resource_root } = *context;
        let source = rule.get("rule").and_then(Value::as_str).unwrap_or_default();
        if source.trim().is_empty() {
            return; // reported by the form checks
        }
        let compiled = program(source).and_then(|compiled| {
            match typecheck::type_error(&compiled, source, schema, resource_root) {
                Some(TypeError::Checker(detail)) => Err(detail),
                Some(TypeError::NotBool) => {
                    self.errors.push(invalid_rule(&at.child("rule"), rule, "cel expression must evaluate to a bool"));
                    Ok(None)
                }
                None => Ok(Some(compiled)),
            }
        });
        match compiled {
            Err(detail) => {
                self.errors.push(invalid_rule(&at.child("rule"), rule, &format!("compilation failed: {detail}")))
            }
            Ok(None) => {}
            Ok(Some(compiled)) => {
                // validation.go: the cost error comes first, then the rule's other errors.
                let estimate = cost::expression_cost(compiled.expression(), schema)
                    .saturating_mul(cost::occurrences(schema, cardinality));
                if estimate > cost::RULE_LIMIT {
                    self.errors.push(FieldError::forbidden(
                        &at.child("rule"),
                        &cost::cost_message("estimated rule cost", estimate, cost::RULE_LIMIT),
                    ));
                }
                self.observe(at.child("rule"), estimate);
                if uses_old_self(&compiled) {
                    if let Some(within) = uncorrelatable {
                        self.errors.push(FieldError::invalid(
                            &at.child("rule"),
                            &json!(source),
                            &format!(
                                "oldSelf cannot be used on the uncorrelatable portion of the schema within {within}"
                            ),
                        ));
                    }
                } else if let Some(optional) = rule.get("optionalOldSelf").filter(|v| !v.is_null()) {
                    self.errors.push(FieldError::invalid(
                        &at.child("optionalOldSelf"),
                        optional,
                        "may not be set if oldSelf is not used in rule",
                    ));
                }
            }
        }
        let message_expression = rule.get("messageExpression").and_then(Value::as_str).unwrap_or_default();
        // A messageExpression is checked against the same schema (its own result type is not checked here).
        let checked = |source: &str| {
            program(source).and_then(|compiled| match typecheck::type_error(&compiled, source, schema, resource_root) {
                Some(TypeError::Checker(detail)) => Err(detail),
                _ => Ok(compiled),
            })
        };
        if !message_expression.trim().is_empty()
            && let Err(detail) = checked(message_expression)
        {
            self.errors.push(invalid_rule(
                &at.child("messageExpression"),
                rule,
                &format!("messageExpression compilation failed: {detail}"),
            ));
        }
    }

    /// `TotalCost.ObserveExpressionCost`.
    fn observe(&mut self, rule: FieldPath, estimate: u64) {
        self.total = self.total.saturating_add(estimate);
        if estimate < cost::CRD_LIMIT / 100 {
            return;
        }
        self.most_expensive.push((rule, estimate));
        self.most_expensive.sort_by_key(|rule| std::cmp::Reverse(rule.1));
        self.most_expensive.truncate(4);
    }
}

/// Where a node of the schema is.
struct Context<'p> {
    /// The uncorrelatable ancestor `oldSelf` may not be used below.
    uncorrelatable: Option<&'p FieldPath>,
    /// How many times the node may occur (`CELSchemaContext.MaxCardinality`, `None` unbounded).
    cardinality: Option<u64>,
    /// The node is a resource's root.
    resource_root: bool,
}

/// `childContext`: the parent's cardinality times its factor, unbounded if either is.
fn child_cardinality(parent: &Value, cardinality: Option<u64>) -> Option<u64> {
    Some(cardinality?.saturating_mul(cost::child_factor(parent)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec_schema(spec: Value) -> Value {
        json!({"type": "object", "properties": {"spec": spec}})
    }

    fn messages(schema: &Value) -> Vec<String> {
        schema_errors(schema, &FieldPath::new("spec.validation.openAPIV3Schema"))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn rules_above_the_estimated_cost_limits_are_refused() {
        const HINT: &str = "(try simplifying the rule, or adding maxItems, maxProperties, and maxLength where arrays, maps, and strings are declared)";
        // A nested iteration over an unbounded list: above both limits, by more than 100x.
        let unbounded = spec_schema(json!({"type": "object",
            "x-kubernetes-validations": [{"rule": "self.items.all(x, self.items.all(y, x == y))"}],
            "properties": {"items": {"type": "array", "items": {"type": "string"}}}}));
        let rule = "spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].rule";
        assert_eq!(
            messages(&unbounded),
            vec![
                format!("{rule}: Forbidden: estimated rule cost exceeds budget by factor of more than 100x {HINT}"),
                format!(
                    "{rule}: Forbidden: contributed to estimated rule & messageExpression cost total exceeding cost limit for entire OpenAPIv3 schema"
                ),
                format!(
                    "spec.validation.openAPIV3Schema: Forbidden: x-kubernetes-validations estimated rule & messageExpression cost total for entire OpenAPIv3 schema exceeds budget by factor of more than 100x {HINT}"
                ),
            ]
        );
        // Bounded by maxItems and maxLength, the same rule is cheap.
        let bounded = spec_schema(json!({"type": "object",
            "x-kubernetes-validations": [{"rule": "self.items.all(x, self.items.all(y, x == y))"}],
            "properties": {"items": {"type": "array", "maxItems": 20, "items": {"type": "string", "maxLength": 64}}}}));
        assert_eq!(messages(&bounded), Vec::<String>::new());
        // A regex on every item of an unbounded list of unbounded strings: the item's rule runs ~1M times.
        let items = spec_schema(json!({"type": "object", "properties": {"tags": {"type": "array",
            "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$')"}]}}}}));
        let found = messages(&items);
        assert!(found[0].starts_with("spec.validation.openAPIV3Schema.properties[spec].properties[tags].items.x-kubernetes-validations[0].rule: Forbidden: estimated rule cost exceeds budget by factor of more than 100x"), "{found:?}");
        // A messageExpression naming a field the schema lacks does not compile either.
        let message = spec_schema(json!({"type": "object", "properties": {"min": {"type": "integer"}},
            "x-kubernetes-validations": [{"rule": "self.min > 0", "messageExpression": "'min is ' + string(self.mni)"}]}));
        let found = messages(&message);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].starts_with("spec.validation.openAPIV3Schema.properties[spec].x-kubernetes-validations[0].messageExpression: Invalid value: apiextensions.ValidationRule{")
                && found[0].contains("}: messageExpression compilation failed: ERROR: <input>:1:24: undefined field 'mni'"),
            "{found:?}"
        );
        // Just above the limit: 12 per item of ~1M items (cost.rs), a factor Go prints with `%f`.
        let objects = spec_schema(json!({"type": "object",
            "x-kubernetes-validations": [{"rule": "self.items.all(x, x.a > 0 && x.b > 0 && x.c > 0)"}],
            "properties": {"items": {"type": "array", "items": {"type": "object", "properties": {
                "a": {"type": "integer"}, "b": {"type": "integer"}, "c": {"type": "integer"}}}}}}));
        assert_eq!(
            messages(&objects),
            vec![format!("{rule}: Forbidden: estimated rule cost exceeds budget by factor of 1.258290x {HINT}")]
        );
        // The usual shapes stay accepted: one pass over an unbounded list, a size check on each item.
        let usual = spec_schema(json!({"type": "object",
            "x-kubernetes-validations": [{"rule": "self.items.all(x, x.size() < 10)"}, {"rule": "self.items.exists(x, x == 'a')"}],
            "properties": {"items": {"type": "array", "items": {"type": "string",
                "x-kubernetes-validations": [{"rule": "self.size() <= 3"}, {"rule": "self != 'bad'"}]}}}}));
        assert_eq!(messages(&usual), Vec::<String>::new());
    }

    #[test]
    fn go_prints_the_rule_struct() {
        assert_eq!(
            go_rule(&json!({"rule": "self.a ==", "reason": "FieldValueForbidden"})),
            "apiextensions.ValidationRule{Rule:\"self.a ==\", Message:\"\", MessageExpression:\"\", Reason:(*apiextensions.FieldValueErrorReason)(0x0), FieldPath:\"\", OptionalOldSelf:(*bool)(nil)}"
        );
    }
}
