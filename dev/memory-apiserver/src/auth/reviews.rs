//! The review resources (create only, never stored): `authorization.k8s.io/v1` SelfSubjectAccessReview,
//! SelfSubjectRulesReview, SubjectAccessReview and LocalSubjectAccessReview (what `kubectl auth can-i` asks), and
//! `authentication.k8s.io/v1` SelfSubjectReview (`kubectl auth whoami`) and TokenReview.

use super::attributes::Attributes;
use super::user::UserInfo;
use crate::core::Core;
use crate::error::ApiError;
use crate::resource::{Builtin, ResourceType};
use crate::schema::{ErrorKind, FieldError, field_error};
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

fn text<'a>(object: &'a Value, pointer: &str) -> &'a str {
    object.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

/// The attributes a review's `spec` asks about, or its validation errors.
fn spec_attributes(spec: &Value) -> Result<Attributes, Vec<FieldError>> {
    let resource = spec.get("resourceAttributes").filter(|v| !v.is_null());
    let non_resource = spec.get("nonResourceAttributes").filter(|v| !v.is_null());
    match (resource, non_resource) {
        (Some(r), None) => Ok(Attributes::resource(
            text(r, "/verb"),
            text(r, "/group"),
            text(r, "/version"),
            text(r, "/resource"),
            text(r, "/subresource"),
            text(r, "/namespace"),
            text(r, "/name"),
        )),
        (None, Some(n)) => Ok(Attributes::non_resource(text(n, "/verb"), text(n, "/path"))),
        (Some(_), Some(_)) => Err(vec![field_error(
            "spec.nonResourceAttributes",
            ErrorKind::Invalid,
            "Invalid value: \"object\": cannot be specified in combination with resourceAttributes",
        )]),
        (None, None) => Err(vec![field_error(
            "spec.resourceAttributes",
            ErrorKind::Invalid,
            "Invalid value: \"null\": exactly one of nonResourceAttributes or resourceAttributes must be specified",
        )]),
    }
}

/// The user a SubjectAccessReview names.
fn spec_user(spec: &Value) -> UserInfo {
    let strings = |key: &str| -> Vec<String> {
        spec.get(key)
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
            .unwrap_or_default()
    };
    let extra: BTreeMap<String, Vec<String>> = spec
        .get("extra")
        .and_then(Value::as_object)
        .map(|extra| {
            extra
                .iter()
                .map(|(k, v)| {
                    let values = v.as_array().map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect());
                    (k.clone(), values.unwrap_or_default())
                })
                .collect()
        })
        .unwrap_or_default();
    UserInfo {
        name: text(spec, "/user").to_owned(),
        uid: text(spec, "/uid").to_owned(),
        groups: strings("groups"),
        extra,
    }
}

/// The review answered: the request's `spec` echoed with `metadata` and `status`.
fn answered(rt: &ResourceType, body: &Value, namespace: Option<&str>, status: Value) -> Value {
    let mut metadata = Map::new();
    metadata.insert("creationTimestamp".into(), Value::Null);
    if let Some(namespace) = namespace {
        metadata.insert("namespace".into(), json!(namespace));
    }
    let mut review = json!({"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": metadata, "status": status});
    if let Some(spec) = body.get("spec") {
        review["spec"] = spec.clone();
    } else {
        review["spec"] = json!({});
    }
    review
}

fn access_status(allowed: bool, reason: &str) -> Value {
    let mut status = json!({"allowed": allowed});
    if !reason.is_empty() {
        status["reason"] = json!(reason);
    }
    status
}

