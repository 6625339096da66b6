//! Kubernetes Events about nodes and the NodeVersion, published in the background so that a slow
//! or failing Event write never delays a rollout step.

use crate::policy::Reason;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use tokio::sync::mpsc;

/// Events waiting to be published; beyond this, new ones are dropped (and logged) rather than
/// slowing the controller down.
const QUEUE: usize = 4096;

/// A handle to the background publisher.
#[derive(Clone)]
pub struct Events {
    queue: mpsc::Sender<(ObjectReference, Event)>,
}

impl Events {
    /// Starts the publisher task; it ends when every handle is dropped.
    pub fn start(client: Client, instance: Option<String>) -> Events {
        let recorder = Recorder::new(client, Reporter { controller: "update-operator".into(), instance });
        let (queue, mut rx) = mpsc::channel::<(ObjectReference, Event)>(QUEUE);
        tokio::spawn(async move {
            while let Some((reference, event)) = rx.recv().await {
                if let Err(error) = recorder.publish(&event, &reference).await {
                    tracing::warn!(%error, reason = %event.reason, object = ?reference.name, "could not publish an Event");
                }
            }
        });
        Events { queue }
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
        let event = Event {
            type_: if reason.is_warning() { EventType::Warning } else { EventType::Normal },
            reason: reason.to_string(),
            note: Some(cut(message)),
            action: action.to_owned(),
            secondary: related,
        };
        if self.queue.try_send((reference, event)).is_err() {
            tracing::warn!(%reason, "the Event queue is full; an Event was dropped");
        }
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

/// Event notes are limited to 1 kB.
fn cut(mut message: String) -> String {
    const MAX: usize = 1000;
    if message.len() > MAX {
        let mut end = MAX;
        while !message.is_char_boundary(end) {
            end -= 1;
        }
        message.truncate(end);
    }
    message
}
