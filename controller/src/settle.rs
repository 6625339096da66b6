//! Workloads settled before the next node (issue 33, `spec.rollout.settleWorkloads`): a node is not disrupted
//! while a workload one of its pods belongs to is not whole, nor while a PodDisruptionBudget that covers one of its
//! pods is not healthy. After a node is drained and rebooted, the pods evicted from it come back elsewhere; the
//! next node that runs a pod of the same workloads waits until they are back (every replica available, every
//! budget at its desired healthy count), so storage replicas, quorum members and the like are never taken down
//! while they are still rebuilding from the last node. Nodes that run none of those workloads are not held.
//!
//! # What counts
//! - The pods a drain of the node would evict ([`crate::drain::filters::budgets_matter`]: running, not a DaemonSet's,
//!   not a mirror pod), by their controller: a Deployment (through its ReplicaSet), a StatefulSet, a ReplicaSet no
//!   Deployment owns. Other owners (Jobs, custom controllers) are not read.
//! - Whole: a Deployment's or ReplicaSet's `status.availableReplicas`, a StatefulSet's `status.availableReplicas`
//!   (its `readyReplicas` where the field is absent) at least `spec.replicas` (default 1), as `kubectl rollout
//!   status` reads them; a status older than the spec (`observedGeneration` < `generation`) is not whole yet.
//! - A PodDisruptionBudget is healthy when `status.currentHealthy >= status.desiredHealthy` for the current
//!   generation (the disruption controller's own figures).
//!
//! # Guarantees
//! - Looked at just before the node would start, staged ahead or drained (with the do-not-disrupt look,
//!   `crate::do_not_disrupt`: a node waiting for its workloads is not staged, so its staging slot goes to a node
//!   that runs none of them), and every [`RECHECK`] while held; a read that fails starts nothing (fail closed).
//! - The node's hold names the first workload that is not whole with its counts
//!   (`WaitingForWorkloads: statefulset/db/postgres 2/3 ready`). Past `settleTimeout` of holding, it says so
//!   (`SettleTimedOut`, a Warning Event) and the node stays held: a degraded workload is never disrupted further.
//! - A wait belongs to its rollout (the NodeVersion and its target, [`key`]): when the NodeVersion is paused, given
//!   another target or deleted, the wait ends (`crate::reconciler` calls [`Settling::retain_rollouts`] before each
//!   plan): its hold leaves the status, its node is no longer looked at, its `settleTimeout` never fires later, and
//!   a wait of the resumed or new target starts afresh. A waiting node is never cordoned nor labelled, so nothing
//!   is left on it (`dev/tests/it/settle_midwait.rs`).

use crate::policy::Hold;
use crate::reason::Reason;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::Api;
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap};
use std::time::Duration;
use tokio::time::Instant;

/// How long a node held for its workloads waits before it is looked at again.
pub const RECHECK: Duration = Duration::from_secs(5);

/// The rollout a node waits for its workloads for: its `settleTimeout`, and its [`key`] (the NodeVersion and its
/// target): a wait is the rollout's own, it ends with it.
#[derive(Debug, Clone, Copy)]
pub struct SettleFor<'a> {
    pub timeout: Duration,
    pub rollout: &'a str,
}

/// The key of the rollout of the NodeVersion with `uid` to `target`: a wait for workloads belongs to it, and
/// ends when the NodeVersion is deleted, paused or given another target ([`Settling::retain_rollouts`]).
pub fn key(uid: &str, target: &str) -> String {
    format!("{uid}/{target}")
}

/// The nodes held for their workloads: for which rollout, since when (for `settleTimeout`), why, and when each is
/// looked at again.
#[derive(Debug, Default)]
pub struct Settling {
    held: Mutex<HashMap<String, Held>>,
}

#[derive(Debug, Clone)]
struct Held {
    why: String,
    since: Instant,
    until: Instant,
    timeout: Duration,
    rollout: String,
}

impl Settling {
    /// Holds `node` for `why` in the rollout `settle` names (since its first hold in that rollout, kept while it
    /// stays held), to be looked at again in [`RECHECK`]; its hold as the status names it.
    pub fn hold(&self, node: &str, why: String, settle: SettleFor<'_>) -> Hold {
        let now = Instant::now();
        let mut held = self.held.lock();
        // A wait of another rollout (a target since changed) does not count towards this one's settleTimeout.
        let since = held.get(node).filter(|h| h.rollout == settle.rollout).map_or(now, |h| h.since);
        let entry = Held { why, since, until: now + RECHECK, timeout: settle.timeout, rollout: settle.rollout.into() };
        let hold = entry.hold(now);
        held.insert(node.to_owned(), entry);
        hold
    }

