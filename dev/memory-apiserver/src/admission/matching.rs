//! Which requests a policy's `matchConstraints` (or a binding's `matchResources`) select: upstream's
//! `admission/plugin/policy/matching` and webhook `RuleMatcher`.
//!
//! # Guarantees
//! - `resources` name the main resource (`nodes`), one subresource (`nodes/status`), a resource with all its
//!   subresources (`nodes/*`: upstream's matcher lets `*` match the main resource's empty subresource too), every
//!   main resource (`*`), or everything (`*/*`, `*/status` for one subresource).
//! - `namespaceSelector` tests the labels of the request's namespace (of the Namespace object itself for
//!   namespaces; cluster-scoped objects always pass); `objectSelector` passes when the object or the old object
//!   matches; absent selectors match everything.
//! - A request matched by an `excludeResourceRules` rule is not selected.

use super::Request;
use crate::selector::LabelSelector;
use serde_json::Value;

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

fn listed(list: &[String], value: &str) -> bool {
    list.iter().any(|item| item == "*" || item == value)
}

/// One `NamedRuleWithOperations`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    operations: Vec<String>,
    api_groups: Vec<String>,
    api_versions: Vec<String>,
    resources: Vec<String>,
    resource_names: Vec<String>,
    scope: String,
}

impl Rule {
    /// Reads a rule object.
    pub fn from_json(rule: &Value) -> Rule {
        Rule {
            operations: strings(rule.get("operations")),
            api_groups: strings(rule.get("apiGroups")),
            api_versions: strings(rule.get("apiVersions")),
            resources: strings(rule.get("resources")),
            resource_names: strings(rule.get("resourceNames")),
            scope: rule.get("scope").and_then(Value::as_str).unwrap_or("*").to_owned(),
        }
    }

    fn resource_matches(&self, resource: &str, subresource: &str) -> bool {
        self.resources.iter().any(|pattern| {
            let (res, sub) = pattern.split_once('/').unwrap_or((pattern, ""));
            let res_ok = res == "*" || res == resource;
            let sub_ok = if sub.is_empty() { subresource.is_empty() } else { sub == "*" || sub == subresource };
            res_ok && sub_ok
        })
    }

    /// True when the rule selects `request`.
    pub fn matches(&self, request: &Request<'_>) -> bool {
        let scope_ok = match self.scope.as_str() {
            "Cluster" => !request.namespaced,
            "Namespaced" => request.namespaced,
            _ => true,
        };
        scope_ok
            && listed(&self.operations, request.operation.as_str())
            && listed(&self.api_groups, request.group)
            && listed(&self.api_versions, request.version)
            && self.resource_matches(request.resource, request.subresource)
            && (self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == request.name))
    }
}

/// `matchConstraints` / `matchResources`.
#[derive(Debug, Clone)]
pub struct MatchResources {
    rules: Vec<Rule>,
    exclude: Vec<Rule>,
    namespace_selector: Option<LabelSelector>,
    object_selector: Option<LabelSelector>,
}

fn selector(value: Option<&Value>) -> Result<Option<LabelSelector>, String> {
    match value.filter(|v| !v.is_null()) {
        None => Ok(None),
        Some(selector) => LabelSelector::from_object(selector).map(Some),
    }
}

impl MatchResources {
    /// Reads `matchConstraints` or `matchResources` (an invalid selector is an error).
    pub fn from_json(value: &Value) -> Result<MatchResources, String> {
        let rules = |key: &str| -> Vec<Rule> {
            value
                .get(key)
                .and_then(Value::as_array)
                .map(|r| r.iter().map(Rule::from_json).collect())
                .unwrap_or_default()
        };
        Ok(MatchResources {
            rules: rules("resourceRules"),
            exclude: rules("excludeResourceRules"),
            namespace_selector: selector(value.get("namespaceSelector"))?,
            object_selector: selector(value.get("objectSelector"))?,
        })
    }

