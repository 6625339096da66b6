//! Do not disrupt (issue 33): a node that runs a pod annotated `update.edgeless.systems/do-not-disrupt: "true"`
//! (or Karpenter's `karpenter.sh/do-not-disrupt: "true"`, for users coming from Karpenter), or whose Node carries
//! one of those annotations itself, is never disrupted by a rollout: it is held back with the reason
//! `DoNotDisrupt`, naming the pod or the annotation, and starts once they are gone.
//!
//! # Guarantees
//! - **The Node's annotation** is read with the rest of the Node ([`marked`], in the node's view): the planner
//!   holds the node before it starts, like any reason of its own.
//! - **A pod's annotation** is looked up just before a node starts ([`PodHolds::check`]: the pods the API server
//!   lists on the node by `spec.nodeName`, read right before the write that starts it): a node that runs such a
//!   pod is not started, and it is held back ([`PodHolds::holding`]), so the slot goes to the next node at once.
//!   Every [`RECHECK`] its pods are looked at again ([`PodHolds::recheck_due`], before a plan): it stays held
//!   without a break while the pod runs (so its hold is reported once), and is released when the pod is gone. A
//!   failed lookup starts nothing and releases nothing (fail closed).
//! - **Never evicted**: a pod scheduled onto the node between that look and the cordon is left in place by the
//!   drain, which waits for it to go (naming it) and never forces it; the drain timeout then decides as for any
//!   pod that does not leave.
//! - A finished pod (`Succeeded` or `Failed`) holds nothing: it no longer runs.
//!
//! Only the value `"true"` counts, as Karpenter reads `karpenter.sh/do-not-disrupt`.

use crate::drain::filters::pod_name;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// The annotation of ours, on a pod or a Node.
pub const ANNOTATION: &str = shared::protocol::keys::DO_NOT_DISRUPT;
/// Karpenter's, read the same way.
pub const KARPENTER_ANNOTATION: &str = "karpenter.sh/do-not-disrupt";
/// How long a node found running such a pod is held before it is looked at again.
pub const RECHECK: Duration = Duration::from_secs(30);

/// The do-not-disrupt annotation set to `"true"` among `annotations`, if one is.
pub fn marked(annotations: Option<&BTreeMap<String, String>>) -> Option<&'static str> {
    let annotations = annotations?;
    [ANNOTATION, KARPENTER_ANNOTATION].into_iter().find(|key| annotations.get(*key).is_some_and(|v| v == "true"))
}

/// Why `pod` keeps its node from being disrupted, if it does: it is annotated and has not finished.
pub fn pod_holds(pod: &Pod) -> Option<String> {
    let annotation = marked(pod.metadata.annotations.as_ref())?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    Some(format!("pod {} is annotated {annotation}=true", pod_name(pod)))
}

/// The message of a node held for the Node's own annotation.
pub fn node_message(annotation: &str) -> String {
    format!("the Node is annotated {annotation}=true; it starts once the annotation is removed")
}

/// A lookup of a node's pods failed.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the pods of node {node} (or their workloads and disruption budgets) before it starts: {source}")]
pub struct LookupFailed {
    pub node: String,
    #[source]
    pub source: kube::Error,
}

/// What the look at a node's pods before it starts found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Look {
    /// A do-not-disrupt pod runs on it: it is held.
    pub hold: Option<String>,
    /// A PodDisruptionBudget allows no disruption of one of its pods now (`crate::budget_order`).
    pub budget: Option<String>,
    /// A workload of its pods is not whole again (`crate::settle`): it is held.
    pub settle: Option<crate::policy::Hold>,
}

/// The look at a node's pods just before it starts: the nodes found running a do-not-disrupt pod, each held and
/// looked at again every [`RECHECK`], and the nodes deferred for a budget ([`crate::budget_order`]).
pub struct PodHolds {
    client: kube::Client,
    pods: Api<Pod>,
    found: Mutex<HashMap<String, (String, Instant)>>,
    deferred: Mutex<HashMap<String, (String, Instant)>>,
    /// The nodes held for their workloads (`crate::settle`).
    settling: crate::settle::Settling,
}

impl PodHolds {
    pub fn new(client: kube::Client) -> Self {
        PodHolds {
            pods: Api::all(client.clone()),
            client,
            found: Mutex::default(),
            deferred: Mutex::default(),
            settling: crate::settle::Settling::default(),
        }
    }

