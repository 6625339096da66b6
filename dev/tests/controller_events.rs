//! The controller's Event publisher against the API server: Events on cluster-scoped objects go to
//! `default`, a repeat continues the Event's series, and Events about another related object, or
//! with another reason, are Events of their own.

mod common;

use common::*;
use controller::events::{Events, node_reference};
use controller::policy::Reason;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams};

#[tokio::test]
async fn repeats_fold_into_a_series_and_other_events_stand_alone() {
    let server = server().await;
    let client = server.client();
    let events = Events::start(client.clone(), Some("replica-a".into()));
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
