//! The ClusterRole aggregation controller (kube-controller-manager's `clusterrole-aggregation`): a ClusterRole with
//! an `aggregationRule` gets the rules of every ClusterRole its `clusterRoleSelectors` match.
//!
//! Checked against kubernetes/kubernetes `pkg/controller/clusterroleaggregation/
//! clusterroleaggregation_controller.go`:
//! - any add, change or delete of a ClusterRole queues every ClusterRole that has an `aggregationRule` (`enqueue`);
//! - the rules are, selector after selector, the rules of the matching ClusterRoles sorted by name (the role itself
//!   left out), each rule once (`ruleExists`, semantic equality: an empty list equals a missing one);
//! - when they differ from the role's rules, they are written by server-side apply with field manager
//!   `clusterrole-aggregation-controller` and `force` (`applyClusterRoles`); a selector that does not parse fails
//!   the sync (retried).

use super::queue::WorkQueue;
use super::{Informers, Outcome, Reconciler, SyncError, names};
use crate::apiserver::object::ObjectKey;
use crate::apiserver::selector::label::LabelSelector;
use crate::apiserver::store::{Patch, Store};
use crate::apiserver::{ApiError, Gvr};
use k8s_openapi::api::rbac::v1::{ClusterRole, PolicyRule};
use kube::api::PatchParams;
use serde_json::{Value, json};
use std::future::Future;
use tokio_util::sync::CancellationToken;

/// The field manager of the controller's writes.
pub const FIELD_MANAGER: &str = "clusterrole-aggregation-controller";

/// Starts the controller: subscribes to the ClusterRole cache now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    {
        let (queue, roles) = (queue.clone(), informers.cluster_roles.clone());
        informers.cluster_roles.subscribe(move |change| {
            // The changed role itself may have just got (or lost) its aggregationRule.
            let changed = change.object();
            if changed.object.aggregation_rule.is_some() {
                queue.add(changed.meta.key.clone());
            }
            roles.for_each(|role| {
                if role.object.aggregation_rule.is_some() {
                    queue.add(role.meta.key.clone());
                }
            });
        });
    }
    let aggregator = Aggregator {
        store: store.with_identity("dev/clusterrole-aggregation-controller"),
        informers: informers.clone(),
    };
    super::worker(aggregator, queue, store.controller_gate(names::CLUSTERROLE_AGGREGATION), informers, shutdown)
}

struct Aggregator {
    store: Store,
    informers: Informers,
}

/// A rule with empty lists dropped, so that rules compare as `equality.Semantic.DeepEqual` compares them.
fn normalized(rule: &PolicyRule) -> PolicyRule {
    let keep = |list: &Option<Vec<String>>| list.clone().filter(|l| !l.is_empty());
    PolicyRule {
        api_groups: keep(&rule.api_groups),
        non_resource_urls: keep(&rule.non_resource_urls),
        resource_names: keep(&rule.resource_names),
        resources: keep(&rule.resources),
        verbs: rule.verbs.clone(),
    }
}

/// The rules the aggregation rule of `role` selects from `roles`, in upstream's order.
pub fn aggregated_rules(role: &ClusterRole, roles: &[&ClusterRole]) -> Result<Vec<PolicyRule>, String> {
    let mut rules: Vec<PolicyRule> = Vec::new();
    let Some(rule) = &role.aggregation_rule else { return Ok(rules) };
    let own_name = role.metadata.name.as_deref().unwrap_or_default();
    for selector in rule.cluster_role_selectors.iter().flatten() {
        let selector = LabelSelector::from_object(&serde_json::to_value(selector).map_err(|e| e.to_string())?)?;
        let mut matching: Vec<&ClusterRole> = roles
            .iter()
            .copied()
            .filter(|r| r.metadata.name.as_deref() != Some(own_name))
            .filter(|r| selector.matches(|key| r.metadata.labels.as_ref().and_then(|l| l.get(key)).map(String::as_str)))
            .collect();
        matching.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        for source in matching {
            for rule in source.rules.iter().flatten() {
                let rule = normalized(rule);
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
        }
    }
    Ok(rules)
}

impl Aggregator {
    async fn aggregate(&mut self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let Some(role) = self.informers.cluster_roles.get(key) else { return Ok(Outcome::Done) };
        if role.object.aggregation_rule.is_none() {
            return Ok(Outcome::Done);
        }
        let all = self.informers.cluster_roles.list();
        let roles: Vec<&ClusterRole> = all.iter().map(|r| &r.object).collect();
        let rules = aggregated_rules(&role.object, &roles).map_err(|reason| {
            SyncError::Api(ApiError::bad_request(format!("invalid clusterRoleSelector: {reason}")))
        })?;
        let current: Vec<PolicyRule> = role.object.rules.iter().flatten().map(normalized).collect();
        if current == rules {
            return Ok(Outcome::Done);
        }
        let apply = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": role.meta.name.to_string()},
            "rules": serde_json::to_value(&rules)?,
        });
        let params =
            PatchParams { field_manager: Some(FIELD_MANAGER.to_owned()), force: true, ..PatchParams::default() };
        let written =
            self.store.patch(&Gvr::of::<ClusterRole>(), None, &role.meta.name, &Patch::Apply(apply), &params)?;
        let rv = written.pointer("/metadata/resourceVersion").and_then(Value::as_str).and_then(|rv| rv.parse().ok());
        self.informers.cluster_roles.wait_for_rv(rv.unwrap_or(0), super::READ_YOUR_WRITES).await;
        Ok(Outcome::Done)
    }
}

impl Reconciler for Aggregator {
    type Key = ObjectKey;

    fn sync(&mut self, key: &ObjectKey) -> impl Future<Output = Result<Outcome, SyncError>> + Send {
        self.aggregate(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn role(value: Value) -> ClusterRole {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn rules_come_from_matching_roles_by_name_once_each() {
        let aggregate = role(json!({"metadata": {"name": "view-all"}, "aggregationRule": {"clusterRoleSelectors": [
            {"matchLabels": {"agg": "view"}},
            {"matchExpressions": [{"key": "extra", "operator": "Exists"}]}]}, "rules": []}));
        let b = role(json!({"metadata": {"name": "b", "labels": {"agg": "view"}},
            "rules": [{"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}));
        let a = role(json!({"metadata": {"name": "a", "labels": {"agg": "view", "extra": "1"}},
            "rules": [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["list"], "resourceNames": []},
                      {"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]}]}));
        let other = role(json!({"metadata": {"name": "c", "labels": {"agg": "edit"}},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}]}));
        let rules = aggregated_rules(&aggregate, &[&b, &other, &aggregate, &a]).unwrap();
        let resources: Vec<String> = rules.iter().map(|r| r.resources.clone().unwrap_or_default().join(",")).collect();
        assert_eq!(resources, vec!["nodes", "pods"]);
        assert_eq!(rules[0].resource_names, None, "an empty list is the same rule as a missing one");
        let bad = role(json!({"metadata": {"name": "x"}, "aggregationRule": {"clusterRoleSelectors": [
            {"matchExpressions": [{"key": "k", "operator": "Bogus"}]}]}}));
        assert!(aggregated_rules(&bad, &[&a]).is_err());
    }
}
