//! The ReplicaSet controller: keeps `spec.replicas` pods of each ReplicaSet, and its status.
//!
//! # Guarantees
//! - A ReplicaSet's pods are the pods it controls (controller reference with its uid); the active ones (neither
//!   terminal nor being deleted) are counted. Missing pods are created from the template with
//!   `generateName: <name>-`; surplus ones are deleted, unscheduled, pending and not-Ready ones first.
//! - An evicted or deleted pod is replaced at once, while it is still terminating (as upstream does).
//! - `status` (`replicas`, `fullyLabeledReplicas`, `readyReplicas`, `availableReplicas`, `observedGeneration`)
//!   is written through `/status` when it changes; `availableReplicas` honours `minReadySeconds`.
//! - A ReplicaSet being deleted is left alone (the garbage collector removes its pods).

use super::objects::{PodInfo, Typed};
use super::queue::WorkQueue;
use super::workload::{self, PodPlacement};
use super::{Informers, Outcome, READ_YOUR_WRITES, Reconciler, SyncError, names, rv_of};
use crate::apiserver::object::ObjectKey;
use crate::apiserver::store::{DeleteOutcome, Store};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{ReplicaSet, ReplicaSetStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Starts the controller: subscribes to the caches now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    super::queue_changes(&informers.replicasets, &queue);
    super::queue_controllers(&informers.pods, "ReplicaSet", &queue);
    let controller =
        ReplicaSetController { store: store.with_identity("dev/replicaset-controller"), informers: informers.clone() };
    super::worker(controller, queue, store.controller_gate(names::REPLICASET), informers, shutdown)
}

struct ReplicaSetController {
    store: Store,
    informers: Informers,
}

/// The status of a ReplicaSet over its pods, and how long until a Ready pod counts as available.
pub(crate) fn replicaset_status(
    rs: &Typed<ReplicaSet>,
    pods: &[Arc<PodInfo>],
    now: Timestamp,
) -> (ReplicaSetStatus, Option<Duration>) {
    let spec = rs.object.spec.as_ref();
    let min_ready = i64::from(spec.and_then(|s| s.min_ready_seconds).unwrap_or(0));
    let template_labels = spec.and_then(|s| s.template.as_ref()).and_then(|t| t.metadata.as_ref()?.labels.as_ref());
    let active: Vec<&Arc<PodInfo>> = pods.iter().filter(|p| p.is_active()).collect();
    let count = |f: &dyn Fn(&PodInfo) -> bool| active.iter().filter(|p| f(p)).count() as i32;
    let mut pending_availability: Option<Duration> = None;
    for pod in &active {
        if pod.is_ready()
            && !pod.is_available(min_ready, now)
            && let Some(since) = pod.ready_since
        {
            let due = Duration::from_secs((since.as_second() + min_ready - now.as_second()).max(1) as u64);
            pending_availability = Some(pending_availability.map_or(due, |d| d.min(due)));
        }
    }
    let old = rs.object.status.clone().unwrap_or_default();
    let status = ReplicaSetStatus {
        replicas: active.len() as i32,
        fully_labeled_replicas: Some(count(&|p| workload::fully_labeled(&p.meta, template_labels))),
        ready_replicas: Some(count(&|p| p.is_ready())),
        available_replicas: Some(count(&|p| p.is_available(min_ready, now))),
        observed_generation: Some(rs.meta.generation),
        terminating_replicas: old.terminating_replicas,
        conditions: old.conditions,
    };
    (status, pending_availability)
}

impl ReplicaSetController {
    /// Creates or deletes pods so that `desired` are active; returns the resourceVersion of the last write.
    fn scale(&self, rs: &Typed<ReplicaSet>, pods: &[Arc<PodInfo>], desired: usize) -> Result<u64, SyncError> {
        let mut active: Vec<Arc<PodInfo>> = pods.iter().filter(|p| p.is_active()).cloned().collect();
        let namespace = rs.meta.namespace.as_deref();
        let store = self.store.api::<Pod>();
        let mut last_rv = 0;
        if active.len() < desired {
            let Some(template) = rs.object.spec.as_ref().and_then(|s| s.template.as_ref()) else { return Ok(0) };
            for _ in active.len()..desired {
                let placement = PodPlacement {
                    name: None,
                    generate_name: Some(format!("{}-", rs.meta.name)),
                    extra_labels: Default::default(),
                    node_name: None,
                };
                let pod = workload::pod_from_template(
                    template,
                    workload::controller_ref("apps/v1", "ReplicaSet", &rs.meta),
                    placement,
                );
                let created = store.create(namespace, &pod, &PostParams::default())?;
                last_rv = rv_of(&created.metadata);
            }
        } else if active.len() > desired {
            workload::sort_for_deletion(&mut active);
            for pod in &active[..active.len() - desired] {
                match store.delete(namespace, &pod.meta.name, &DeleteParams::default()) {
                    Ok(DeleteOutcome::Gone(gone) | DeleteOutcome::Pending(gone)) => last_rv = rv_of(&gone.metadata),
                    Err(error) if error.code == 404 => {}
                    Err(error) => return Err(error.into()),
                }
            }
        }
        Ok(last_rv)
    }
}

impl Reconciler for ReplicaSetController {
    type Key = ObjectKey;

    async fn sync(&mut self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let Some(rs) = self.informers.replicasets.get(key) else { return Ok(Outcome::Done) };
        if rs.meta.is_deleting() {
            return Ok(Outcome::Done);
        }
        let owned = |informers: &Informers| -> Vec<Arc<PodInfo>> {
            informers
                .pods
                .owned_by(&rs.meta.uid)
                .into_iter()
                .filter(|p| p.meta.is_controlled_by(&rs.meta.uid))
                .collect()
        };
        let desired = rs.object.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1).max(0) as usize;
        let written = self.scale(&rs, &owned(&self.informers), desired)?;
        if written > 0 {
            self.informers.pods.wait_for_rv(written, READ_YOUR_WRITES).await;
        }
        let (status, pending) = replicaset_status(&rs, &owned(&self.informers), Timestamp::now());
        super::write_status(&self.store, &self.informers.replicasets, &rs, status).await?;
        Ok(pending.map_or(Outcome::Done, Outcome::RequeueAfter))
    }
}
