//! The DaemonSet controller: one pod on every node whose labels match the template's `nodeSelector` and whose
//! taints the pod tolerates.
//!
//! # Guarantees
//! - Pods are created bound to their node (`spec.nodeName`), named `<daemonset>-<random>`, labelled
//!   `controller-revision-hash` and `pod-template-generation`, with upstream's default DaemonSet tolerations
//!   (not-ready, unreachable, pressure conditions, unschedulable): cordoned nodes keep their pod.
//! - A node with a pod being deleted gets its new pod once the old one is gone; failed pods are replaced;
//!   duplicates (the newest first) and pods on nodes that no longer qualify or exist are deleted.
//! - `RollingUpdate` replaces pods of an older template revision while at most `maxUnavailable` nodes lack an
//!   available pod (not-Ready old pods go first); `OnDelete` leaves them.
//! - Status (`desiredNumberScheduled`, `currentNumberScheduled`, `numberMisscheduled`, `numberReady`,
//!   `numberAvailable`, `numberUnavailable`, `updatedNumberScheduled`, `observedGeneration`) is written through
//!   `/status` when it changes.
//! - Node changes wake the DaemonSets only when the node appears, goes, or changes labels or taints (not on
//!   heartbeats).

use super::disruption::math::Amount;
use super::objects::{NodeInfo, PodInfo, PodPhase, Toleration, Typed, tolerates_all};
use super::queue::WorkQueue;
use super::workload::{self, PodPlacement};
use super::{Informers, Outcome, READ_YOUR_WRITES, Reconciler, SyncError, names, rv_of};
use crate::apiserver::object::ObjectKey;
use crate::apiserver::store::{DeleteOutcome, Store};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{DaemonSet, DaemonSetStatus};
use k8s_openapi::api::core::v1::{Pod, PodTemplateSpec};
use kube::api::{DeleteParams, PostParams};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The label with a pod's template revision.
const REVISION_LABEL: &str = "controller-revision-hash";
/// The label with the DaemonSet generation a pod was made for.
const GENERATION_LABEL: &str = "pod-template-generation";

/// Upstream's `AddOrUpdateDaemonPodTolerations` (without `network-unavailable`, which only host-network pods
/// get).
const DEFAULT_TOLERATIONS: [(&str, &str); 6] = [
    ("node.kubernetes.io/not-ready", "NoExecute"),
    ("node.kubernetes.io/unreachable", "NoExecute"),
    ("node.kubernetes.io/disk-pressure", "NoSchedule"),
    ("node.kubernetes.io/memory-pressure", "NoSchedule"),
    ("node.kubernetes.io/pid-pressure", "NoSchedule"),
    ("node.kubernetes.io/unschedulable", "NoSchedule"),
];

/// Starts the controller: subscribes to the caches now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    super::queue_changes(&informers.daemonsets, &queue);
    super::queue_controllers(&informers.pods, "DaemonSet", &queue);
    {
        let (queue, daemonsets) = (queue.clone(), informers.daemonsets.clone());
        informers.nodes.subscribe(move |change| {
            let relevant = match (&change.old, &change.new) {
                (Some(old), Some(new)) => {
                    !Arc::ptr_eq(&old.meta.labels, &new.meta.labels)
                        || !Arc::ptr_eq(&old.taints, &new.taints)
                        || old.meta.is_deleting() != new.meta.is_deleting()
                }
                _ => true,
            };
            if relevant {
                daemonsets.for_each(|ds| queue.add(ds.meta.key.clone()));
            }
        });
    }
    let controller =
        DaemonSetController { store: store.with_identity("dev/daemonset-controller"), informers: informers.clone() };
    super::worker(controller, queue, store.controller_gate(names::DAEMONSET), informers, shutdown)
}

struct DaemonSetController {
    store: Store,
    informers: Informers,
}

/// The template with the default DaemonSet tolerations added.
fn with_default_tolerations(template: &PodTemplateSpec) -> PodTemplateSpec {
    let mut template = template.clone();
    let spec = template.spec.get_or_insert_with(Default::default);
    let tolerations = spec.tolerations.get_or_insert_with(Vec::new);
    for (key, effect) in DEFAULT_TOLERATIONS {
        let present = tolerations.iter().any(|t| {
            t.key.as_deref() == Some(key)
                && t.effect.as_deref() == Some(effect)
                && t.operator.as_deref() == Some("Exists")
        });
        if !present {
            tolerations.push(k8s_openapi::api::core::v1::Toleration {
                key: Some(key.to_owned()),
                operator: Some("Exists".to_owned()),
                effect: Some(effect.to_owned()),
                ..Default::default()
            });
        }
    }
    template
}

