//! Kubernetes Events about nodes and the NodeVersion, published in the background so that a slow
//! or failing Event write never delays a rollout step.
//!
//! # Guarantees
//! - An Event is published only within the leadership term that was current when it was queued:
//!   queued without a term, or still queued when the term ends, it is dropped.
//! - A repeat of an Event (same type, reason, action, regarding and related object) within
//!   [`SERIES_TTL`] continues its series only if its message is the same; a changed message starts
//!   a new Event, so every message reported is visible with its own count and times.

use crate::leadership::{Leadership, Term};
use crate::policy::Reason;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::Event as K8sEvent;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use serde_json::json;
use std::collections::HashMap;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Events waiting to be published; beyond this, new ones are dropped (and logged) rather than
/// slowing the controller down.
const QUEUE: usize = 4096;
/// How long after its last occurrence an Event can still be continued as a series (client-go's
/// and kube's recorders use six minutes too).
const SERIES_TTL: Duration = Duration::from_secs(6 * 60);
/// Series remembered at once. kube's `Recorder` remembers every Event for six minutes, megabytes
/// at a large rollout's pace; past this many, the oldest series is forgotten, and a repeat of it
/// starts a new Event.
const SERIES_CAPACITY: usize = 512;
const CONTROLLER_NAME: &str = "update-operator";
/// Event notes are limited to 1 kB.
const MAX_NOTE: usize = 1000;

/// A handle to the background publisher.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<Pending>,
    leadership: Leadership,
}

/// An Event to publish.
#[derive(Debug, Clone)]
struct Pending {
    /// The term it was queued in.
    term: Term,
    regarding: ObjectReference,
    related: Option<ObjectReference>,
    warning: bool,
    reason: String,
    action: String,
    note: String,
}

impl Events {
    /// Starts the publisher task, publishing within the terms of `leadership`; it ends when every
    /// handle is dropped.
    pub fn start(client: Client, instance: Option<String>, leadership: Leadership) -> Events {
        let (queue, mut rx) = mpsc::channel::<Pending>(QUEUE);
        let mut publisher = Publisher {
            client,
            instance: instance.unwrap_or_else(|| CONTROLLER_NAME.to_owned()),
            series: SeriesCache::new(SERIES_CAPACITY, SERIES_TTL),
        };
        tokio::spawn(async move {
            while let Some(event) = rx.recv().await {
                match event.term.clone().fence(publisher.publish(&event)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => {
                        tracing::warn!(%error, reason = %event.reason, object = ?event.regarding.name, "could not publish an Event")
                    }
                    Err(fenced) => {
                        tracing::debug!(%fenced, reason = %event.reason, object = ?event.regarding.name, "Event dropped")
                    }
                }
            }
        });
        Events { queue, leadership }
    }

    /// Queues an Event about `reference`. `related` names a second object the Event is about (the
    /// Node, for Events on the NodeVersion); Events that differ in it are not folded into one
    /// series.
    pub fn publish(
        &self,
        reference: ObjectReference,
        related: Option<ObjectReference>,
        reason: Reason,
        message: String,
        action: &str,
    ) {
        self.publish_named(reference, related, reason, reason.is_warning(), message, action);
    }

    /// Queues an Event whose severity is not its reason's own (a NodeOp's, a scaling group's, the preflight's).
    pub fn publish_named(
        &self,
        reference: ObjectReference,
        related: Option<ObjectReference>,
        reason: Reason,
        warning: bool,
        message: String,
        action: &str,
    ) {
        let Some(term) = self.leadership.current() else {
            tracing::debug!(%reason, "not leading; Event dropped");
            return;
        };
        let event = Pending {
            term,
            regarding: reference,
            related,
            warning,
            reason: reason.to_string(),
            action: action.to_owned(),
            note: shared::protocol::cut(&message, MAX_NOTE).to_owned(),
        };
        if self.queue.try_send(event).is_err() {
            tracing::warn!(%reason, "the Event queue is full; an Event was dropped");
        }
    }
}

