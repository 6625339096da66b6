//! The garbage collector: ownerReference cascades, as upstream's does for background, foreground and orphan
//! deletion.
//!
//! # Guarantees
//! - A dependent whose every owner is gone (no object of that kind, name and uid) is deleted in the background
//!   (with a uid precondition); references to owners that are gone are removed while another owner remains.
//! - An owner being deleted with the `orphan` finalizer loses its references from its dependents, then the
//!   finalizer; with `foregroundDeletion` its dependents are deleted and the finalizer removed once none is left.
//! - Dependents and owners are the cached kinds (pods, nodes, PDBs, Deployments, ReplicaSets, StatefulSets,
//!   DaemonSets, Leases, ControllerRevisions, ConfigMaps, Secrets, ServiceAccounts); an owner of another kind is
//!   looked up in the store (custom resources included). An owner whose kind the server does not serve is
//!   taken to exist: nothing is deleted on a guess.
//! - Work is driven by the caches: a dependent is checked when it appears or its owners change, and again
//!   when one of its owners is deleted.

use super::informer::Informer;
use super::objects::{Cached, Meta, OwnerRef, Str};
use super::queue::WorkQueue;
use super::{Informers, Outcome, Reconciler, SyncError, names};
use crate::apiserver::Gvr;
use crate::apiserver::object::{ObjectKey, object_key};
use crate::apiserver::store::{Patch, Store};
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
    fn owned_by(&self, uid: &str) -> Vec<ObjectKey>;
}

impl<T: Cached> Source for Informer<T> {
    fn meta(&self, key: &str) -> Option<Meta> {
        self.get(key).map(|o| o.meta().clone())
    }

