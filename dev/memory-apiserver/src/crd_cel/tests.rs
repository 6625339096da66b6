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

fn found(schema: &Value, spec: Value) -> Vec<String> {
    validate(schema, &json!({"spec": spec}), None).iter().map(ToString::to_string).collect()
}

fn spec_rules(rules: Value, properties: Value) -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-validations": rules,
        "properties": properties}}})
}

#[test]
fn the_kubernetes_url_functions_work() {
    // urls.go's documented examples.
    let schema = spec_rules(
        json!([
            {"rule": "isURL(self.u) && !isURL('../relative-path') && !isURL('https://a:b:c/') && isURL('/absolute-path')"},
            {"rule": "url(self.u).getScheme() == 'https' && url('/path').getScheme() == ''"},
            {"rule": "url('https://[::1]:80/').getHost() == '[::1]:80' && url('https://[::1]:80/').getHostname() == '::1'"},
            {"rule": "url('https://example.com:80/').getPort() == '80' && url('https://example.com/').getPort() == ''"},
            {"rule": "url('https://example.com/path with spaces/').getEscapedPath() == '/path%20with%20spaces/'"},
            {"rule": "url('https://example.com/path?k1=a&k2=b&k2=c').getQuery() == {'k1': ['a'], 'k2': ['b', 'c']}"},
            {"rule": "url('https://example.com/path').getQuery() == {}"},
            {"rule": "url(self.bad).getScheme() == ''"}
        ]),
        json!({"u": {"type": "string"}, "bad": {"type": "string"}}),
    );
    assert_eq!(
        found(&schema, json!({"u": "https://user:pass@example.com:80/path?query=val#fragment", "bad": "../x"})),
        vec![
            "spec: Invalid value: \"object\": URL parse error during conversion from string: parse \"../x\": invalid URI for request evaluating rule: url(self.bad).getScheme() == ''"
        ]
    );
}

#[test]
fn the_kubernetes_ip_and_cidr_functions_work() {
    // ip.go's and cidr.go's documented examples (containsCIDR as cidr.go's code has it).
    let schema = spec_rules(
        json!([
            {"rule": "isIP(self.ip) && !isIP('127.0.0.256') && !isIP(':::1') && !isIP('::ffff:1.2.3.4') && !isIP('fe80::1%eth0')"},
            {"rule": "ip(self.ip).family() == 4 && ip('::1').family() == 6 && ip('127.0.0.1').isLoopback()"},
            {"rule": "ip('0.0.0.0').isUnspecified() && ip('224.0.0.1').isLinkLocalMulticast() && ip('fe80::1').isLinkLocalUnicast()"},
            {"rule": "ip('192.168.0.1').isGlobalUnicast() && !ip('255.255.255.255').isGlobalUnicast()"},
            {"rule": "ip.isCanonical('2001:db8::abcd') && !ip.isCanonical('2001:DB8::ABCD') && string(ip('2001:DB8::1')) == '2001:db8::1'"},
            {"rule": "isCIDR(self.net) && cidr(self.net).containsIP(self.ip) && cidr(self.net).containsIP(ip('10.0.0.1'))"},
            {"rule": "cidr('192.168.0.0/24').containsCIDR(cidr('192.168.0.0/25')) && cidr('192.168.0.0/24').containsCIDR('192.168.0.0/25')"},
            {"rule": "!cidr('192.168.1.0/24').containsCIDR('192.168.2.0/24') && cidr('192.168.0.1/24').masked() == cidr('192.168.0.0/24')"},
            {"rule": "cidr('192.168.0.1/24').ip() == ip('192.168.0.1') && cidr('::1/128').prefixLength() == 128 && string(cidr('10.0.0.0/8')) == '10.0.0.0/8'"},
            {"rule": "cidr(self.net).containsIP('not an ip')"},
            {"rule": "ip(self.bad).family() == 4"}
        ]),
        json!({"ip": {"type": "string"}, "net": {"type": "string"}, "bad": {"type": "string"}}),
    );
    assert_eq!(
        found(&schema, json!({"ip": "10.1.2.3", "net": "10.0.0.0/8", "bad": "10.0.0.256"})),
        vec![
            "spec: Invalid value: \"object\": 'no such overload': call arguments did not match a supported operator, function or macro signature for rule: cidr(self.net).containsIP('not an ip')",
            "spec: Invalid value: \"object\": IP Address \"10.0.0.256\" parse error during conversion from string: ParseAddr(\"10.0.0.256\"): IPv4 field has value >255 evaluating rule: ip(self.bad).family() == 4",
        ]
    );
}

#[test]
fn the_kubernetes_format_functions_work() {
    // format.go's documented examples.
    let schema = spec_rules(
        json!([
            {"rule": "!format.dns1123Label().validate(self.name).hasValue() && format.named('dns1123Subdomain').hasValue()"},
            {"rule": "!format.named('nope').hasValue() && !format.uri().validate('http://example.com').hasValue()"},
            {"rule": "!format.uuid().validate('123e4567-e89b-12d3-a456-426614174000').hasValue() && !format.byte().validate('aGVsbG8=').hasValue()"},
            {"rule": "!format.date().validate('2021-01-01').hasValue() && !format.datetime().validate('2021-01-01T00:00:00Z').hasValue()"},
            {"rule": "!format.dns1123LabelPrefix().validate('my-label-prefix-').hasValue() && !format.qualifiedName().validate('apiextensions.k8s.io/v1beta1').hasValue()"},
            {"rule": "!format.named('dns1035Label').value().validate(self.bad).hasValue()",
             "messageExpression": "format.dns1035Label().validate(self.bad).value().join(', ')"}
        ]),
        json!({"name": {"type": "string"}, "bad": {"type": "string"}}),
    );
    assert_eq!(
        found(&schema, json!({"name": "my-name", "bad": "1abc"})),
        vec![
            "spec: Invalid value: \"object\": a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')"
        ]
    );
}

#[test]
fn the_sets_functions_work() {
    // cel-go ext/sets.go's documented examples.
    let schema = spec_rules(
        json!([
            {"rule": "sets.contains(self.l, [1, 2]) && sets.contains([], []) && sets.contains([1], []) && !sets.contains([1], [2])"},
            {"rule": "sets.contains([1, 2, 3], [3.0, 1u]) && sets.equivalent([1, 2, 2], [2, 1]) && !sets.equivalent([1], [1, 2])"},
            {"rule": "sets.intersects([1], [1, 2]) && !sets.intersects([], [1]) && !sets.intersects([1], [2])"},
            {"rule": "sets.contains(self.l, [4])", "message": "no 4"}
        ]),
        json!({"l": {"type": "array", "items": {"type": "integer"}}}),
    );
    assert_eq!(found(&schema, json!({"l": [1, 2, 3]})), vec!["spec: Invalid value: \"object\": no 4"]);
}
