//! A shared, indexed cache of one kind, kept current by a list and a watch on the in-process [`Store`], with
//! change handlers for the controllers (upstream's shared informers).
//!
//! # Guarantees
//! - After the first list the cache holds every object of the kind; afterwards it follows the watch. A watch that
//!   ends is resumed from the last resourceVersion seen; one that answers 410 Expired is replaced by a new list,
//!   whose differences to the cache are reported as changes (so deletions missed meanwhile are reported too).
//! - Handlers see every change once, in resourceVersion order, after the cache and its indexes reflect it.
//! - `wait_for_rv(rv)` returns once the cache reflects every change of the kind up to `rv`: a controller that
//!   waits for the resourceVersion of its own write reads its write afterwards.
//! - Indexes: by owner uid (every owner reference), by node name (pods), and, when enabled, by label.

use super::objects::{Cached, Str};
use crate::apiserver::object::ObjectKey;
use crate::apiserver::store::{Store, WatchEvent};
use crate::apiserver::{ApiError, Gvr};
use futures::StreamExt;
use kube::api::{ListParams, WatchParams};
use parking_lot::RwLock;
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

/// Objects per page of the initial list: keeps the parsed JSON of one page, not of the whole kind, in memory.
const LIST_PAGE: u32 = 500;

/// Pause before retrying a list or watch the store refused (it only refuses when the kind is not served yet).
const RETRY_DELAY: Duration = Duration::from_millis(500);

/// One change of one object: added (`old` is `None`), modified, or deleted (`new` is `None`).
pub struct Change<T> {
    /// The version before.
    pub old: Option<Arc<T>>,
    /// The version after.
    pub new: Option<Arc<T>>,
}

impl<T: Cached> Change<T> {
    /// The latest version (the deleted one for a deletion).
    pub fn object(&self) -> &Arc<T> {
        match (&self.new, &self.old) {
            (Some(object), _) | (None, Some(object)) => object,
            (None, None) => unreachable!("a change has an old or a new version"),
        }
    }

    /// True for a deletion.
    pub fn is_delete(&self) -> bool {
        self.new.is_none()
    }
}

type Handler<T> = Arc<dyn Fn(&Change<T>) + Send + Sync>;

/// An index key.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum IndexKey {
    Owner(Str),
    Node(Str),
    Label(Option<Str>, Str, Str),
}

struct Cache<T> {
    objects: HashMap<ObjectKey, Arc<T>>,
    index: HashMap<IndexKey, HashSet<ObjectKey>>,
}

struct Shared<T> {
    gvr: Gvr,
    label_index: bool,
    cache: RwLock<Cache<T>>,
    handlers: RwLock<Vec<Handler<T>>>,
    synced_rv: watch::Sender<u64>,
    listed: watch::Sender<bool>,
    running: AtomicBool,
}

/// A cloneable handle on the cache of one kind.
pub struct Informer<T> {
    shared: Arc<Shared<T>>,
}

impl<T> Clone for Informer<T> {
    fn clone(&self) -> Self {
        Informer { shared: self.shared.clone() }
    }
}

impl<T: Cached> Informer<T> {
    /// A cache of the kind at `gvr` (empty until [`Informer::run`] lists it).
    pub fn new(gvr: Gvr) -> Self {
        Self::build(gvr, false)
    }

    /// A cache that also indexes objects by label (namespace, key, value).
    pub fn with_label_index(gvr: Gvr) -> Self {
        Self::build(gvr, true)
    }

    fn build(gvr: Gvr, label_index: bool) -> Self {
        Informer {
            shared: Arc::new(Shared {
                gvr,
                label_index,
                cache: RwLock::new(Cache { objects: HashMap::new(), index: HashMap::new() }),
                handlers: RwLock::new(Vec::new()),
                synced_rv: watch::channel(0).0,
                listed: watch::channel(false).0,
                running: AtomicBool::new(false),
            }),
        }
    }

    /// The kind cached.
    pub fn gvr(&self) -> &Gvr {
        &self.shared.gvr
    }

    /// Calls `handler` for every later change (register before [`Informer::run`] to see the initial objects).
    pub fn subscribe(&self, handler: impl Fn(&Change<T>) + Send + Sync + 'static) {
        self.shared.handlers.write().push(Arc::new(handler));
    }

