//! The disruption controller: keeps every PodDisruptionBudget's status as upstream's does (§4.3 of the API
//! semantics), so evictions answer as they would in a real cluster.
//!
//! # Guarantees
//! - A PDB is recomputed after any change of a pod its selector matches (before or after the change), of the PDB
//!   itself, or of the replica count of a Deployment, ReplicaSet or StatefulSet in its namespace; changes within
//!   the configured lag are computed together.
//! - The status is written through `/status` with the PDB's resourceVersion (a concurrent eviction makes the
//!   write conflict and the PDB is computed again), and only when it changes.
//! - When the status cannot be computed (a bad percentage, a pod whose controller has no known scale), the PDB
//!   gets `disruptionsAllowed: 0` and the condition reason `SyncFailed`, without a new `observedGeneration`.
//! - A disrupted pod that was not deleted is dropped from `disruptedPods` after [`math::DELETION_TIMEOUT`]: the
//!   PDB is computed again at that time.

pub mod math;

use super::informer::{Change, Informer};
use super::objects::{Meta, PodInfo, Str, Typed};
use super::queue::WorkQueue;
use super::{Informers, Outcome, Reconciler, SyncError, names};
use crate::apiserver::object::ObjectKey;
use crate::apiserver::selector::LabelSelector;
use crate::apiserver::selector::label::Requirement;
use crate::apiserver::store::Store;
use crate::timing::Timing;
use jiff::Timestamp;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use math::{Budget, Computed, PodHealth, Reason, SyncFailure};
use parking_lot::Mutex;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// When a PDB whose status could not be computed is tried again.
const SYNC_FAILED_RETRY: jiff::SignedDuration = jiff::SignedDuration::from_secs(2);

/// The type of the condition this controller keeps.
const DISRUPTION_ALLOWED: &str = "DisruptionAllowed";

/// Where a PDB's pods are found: by one `key=value` its selector requires, or by scanning its namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Lookup {
    Label(Option<Str>, Str, Str),
    Namespace(Option<Str>),
}

struct Entry {
    namespace: Option<Str>,
    selector: Option<LabelSelector>,
    lookup: Lookup,
}

/// The PDBs by what their selectors require, so that a pod change finds its PDBs without evaluating every
/// selector of the namespace.
#[derive(Default)]
struct PdbIndex {
    entries: HashMap<ObjectKey, Entry>,
    by_lookup: HashMap<Lookup, HashSet<ObjectKey>>,
    by_namespace: HashMap<Option<Str>, HashSet<ObjectKey>>,
}

fn selector_of(pdb: &PodDisruptionBudget) -> Option<LabelSelector> {
    // A missing selector matches nothing (policy/v1), and so does one that does not parse.
    let selector = pdb.spec.as_ref()?.selector.as_ref()?;
    LabelSelector::from_object(&serde_json::to_value(selector).ok()?).ok()
}

fn lookup_of(namespace: &Option<Str>, selector: Option<&LabelSelector>) -> Lookup {
    selector
        .and_then(|s| {
            s.requirements().iter().find_map(|r| match r {
                Requirement::In(key, values) if values.len() == 1 => {
                    Some(Lookup::Label(namespace.clone(), Arc::from(key.as_str()), Arc::from(values[0].as_str())))
                }
                _ => None,
            })
        })
        .unwrap_or_else(|| Lookup::Namespace(namespace.clone()))
}

fn unlink<K: Eq + std::hash::Hash>(map: &mut HashMap<K, HashSet<ObjectKey>>, at: K, key: &ObjectKey) {
    if let Some(keys) = map.get_mut(&at) {
        keys.remove(key);
        if keys.is_empty() {
            map.remove(&at);
        }
    }
}

fn matches(selector: &LabelSelector, meta: &Meta) -> bool {
    selector.matches(|key| meta.label(key))
}

impl PdbIndex {
    fn update(&mut self, change: &Change<Typed<PodDisruptionBudget>>) {
        let key = change.object().meta.key.clone();
        self.remove(&key);
        if let Some(pdb) = &change.new {
            let namespace = pdb.meta.namespace.clone();
            let selector = selector_of(&pdb.object);
            let lookup = lookup_of(&namespace, selector.as_ref());
            self.by_lookup.entry(lookup.clone()).or_default().insert(key.clone());
            self.by_namespace.entry(namespace.clone()).or_default().insert(key.clone());
            self.entries.insert(key, Entry { namespace, selector, lookup });
        }
    }

    fn remove(&mut self, key: &ObjectKey) {
        if let Some(entry) = self.entries.remove(key) {
            unlink(&mut self.by_lookup, entry.lookup, key);
            unlink(&mut self.by_namespace, entry.namespace, key);
        }
    }

