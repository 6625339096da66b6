//! The StatefulSet controller: pods `<name>-0` … `<name>-(replicas-1)`, each recreated under its own name once
//! its predecessor is gone.
//!
//! # Guarantees
//! - Pods carry the template's labels plus `statefulset.kubernetes.io/pod-name`, `apps.kubernetes.io/pod-index`
//!   and `controller-revision-hash: <name>-<template hash>`, and `spec.hostname` (and `spec.subdomain` from
//!   `serviceName`).
//! - `OrderedReady` (the default) creates ordinal n only when every lower ordinal is Running and Ready, and
//!   removes surplus pods highest ordinal first, one at a time, only while the others are Ready; `Parallel`
//!   creates and removes all at once.
//! - A pod being deleted (an eviction, a drain) is recreated with the same name after it is gone; failed pods are
//!   deleted and recreated.
//! - `RollingUpdate` replaces pods of an older template revision from the highest ordinal down to `partition`,
//!   one at a time, while every pod is Ready; `OnDelete` leaves them.
//! - Status (`replicas`, `readyReplicas`, `availableReplicas`, `currentReplicas`, `updatedReplicas`, the
//!   revisions, `observedGeneration`) is written through `/status` when it changes.
//!
//! Not simulated: PersistentVolumeClaims of `volumeClaimTemplates`, ControllerRevisions, pod adoption.

use super::objects::{PodInfo, PodPhase, Typed};
use super::queue::WorkQueue;
use super::workload::{self, PodPlacement};
use super::{Informers, Outcome, READ_YOUR_WRITES, Reconciler, SyncError, names, rv_of};
use crate::apiserver::object::ObjectKey;
use crate::apiserver::store::{DeleteOutcome, Store};
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{StatefulSet, StatefulSetStatus};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, PostParams};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The label with a pod's revision.
pub const REVISION_LABEL: &str = "controller-revision-hash";
/// The label with a pod's own name.
const POD_NAME_LABEL: &str = "statefulset.kubernetes.io/pod-name";
/// The label with a pod's ordinal.
const POD_INDEX_LABEL: &str = "apps.kubernetes.io/pod-index";

/// Starts the controller: subscribes to the caches now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    super::queue_changes(&informers.statefulsets, &queue);
    super::queue_controllers(&informers.pods, "StatefulSet", &queue);
    let controller = StatefulSetController {
        store: store.with_identity("dev/statefulset-controller"),
        informers: informers.clone(),
    };
    super::worker(controller, queue, store.controller_gate(names::STATEFULSET), informers, shutdown)
}

struct StatefulSetController {
    store: Store,
    informers: Informers,
}

/// The ordinal of a pod named `<set>-<n>`.
fn ordinal(set: &str, pod: &str) -> Option<usize> {
    let digits = pod.strip_prefix(set)?.strip_prefix('-')?;
    if digits.is_empty() || (digits.len() > 1 && digits.starts_with('0')) {
        return None;
    }
    digits.parse().ok()
}

/// What to do next with one StatefulSet.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    Create(usize),
    Delete(String),
    Wait,
}

/// The steps of one pass (upstream's `updateStatefulSet`, simplified): create missing ordinals, delete failed
/// and surplus pods, then roll one outdated pod. `pods` maps ordinals to pods of this set.
fn plan(
    replicas: usize,
    parallel: bool,
    partition: Option<usize>,
    revision: &str,
    pods: &BTreeMap<usize, Arc<PodInfo>>,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let healthy = |pod: &PodInfo| pod.phase == PodPhase::Running && pod.is_ready();
    for n in 0..replicas {
        match pods.get(&n) {
            None => {
                steps.push(Step::Create(n));
                if !parallel {
                    return steps;
                }
            }
            Some(pod) if pod.meta.is_deleting() => {
                if !parallel {
                    steps.push(Step::Wait);
                    return steps;
                }
            }
            Some(pod) if pod.phase == PodPhase::Failed || pod.phase == PodPhase::Succeeded => {
                steps.push(Step::Delete(pod.meta.name.to_string()));
                if !parallel {
                    return steps;
                }
            }
            Some(pod) if !parallel && !healthy(pod) => {
                steps.push(Step::Wait);
                return steps;
            }
            Some(_) => {}
        }
    }
    let surplus: Vec<&Arc<PodInfo>> = pods.range(replicas..).map(|(_, p)| p).rev().collect();
    for pod in surplus {
        if pod.meta.is_deleting() {
            if !parallel {
                return steps;
            }
            continue;
        }
        steps.push(Step::Delete(pod.meta.name.to_string()));
        if !parallel {
            return steps;
        }
    }
    if !steps.is_empty() {
        return steps;
    }
    let Some(partition) = partition else { return steps };
    let all_healthy = (0..replicas).all(|n| pods.get(&n).is_some_and(|p| healthy(p)));
    if !all_healthy {
        return steps;
    }
    let outdated = (partition..replicas)
        .rev()
        .filter_map(|n| pods.get(&n))
        .find(|pod| pod.meta.label(REVISION_LABEL) != Some(revision));
    if let Some(pod) = outdated {
        steps.push(Step::Delete(pod.meta.name.to_string()));
    }
    steps
}