    /// Ends the waits of the rollouts that are not `waiting` (by [`key`]): a NodeVersion deleted, paused, given
    /// another target or no longer settling. Such a wait's hold leaves the status, and its `settleTimeout` never
    /// fires later; a wait of the rollout again starts afresh.
    pub fn retain_rollouts(&self, waiting: impl Fn(&str) -> bool) {
        self.held.lock().retain(|_, h| waiting(&h.rollout));
    }

    /// Releases `node`: the workloads of its pods are whole.
    pub fn release(&self, node: &str) {
        self.held.lock().remove(node);
    }

    /// The nodes held now, with their holds.
    pub fn holding(&self) -> HashMap<String, Hold> {
        let now = Instant::now();
        self.held.lock().iter().map(|(node, h)| (node.clone(), h.hold(now))).collect()
    }

    /// The held nodes due to be looked at again, with their `settleTimeout` and rollout.
    pub fn due(&self) -> Vec<(String, Duration, String)> {
        let now = Instant::now();
        let held = self.held.lock();
        held.iter().filter(|(_, h)| h.until <= now).map(|(n, h)| (n.clone(), h.timeout, h.rollout.clone())).collect()
    }

    /// Keeps a node held whose look failed, looked at again in [`RECHECK`].
    pub fn keep(&self, node: &str) {
        if let Some(h) = self.held.lock().get_mut(node) {
            h.until = Instant::now() + RECHECK;
        }
    }

    /// When the first held node is looked at again, or its `settleTimeout` passes.
    pub fn next_expiry(&self) -> Option<Instant> {
        let held = self.held.lock();
        held.values()
            .flat_map(|h| [Some(h.until), (h.since.elapsed() < h.timeout).then_some(h.since + h.timeout)])
            .flatten()
            .min()
    }

    /// Forgets the nodes that no longer exist.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.held.lock().retain(|node, _| exists(node));
    }
}

impl Held {
    fn hold(&self, now: Instant) -> Hold {
        let waited = now.saturating_duration_since(self.since);
        if waited >= self.timeout {
            let message = format!(
                "{}: the workloads of its pods are not whole {}s after the node's turn came (settleTimeout {}s); the \
                 node stays held, it is not disrupted while they are degraded",
                self.why,
                waited.as_secs(),
                self.timeout.as_secs()
            );
            Hold::new(Reason::SettleTimedOut, message)
        } else {
            let message = format!(
                "{}: the node is not disrupted until the workloads of its pods are whole again; looked at again every \
                 {}s",
                self.why,
                RECHECK.as_secs()
            );
            Hold::new(Reason::WaitingForWorkloads, message)
        }
    }
}

/// A workload a pod belongs to.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct WorkloadRef {
    /// `deployment`, `statefulset` or `replicaset`.
    pub kind: &'static str,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for WorkloadRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.kind, self.namespace, self.name)
    }
}

/// A workload's counts as its status gives them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    /// Replicas available (ready for `minReadySeconds`).
    pub available: i32,
    /// Replicas wanted (`spec.replicas`).
    pub wanted: i32,
    /// The status describes the current spec.
    pub observed: bool,
}

impl Counts {
    /// The counts of a workload from its `spec.replicas` (default 1), its status's available replicas and
    /// `observedGeneration`, and its `metadata.generation`.
    fn of(replicas: Option<i32>, available: Option<i32>, observed: Option<i64>, generation: Option<i64>) -> Counts {
        Counts {
            available: available.unwrap_or(0),
            wanted: replicas.unwrap_or(1),
            observed: observed.unwrap_or(0) >= generation.unwrap_or(0),
        }
    }

    fn whole(&self) -> bool {
        self.observed && self.available >= self.wanted
    }
}

/// The controller a pod's owner reference names, as far as the pod tells it: a StatefulSet or a ReplicaSet
/// (whose own owner, a Deployment, is read from the ReplicaSet).
pub fn direct_owner(pod: &Pod) -> Option<WorkloadRef> {
    let owner = pod.metadata.owner_references.as_ref()?.iter().find(|r| r.controller == Some(true))?;
    let kind = match (owner.api_version.as_str(), owner.kind.as_str()) {
        ("apps/v1", "StatefulSet") => "statefulset",
        ("apps/v1", "ReplicaSet") => "replicaset",
        _ => return None,
    };
    Some(WorkloadRef { kind, namespace: pod.metadata.namespace.clone()?, name: owner.name.clone() })
}