    /// The PDBs whose selector matches a pod with this metadata.
    fn matching(&self, pod: &Meta, out: &mut HashSet<ObjectKey>) {
        let mut candidates: Vec<&ObjectKey> = Vec::new();
        for (key, value) in pod.labels.iter() {
            let at = Lookup::Label(pod.namespace.clone(), key.clone(), value.clone());
            candidates.extend(self.by_lookup.get(&at).into_iter().flatten());
        }
        candidates.extend(self.by_lookup.get(&Lookup::Namespace(pod.namespace.clone())).into_iter().flatten());
        for key in candidates {
            if self.entries.get(key).and_then(|e| e.selector.as_ref()).is_some_and(|s| matches(s, pod)) {
                out.insert(key.clone());
            }
        }
    }

    fn in_namespace(&self, namespace: &Option<Str>) -> Vec<ObjectKey> {
        self.by_namespace.get(namespace).map(|keys| keys.iter().cloned().collect()).unwrap_or_default()
    }
}

/// Starts the controller: subscribes to the caches now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    timing: &Timing,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<ObjectKey> = WorkQueue::new();
    let index = Arc::new(Mutex::new(PdbIndex::default()));
    let lag = timing.disruption_lag;
    {
        let (queue, index) = (queue.clone(), index.clone());
        informers.pdbs.subscribe(move |change| {
            index.lock().update(change);
            queue.add_after(change.object().meta.key.clone(), lag);
        });
    }
    {
        let (queue, index) = (queue.clone(), index.clone());
        informers.pods.subscribe(move |change| {
            let mut affected = HashSet::new();
            {
                let index = index.lock();
                for version in [&change.old, &change.new].into_iter().flatten() {
                    index.matching(&version.meta, &mut affected);
                }
            }
            for key in affected {
                queue.add_after(key, lag);
            }
        });
    }
    subscribe_scale(&informers.deployments, &queue, &index, lag, |d: &Deployment| d.spec.as_ref()?.replicas);
    subscribe_scale(&informers.replicasets, &queue, &index, lag, |r: &ReplicaSet| r.spec.as_ref()?.replicas);
    subscribe_scale(&informers.statefulsets, &queue, &index, lag, |s: &StatefulSet| s.spec.as_ref()?.replicas);
    let controller = DisruptionController {
        store: store.with_identity("dev/disruption-controller"),
        informers: informers.clone(),
        index,
    };
    super::worker(controller, queue, store.controller_gate(names::DISRUPTION), informers, shutdown)
}

/// Recomputes every PDB of a namespace when an owner's replica count changes (it is their expected count).
fn subscribe_scale<K: serde::de::DeserializeOwned + Send + Sync + 'static>(
    informer: &Informer<Typed<K>>,
    queue: &WorkQueue<ObjectKey>,
    index: &Arc<Mutex<PdbIndex>>,
    lag: Duration,
    replicas: fn(&K) -> Option<i32>,
) {
    let (queue, index) = (queue.clone(), index.clone());
    informer.subscribe(move |change| {
        let (Some(old), Some(new)) = (&change.old, &change.new) else { return };
        if replicas(&old.object) == replicas(&new.object) {
            return;
        }
        for key in index.lock().in_namespace(&new.meta.namespace) {
            queue.add_after(key, lag);
        }
    });
}

struct DisruptionController {
    store: Store,
    informers: Informers,
    index: Arc<Mutex<PdbIndex>>,
}

fn budget_of(pdb: &PodDisruptionBudget) -> Result<Budget, SyncFailure> {
    let Some(spec) = pdb.spec.as_ref() else { return Ok(Budget::Unset) };
    if let Some(max) = &spec.max_unavailable {
        return Ok(Budget::MaxUnavailable(math::Amount::parse(max)?));
    }
    if let Some(min) = &spec.min_available {
        return Ok(Budget::MinAvailable(math::Amount::parse(min)?));
    }
    Ok(Budget::Unset)
}

/// `now` at seconds precision, as `metav1.Time` stores it (so an unchanged status compares equal).
fn now_seconds() -> Timestamp {
    Timestamp::from_second(Timestamp::now().as_second()).unwrap_or_else(|_| Timestamp::now())
}

/// Upstream's `SetStatusCondition`: the transition time moves only when the status does.
fn set_condition(conditions: &mut Vec<Condition>, reason: Reason, message: String, observed: Option<i64>) {
    let now = Time(now_seconds());
    let status = reason.status().to_owned();
    match conditions.iter_mut().find(|c| c.type_ == DISRUPTION_ALLOWED) {
        Some(existing) => {
            if existing.status != status {
                existing.last_transition_time = now;
            }
            existing.status = status;
            existing.reason = reason.to_string();
            existing.message = message;
            existing.observed_generation = observed;
        }
        None => conditions.push(Condition {
            type_: DISRUPTION_ALLOWED.to_owned(),
            status,
            reason: reason.to_string(),
            message,
            observed_generation: observed,
            last_transition_time: now,
        }),
    }
}

