//! Conformance checklist C (eviction and PDBs). The PDB status a disruption controller would write is set by the
//! tests through `/status`. Item numbers refer to §9 of k8s-api-semantics.md; C31's recomputation and the full
//! `kubectl drain` (C38, second half) need the built-in controllers and are tested with them.

use crate::common;

use common::*;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{Api, DeleteParams, EvictParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

async fn running_pod(pods: &Api<Pod>, name: &str, ready: bool) {
    pods.create(&PostParams::default(), &pod(name, json!({"app": "web"}), Some("n1"))).await.unwrap();
    let status = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": if ready { "True" } else { "False" }}]}});
    pods.patch_status(name, &PatchParams::default(), &Patch::Merge(status)).await.unwrap();
}

async fn pdb(client: &kube::Client, ns: &str, name: &str, spec: Value, status: Option<Value>) {
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), ns);
    let budget: PodDisruptionBudget =
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap();
    let created = pdbs.create(&PostParams::default(), &budget).await.unwrap();
    if let Some(mut status) = status {
        status["observedGeneration"] = json!(created.metadata.generation.unwrap());
        pdbs.patch_status(name, &PatchParams::default(), &Patch::Merge(json!({"status": status}))).await.unwrap();
    }
}

fn budget(allowed: i64, current: i64, desired: i64, expected: i64) -> Value {
    json!({"disruptionsAllowed": allowed, "currentHealthy": current, "desiredHealthy": desired, "expectedPods": expected})
}

async fn evict_raw(client: &kube::Client, ns: &str, name: &str, delete_options: Option<Value>) -> Raw {
    let mut body = json!({"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": ns}});
    if let Some(options) = delete_options {
        body["deleteOptions"] = options;
    }
    raw(client, "POST", &format!("/api/v1/namespaces/{ns}/pods/{name}/eviction"), Some("application/json"), body).await
}

fn no_retry_client(server: &memory_apiserver::ApiServer) -> kube::Client {
    server.client_with(|c| c.default_retry = false)
}

#[tokio::test]
async fn c28_eviction_without_a_pdb_marks_the_pod_and_starts_its_termination() {
    let server = server().await;
    let client = server.client();
    // Raw requests go without retries: kube-rs's default client would retry every 429 for minutes.
    let plain = no_retry_client(&server);
    namespace(&client, "c28").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c28");
    running_pod(&pods, "p", true).await;
    let rv = pods.get("p").await.unwrap().metadata.resource_version.unwrap();
    let mut watch =
        RawWatch::open(&client, &format!("/api/v1/namespaces/c28/pods?watch=true&resourceVersion={rv}")).await;
    let evicted = evict_raw(&plain, "c28", "p", None).await;
    assert_eq!(evicted.status, 201);
    assert_eq!(
        evicted.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})
    );
    let marked = watch.next_event().await.unwrap();
    let conditions = marked["object"]["status"]["conditions"].as_array().unwrap();
    let target = conditions.iter().find(|c| c["type"] == "DisruptionTarget").expect("DisruptionTarget first");
    assert_eq!((target["status"].as_str(), target["reason"].as_str()), (Some("True"), Some("EvictionByEvictionAPI")));
    assert!(marked["object"]["metadata"].get("deletionTimestamp").is_none());
    let terminating = watch.next_event().await.unwrap();
    assert!(terminating["object"]["metadata"]["deletionTimestamp"].is_string(), "then the graceful delete");
    assert_eq!(terminating["object"]["metadata"]["deletionGracePeriodSeconds"], 30);

    running_pod(&pods, "q", true).await;
    let status = pods.evict("q", &EvictParams::default()).await.unwrap();
    assert!(status.is_success());
}

#[tokio::test]
async fn c29_a_budget_without_disruptions_answers_429_without_retry_after() {
    let server = server().await;
    let client = server.client();
    // Raw requests go without retries: kube-rs's default client would retry every 429 for minutes.
    let plain = no_retry_client(&server);
    namespace(&client, "c29").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c29");
    running_pod(&pods, "a", true).await;
    running_pod(&pods, "b", true).await;
    pdb(
        &client,
        "c29",
        "web",
        json!({"minAvailable": 2, "selector": {"matchLabels": {"app": "web"}}}),
        Some(budget(0, 2, 2, 2)),
    )
    .await;
    let refused = evict_raw(&plain, "c29", "a", None).await;
    assert_eq!(refused.status, 429);
    assert!(refused.headers.get("retry-after").is_none());
    assert_eq!(
        refused.json(),
        json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": "Cannot evict pod as it would violate the pod's disruption budget.", "reason": "TooManyRequests",
            "details": {"causes": [{"reason": "DisruptionBudget", "message": "The disruption budget web needs 2 healthy pods and has 2 currently"}]},
            "code": 429})
    );
    assert!(pods.get("a").await.unwrap().metadata.deletion_timestamp.is_none());
}

