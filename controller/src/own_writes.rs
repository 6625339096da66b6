//! The controller's own writes that the watch has not delivered yet: of Nodes, shared by every part of the
//! controller that writes them (the rollouts' executor and the NodeOp controller), and of NodeVersion statuses
//! (the reconciler's: a status is computed from the previous one, so computing it from a cache that missed the
//! last write would undo that write, losing a step's duration sample, say).
//!
//! # Guarantees
//! - Until the watch delivers a write, [`OwnWrites::freshest`] gives the object the API server returned for it,
//!   to whichever part asks: a node one of them started is seen started by the other at once, so neither decides
//!   on a view that misses the other's disruption (the [`crate::disruption`] gate orders the decisions).
//! - An entry lasts only while the watched object is one the write superseded: once the watch shows any other
//!   resourceVersion (ours, or a later change), the watched object is the newest and the entry goes.

use crate::nodes::SlimNode;
use kube::{Resource, ResourceExt};
use parking_lot::Mutex;
use std::collections::{HashMap, HashSet};

/// One object's writes not delivered yet: the last object the API server returned, and every resourceVersion the
/// writes superseded.
struct Entry<K> {
    superseded: Vec<String>,
    node: Option<K>,
}

/// The writes, by object name (of a cluster-scoped kind).
pub struct OwnWrites<K = SlimNode> {
    entries: Mutex<HashMap<String, Entry<K>>>,
}

impl<K> Default for OwnWrites<K> {
    fn default() -> Self {
        OwnWrites { entries: Mutex::default() }
    }
}

impl<K: Resource + Clone> OwnWrites<K> {
    pub fn new() -> Self {
        OwnWrites::default()
    }

    /// Records a write of `name` that superseded the version `superseded` and returned `written`.
    pub fn record(&self, name: &str, superseded: Option<String>, written: K) {
        let mut entries = self.entries.lock();
        let entry = entries.entry(name.to_owned()).or_insert_with(|| Entry { superseded: Vec::new(), node: None });
        entry.superseded.extend(superseded);
        entry.node = Some(written);
    }

    /// The newest version of `node` the controller knows of: its own write if the watch has not caught up with
    /// it, else the watched object.
    pub fn freshest(&self, node: K) -> K {
        let mut entries = self.entries.lock();
        let name = node.name_any();
        let Some(entry) = entries.get(&name) else { return node };
        let rv = node.resource_version().unwrap_or_default();
        if entry.superseded.contains(&rv)
            && let Some(ours) = &entry.node
        {
            return ours.clone();
        }
        entries.remove(&name);
        node
    }

    /// The nodes with an entry: [`OwnWrites::freshest`] may give another object than the watched one.
    pub fn nodes(&self) -> HashSet<String> {
        self.entries.lock().keys().cloned().collect()
    }

    /// Forgets the entries of nodes that no longer exist.
    pub fn retain(&self, exists: impl Fn(&str) -> bool) {
        self.entries.lock().retain(|n, _| exists(n));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn node(name: &str, rv: &str, unschedulable: bool) -> SlimNode {
        let mut node = SlimNode {
            metadata: ObjectMeta { name: Some(name.into()), resource_version: Some(rv.into()), ..Default::default() },
            ..Default::default()
        };
        node.spec.unschedulable = unschedulable.then_some(true);
        node
    }

    #[test]
    fn a_write_is_seen_until_the_watch_shows_a_newer_version_and_then_forgotten() {
        let writes = OwnWrites::new();
        writes.record("a", Some("1".into()), node("a", "2", true));
        // A second write (another part of the controller, from the first's result) before the watch caught up.
        writes.record("a", Some("2".into()), node("a", "3", false));
        assert_eq!(writes.freshest(node("a", "1", false)).resource_version().as_deref(), Some("3"));
        assert_eq!(writes.freshest(node("a", "2", true)).resource_version().as_deref(), Some("3"));
        assert_eq!(writes.nodes(), HashSet::from(["a".to_owned()]));
        // The watch delivered the last write: the entry goes.
        assert_eq!(writes.freshest(node("a", "3", false)).resource_version().as_deref(), Some("3"));
        assert!(writes.nodes().is_empty());
        // Nodes without writes are given back as watched; gone nodes are forgotten.
        assert_eq!(writes.freshest(node("b", "7", false)).resource_version().as_deref(), Some("7"));
        writes.record("c", Some("1".into()), node("c", "2", true));
        writes.retain(|n| n != "c");
        assert!(writes.nodes().is_empty());
    }
}
