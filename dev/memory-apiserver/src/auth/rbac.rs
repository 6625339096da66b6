//! The RBAC authorizer: Roles, ClusterRoles and their bindings decide a request as upstream's
//! `plugin/pkg/auth/authorizer/rbac` does (no aggregation).
//!
//! # Guarantees
//! - A request is allowed when some rule of a role bound to the user allows it: ClusterRoleBindings everywhere,
//!   RoleBindings (to a Role or a ClusterRole) only in their namespace.
//! - Rules match as upstream's `RuleAllows`: verbs and apiGroups with `*`, resources as `resource/subresource`,
//!   `*` and `*/subresource`, resourceNames (an empty list matches every name), nonResourceURLs with a trailing `*`.
//! - Bindings to missing roles allow nothing and are named in the denial's reason, as upstream's
//!   `RBAC: clusterrole.rbac.authorization.k8s.io "x" not found`.

use super::attributes::Attributes;
use super::user::{UserInfo, split_service_account_username};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;

/// One `PolicyRule`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Rule {
    /// Verbs (`*` for all).
    pub verbs: Vec<String>,
    /// API groups (`""` core, `*` all).
    pub api_groups: Vec<String>,
    /// Resources (`pods`, `pods/eviction`, `*`, `*/status`).
    pub resources: Vec<String>,
    /// Names the rule is limited to (empty: all).
    pub resource_names: Vec<String>,
    /// Non-resource URLs (`/healthz`, `/apis/*`, `*`).
    pub non_resource_urls: Vec<String>,
}

fn strings(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

impl Rule {
    /// Reads a `PolicyRule` object.
    pub fn from_json(rule: &Value) -> Rule {
        Rule {
            verbs: strings(rule.get("verbs")),
            api_groups: strings(rule.get("apiGroups")),
            resources: strings(rule.get("resources")),
            resource_names: strings(rule.get("resourceNames")),
            non_resource_urls: strings(rule.get("nonResourceURLs")),
        }
    }

    fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == "*" || v == verb)
    }

    fn group_matches(&self, group: &str) -> bool {
        self.api_groups.iter().any(|g| g == "*" || g == group)
    }

    fn resource_matches(&self, combined: &str, subresource: &str) -> bool {
        self.resources.iter().any(|r| {
            r == "*"
                || r == combined
                || (!subresource.is_empty()
                    && r.len() == subresource.len() + 2
                    && r.starts_with("*/")
                    && r.ends_with(subresource))
        })
    }

    fn name_matches(&self, name: &str) -> bool {
        self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == name)
    }

    fn url_matches(&self, path: &str) -> bool {
        self.non_resource_urls
            .iter()
            .any(|u| u == "*" || u == path || (u.ends_with('*') && path.starts_with(u.trim_end_matches('*'))))
    }

    /// Upstream's `RuleAllows`.
    pub fn allows(&self, attributes: &Attributes) -> bool {
        if attributes.resource_request {
            let combined = if attributes.subresource.is_empty() {
                std::borrow::Cow::Borrowed(attributes.resource.as_str())
            } else {
                std::borrow::Cow::Owned(format!("{}/{}", attributes.resource, attributes.subresource))
            };
            self.verb_matches(&attributes.verb)
                && self.group_matches(&attributes.api_group)
                && self.resource_matches(&combined, &attributes.subresource)
                && self.name_matches(&attributes.name)
        } else {
            self.verb_matches(&attributes.verb) && self.url_matches(&attributes.path)
        }
    }

    /// The rule as JSON (`PolicyRule`, empty lists omitted).
    pub fn to_json(&self) -> Value {
        let mut rule = serde_json::Map::new();
        for (key, list) in [
            ("verbs", &self.verbs),
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ] {
            if !list.is_empty() || key == "verbs" {
                rule.insert(key.into(), serde_json::json!(list));
            }
        }
        Value::Object(rule)
    }
}

/// A binding subject.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Subject {
    /// `User`, `Group` or `ServiceAccount`.
    pub kind: String,
    /// Name.
    pub name: String,
    /// Namespace (service accounts).
    pub namespace: String,
}

