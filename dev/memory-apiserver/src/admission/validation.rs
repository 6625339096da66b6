//! Write-time defaulting and validation of the RBAC and admission-policy kinds, with upstream's defaults, field
//! paths and messages (`pkg/apis/rbac/v1/defaults.go`, `pkg/apis/rbac/validation`,
//! `pkg/apis/admissionregistration/{v1/defaults.go,validation}`), the checks that matter for what the dev cluster
//! evaluates.

use super::expressions::Expression;
use crate::resource::Builtin;
use crate::schema::{ErrorKind, FieldError, field_error};
use serde_json::{Value, json};

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

fn text<'a>(value: &'a Value, key: &str) -> &'a str {
    value.get(key).and_then(Value::as_str).unwrap_or_default()
}

fn array<'a>(value: &'a Value, key: &str) -> &'a [Value] {
    value.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default()
}

fn required(field: &str) -> FieldError {
    field_error(field, ErrorKind::Required, "Required value")
}

fn unsupported(field: &str, value: &str, supported: &[&str]) -> FieldError {
    let list: Vec<String> = supported.iter().map(|s| format!("{s:?}")).collect();
    field_error(
        field,
        ErrorKind::NotSupported,
        format!("Unsupported value: {value:?}: supported values: {}", list.join(", ")),
    )
}

/// Fills upstream's defaults into an object of an RBAC or admission-policy kind; other kinds are left alone.
pub fn default(kind: Builtin, object: &mut Value) {
    match kind {
        Builtin::ClusterRoleBinding | Builtin::RoleBinding => {
            // Decoding gives an absent `roleRef.apiGroup` the empty string; both default.
            if let Some(role_ref) = object.get_mut("roleRef").and_then(Value::as_object_mut)
                && role_ref.get("apiGroup").and_then(Value::as_str).unwrap_or_default().is_empty()
            {
                role_ref.insert("apiGroup".into(), json!(RBAC_GROUP));
            }
            for subject in object.get_mut("subjects").and_then(Value::as_array_mut).into_iter().flatten() {
                let kind = text(subject, "kind").to_owned();
                if let Some(subject) = subject.as_object_mut()
                    && (kind == "User" || kind == "Group")
                    && subject.get("apiGroup").and_then(Value::as_str).unwrap_or_default().is_empty()
                {
                    subject.insert("apiGroup".into(), json!(RBAC_GROUP));
                }
            }
        }
        Builtin::ValidatingAdmissionPolicy => {
            if let Some(spec) = object.get_mut("spec").and_then(Value::as_object_mut) {
                spec.entry("failurePolicy").or_insert_with(|| json!("Fail"));
                if let Some(constraints) = spec.get_mut("matchConstraints") {
                    default_match_resources(constraints);
                }
            }
        }
        Builtin::ValidatingAdmissionPolicyBinding => {
            if let Some(resources) = object.pointer_mut("/spec/matchResources").filter(|m| !m.is_null()) {
                default_match_resources(resources);
            }
        }
        _ => {}
    }
}

fn default_match_resources(resources: &mut Value) {
    let Some(fields) = resources.as_object_mut() else { return };
    fields.entry("matchPolicy").or_insert_with(|| json!("Equivalent"));
    fields.entry("namespaceSelector").or_insert_with(|| json!({}));
    fields.entry("objectSelector").or_insert_with(|| json!({}));
    for key in ["resourceRules", "excludeResourceRules"] {
        for rule in fields.get_mut(key).and_then(Value::as_array_mut).into_iter().flatten() {
            if let Some(rule) = rule.as_object_mut() {
                rule.entry("scope").or_insert_with(|| json!("*"));
            }
        }
    }
}