/// Why the node that runs `pods` may not be disrupted now, if it may not: the first of its pods' workloads (by
/// `workloads`, the counts of each workload read, by the pod's direct owner: a ReplicaSet's Deployment in its
/// place) that is not whole, else the first budget among `budgets` that selects one of its pods and is not
/// healthy. Pure.
pub fn unsettled(
    pods: &[Pod],
    workloads: &BTreeMap<WorkloadRef, (WorkloadRef, Counts)>,
    budgets: &[PodDisruptionBudget],
) -> Option<String> {
    let moving: Vec<&Pod> = pods.iter().filter(|p| crate::drain::filters::budgets_matter(p)).collect();
    let mut owners: Vec<&(WorkloadRef, Counts)> =
        moving.iter().filter_map(|p| workloads.get(&direct_owner(p)?)).collect();
    owners.sort_by(|a, b| a.0.cmp(&b.0));
    owners.dedup_by(|a, b| a.0 == b.0);
    if let Some((workload, counts)) = owners.iter().find(|(_, c)| !c.whole()) {
        let detail = if counts.observed {
            format!("{}/{} ready", counts.available, counts.wanted)
        } else {
            "its status does not describe its current spec yet".to_owned()
        };
        return Some(format!("{workload} {detail}"));
    }
    let mut names: Vec<String> = Vec::new();
    for pod in &moving {
        for name in crate::drain::filters::budgets_selecting(budgets, pod) {
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let Some(budget) = budgets.iter().find(|b| {
                b.metadata.name.as_deref() == Some(&name) && b.metadata.namespace.as_deref() == Some(&namespace)
            }) else {
                continue;
            };
            if let Some(why) = budget_unhealthy(budget) {
                names.push(format!("PodDisruptionBudget {namespace}/{name} {why}"));
            }
        }
    }
    names.sort();
    names.into_iter().next()
}

/// Why `budget` is not healthy, if it is not.
fn budget_unhealthy(budget: &PodDisruptionBudget) -> Option<String> {
    let Some(status) = &budget.status else { return Some("has no status yet".to_owned()) };
    let current = status.observed_generation.unwrap_or(0) >= budget.metadata.generation.unwrap_or(0);
    if !current {
        return Some("has a status older than its spec".to_owned());
    }
    (status.current_healthy < status.desired_healthy)
        .then(|| format!("{}/{} healthy", status.current_healthy, status.desired_healthy))
}

fn deployment_counts(d: &Deployment) -> Counts {
    let status = d.status.as_ref();
    Counts::of(
        d.spec.as_ref().and_then(|s| s.replicas),
        status.and_then(|s| s.available_replicas),
        status.and_then(|s| s.observed_generation),
        d.metadata.generation,
    )
}

fn stateful_set_counts(s: &StatefulSet) -> Counts {
    let status = s.status.as_ref();
    Counts::of(
        s.spec.as_ref().and_then(|s| s.replicas),
        status.and_then(|s| s.available_replicas.or(s.ready_replicas)),
        status.and_then(|s| s.observed_generation),
        s.metadata.generation,
    )
}

fn replica_set_counts(r: &ReplicaSet) -> Counts {
    let status = r.status.as_ref();
    Counts::of(
        r.spec.as_ref().and_then(|s| s.replicas),
        status.and_then(|s| s.available_replicas),
        status.and_then(|s| s.observed_generation),
        r.metadata.generation,
    )
}

/// The nodes that would wait for their workloads now, with why (`update-operator plan`, read only): every pod of the
/// cluster read in pages, those a drain would evict kept by node (their owners, labels and phase only), each
/// workload read once, and the budgets among `budgets`.
pub async fn unsettled_nodes(
    client: &kube::Client,
    budgets: &[PodDisruptionBudget],
) -> Result<BTreeMap<String, String>, kube::Error> {
    let api = Api::<Pod>::all(client.clone());
    let mut params = kube::api::ListParams::default().limit(500);
    let mut by_node: BTreeMap<String, Vec<Pod>> = BTreeMap::new();
    loop {
        let page = api.list(&params).await?;
        for pod in page.items {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) else { continue };
            if !crate::drain::filters::budgets_matter(&pod) {
                continue;
            }
            let covered = !crate::drain::filters::budgets_selecting(budgets, &pod).is_empty();
            if direct_owner(&pod).is_none() && !covered {
                continue;
            }
            let light = Pod {
                metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                    name: pod.metadata.name,
                    namespace: pod.metadata.namespace,
                    labels: pod.metadata.labels,
                    owner_references: pod.metadata.owner_references,
                    ..Default::default()
                },
                status: pod
                    .status
                    .map(|s| k8s_openapi::api::core::v1::PodStatus { phase: s.phase, ..Default::default() }),
                spec: None,
            };
            by_node.entry(node).or_default().push(light);
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => params = params.continue_token(&token),
            None => break,
        }
    }
    let all: Vec<Pod> = by_node.values().flatten().cloned().collect();
    let workloads = read_workloads(client, &all).await?;
    Ok(by_node.into_iter().filter_map(|(node, pods)| Some((node, unsettled(&pods, &workloads, budgets)?))).collect())
}