impl DisruptionController {
    fn matched_pods(&self, key: &ObjectKey) -> Vec<Arc<PodInfo>> {
        let index = self.index.lock();
        let Some(entry) = index.entries.get(key) else { return Vec::new() };
        let Some(selector) = &entry.selector else { return Vec::new() };
        let pods = &self.informers.pods;
        match &entry.lookup {
            Lookup::Label(namespace, k, v) => pods
                .labelled(namespace.as_deref(), k, v)
                .into_iter()
                .filter(|pod| matches(selector, &pod.meta))
                .collect(),
            Lookup::Namespace(namespace) => {
                let mut found = Vec::new();
                pods.for_each(|pod| {
                    if pod.meta.namespace == *namespace && matches(selector, &pod.meta) {
                        found.push(pod.clone());
                    }
                });
                found
            }
        }
    }

    /// Upstream's `getExpectedScale`: the replicas of the distinct controllers of `pods` (the Deployment of a
    /// ReplicaSet that has one); pods without a controller are skipped.
    fn owners_scale(&self, pods: &[Arc<PodInfo>]) -> Result<i32, SyncFailure> {
        let mut seen: HashSet<Str> = HashSet::new();
        let mut scale: HashMap<Str, i32> = HashMap::new();
        for pod in pods {
            let Some(owner) = pod.meta.controller() else { continue };
            if !seen.insert(owner.uid.clone()) {
                continue;
            }
            let namespace = pod.meta.namespace.as_deref();
            let found = match (owner.group(), &*owner.kind) {
                ("apps", "ReplicaSet") => self.replicaset_scale(namespace, &owner.name, &owner.uid),
                ("apps", "StatefulSet") => self
                    .informers
                    .statefulsets
                    .get_named(namespace, &owner.name)
                    .filter(|s| s.meta.uid == owner.uid)
                    .map(|s| (s.meta.uid.clone(), s.object.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1))),
                ("apps", "Deployment") => self.deployment_scale(namespace, &owner.name, &owner.uid),
                _ => None,
            };
            let (uid, replicas) = found.ok_or_else(|| SyncFailure::NoController(pod.meta.name.to_string()))?;
            scale.insert(uid, replicas);
        }
        Ok(scale.values().sum())
    }

    fn deployment_scale(&self, namespace: Option<&str>, name: &str, uid: &str) -> Option<(Str, i32)> {
        let deployment = self.informers.deployments.get_named(namespace, name).filter(|d| &*d.meta.uid == uid)?;
        Some((deployment.meta.uid.clone(), deployment.object.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)))
    }

    fn replicaset_scale(&self, namespace: Option<&str>, name: &str, uid: &str) -> Option<(Str, i32)> {
        let rs = self.informers.replicasets.get_named(namespace, name).filter(|r| &*r.meta.uid == uid)?;
        if let Some(owner) = rs.meta.controller().filter(|o| o.group() == "apps" && &*o.kind == "Deployment")
            && let Some(found) = self.deployment_scale(namespace, &owner.name, &owner.uid)
        {
            return Some(found);
        }
        Some((rs.meta.uid.clone(), rs.object.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1)))
    }

    /// The status upstream would write, and when to look again.
    fn desired_status(
        &self,
        pdb: &Typed<PodDisruptionBudget>,
        pods: &[Arc<PodInfo>],
    ) -> (PodDisruptionBudgetStatus, Option<Timestamp>) {
        let old = pdb.object.status.clone().unwrap_or_default();
        let disrupted: BTreeMap<String, Timestamp> =
            old.disrupted_pods.iter().flatten().map(|(name, time)| (name.clone(), time.0)).collect();
        let health: Vec<PodHealth> = pods
            .iter()
            .map(|p| PodHealth { name: p.meta.name.to_string(), ready: p.ready, deleting: p.meta.is_deleting() })
            .collect();
        let computed = budget_of(&pdb.object)
            .and_then(|b| math::compute(b, &health, || self.owners_scale(pods), &disrupted, now_seconds()));
        let mut conditions = old.conditions.clone().unwrap_or_default();
        match computed {
            Ok(Computed {
                current_healthy,
                desired_healthy,
                expected_pods,
                disruptions_allowed,
                disrupted_pods,
                recheck_at,
            }) => {
                let observed = Some(pdb.meta.generation);
                set_condition(&mut conditions, Reason::for_allowed(disruptions_allowed), String::new(), observed);
                let status = PodDisruptionBudgetStatus {
                    current_healthy,
                    desired_healthy,
                    expected_pods,
                    disruptions_allowed,
                    // An empty map is omitted, as upstream's `omitempty` does.
                    disrupted_pods: (!disrupted_pods.is_empty())
                        .then(|| disrupted_pods.into_iter().map(|(n, t)| (n, Time(t))).collect()),
                    observed_generation: observed,
                    conditions: Some(conditions),
                };
                (status, recheck_at)
            }
            Err(failure) => {
                set_condition(&mut conditions, Reason::SyncFailed, failure.to_string(), old.observed_generation);
                let status = PodDisruptionBudgetStatus { disruptions_allowed: 0, conditions: Some(conditions), ..old };
                // A controller that was not in the cache yet may be there soon: look again, as upstream's
                // rate-limited requeue does.
                (status, Some(Timestamp::now() + SYNC_FAILED_RETRY))
            }
        }
    }
}

