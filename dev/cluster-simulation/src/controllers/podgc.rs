//! The pod garbage collector's orphan sweep (upstream's `pkg/controller/podgc` `gcOrphaned`): pods bound to a node
//! that no longer exists are failed and deleted, as when a cloud instance and its Node are gone.
//!
//! # Guarantees
//! - A pod bound to a node missing from the cache is quarantined for `Timing::pod_gc_quarantine` (upstream: 40 s)
//!   from when this controller first saw it orphaned; then, if the node is still missing from the store (a live
//!   read, as upstream confirms with the API), a pod that is not terminal gets phase `Failed` and the condition
//!   `DisruptionTarget` (reason `DeletionByPodGC`), and is deleted with grace period 0 and a uid precondition.
//! - A node that comes back within the quarantine saves its pods.

use super::objects::PodInfo;
use super::queue::WorkQueue;
use super::{Informers, Outcome, Reconciler, SyncError, names};
use crate::apiserver::object::ObjectKey;
use crate::apiserver::store::{Patch, Store};
use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{DeleteParams, PatchParams, Preconditions};
use serde_json::json;
use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Starts the sweep: subscribes to the caches now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    quarantine: Duration,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    {
        let (queue, nodes) = (queue.clone(), informers.nodes.clone());
        informers.pods.subscribe(move |change| {
            let orphaned =
                change.new.as_ref().and_then(|pod| pod.node_name.as_ref()).is_some_and(|n| nodes.get(n).is_none());
            if orphaned {
                queue.add(change.object().meta.key.clone());
            }
        });
    }
    {
        let (queue, pods) = (queue.clone(), informers.pods.clone());
        informers.nodes.subscribe(move |change| {
            if change.new.is_none() {
                for pod in pods.on_node(&change.object().meta.name) {
                    queue.add(pod.meta.key.clone());
                }
            }
        });
    }
    let sweep = PodGc {
        store: store.with_identity("dev/pod-garbage-collector"),
        informers: informers.clone(),
        quarantine,
        orphaned_since: HashMap::new(),
    };
    super::worker(sweep, queue, store.controller_gate(names::POD_GARBAGE_COLLECTOR), informers, shutdown)
}

struct PodGc {
    store: Store,
    informers: Informers,
    quarantine: Duration,
    /// When each orphaned pod was first seen so.
    orphaned_since: HashMap<ObjectKey, Instant>,
}

impl PodGc {
    fn sweep(&mut self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let pod = self.informers.pods.get(key);
        let Some((pod, node)) = pod.as_ref().and_then(|p| p.node_name.clone().map(|n| (p, n))) else {
            self.orphaned_since.remove(key);
            return Ok(Outcome::Done);
        };
        if self.informers.nodes.get(&node).is_some() {
            self.orphaned_since.remove(key);
            return Ok(Outcome::Done);
        }
        let since = *self.orphaned_since.entry(key.clone()).or_insert_with(Instant::now);
        let due = since + self.quarantine;
        let now = Instant::now();
        if due > now {
            return Ok(Outcome::RequeueAfter(due - now));
        }
        if self.store.api::<Node>().get_opt(None, &node)?.is_some() {
            // The cache lags the store: the node is back.
            self.orphaned_since.remove(key);
            return Ok(Outcome::Done);
        }
        self.fail_and_delete(pod)?;
        self.orphaned_since.remove(key);
        Ok(Outcome::Done)
    }

    fn fail_and_delete(&self, pod: &PodInfo) -> Result<(), SyncError> {
        let pods = self.store.api::<Pod>();
        let namespace = pod.meta.namespace.as_deref();
        if !pod.phase.is_terminal() {
            let now = Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now());
            let patch = json!({"status": {"phase": "Failed", "conditions": [{
                "type": "DisruptionTarget", "status": "True", "reason": "DeletionByPodGC",
                "message": "PodGC: node no longer exists", "lastTransitionTime": now.to_string()}]}});
            match pods.patch_status(namespace, &pod.meta.name, &Patch::Strategic(patch), &PatchParams::default()) {
                Ok(_) => {}
                Err(error) if error.code == 404 => return Ok(()),
                Err(error) => return Err(error.into()),
            }
        }
        let params = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(pod.meta.uid.to_string()), resource_version: None }),
            ..DeleteParams::default()
        };
        match pods.delete(namespace, &pod.meta.name, &params) {
            Ok(_) => Ok(()),
            // Gone already, or replaced by a pod of the same name.
            Err(error) if error.code == 404 || error.code == 409 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }
}

impl Reconciler for PodGc {
    type Key = ObjectKey;

    async fn sync(&mut self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        self.sweep(key)
    }
}
