//! The in-process `Store`: the same rules as HTTP, attributed to its writer in the metrics.

use crate::common;

use common::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, ListParams, PatchParams, PostParams, WatchParams};
use memory_apiserver::{DeleteOutcome, Gvr, Patch, Verb, WatchEvent};
use serde_json::json;

#[tokio::test]
async fn in_process_writes_share_resource_versions_and_events_with_http_clients() {
    let server = server().await;
    let client = server.client();
    let store = server.store().with_identity("dev/kubelet");
    let nodes = store.api::<Node>();
    let created = nodes
        .create(None, &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap(), &PostParams::default())
        .unwrap();
    let http_nodes: Api<Node> = Api::all(client.clone());
    let seen = http_nodes.get("n1").await.unwrap();
    assert_eq!(seen.metadata.resource_version, created.metadata.resource_version);
    let mut events = nodes
        .watch(None, &WatchParams::default(), created.metadata.resource_version.as_deref().unwrap())
        .unwrap()
        .boxed();
    http_nodes.cordon("n1").await.unwrap();
    let status = json!({"status": {"conditions": [{"type": "Ready", "status": "True"}]}});
    nodes.patch_status(None, "n1", &Patch::Strategic(status), &PatchParams::default()).unwrap();
    let first = within("the HTTP write", events.next()).await.unwrap();
    assert!(matches!(first, WatchEvent::Modified(ref n) if n.spec.as_ref().unwrap().unschedulable == Some(true)));
    let second = within("the in-process write", events.next()).await.unwrap();
    assert!(matches!(second, WatchEvent::Modified(ref n) if n.status.as_ref().unwrap().conditions.is_some()));

    let writes = server.metrics().writes_by_user_agent("nodes");
    assert_eq!(writes.get("dev/kubelet"), Some(&2), "create and status patch: {writes:?}");
    assert_eq!(server.metrics().count(|k| k.user_agent == "dev/kubelet" && k.verb == Verb::Watch), 1);
}

#[tokio::test]
async fn the_store_applies_the_same_validation_and_status_rules() {
    let server = server().await;
    let store = server.store();
    let pods = store.api::<Pod>();
    let invalid = pods.create(
        Some("default"),
        &serde_json::from_value(json!({"metadata": {"name": "p"}, "spec": {"containers": []}})).unwrap(),
        &PostParams::default(),
    );
    assert_eq!(invalid.unwrap_err().code, 422);
    let created =
        pods.create(Some("default"), &pod("p", json!({"app": "web"}), Some("n1")), &PostParams::default()).unwrap();
    assert_eq!(created.status.as_ref().unwrap().phase.as_deref(), Some("Pending"));
    let mut running = created.clone();
    running.status.as_mut().unwrap().phase = Some("Running".into());
    let ignored = pods.update(Some("default"), &running, &PostParams::default()).unwrap();
    assert_eq!(ignored.status.unwrap().phase.as_deref(), Some("Pending"), "the main endpoint ignores status");
    let updated = pods.update_status(Some("default"), &running, &PostParams::default()).unwrap();
    assert_eq!(updated.status.unwrap().phase.as_deref(), Some("Running"));
    match pods.delete(Some("default"), "p", &DeleteParams::default()).unwrap() {
        DeleteOutcome::Pending(pod) => assert_eq!(pod.metadata.deletion_grace_period_seconds, Some(30)),
        DeleteOutcome::Gone(_) => panic!("a bound running pod terminates gracefully"),
    }
    assert!(matches!(
        pods.delete(Some("default"), "p", &DeleteParams::default().grace_period(0)).unwrap(),
        DeleteOutcome::Gone(_)
    ));
    assert!(pods.get_opt(Some("default"), "p").unwrap().is_none());
}

