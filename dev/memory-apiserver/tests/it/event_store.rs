//! One Event store behind core/v1 and events.k8s.io/v1: what one API writes the other reads, lists and watches,
//! with the field names, field selectors and validation of each API version.

use crate::common;

use common::*;
use futures::StreamExt;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Event as CoreEvent;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::events::{Event as RecordedEvent, EventType, Recorder, Reporter};
use serde_json::{Value, json};

/// An events.k8s.io/v1 Event about Node `node`, as a controller writes it.
fn new_event(name: &str, node: &str) -> Event {
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "default"},
        "eventTime": "2026-01-02T03:04:05.000001Z",
        "reportingController": "update-operator", "reportingInstance": "replica-a",
        "action": "Drain", "reason": "Draining", "type": "Normal", "note": format!("draining {node}"),
        "regarding": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": "u-1"},
        "related": {"apiVersion": "v1", "kind": "Pod", "name": "p", "namespace": "ns"}
    }))
    .unwrap()
}

#[tokio::test]
async fn an_event_written_through_one_api_is_read_through_the_other() {
    let server = server().await;
    let client = server.client();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let created = events.create(&PostParams::default(), &new_event("e1", "n1")).await.unwrap();
    assert_eq!(created.note.as_deref(), Some("draining n1"));

    let read = core.get("e1").await.unwrap();
    assert_eq!(read.message.as_deref(), Some("draining n1"), "note → message");
    assert_eq!(read.involved_object.name.as_deref(), Some("n1"), "regarding → involvedObject");
    assert_eq!(
        read.reporting_component.as_deref(),
        Some("update-operator"),
        "reportingController → reportingComponent"
    );
    assert_eq!(read.reporting_instance.as_deref(), Some("replica-a"));
    assert_eq!(read.related.as_ref().and_then(|r| r.name.as_deref()), Some("p"));
    assert_eq!(read.metadata.resource_version, created.metadata.resource_version, "one object, one resourceVersion");
    let raw = raw(&client, "GET", "/api/v1/namespaces/default/events/e1", None, Value::Null).await.json();
    assert_eq!((raw["apiVersion"].as_str(), raw["kind"].as_str()), (Some("v1"), Some("Event")));
    assert!(raw.get("note").is_none() && raw.get("regarding").is_none());

    // A legacy Event written through core/v1 shows its deprecated fields through events.k8s.io/v1.
    let legacy: CoreEvent = serde_json::from_value(json!({
        "metadata": {"name": "e2", "namespace": "default"},
        "involvedObject": {"kind": "Node", "name": "n2"}, "reason": "Rebooted", "message": "rebooted",
        "source": {"component": "kubelet", "host": "n2"}, "count": 3, "type": "Warning",
        "firstTimestamp": "2026-01-02T03:04:05Z", "lastTimestamp": "2026-01-02T03:05:05Z"
    }))
    .unwrap();
    core.create(&PostParams::default(), &legacy).await.unwrap();
    let converted = events.get("e2").await.unwrap();
    assert_eq!(converted.note.as_deref(), Some("rebooted"));
    assert_eq!(converted.deprecated_count, Some(3));
    assert_eq!(converted.deprecated_source.as_ref().and_then(|s| s.component.as_deref()), Some("kubelet"));
    assert!(converted.deprecated_first_timestamp.is_some() && converted.deprecated_last_timestamp.is_some());
    assert_eq!(converted.regarding.as_ref().and_then(|r| r.name.as_deref()), Some("n2"));

    let listed = core.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(listed.len(), 2, "both APIs list the same two Events");
    assert_eq!(events.list(&ListParams::default()).await.unwrap().items.len(), 2);

    // A series continued through events.k8s.io/v1 (kube-runtime's and the operator's way) is a count to core/v1.
    let series = json!({"series": {"count": 2, "lastObservedTime": "2026-01-02T03:06:05.000000Z"}});
    events.patch("e1", &PatchParams::default(), &Patch::Merge(&series)).await.unwrap();
    assert_eq!(core.get("e1").await.unwrap().series.map(|s| s.count), Some(Some(2)));
}

