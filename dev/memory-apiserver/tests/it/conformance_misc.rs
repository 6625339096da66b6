//! Conformance checklist D (leases, selectors, events, convergence). Item numbers refer to §9 of
//! k8s-api-semantics.md.

use crate::common;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{ConfigMap, Node, ObjectReference, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::runtime::events::{Event as RecorderEvent, EventType, Recorder, Reporter};
use kube::runtime::{reflector, watcher};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::time::Duration;

#[tokio::test]
async fn d39_lease_micro_times_round_trip_and_a_zero_duration_is_invalid() {
    let server = server().await;
    let client = server.client();
    let body = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "l"},
        "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15, "acquireTime": "2026-01-01T00:00:00.123456Z",
                 "renewTime": "2026-01-01T00:00:05.000001Z", "leaseTransitions": 0}});
    let created =
        raw(&client, "POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", Some("application/json"), body)
            .await;
    assert_eq!(created.status, 201);
    let fetched =
        raw(&client, "GET", "/apis/coordination.k8s.io/v1/namespaces/default/leases/l", None, Value::Null).await;
    assert!(fetched.text.contains("\"acquireTime\":\"2026-01-01T00:00:00.123456Z\""), "{}", fetched.text);
    assert!(fetched.text.contains("\"renewTime\":\"2026-01-01T00:00:05.000001Z\""), "{}", fetched.text);
    let zero = json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "z"}, "spec": {"leaseDurationSeconds": 0}});
    let refused =
        raw(&client, "POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", Some("application/json"), zero)
            .await;
    assert_eq!(refused.status, 422);
    assert_eq!(
        refused.json()["message"],
        "Lease.coordination.k8s.io \"z\" is invalid: spec.leaseDurationSeconds: Invalid value: 0: must be greater than 0"
    );
}

/// A client-go-style elector: GET, then PUT with the resourceVersion read (create on 404).
async fn try_acquire(leases: &Api<Lease>, me: &str) -> Result<bool, kube::Error> {
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(jiff::Timestamp::now());
    match leases.get_opt("leader").await? {
        None => {
            let lease: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"},
                "spec": {"holderIdentity": me, "leaseDurationSeconds": 15, "leaseTransitions": 0}}))
            .unwrap();
            match leases.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.is_already_exists() => Ok(false),
                Err(e) => Err(e),
            }
        }
        Some(mut lease) => {
            let spec = lease.spec.get_or_insert_with(Default::default);
            let expired = spec.renew_time.as_ref().is_none_or(|t| {
                t.0.checked_add(jiff::SignedDuration::from_secs(i64::from(spec.lease_duration_seconds.unwrap_or(15))))
                    .unwrap()
                    < now.0
            });
            if spec.holder_identity.as_deref() != Some(me) && !expired {
                return Ok(false);
            }
            if spec.holder_identity.as_deref() != Some(me) {
                spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
            }
            spec.holder_identity = Some(me.to_owned());
            spec.renew_time = Some(now);
            match leases.replace("leader", &PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(s)) if s.is_conflict() => Ok(false),
                Err(e) => Err(e),
            }
        }
    }
}

#[tokio::test]
async fn d40_two_resource_version_electors_never_both_win() {
    let server = server().await;
    let client = server.client();
    let leases: Api<Lease> = Api::namespaced(client.clone(), "default");
    let expired: Lease = serde_json::from_value(json!({"metadata": {"name": "leader"},
        "spec": {"holderIdentity": "nobody", "leaseDurationSeconds": 1, "renewTime": "2020-01-01T00:00:00.000000Z", "leaseTransitions": 0}})).unwrap();
    leases.create(&PostParams::default(), &expired).await.unwrap();
    // Both read the expired lease, then both write with the same resourceVersion: one wins, one gets 409.
    let seen = leases.get("leader").await.unwrap();
    let mut results = Vec::new();
    for me in ["a", "b"] {
        let mut lease = seen.clone();
        lease.spec.as_mut().unwrap().holder_identity = Some(me.to_owned());
        results.push(leases.replace("leader", &PostParams::default(), &lease).await);
    }
    assert!(results[0].is_ok());
    assert!(matches!(&results[1], Err(kube::Error::Api(s)) if s.code == 409));

    // Racing electors: at most one acquisition per holder change, and the winner holds the lease.
    let mut tasks = Vec::new();
    for me in ["c", "d", "e"] {
        let leases = leases.clone();
        tasks.push(tokio::spawn(async move {
            let mut wins = 0;
            for _ in 0..20 {
                if try_acquire(&leases, me).await.unwrap() {
                    wins += 1;
                }
            }
            (me, wins)
        }));
    }
    let mut winners = Vec::new();
    for task in tasks {
        let (me, wins) = task.await.unwrap();
        if wins > 0 {
            winners.push(me);
        }
    }
    let holder = leases.get("leader").await.unwrap().spec.unwrap().holder_identity.unwrap();
    assert_eq!(winners, vec![holder.as_str()], "a lease held by another live elector is never taken");
}