/// Validates an object of an RBAC or admission-policy kind (`old` on update); other kinds pass.
pub fn validate(kind: Builtin, object: &Value, old: Option<&Value>) -> Vec<FieldError> {
    let mut errors = Vec::new();
    match kind {
        Builtin::ClusterRole | Builtin::Role => rules(object, kind == Builtin::Role, &mut errors),
        Builtin::ClusterRoleBinding | Builtin::RoleBinding => {
            binding(object, old, kind == Builtin::RoleBinding, &mut errors);
        }
        Builtin::ValidatingAdmissionPolicy => policy(object, &mut errors),
        Builtin::ValidatingAdmissionPolicyBinding => policy_binding(object, &mut errors),
        _ => {}
    }
    errors
}

fn rules(object: &Value, namespaced: bool, errors: &mut Vec<FieldError>) {
    for (i, rule) in array(object, "rules").iter().enumerate() {
        let path = format!("rules[{i}]");
        if array(rule, "verbs").is_empty() {
            errors.push(field_error(
                &format!("{path}.verbs"),
                ErrorKind::Required,
                "Required value: verbs must contain at least one value",
            ));
        }
        let urls = !array(rule, "nonResourceURLs").is_empty();
        let resources = !array(rule, "resources").is_empty();
        if urls && namespaced {
            errors.push(field_error(
                &format!("{path}.nonResourceURLs"),
                ErrorKind::Invalid,
                "Invalid value: []string(nil): namespaced rules cannot apply to non-resource URLs",
            ));
        } else if urls && resources {
            errors.push(field_error(
                &format!("{path}.nonResourceURLs"),
                ErrorKind::Invalid,
                "Invalid value: []string(nil): rules cannot apply to both regular resources and non-resource URLs",
            ));
        } else if !urls {
            if array(rule, "apiGroups").is_empty() {
                errors.push(field_error(
                    &format!("{path}.apiGroups"),
                    ErrorKind::Required,
                    "Required value: resource rules must supply at least one api group",
                ));
            }
            if !resources {
                errors.push(field_error(
                    &format!("{path}.resources"),
                    ErrorKind::Required,
                    "Required value: resource rules must supply at least one resource",
                ));
            }
        }
    }
}

fn binding(object: &Value, old: Option<&Value>, namespaced: bool, errors: &mut Vec<FieldError>) {
    let role_ref = object.get("roleRef").cloned().unwrap_or(Value::Null);
    if text(&role_ref, "apiGroup") != RBAC_GROUP {
        errors.push(unsupported("roleRef.apiGroup", text(&role_ref, "apiGroup"), &[RBAC_GROUP]));
    }
    let kinds: &[&str] = if namespaced { &["Role", "ClusterRole"] } else { &["ClusterRole"] };
    if !kinds.contains(&text(&role_ref, "kind")) {
        errors.push(unsupported("roleRef.kind", text(&role_ref, "kind"), kinds));
    }
    if text(&role_ref, "name").is_empty() {
        errors.push(required("roleRef.name"));
    }
    if let Some(old) = old
        && old.get("roleRef") != object.get("roleRef")
    {
        errors.push(field_error(
            "roleRef",
            ErrorKind::Invalid,
            format!("Invalid value: {}: cannot change roleRef", serde_json::to_string(&role_ref).unwrap_or_default()),
        ));
    }
    for (i, subject) in array(object, "subjects").iter().enumerate() {
        let path = format!("subjects[{i}]");
        if text(subject, "name").is_empty() {
            errors.push(required(&format!("{path}.name")));
        }
        match text(subject, "kind") {
            "ServiceAccount" => {
                if !namespaced && text(subject, "namespace").is_empty() {
                    errors.push(required(&format!("{path}.namespace")));
                }
            }
            "User" | "Group" => {
                if text(subject, "apiGroup") != RBAC_GROUP {
                    errors.push(unsupported(&format!("{path}.apiGroup"), text(subject, "apiGroup"), &[RBAC_GROUP]));
                }
            }
            other => errors.push(unsupported(&format!("{path}.kind"), other, &["ServiceAccount", "User", "Group"])),
        }
    }
}

