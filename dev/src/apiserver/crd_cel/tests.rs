//! The rules' semantics, each case as kubernetes/kubernetes `staging/src/k8s.io/apiextensions-apiserver/pkg/
//! apiserver/schema/cel/validation.go` (and its `validation_test.go` expectations) gives it.

use super::*;
use serde_json::json;

fn schema() -> Value {
    json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.metadata.name.startsWith('ok') && !has(self.metadata.labels)",
                                      "message": "name must start with ok"}],
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.min <= self.max", "messageExpression": "'min ' + string(self.min) + ' > max ' + string(self.max)"},
                    {"rule": "self.mode == oldSelf.mode", "message": "mode is immutable", "reason": "FieldValueForbidden",
                     "fieldPath": ".mode"},
                    {"rule": "!has(self.banned)", "reason": "FieldValueRequired", "message": "banned is banned"}
                ],
                "properties": {
                    "min": {"type": "integer"},
                    "max": {"type": "integer"},
                    "mode": {"type": "string"},
                    "banned": {"type": "string"},
                    "name": {"type": "string", "x-kubernetes-validations": [{"rule": "self.size() <= 5"}]},
                    "tags": {"type": "array", "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self != 'bad'"}]}},
                    "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}},
                                  "x-kubernetes-validations": [{"rule": "self.port >= oldSelf.port", "message": "ports only grow"}]}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string",
                        "x-kubernetes-validations": [{"rule": "self.matches('^[a-z]+$')", "message": "lower case"}]}}
                }
            }
        }
    })
}

fn object(spec: Value) -> Value {
    json!({"apiVersion": "x/v1", "kind": "X", "metadata": {"name": "ok-1", "labels": {"hidden": "from rules"}}, "spec": spec})
}

fn errors(new: &Value, old: Option<&Value>) -> Vec<String> {
    validate(&schema(), new, old).iter().map(ToString::to_string).collect()
}

#[test]
fn a_valid_object_passes_and_the_root_sees_only_name_in_metadata() {
    let ok = object(json!({"min": 1, "max": 2, "mode": "a", "name": "abc", "tags": ["x"], "labels": {"a": "b"}}));
    assert_eq!(errors(&ok, None), Vec::<String>::new());
    assert_eq!(errors(&ok, Some(&ok)), Vec::<String>::new());
    let mut bad_name = ok.clone();
    bad_name["metadata"]["name"] = json!("nope");
    assert_eq!(errors(&bad_name, None), vec!["<nil>: Invalid value: \"object\": name must start with ok"]);
}

#[test]
fn failing_rules_report_message_expression_message_or_the_rule() {
    let bad = object(
        json!({"min": 3, "max": 2, "name": "toolong", "tags": ["x", "bad"], "labels": {"a": "B"}, "banned": "x"}),
    );
    assert_eq!(
        errors(&bad, None),
        vec![
            "spec: Invalid value: \"object\": min 3 > max 2",
            "spec: Required value: banned is banned",
            "spec.labels[a]: Invalid value: \"string\": lower case",
            "spec.name: Invalid value: \"string\": failed rule: self.size() <= 5",
            "spec.tags[1]: Invalid value: \"string\": failed rule: self != 'bad'",
        ]
    );
}

#[test]
fn transition_rules_run_only_on_update_where_an_old_value_is_correlated() {
    let old = object(json!({"min": 1, "max": 2, "mode": "a", "ports": [{"name": "http", "port": 80}]}));
    // A create has no oldSelf: the transition rules are skipped.
    let changed = object(
        json!({"min": 1, "max": 2, "mode": "b", "ports": [{"name": "http", "port": 79}, {"name": "new", "port": 1}]}),
    );
    assert_eq!(errors(&changed, None), Vec::<String>::new());
    // On update they run; fieldPath and reason shape the error; a map-list item is correlated by its key, the new
    // item has no oldSelf.
    assert_eq!(
        errors(&changed, Some(&old)),
        vec!["spec.mode: Forbidden: mode is immutable", "spec.ports[0]: Invalid value: \"object\": ports only grow"]
    );
}

#[test]
fn optional_old_self_runs_without_an_old_value() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"v": {"type": "string", "x-kubernetes-validations": [
            {"rule": "oldSelf.hasValue() || self == 'first'", "optionalOldSelf": true, "message": "must start at first"}]}}}}});
    let first = json!({"spec": {"v": "first"}});
    let other = json!({"spec": {"v": "other"}});
    assert!(validate(&schema, &first, None).is_empty());
    assert_eq!(
        validate(&schema, &other, None)[0].to_string(),
        "spec.v: Invalid value: \"string\": must start at first"
    );
    assert!(validate(&schema, &other, Some(&first)).is_empty());
}