fn pod_names(pods: Vec<Pod>) -> Vec<String> {
    let mut names: Vec<String> = pods.into_iter().map(|p| p.metadata.name.unwrap()).collect();
    names.sort();
    names
}

#[tokio::test]
async fn d41_field_selectors_cover_pods_and_nodes() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "d41").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "d41");
    pods.create(&PostParams::default(), &pod("on-n1", json!({}), Some("n1"))).await.unwrap();
    pods.create(&PostParams::default(), &pod("on-n2", json!({}), Some("n2"))).await.unwrap();
    pods.create(&PostParams::default(), &pod("nowhere", json!({}), None)).await.unwrap();
    pods.patch_status("on-n1", &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": "Running"}})))
        .await
        .unwrap();
    let select = |fields: &'static str| {
        let pods = pods.clone();
        async move { pod_names(pods.list(&ListParams::default().fields(fields)).await.unwrap().items) }
    };
    assert_eq!(select("spec.nodeName=n1").await, vec!["on-n1"]);
    assert_eq!(select("spec.nodeName=").await, vec!["nowhere"]);
    assert_eq!(select("spec.nodeName!=").await, vec!["on-n1", "on-n2"]);
    assert_eq!(select("status.phase=Running").await, vec!["on-n1"]);
    assert_eq!(select("status.phase==Pending,spec.nodeName!=n2").await, vec!["nowhere"]);
    assert_eq!(select("metadata.name=on-n2").await, vec!["on-n2"]);
    assert_eq!(select("metadata.namespace=d41,spec.schedulerName=default-scheduler").await.len(), 3);

    let nodes: Api<Node> = Api::all(client.clone());
    for name in ["plain", "cordoned"] {
        nodes
            .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": name}})).unwrap())
            .await
            .unwrap();
    }
    nodes.cordon("cordoned").await.unwrap();
    let schedulable = nodes.list(&ListParams::default().fields("spec.unschedulable==false")).await.unwrap();
    assert_eq!(schedulable.items.iter().map(|n| n.metadata.name.clone().unwrap()).collect::<Vec<_>>(), vec!["plain"]);
    let unsupported =
        raw(&client, "GET", "/api/v1/namespaces/d41/pods?fieldSelector=spec.containers%3Dx", None, Value::Null).await;
    assert_eq!(unsupported.status, 400);
    assert_eq!(unsupported.json()["message"], "field label not supported: spec.containers");
}

