//! Store events (the history watches replay) and the items one watcher receives.

use crate::object::{StoredObject, set_resource_version};
use bytes::Bytes;
use std::sync::{Arc, OnceLock};

/// The type of a watch event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// ADDED.
    Added,
    /// MODIFIED.
    Modified,
    /// DELETED.
    Deleted,
}

impl EventType {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            EventType::Added => "ADDED",
            EventType::Modified => "MODIFIED",
            EventType::Deleted => "DELETED",
        }
    }
}

/// One change of one object.
#[derive(Debug)]
pub struct StoreEvent {
    /// The resourceVersion of the change.
    pub rv: u64,
    /// ADDED, MODIFIED or DELETED.
    pub ty: EventType,
    /// The new object; for DELETED the last version, stamped with `rv`.
    pub object: Arc<StoredObject>,
    /// The version before the change (MODIFIED and DELETED).
    pub prev: Option<Arc<StoredObject>>,
    prev_at_rv: OnceLock<Bytes>,
}

impl StoreEvent {
    /// A new event.
    pub fn new(rv: u64, ty: EventType, object: Arc<StoredObject>, prev: Option<Arc<StoredObject>>) -> Self {
        StoreEvent { rv, ty, object, prev, prev_at_rv: OnceLock::new() }
    }

    /// The previous object stamped with this event's resourceVersion: what a watcher whose selector stops
    /// matching receives as DELETED. Computed once, whatever the number of such watchers.
    pub fn previous_at_rv(&self) -> Bytes {
        self.prev_at_rv
            .get_or_init(|| {
                let Some(prev) = &self.prev else { return self.object.bytes.clone() };
                let mut value = prev.value();
                set_resource_version(&mut value, self.rv);
                Bytes::from(serde_json::to_vec(&value).unwrap_or_default())
            })
            .clone()
    }
}

/// One event as one watcher receives it.
#[derive(Debug, Clone)]
pub struct WatchItem {
    /// The event type this watcher sees (a MODIFIED can be an ADDED or DELETED to a selector).
    pub ty: EventType,
    /// The resourceVersion of the event.
    pub rv: u64,
    /// The object JSON.
    pub bytes: Bytes,
}

impl WatchItem {
    /// The item for `object` as it is stored.
    pub fn of(ty: EventType, object: &StoredObject) -> Self {
        WatchItem { ty, rv: object.rv, bytes: object.bytes.clone() }
    }
}