    /// [`PodHolds::check`], and when nothing holds the node, the budgets of its pods' namespaces: whether one allows
    /// no disruption of a pod of it now. (Also before a node is staged ahead, so that the next node is staged in its
    /// place while the budget holds.) With `settle` (the rollout's `settleTimeout`, for a start that disrupts the
    /// node), whether the workloads of its pods and their budgets are whole (`crate::settle`): if not, it is held.
    pub async fn look(&self, node: &str, settle: Option<crate::settle::SettleFor<'_>>) -> Result<Look, LookupFailed> {
        let failed = |source| LookupFailed { node: node.to_owned(), source };
        let pods = self.pods_on(node).await?;
        if let Some(hold) = self.record(node, &pods) {
            return Ok(Look { hold: Some(hold), ..Look::default() });
        }
        let mut namespaces: Vec<String> = pods
            .iter()
            .filter(|p| crate::drain::filters::budgets_matter(p))
            .filter_map(|p| p.metadata.namespace.clone())
            .collect();
        namespaces.sort();
        namespaces.dedup();
        // One LIST per namespace, all at once (a node's pods span few namespaces).
        let lists = namespaces.iter().map(|namespace| {
            let api: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
                Api::namespaced(self.client.clone(), namespace);
            async move { api.list(&ListParams::default()).await }
        });
        let mut budgets = Vec::new();
        for list in futures::future::join_all(lists).await {
            budgets.extend(list.map_err(failed)?.items);
        }
        if let Some(settle) = settle {
            let workloads = crate::settle::read_workloads(&self.client, &pods).await.map_err(failed)?;
            match crate::settle::unsettled(&pods, &workloads, &budgets) {
                Some(why) => {
                    let hold = self.settling.hold(node, why, settle);
                    return Ok(Look { settle: Some(hold), ..Look::default() });
                }
                None => self.settling.release(node),
            }
        }
        Ok(Look { budget: crate::budget_order::blocking(&pods, &budgets), ..Look::default() })
    }

    /// The nodes held for their workloads (`crate::settle`), with their holds.
    pub fn settling(&self) -> HashMap<String, crate::policy::Hold> {
        self.settling.holding()
    }

    /// Defers `node` for `why` ([`crate::budget_order`]): true if it was not deferred already (it is not started
    /// now), false if it was (no other node took its slot: it starts).
    pub fn defer(&self, node: &str, why: String) -> bool {
        let now = Instant::now();
        let mut deferred = self.deferred.lock();
        if deferred.get(node).is_some_and(|(_, until)| *until > now) {
            return false;
        }
        deferred.insert(node.to_owned(), (why, now + crate::budget_order::DEFER));
        true
    }

    /// The nodes deferred now, with why (the others are forgotten).
    pub fn deferred(&self) -> HashMap<String, String> {
        let now = Instant::now();
        let mut deferred = self.deferred.lock();
        deferred.retain(|_, (_, until)| *until > now);
        deferred.iter().map(|(node, (why, _))| (node.clone(), why.clone())).collect()
    }

    async fn pods_on(&self, node: &str) -> Result<Vec<Pod>, LookupFailed> {
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let pods = self.pods.list(&params).await.map_err(|source| LookupFailed { node: node.to_owned(), source })?;
        Ok(pods.items)
    }

    /// Lists the pods on `node` and records what holds it, if anything does (forgetting an earlier finding
    /// otherwise). Returns the reason it may not be disrupted now, if there is one.
    pub async fn check(&self, node: &str) -> Result<Option<String>, LookupFailed> {
        let pods = self.pods_on(node).await?;
        Ok(self.record(node, &pods))
    }

    /// Records what of `pods` holds `node`, if anything does (forgetting an earlier finding otherwise).
    fn record(&self, node: &str, pods: &[Pod]) -> Option<String> {
        let mut holding: Vec<String> = pods.iter().filter_map(pod_holds).collect();
        holding.sort();
        let mut found = self.found.lock();
        if holding.is_empty() {
            found.remove(node);
            return None;
        }
        let more = if holding.len() > 1 { format!(" (and {} more)", holding.len() - 1) } else { String::new() };
        let message = format!(
            "{}{more}: the node is not disrupted while it runs; looked at again every {}s",
            holding[0],
            RECHECK.as_secs()
        );
        found.insert(node.to_owned(), (message.clone(), Instant::now() + RECHECK));
        Some(message)
    }