/// What makes two Events candidates for one series: as kube's recorder, everything but the note
/// and the time. A series continues only while the note stays the same.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct SeriesKey {
    warning: bool,
    reason: String,
    action: String,
    regarding: (Option<String>, Option<String>, Option<String>, Option<String>),
    related: Option<(Option<String>, Option<String>, Option<String>)>,
}

impl SeriesKey {
    fn of(event: &Pending) -> SeriesKey {
        let r = &event.regarding;
        SeriesKey {
            warning: event.warning,
            reason: event.reason.clone(),
            action: event.action.clone(),
            regarding: (r.kind.clone(), r.namespace.clone(), r.name.clone(), r.uid.clone()),
            related: event.related.as_ref().map(|r| (r.kind.clone(), r.namespace.clone(), r.name.clone())),
        }
    }
}

/// A published Event that a repeat continues.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Series {
    namespace: String,
    name: String,
    /// The Event's message: a repeat with another one starts a new series.
    note: String,
    count: i32,
    last: Instant,
}

/// The series published lately, at most `capacity` of them, each for `ttl` after its last
/// occurrence.
#[derive(Debug)]
struct SeriesCache {
    entries: HashMap<SeriesKey, Series>,
    capacity: usize,
    ttl: Duration,
}

impl SeriesCache {
    fn new(capacity: usize, ttl: Duration) -> SeriesCache {
        SeriesCache { entries: HashMap::new(), capacity: capacity.max(1), ttl }
    }

    /// The live series an Event with `key` and `note` continues, if any.
    fn find(&self, key: &SeriesKey, note: &str, now: Instant) -> Option<&Series> {
        self.entries.get(key).filter(|s| s.note == note && now.saturating_duration_since(s.last) < self.ttl)
    }

    /// Remembers `series` under `key`, forgetting expired series and, when full, the oldest.
    fn remember(&mut self, key: SeriesKey, series: Series, now: Instant) {
        if !self.entries.contains_key(&key) && self.entries.len() >= self.capacity {
            let ttl = self.ttl;
            self.entries.retain(|_, s| now.saturating_duration_since(s.last) < ttl);
            if self.entries.len() >= self.capacity {
                let oldest = self.entries.iter().min_by_key(|(_, s)| s.last).map(|(k, _)| k.clone());
                if let Some(oldest) = oldest {
                    self.entries.remove(&oldest);
                }
            }
        }
        self.entries.insert(key, series);
    }
}

struct Publisher {
    client: Client,
    instance: String,
    series: SeriesCache,
}

impl Publisher {
    async fn publish(&mut self, event: &Pending) -> Result<(), kube::Error> {
        let key = SeriesKey::of(event);
        let now = Instant::now();
        let time = Timestamp::now();
        if let Some(series) = self.series.find(&key, &event.note, now).cloned() {
            let count = series.count + 1;
            let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &series.namespace);
            let patch = json!({"series": {"count": count, "lastObservedTime": MicroTime(time)}});
            match api.patch(&series.name, &PatchParams::default(), &Patch::Merge(&patch)).await {
                Ok(_) => {
                    self.series.remember(key, Series { count, last: now, ..series }, now);
                    return Ok(());
                }
                // Expired or deleted meanwhile: start a new Event.
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(error) => return Err(error),
            }
        }
        let namespace = event.regarding.namespace.clone().unwrap_or_else(|| "default".to_owned());
        let object = K8sEvent {
            metadata: ObjectMeta {
                namespace: Some(namespace.clone()),
                name: Some(format!(
                    "{}.{:x}",
                    event.regarding.name.as_deref().unwrap_or(CONTROLLER_NAME),
                    time.as_nanosecond()
                )),
                ..ObjectMeta::default()
            },
            action: Some(event.action.clone()),
            reason: Some(event.reason.clone()),
            note: Some(event.note.clone()),
            type_: Some(if event.warning { "Warning" } else { "Normal" }.to_owned()),
            event_time: Some(MicroTime(time)),
            regarding: Some(event.regarding.clone()),
            related: event.related.clone(),
            reporting_controller: Some(CONTROLLER_NAME.to_owned()),
            reporting_instance: Some(self.instance.clone()),
            ..K8sEvent::default()
        };
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &namespace);
        let created = api.create(&PostParams::default(), &object).await?;
        let name = created.metadata.name.unwrap_or_default();
        let note = event.note.clone();
        self.series.remember(key, Series { namespace, name, note, count: 1, last: now }, now);
        Ok(())
    }
}

