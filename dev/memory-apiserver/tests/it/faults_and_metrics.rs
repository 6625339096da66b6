//! Fault injection and request metrics, through the Rust API and the `/_dev/` endpoints.

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use memory_apiserver::{ErrorFault, RequestMatch, Verb};
use serde_json::{Value, json};
use std::time::Duration;

fn agent_client(server: &memory_apiserver::ApiServer) -> kube::Client {
    server.client_with(|c| {
        c.default_retry = false;
        c.headers.push((http::header::USER_AGENT, http::HeaderValue::from_static("update-operator/agent 0.1.0")));
    })
}

#[tokio::test]
async fn injected_errors_hit_only_matching_requests_and_run_out() {
    let server = server().await;
    let admin: Api<Node> = Api::all(server.client());
    admin
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap())
        .await
        .unwrap();
    let requests = RequestMatch {
        verbs: vec![Verb::Patch],
        resource: Some("nodes".into()),
        user_agent_prefix: Some("update-operator/agent".into()),
        ..Default::default()
    };
    server.faults().inject(ErrorFault::new(requests, 503).retry_after(3).times(2));
    let agent = agent_client(&server);
    let label = json!({"metadata": {"labels": {"x": "y"}}});
    for _ in 0..2 {
        let refused =
            raw(&agent, "PATCH", "/api/v1/nodes/n1", Some("application/merge-patch+json"), label.clone()).await;
        assert_eq!(refused.status, 503);
        assert_eq!(refused.headers.get("retry-after").map(|v| v.to_str().unwrap()), Some("3"));
        assert_eq!(refused.json()["details"]["retryAfterSeconds"], 3);
    }
    let passed = raw(&agent, "PATCH", "/api/v1/nodes/n1", Some("application/merge-patch+json"), label.clone()).await;
    assert_eq!(passed.status, 200, "the fault ran out");
    admin.patch("n1", &PatchParams::default(), &Patch::Merge(label)).await.unwrap();

    let id =
        server.faults().inject(ErrorFault::new(RequestMatch { verbs: vec![Verb::List], ..Default::default() }, 500));
    let plain: Api<Node> = Api::all(server.client_with(|c| c.default_retry = false));
    assert!(matches!(plain.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 500));
    assert!(
        matches!(plain.list(&ListParams::default()).await, Err(kube::Error::Api(s)) if s.code == 500),
        "until removed"
    );
    server.faults().remove(id);
    assert!(plain.list(&ListParams::default()).await.is_ok());
}

#[tokio::test]
async fn injected_429s_are_retried_by_the_default_client() {
    let server = server().await;
    server
        .faults()
        .inject(ErrorFault::new(RequestMatch { verbs: vec![Verb::Get], ..Default::default() }, 429).times(3));
    let api: Api<ConfigMap> = Api::namespaced(server.client(), "default");
    let result = within("a retried get", api.get_opt("missing")).await.unwrap();
    assert!(result.is_none());
    assert_eq!(server.metrics().count(|k| k.verb == Verb::Get), 4, "three 429s, then the real answer");
}

#[tokio::test]
async fn latency_delays_requests_and_closing_watches_ends_them_cleanly() {
    let server = server().await;
    let client = server.client();
    server
        .faults()
        .add_latency(RequestMatch { verbs: vec![Verb::Create], ..Default::default() }, Duration::from_millis(300));
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let started = tokio::time::Instant::now();
    api.create(&PostParams::default(), &config_map("slow", json!({}), json!({}))).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300), "latency is a lower bound, never an upper one");
    server.faults().clear();

    let mut watch = RawWatch::open(&client, "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0").await;
    assert_eq!(watch.next().await.unwrap()["type"], "ADDED");
    eventually("the watch is registered", || async { server.watcher_count() == 1 }).await;
    assert_eq!(server.faults().close_all_watches(), 1);
    assert!(watch.next().await.is_none(), "the stream ends without an ERROR");
}

#[tokio::test]
async fn dropped_connections_unregister_their_watchers() {
    let server = server().await;
    let client = server.client();
    let mut watches = Vec::new();
    for _ in 0..5 {
        let mut watch = RawWatch::open(
            &client,
            "/api/v1/namespaces/default/configmaps?watch=true&resourceVersion=0&allowWatchBookmarks=true",
        )
        .await;
        assert!(watch.poll_quietly(Duration::from_millis(100)).await.is_none());
        watches.push(watch);
    }
    eventually("five watchers", || async { server.watcher_count() == 5 }).await;
    drop(watches);
    eventually("no watcher left", || async { server.watcher_count() == 0 }).await;
}