fn expression(path: &str, source: &str, errors: &mut Vec<FieldError>) {
    if source.is_empty() {
        errors.push(required(path));
    } else if let Err(error) = Expression::compile(source) {
        errors.push(field_error(
            path,
            ErrorKind::Invalid,
            format!("Invalid value: {source:?}: compilation failed: {error}"),
        ));
    }
}

fn policy(object: &Value, errors: &mut Vec<FieldError>) {
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    match text(&spec, "failurePolicy") {
        "" | "Fail" | "Ignore" => {}
        other => errors.push(unsupported("spec.failurePolicy", other, &["Fail", "Ignore"])),
    }
    match spec.get("matchConstraints").filter(|m| !m.is_null()) {
        None => errors.push(required("spec.matchConstraints")),
        Some(constraints) => {
            if array(constraints, "resourceRules").is_empty() {
                errors.push(required("spec.matchConstraints.resourceRules"));
            }
        }
    }
    for (key, what) in [("matchConditions", "matchConditions"), ("variables", "variables")] {
        for (i, item) in array(&spec, key).iter().enumerate() {
            if text(item, "name").is_empty() {
                errors.push(required(&format!("spec.{what}[{i}].name")));
            }
            expression(&format!("spec.{what}[{i}].expression"), text(item, "expression"), errors);
        }
    }
    let validations = array(&spec, "validations");
    if validations.is_empty() && array(&spec, "auditAnnotations").is_empty() {
        errors.push(field_error(
            "spec.validations",
            ErrorKind::Required,
            "Required value: validations or auditAnnotations must contain at least one item",
        ));
    }
    for (i, validation) in validations.iter().enumerate() {
        expression(&format!("spec.validations[{i}].expression"), text(validation, "expression"), errors);
        if let Some(message) = validation.get("messageExpression").and_then(Value::as_str) {
            expression(&format!("spec.validations[{i}].messageExpression"), message, errors);
        }
        if let Some(reason) = validation.get("reason").and_then(Value::as_str) {
            let supported = ["Unauthorized", "Forbidden", "Invalid", "RequestEntityTooLarge"];
            if !supported.contains(&reason) {
                errors.push(unsupported(&format!("spec.validations[{i}].reason"), reason, &supported));
            }
        }
    }
}

