//! Snapshots that paginated lists continue from.
//!
//! A snapshot is a clone of a kind's persistent map: O(1) to take, and it shares every unchanged node with the
//! live map, so holding one costs only what changed since.
//!
//! # Guarantees
//! - A continue token finds its snapshot until the snapshot is older than the TTL (refreshed on every page),
//!   pushed out by newer snapshots of the same kind, or compacted away; then the list answers 410 Expired.

use super::Objects;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Snapshots by (kind, resourceVersion).
pub struct SnapshotCache {
    entries: HashMap<(Arc<str>, u64), (Objects, Instant)>,
    ttl: Duration,
    per_kind: usize,
}

impl SnapshotCache {
    /// A cache keeping snapshots for `ttl` after their last use, at most `per_kind` per kind.
    pub fn new(ttl: Duration, per_kind: usize) -> Self {
        SnapshotCache { entries: HashMap::new(), ttl, per_kind: per_kind.max(1) }
    }

    /// Keeps `objects` as the snapshot of `kind` at `rv`.
    pub fn insert(&mut self, kind: &Arc<str>, rv: u64, objects: Objects) {
        let now = Instant::now();
        self.expire(now);
        self.entries.insert((kind.clone(), rv), (objects, now));
        let mut of_kind: Vec<(u64, Instant)> =
            self.entries.iter().filter(|((k, _), _)| k == kind).map(|((_, rv), (_, used))| (*rv, *used)).collect();
        if of_kind.len() > self.per_kind {
            of_kind.sort_by_key(|(_, used)| *used);
            for (rv, _) in &of_kind[..of_kind.len() - self.per_kind] {
                self.entries.remove(&(kind.clone(), *rv));
            }
        }
    }

    /// The snapshot of `kind` at `rv`, if still kept.
    pub fn get(&mut self, kind: &Arc<str>, rv: u64) -> Option<Objects> {
        let now = Instant::now();
        self.expire(now);
        let (objects, used) = self.entries.get_mut(&(kind.clone(), rv))?;
        *used = now;
        Some(objects.clone())
    }

    /// Forgets every snapshot.
    pub fn clear(&mut self) {
        self.entries.clear();
    }

    /// Number of snapshots kept.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when no snapshot is kept.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn expire(&mut self, now: Instant) {
        let ttl = self.ttl;
        self.entries.retain(|_, (_, used)| now.duration_since(*used) < ttl);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_are_kept_per_kind_up_to_the_limit() {
        let mut cache = SnapshotCache::new(Duration::from_secs(60), 2);
        let pods: Arc<str> = Arc::from("/pods");
        let nodes: Arc<str> = Arc::from("/nodes");
        for rv in 1..=3 {
            cache.insert(&pods, rv, Objects::new_sync());
        }
        cache.insert(&nodes, 1, Objects::new_sync());
        assert!(cache.get(&pods, 1).is_none(), "the oldest snapshot of a kind goes first");
        assert!(cache.get(&pods, 3).is_some());
        assert!(cache.get(&nodes, 1).is_some());
        cache.clear();
        assert!(cache.is_empty());
    }

    #[test]
    fn snapshots_expire_after_the_ttl() {
        let mut cache = SnapshotCache::new(Duration::ZERO, 2);
        let pods: Arc<str> = Arc::from("/pods");
        cache.insert(&pods, 1, Objects::new_sync());
        assert!(cache.get(&pods, 1).is_none());
    }
}