#[tokio::test]
async fn c30_a_budget_not_yet_observed_answers_429_with_retry_after_10() {
    let server = server().await;
    let client = server.client();
    // Raw requests go without retries: kube-rs's default client would retry every 429 for minutes.
    let plain = no_retry_client(&server);
    namespace(&client, "c30").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c30");
    running_pod(&pods, "a", true).await;
    pdb(&client, "c30", "fresh", json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}), None).await;
    let refused = evict_raw(&plain, "c30", "a", None).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.headers.get("retry-after").map(|v| v.to_str().unwrap()), Some("10"));
    let status = refused.json();
    assert_eq!(status["details"]["retryAfterSeconds"], 10);
    assert_eq!(
        status["details"]["causes"][0]["message"],
        "The disruption budget fresh is still being processed by the server."
    );
}

#[tokio::test]
async fn c31_an_allowed_eviction_spends_the_budget_and_the_next_one_waits() {
    let server = server().await;
    let client = server.client();
    // Raw requests go without retries: kube-rs's default client would retry every 429 for minutes.
    let plain = no_retry_client(&server);
    namespace(&client, "c31").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c31");
    running_pod(&pods, "a", true).await;
    running_pod(&pods, "b", true).await;
    pdb(
        &client,
        "c31",
        "web",
        json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
        Some(budget(1, 2, 1, 2)),
    )
    .await;
    assert_eq!(evict_raw(&plain, "c31", "a", None).await.status, 201);
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "c31");
    let status = pdbs.get("web").await.unwrap().status.unwrap();
    assert_eq!(status.disruptions_allowed, 0);
    assert!(status.disrupted_pods.unwrap().contains_key("a"));
    assert_eq!(evict_raw(&plain, "c31", "b", None).await.status, 429);
}

#[tokio::test]
async fn c32_two_matching_budgets_are_a_500() {
    let server = server().await;
    let client = server.client();
    // Raw requests go without retries: kube-rs's default client would retry every 429 for minutes.
    let plain = no_retry_client(&server);
    namespace(&client, "c32").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c32");
    running_pod(&pods, "a", true).await;
    pdb(
        &client,
        "c32",
        "one",
        json!({"minAvailable": 0, "selector": {"matchLabels": {"app": "web"}}}),
        Some(budget(1, 1, 0, 1)),
    )
    .await;
    pdb(&client, "c32", "two", json!({"minAvailable": 0, "selector": {}}), Some(budget(1, 1, 0, 1))).await;
    let refused = evict_raw(&plain, "c32", "a", None).await;
    assert_eq!(refused.status, 500);
    assert_eq!(
        refused.json()["message"],
        "This pod has more than one PodDisruptionBudget, which the eviction subresource does not support."
    );
}

#[tokio::test]
async fn c32b_an_eviction_in_a_terminating_namespace_is_forbidden_as_every_create_is() {
    let server = server().await;
    let client = server.client();
    let plain = no_retry_client(&server);
    namespace(&client, "doomed").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "doomed");
    running_pod(&pods, "p", true).await;
    server.faults().pause_controller("namespace");
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    namespaces.delete("doomed", &DeleteParams::default()).await.unwrap();
    let refused = evict_raw(&plain, "doomed", "p", None).await;
    assert_eq!(refused.status, 403);
    let body = refused.json();
    assert_eq!(
        body["message"],
        "pods \"p\" is forbidden: unable to create new content in namespace doomed because it is being terminated"
    );
    assert_eq!(body["details"]["causes"][0]["reason"], "NamespaceTerminating");
    assert!(pods.get("p").await.unwrap().metadata.deletion_timestamp.is_none(), "the pod is left to the namespace");
    // Even for a pod that does not exist: admission comes before the eviction looks at the pod.
    assert_eq!(evict_raw(&plain, "doomed", "missing", None).await.status, 403);
    server.faults().resume_controller("namespace");
}

