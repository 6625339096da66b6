//! The store: every object of every kind, the global resourceVersion, per-kind event history and watchers.
//!
//! # Invariants
//! - One global, strictly increasing resourceVersion across all kinds; every committed change (including every
//!   DELETE) takes the next one.
//! - Every change is recorded in its kind's history before it is dispatched, and both happen under the store
//!   lock, so a watcher registered at RV R sees exactly the changes after R: replayed from history, then live.
//! - `compacted_through` is the highest RV whose event may be gone from the history: a watch from below it
//!   answers 410.

pub mod event;
mod objects;
mod snapshots;
pub mod watchers;

pub use objects::Objects;
pub use snapshots::SnapshotCache;

use super::object::{Filter, ObjectKey, StoredObject, set_resource_version};
use super::resource::ResourceType;
use event::{EventType, StoreEvent, WatchItem};
use serde_json::Value;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use tokio::sync::{mpsc, watch};
use watchers::Watchers;

/// One kind's objects, history and watchers.
pub struct KindState {
    /// The current objects.
    pub objects: Objects,
    /// Keys of the current pods by `spec.nodeName` (empty for unscheduled ones), so that per-node lists do not
    /// scan every pod.
    by_node: HashMap<Box<str>, HashSet<ObjectKey>>,
    history: VecDeque<Arc<StoreEvent>>,
    /// Events up to this RV may have been dropped from the history.
    pub compacted_through: u64,
    /// The RV of the kind's latest change (0 before the first).
    pub last_change: u64,
    /// The live watchers.
    pub watchers: Watchers,
}

impl KindState {
    fn unindex_node(&mut self, node: &str, key: &ObjectKey) {
        if let Some(keys) = self.by_node.get_mut(node) {
            keys.remove(key);
            if keys.is_empty() {
                self.by_node.remove(node);
            }
        }
    }

    fn new() -> Self {
        KindState {
            objects: Objects::new_sync(),
            by_node: HashMap::new(),
            history: VecDeque::new(),
            compacted_through: 0,
            last_change: 0,
            watchers: Watchers::default(),
        }
    }
}

/// A registered watcher: the history to replay, then the channel of live events.
pub struct Registration {
    /// The watcher's id (for unregistering).
    pub id: u64,
    /// Events after the requested RV that happened before the registration.
    pub replay: Vec<Arc<StoreEvent>>,
    /// Live events.
    pub rx: mpsc::Receiver<WatchItem>,
}

/// Counters of the store, for metrics.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct StoreCounters {
    /// Watch events handed to watchers.
    pub watch_events: u64,
    /// Watchers closed because they did not keep up.
    pub slow_watchers_closed: u64,
}

/// Everything behind the store lock.
pub struct State {
    /// The current global resourceVersion.
    pub rv: u64,
    kinds: HashMap<Arc<str>, KindState>,
    /// Snapshots for paginated lists.
    pub snapshots: SnapshotCache,
    next_watcher: u64,
    history_limit: usize,
    watch_buffer: usize,
    rv_tx: watch::Sender<u64>,
    /// Counters.
    pub counters: StoreCounters,
}

impl State {
    /// An empty store.
    pub fn new(history_limit: usize, watch_buffer: usize, snapshots: SnapshotCache) -> (Self, watch::Receiver<u64>) {
        let (rv_tx, rv_rx) = watch::channel(0);
        let state = State {
            rv: 0,
            kinds: HashMap::new(),
            snapshots,
            next_watcher: 0,
            history_limit: history_limit.max(1),
            watch_buffer: watch_buffer.max(1),
            rv_tx,
            counters: StoreCounters::default(),
        };
        (state, rv_rx)
    }

    /// The state of a kind, created on first use.
    pub fn kind(&mut self, rt: &ResourceType) -> &mut KindState {
        self.kinds.entry(rt.store_id.clone()).or_insert_with(KindState::new)
    }

    /// The objects of a kind (empty if none was ever stored).
    pub fn objects(&self, rt: &ResourceType) -> Objects {
        self.kinds.get(&rt.store_id).map(|k| k.objects.clone()).unwrap_or_else(Objects::new_sync)
    }

    /// The current pods on `node` (in key order), from the node index; `None` for kinds without one.
    pub fn objects_on_node(&self, rt: &ResourceType, node: &str) -> Option<Vec<(ObjectKey, Arc<StoredObject>)>> {
        rt.node_name_field()?;
        let Some(kind) = self.kinds.get(&rt.store_id) else { return Some(Vec::new()) };
        let mut objects: Vec<(ObjectKey, Arc<StoredObject>)> = kind
            .by_node
            .get(node)
            .map(|keys| keys.iter().filter_map(|k| kind.objects.get(k).map(|o| (k.clone(), o.clone()))).collect())
            .unwrap_or_default();
        objects.sort_by(|a, b| a.0.cmp(&b.0));
        Some(objects)
    }

