//! The garbage collector: ownerReference cascades, as upstream's does for background, foreground and orphan
//! deletion.
//!
//! # Guarantees
//! - A dependent whose every owner is gone (no object of that kind, name and uid) is deleted; references to
//!   owners that are gone are removed while another owner remains. The decision is taken on the dependent as
//!   the store holds it (a live read), never on a cached version alone, and the delete carries the uid and
//!   resourceVersion of that read as preconditions: a dependent whose references changed meanwhile (an orphaning
//!   owner removed itself) is looked at again, not deleted.
//! - An owner being deleted with the `orphan` finalizer loses its references from every dependent the store
//!   held when its deletion was seen (the caches are brought up to the store first), then the finalizer.
//! - An owner being deleted with `foregroundDeletion` keeps the finalizer while any dependent whose reference
//!   to it has `blockOwnerDeletion: true` exists (confirmed on caches brought up to the store). Those blocking
//!   dependents are deleted: in the foreground themselves when they have dependents of their own, so a
//!   Deployment goes after its ReplicaSets, which go after their pods. Dependents that do not block are deleted
//!   once the owner is gone.
//! - Dependents and owners are the cached kinds (pods, nodes, PDBs, Deployments, ReplicaSets, StatefulSets,
//!   DaemonSets, Jobs, Leases, ControllerRevisions, ConfigMaps, Secrets, ServiceAccounts, Services); an owner of
//!   another kind is looked up in the store (custom resources included). An owner whose kind the server does not
//!   serve is taken to exist, and a cluster-scoped dependent of a namespaced owner is left alone (as upstream):
//!   nothing is deleted on a guess.
//! - Work is driven by the caches: a dependent is checked when it appears or its owners change, and again
//!   when one of its owners is deleted or waits for it.

use super::informer::Informer;
use super::objects::{Cached, Meta, OwnerRef, Str};
use super::queue::WorkQueue;
use super::{Informers, Outcome, READ_YOUR_WRITES, Reconciler, SyncError, names};
use crate::apiserver::object::{ObjectKey, object_key};
use crate::apiserver::store::{Patch, Store};
use crate::apiserver::{ApiError, Gvr};
use futures::FutureExt;
use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, ListParams, PatchParams, Preconditions, PropagationPolicy};
use serde_json::{Value, json};
use std::future::Future;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

/// The finalizer of orphaning deletes.
const ORPHAN: &str = "orphan";
/// The finalizer of foreground deletes.
const FOREGROUND: &str = "foregroundDeletion";

/// One cached kind, as the collector sees it.
trait Source: Send + Sync {
    fn meta(&self, key: &str) -> Option<Meta>;
    fn owned_by(&self, uid: &str) -> Vec<Meta>;
    /// Waits (bounded) until the cache reflects every change up to `rv`; false when it did not.
    fn wait_synced(&self, rv: u64) -> BoxFuture<'_, bool>;
}

impl<T: Cached> Source for Informer<T> {
    fn meta(&self, key: &str) -> Option<Meta> {
        self.get(key).map(|o| o.meta().clone())
    }

    fn owned_by(&self, uid: &str) -> Vec<Meta> {
        Informer::owned_by(self, uid).iter().map(|o| o.meta().clone()).collect()
    }

    fn wait_synced(&self, rv: u64) -> BoxFuture<'_, bool> {
        async move {
            self.wait_for_rv(rv, READ_YOUR_WRITES).await;
            self.synced_rv() >= rv
        }
        .boxed()
    }
}

struct Kind {
    gvr: Gvr,
    kind: &'static str,
    namespaced: bool,
    source: Arc<dyn Source>,
}

/// The collector's work.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) enum Work {
    /// Check the owners of an object (index into the kinds, key).
    Dependent(usize, ObjectKey),
    /// An object with this uid is gone: check its dependents.
    OwnerGone(Str),
    /// An object being deleted may have a finalizer to finish.
    Finalize(usize, ObjectKey),
}

fn kind_index(kinds: &[Kind], owner: &OwnerRef) -> Option<usize> {
    kinds.iter().position(|k| k.kind == &*owner.kind && k.gvr.group == owner.group())
}