/// A reference to a Node, for Events.
pub fn node_reference(name: &str, uid: Option<String>) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some(name.into()),
        uid,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(reason: &str, node: &str) -> SeriesKey {
        SeriesKey::of(&Pending {
            term: Leadership::new().begin(tokio::time::Instant::now() + Duration::from_secs(60)),
            regarding: node_reference(node, None),
            related: None,
            warning: false,
            reason: reason.into(),
            action: "Update".into(),
            note: "a note".into(),
        })
    }

    const NOTE: &str = "a note";

    fn series(name: &str, last: Instant) -> Series {
        Series { namespace: "default".into(), name: name.into(), note: NOTE.into(), count: 1, last }
    }

    #[test]
    fn a_repeat_within_the_ttl_continues_the_series_and_a_later_one_does_not() {
        let start = Instant::now();
        let mut cache = SeriesCache::new(8, Duration::from_secs(360));
        cache.remember(key("Draining", "n1"), series("n1.1", start), start);
        assert_eq!(
            cache.find(&key("Draining", "n1"), NOTE, start + Duration::from_secs(359)).map(|s| s.name.as_str()),
            Some("n1.1")
        );
        assert_eq!(cache.find(&key("Draining", "n1"), NOTE, start + Duration::from_secs(360)), None);
        assert_eq!(cache.find(&key("Draining", "n2"), NOTE, start), None);
        assert_eq!(cache.find(&key("Drained", "n1"), NOTE, start), None);
    }

    #[test]
    fn a_repeat_with_another_message_does_not_continue_the_series() {
        let start = Instant::now();
        let mut cache = SeriesCache::new(8, Duration::from_secs(360));
        cache.remember(key("InvalidSpec", "v"), series("v.1", start), start);
        assert!(cache.find(&key("InvalidSpec", "v"), NOTE, start).is_some());
        assert_eq!(cache.find(&key("InvalidSpec", "v"), "rollout.soakTime: -1s is negative", start), None);
    }

    #[test]
    fn the_cache_never_holds_more_than_its_capacity_and_forgets_the_oldest_first() {
        let start = Instant::now();
        let mut cache = SeriesCache::new(3, Duration::from_secs(360));
        for i in 0..10u64 {
            let at = start + Duration::from_secs(i);
            cache.remember(key("Staged", &format!("n{i}")), series(&format!("n{i}"), at), at);
            assert!(cache.entries.len() <= 3);
        }
        let now = start + Duration::from_secs(10);
        assert!(cache.find(&key("Staged", "n9"), NOTE, now).is_some());
        assert!(cache.find(&key("Staged", "n7"), NOTE, now).is_some());
        assert!(cache.find(&key("Staged", "n6"), NOTE, now).is_none());
        // Continuing a remembered series never evicts another.
        cache.remember(key("Staged", "n8"), series("n8", now), now);
        assert!(cache.find(&key("Staged", "n7"), NOTE, now).is_some());
    }

    #[test]
    fn expired_series_go_before_live_ones() {
        let start = Instant::now();
        let mut cache = SeriesCache::new(2, Duration::from_secs(60));
        cache.remember(key("Staged", "old"), series("old", start), start);
        let later = start + Duration::from_secs(50);
        cache.remember(key("Staged", "live"), series("live", later), later);
        let now = start + Duration::from_secs(70);
        cache.remember(key("Staged", "new"), series("new", now), now);
        assert!(cache.find(&key("Staged", "live"), NOTE, now).is_some());
        assert!(cache.find(&key("Staged", "new"), NOTE, now).is_some());
        assert_eq!(cache.entries.len(), 2);
    }
}