/// True when a pod of `template` belongs on `node` (upstream `NodeShouldRunDaemonPod`, without affinity).
fn should_run(template: &PodTemplateSpec, tolerations: &[Toleration], node: &NodeInfo) -> bool {
    if node.meta.is_deleting() {
        return false;
    }
    let selector = template.spec.as_ref().and_then(|s| s.node_selector.as_ref());
    let selected = selector.into_iter().flatten().all(|(k, v)| node.meta.label(k) == Some(v.as_str()));
    selected && tolerates_all(tolerations, &node.taints)
}

fn tolerations_of(template: &PodTemplateSpec) -> Vec<Toleration> {
    template
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .map(|t| Toleration {
            key: Arc::from(t.key.as_deref().unwrap_or_default()),
            operator: Arc::from(t.operator.as_deref().unwrap_or_default()),
            value: Arc::from(t.value.as_deref().unwrap_or_default()),
            effect: Arc::from(t.effect.as_deref().unwrap_or_default()),
        })
        .collect()
}

impl DaemonSetController {
    fn create(
        &self,
        ds: &Typed<DaemonSet>,
        template: &PodTemplateSpec,
        node: &str,
        revision: &str,
    ) -> Result<u64, SyncError> {
        let placement = PodPlacement {
            name: None,
            generate_name: Some(format!("{}-", ds.meta.name)),
            extra_labels: BTreeMap::from([
                (REVISION_LABEL.to_owned(), revision.to_owned()),
                (GENERATION_LABEL.to_owned(), ds.meta.generation.to_string()),
            ]),
            node_name: Some(node.to_owned()),
        };
        let pod = workload::pod_from_template(
            template,
            workload::controller_ref("apps/v1", "DaemonSet", &ds.meta),
            placement,
        );
        let created = self.store.api::<Pod>().create(ds.meta.namespace.as_deref(), &pod, &PostParams::default())?;
        Ok(rv_of(&created.metadata))
    }

    fn delete(&self, pod: &PodInfo) -> Result<u64, SyncError> {
        match self.store.api::<Pod>().delete(pod.meta.namespace.as_deref(), &pod.meta.name, &DeleteParams::default()) {
            Ok(DeleteOutcome::Gone(pod) | DeleteOutcome::Pending(pod)) => Ok(rv_of(&pod.metadata)),
            Err(error) if error.code == 404 => Ok(0),
            Err(error) => Err(error.into()),
        }
    }
}

impl Reconciler for DaemonSetController {
    type Key = ObjectKey;

