//! The scheduler: binds pending pods to nodes through the `binding` subresource.
//!
//! # Guarantees
//! - A pod is bound only to a node that is Ready, not cordoned (`spec.unschedulable`) and not being deleted,
//!   whose labels satisfy the pod's `nodeSelector` and whose `NoSchedule`/`NoExecute` taints the pod tolerates.
//! - Among those, the node with the fewest `PreferNoSchedule` taints the pod does not tolerate wins, as
//!   kube-scheduler's TaintToleration score ranks nodes (`pkg/scheduler/framework/plugins/tainttoleration/
//!   taint_toleration.go`, `countIntolerableTaintsPreferNoSchedule`: only tolerations with no effect or
//!   `PreferNoSchedule` count; its weight of 3 in the default profile outweighs the spreading scores here, which
//!   this scheduler simplifies to a pod count). Such a taint is soft: a node that carries it still takes pods when
//!   no other fits. Then the node with the fewest pods wins (ties by name): pods spread. Counts include the pods
//!   this scheduler bound that the cache does not show yet, so a burst of pods spreads too.
//! - Only pods of `default-scheduler` (or none named) that are unbound, not terminal and not being deleted are
//!   scheduled. DaemonSet pods come bound and are never seen here.
//! - A pod no node fits gets `PodScheduled=False` (reason `Unschedulable`) and is tried again when a node
//!   appears or changes.

use super::objects::{NodeInfo, PodInfo, Str, tolerates_all};
use super::queue::WorkQueue;
use super::{Informers, Outcome, Reconciler, SyncError, names};
use crate::apiserver::object::{ObjectKey, now_rfc3339};
use crate::apiserver::store::{Patch, Store};
use k8s_openapi::api::core::v1::Pod;
use kube::api::PatchParams;
use parking_lot::Mutex;
use serde_json::json;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The scheduler name this scheduler serves.
const SCHEDULER_NAME: &str = "default-scheduler";

/// Pods per node, kept from the pod cache plus this scheduler's own bindings.
#[derive(Default)]
struct Placement {
    /// Where each counted pod is.
    assigned: HashMap<ObjectKey, Str>,
    /// Pods per node.
    counts: HashMap<Str, u32>,
    /// Known nodes by (pods, name): the emptiest first.
    order: BTreeSet<(u32, Str)>,
    /// Known nodes.
    nodes: HashSet<Str>,
    /// Pods no node fitted.
    unschedulable: HashSet<ObjectKey>,
}

impl Placement {
    fn count(&self, node: &Str) -> u32 {
        self.counts.get(node).copied().unwrap_or(0)
    }

    fn shift(&mut self, node: &Str, up: bool) {
        let before = self.count(node);
        let after = if up { before + 1 } else { before.saturating_sub(1) };
        if after == 0 {
            self.counts.remove(node);
        } else {
            self.counts.insert(node.clone(), after);
        }
        if self.nodes.contains(node) {
            self.order.remove(&(before, node.clone()));
            self.order.insert((after, node.clone()));
        }
    }

    /// Records that `pod` is on `node` (or nowhere).
    fn place(&mut self, pod: &ObjectKey, node: Option<&Str>) {
        let previous = self.assigned.get(pod).cloned();
        if previous.as_ref() == node {
            return;
        }
        if let Some(previous) = previous {
            self.shift(&previous, false);
            self.assigned.remove(pod);
        }
        if let Some(node) = node {
            self.shift(node, true);
            self.assigned.insert(pod.clone(), node.clone());
        }
    }

    fn add_node(&mut self, node: &Str) {
        if self.nodes.insert(node.clone()) {
            self.order.insert((self.count(node), node.clone()));
        }
    }

    fn remove_node(&mut self, node: &Str) {
        if self.nodes.remove(node) {
            self.order.remove(&(self.count(node), node.clone()));
        }
    }
}

/// True when `pod` may run on `node`.
pub fn fits(pod: &PodInfo, node: &NodeInfo) -> bool {
    node.is_schedulable()
        && pod.scheduling.selects(&node.meta)
        && tolerates_all(&pod.scheduling.tolerations, &node.taints)
}

/// How many of `node`'s `PreferNoSchedule` taints `pod` does not tolerate, counting only its tolerations without
/// an effect or with `PreferNoSchedule` (upstream's `getAllTolerationPreferNoSchedule`).
fn intolerable_preferences(pod: &PodInfo, node: &NodeInfo) -> usize {
    let tolerations =
        pod.scheduling.tolerations.iter().filter(|t| t.effect.is_empty() || &*t.effect == "PreferNoSchedule");
    let tolerations: Vec<_> = tolerations.collect();
    node.taints
        .iter()
        .filter(|taint| &*taint.effect == "PreferNoSchedule")
        .filter(|taint| !tolerations.iter().any(|t| t.tolerates(taint)))
        .count()
}

fn wants_scheduling(pod: &PodInfo) -> bool {
    let name = &*pod.scheduling.scheduler_name;
    pod.node_name.is_none()
        && !pod.meta.is_deleting()
        && !pod.phase.is_terminal()
        && (name.is_empty() || name == SCHEDULER_NAME)
}