#[tokio::test]
async fn c33_pending_finished_and_terminating_pods_skip_the_budget() {
    let server = server().await;
    let client = server.client();
    // Raw requests go without retries: kube-rs's default client would retry every 429 for minutes.
    let plain = no_retry_client(&server);
    namespace(&client, "c33").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c33");
    pdb(&client, "c33", "block", json!({"minAvailable": 5, "selector": {}}), Some(budget(0, 0, 5, 0))).await;
    pods.create(&PostParams::default(), &pod("pending", json!({}), None)).await.unwrap();
    assert_eq!(evict_raw(&plain, "c33", "pending", None).await.status, 201);
    assert!(pods.get_opt("pending").await.unwrap().is_none(), "an unbound pod goes at once");
    for phase in ["Succeeded", "Failed"] {
        let name = phase.to_lowercase();
        pods.create(&PostParams::default(), &pod(&name, json!({}), Some("n1"))).await.unwrap();
        pods.patch_status(&name, &PatchParams::default(), &Patch::Merge(json!({"status": {"phase": phase}})))
            .await
            .unwrap();
        assert_eq!(evict_raw(&plain, "c33", &name, None).await.status, 201, "{phase}");
    }
    running_pod(&pods, "terminating", true).await;
    pods.delete("terminating", &DeleteParams::default()).await.unwrap();
    assert_eq!(evict_raw(&plain, "c33", "terminating", None).await.status, 201);
    running_pod(&pods, "running", true).await;
    assert_eq!(evict_raw(&plain, "c33", "running", None).await.status, 429, "a running pod is held by the budget");
}

#[tokio::test]
async fn c34_unhealthy_pods_follow_the_unhealthy_pod_eviction_policy() {
    let server = server().await;
    let client = server.client();
    // Raw requests go without retries: kube-rs's default client would retry every 429 for minutes.
    let plain = no_retry_client(&server);
    namespace(&client, "c34").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c34");
    running_pod(&pods, "sick", false).await;
    pdb(
        &client,
        "c34",
        "always",
        json!({"minAvailable": 2, "unhealthyPodEvictionPolicy": "AlwaysAllow",
        "selector": {"matchLabels": {"app": "web"}}}),
        Some(budget(0, 1, 2, 3)),
    )
    .await;
    assert_eq!(evict_raw(&plain, "c34", "sick", None).await.status, 201);

    namespace(&client, "c34b").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c34b");
    running_pod(&pods, "sick", false).await;
    pdb(
        &client,
        "c34b",
        "healthy-budget",
        json!({"minAvailable": 2, "unhealthyPodEvictionPolicy": "IfHealthyBudget",
        "selector": {"matchLabels": {"app": "web"}}}),
        Some(budget(0, 1, 2, 3)),
    )
    .await;
    assert_eq!(evict_raw(&plain, "c34b", "sick", None).await.status, 429, "the budget is not met: 1 of 2 healthy");
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "c34b");
    pdbs.patch_status(
        "healthy-budget",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"currentHealthy": 2}})),
    )
    .await
    .unwrap();
    assert_eq!(evict_raw(&plain, "c34b", "sick", None).await.status, 201, "the budget is met: 2 of 2 healthy");
}