impl StatefulSetController {
    fn create(&self, set: &Typed<StatefulSet>, n: usize, revision: &str) -> Result<u64, SyncError> {
        let Some(spec) = set.object.spec.as_ref() else { return Ok(0) };
        let name = format!("{}-{n}", set.meta.name);
        let mut template = spec.template.clone();
        if let Some(pod_spec) = template.spec.as_mut() {
            pod_spec.hostname = Some(name.clone());
            if let Some(service) = spec.service_name.as_ref().filter(|s| !s.is_empty()) {
                pod_spec.subdomain = Some(service.clone());
            }
        }
        let placement = PodPlacement {
            name: Some(name.clone()),
            generate_name: None,
            extra_labels: BTreeMap::from([
                (POD_NAME_LABEL.to_owned(), name),
                (POD_INDEX_LABEL.to_owned(), n.to_string()),
                (REVISION_LABEL.to_owned(), revision.to_owned()),
            ]),
            node_name: None,
        };
        let pod = workload::pod_from_template(
            &template,
            workload::controller_ref("apps/v1", "StatefulSet", &set.meta),
            placement,
        );
        match self.store.api::<Pod>().create(set.meta.namespace.as_deref(), &pod, &PostParams::default()) {
            Ok(created) => Ok(rv_of(&created.metadata)),
            // The previous pod of this ordinal is still there (the cache has not seen it go): try again later.
            Err(error) if error.code == 409 => Ok(0),
            Err(error) => Err(error.into()),
        }
    }

    fn delete(&self, set: &Typed<StatefulSet>, name: &str) -> Result<u64, SyncError> {
        match self.store.api::<Pod>().delete(set.meta.namespace.as_deref(), name, &DeleteParams::default()) {
            Ok(DeleteOutcome::Gone(pod) | DeleteOutcome::Pending(pod)) => Ok(rv_of(&pod.metadata)),
            Err(error) if error.code == 404 => Ok(0),
            Err(error) => Err(error.into()),
        }
    }

    fn status(
        &self,
        set: &Typed<StatefulSet>,
        pods: &BTreeMap<usize, Arc<PodInfo>>,
        revision: &str,
    ) -> StatefulSetStatus {
        let min_ready = i64::from(set.object.spec.as_ref().and_then(|s| s.min_ready_seconds).unwrap_or(0));
        let now = Timestamp::now();
        let active: Vec<&Arc<PodInfo>> = pods.values().filter(|p| p.is_active()).collect();
        let count = |f: &dyn Fn(&PodInfo) -> bool| active.iter().filter(|p| f(p)).count() as i32;
        let old = set.object.status.clone().unwrap_or_default();
        let updated = count(&|p| p.meta.label(REVISION_LABEL) == Some(revision));
        let replicas = active.len() as i32;
        let current_revision = match old.current_revision.clone() {
            Some(current) if updated < replicas => current,
            _ => revision.to_owned(),
        };
        StatefulSetStatus {
            observed_generation: Some(set.meta.generation),
            replicas,
            ready_replicas: Some(count(&|p| p.is_ready())),
            available_replicas: Some(count(&|p| p.is_available(min_ready, now))),
            current_replicas: Some(count(&|p| p.meta.label(REVISION_LABEL) == Some(current_revision.as_str()))),
            updated_replicas: Some(updated),
            current_revision: Some(current_revision),
            update_revision: Some(revision.to_owned()),
            collision_count: old.collision_count.or(Some(0)),
            conditions: old.conditions,
        }
    }
}

impl Reconciler for StatefulSetController {
    type Key = ObjectKey;

