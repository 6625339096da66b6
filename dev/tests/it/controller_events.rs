//! The controller's Event publisher against the API server: Events on cluster-scoped objects go to
//! `default`, a repeat continues the Event's series, and Events about another related object, with
//! another reason or with another message are Events of their own; nothing is published outside a
//! leadership term.

use controller::events::{Events, node_reference};
use controller::leadership::Leadership;
use controller::policy::Reason;
use dev::apiserver::{ApiServer, ApiServerConfig};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};
use std::time::Duration;

/// A leadership with a term that outlasts the test.
fn leading() -> Leadership {
    let leadership = Leadership::new();
    leadership.begin(tokio::time::Instant::now() + Duration::from_secs(3600));
    leadership
}

#[tokio::test]
async fn repeats_fold_into_a_series_and_other_events_stand_alone() {
    let server = server().await;
    let client = server.client();
    let events = Events::start(client.clone(), Some("replica-a".into()), leading());
    let version = || node_reference("constellation-version", None);
    for _ in 0..3 {
        events.publish(version(), Some(node_reference("n1", None)), Reason::Draining, "draining n1".into(), "Drain");
    }
    events.publish(version(), Some(node_reference("n2", None)), Reason::Draining, "draining n2".into(), "Drain");
    events.publish(node_reference("n1", None), None, Reason::RebootRequested, "drained".into(), "Reboot");
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = || async { api.list(&ListParams::default()).await.unwrap().items };
    eventually("five publishes as three Events", || async {
        let items = list().await;
        items.len() == 3 && items.iter().any(|e| e.series.as_ref().is_some_and(|s| s.count == 3))
    })
    .await;
    let items = list().await;
    let n1 = items.iter().find(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some("n1")).unwrap();
    assert_eq!(n1.reason.as_deref(), Some("Draining"));
    assert_eq!(n1.series.as_ref().map(|s| s.count), Some(3));
    assert_eq!(n1.reporting_controller.as_deref(), Some("update-operator"));
    assert_eq!(n1.reporting_instance.as_deref(), Some("replica-a"));
    let n2 = items.iter().find(|e| e.related.as_ref().and_then(|r| r.name.as_deref()) == Some("n2")).unwrap();
    assert!(n2.series.is_none());
    let drained = items.iter().find(|e| e.reason.as_deref() == Some("RebootRequested")).unwrap();
    assert_eq!(drained.regarding.as_ref().and_then(|r| r.kind.as_deref()), Some("Node"));
    assert_eq!(drained.type_.as_deref(), Some("Normal"));
}

#[tokio::test]
async fn a_repeat_with_a_changed_message_starts_a_new_event() {
    let server = server().await;
    let client = server.client();
    let events = Events::start(client.clone(), None, leading());
    let version = || node_reference("constellation-version", None);
    for message in ["rollout.maintenanceWindow.schedule: bad cron", "rollout.maintenanceWindow.timeZone: bad zone"] {
        for _ in 0..2 {
            events.publish(version(), None, Reason::InvalidSpec, message.into(), "Validate");
        }
    }
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    let list = || async { api.list(&ListParams::default()).await.unwrap().items };
    eventually("two Events of two publishes each", || async {
        let items = list().await;
        items.len() == 2 && items.iter().all(|e| e.series.as_ref().is_some_and(|s| s.count == 2))
    })
    .await;
    let mut notes: Vec<String> = list().await.into_iter().filter_map(|e| e.note).collect();
    notes.sort();
    assert_eq!(
        notes,
        vec!["rollout.maintenanceWindow.schedule: bad cron", "rollout.maintenanceWindow.timeZone: bad zone"]
    );
}

#[tokio::test]
async fn events_are_published_only_within_a_leadership_term() {
    let server = server().await;
    let client = server.client();
    let leadership = Leadership::new();
    let events = Events::start(client.clone(), None, leadership.clone());
    let node = || node_reference("n1", None);
    events.publish(node(), None, Reason::Draining, "before the term".into(), "Drain");
    leadership.begin(tokio::time::Instant::now() + Duration::from_secs(3600));
    events.publish(node(), None, Reason::Draining, "during the term".into(), "Drain");
    leadership.end();
    events.publish(node(), None, Reason::Draining, "after the term".into(), "Drain");
    leadership.begin(tokio::time::Instant::now() + Duration::from_secs(3600));
    events.publish(node(), None, Reason::RebootRequested, "marker".into(), "Reboot");
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    eventually("the marker Event", || async {
        api.list(&ListParams::default()).await.unwrap().items.iter().any(|e| e.note.as_deref() == Some("marker"))
    })
    .await;
    let notes: Vec<String> =
        api.list(&ListParams::default()).await.unwrap().items.into_iter().filter_map(|e| e.note).collect();
    assert!(!notes.iter().any(|n| n == "before the term" || n == "after the term"), "{notes:?}");
}

/// A server with bookmarks every second, as the API server's own tests start it.
async fn server() -> ApiServer {
    let config = ApiServerConfig { bookmark_interval: Duration::from_secs(1), ..ApiServerConfig::default() };
    ApiServer::start(config).await.expect("the test server starts")
}

/// Polls `check` until it returns true; panics after a minute.
async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while tokio::time::Instant::now() < deadline {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for: {what}");
}