    /// Looks again at the pods of every held node whose [`RECHECK`] came: each stays held while such a pod runs
    /// (and when the look fails), and is released once none does.
    pub async fn recheck_due(&self) {
        let now = Instant::now();
        let due: Vec<String> =
            self.found.lock().iter().filter(|(_, (_, until))| *until <= now).map(|(n, _)| n.clone()).collect();
        let looks: Vec<_> = due.iter().map(|node| self.check(node)).collect();
        let limit = crate::executor::in_flight::REQUESTS_IN_FLIGHT;
        for (node, result) in due.iter().zip(crate::executor::in_flight::bounded(looks, limit).await) {
            if let Err(error) = result {
                tracing::warn!(%node, %error, "kept holding the node");
                if let Some((_, until)) = self.found.lock().get_mut(node) {
                    *until = Instant::now() + RECHECK;
                }
            }
        }
        // The nodes held for their workloads: looked at the same way (released once they are whole).
        let due = self.settling.due();
        let looks: Vec<_> = due
            .iter()
            .map(|(node, timeout, rollout)| {
                self.look(node, Some(crate::settle::SettleFor { timeout: *timeout, rollout }))
            })
            .collect();
        for ((node, ..), result) in due.iter().zip(crate::executor::in_flight::bounded(looks, limit).await) {
            match result {
                Err(error) => {
                    tracing::warn!(%node, %error, "kept holding the node for its workloads");
                    self.settling.keep(node);
                }
                // Held for a do-not-disrupt pod now: that hold names it.
                Ok(Look { hold: Some(_), .. }) => self.settling.release(node),
                Ok(_) => {}
            }
        }
    }

    /// The nodes held now, with the reason.
    pub fn holding(&self) -> HashMap<String, String> {
        self.found.lock().iter().map(|(node, (message, _))| (node.clone(), message.clone())).collect()
    }

    /// Ends the waits for workloads of the rollouts that are not `waiting` (`crate::settle::Settling::retain_rollouts`).
    pub fn retain_settling(&self, waiting: impl Fn(&str) -> bool) {
        self.settling.retain_rollouts(waiting);
    }

    /// Forgets the nodes that no longer exist.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.found.lock().retain(|node, _| exists(node));
        self.deferred.lock().retain(|node, _| exists(node));
        self.settling.retain(&exists);
    }

    /// When the first held node is due to be looked at again or the first deferral ends, if any.
    pub fn next_expiry(&self) -> Option<Instant> {
        let found = self.found.lock().values().map(|(_, until)| *until).min();
        let deferred = self.deferred.lock().values().map(|(_, until)| *until).min();
        [found, deferred, self.settling.next_expiry()].into_iter().flatten().min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(annotations: serde_json::Value, phase: &str) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "db-0", "namespace": "data", "annotations": annotations},
            "status": {"phase": phase}
        }))
        .unwrap()
    }

    #[test]
    fn only_the_value_true_of_either_annotation_holds_and_only_while_the_pod_has_not_finished() {
        let ours = json!({"update.edgeless.systems/do-not-disrupt": "true"});
        let karpenter = json!({"karpenter.sh/do-not-disrupt": "true"});
        assert_eq!(
            pod_holds(&pod(ours.clone(), "Running")).as_deref(),
            Some("pod data/db-0 is annotated update.edgeless.systems/do-not-disrupt=true")
        );
        assert_eq!(
            pod_holds(&pod(karpenter, "Pending")).as_deref(),
            Some("pod data/db-0 is annotated karpenter.sh/do-not-disrupt=true")
        );
        assert_eq!(pod_holds(&pod(ours.clone(), "Succeeded")), None);
        assert_eq!(pod_holds(&pod(ours, "Failed")), None);
        assert_eq!(pod_holds(&pod(json!({"update.edgeless.systems/do-not-disrupt": "false"}), "Running")), None);
        assert_eq!(pod_holds(&pod(json!({"update.edgeless.systems/do-not-disrupt": "True"}), "Running")), None);
        assert_eq!(pod_holds(&pod(json!({}), "Running")), None);
        let node: BTreeMap<String, String> = [("karpenter.sh/do-not-disrupt".into(), "true".into())].into();
        assert_eq!(marked(Some(&node)), Some(KARPENTER_ANNOTATION));
        assert_eq!(marked(None), None);
    }
}