    /// The object stored at `key` (`namespace/name` or `name`).
    pub fn get(&self, key: &str) -> Option<Arc<T>> {
        self.shared.cache.read().objects.get(key).cloned()
    }

    /// The object `name` in `namespace` (`None` for cluster-scoped kinds).
    pub fn get_named(&self, namespace: Option<&str>, name: &str) -> Option<Arc<T>> {
        match namespace {
            Some(namespace) => self.get(&format!("{namespace}/{name}")),
            None => self.get(name),
        }
    }

    /// Every cached object (a copy of the handles: costly for big kinds).
    pub fn list(&self) -> Vec<Arc<T>> {
        self.shared.cache.read().objects.values().cloned().collect()
    }

    /// Number of cached objects.
    pub fn len(&self) -> usize {
        self.shared.cache.read().objects.len()
    }

    /// True when nothing is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Visits every cached object under the read lock (keep `visit` short).
    pub fn for_each(&self, mut visit: impl FnMut(&Arc<T>)) {
        for object in self.shared.cache.read().objects.values() {
            visit(object);
        }
    }

    fn indexed(&self, key: &IndexKey) -> Vec<Arc<T>> {
        let cache = self.shared.cache.read();
        cache
            .index
            .get(key)
            .map(|keys| keys.iter().filter_map(|k| cache.objects.get(k).cloned()).collect())
            .unwrap_or_default()
    }

    /// Objects with an owner reference to `uid`.
    pub fn owned_by(&self, uid: &str) -> Vec<Arc<T>> {
        self.indexed(&IndexKey::Owner(Arc::from(uid)))
    }

    /// Objects bound to `node` (pods).
    pub fn on_node(&self, node: &str) -> Vec<Arc<T>> {
        self.indexed(&IndexKey::Node(Arc::from(node)))
    }

    /// Objects in `namespace` labelled `key=value` (needs the label index).
    pub fn labelled(&self, namespace: Option<&str>, key: &str, value: &str) -> Vec<Arc<T>> {
        self.indexed(&IndexKey::Label(namespace.map(Arc::from), Arc::from(key), Arc::from(value)))
    }

    /// The resourceVersion up to which the cache reflects every change.
    pub fn synced_rv(&self) -> u64 {
        *self.shared.synced_rv.borrow()
    }

    /// True once the first list is in the cache.
    pub fn has_listed(&self) -> bool {
        *self.shared.listed.borrow()
    }

    /// Returns once the first list is in the cache.
    pub async fn wait_listed(&self) {
        let mut listed = self.shared.listed.subscribe();
        let _ = listed.wait_for(|l| *l).await;
    }

    /// Returns once the cache reflects every change up to `rv`, or after `limit` (a broken watch is resumed and
    /// catches up; the limit only keeps a caller from waiting forever on a store that stopped).
    pub async fn wait_for_rv(&self, rv: u64, limit: Duration) {
        let mut synced = self.shared.synced_rv.subscribe();
        let _ = tokio::time::timeout(limit, synced.wait_for(|s| *s >= rv)).await;
    }