/// Queues a look at the owners of `meta` that the collector caches (they may be waiting for it).
fn queue_owners(kinds: &[Kind], queue: &WorkQueue<Work>, meta: &Meta) {
    for owner in meta.owners.iter() {
        if let Some(at) = kind_index(kinds, owner) {
            let namespace = if kinds[at].namespaced { meta.namespace.as_deref() } else { None };
            queue.add(Work::Finalize(at, object_key(namespace, &owner.name)));
        }
    }
}

fn subscribe<T: Cached>(informer: &Informer<T>, index: usize, kinds: &Arc<Vec<Kind>>, queue: &WorkQueue<Work>) {
    let (kinds, queue) = (kinds.clone(), queue.clone());
    informer.subscribe(move |change| {
        let meta = change.object().meta();
        match (&change.old, &change.new) {
            (_, None) => {
                queue.add(Work::OwnerGone(meta.uid.clone()));
                // An owner waiting in foreground deletion may be done now.
                queue_owners(&kinds, &queue, meta);
            }
            (old, Some(new)) => {
                let meta = new.meta();
                let owners_changed = old.as_ref().is_none_or(|o| !Arc::ptr_eq(&o.meta().owners, &meta.owners));
                if owners_changed {
                    if !meta.owners.is_empty() {
                        queue.add(Work::Dependent(index, meta.key.clone()));
                    }
                    // A dependent that stopped blocking (or referring to) an owner may let it go.
                    if let Some(old) = old {
                        queue_owners(&kinds, &queue, old.meta());
                    }
                }
                if meta.is_deleting() && (meta.has_finalizer(ORPHAN) || meta.has_finalizer(FOREGROUND)) {
                    queue.add(Work::Finalize(index, meta.key.clone()));
                }
            }
        }
    });
}

/// Starts the collector: subscribes to the caches now, returns the worker to spawn.
pub fn start(
    store: &Store,
    informers: &Informers,
    shutdown: CancellationToken,
) -> impl Future<Output = ()> + Send + 'static {
    let queue: WorkQueue<Work> = WorkQueue::new();
    let kind = |gvr: &Gvr, kind: &'static str, namespaced: bool, source: Arc<dyn Source>| Kind {
        gvr: gvr.clone(),
        kind,
        namespaced,
        source,
    };
    let mut kinds = vec![
        kind(informers.pods.gvr(), "Pod", true, Arc::new(informers.pods.clone())),
        kind(informers.nodes.gvr(), "Node", false, Arc::new(informers.nodes.clone())),
        kind(informers.pdbs.gvr(), "PodDisruptionBudget", true, Arc::new(informers.pdbs.clone())),
        kind(informers.deployments.gvr(), "Deployment", true, Arc::new(informers.deployments.clone())),
        kind(informers.replicasets.gvr(), "ReplicaSet", true, Arc::new(informers.replicasets.clone())),
        kind(informers.statefulsets.gvr(), "StatefulSet", true, Arc::new(informers.statefulsets.clone())),
        kind(informers.daemonsets.gvr(), "DaemonSet", true, Arc::new(informers.daemonsets.clone())),
        kind(informers.leases.gvr(), "Lease", true, Arc::new(informers.leases.clone())),
        kind(informers.jobs.gvr(), "Job", true, Arc::new(informers.jobs.clone())),
    ];
    let mut others = Vec::new();
    for other in &informers.others {
        let name = match other.gvr().plural.as_str() {
            "controllerrevisions" => "ControllerRevision",
            "configmaps" => "ConfigMap",
            "secrets" => "Secret",
            "serviceaccounts" => "ServiceAccount",
            "services" => "Service",
            _ => continue,
        };
        others.push((kinds.len(), other.clone()));
        kinds.push(kind(other.gvr(), name, true, Arc::new(other.clone())));
    }
    let kinds = Arc::new(kinds);
    subscribe(&informers.pods, 0, &kinds, &queue);
    subscribe(&informers.nodes, 1, &kinds, &queue);
    subscribe(&informers.pdbs, 2, &kinds, &queue);
    subscribe(&informers.deployments, 3, &kinds, &queue);
    subscribe(&informers.replicasets, 4, &kinds, &queue);
    subscribe(&informers.statefulsets, 5, &kinds, &queue);
    subscribe(&informers.daemonsets, 6, &kinds, &queue);
    subscribe(&informers.leases, 7, &kinds, &queue);
    subscribe(&informers.jobs, 8, &kinds, &queue);
    for (at, other) in &others {
        subscribe(other, *at, &kinds, &queue);
    }
    let collector =
        GarbageCollector { store: store.with_identity("dev/garbage-collector"), kinds, queue: queue.clone() };
    super::worker(collector, queue, store.controller_gate(names::GARBAGE_COLLECTOR), informers, shutdown)
}