impl Core {
    /// Creates (answers) a review of kind `rt` for `user`; `namespace` is the URL's (LocalSubjectAccessReview).
    pub fn review(
        &self,
        rt: &ResourceType,
        namespace: Option<&str>,
        user: &UserInfo,
        body: &Value,
    ) -> Result<Value, ApiError> {
        crate::ops::write::check_type(rt, body)?;
        let spec = body.get("spec").cloned().unwrap_or_else(|| json!({}));
        let invalid = |errors: Vec<FieldError>| ApiError::invalid(rt, "", &errors);
        let status = match rt.builtin() {
            Some(Builtin::SelfSubjectAccessReview) => {
                let attributes = spec_attributes(&spec).map_err(invalid)?;
                let decision = self.decide(user, &attributes);
                access_status(decision.allowed, &decision.reason)
            }
            Some(kind @ (Builtin::SubjectAccessReview | Builtin::LocalSubjectAccessReview)) => {
                let mut errors = Vec::new();
                let attributes = spec_attributes(&spec).map_err(|e| errors.extend(e)).ok();
                let subject = spec_user(&spec);
                if subject.name.is_empty() && subject.groups.is_empty() {
                    errors.push(field_error(
                        "spec.user",
                        ErrorKind::Invalid,
                        "Invalid value: \"\": at least one of user or group must be specified",
                    ));
                }
                if kind == Builtin::LocalSubjectAccessReview
                    && let Some(attributes) = &attributes
                {
                    if !attributes.resource_request {
                        errors.push(field_error(
                            "spec.nonResourceAttributes",
                            ErrorKind::Invalid,
                            "Invalid value: \"object\": disallowed on this kind of request",
                        ));
                    } else if Some(attributes.namespace.as_str()) != namespace {
                        errors.push(field_error(
                            "spec.resourceAttributes.namespace",
                            ErrorKind::Invalid,
                            format!("Invalid value: {:?}: must match metadata.namespace", attributes.namespace),
                        ));
                    }
                }
                match attributes {
                    Some(attributes) if errors.is_empty() => {
                        let decision = self.decide(&subject, &attributes);
                        access_status(decision.allowed, &decision.reason)
                    }
                    _ => return Err(invalid(errors)),
                }
            }
            Some(Builtin::SelfSubjectRulesReview) => {
                let namespace = text(&spec, "/namespace");
                let (rules, errors) = self.rbac_index().rules_for(user, namespace);
                let resource_rules: Vec<Value> = rules
                    .iter()
                    .filter(|r| !r.resources.is_empty())
                    .map(|r| {
                        let mut rule = r.to_json();
                        if let Some(rule) = rule.as_object_mut() {
                            rule.remove("nonResourceURLs");
                        }
                        rule
                    })
                    .collect();
                let non_resource_rules: Vec<Value> = rules
                    .iter()
                    .filter(|r| !r.non_resource_urls.is_empty())
                    .map(|r| json!({"verbs": r.verbs, "nonResourceURLs": r.non_resource_urls}))
                    .collect();
                let mut status = json!({"resourceRules": resource_rules, "nonResourceRules": non_resource_rules,
                    "incomplete": false});
                if !errors.is_empty() {
                    status["evaluationError"] = json!(errors.join(", "));
                }
                status
            }
            Some(Builtin::SelfSubjectReview) => json!({"userInfo": user.to_json()}),
            Some(Builtin::TokenReview) => {
                let token = text(&spec, "/token");
                let audiences: Vec<String> = spec
                    .get("audiences")
                    .and_then(Value::as_array)
                    .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
                    .unwrap_or_default();
                match self.authenticate_token(token, &audiences) {
                    Ok((reviewed, audiences)) => {
                        json!({"authenticated": true, "user": reviewed.to_json(), "audiences": audiences})
                    }
                    Err(_) => json!({"user": {}, "error": "invalid bearer token"}),
                }
            }
            _ => return Err(ApiError::method_not_allowed("POST")),
        };
        Ok(answered(rt, body, namespace, status))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_review_needs_exactly_one_kind_of_attributes() {
        assert!(spec_attributes(&json!({})).is_err());
        assert!(spec_attributes(&json!({"resourceAttributes": {}, "nonResourceAttributes": {}})).is_err());
        let attributes =
            spec_attributes(&json!({"resourceAttributes": {"verb": "patch", "resource": "nodes"}})).unwrap();
        assert_eq!(attributes, Attributes::resource("patch", "", "", "nodes", "", "", ""));
        let user = spec_user(&json!({"user": "u", "groups": ["g"], "extra": {"k": ["v"]}}));
        assert_eq!(user.extra_value("k"), Some("v"));
        assert_eq!(user.groups, ["g"]);
    }
}