#[test]
fn ratcheting_drops_errors_of_unchanged_values_only() {
    let old =
        object(json!({"min": 1, "max": 2, "mode": "a", "name": "toolong", "tags": ["bad"], "labels": {"a": "B"}}));
    // Unchanged invalid values: no error (upstream: a warning).
    let same_bad =
        object(json!({"min": 1, "max": 3, "mode": "a", "name": "toolong", "tags": ["bad"], "labels": {"a": "B"}}));
    assert_eq!(errors(&same_bad, Some(&old)), Vec::<String>::new());
    // Changed invalid values still fail.
    let changed = object(
        json!({"min": 1, "max": 2, "mode": "a", "name": "toolong2", "tags": ["bad", "bad"], "labels": {"a": "B", "b": "C"}}),
    );
    assert_eq!(
        errors(&changed, Some(&old)),
        vec![
            "spec.labels[b]: Invalid value: \"string\": lower case",
            "spec.name: Invalid value: \"string\": failed rule: self.size() <= 5",
            "spec.tags[1]: Invalid value: \"string\": failed rule: self != 'bad'",
        ]
    );
}

#[test]
fn transition_rule_errors_are_never_ratcheted_and_evaluation_errors_are_reported() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object",
        "x-kubernetes-validations": [{"rule": "self.n == oldSelf.n + 1"}, {"rule": "self.missing == 1"}],
        "properties": {"n": {"type": "integer"}}}}});
    let object = json!({"spec": {"n": 1}});
    // validation.go appends evaluation errors directly: neither they nor a failed transition rule are ratcheted.
    let found: Vec<String> = validate(&schema, &object, Some(&object)).iter().map(ToString::to_string).collect();
    assert_eq!(found.len(), 2, "{found:?}");
    assert_eq!(found[0], "spec: Invalid value: \"object\": failed rule: self.n == oldSelf.n + 1");
    assert!(found[1].ends_with(" evaluating rule: self.missing == 1"), "{found:?}");
    let found: Vec<String> = validate(&schema, &object, None).iter().map(ToString::to_string).collect();
    assert_eq!(found.len(), 1, "{found:?}");
    assert!(
        found[0].starts_with("spec: Invalid value: \"object\": ")
            && found[0].ends_with(" evaluating rule: self.missing == 1")
    );
}

#[test]
fn the_kubernetes_list_and_regex_functions_work() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
        {"rule": "self.l.isSorted() && self.l.sum() == 6 && self.l.min() == 1 && self.l.max() == 3"},
        {"rule": "self.l.indexOf(2) == 1 && self.l.lastIndexOf(9) == -1 && [1, 2, 1].lastIndexOf(1) == 2"},
        {"rule": "self.s.find('[0-9]+') == '12' && self.s.findAll('[0-9]+') == ['12', '34'] && self.s.findAll('[0-9]+', 1) == ['12']"},
        {"rule": "['b', 'a'].isSorted()", "message": "unsorted"}
    ], "properties": {"l": {"type": "array", "items": {"type": "integer"}}, "s": {"type": "string"}}}}});
    let found: Vec<String> = validate(&schema, &json!({"spec": {"l": [1, 2, 3], "s": "a12b34"}}), None)
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(found, vec!["spec: Invalid value: \"object\": unsorted"]);
}

#[test]
fn field_paths_normalize_as_upstream() {
    let schema = schema();
    let spec = &schema["properties"]["spec"];
    assert_eq!(normalized(spec, ".mode").as_deref(), Some("mode"));
    assert_eq!(normalized(spec, ".labels['a.b']").as_deref(), Some("labels[a.b]"));
    assert_eq!(normalized(spec, "['mode']").as_deref(), Some("mode"));
    assert_eq!(normalized(spec, ".nothing"), None);
}

#[test]
fn the_kubernetes_quantity_functions_work() {
    let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": [
        {"rule": "isQuantity(self.mem) && !isQuantity('1kk') && quantity(self.mem).isLessThan(quantity('2Gi'))"},
        {"rule": "quantity('1k') == quantity('1000') && quantity('1Ki').asInteger() == 1024 && quantity('500m').isInteger() == false"},
        {"rule": "quantity(self.mem).add(quantity('512Mi')).compareTo(quantity('2Gi')) == 0 && quantity('1').sub(2).sign() == -1"},
        {"rule": "quantity('1.5').asApproximateFloat() == 1.5 && quantity(self.mem).isGreaterThan(quantity('1G'))"},
        {"rule": "quantity(self.mem).isGreaterThan(quantity('2Gi'))", "message": "not above 2Gi"}
    ], "properties": {"mem": {"type": "string"}}}}});
    let found: Vec<String> =
        validate(&schema, &json!({"spec": {"mem": "1.5Gi"}}), None).iter().map(ToString::to_string).collect();
    assert_eq!(found, vec!["spec: Invalid value: \"object\": not above 2Gi"]);
    let found: Vec<String> =
        validate(&schema, &json!({"spec": {"mem": "lots"}}), None).iter().map(ToString::to_string).collect();
    assert!(found[0].starts_with("spec: Invalid value: \"object\": failed rule: isQuantity"), "{found:?}");
}