struct GarbageCollector {
    store: Store,
    kinds: Arc<Vec<Kind>>,
    queue: WorkQueue<Work>,
}

/// Whether an owner exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Presence {
    /// It exists; `waiting` when it is being deleted in the foreground (it waits for its dependents).
    Present {
        waiting: bool,
    },
    Absent,
    /// It cannot be checked (its kind is not served, or a cluster-scoped object names a namespaced owner).
    Unknown,
}

/// A dependent's owner references, sorted as upstream's `classifyReferences` does.
#[derive(Debug, Default)]
struct Owners {
    /// Owners that exist and are not waiting for their dependents (or cannot be checked).
    solid: Vec<Str>,
    /// Owners that are gone.
    dangling: Vec<Str>,
    /// Owners being deleted in the foreground.
    waiting: Vec<Str>,
}

/// True when `meta` is being deleted and waits for its dependents.
fn waits_for_dependents(meta: &Meta) -> bool {
    meta.is_deleting() && meta.has_finalizer(FOREGROUND)
}

impl GarbageCollector {
    fn presence(&self, dependent: &Meta, owner: &OwnerRef) -> Result<Presence, SyncError> {
        if let Some(at) = kind_index(&self.kinds, owner) {
            let kind = &self.kinds[at];
            let namespace = match (kind.namespaced, dependent.namespace.as_deref()) {
                (true, None) => return Ok(Presence::Unknown),
                (true, Some(ns)) => Some(ns),
                (false, _) => None,
            };
            if let Some(cached) = kind.source.meta(&object_key(namespace, &owner.name))
                && cached.uid == owner.uid
            {
                return Ok(Presence::Present { waiting: waits_for_dependents(&cached) });
            }
            // The owner's cache may not have seen it yet (created just before its dependent): ask the store, as
            // upstream's collector confirms an absence with a live lookup before it deletes anything.
            return self.live_presence(&kind.gvr, namespace, owner);
        }
        let Some((gvr, namespaced)) = self.resolve(owner)? else { return Ok(Presence::Unknown) };
        let namespace = match (namespaced, dependent.namespace.as_deref()) {
            (true, None) => return Ok(Presence::Unknown),
            (true, ns) => ns,
            (false, _) => None,
        };
        self.live_presence(&gvr, namespace, owner)
    }

    fn live_presence(&self, gvr: &Gvr, namespace: Option<&str>, owner: &OwnerRef) -> Result<Presence, SyncError> {
        match self.store.get(gvr, namespace, &owner.name) {
            Ok(object) => Ok(match Meta::parse(&object) {
                Some(live) if live.uid == owner.uid => Presence::Present { waiting: waits_for_dependents(&live) },
                _ => Presence::Absent,
            }),
            Err(error) if error.code == 404 => Ok(Presence::Absent),
            Err(error) => Err(error.into()),
        }
    }

    /// The resource of an owner kind that is not cached: a built-in the server serves, or a CRD's kind.
    fn resolve(&self, owner: &OwnerRef) -> Result<Option<(Gvr, bool)>, SyncError> {
        let (group, version) = match owner.api_version.rsplit_once('/') {
            Some((group, version)) => (group, version),
            None => ("", &*owner.api_version),
        };
        let plural = format!("{}s", owner.kind.to_lowercase());
        let guess = Gvr::new(group, version, &plural);
        if let Ok(resource) = self.store.resource(&guess)
            && resource.kind == *owner.kind
        {
            return Ok(Some((guess, resource.namespaced)));
        }
        let crds = self.store.api::<CustomResourceDefinition>().list(None, &ListParams::default())?;
        let found = crds.items.into_iter().find(|crd| crd.spec.group == group && crd.spec.names.kind == *owner.kind);
        Ok(found.and_then(|crd| {
            let gvr = Gvr::new(group, version, &crd.spec.names.plural);
            let resource = self.store.resource(&gvr).ok()?;
            Some((gvr, resource.namespaced))
        }))
    }