/// Reads the workloads of `pods` (those a drain would evict): each pod's direct owner, a ReplicaSet's Deployment
/// in its place. A workload gone is left out (its pods are orphans: nothing to wait for).
pub async fn read_workloads(
    client: &kube::Client,
    pods: &[Pod],
) -> Result<BTreeMap<WorkloadRef, (WorkloadRef, Counts)>, kube::Error> {
    let mut owners: Vec<WorkloadRef> =
        pods.iter().filter(|p| crate::drain::filters::budgets_matter(p)).filter_map(direct_owner).collect();
    owners.sort();
    owners.dedup();
    let mut read = BTreeMap::new();
    for owner in owners {
        let found = match owner.kind {
            "statefulset" => Api::<StatefulSet>::namespaced(client.clone(), &owner.namespace)
                .get_opt(&owner.name)
                .await?
                .map(|s| (owner.clone(), stateful_set_counts(&s))),
            _ => {
                let Some(rs) =
                    Api::<ReplicaSet>::namespaced(client.clone(), &owner.namespace).get_opt(&owner.name).await?
                else {
                    continue;
                };
                let deployment = rs
                    .metadata
                    .owner_references
                    .as_ref()
                    .and_then(|r| r.iter().find(|r| r.controller == Some(true) && r.kind == "Deployment"));
                match deployment {
                    Some(d) => Api::<Deployment>::namespaced(client.clone(), &owner.namespace)
                        .get_opt(&d.name)
                        .await?
                        .map(|dep| {
                            let workload = WorkloadRef {
                                kind: "deployment",
                                namespace: owner.namespace.clone(),
                                name: d.name.clone(),
                            };
                            (workload, deployment_counts(&dep))
                        }),
                    None => Some((owner.clone(), replica_set_counts(&rs))),
                }
            }
        };
        if let Some(found) = found {
            read.insert(owner, found);
        }
    }
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(name: &str, owner: (&str, &str)) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "db", "labels": {"app": "pg"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": owner.0, "name": owner.1, "uid": "u",
                                     "controller": true}]},
            "spec": {"containers": [{"name": "c"}]},
            "status": {"phase": "Running"}
        }))
        .unwrap()
    }

    fn workload(kind: &'static str, name: &str) -> WorkloadRef {
        WorkloadRef { kind, namespace: "db".into(), name: name.into() }
    }

    fn counts(available: i32, wanted: i32) -> Counts {
        Counts { available, wanted, observed: true }
    }

    fn budget(current: i32, desired: i32) -> PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": "pg", "namespace": "db", "generation": 1},
            "spec": {"selector": {"matchLabels": {"app": "pg"}}, "minAvailable": 2},
            "status": {"currentHealthy": current, "desiredHealthy": desired, "disruptionsAllowed": 0,
                       "expectedPods": 3, "observedGeneration": 1}
        }))
        .unwrap()
    }

    #[test]
    fn a_node_waits_while_a_workload_of_its_pods_is_not_whole() {
        let pods = [pod("postgres-0", ("StatefulSet", "postgres")), pod("web-1", ("ReplicaSet", "web-5d8"))];
        let mut workloads = BTreeMap::new();
        workloads.insert(workload("statefulset", "postgres"), (workload("statefulset", "postgres"), counts(2, 3)));
        workloads.insert(workload("replicaset", "web-5d8"), (workload("deployment", "web"), counts(2, 2)));
        assert_eq!(unsettled(&pods, &workloads, &[]).as_deref(), Some("statefulset/db/postgres 2/3 ready"));
        // Whole again: nothing holds it.
        workloads.insert(workload("statefulset", "postgres"), (workload("statefulset", "postgres"), counts(3, 3)));
        assert_eq!(unsettled(&pods, &workloads, &[]), None);
        // A status that does not describe the current spec is not whole.
        let stale = Counts { observed: false, ..counts(3, 3) };
        workloads.insert(workload("replicaset", "web-5d8"), (workload("deployment", "web"), stale));
        let why = unsettled(&pods, &workloads, &[]).unwrap();
        assert!(why.starts_with("deployment/db/web its status"), "{why}");
    }

    #[test]
    fn a_budget_covering_one_of_its_pods_must_be_healthy() {
        let pods = [pod("postgres-0", ("StatefulSet", "postgres"))];
        let workloads = BTreeMap::new();
        assert_eq!(
            unsettled(&pods, &workloads, &[budget(1, 2)]).as_deref(),
            Some("PodDisruptionBudget db/pg 1/2 healthy")
        );
        assert_eq!(unsettled(&pods, &workloads, &[budget(2, 2)]), None);
    }

    const MINUTE: SettleFor<'static> = SettleFor { timeout: Duration::from_secs(60), rollout: "uid-1/v2" };

    #[tokio::test(start_paused = true)]
    async fn a_node_held_past_its_settle_timeout_says_so_and_stays_held() {
        let settling = Settling::default();
        let hold = settling.hold("w1", "statefulset/db/postgres 2/3 ready".into(), MINUTE);
        assert_eq!(hold.reason, Reason::WaitingForWorkloads);
        assert!(hold.message.starts_with("statefulset/db/postgres 2/3 ready: "), "{}", hold.message);
        assert!(settling.due().is_empty());
        tokio::time::advance(RECHECK).await;
        assert_eq!(settling.due(), vec![("w1".to_owned(), Duration::from_secs(60), "uid-1/v2".to_owned())]);
        // Held again and again: the time counts from the first hold.
        tokio::time::advance(Duration::from_secs(56)).await;
        let hold = settling.hold("w1", "statefulset/db/postgres 1/3 ready".into(), MINUTE);
        assert_eq!(hold.reason, Reason::SettleTimedOut);
        assert!(hold.message.contains("settleTimeout 60s"), "{}", hold.message);
        assert_eq!(settling.holding()["w1"].reason, Reason::SettleTimedOut);
        settling.release("w1");
        assert!(settling.holding().is_empty());
        // Held anew: a fresh clock.
        assert_eq!(settling.hold("w1", "x".into(), MINUTE).reason, Reason::WaitingForWorkloads);
    }

    #[tokio::test(start_paused = true)]
    async fn a_wait_ends_with_its_rollout_and_another_rollouts_wait_starts_afresh() {
        let settling = Settling::default();
        settling.hold("w1", "x".into(), MINUTE);
        settling.hold("w2", "y".into(), SettleFor { rollout: "uid-2/v9", ..MINUTE });
        tokio::time::advance(Duration::from_secs(61)).await;
        // The NodeVersion given another target: its node's wait for the new one starts now, not timed out.
        let retargeted = SettleFor { rollout: "uid-1/v3", ..MINUTE };
        assert_eq!(settling.hold("w1", "x".into(), retargeted).reason, Reason::WaitingForWorkloads);
        // A rollout paused or deleted: its waits end (no hold left, nothing looked at again, no timeout later).
        settling.retain_rollouts(|rollout| rollout == "uid-1/v3");
        assert_eq!(settling.holding().keys().collect::<Vec<_>>(), ["w1"]);
        tokio::time::advance(Duration::from_secs(61)).await;
        assert_eq!(settling.due().len(), 1);
        assert_eq!(
            settling.hold("w2", "y".into(), SettleFor { rollout: "uid-2/v9", ..MINUTE }).reason,
            Reason::WaitingForWorkloads
        );
    }

    #[test]
    fn pods_a_drain_leaves_and_other_owners_hold_nothing() {
        let mut finished = pod("postgres-0", ("StatefulSet", "postgres"));
        finished.status.as_mut().unwrap().phase = Some("Succeeded".into());
        let daemon = pod("agent-x", ("DaemonSet", "agent"));
        let job = pod("backup-1", ("Job", "backup"));
        let mut workloads = BTreeMap::new();
        workloads.insert(workload("statefulset", "postgres"), (workload("statefulset", "postgres"), counts(0, 3)));
        assert_eq!(unsettled(&[finished, daemon.clone(), job.clone()], &workloads, &[]), None);
        assert_eq!(direct_owner(&daemon), None);
        assert_eq!(direct_owner(&job), None);
    }
}