#[tokio::test]
async fn c35_a_max_unavailable_budget_over_bare_pods_refuses_every_eviction() {
    let server = server().await;
    let client = server.client();
    // Raw requests go without retries: kube-rs's default client would retry every 429 for minutes.
    let plain = no_retry_client(&server);
    namespace(&client, "c35").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c35");
    running_pod(&pods, "a", true).await;
    running_pod(&pods, "b", true).await;
    // What the disruption controller computes for pods without a controller: expectedPods 0, nothing allowed.
    pdb(
        &client,
        "c35",
        "bare",
        json!({"maxUnavailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
        Some(budget(0, 2, 0, 0)),
    )
    .await;
    for name in ["a", "b"] {
        let refused = evict_raw(&plain, "c35", name, None).await;
        assert_eq!(refused.status, 429);
        assert_eq!(
            refused.json()["details"]["causes"][0]["message"],
            "The disruption budget bare needs 0 healthy pods and has 2 currently"
        );
    }
}

#[tokio::test]
async fn c36_kube_rs_delete_options_are_ignored_and_policy_v1_ones_honoured() {
    let server = server().await;
    let client = server.client();
    // Raw requests go without retries: kube-rs's default client would retry every 429 for minutes.
    let plain = no_retry_client(&server);
    namespace(&client, "c36").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c36");
    running_pod(&pods, "kube-rs", true).await;
    let params =
        EvictParams { delete_options: Some(DeleteParams::default().grace_period(0)), ..EvictParams::default() };
    pods.evict("kube-rs", &params).await.unwrap();
    let still_there = pods.get("kube-rs").await.unwrap();
    assert_eq!(still_there.metadata.deletion_grace_period_seconds, Some(30), "the pod's own grace period applies");
    running_pod(&pods, "policy-v1", true).await;
    assert_eq!(evict_raw(&plain, "c36", "policy-v1", Some(json!({"gracePeriodSeconds": 0}))).await.status, 201);
    assert!(pods.get_opt("policy-v1").await.unwrap().is_none(), "grace 0 from deleteOptions removes it at once");
    let mismatch = raw(
        &plain,
        "POST",
        "/api/v1/namespaces/c36/pods/kube-rs/eviction",
        Some("application/json"),
        json!({"apiVersion": "policy/v1beta1", "kind": "Eviction", "metadata": {"name": "other"}}),
    )
    .await;
    assert_eq!(mismatch.status, 400);
}

#[tokio::test]
async fn c37_the_default_client_retries_a_429_eviction_and_a_client_without_retries_does_not() {
    let server = server().await;
    let client = server.client();
    // Raw requests go without retries: kube-rs's default client would retry every 429 for minutes.
    let plain = no_retry_client(&server);
    namespace(&client, "c37").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c37");
    running_pod(&pods, "a", true).await;
    pdb(
        &client,
        "c37",
        "web",
        json!({"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}),
        Some(budget(0, 1, 1, 1)),
    )
    .await;
    let metrics = server.metrics();
    let evictions = || metrics.count(|k| k.subresource == "eviction");

    let without_retries: Api<Pod> = Api::namespaced(plain, "c37");
    let error = without_retries.evict("a", &EvictParams::default()).await.unwrap_err();
    assert!(matches!(&error, kube::Error::Api(s) if s.code == 429));
    assert_eq!(evictions(), 1, "no retry without default_retry");

    // The budget allows the eviction once the server has refused it three more times.
    let pdbs: Api<PodDisruptionBudget> = Api::namespaced(client.clone(), "c37");
    let unblock = tokio::spawn({
        let metrics = metrics.clone();
        async move {
            eventually("three refused retries", || {
                let metrics = metrics.clone();
                async move { metrics.count(|k| k.subresource == "eviction") >= 4 }
            })
            .await;
            pdbs.patch_status(
                "web",
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"disruptionsAllowed": 1}})),
            )
            .await
            .unwrap();
        }
    });
    let status = within("the retried eviction", pods.evict("a", &EvictParams::default())).await.unwrap();
    assert!(status.is_success());
    unblock.await.unwrap();
    assert!(evictions() >= 5, "the default client retried ({} requests)", evictions());
}

#[tokio::test]
async fn c38_discovery_lists_pod_eviction_and_binding_schedules_pods() {
    let server = server().await;
    let client = server.client();
    let resources = raw(&client, "GET", "/api/v1", None, Value::Null).await.json();
    let eviction =
        resources["resources"].as_array().unwrap().iter().find(|r| r["name"] == "pods/eviction").unwrap().clone();
    assert_eq!(
        (eviction["group"].as_str(), eviction["version"].as_str(), eviction["kind"].as_str()),
        (Some("policy"), Some("v1"), Some("Eviction"))
    );

    namespace(&client, "c38").await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "c38");
    pods.create(&PostParams::default(), &pod("p", json!({}), None)).await.unwrap();
    let binding = json!({"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "p"}, "target": {"kind": "Node", "name": "n7"}});
    let bound =
        raw(&client, "POST", "/api/v1/namespaces/c38/pods/p/binding", Some("application/json"), binding.clone()).await;
    assert_eq!(bound.status, 201);
    assert_eq!(pods.get("p").await.unwrap().spec.unwrap().node_name.as_deref(), Some("n7"));
    let again = raw(&client, "POST", "/api/v1/namespaces/c38/pods/p/binding", Some("application/json"), binding).await;
    assert_eq!(again.status, 409);
    let moved = pods.patch("p", &PatchParams::default(), &Patch::Merge(json!({"spec": {"nodeName": "n8"}}))).await;
    assert!(matches!(moved, Err(kube::Error::Api(s)) if s.code == 422), "spec.nodeName only changes through binding");
}