    /// True when `request` is selected. `rules_required`: a policy's constraints must name resources; a binding's
    /// `matchResources` without rules narrows by selectors only.
    pub fn matches(&self, request: &Request<'_>, rules_required: bool) -> bool {
        let included =
            if self.rules.is_empty() { !rules_required } else { self.rules.iter().any(|r| r.matches(request)) };
        if !included || self.exclude.iter().any(|r| r.matches(request)) {
            return false;
        }
        if let Some(selector) = &self.namespace_selector {
            let labels = if request.group.is_empty() && request.resource == "namespaces" {
                request.object.or(request.old_object).and_then(|o| o.pointer("/metadata/labels"))
            } else if request.namespaced {
                request.namespace_object.and_then(|n| n.pointer("/metadata/labels"))
            } else {
                None
            };
            let cluster_scoped = !request.namespaced && request.resource != "namespaces";
            if !cluster_scoped && !selector.matches_map(labels.and_then(Value::as_object)) {
                return false;
            }
        }
        if let Some(selector) = &self.object_selector {
            let matched = [request.object, request.old_object]
                .into_iter()
                .flatten()
                .any(|o| selector.matches_map(o.pointer("/metadata/labels").and_then(Value::as_object)));
            if !matched {
                return false;
            }
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::Operation;
    use super::*;
    use crate::auth::UserInfo;
    use serde_json::json;

    fn request<'a>(
        op: Operation,
        resource: &'a str,
        sub: &'a str,
        object: &'a Value,
        user: &'a UserInfo,
    ) -> Request<'a> {
        Request {
            operation: op,
            group: "",
            version: "v1",
            resource,
            subresource: sub,
            kind: "Node",
            name: "n1",
            namespace: "",
            namespaced: false,
            object: Some(object),
            old_object: Some(object),
            namespace_object: None,
            user,
            dry_run: false,
        }
    }

    fn constraints(value: Value) -> MatchResources {
        MatchResources::from_json(&value).unwrap()
    }

    #[test]
    fn resources_select_main_resources_and_subresources_as_upstream() {
        let user = UserInfo::admin();
        let node = json!({"metadata": {"name": "n1", "labels": {"role": "worker"}}});
        let main = request(Operation::Update, "nodes", "", &node, &user);
        let status = request(Operation::Update, "nodes", "status", &node, &user);
        let rule = |resources: Value| {
            constraints(
                json!({"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": resources}]}),
            )
        };
        assert!(rule(json!(["nodes"])).matches(&main, true));
        assert!(!rule(json!(["nodes"])).matches(&status, true));
        assert!(rule(json!(["nodes/status"])).matches(&status, true));
        assert!(rule(json!(["nodes/*"])).matches(&status, true));
        // Upstream's RuleMatcher: a `*` subresource matches the main resource's empty one too.
        assert!(rule(json!(["nodes/*"])).matches(&main, true));
        assert!(rule(json!(["*"])).matches(&main, true));
        assert!(!rule(json!(["*"])).matches(&status, true));
        assert!(rule(json!(["*/*"])).matches(&status, true));
        assert!(rule(json!(["*/status"])).matches(&status, true));
        assert!(!rule(json!(["pods"])).matches(&main, true));
        let create = request(Operation::Create, "nodes", "", &node, &user);
        assert!(!rule(json!(["nodes"])).matches(&create, true));
        assert!(!constraints(json!({})).matches(&main, true));
        assert!(constraints(json!({})).matches(&main, false));
    }

    #[test]
    fn selectors_and_exclusions_narrow_the_match() {
        let user = UserInfo::admin();
        let node = json!({"metadata": {"name": "n1", "labels": {"role": "worker"}}});
        let main = request(Operation::Update, "nodes", "", &node, &user);
        let all = json!([{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"]}]);
        let with = |extra: Value| {
            let mut value = json!({"resourceRules": all});
            for (k, v) in extra.as_object().unwrap() {
                value[k] = v.clone();
            }
            constraints(value)
        };
        assert!(with(json!({"objectSelector": {"matchLabels": {"role": "worker"}}})).matches(&main, true));
        assert!(!with(json!({"objectSelector": {"matchLabels": {"role": "cp"}}})).matches(&main, true));
        // Cluster-scoped objects pass any namespace selector.
        assert!(with(json!({"namespaceSelector": {"matchLabels": {"x": "y"}}})).matches(&main, true));
        assert!(!with(json!({"excludeResourceRules": [{"apiGroups": [""], "apiVersions": ["*"], "operations": ["*"], "resources": ["nodes"]}]})).matches(&main, true));
        let namespace = json!({"metadata": {"labels": {"team": "a"}}});
        let mut pod = request(Operation::Create, "pods", "", &node, &user);
        pod.namespaced = true;
        pod.namespace = "a";
        pod.namespace_object = Some(&namespace);
        assert!(with(json!({"namespaceSelector": {"matchLabels": {"team": "a"}}})).matches(&pod, true));
        assert!(!with(json!({"namespaceSelector": {"matchLabels": {"team": "b"}}})).matches(&pod, true));
        let scoped = constraints(
            json!({"resourceRules": [{"apiGroups": ["*"], "apiVersions": ["*"], "operations": ["*"], "resources": ["*"], "scope": "Namespaced"}]}),
        );
        assert!(scoped.matches(&pod, true));
        assert!(!scoped.matches(&main, true));
    }
}