    fn owned_by(&self, uid: &str) -> Vec<ObjectKey> {
        Informer::owned_by(self, uid).iter().map(|o| o.meta().key.clone()).collect()
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

fn subscribe<T: Cached>(informer: &Informer<T>, index: usize, kinds: &Arc<Vec<Kind>>, queue: &WorkQueue<Work>) {
    let (kinds, queue) = (kinds.clone(), queue.clone());
    informer.subscribe(move |change| {
        let meta = change.object().meta();
        match (&change.old, &change.new) {
            (_, None) => {
                queue.add(Work::OwnerGone(meta.uid.clone()));
                // An owner waiting in foreground deletion may be done now.
                for owner in meta.owners.iter() {
                    if let Some(at) = kind_index(&kinds, owner) {
                        let namespace = if kinds[at].namespaced { meta.namespace.as_deref() } else { None };
                        queue.add(Work::Finalize(at, object_key(namespace, &owner.name)));
                    }
                }
            }
            (old, Some(new)) => {
                let meta = new.meta();
                let owners_changed = old.as_ref().is_none_or(|o| !Arc::ptr_eq(&o.meta().owners, &meta.owners));
                if !meta.owners.is_empty() && owners_changed {
                    queue.add(Work::Dependent(index, meta.key.clone()));
                }
                if meta.is_deleting() && (meta.has_finalizer(ORPHAN) || meta.has_finalizer(FOREGROUND)) {
                    queue.add(Work::Finalize(index, meta.key.clone()));
                }
            }
        }
    });
}

/// Starts the collector: subscribes to the caches now, returns the worker to spawn.
pub(crate) fn start(
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
    ];
    let mut others = Vec::new();
    for other in &informers.others {
        let name = match other.gvr().plural.as_str() {
            "controllerrevisions" => "ControllerRevision",
            "configmaps" => "ConfigMap",
            "secrets" => "Secret",
            "serviceaccounts" => "ServiceAccount",
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
    Present,
    Absent,
    /// Its kind is not served: it cannot be checked.
    Unknown,
}

impl GarbageCollector {
    fn presence(&self, dependent: &Meta, owner: &OwnerRef) -> Result<Presence, SyncError> {
        if let Some(at) = kind_index(&self.kinds, owner) {
            let kind = &self.kinds[at];
            let namespace = match (kind.namespaced, dependent.namespace.as_deref()) {
                (true, None) => return Ok(Presence::Absent),
                (true, Some(ns)) => Some(ns),
                (false, _) => None,
            };
            if kind.source.meta(&object_key(namespace, &owner.name)).is_some_and(|m| m.uid == owner.uid) {
                return Ok(Presence::Present);
            }
            // The owner's cache may not have seen it yet (created just before its dependent): ask the store, as
            // upstream's collector confirms an absence with a live lookup before it deletes anything.
            return self.live_presence(&kind.gvr, namespace, owner);
        }
        let Some((gvr, namespaced)) = self.resolve(owner)? else { return Ok(Presence::Unknown) };
        let namespace = match (namespaced, dependent.namespace.as_deref()) {
            (true, None) => return Ok(Presence::Absent),
            (true, ns) => ns,
            (false, _) => None,
        };
        self.live_presence(&gvr, namespace, owner)
    }

    fn live_presence(&self, gvr: &Gvr, namespace: Option<&str>, owner: &OwnerRef) -> Result<Presence, SyncError> {
        match self.store.get(gvr, namespace, &owner.name) {
            Ok(object) => {
                let uid = object.pointer("/metadata/uid").and_then(Value::as_str);
                Ok(if uid == Some(&*owner.uid) { Presence::Present } else { Presence::Absent })
            }
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

    fn delete(&self, kind: &Kind, meta: &Meta) -> Result<(), SyncError> {
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            preconditions: Some(Preconditions { uid: Some(meta.uid.to_string()), resource_version: None }),
            ..DeleteParams::default()
        };
        match self.store.delete(&kind.gvr, meta.namespace.as_deref(), &meta.name, &params) {
            Ok(_) => Ok(()),
            Err(error) if error.code == 404 || error.code == 409 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    /// Rewrites `metadata.ownerReferences` without the references `drop` selects (with a resourceVersion
    /// precondition: a concurrent write makes this conflict and retry).
    fn drop_owner_refs(&self, kind: &Kind, meta: &Meta, drop: impl Fn(&Value) -> bool) -> Result<(), SyncError> {
        let object = match self.store.get(&kind.gvr, meta.namespace.as_deref(), &meta.name) {
            Ok(object) => object,
            Err(error) if error.code == 404 => return Ok(()),
            Err(error) => return Err(error.into()),
        };
        let owners: Vec<Value> = object
            .pointer("/metadata/ownerReferences")
            .and_then(Value::as_array)
            .map(|list| list.iter().filter(|o| !drop(o)).cloned().collect())
            .unwrap_or_default();
        let rv = object.pointer("/metadata/resourceVersion").cloned().unwrap_or(Value::Null);
        let patch = Patch::Merge(json!({"metadata": {"resourceVersion": rv, "ownerReferences": owners}}));
        self.patch(kind, meta, &patch)
    }

    fn remove_finalizer(&self, kind: &Kind, meta: &Meta, finalizer: &str) -> Result<(), SyncError> {
        let remaining: Vec<&str> = meta.finalizers.iter().map(|f| &**f).filter(|f| *f != finalizer).collect();
        let patch = Patch::Merge(json!({"metadata": {"resourceVersion": meta.rv.to_string(),
                                                     "finalizers": remaining}}));
        self.patch(kind, meta, &patch)
    }

    fn patch(&self, kind: &Kind, meta: &Meta, patch: &Patch) -> Result<(), SyncError> {
        match self.store.patch(&kind.gvr, meta.namespace.as_deref(), &meta.name, patch, &PatchParams::default()) {
            Ok(_) => Ok(()),
            Err(error) if error.code == 404 => Ok(()),
            Err(error) => Err(error.into()),
        }
    }

    fn dependents(&self, uid: &str) -> Vec<(usize, ObjectKey)> {
        self.kinds
            .iter()
            .enumerate()
            .flat_map(|(at, kind)| kind.source.owned_by(uid).into_iter().map(move |key| (at, key)))
            .collect()
    }

    fn check_dependent(&self, at: usize, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let kind = &self.kinds[at];
        let Some(meta) = kind.source.meta(key) else { return Ok(Outcome::Done) };
        if meta.is_deleting() || meta.owners.is_empty() {
            return Ok(Outcome::Done);
        }
        let mut absent = Vec::new();
        for owner in meta.owners.iter() {
            if self.presence(&meta, owner)? == Presence::Absent {
                absent.push(owner.uid.clone());
            }
        }
        if absent.len() == meta.owners.len() {
            self.delete(kind, &meta)?;
        } else if !absent.is_empty() {
            self.drop_owner_refs(kind, &meta, |o| {
                o.get("uid").and_then(Value::as_str).is_some_and(|uid| absent.iter().any(|a| &**a == uid))
            })?;
        }
        Ok(Outcome::Done)
    }

    fn finalize(&self, at: usize, key: &ObjectKey) -> Result<Outcome, SyncError> {
        let kind = &self.kinds[at];
        let Some(meta) = kind.source.meta(key) else { return Ok(Outcome::Done) };
        if !meta.is_deleting() {
            return Ok(Outcome::Done);
        }
        let dependents = self.dependents(&meta.uid);
        if meta.has_finalizer(ORPHAN) {
            for (dependent_at, dependent_key) in &dependents {
                let dependent_kind = &self.kinds[*dependent_at];
                if let Some(dependent) = dependent_kind.source.meta(dependent_key) {
                    self.drop_owner_refs(dependent_kind, &dependent, |o| {
                        o.get("uid").and_then(Value::as_str) == Some(&*meta.uid)
                    })?;
                }
            }
            self.remove_finalizer(kind, &meta, ORPHAN)?;
            return Ok(Outcome::Done);
        }
        if meta.has_finalizer(FOREGROUND) {
            if dependents.is_empty() {
                self.remove_finalizer(kind, &meta, FOREGROUND)?;
                return Ok(Outcome::Done);
            }
            for (dependent_at, dependent_key) in &dependents {
                let dependent_kind = &self.kinds[*dependent_at];
                if let Some(dependent) = dependent_kind.source.meta(dependent_key)
                    && !dependent.is_deleting()
                {
                    self.delete(dependent_kind, &dependent)?;
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
                for (at, key) in self.dependents(uid) {
                    self.queue.add(Work::Dependent(at, key));
                }
                Ok(Outcome::Done)
            }
            Work::Finalize(at, key) => self.finalize(*at, key),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::{ApiServer, ApiServerConfig};
    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::api::PostParams;

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
        };
        let live = reference(owner.metadata.uid.as_deref().unwrap());
        assert_eq!(collector.presence(&dependent, &live).unwrap(), Presence::Present);
        let stale = reference("00000000-0000-4000-8000-000000000000");
        assert_eq!(collector.presence(&dependent, &stale).unwrap(), Presence::Absent);
        let cluster_scoped = Meta::parse(&json!({"metadata": {"name": "d"}})).unwrap();
        assert_eq!(collector.presence(&cluster_scoped, &live).unwrap(), Presence::Absent);
        server.shutdown().await;
    }
}