    fn classify(&self, dependent: &Meta) -> Result<Owners, SyncError> {
        let mut owners = Owners::default();
        for owner in dependent.owners.iter() {
            match self.presence(dependent, owner)? {
                Presence::Present { waiting: false } | Presence::Unknown => owners.solid.push(owner.uid.clone()),
                Presence::Present { waiting: true } => owners.waiting.push(owner.uid.clone()),
                Presence::Absent => owners.dangling.push(owner.uid.clone()),
            }
        }
        Ok(owners)
    }

    /// The dependent as the store holds it: `None` when it is gone or was replaced by another object.
    fn live(&self, kind: &Kind, meta: &Meta) -> Result<Option<(Value, Meta)>, SyncError> {
        match self.store.get(&kind.gvr, meta.namespace.as_deref(), &meta.name) {
            Ok(object) => Ok(Meta::parse(&object).filter(|live| live.uid == meta.uid).map(|live| (object, live))),
            Err(error) if error.code == 404 => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Deletes the dependent `live` with its uid and resourceVersion as preconditions (upstream `deleteObject`):
    /// when it changed meanwhile but still has the same owner references, the delete is retried with the uid
    /// alone; when its references changed, the conflict is returned and the dependent looked at again.
    fn delete(&self, kind: &Kind, live: &Meta, policy: PropagationPolicy) -> Result<(), SyncError> {
        let params = |rv: Option<String>| DeleteParams {
            propagation_policy: Some(policy.clone()),
            preconditions: Some(Preconditions { uid: Some(live.uid.to_string()), resource_version: rv }),
            ..DeleteParams::default()
        };
        let namespace = live.namespace.as_deref();
        match self.store.delete(&kind.gvr, namespace, &live.name, &params(Some(live.rv.to_string()))) {
            Ok(_) => return Ok(()),
            Err(error) if error.code == 404 => return Ok(()),
            Err(error) if error.code == 409 => {
                let Some((_, now)) = self.live(kind, live)? else { return Ok(()) };
                if now.owners != live.owners {
                    return Err(error.into());
                }
            }
            Err(error) => return Err(error.into()),
        }
        match self.store.delete(&kind.gvr, namespace, &live.name, &params(None)) {
            Ok(_) => Ok(()),
            Err(error) if error.code == 404 || error.code == 409 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Rewrites `metadata.ownerReferences` of the live `object` without the references to `uids` (with its
    /// resourceVersion as precondition: a concurrent write makes this conflict and retry).
    fn drop_owner_refs(&self, kind: &Kind, object: &Value, live: &Meta, uids: &[Str]) -> Result<(), SyncError> {
        let owners: Vec<Value> = object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(|list| {
                list.iter()
                    .filter(|o| {
                        o.get("uid").and_then(Value::as_str).is_none_or(|uid| !uids.iter().any(|u| &**u == uid))
                    })
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        let patch =
            Patch::Merge(json!({"metadata": {"resourceVersion": live.rv.to_string(), "ownerReferences": owners}}));
        self.patch(kind, live, &patch)
    }

    /// Removes `finalizer` from the owner as the store holds it (resourceVersion precondition).
    fn remove_finalizer(&self, kind: &Kind, meta: &Meta, finalizer: &str) -> Result<(), SyncError> {
        let Some((_, live)) = self.live(kind, meta)? else { return Ok(()) };
        if !live.has_finalizer(finalizer) {
            return Ok(());
        }
        let remaining: Vec<&str> = live.finalizers.iter().map(|f| &**f).filter(|f| *f != finalizer).collect();
        let patch = Patch::Merge(json!({"metadata": {"resourceVersion": live.rv.to_string(),
                                                     "finalizers": remaining}}));
        self.patch(kind, &live, &patch)
    }

    fn patch(&self, kind: &Kind, meta: &Meta, patch: &Patch) -> Result<(), SyncError> {
        match self.store.patch(&kind.gvr, meta.namespace.as_deref(), &meta.name, patch, &PatchParams::default()) {
            Ok(_) => Ok(()),
            Err(error) if error.code == 404 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// The cached dependents of the object with `uid`.
    fn dependents(&self, uid: &str) -> Vec<(usize, Meta)> {
        self.kinds
            .iter()
            .enumerate()
            .flat_map(|(at, kind)| kind.source.owned_by(uid).into_iter().map(move |meta| (at, meta)))
            .collect()
    }

    /// The cached dependents whose reference to `uid` blocks its foreground deletion.
    fn blocking_dependents(&self, uid: &str) -> Vec<(usize, Meta)> {
        let mut dependents = self.dependents(uid);
        dependents.retain(|(_, meta)| meta.owners.iter().any(|o| &*o.uid == uid && o.block_owner_deletion));
        dependents
    }

    /// Brings every cache up to its kind's latest change in the store: afterwards the caches show every
    /// dependent the store held when this was called.
    async fn sync_caches(&self) -> Result<(), SyncError> {
        for kind in self.kinds.iter() {
            let rv = match self.store.last_change(&kind.gvr) {
                Ok(rv) => rv,
                Err(error) if error.code == 404 => continue,
                Err(error) => return Err(error.into()),
            };
            if !kind.source.wait_synced(rv).await {
                return Err(ApiError::internal(format!("the cache of {} is behind the store", kind.gvr)).into());
            }
        }
        Ok(())
    }

    /// Upstream's `attemptToDeleteItem`: acts on a dependent whose owners are gone or waiting for it.
    fn check_dependent(&self, at: usize, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let kind = &self.kinds[at];
        let Some(cached) = kind.source.meta(key) else { return Ok(Outcome::Done) };
        if cached.is_deleting() || cached.owners.is_empty() {
            return Ok(Outcome::Done);
        }
        // Most dependents have an owner that exists: the cache tells that without a read of the dependent.
        let hint = self.classify(&cached)?;
        if hint.dangling.is_empty() && hint.waiting.is_empty() {
            return Ok(Outcome::Done);
        }
        // Anything else is decided on the dependent as it is now: the cached version may still name an owner
        // that already let it go (an orphaning delete).
        let Some((object, live)) = self.live(kind, &cached)? else { return Ok(Outcome::Done) };
        if live.is_deleting() || live.owners.is_empty() {
            return Ok(Outcome::Done);
        }
        let owners = self.classify(&live)?;
        if !owners.solid.is_empty() {
            if owners.dangling.is_empty() && owners.waiting.is_empty() {
                return Ok(Outcome::Done);
            }
            let drop: Vec<Str> = owners.dangling.iter().chain(&owners.waiting).cloned().collect();
            self.drop_owner_refs(kind, &object, &live, &drop)?;
            return Ok(Outcome::Done);
        }
        let policy = if !owners.waiting.is_empty() && !self.dependents(&live.uid).is_empty() {
            PropagationPolicy::Foreground
        } else if live.has_finalizer(ORPHAN) {
            PropagationPolicy::Orphan
        } else if live.has_finalizer(FOREGROUND) {
            PropagationPolicy::Foreground
        } else {
            PropagationPolicy::Background
        };
        self.delete(kind, &live, policy)?;
        Ok(Outcome::Done)
    }

    async fn finalize(&self, at: usize, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let kind = &self.kinds[at];
        let Some(meta) = kind.source.meta(key) else { return Ok(Outcome::Done) };
        if !meta.is_deleting() {
            return Ok(Outcome::Done);
        }
        if meta.has_finalizer(ORPHAN) {
            // Every dependent created before the owner's deletion must lose its reference, not only the ones the
            // caches happen to show.
            self.sync_caches().await?;
            for (dependent_at, dependent) in self.dependents(&meta.uid) {
                let dependent_kind = &self.kinds[dependent_at];
                if let Some((object, live)) = self.live(dependent_kind, &dependent)?
                    && live.owners.iter().any(|o| o.uid == meta.uid)
                {
                    self.drop_owner_refs(dependent_kind, &object, &live, std::slice::from_ref(&meta.uid))?;
                }
            }
            self.remove_finalizer(kind, &meta, ORPHAN)?;
            return Ok(Outcome::Done);
        }
        if meta.has_finalizer(FOREGROUND) {
            // Upstream's `processDeletingDependentsItem`.
            let mut blocking = self.blocking_dependents(&meta.uid);
            if blocking.is_empty() {
                self.sync_caches().await?;
                blocking = self.blocking_dependents(&meta.uid);
            }
            if blocking.is_empty() {
                self.remove_finalizer(kind, &meta, FOREGROUND)?;
                return Ok(Outcome::Done);
            }
            for (dependent_at, dependent) in blocking {
                if !dependent.is_deleting() {
                    self.queue.add(Work::Dependent(dependent_at, dependent.key.clone()));
                }
            }
        }
        Ok(Outcome::Done)
    }
}

impl Reconciler for GarbageCollector {
    type Key = Work;

    async fn sync(&mut self, key: &Work) -> Result<Outcome, SyncError> {
        match key {
            Work::Dependent(at, key) => self.check_dependent(*at, key),
            Work::OwnerGone(uid) => {
                for (at, meta) in self.dependents(uid) {
                    self.queue.add(Work::Dependent(at, meta.key));
                }
                Ok(Outcome::Done)
            }
            Work::Finalize(at, key) => self.finalize(*at, key).await,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::{ApiServer, ApiServerConfig};
    use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;
    use parking_lot::Mutex;

    /// A cache that shows `visible` and learns `pending` only when the collector waits for it to catch up: a
    /// cache that lags the store, deterministically.
    #[derive(Default)]
    struct Lagging {
        visible: Mutex<Vec<Meta>>,
        pending: Mutex<Vec<Meta>>,
    }

    impl Lagging {
        fn showing(metas: Vec<Meta>) -> Arc<Lagging> {
            Arc::new(Lagging { visible: Mutex::new(metas), pending: Mutex::default() })
        }

        fn behind(metas: Vec<Meta>) -> Arc<Lagging> {
            Arc::new(Lagging { visible: Mutex::default(), pending: Mutex::new(metas) })
        }
    }

    impl Source for Lagging {
        fn meta(&self, key: &str) -> Option<Meta> {
            self.visible.lock().iter().find(|m| &*m.key == key).cloned()
        }

        fn owned_by(&self, uid: &str) -> Vec<Meta> {
            self.visible.lock().iter().filter(|m| m.owners.iter().any(|o| &*o.uid == uid)).cloned().collect()
        }

        fn wait_synced(&self, _rv: u64) -> BoxFuture<'_, bool> {
            let caught_up: Vec<Meta> = std::mem::take(&mut *self.pending.lock());
            self.visible.lock().extend(caught_up);
            futures::future::ready(true).boxed()
        }
    }

    fn collector(store: &Store, deployments: Arc<Lagging>, replicasets: Arc<Lagging>) -> GarbageCollector {
        let kinds = vec![
            Kind { gvr: Gvr::of::<Deployment>(), kind: "Deployment", namespaced: true, source: deployments },
            Kind { gvr: Gvr::of::<ReplicaSet>(), kind: "ReplicaSet", namespaced: true, source: replicasets },
        ];
        GarbageCollector { store: store.clone(), kinds: Arc::new(kinds), queue: WorkQueue::new() }
    }

    fn meta(object: &impl serde::Serialize) -> Meta {
        Meta::parse(&serde_json::to_value(object).unwrap()).unwrap()
    }

    /// A Deployment `web` and a ReplicaSet it owns (`blocking` sets `blockOwnerDeletion`), in the store.
    fn deployment_and_replicaset(store: &Store, finalizer: Option<&str>, blocking: bool) -> (Deployment, ReplicaSet) {
        let template = json!({"metadata": {"labels": {"app": "web"}},
                              "spec": {"containers": [{"name": "c", "image": "i"}]}});
        let mut deployment = json!({"metadata": {"name": "web"}, "spec": {"selector": {"matchLabels": {"app": "web"}},
                                                                         "template": template}});
        if let Some(finalizer) = finalizer {
            deployment["metadata"]["finalizers"] = json!([finalizer]);
        }
        let deployment: Deployment = serde_json::from_value(deployment).unwrap();
        let deployments = store.api::<Deployment>();
        let deployment = deployments.create(Some("default"), &deployment, &PostParams::default()).unwrap();
        let replicaset: ReplicaSet = serde_json::from_value(json!({"metadata": {"name": "web-1",
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                                 "uid": deployment.metadata.uid, "controller": true,
                                 "blockOwnerDeletion": blocking}]},
            "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}))
        .unwrap();
        let replicaset =
            store.api::<ReplicaSet>().create(Some("default"), &replicaset, &PostParams::default()).unwrap();
        (deployment, replicaset)
    }

    /// Deletes the Deployment (its finalizer keeps it) and returns its cached form, being deleted.
    fn delete_deployment(store: &Store) -> Meta {
        let deployments = store.api::<Deployment>();
        deployments.delete(Some("default"), "web", &DeleteParams::default()).unwrap();
        meta(&deployments.get(Some("default"), "web").unwrap())
    }

    #[tokio::test]
    async fn an_orphaned_replicaset_is_not_deleted_on_a_stale_cached_reference() {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let store = server.store();
        let (_, replicaset) = deployment_and_replicaset(&store, None, true);
        let stale = meta(&replicaset);
        // The orphaning delete of the Deployment: its reference leaves the ReplicaSet, then the Deployment goes.
        let patch = Patch::Merge(json!({"metadata": {"ownerReferences": []}}));
        store.api::<ReplicaSet>().patch(Some("default"), "web-1", &patch, &PatchParams::default()).unwrap();
        store.api::<Deployment>().delete(Some("default"), "web", &DeleteParams::default()).unwrap();
        // The collector's ReplicaSet cache has not seen the patch: it still shows the reference.
        let gc = collector(&store, Lagging::showing(vec![]), Lagging::showing(vec![stale.clone()]));
        gc.check_dependent(1, &stale.key).unwrap();
        let kept = store.api::<ReplicaSet>().get(Some("default"), "web-1").unwrap();
        assert!(kept.metadata.deletion_timestamp.is_none(), "the orphaned ReplicaSet was deleted");
        server.shutdown().await;
    }

    #[tokio::test]
    async fn an_orphaning_delete_releases_a_replicaset_the_cache_has_not_seen_yet() {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let store = server.store();
        let (_, replicaset) = deployment_and_replicaset(&store, Some(ORPHAN), true);
        let owner = delete_deployment(&store);
        let gc = collector(&store, Lagging::showing(vec![owner.clone()]), Lagging::behind(vec![meta(&replicaset)]));
        gc.finalize(0, &owner.key).await.unwrap();
        let released = store.api::<ReplicaSet>().get(Some("default"), "web-1").unwrap();
        assert!(released.metadata.owner_references.unwrap_or_default().is_empty(), "the reference stayed");
        assert!(store.api::<Deployment>().get_opt(Some("default"), "web").unwrap().is_none());
        server.shutdown().await;
    }

    #[tokio::test]
    async fn a_foreground_delete_waits_for_a_blocking_dependent_the_cache_has_not_seen_yet() {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let store = server.store();
        let (_, replicaset) = deployment_and_replicaset(&store, Some(FOREGROUND), true);
        let owner = delete_deployment(&store);
        let replicasets = Lagging::behind(vec![meta(&replicaset)]);
        let gc = collector(&store, Lagging::showing(vec![owner.clone()]), replicasets);
        gc.finalize(0, &owner.key).await.unwrap();
        let waiting = store.api::<Deployment>().get(Some("default"), "web").unwrap();
        assert_eq!(waiting.metadata.finalizers, Some(vec![FOREGROUND.to_owned()]), "the owner went first");
        // The blocking dependent is deleted next: in the background, as it has no dependents of its own.
        let key = meta(&replicaset).key;
        assert_eq!(gc.queue.next().await, Work::Dependent(1, key.clone()));
        gc.check_dependent(1, &key).unwrap();
        assert!(store.api::<ReplicaSet>().get_opt(Some("default"), "web-1").unwrap().is_none());
        server.shutdown().await;
    }

    #[tokio::test]
    async fn a_foreground_delete_does_not_wait_for_dependents_that_do_not_block_it() {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let store = server.store();
        let (_, replicaset) = deployment_and_replicaset(&store, Some(FOREGROUND), false);
        let owner = delete_deployment(&store);
        let gc = collector(&store, Lagging::showing(vec![owner.clone()]), Lagging::showing(vec![meta(&replicaset)]));
        gc.finalize(0, &owner.key).await.unwrap();
        assert!(store.api::<Deployment>().get_opt(Some("default"), "web").unwrap().is_none());
        server.shutdown().await;
    }

    #[tokio::test]
    async fn a_dependent_with_dependents_of_its_own_goes_in_the_foreground_when_its_owner_waits() {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let store = server.store();
        let (_, replicaset) = deployment_and_replicaset(&store, Some(FOREGROUND), true);
        let owner = delete_deployment(&store);
        let pod_of_replicaset = {
            let mut pod = meta(&replicaset);
            pod.key = Arc::from("default/web-1-abcde");
            pod.owners = Arc::from(vec![OwnerRef {
                api_version: Arc::from("apps/v1"),
                kind: Arc::from("ReplicaSet"),
                name: Arc::from("web-1"),
                uid: meta(&replicaset).uid,
                controller: true,
                block_owner_deletion: true,
            }]);
            pod
        };
        let gc = collector(
            &store,
            Lagging::showing(vec![owner.clone()]),
            Lagging::showing(vec![meta(&replicaset), pod_of_replicaset]),
        );
        gc.check_dependent(1, &meta(&replicaset).key).unwrap();
        let waiting = store.api::<ReplicaSet>().get(Some("default"), "web-1").unwrap();
        assert!(waiting.metadata.deletion_timestamp.is_some());
        assert_eq!(waiting.metadata.finalizers, Some(vec![FOREGROUND.to_owned()]));
        server.shutdown().await;
    }

    #[tokio::test]
    async fn an_owner_the_cache_has_not_seen_yet_is_confirmed_in_the_store_before_anything_is_deleted() {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let store = server.store();
        let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
        let owner = store.api::<ConfigMap>().create(Some("default"), &owner, &PostParams::default()).unwrap();
        // A cache that never listed: it knows no owner at all.
        let empty: Informer<crate::controllers::objects::MetaOnly> = Informer::new(Gvr::of::<ConfigMap>());
        let kinds =
            vec![Kind { gvr: Gvr::of::<ConfigMap>(), kind: "ConfigMap", namespaced: true, source: Arc::new(empty) }];
        let collector = GarbageCollector { store: store.clone(), kinds: Arc::new(kinds), queue: WorkQueue::new() };
        let dependent = Meta::parse(&json!({"metadata": {"name": "d", "namespace": "default"}})).unwrap();
        let reference = |uid: &str| OwnerRef {
            api_version: Arc::from("v1"),
            kind: Arc::from("ConfigMap"),
            name: Arc::from("owner"),
            uid: Arc::from(uid),
            controller: false,
            block_owner_deletion: false,
        };
        let live = reference(owner.metadata.uid.as_deref().unwrap());
        assert_eq!(collector.presence(&dependent, &live).unwrap(), Presence::Present { waiting: false });
        let stale = reference("00000000-0000-4000-8000-000000000000");
        assert_eq!(collector.presence(&dependent, &stale).unwrap(), Presence::Absent);
        // A cluster-scoped object cannot have a namespaced owner: upstream leaves it alone.
        let cluster_scoped = Meta::parse(&json!({"metadata": {"name": "d"}})).unwrap();
        assert_eq!(collector.presence(&cluster_scoped, &live).unwrap(), Presence::Unknown);
        server.shutdown().await;
    }
}