fn policy_binding(object: &Value, errors: &mut Vec<FieldError>) {
    let spec = object.get("spec").cloned().unwrap_or(Value::Null);
    if text(&spec, "policyName").is_empty() {
        errors.push(required("spec.policyName"));
    }
    let actions: Vec<&str> = array(&spec, "validationActions").iter().filter_map(Value::as_str).collect();
    if actions.is_empty() {
        errors.push(field_error(
            "spec.validationActions",
            ErrorKind::Required,
            "Required value: at least one validation action is required",
        ));
    }
    for (i, action) in actions.iter().enumerate() {
        if !["Deny", "Warn", "Audit"].contains(action) {
            errors.push(unsupported(&format!("spec.validationActions[{i}]"), action, &["Audit", "Deny", "Warn"]));
        } else if actions[..i].contains(action) {
            errors.push(field_error(
                &format!("spec.validationActions[{i}]"),
                ErrorKind::Duplicate,
                format!("Duplicate value: {action:?}"),
            ));
        }
    }
    if actions.contains(&"Deny") && actions.contains(&"Warn") {
        errors.push(field_error(
            "spec.validationActions",
            ErrorKind::Forbidden,
            "Forbidden: must not contain both Deny and Warn (repeating the same validation failure information in the API response and headers serves no purpose)",
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn defaults_are_upstream_s() {
        let mut binding = json!({"roleRef": {"kind": "ClusterRole", "name": "r"},
            "subjects": [{"kind": "User", "name": "u"}, {"kind": "ServiceAccount", "name": "s", "namespace": "n"}]});
        default(Builtin::ClusterRoleBinding, &mut binding);
        assert_eq!(binding["roleRef"]["apiGroup"], RBAC_GROUP);
        assert_eq!(binding["subjects"][0]["apiGroup"], RBAC_GROUP);
        assert!(binding["subjects"][1].get("apiGroup").is_none());
        let mut policy = json!({"spec": {"matchConstraints": {"resourceRules": [{"resources": ["nodes"]}]}}});
        default(Builtin::ValidatingAdmissionPolicy, &mut policy);
        assert_eq!(policy["spec"]["failurePolicy"], "Fail");
        assert_eq!(policy["spec"]["matchConstraints"]["matchPolicy"], "Equivalent");
        assert_eq!(policy["spec"]["matchConstraints"]["resourceRules"][0]["scope"], "*");
    }

    #[test]
    fn bindings_need_a_valid_role_reference_that_never_changes() {
        let good = json!({"roleRef": {"apiGroup": RBAC_GROUP, "kind": "ClusterRole", "name": "r"},
            "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "ns"}]});
        assert!(validate(Builtin::ClusterRoleBinding, &good, None).is_empty());
        let mut changed = good.clone();
        changed["roleRef"]["name"] = json!("other");
        let errors = validate(Builtin::ClusterRoleBinding, &changed, Some(&good));
        assert_eq!(errors.len(), 1);
        assert!(errors[0].to_string().starts_with("roleRef: Invalid value: "), "{}", errors[0]);
        let role = json!({"roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "r"},
            "subjects": [{"kind": "Robot", "name": "x"}]});
        let errors: Vec<String> =
            validate(Builtin::ClusterRoleBinding, &role, None).iter().map(ToString::to_string).collect();
        assert_eq!(
            errors,
            [
                "roleRef.kind: Unsupported value: \"Role\": supported values: \"ClusterRole\"",
                "subjects[0].kind: Unsupported value: \"Robot\": supported values: \"ServiceAccount\", \"User\", \"Group\""
            ]
        );
        assert_eq!(
            validate(
                Builtin::RoleBinding,
                &json!({"roleRef": {"apiGroup": RBAC_GROUP, "kind": "Role", "name": "r"}}),
                None
            ),
            []
        );
    }

    #[test]
    fn rules_need_verbs_and_groups() {
        let role = json!({"rules": [{"resources": ["pods"]}, {"nonResourceURLs": ["/x"], "verbs": ["get"]}]});
        let errors: Vec<String> = validate(Builtin::Role, &role, None).iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 3, "{errors:?}");
        assert!(errors[0].starts_with("rules[0].verbs: Required value"));
        assert!(errors[1].starts_with("rules[0].apiGroups: Required value"));
        assert!(errors[2].contains("namespaced rules cannot apply to non-resource URLs"));
    }

    #[test]
    fn policies_need_compiling_expressions_and_bindings_valid_actions() {
        let policy = json!({"spec": {"matchConstraints": {"resourceRules": [{"resources": ["nodes"]}]},
            "validations": [{"expression": "object.(", "reason": "Teapot"}]}});
        let errors: Vec<String> =
            validate(Builtin::ValidatingAdmissionPolicy, &policy, None).iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(
            errors[0].starts_with("spec.validations[0].expression: Invalid value: \"object.(\": compilation failed")
        );
        assert!(errors[1].starts_with("spec.validations[0].reason: Unsupported value: \"Teapot\""));
        assert!(!validate(Builtin::ValidatingAdmissionPolicy, &json!({"spec": {}}), None).is_empty());
        let binding = json!({"spec": {"policyName": "p", "validationActions": ["Deny", "Warn"]}});
        let errors = validate(Builtin::ValidatingAdmissionPolicyBinding, &binding, None);
        assert_eq!(errors.len(), 1);
        assert!(errors[0].message.contains("must not contain both Deny and Warn"));
        assert!(validate(Builtin::ValidatingAdmissionPolicyBinding, &json!({"spec": {}}), None).len() == 2);
    }
}