    async fn sync(&mut self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let Some(set) = self.informers.statefulsets.get(key) else { return Ok(Outcome::Done) };
        if set.meta.is_deleting() {
            return Ok(Outcome::Done);
        }
        let Some(spec) = set.object.spec.as_ref() else { return Ok(Outcome::Done) };
        let revision = format!("{}-{}", set.meta.name, workload::template_hash(&spec.template, 0));
        let owned = |informers: &Informers| -> BTreeMap<usize, Arc<PodInfo>> {
            let mut by_ordinal: HashMap<usize, Arc<PodInfo>> = HashMap::new();
            for pod in informers.pods.owned_by(&set.meta.uid) {
                if pod.meta.is_controlled_by(&set.meta.uid)
                    && let Some(n) = ordinal(&set.meta.name, &pod.meta.name)
                {
                    by_ordinal.insert(n, pod);
                }
            }
            by_ordinal.into_iter().collect()
        };
        let replicas = spec.replicas.unwrap_or(1).max(0) as usize;
        let parallel = spec.pod_management_policy.as_deref() == Some("Parallel");
        let strategy = spec.update_strategy.as_ref();
        let partition = match strategy.and_then(|s| s.type_.as_deref()) {
            Some("OnDelete") => None,
            _ => {
                Some(strategy.and_then(|s| s.rolling_update.as_ref()).and_then(|r| r.partition).unwrap_or(0).max(0)
                    as usize)
            }
        };
        let mut last_write = 0;
        for step in plan(replicas, parallel, partition, &revision, &owned(&self.informers)) {
            let written = match step {
                Step::Create(n) => self.create(&set, n, &revision)?,
                Step::Delete(name) => self.delete(&set, &name)?,
                Step::Wait => 0,
            };
            last_write = last_write.max(written);
        }
        if last_write > 0 {
            self.informers.pods.wait_for_rv(last_write, READ_YOUR_WRITES).await;
        }
        let status = self.status(&set, &owned(&self.informers), &revision);
        super::write_status(&self.store, &self.informers.statefulsets, &set, status).await?;
        Ok(Outcome::Done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controllers::objects::Cached;
    use serde_json::json;

    fn pod(name: &str, phase: &str, ready: bool, deleting: bool, revision: &str) -> Arc<PodInfo> {
        let mut value = json!({"metadata": {"name": name, "labels": {REVISION_LABEL: revision}},
            "status": {"phase": phase, "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
        if deleting {
            value["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        }
        Arc::new(PodInfo::parse(&value).unwrap())
    }

    fn pods(list: Vec<(usize, Arc<PodInfo>)>) -> BTreeMap<usize, Arc<PodInfo>> {
        list.into_iter().collect()
    }

    #[test]
    fn ordinals_are_read_from_pod_names() {
        assert_eq!(ordinal("db", "db-0"), Some(0));
        assert_eq!(ordinal("db", "db-12"), Some(12));
        assert_eq!(ordinal("db", "db-01"), None);
        assert_eq!(ordinal("db", "db-x"), None);
        assert_eq!(ordinal("db", "dbx-1"), None);
        assert_eq!(ordinal("db", "db-"), None);
    }

    #[test]
    fn ordered_ready_creates_one_ordinal_at_a_time() {
        assert_eq!(plan(3, false, Some(0), "r1", &pods(vec![])), vec![Step::Create(0)]);
        let one = pods(vec![(0, pod("db-0", "Pending", false, false, "r1"))]);
        assert_eq!(plan(3, false, Some(0), "r1", &one), vec![Step::Wait]);
        let ready = pods(vec![(0, pod("db-0", "Running", true, false, "r1"))]);
        assert_eq!(plan(3, false, Some(0), "r1", &ready), vec![Step::Create(1)]);
        assert_eq!(
            plan(3, true, Some(0), "r1", &pods(vec![])),
            vec![Step::Create(0), Step::Create(1), Step::Create(2)]
        );
    }

    #[test]
    fn a_deleted_pod_is_recreated_only_once_it_is_gone() {
        let terminating =
            pods(vec![(0, pod("db-0", "Running", true, false, "r1")), (1, pod("db-1", "Running", true, true, "r1"))]);
        assert_eq!(plan(2, false, Some(0), "r1", &terminating), vec![Step::Wait]);
        let gone = pods(vec![(0, pod("db-0", "Running", true, false, "r1"))]);
        assert_eq!(plan(2, false, Some(0), "r1", &gone), vec![Step::Create(1)]);
    }

    #[test]
    fn surplus_pods_go_highest_first_and_outdated_ones_roll_from_the_top() {
        let three = pods(vec![
            (0, pod("db-0", "Running", true, false, "r1")),
            (1, pod("db-1", "Running", true, false, "r1")),
            (2, pod("db-2", "Running", true, false, "r1")),
        ]);
        assert_eq!(plan(1, false, Some(0), "r1", &three), vec![Step::Delete("db-2".into())]);
        assert_eq!(plan(3, false, Some(0), "r2", &three), vec![Step::Delete("db-2".into())]);
        assert_eq!(plan(3, false, Some(3), "r2", &three), vec![]);
        assert_eq!(plan(3, false, None, "r2", &three), vec![]);
    }
}