#[tokio::test]
async fn d42_label_selectors_cover_every_form() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "d42").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "d42");
    for (name, labels) in
        [("ab", json!({"a": "b"})), ("ax", json!({"a": "x", "t": "1"})), ("ay", json!({"a": "y"})), ("none", json!({}))]
    {
        api.create(&PostParams::default(), &config_map(name, labels, json!({}))).await.unwrap();
    }
    let select = |labels: &'static str| {
        let api = api.clone();
        async move {
            let mut names: Vec<String> = api
                .list(&ListParams::default().labels(labels))
                .await
                .unwrap()
                .items
                .into_iter()
                .map(|c| c.metadata.name.unwrap())
                .collect();
            names.sort();
            names
        }
    };
    assert_eq!(select("a=b").await, vec!["ab"]);
    assert_eq!(select("a!=b").await, vec!["ax", "ay", "none"]);
    assert_eq!(select("a in (x,y)").await, vec!["ax", "ay"]);
    assert_eq!(select("a notin (x)").await, vec!["ab", "ay", "none"]);
    assert_eq!(select("a").await, vec!["ab", "ax", "ay"]);
    assert_eq!(select("!a").await, vec!["none"]);
    assert_eq!(select("a, t=1").await, vec!["ax"]);
    let invalid =
        raw(&client, "GET", "/api/v1/namespaces/d42/configmaps?labelSelector=a%20in%20x", None, Value::Null).await;
    assert_eq!(invalid.status, 400);
    assert_eq!(invalid.json()["reason"], "BadRequest");
}

#[tokio::test]
async fn d43_the_recorder_creates_an_event_and_merges_its_series() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "d43").await;
    let cms: Api<ConfigMap> = Api::namespaced(client.clone(), "d43");
    let cm = cms.create(&PostParams::default(), &config_map("subject", json!({}), json!({}))).await.unwrap();
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("ConfigMap".into()),
        name: cm.metadata.name.clone(),
        namespace: cm.metadata.namespace.clone(),
        uid: cm.metadata.uid.clone(),
        ..ObjectReference::default()
    };
    let recorder = Recorder::new(client.clone(), Reporter { controller: "dev-test".into(), instance: None });
    let event = RecorderEvent {
        type_: EventType::Normal,
        reason: "Tested".into(),
        note: Some("first".into()),
        action: "Test".into(),
        secondary: None,
    };
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    recorder.publish(&event, &reference).await.unwrap();
    let events: Api<Event> = Api::namespaced(client.clone(), "d43");
    let list = events.list(&ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let stored = &list.items[0];
    assert_eq!(stored.series.as_ref().unwrap().count, 3);
    assert_eq!(stored.regarding.as_ref().unwrap().name.as_deref(), Some("subject"));
    assert_eq!(stored.reporting_controller.as_deref(), Some("dev-test"));
    let by_field = events.list(&ListParams::default().fields("regarding.name=subject,reason=Tested")).await.unwrap();
    assert_eq!(by_field.items.len(), 1);
}

fn server_state(items: Vec<ConfigMap>) -> BTreeMap<String, String> {
    items.into_iter().map(|c| (c.metadata.name.unwrap(), c.metadata.resource_version.unwrap())).collect()
}

#[tokio::test]
async fn d44_reflectors_converge_after_compaction_and_closed_watches() {
    let server = server().await;
    let client = server.client();
    namespace(&client, "d44").await;
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "d44");
    for i in 0..20 {
        api.create(&PostParams::default(), &config_map(&format!("c{i}"), json!({}), json!({}))).await.unwrap();
    }
    let (reader, writer) = reflector::store();
    let driver =
        tokio::spawn(reflector(writer, watcher(api.clone(), watcher::Config::default())).for_each(|_| async {}));
    let converged = |api: Api<ConfigMap>, reader: reflector::Store<ConfigMap>| async move {
        let truth = server_state(api.list(&ListParams::default()).await.unwrap().items);
        let seen: BTreeMap<String, String> = reader
            .state()
            .iter()
            .map(|c| (c.metadata.name.clone().unwrap(), c.metadata.resource_version.clone().unwrap()))
            .collect();
        truth == seen
    };
    eventually("the first sync", || converged(api.clone(), reader.clone())).await;
    for round in 0..3 {
        server.faults().compact();
        server.faults().close_all_watches();
        api.delete(&format!("c{round}"), &DeleteParams::default()).await.unwrap();
        api.patch(
            &format!("c{}", 10 + round),
            &PatchParams::default(),
            &Patch::Merge(json!({"data": {"round": round.to_string()}})),
        )
        .await
        .unwrap();
        api.create(&PostParams::default(), &config_map(&format!("new-{round}"), json!({}), json!({}))).await.unwrap();
        eventually("the reflector matches the server", || converged(api.clone(), reader.clone())).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    driver.abort();
}