    /// A receiver that changes whenever the cache does (for waiting on a condition over the cache).
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.shared.synced_rv.subscribe()
    }

    /// Keeps the cache current until `shutdown`; a second call on the same informer returns at once.
    pub async fn run(self, store: Store, shutdown: CancellationToken) {
        if self.shared.running.swap(true, Ordering::SeqCst) {
            return;
        }
        tokio::select! {
            () = shutdown.cancelled() => {}
            () = self.list_and_watch(&store) => {}
        }
    }

    async fn list_and_watch(&self, store: &Store) {
        loop {
            let rv = match self.relist(store).await {
                Ok(rv) => rv,
                Err(error) => {
                    tracing::debug!(gvr = %self.shared.gvr, %error, "listing failed; retrying");
                    tokio::time::sleep(RETRY_DELAY).await;
                    continue;
                }
            };
            self.watch_from(store, rv).await;
        }
    }

    /// Lists every object page by page and replaces the cache, reporting the differences.
    async fn relist(&self, store: &Store) -> Result<u64, ApiError> {
        let mut fresh: HashMap<ObjectKey, Arc<T>> = HashMap::new();
        let mut params = ListParams::default().limit(LIST_PAGE);
        let rv = loop {
            let page = store.list(&self.shared.gvr, None, &params)?;
            for item in &page.items {
                if let Some(object) = self.parse(item) {
                    fresh.insert(object.meta().key.clone(), object);
                }
            }
            match page.continue_token {
                Some(token) if !token.is_empty() => params = params.continue_token(&token),
                _ => break page.resource_version.parse::<u64>().unwrap_or(0),
            }
            tokio::task::yield_now().await;
        };
        let gone: Vec<Arc<T>> = {
            let cache = self.shared.cache.read();
            cache.objects.iter().filter(|(k, _)| !fresh.contains_key(*k)).map(|(_, o)| o.clone()).collect()
        };
        for object in gone {
            self.remove(&object.meta().key.clone(), u64::MAX);
        }
        for (_, object) in fresh {
            self.upsert(object);
        }
        self.shared.synced_rv.send_modify(|synced| *synced = (*synced).max(rv));
        self.shared.listed.send_replace(true);
        Ok(rv)
    }

    /// Follows the watch from `rv` until the history no longer reaches the cache's version (then a relist is due).
    async fn watch_from(&self, store: &Store, mut rv: u64) {
        loop {
            let params = WatchParams::default();
            let mut stream = match store.watch(&self.shared.gvr, None, &params, &rv.to_string()) {
                Ok(stream) => stream,
                Err(error) => {
                    tracing::debug!(gvr = %self.shared.gvr, %error, "watching failed; retrying");
                    tokio::time::sleep(RETRY_DELAY).await;
                    continue;
                }
            };
            while let Some(event) = stream.next().await {
                match event {
                    WatchEvent::Added(object) | WatchEvent::Modified(object) => {
                        if let Some(parsed) = self.parse(&object) {
                            rv = rv.max(parsed.meta().rv);
                            self.upsert(parsed);
                        }
                    }
                    WatchEvent::Deleted(object) => {
                        if let Some(parsed) = self.parse(&object) {
                            rv = rv.max(parsed.meta().rv);
                            self.remove(&parsed.meta().key, parsed.meta().rv);
                        }
                    }
                    WatchEvent::Bookmark { resource_version, .. } => {
                        rv = rv.max(resource_version.parse().unwrap_or(0));
                    }
                    WatchEvent::Error(error) if error.code == 410 => return,
                    WatchEvent::Error(error) => {
                        tracing::debug!(gvr = %self.shared.gvr, %error, "watch error; resuming");
                        break;
                    }
                }
                self.shared.synced_rv.send_modify(|synced| *synced = (*synced).max(rv));
            }
        }
    }

    fn parse(&self, object: &Value) -> Option<Arc<T>> {
        match T::parse(object) {
            Ok(parsed) => Some(Arc::new(parsed)),
            Err(error) => {
                tracing::warn!(gvr = %self.shared.gvr, %error, "a stored object does not parse; skipped");
                None
            }
        }
    }

    fn index_keys(&self, object: &T) -> Vec<IndexKey> {
        let meta = object.meta();
        let mut keys: Vec<IndexKey> = meta.owners.iter().map(|o| IndexKey::Owner(o.uid.clone())).collect();
        if let Some(node) = object.node_name() {
            keys.push(IndexKey::Node(node.clone()));
        }
        if self.shared.label_index {
            keys.extend(meta.labels.iter().map(|(k, v)| IndexKey::Label(meta.namespace.clone(), k.clone(), v.clone())));
        }
        keys
    }

    fn upsert(&self, object: Arc<T>) {
        let key = object.meta().key.clone();
        let new_keys = self.index_keys(&object);
        let old = {
            let mut cache = self.shared.cache.write();
            if cache.objects.get(&key).is_some_and(|existing| existing.meta().rv >= object.meta().rv) {
                return;
            }
            let old = cache.objects.insert(key.clone(), object.clone());
            if let Some(old) = &old {
                for index in self.index_keys(old) {
                    unindex(&mut cache.index, index, &key);
                }
            }
            for index in new_keys {
                cache.index.entry(index).or_default().insert(key.clone());
            }
            old
        };
        self.notify(&Change { old, new: Some(object) });
    }

    /// Removes `key` unless the cache holds a version newer than `rv` (a recreated object).
    fn remove(&self, key: &ObjectKey, rv: u64) {
        let old = {
            let mut cache = self.shared.cache.write();
            if cache.objects.get(key).is_none_or(|existing| existing.meta().rv > rv) {
                return;
            }
            let Some(old) = cache.objects.remove(key) else { return };
            for index in self.index_keys(&old) {
                unindex(&mut cache.index, index, key);
            }
            old
        };
        self.notify(&Change { old: Some(old), new: None });
    }

    fn notify(&self, change: &Change<T>) {
        let handlers: Vec<Handler<T>> = self.shared.handlers.read().clone();
        for handler in handlers {
            handler(change);
        }
    }
}