impl Subject {
    /// Upstream's `appliesToUser`; `binding_namespace` is the RoleBinding's namespace ("" for cluster bindings).
    fn applies_to(&self, user: &UserInfo, binding_namespace: &str) -> bool {
        match self.kind.as_str() {
            "User" => user.name == self.name,
            "Group" => user.groups.contains(&self.name),
            "ServiceAccount" => {
                let namespace = if self.namespace.is_empty() { binding_namespace } else { &self.namespace };
                !namespace.is_empty()
                    && split_service_account_username(&user.name) == Some((namespace, self.name.as_str()))
            }
            _ => false,
        }
    }

    /// `ServiceAccount "name/ns"` or `User "name"`: how upstream's describers name a subject.
    fn describe(&self, binding_namespace: &str) -> String {
        match self.kind.as_str() {
            "ServiceAccount" => {
                let namespace = if self.namespace.is_empty() { binding_namespace } else { &self.namespace };
                format!("{} \"{}/{}\"", self.kind, self.name, namespace)
            }
            _ => format!("{} \"{}\"", self.kind, self.name),
        }
    }
}

/// A RoleBinding or ClusterRoleBinding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Binding {
    /// Name.
    pub name: String,
    /// Namespace ("" for a ClusterRoleBinding).
    pub namespace: String,
    /// `roleRef.kind`: `Role` or `ClusterRole`.
    pub role_kind: String,
    /// `roleRef.name`.
    pub role_name: String,
    /// Subjects.
    pub subjects: Vec<Subject>,
}

impl Binding {
    fn from_json(object: &Value) -> Binding {
        let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
        let subjects = object
            .get("subjects")
            .and_then(Value::as_array)
            .map(|subjects| {
                subjects
                    .iter()
                    .map(|s| {
                        let field = |key: &str| s.get(key).and_then(Value::as_str).unwrap_or_default().to_owned();
                        Subject { kind: field("kind"), name: field("name"), namespace: field("namespace") }
                    })
                    .collect()
            })
            .unwrap_or_default();
        Binding {
            name: text("/metadata/name"),
            namespace: text("/metadata/namespace"),
            role_kind: text("/roleRef/kind"),
            role_name: text("/roleRef/name"),
            subjects,
        }
    }

    fn describe(&self, subject: &Subject) -> String {
        if self.namespace.is_empty() {
            format!(
                "ClusterRoleBinding \"{}\" of {} \"{}\" to {}",
                self.name,
                self.role_kind,
                self.role_name,
                subject.describe("")
            )
        } else {
            format!(
                "RoleBinding \"{}/{}\" of {} \"{}\" to {}",
                self.name,
                self.namespace,
                self.role_kind,
                self.role_name,
                subject.describe(&self.namespace)
            )
        }
    }
}

/// The RBAC objects of a cluster, indexed for authorization.
#[derive(Debug, Clone, Default)]
pub struct RbacIndex {
    cluster_roles: HashMap<String, Arc<Vec<Rule>>>,
    roles: HashMap<(String, String), Arc<Vec<Rule>>>,
    cluster_role_bindings: Vec<Binding>,
    role_bindings: HashMap<String, Vec<Binding>>,
}

fn rules_of(object: &Value) -> Arc<Vec<Rule>> {
    Arc::new(
        object
            .get("rules")
            .and_then(Value::as_array)
            .map(|r| r.iter().map(Rule::from_json).collect())
            .unwrap_or_default(),
    )
}

/// What an authorization decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Allowed.
    pub allowed: bool,
    /// Upstream's reason: `RBAC: allowed by ...`, or the resolution errors of a denial (often empty).
    pub reason: String,
}