impl Reconciler for DisruptionController {
    type Key = ObjectKey;

    async fn sync(&mut self, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let Some(pdb) = self.informers.pdbs.get(key) else { return Ok(Outcome::Done) };
        let pods = self.matched_pods(key);
        let (status, recheck_at) = self.desired_status(&pdb, &pods);
        let outcome = match recheck_at {
            Some(at) => {
                let wait = at.duration_since(Timestamp::now()).max(jiff::SignedDuration::ZERO);
                Outcome::RequeueAfter(Duration::try_from(wait).unwrap_or(Duration::ZERO))
            }
            None => Outcome::Done,
        };
        super::write_status(&self.store, &self.informers.pdbs, &pdb, status).await?;
        Ok(outcome)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pdb(name: &str, selector: serde_json::Value) -> Change<Typed<PodDisruptionBudget>> {
        let value = json!({"metadata": {"name": name, "namespace": "demo"}, "spec": {"selector": selector}});
        let new = <Typed<PodDisruptionBudget> as super::super::objects::Cached>::parse(&value).unwrap();
        Change { old: None, new: Some(Arc::new(new)) }
    }

    fn pod_meta(labels: serde_json::Value) -> Meta {
        Meta::parse(&json!({"metadata": {"name": "p", "namespace": "demo", "labels": labels}})).unwrap()
    }

    #[test]
    fn a_pod_change_finds_exactly_the_pdbs_whose_selectors_match() {
        let mut index = PdbIndex::default();
        index.update(&pdb("web", json!({"matchLabels": {"app": "web"}})));
        index.update(&pdb("all", json!({})));
        index.update(&pdb(
            "tier",
            json!({"matchExpressions": [{"key": "tier", "operator": "In",
                                                                 "values": ["a", "b"]}]}),
        ));
        index.update(&pdb("none", json!(null)));
        let found = |index: &PdbIndex, labels| {
            let mut out = HashSet::new();
            index.matching(&pod_meta(labels), &mut out);
            let mut names: Vec<String> = out.iter().map(|k| k.to_string()).collect();
            names.sort();
            names
        };
        assert_eq!(found(&index, json!({"app": "web"})), vec!["demo/all", "demo/web"]);
        assert_eq!(found(&index, json!({"app": "db", "tier": "b"})), vec!["demo/all", "demo/tier"]);
        index.remove(&Arc::from("demo/all"));
        assert_eq!(found(&index, json!({"app": "db"})), Vec::<String>::new());
        assert!(index.in_namespace(&Some(Arc::from("demo"))).len() == 3);
    }

    #[tokio::test]
    async fn a_pdb_whose_pods_have_no_known_controller_fails_safe_and_is_looked_at_again() {
        use crate::controllers::objects::{Cached, PodInfo};
        let server = crate::apiserver::ApiServer::start(Default::default()).await.unwrap();
        let controller = DisruptionController {
            store: server.store(),
            informers: Informers::new(),
            index: Arc::new(Mutex::new(PdbIndex::default())),
        };
        let pdb = Typed::<PodDisruptionBudget>::parse(&json!({
            "metadata": {"name": "db", "namespace": "demo", "generation": 1},
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": {"app": "db"}}},
            "status": {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 1, "desiredHealthy": 0,
                       "expectedPods": 1}}))
        .unwrap();
        // Its StatefulSet is not (yet) in the cache.
        let pod = PodInfo::parse(&json!({"metadata": {"name": "db-0", "namespace": "demo", "labels": {"app": "db"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "u1",
                                 "controller": true}]},
            "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
        .unwrap();
        let (status, recheck) = controller.desired_status(&pdb, &[Arc::new(pod)]);
        assert_eq!(status.disruptions_allowed, 0);
        assert_eq!(status.observed_generation, Some(1));
        let condition = &status.conditions.unwrap()[0];
        assert_eq!((condition.reason.as_str(), condition.status.as_str()), ("SyncFailed", "False"));
        assert!(condition.message.contains("db-0"), "{}", condition.message);
        assert!(recheck.is_some(), "a failed sync is tried again");
        server.shutdown().await;
    }
}