#[tokio::test]
async fn store_evictions_honour_their_delete_options_and_budgets() {
    let server = server().await;
    let store = server.store().with_identity("dev/drainer");
    let pods = store.api::<Pod>();
    for name in ["a", "b"] {
        let mut pod = pod(name, json!({"app": "web"}), Some("n1"));
        pod = pods.create(Some("default"), &pod, &PostParams::default()).unwrap();
        pod.status = Some(
            serde_json::from_value(json!({"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}))
                .unwrap(),
        );
        pods.update_status(Some("default"), &pod, &PostParams::default()).unwrap();
    }
    let pdbs = store.api::<PodDisruptionBudget>();
    let budget: PodDisruptionBudget = serde_json::from_value(
        json!({"metadata": {"name": "web"}, "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}),
    )
    .unwrap();
    pdbs.create(Some("default"), &budget, &PostParams::default()).unwrap();
    pdbs.patch_status(Some("default"), "web", &Patch::Merge(json!({"status": {"observedGeneration": 1, "disruptionsAllowed": 1, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2}})), &PatchParams::default()).unwrap();
    store.evict("default", "a", &DeleteParams::default().grace_period(0)).unwrap();
    assert!(pods.get_opt(Some("default"), "a").unwrap().is_none());
    let refused = store.evict("default", "b", &DeleteParams::default()).unwrap_err();
    assert_eq!(refused.code, 429);
    assert_eq!(server.metrics().count(|k| k.user_agent == "dev/drainer" && k.subresource == "eviction"), 2);
}

#[tokio::test]
async fn dynamic_calls_and_paginated_lists_work_in_process() {
    let server = server().await;
    let store = server.store();
    let config_maps = Gvr::of::<ConfigMap>();
    for i in 0..5 {
        store
            .create(
                &config_maps,
                Some("default"),
                json!({"metadata": {"name": format!("c{i}")}}),
                &PostParams::default(),
            )
            .unwrap();
    }
    let first = store.list(&config_maps, Some("default"), &ListParams::default().limit(3)).unwrap();
    assert_eq!(first.items.len(), 3);
    let rest = store
        .list(
            &config_maps,
            Some("default"),
            &ListParams::default().limit(3).continue_token(first.continue_token.as_deref().unwrap()),
        )
        .unwrap();
    assert_eq!(rest.items.len(), 2);
    assert_eq!(rest.resource_version, first.resource_version);
    assert!(rest.continue_token.is_none());
    let missing = store.get(&Gvr::new("example.com", "v1", "widgets"), None, "x").unwrap_err();
    assert_eq!(missing.code, 404);
    let patched = store
        .patch(
            &config_maps,
            Some("default"),
            "c0",
            &Patch::Json(json!([{"op": "add", "path": "/data", "value": {"k": "v"}}])),
            &PatchParams::default(),
        )
        .unwrap();
    assert_eq!(patched["data"]["k"], "v");
    let mut watch = store.watch(&config_maps, Some("default"), &WatchParams::default(), "0").unwrap();
    let mut added = 0;
    while added < 5 {
        match within("initial ADDED events", watch.next()).await.unwrap() {
            WatchEvent::Added(_) => added += 1,
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(server.watcher_count(), 0, "the watcher registers after its initial events");
    store.delete(&config_maps, Some("default"), "c1", &DeleteParams::default()).unwrap();
    assert!(matches!(within("the deletion", watch.next()).await.unwrap(), WatchEvent::Deleted(_)));
    drop(watch);
    assert_eq!(server.watcher_count(), 0, "a dropped watch unregisters");
}

#[tokio::test]
async fn per_node_lists_follow_binding_moves_and_deletions() {
    let server = server().await;
    let store = server.store();
    let pods = store.api::<Pod>();
    for (name, node) in [("a", Some("n1")), ("b", Some("n2")), ("c", None), ("d", None)] {
        pods.create(Some("default"), &pod(name, json!({}), node), &PostParams::default()).unwrap();
    }
    store.bind("default", "c", "n1").unwrap();
    pods.delete(Some("default"), "a", &DeleteParams::default().grace_period(0)).unwrap();
    let on = |selector: &str| -> Vec<String> {
        let mut names: Vec<String> = pods
            .list(None, &ListParams::default().fields(selector))
            .unwrap()
            .items
            .into_iter()
            .map(|p| p.metadata.name.unwrap())
            .collect();
        names.sort();
        names
    };
    assert_eq!(on("spec.nodeName=n1"), vec!["c"]);
    assert_eq!(on("spec.nodeName=n2"), vec!["b"]);
    assert_eq!(on("spec.nodeName="), vec!["d"]);
    assert_eq!(on("spec.nodeName=n1,metadata.name=b"), Vec::<String>::new());
    assert_eq!(on("spec.nodeName!=n2"), vec!["c", "d"], "the scan agrees with the index");
    let page = pods.list(None, &ListParams::default().fields("spec.nodeName=").limit(1)).unwrap();
    assert_eq!(page.items.len(), 1);
}