impl RbacIndex {
    /// Indexes RBAC objects (`Role`, `ClusterRole`, `RoleBinding`, `ClusterRoleBinding` by their `kind`; other
    /// objects are ignored), e.g. the stored ones or the documents of a manifest.
    pub fn from_objects<'a>(objects: impl IntoIterator<Item = &'a Value>) -> RbacIndex {
        let mut index = RbacIndex::default();
        for object in objects {
            let text = |pointer: &str| object.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_owned();
            match object.get("kind").and_then(Value::as_str) {
                Some("ClusterRole") => {
                    index.cluster_roles.insert(text("/metadata/name"), rules_of(object));
                }
                Some("Role") => {
                    index.roles.insert((text("/metadata/namespace"), text("/metadata/name")), rules_of(object));
                }
                Some("ClusterRoleBinding") => {
                    let mut binding = Binding::from_json(object);
                    binding.namespace.clear();
                    index.cluster_role_bindings.push(binding);
                }
                Some("RoleBinding") => {
                    let binding = Binding::from_json(object);
                    index.role_bindings.entry(binding.namespace.clone()).or_default().push(binding);
                }
                _ => {}
            }
        }
        index
    }

    /// The rules a binding grants, or upstream's lister error when its role is missing.
    fn role_rules(&self, binding: &Binding) -> Result<Arc<Vec<Rule>>, String> {
        match binding.role_kind.as_str() {
            "ClusterRole" => self
                .cluster_roles
                .get(&binding.role_name)
                .cloned()
                .ok_or_else(|| format!("clusterrole.rbac.authorization.k8s.io \"{}\" not found", binding.role_name)),
            "Role" if !binding.namespace.is_empty() => self
                .roles
                .get(&(binding.namespace.clone(), binding.role_name.clone()))
                .cloned()
                .ok_or_else(|| format!("role.rbac.authorization.k8s.io \"{}\" not found", binding.role_name)),
            other => Err(format!("unsupported role reference kind: {other:?}")),
        }
    }

    /// Calls `visit(source, rule)` for every rule that applies to `user` in `namespace` ("" for cluster-scoped
    /// requests) until it returns false; returns the resolution errors met on the way.
    fn visit_rules_for(
        &self,
        user: &UserInfo,
        namespace: &str,
        mut visit: impl FnMut(&dyn Fn() -> String, &Rule) -> bool,
    ) -> Vec<String> {
        let mut errors = Vec::new();
        let no_bindings = Vec::new();
        let namespaced =
            if namespace.is_empty() { &no_bindings } else { self.role_bindings.get(namespace).unwrap_or(&no_bindings) };
        for binding in self.cluster_role_bindings.iter().chain(namespaced) {
            let Some(subject) = binding.subjects.iter().find(|s| s.applies_to(user, &binding.namespace)) else {
                continue;
            };
            match self.role_rules(binding) {
                Ok(rules) => {
                    for rule in rules.iter() {
                        if !visit(&|| binding.describe(subject), rule) {
                            return errors;
                        }
                    }
                }
                Err(error) => errors.push(error),
            }
        }
        errors
    }

    /// Decides a request as upstream's RBAC authorizer does.
    pub fn authorize(&self, user: &UserInfo, attributes: &Attributes) -> Decision {
        let mut allowed_by = None;
        let errors = self.visit_rules_for(user, &attributes.namespace, |source, rule| {
            if rule.allows(attributes) {
                allowed_by = Some(format!("RBAC: allowed by {}", source()));
                false
            } else {
                true
            }
        });
        match allowed_by {
            Some(reason) => Decision { allowed: true, reason },
            None if errors.is_empty() => Decision { allowed: false, reason: String::new() },
            None => Decision { allowed: false, reason: format!("RBAC: {}", aggregate(&errors)) },
        }
    }

    /// Every rule that applies to `user` in `namespace`, and the resolution errors (for SelfSubjectRulesReview).
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<Rule>, Vec<String>) {
        let mut rules = Vec::new();
        let errors = self.visit_rules_for(user, namespace, |_, rule| {
            rules.push(rule.clone());
            true
        });
        (rules, errors)
    }
}

