//! Watcher fan-out: which watchers an event goes to, and as what.
//!
//! # Guarantees
//! - Watchers are indexed by `metadata.name`, by pod `spec.nodeName` and by namespace (the most selective key
//!   their selectors pin), so an event only visits the watchers that can match it: 5000 per-node pod watchers
//!   cost two hash lookups per pod event, not 5000 selector evaluations.
//! - Selector transitions follow upstream's `convertToWatchEvent`: starts matching → ADDED, stops matching →
//!   DELETED with the previous body at the event's resourceVersion.
//! - A watcher whose buffer is full is dropped: its stream ends after the buffered events, without an ERROR.

use super::event::{EventType, StoreEvent, WatchItem};
use crate::object::Filter;
use crate::resource::ResourceType;
use crate::selector::FieldRef;
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::mpsc;

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
enum Bucket {
    All,
    Namespace(Box<str>),
    Name(Box<str>),
    Node(Box<str>),
}

struct Entry {
    bucket: Bucket,
    filter: Arc<Filter>,
    after_rv: u64,
    tx: mpsc::Sender<WatchItem>,
}

/// The live watchers of one kind.
#[derive(Default)]
pub struct Watchers {
    entries: HashMap<u64, Entry>,
    buckets: HashMap<Bucket, Vec<u64>>,
}

/// What one dispatch did, for metrics.
#[derive(Debug, Default, Clone, Copy)]
pub struct Dispatched {
    /// Events handed to watchers.
    pub delivered: u64,
    /// Watchers closed because their buffer was full.
    pub slow_closed: u64,
}

impl Watchers {
    /// Adds a watcher that receives events with `rv > after_rv` matching `filter`.
    pub fn add(&mut self, id: u64, rt: &ResourceType, filter: Arc<Filter>, after_rv: u64, tx: mpsc::Sender<WatchItem>) {
        let bucket = if let Some(name) = filter.fields.pinned(FieldRef::Name) {
            Bucket::Name(name.into())
        } else if let Some(node) = rt.node_name_field().and_then(|i| filter.fields.pinned(FieldRef::Custom(i))) {
            Bucket::Node(node.into())
        } else if let Some(ns) = &filter.namespace {
            Bucket::Namespace(ns.as_str().into())
        } else {
            Bucket::All
        };
        self.buckets.entry(bucket.clone()).or_default().push(id);
        self.entries.insert(id, Entry { bucket, filter, after_rv, tx });
    }

    /// Removes a watcher (its stream ends once it has read what was sent).
    pub fn remove(&mut self, id: u64) {
        if let Some(entry) = self.entries.remove(&id)
            && let Some(ids) = self.buckets.get_mut(&entry.bucket)
        {
            ids.retain(|i| *i != id);
            if ids.is_empty() {
                self.buckets.remove(&entry.bucket);
            }
        }
    }

    /// Drops every watcher; returns how many there were.
    pub fn close_all(&mut self) -> usize {
        let count = self.entries.len();
        self.entries.clear();
        self.buckets.clear();
        count
    }

    /// Number of live watchers.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// True when there is no watcher.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sends `event` to every watcher it concerns.
    pub fn dispatch(&mut self, rt: &ResourceType, event: &StoreEvent) -> Dispatched {
        let mut dispatched = Dispatched::default();
        if self.entries.is_empty() {
            return dispatched;
        }
        let index = &event.object.index;
        let mut buckets =
            vec![Bucket::All, Bucket::Namespace(index.namespace.clone()), Bucket::Name(index.name.clone())];
        if let Some(field) = rt.node_name_field() {
            buckets.push(Bucket::Node(index.field(field).into()));
            if let Some(prev) = &event.prev {
                let before = prev.index.field(field);
                if before != index.field(field) {
                    buckets.push(Bucket::Node(before.into()));
                }
            }
        }
        let mut dropped = Vec::new();
        for bucket in &buckets {
            let Some(ids) = self.buckets.get(bucket) else { continue };
            for id in ids {
                let Some(entry) = self.entries.get(id) else { continue };
                if event.rv <= entry.after_rv {
                    continue;
                }
                let Some(item) = deliver(event, &entry.filter) else { continue };
                match entry.tx.try_send(item) {
                    Ok(()) => dispatched.delivered += 1,
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        dispatched.slow_closed += 1;
                        dropped.push(*id);
                    }
                    Err(mpsc::error::TrySendError::Closed(_)) => dropped.push(*id),
                }
            }
        }
        for id in dropped {
            self.remove(id);
        }
        dispatched
    }
}

/// What a watcher with `filter` sees of `event`, if anything.
pub fn deliver(event: &StoreEvent, filter: &Filter) -> Option<WatchItem> {
    let now = filter.matches(&event.object.index);
    match event.ty {
        EventType::Added | EventType::Deleted => now.then(|| WatchItem::of(event.ty, &event.object)),
        EventType::Modified => {
            let before = event.prev.as_ref().is_some_and(|p| filter.matches(&p.index));
            match (before, now) {
                (true, true) => Some(WatchItem::of(EventType::Modified, &event.object)),
                (false, true) => Some(WatchItem::of(EventType::Added, &event.object)),
                (true, false) => {
                    Some(WatchItem { ty: EventType::Deleted, rv: event.rv, bytes: event.previous_at_rv() })
                }
                (false, false) => None,
            }
        }
    }
}
