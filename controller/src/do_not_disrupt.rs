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
#[error("cannot list the pods of node {node} to look for do-not-disrupt pods: {source}")]
pub struct LookupFailed {
    pub node: String,
    #[source]
    pub source: kube::Error,
}

/// The nodes found running a do-not-disrupt pod, each held until [`RECHECK`] after it was found.
pub struct PodHolds {
    pods: Api<Pod>,
    found: Mutex<HashMap<String, (String, Instant)>>,
}

impl PodHolds {
    pub fn new(client: kube::Client) -> Self {
        PodHolds { pods: Api::all(client), found: Mutex::default() }
    }

    /// Lists the pods on `node` and records what holds it, if anything does (forgetting an earlier finding
    /// otherwise). Returns the reason it may not be disrupted now, if there is one.
    pub async fn check(&self, node: &str) -> Result<Option<String>, LookupFailed> {
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let pods = self.pods.list(&params).await.map_err(|source| LookupFailed { node: node.to_owned(), source })?;
        let mut holding: Vec<String> = pods.items.iter().filter_map(pod_holds).collect();
        holding.sort();
        let mut found = self.found.lock();
        if holding.is_empty() {
            found.remove(node);
            return Ok(None);
        }
        let more = if holding.len() > 1 { format!(" (and {} more)", holding.len() - 1) } else { String::new() };
        let message = format!(
            "{}{more}: the node is not disrupted while it runs; looked at again every {}s",
            holding[0],
            RECHECK.as_secs()
        );
        found.insert(node.to_owned(), (message.clone(), Instant::now() + RECHECK));
        Ok(Some(message))
    }

    /// Looks again at the pods of every held node whose [`RECHECK`] came: each stays held while such a pod runs
    /// (and when the look fails), and is released once none does.
    pub async fn recheck_due(&self) {
        let now = Instant::now();
        let due: Vec<String> =
            self.found.lock().iter().filter(|(_, (_, until))| *until <= now).map(|(n, _)| n.clone()).collect();
        let looks = due.iter().map(|node| self.check(node));
        for (node, result) in due.iter().zip(futures::future::join_all(looks).await) {
            if let Err(error) = result {
                tracing::warn!(%node, %error, "kept holding the node");
                if let Some((_, until)) = self.found.lock().get_mut(node) {
                    *until = Instant::now() + RECHECK;
                }
            }
        }
    }

    /// The nodes held now, with the reason.
    pub fn holding(&self) -> HashMap<String, String> {
        self.found.lock().iter().map(|(node, (message, _))| (node.clone(), message.clone())).collect()
    }

    /// Forgets the nodes that no longer exist.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.found.lock().retain(|node, _| exists(node));
    }

    /// When the first held node is due to be looked at again, if any node is held.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.found.lock().values().map(|(_, until)| *until).min()
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