/// `utilerrors.NewAggregate(...).Error()`.
fn aggregate(errors: &[String]) -> String {
    match errors {
        [one] => one.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn attributes(verb: &str, group: &str, resource: &str, sub: &str, ns: &str, name: &str) -> Attributes {
        Attributes::resource(verb, group, "v1", resource, sub, ns, name)
    }

    fn index() -> RbacIndex {
        let objects = [
            json!({"kind": "ClusterRole", "metadata": {"name": "nodes"}, "rules": [
                {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "patch"]},
                {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
                {"apiGroups": ["*"], "resources": ["*/status"], "verbs": ["get"]},
                {"nonResourceURLs": ["/healthz", "/apis/*"], "verbs": ["get"]}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "nodes"},
                "roleRef": {"kind": "ClusterRole", "name": "nodes"},
                "subjects": [{"kind": "ServiceAccount", "name": "agent", "namespace": "ops"}]}),
            json!({"kind": "Role", "metadata": {"name": "lease", "namespace": "ops"}, "rules": [
                {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "resourceNames": ["mine"], "verbs": ["*"]}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "lease", "namespace": "ops"},
                "roleRef": {"kind": "Role", "name": "lease"}, "subjects": [{"kind": "ServiceAccount", "name": "agent"}]}),
            json!({"kind": "RoleBinding", "metadata": {"name": "view", "namespace": "apps"},
                "roleRef": {"kind": "ClusterRole", "name": "nodes"}, "subjects": [{"kind": "Group", "name": "devs"}]}),
            json!({"kind": "ClusterRoleBinding", "metadata": {"name": "dangling"},
                "roleRef": {"kind": "ClusterRole", "name": "gone"}, "subjects": [{"kind": "User", "name": "jane"}]}),
        ];
        RbacIndex::from_objects(&objects)
    }

    #[test]
    fn cluster_role_bindings_grant_their_rules_everywhere() {
        let agent = UserInfo::service_account("ops", "agent", "");
        let index = index();
        let decision = index.authorize(&agent, &attributes("patch", "", "nodes", "", "", "n1"));
        assert_eq!(
            decision,
            Decision {
                allowed: true,
                reason: "RBAC: allowed by ClusterRoleBinding \"nodes\" of ClusterRole \"nodes\" to ServiceAccount \"agent/ops\""
                    .into()
            }
        );
        assert!(!index.authorize(&agent, &attributes("delete", "", "nodes", "", "", "n1")).allowed);
        assert!(!index.authorize(&agent, &attributes("patch", "", "nodes", "status", "", "n1")).allowed);
        assert!(index.authorize(&agent, &attributes("get", "apps", "deployments", "status", "x", "d")).allowed);
        assert!(!index.authorize(&agent, &attributes("get", "apps", "deployments", "scale", "x", "d")).allowed);
        assert!(index.authorize(&agent, &attributes("create", "", "pods", "eviction", "x", "p")).allowed);
        assert!(!index.authorize(&agent, &attributes("create", "", "pods", "", "x", "")).allowed);
        let other = UserInfo::service_account("other", "agent", "");
        assert!(!index.authorize(&other, &attributes("get", "", "nodes", "", "", "n1")).allowed);
    }

    #[test]
    fn role_bindings_count_only_in_their_namespace_and_resource_names_limit_rules() {
        let agent = UserInfo::service_account("ops", "agent", "");
        let index = index();
        assert!(
            index.authorize(&agent, &attributes("update", "coordination.k8s.io", "leases", "", "ops", "mine")).allowed
        );
        assert!(
            !index
                .authorize(&agent, &attributes("update", "coordination.k8s.io", "leases", "", "ops", "other"))
                .allowed
        );
        assert!(!index.authorize(&agent, &attributes("list", "coordination.k8s.io", "leases", "", "ops", "")).allowed);
        assert!(
            !index.authorize(&agent, &attributes("get", "coordination.k8s.io", "leases", "", "ops2", "mine")).allowed
        );
        let dev = UserInfo::user("joe", &["devs"]);
        assert!(index.authorize(&dev, &attributes("get", "", "nodes", "", "apps", "n")).allowed);
        assert!(!index.authorize(&dev, &attributes("get", "", "nodes", "", "", "n")).allowed);
    }

    #[test]
    fn non_resource_urls_match_exactly_or_by_prefix() {
        let agent = UserInfo::service_account("ops", "agent", "");
        let index = index();
        assert!(index.authorize(&agent, &Attributes::non_resource("get", "/healthz")).allowed);
        assert!(index.authorize(&agent, &Attributes::non_resource("get", "/apis/apps/v1")).allowed);
        assert!(!index.authorize(&agent, &Attributes::non_resource("get", "/api")).allowed);
        assert!(!index.authorize(&agent, &Attributes::non_resource("post", "/healthz")).allowed);
    }

    #[test]
    fn a_binding_to_a_missing_role_is_named_in_the_denial() {
        let jane = UserInfo::user("jane", &[]);
        let decision = index().authorize(&jane, &attributes("get", "", "pods", "", "x", "p"));
        assert_eq!(
            decision,
            Decision {
                allowed: false,
                reason: "RBAC: clusterrole.rbac.authorization.k8s.io \"gone\" not found".into()
            }
        );
        let (rules, errors) = index().rules_for(&UserInfo::service_account("ops", "agent", ""), "ops");
        assert_eq!(rules.len(), 5);
        assert!(errors.is_empty());
    }
}