    async fn sync(&mut self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let Some(ds) = self.informers.daemonsets.get(key) else { return Ok(Outcome::Done) };
        if ds.meta.is_deleting() {
            return Ok(Outcome::Done);
        }
        let Some(spec) = ds.object.spec.as_ref() else { return Ok(Outcome::Done) };
        let template = with_default_tolerations(&spec.template);
        let tolerations = tolerations_of(&template);
        let revision = workload::template_hash(&spec.template, 0);
        let min_ready = i64::from(spec.min_ready_seconds.unwrap_or(0));
        let now = Timestamp::now();
        let mut by_node: HashMap<Arc<str>, Vec<Arc<PodInfo>>> = HashMap::new();
        let mut unbound = Vec::new();
        for pod in self.informers.pods.owned_by(&ds.meta.uid) {
            if !pod.meta.is_controlled_by(&ds.meta.uid) {
                continue;
            }
            match pod.node_name.clone() {
                Some(node) => by_node.entry(node).or_default().push(pod),
                None => unbound.push(pod),
            }
        }
        let nodes = self.informers.nodes.list();
        let mut last_write = 0;
        let mut outdated: Vec<Arc<PodInfo>> = Vec::new();
        let (mut desired, mut current, mut misscheduled, mut ready, mut available, mut updated) = (0, 0, 0, 0, 0, 0);
        for node in &nodes {
            let mut pods = by_node.remove(&node.meta.name).unwrap_or_default();
            if !should_run(&template, &tolerations, node) {
                for pod in pods.iter().filter(|p| !p.meta.is_deleting()) {
                    misscheduled += 1;
                    last_write = last_write.max(self.delete(pod)?);
                }
                continue;
            }
            desired += 1;
            for pod in pods.iter().filter(|p| p.phase == PodPhase::Failed && !p.meta.is_deleting()) {
                last_write = last_write.max(self.delete(pod)?);
            }
            pods.retain(|p| p.phase != PodPhase::Failed);
            let terminating = pods.iter().any(|p| p.meta.is_deleting());
            let mut running: Vec<Arc<PodInfo>> = pods.into_iter().filter(|p| !p.meta.is_deleting()).collect();
            running.sort_by_key(|p| (p.meta.created, p.meta.name.clone()));
            for extra in running.iter().skip(1) {
                last_write = last_write.max(self.delete(extra)?);
            }
            match running.first() {
                None if !terminating => {
                    last_write = last_write.max(self.create(&ds, &template, &node.meta.name, &revision)?)
                }
                None => {}
                Some(pod) => {
                    current += 1;
                    ready += i32::from(pod.is_ready());
                    available += i32::from(pod.is_available(min_ready, now));
                    if pod.meta.label(REVISION_LABEL) == Some(revision.as_str()) {
                        updated += 1;
                    } else {
                        outdated.push(pod.clone());
                    }
                }
            }
        }
        for pod in by_node.into_values().flatten().chain(unbound).filter(|p| !p.meta.is_deleting()) {
            misscheduled += 1;
            last_write = last_write.max(self.delete(&pod)?);
        }
        let rolling = spec.update_strategy.as_ref().is_none_or(|s| s.type_.as_deref() != Some("OnDelete"));
        if rolling && !outdated.is_empty() {
            let max_unavailable = spec
                .update_strategy
                .as_ref()
                .and_then(|s| s.rolling_update.as_ref())
                .and_then(|r| r.max_unavailable.as_ref())
                .and_then(|m| Amount::parse(m).ok())
                .unwrap_or(Amount::Count(1))
                .scaled(desired, true)
                .max(1);
            // Old pods that are not available cost nothing to replace; then as many as the budget allows.
            outdated.sort_by_key(|p| p.is_available(min_ready, now));
            let mut unavailable = desired - available;
            for pod in outdated {
                let costs = pod.is_available(min_ready, now);
                if costs && unavailable >= max_unavailable {
                    break;
                }
                last_write = last_write.max(self.delete(&pod)?);
                unavailable += i32::from(costs);
            }
        }
        if last_write > 0 {
            self.informers.pods.wait_for_rv(last_write, READ_YOUR_WRITES).await;
        }
        let status = DaemonSetStatus {
            desired_number_scheduled: desired,
            current_number_scheduled: current,
            number_misscheduled: misscheduled,
            number_ready: ready,
            number_available: Some(available),
            number_unavailable: Some((desired - available).max(0)),
            updated_number_scheduled: Some(updated),
            observed_generation: Some(ds.meta.generation),
            collision_count: ds.object.status.as_ref().and_then(|s| s.collision_count),
            conditions: ds.object.status.as_ref().and_then(|s| s.conditions.clone()),
        };
        super::write_status(&self.store, &self.informers.daemonsets, &ds, status).await?;
        Ok(Outcome::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::objects::Cached;
    use serde_json::json;

    fn template(spec: serde_json::Value) -> PodTemplateSpec {
        serde_json::from_value(json!({"spec": spec})).unwrap()
    }

    fn node(labels: serde_json::Value, taints: serde_json::Value) -> NodeInfo {
        NodeInfo::parse(&json!({"metadata": {"name": "n", "labels": labels}, "spec": {"taints": taints}})).unwrap()
    }

    #[test]
    fn daemon_pods_go_where_the_selector_and_taints_allow() {
        let control_plane = json!([{"key": "node-role.kubernetes.io/control-plane", "effect": "NoSchedule"}]);
        let plain = with_default_tolerations(&template(json!({"containers": []})));
        assert!(should_run(&plain, &tolerations_of(&plain), &node(json!({}), json!([]))));
        assert!(!should_run(&plain, &tolerations_of(&plain), &node(json!({}), control_plane.clone())));
        let tolerant = with_default_tolerations(&template(json!({"containers": [], "tolerations": [
            {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists", "effect": "NoSchedule"}]})));
        assert!(should_run(&tolerant, &tolerations_of(&tolerant), &node(json!({}), control_plane)));
        let cordoned = json!([{"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"}]);
        assert!(should_run(&plain, &tolerations_of(&plain), &node(json!({}), cordoned)));
        let selective = with_default_tolerations(&template(json!({"containers": [], "nodeSelector": {"disk": "ssd"}})));
        assert!(should_run(&selective, &tolerations_of(&selective), &node(json!({"disk": "ssd"}), json!([]))));
        assert!(!should_run(&selective, &tolerations_of(&selective), &node(json!({"disk": "hdd"}), json!([]))));
    }
}