/// Starts the scheduler: subscribes to the caches now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    let placement = Arc::new(Mutex::new(Placement::default()));
    {
        let (queue, placement) = (queue.clone(), placement.clone());
        informers.pods.subscribe(move |change| {
            let pod = change.object();
            let counted = change.new.as_ref().filter(|p| !p.phase.is_terminal()).and_then(|p| p.node_name.as_ref());
            let mut placement = placement.lock();
            placement.place(&pod.meta.key, counted);
            if change.new.as_ref().is_some_and(|p| wants_scheduling(p)) {
                queue.add(pod.meta.key.clone());
            } else {
                placement.unschedulable.remove(&pod.meta.key);
            }
        });
    }
    {
        let (queue, placement) = (queue.clone(), placement.clone());
        informers.nodes.subscribe(move |change| {
            let mut placement = placement.lock();
            let name = &change.object().meta.name;
            match &change.new {
                Some(_) => placement.add_node(name),
                None => placement.remove_node(name),
            }
            let became_usable = match (&change.old, &change.new) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(old), Some(new)) => {
                    old.is_schedulable() != new.is_schedulable()
                        || !Arc::ptr_eq(&old.meta.labels, &new.meta.labels)
                        || !Arc::ptr_eq(&old.taints, &new.taints)
                }
            };
            if became_usable {
                for pod in placement.unschedulable.drain() {
                    queue.add(pod);
                }
            }
        });
    }
    let scheduler = Scheduler { store: store.with_identity("dev/scheduler"), informers: informers.clone(), placement };
    super::worker(scheduler, queue, store.controller_gate(names::SCHEDULER), informers, shutdown)
}

struct Scheduler {
    store: Store,
    informers: Informers,
    placement: Arc<Mutex<Placement>>,
}

impl Scheduler {
    /// The node `pod` fits on with the fewest `PreferNoSchedule` taints it does not tolerate, the emptiest of
    /// those.
    fn pick(&self, pod: &PodInfo) -> Option<Str> {
        let placement = self.placement.lock();
        let mut best: Option<(usize, &Str)> = None;
        for (_, name) in &placement.order {
            let Some(node) = self.informers.nodes.get(name) else { continue };
            if !fits(pod, &node) {
                continue;
            }
            let avoided = intolerable_preferences(pod, &node);
            if best.is_none_or(|(fewest, _)| avoided < fewest) {
                best = Some((avoided, name));
            }
            if avoided == 0 {
                break;
            }
        }
        best.map(|(_, name)| name.clone())
    }

    fn mark_unschedulable(&self, pod: &PodInfo) -> Result<(), SyncError> {
        self.placement.lock().unschedulable.insert(pod.meta.key.clone());
        if pod.unschedulable {
            return Ok(());
        }
        let nodes = self.informers.nodes.len();
        let condition = json!({"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
            "message": format!("0/{nodes} nodes are available: no node is Ready, uncordoned, selected by the \
                                pod's nodeSelector and without taints the pod does not tolerate."),
            "lastProbeTime": null, "lastTransitionTime": now_rfc3339()});
        let patch = Patch::Strategic(json!({"status": {"conditions": [condition]}}));
        match self.store.api::<Pod>().patch_status(
            pod.meta.namespace.as_deref(),
            &pod.meta.name,
            &patch,
            &PatchParams::default(),
        ) {
            Ok(_) => Ok(()),
            Err(error) if error.code == 404 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }
}

impl Reconciler for Scheduler {
    type Key = ObjectKey;

    async fn sync(&mut self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let Some(pod) = self.informers.pods.get(key) else { return Ok(Outcome::Done) };
        if !wants_scheduling(&pod) {
            return Ok(Outcome::Done);
        }
        let Some(node) = self.pick(&pod) else {
            self.mark_unschedulable(&pod)?;
            return Ok(Outcome::Done);
        };
        let namespace = pod.meta.namespace.as_deref().unwrap_or_default();
        match self.store.bind(namespace, &pod.meta.name, &node) {
            Ok(()) => {
                let mut placement = self.placement.lock();
                placement.place(key, Some(&node));
                placement.unschedulable.remove(key);
                Ok(Outcome::Done)
            }
            // Bound meanwhile, being deleted, or gone: nothing to do.
            Err(error) if error.code == 409 || error.code == 404 => Ok(Outcome::Done),
            Err(error) => Err(error.into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_follow_pods_moving_between_nodes() {
        let mut placement = Placement::default();
        let (a, b): (Str, Str) = (Arc::from("a"), Arc::from("b"));
        placement.add_node(&a);
        placement.add_node(&b);
        let pod = |n: &str| -> ObjectKey { Arc::from(n) };
        placement.place(&pod("p1"), Some(&a));
        placement.place(&pod("p2"), Some(&a));
        placement.place(&pod("p1"), Some(&a));
        assert_eq!(placement.order.iter().next().unwrap().1, b);
        placement.place(&pod("p3"), Some(&b));
        placement.place(&pod("p1"), None);
        assert_eq!((placement.count(&a), placement.count(&b)), (1, 1));
        placement.remove_node(&a);
        assert_eq!(placement.order.len(), 1);
        placement.place(&pod("p2"), None);
        assert_eq!(placement.count(&a), 0);
    }
}