#[tokio::test]
async fn controllers_are_paused_and_resumed_by_name() {
    let server = server().await;
    let mut gate = server.store().controller_gate("disruption");
    assert!(!gate.is_paused());
    server.faults().pause_controller("disruption");
    assert!(gate.is_paused());
    let waiting = tokio::spawn(async move {
        gate.wait_until_running().await;
        gate
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    server.faults().resume_controller("disruption");
    let gate = within("the gate opens", waiting).await.unwrap();
    assert!(!gate.is_paused());
}

#[tokio::test]
async fn the_dev_endpoints_report_metrics_and_take_fault_commands() {
    let server = server().await;
    let agent = agent_client(&server);
    let nodes: Api<Node> = Api::all(agent.clone());
    nodes
        .create(&PostParams::default(), &serde_json::from_value(json!({"metadata": {"name": "n1"}})).unwrap())
        .await
        .unwrap();
    nodes
        .patch("n1", &PatchParams::default(), &Patch::Merge(json!({"metadata": {"annotations": {"a": "b"}}})))
        .await
        .unwrap();
    let plain = server.client_with(|c| c.default_retry = false);
    let metrics = raw(&plain, "GET", "/_dev/metrics", None, Value::Null).await.json();
    let patches: Vec<&Value> = metrics["requests"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| {
            r["verb"] == "patch" && r["resource"] == "nodes" && r["user_agent"] == "update-operator/agent 0.1.0"
        })
        .collect();
    assert_eq!(patches.len(), 1);
    assert_eq!(patches[0]["count"], 1);
    assert!(metrics["resourceVersion"].as_u64().unwrap() > 0);
    assert_eq!(server.metrics().writes_by_user_agent("nodes")["update-operator/agent 0.1.0"], 2);

    let inject = raw(
        &plain,
        "POST",
        "/_dev/faults",
        Some("application/json"),
        json!({"action": "inject", "verbs": ["get"], "resource": "nodes", "code": 500, "times": 1}),
    )
    .await;
    assert_eq!(inject.status, 200);
    assert_eq!(raw(&plain, "GET", "/api/v1/nodes/n1", None, Value::Null).await.status, 500);
    assert_eq!(raw(&plain, "GET", "/api/v1/nodes/n1", None, Value::Null).await.status, 200);
    let unknown = raw(&plain, "POST", "/_dev/faults", Some("application/json"), json!({"action": "explode"})).await;
    assert_eq!(unknown.status, 400);
    let pause = raw(
        &plain,
        "POST",
        "/_dev/faults",
        Some("application/json"),
        json!({"action": "pauseController", "name": "scheduler"}),
    )
    .await;
    assert_eq!(pause.status, 200);
    assert!(server.faults().controllers().is_paused("scheduler"));
}

#[tokio::test]
async fn health_version_and_discovery_endpoints_answer() {
    let server = server().await;
    let client = server.client();
    for path in ["/healthz", "/readyz", "/livez"] {
        let response = raw(&client, "GET", path, None, Value::Null).await;
        assert_eq!((response.status, response.text.as_str()), (200, "ok"), "{path}");
    }
    let version = client.apiserver_version().await.unwrap();
    assert_eq!(version.major, "1");
    let discovery = kube::Discovery::new(client.clone()).run().await.unwrap();
    let groups: Vec<String> = discovery.groups().map(|g| g.name().to_owned()).collect();
    for expected in ["", "apps", "policy", "coordination.k8s.io", "events.k8s.io", "apiextensions.k8s.io"] {
        assert!(groups.contains(&expected.to_owned()), "{expected} in {groups:?}");
    }
    let (resource, capabilities) = discovery.resolve_gvk(&kube::api::GroupVersionKind::gvk("", "v1", "Pod")).unwrap();
    assert_eq!(resource.plural, "pods");
    assert!(capabilities.subresources.iter().any(|(r, _)| r.plural == "pods/eviction" || r.plural == "eviction"));
}