fn unindex(index: &mut HashMap<IndexKey, HashSet<ObjectKey>>, at: IndexKey, key: &ObjectKey) {
    if let Some(keys) = index.get_mut(&at) {
        keys.remove(key);
        if keys.is_empty() {
            index.remove(&at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::apiserver::{ApiServer, ApiServerConfig};
    use crate::controllers::objects::PodInfo;
    use k8s_openapi::api::core::v1::Pod;
    use kube::api::{DeleteParams, PostParams};
    use parking_lot::Mutex;
    use serde_json::json;

    fn pod(name: &str, owner: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "labels": {"app": "web"},
            "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": owner,
                                 "controller": true}]},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}))
        .unwrap()
    }

    #[tokio::test]
    async fn the_cache_follows_the_store_and_reports_changes_in_order() {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let store = server.store();
        let pods = store.api::<Pod>();
        pods.create(Some("default"), &pod("before", "rs1"), &PostParams::default()).unwrap();
        let informer: Informer<PodInfo> = Informer::with_label_index(Gvr::of::<Pod>());
        let seen = Arc::new(Mutex::new(Vec::new()));
        {
            let seen = seen.clone();
            informer.subscribe(move |change| {
                let kind = if change.is_delete() { "-" } else { "+" };
                seen.lock().push(format!("{kind}{}", change.object().meta.name));
            });
        }
        let shutdown = CancellationToken::new();
        tokio::spawn(informer.clone().run(store.clone(), shutdown.clone()));
        informer.wait_listed().await;
        let created = pods.create(Some("default"), &pod("after", "rs1"), &PostParams::default()).unwrap();
        let rv: u64 = created.metadata.resource_version.unwrap().parse().unwrap();
        informer.wait_for_rv(rv, Duration::from_secs(30)).await;
        assert_eq!(informer.owned_by("rs1").len(), 2);
        assert_eq!(informer.labelled(Some("default"), "app", "web").len(), 2);
        pods.delete(Some("default"), "before", &DeleteParams::default()).unwrap();
        informer.wait_for_rv(store.resource_version(), Duration::from_secs(30)).await;
        assert_eq!(informer.owned_by("rs1").len(), 1);
        assert!(informer.get("default/before").is_none());
        assert_eq!(*seen.lock(), vec!["+before", "+after", "-before"]);
        shutdown.cancel();
    }

    #[tokio::test]
    async fn after_a_compaction_the_relist_reports_what_the_watch_missed() {
        let server = ApiServer::start(ApiServerConfig::default()).await.unwrap();
        let store = server.store();
        let pods = store.api::<Pod>();
        pods.create(Some("default"), &pod("doomed", "rs1"), &PostParams::default()).unwrap();
        let informer: Informer<PodInfo> = Informer::new(Gvr::of::<Pod>());
        let deleted = Arc::new(Mutex::new(Vec::new()));
        {
            let deleted = deleted.clone();
            informer.subscribe(move |change| {
                if change.is_delete() {
                    deleted.lock().push(change.object().meta.name.to_string());
                }
            });
        }
        // Listed, then the watch is cut while a delete happens and the history is compacted.
        informer.relist(&store).await.unwrap();
        pods.delete(Some("default"), "doomed", &DeleteParams::default()).unwrap();
        server.faults().compact();
        let listed_rv = informer.synced_rv();
        let shutdown = CancellationToken::new();
        // The watch from the listed RV gets 410 Expired; the relist reports the deletion.
        let runner = informer.clone();
        tokio::spawn(async move {
            tokio::select! {
                () = shutdown.cancelled() => {}
                () = async {
                    runner.watch_from(&store, listed_rv).await;
                    runner.relist(&store).await.unwrap();
                } => {}
            }
        });
        tokio::time::timeout(Duration::from_secs(30), async {
            while deleted.lock().is_empty() {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await
        .unwrap();
        assert_eq!(*deleted.lock(), vec!["doomed".to_owned()]);
        assert!(informer.is_empty());
    }
}