async fn next<K>(watch: &mut BoxStream<'static, kube::Result<WatchEvent<K>>>) -> WatchEvent<K> {
    within("a watch event", watch.next()).await.unwrap().unwrap()
}

#[tokio::test]
async fn watches_through_either_api_see_writes_through_the_other() {
    let server = server().await;
    let client = server.client();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    let rv = core.list(&ListParams::default()).await.unwrap().metadata.resource_version.unwrap();
    let mut core_watch = core.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    let mut events_watch = events.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    events.create(&PostParams::default(), &new_event("w1", "n1")).await.unwrap();
    core.delete("w1", &Default::default()).await.unwrap();
    match next(&mut core_watch).await {
        WatchEvent::Added(event) => assert_eq!(event.message.as_deref(), Some("draining n1")),
        other => panic!("{other:?}"),
    }
    assert!(matches!(next(&mut core_watch).await, WatchEvent::Deleted(_)));
    match next(&mut events_watch).await {
        WatchEvent::Added(event) => assert_eq!(event.note.as_deref(), Some("draining n1")),
        other => panic!("{other:?}"),
    }
    match next(&mut events_watch).await {
        WatchEvent::Deleted(event) => assert_eq!(event.regarding.and_then(|r| r.name).as_deref(), Some("n1")),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn each_api_selects_on_its_own_field_names() {
    let server = server().await;
    let client = server.client();
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let core: Api<CoreEvent> = Api::namespaced(client.clone(), "default");
    events.create(&PostParams::default(), &new_event("s1", "n1")).await.unwrap();
    events.create(&PostParams::default(), &new_event("s2", "n2")).await.unwrap();
    let names = |items: Vec<CoreEvent>| items.into_iter().filter_map(|e| e.metadata.name).collect::<Vec<_>>();
    let by = |selector: &str| ListParams::default().fields(selector);
    assert_eq!(names(core.list(&by("involvedObject.name=n2")).await.unwrap().items), vec!["s2"]);
    assert_eq!(names(core.list(&by("reportingComponent=update-operator")).await.unwrap().items), vec!["s1", "s2"]);
    assert_eq!(names(core.list(&by("source=update-operator")).await.unwrap().items).len(), 2, "source falls back");
    let new_names = |items: Vec<Event>| items.into_iter().filter_map(|e| e.metadata.name).collect::<Vec<_>>();
    assert_eq!(new_names(events.list(&by("regarding.name=n1")).await.unwrap().items), vec!["s1"]);
    assert_eq!(
        new_names(events.list(&by("reportingController=update-operator,type=Normal")).await.unwrap().items).len(),
        2
    );
    for (uri, selector) in [
        ("/apis/events.k8s.io/v1/events", "involvedObject.name=n1"),
        ("/api/v1/events", "regarding.name=n1"),
        ("/api/v1/events", "source.component=kubelet"),
    ] {
        let refused = raw(&client, "GET", &format!("{uri}?fieldSelector={selector}"), None, Value::Null).await;
        assert_eq!(refused.status, 400, "{uri} {selector}: {}", refused.text);
    }
}

#[tokio::test]
async fn events_k8s_io_validates_strictly_and_core_v1_as_legacy_clients_need() {
    let server = server().await;
    let client = server.client();
    let post = |uri: &'static str, body: Value| {
        let client = client.clone();
        async move { raw(&client, "POST", uri, Some("application/json"), body).await }
    };
    let events_uri = "/apis/events.k8s.io/v1/namespaces/default/events";
    let incomplete = post(
        events_uri,
        json!({"metadata": {"name": "x"}, "eventTime": "2026-01-02T03:04:05.000000Z",
        "regarding": {"kind": "Node", "name": "n1"}, "type": "Info", "deprecatedCount": 2}),
    )
    .await;
    assert_eq!(incomplete.status, 422);
    let message = incomplete.json()["message"].as_str().unwrap().to_owned();
    for expected in [
        "reportingController: Required value",
        "reportingInstance: Required value",
        "action: Required value",
        "reason: Required value",
        "type: Invalid value: \"\": has invalid value: Info",
        "count: Invalid value: \"\": needs to be unset",
    ] {
        assert!(message.contains(expected), "{expected} missing from {message}");
    }
    let no_time = post(
        events_uri,
        json!({"metadata": {"name": "y"}, "regarding": {"kind": "Node", "name": "n1"},
        "reportingController": "c", "reportingInstance": "i", "action": "a", "reason": "r", "type": "Normal"}),
    )
    .await;
    assert_eq!(no_time.status, 422);
    assert!(no_time.json()["message"].as_str().unwrap().contains("eventTime: Required value"));
    // The same incomplete, old-style Event is fine through core/v1, but its namespace must be its object's.
    let legacy = post(
        "/api/v1/namespaces/default/events",
        json!({"metadata": {"name": "z"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "default"}, "reason": "r"}),
    )
    .await;
    assert_eq!(legacy.status, 201, "{}", legacy.text);
    let elsewhere = post(
        "/api/v1/namespaces/default/events",
        json!({"metadata": {"name": "w"},
        "involvedObject": {"kind": "Pod", "name": "p", "namespace": "other"}}),
    )
    .await;
    assert_eq!(elsewhere.status, 422);
    assert!(
        elsewhere.json()["message"]
            .as_str()
            .unwrap()
            .contains("involvedObject.namespace: Invalid value: \"other\": does not match event.namespace")
    );
    // Through events.k8s.io/v1, what an Event says is fixed once written.
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    events.create(&PostParams::default(), &new_event("fixed", "n1")).await.unwrap();
    let changed = events.patch("fixed", &PatchParams::default(), &Patch::Merge(json!({"note": "other"}))).await;
    let kube::Error::Api(status) = changed.unwrap_err() else { panic!("expected an API error") };
    assert_eq!(status.code, 422);
    assert!(status.message.contains("message: Invalid value: \"other\": field is immutable"), "{}", status.message);
}

#[tokio::test]
async fn kube_runtime_recorder_events_show_through_core_v1() {
    let server = server().await;
    let client = server.client();
    let reporter = Reporter { controller: "example-controller".into(), instance: Some("pod-1".into()) };
    let recorder = Recorder::new(client.clone(), reporter);
    let node = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Node".into()),
        name: Some("n1".into()),
        ..Default::default()
    };
    for _ in 0..2 {
        let event = RecordedEvent {
            type_: EventType::Normal,
            reason: "Rebooted".into(),
            note: Some("rebooted n1".into()),
            action: "Reboot".into(),
            secondary: None,
        };
        recorder.publish(&event, &node).await.unwrap();
    }
    let core: Api<CoreEvent> = Api::all(client.clone());
    let listed = core.list(&ListParams::default().fields("involvedObject.name=n1,involvedObject.kind=Node")).await;
    let listed = listed.unwrap().items;
    assert_eq!(listed.len(), 1, "the repeat continued the series");
    assert_eq!(listed[0].message.as_deref(), Some("rebooted n1"));
    assert_eq!(listed[0].series.as_ref().and_then(|s| s.count), Some(2));
    let table = raw_with(
        &client,
        "GET",
        "/api/v1/events",
        &[("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")],
        None,
        Value::Null,
    )
    .await
    .json();
    let columns: Vec<&str> =
        table["columnDefinitions"].as_array().unwrap().iter().map(|c| c["name"].as_str().unwrap()).collect();
    assert_eq!(
        columns,
        ["Last Seen", "Type", "Reason", "Object", "Subobject", "Source", "Message", "First Seen", "Count", "Name"]
    );
    let cells = &table["rows"][0]["cells"];
    assert_eq!(cells[1], "Normal");
    assert_eq!(cells[3], "node/n1");
    assert_eq!(
        cells[5], "example-controller, pod-1",
        "reportingController and reportingInstance stand in for the source"
    );
    assert_eq!(cells[6], "rebooted n1");
    assert_eq!(cells[8], 2);
}