    /// The RV of the latest change of a kind (0 when it never changed): a cache of the kind that reached this RV
    /// shows every object the store holds.
    pub fn last_change(&self, rt: &ResourceType) -> u64 {
        self.kinds.get(&rt.store_id).map_or(0, |k| k.last_change)
    }

    /// The current version of an object.
    pub fn get(&self, rt: &ResourceType, key: &ObjectKey) -> Option<Arc<StoredObject>> {
        self.kinds.get(&rt.store_id)?.objects.get(key).cloned()
    }

    /// Stores `object` under `key` at the next RV (which is written into the object), records and dispatches
    /// the ADDED or MODIFIED event.
    pub fn put(&mut self, rt: &ResourceType, key: ObjectKey, object: &mut Value) -> Arc<StoredObject> {
        let rv = self.rv + 1;
        set_resource_version(object, rv);
        let stored = StoredObject::new(rt, object, rv);
        let prev = self.kind(rt).objects.get(&key).cloned();
        let ty = if prev.is_some() { EventType::Modified } else { EventType::Added };
        if let Some(field) = rt.node_name_field() {
            let kind = self.kind(rt);
            if let Some(prev) = &prev {
                kind.unindex_node(prev.index.field(field), &key);
            }
            kind.by_node.entry(stored.index.field(field).into()).or_default().insert(key.clone());
        }
        self.kind(rt).objects.insert_mut(key, stored.clone());
        self.record(rt, StoreEvent::new(rv, ty, stored.clone(), prev));
        stored
    }

    /// Removes the object under `key` at the next RV and records the DELETED event. Returns the last version
    /// stamped with that RV.
    pub fn remove(&mut self, rt: &ResourceType, key: &ObjectKey) -> Option<Arc<StoredObject>> {
        let prev = self.kind(rt).objects.get(key).cloned()?;
        let rv = self.rv + 1;
        let deleted = prev.restamped(rt, rv);
        if let Some(field) = rt.node_name_field() {
            self.kind(rt).unindex_node(prev.index.field(field), key);
        }
        self.kind(rt).objects.remove_mut(key);
        self.record(rt, StoreEvent::new(rv, EventType::Deleted, deleted.clone(), Some(prev)));
        Some(deleted)
    }

    fn record(&mut self, rt: &ResourceType, event: StoreEvent) {
        let rv = event.rv;
        let limit = self.history_limit;
        let kind = self.kind(rt);
        let event = Arc::new(event);
        kind.last_change = rv;
        kind.history.push_back(event.clone());
        while kind.history.len() > limit {
            if let Some(dropped) = kind.history.pop_front() {
                kind.compacted_through = dropped.rv;
            }
        }
        let dispatched = kind.watchers.dispatch(rt, &event);
        self.counters.watch_events += dispatched.delivered;
        self.counters.slow_watchers_closed += dispatched.slow_closed;
        self.rv = rv;
        self.rv_tx.send_replace(rv);
    }

    /// Registers a watcher of `rt` for changes after `from_rv`. Fails with the kind's compaction RV when the
    /// history no longer reaches back to `from_rv`.
    pub fn register_watch(
        &mut self,
        rt: &ResourceType,
        filter: Arc<Filter>,
        from_rv: u64,
    ) -> Result<Registration, u64> {
        let buffer = self.watch_buffer;
        let current = self.rv;
        self.next_watcher += 1;
        let id = self.next_watcher;
        let kind = self.kind(rt);
        if from_rv < kind.compacted_through {
            return Err(kind.compacted_through);
        }
        let replay: Vec<Arc<StoreEvent>> = kind.history.iter().filter(|e| e.rv > from_rv).cloned().collect();
        let (tx, rx) = mpsc::channel(buffer);
        kind.watchers.add(id, rt, filter, from_rv.max(current), tx);
        Ok(Registration { id, replay, rx })
    }

    /// Unregisters a watcher.
    pub fn unregister_watch(&mut self, store_id: &Arc<str>, id: u64) {
        if let Some(kind) = self.kinds.get_mut(store_id) {
            kind.watchers.remove(id);
        }
    }

    /// Ends every watch; returns how many there were.
    pub fn close_all_watches(&mut self) -> usize {
        self.kinds.values_mut().map(|k| k.watchers.close_all()).sum()
    }

    /// Number of live watchers over all kinds.
    pub fn watcher_count(&self) -> usize {
        self.kinds.values().map(|k| k.watchers.len()).sum()
    }

    /// Drops every kind's history and every list snapshot: a watch or continue from before now answers 410.
    pub fn compact(&mut self) {
        let rv = self.rv;
        for kind in self.kinds.values_mut() {
            kind.history.clear();
            kind.compacted_through = rv;
        }
        self.snapshots.clear();
    }

    /// Drops the history and watchers of a kind that is no longer served (a deleted CRD).
    pub fn forget_kind(&mut self, store_id: &Arc<str>) {
        self.kinds.remove(store_id);
    }
}
