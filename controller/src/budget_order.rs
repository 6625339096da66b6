//! PDB-aware order (issue 34 item 1): among the nodes that may start, those whose pods' PodDisruptionBudgets allow a
//! disruption now go before those a budget would block, so that one blocked budget does not hold a slot of
//! `maxUnavailable` for a whole wave while other nodes could move.
//!
//! # How
//! - Just before a node starts, whether staged ahead or drained (the same look at its pods as for do-not-disrupt
//!   pods, `crate::do_not_disrupt`), the budgets of the namespaces of its evictable pods are listed; a running pod that a budget with
//!   `status.disruptionsAllowed` 0 selects ([`blocking`]) makes its drain wait.
//! - Such a node is **deferred** once: not started, and ordered after the other nodes of its zone for [`DEFER`]
//!   (the policy's order reads it from the node's view). The next plan gives its slot to the next node. If it is
//!   still the one selected (no other node could take the slot), it starts: deferral reorders, it never holds a
//!   node back.

use crate::drain::filters::{budgets_matter, budgets_selecting, pod_name};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use std::time::Duration;

/// How long a deferred node is ordered after the others.
pub const DEFER: Duration = Duration::from_secs(30);

/// The first budget among `budgets` that allows no disruption now and selects a pod of `pods` that a drain would
/// evict under it, as a message naming both.
pub fn blocking(pods: &[Pod], budgets: &[PodDisruptionBudget]) -> Option<String> {
    let mut found: Vec<String> = pods
        .iter()
        .filter(|p| budgets_matter(p))
        .flat_map(|pod| {
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            budgets_selecting(budgets, pod).into_iter().filter_map(move |name| {
                let budget = budgets.iter().find(|b| {
                    b.metadata.namespace.as_deref() == Some(namespace.as_str())
                        && b.metadata.name.as_ref() == Some(&name)
                })?;
                let allowed = budget.status.as_ref().map(|s| s.disruptions_allowed)?;
                (allowed == 0).then(|| format!("PDB {namespace}/{name} allows no disruption of pod {}", pod_name(pod)))
            })
        })
        .collect();
    found.sort();
    found.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, app: &str, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "db", "labels": {"app": app},
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": app, "uid": "u", "controller": true}]},
            "spec": {"nodeName": "w-0", "containers": [{"name": "c"}]},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    fn budget(name: &str, app: &str, allowed: Option<i32>) -> PodDisruptionBudget {
        let status = allowed
            .map(|a| json!({"disruptionsAllowed": a, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2}));
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "db"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": app}}},
            "status": status
        }))
        .unwrap()
    }

    #[test]
    fn only_a_budget_allowing_no_disruption_of_a_pod_the_drain_evicts_blocks() {
        let budgets = [budget("pg", "pg", Some(0)), budget("web", "web", Some(1)), budget("new", "new", None)];
        assert_eq!(
            blocking(&[pod("web-0", "web", "Running"), pod("pg-0", "pg", "Running")], &budgets).as_deref(),
            Some("PDB db/pg allows no disruption of pod db/pg-0")
        );
        // A budget that allows one, one not computed yet, a pending or finished pod: nothing blocks.
        assert_eq!(blocking(&[pod("web-0", "web", "Running"), pod("new-0", "new", "Running")], &budgets), None);
        assert_eq!(blocking(&[pod("pg-0", "pg", "Pending"), pod("pg-1", "pg", "Succeeded")], &budgets), None);
    }
}
