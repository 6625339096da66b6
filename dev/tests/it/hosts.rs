//! The simulated hosts over HTTP (the contract of the agent's `simulated` backend) and how the kubelets publish
//! them: reboots through NotReady, new boot IDs and images, hosts that never return, stage faults.

use crate::cluster_support;

use cluster_support::*;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::ListParams;
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

fn node_info(node: &Node) -> (String, String) {
    let info = node.status.as_ref().and_then(|s| s.node_info.as_ref()).unwrap();
    (info.boot_id.clone(), info.os_image.clone())
}

fn ready_condition(node: &Node) -> Option<(String, Option<String>)> {
    let conditions = node.status.as_ref()?.conditions.as_ref()?;
    let ready = conditions.iter().find(|c| c.type_ == "Ready")?;
    Some((ready.status.clone(), ready.reason.clone()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_simulated_reboot_passes_through_not_ready_and_returns_with_a_new_boot_id_and_the_staged_image() {
    let cluster = cluster(3).await;
    let nodes: Api<Node> = Api::all(cluster.client());
    let before = nodes.get("worker-0").await.unwrap();
    let (boot_before, image_before) = node_info(&before);
    assert_eq!(image_before, "v1");

    let facts = request(&cluster, "GET", "/_dev/hosts/worker-0", None).await;
    assert_eq!(facts.status, 200);
    assert_eq!(
        facts.body,
        json!({"osImage": "v1", "bootID": boot_before, "stagedImage": null, "componentsHash": null})
    );

    let staged = request(&cluster, "POST", "/_dev/hosts/worker-0/stage", Some(json!({"image": "v2"}))).await;
    assert_eq!((staged.status, staged.body), (200, json!({})));
    assert_eq!(request(&cluster, "GET", "/_dev/hosts/worker-0", None).await.body["stagedImage"], "v2");

    // Record every Ready status the node goes through.
    let seen = Arc::new(parking_lot::Mutex::new(Vec::new()));
    let recorder = {
        let (nodes, seen) = (nodes.clone(), seen.clone());
        tokio::spawn(async move {
            let config = watcher::Config::default().fields("metadata.name=worker-0");
            let mut stream = watcher(nodes, config).applied_objects().boxed();
            while let Some(Ok(node)) = stream.next().await {
                seen.lock().push((ready_condition(&node), node_info(&node)));
            }
        })
    };
    eventually("the recorder sees the node", || async { !seen.lock().is_empty() }).await;

    let rebooted = request(&cluster, "POST", "/_dev/hosts/worker-0/reboot", None).await;
    assert_eq!((rebooted.status, rebooted.body), (202, json!({})));

    eventually("worker-0 is Ready again with a new boot", || async {
        let node = nodes.get("worker-0").await.unwrap();
        ready_condition(&node).is_some_and(|(status, _)| status == "True") && node_info(&node).0 != boot_before
    })
    .await;
    let after = nodes.get("worker-0").await.unwrap();
    let (boot_after, image_after) = node_info(&after);
    assert_eq!(image_after, "v2");
    let facts = request(&cluster, "GET", "/_dev/hosts/worker-0", None).await.body;
    assert_eq!(facts, json!({"osImage": "v2", "bootID": boot_after, "stagedImage": null, "componentsHash": null}));
    recorder.abort();
    let seen = seen.lock().clone();
    let not_ready = seen.iter().position(|(ready, _)| {
        ready.as_ref().is_some_and(|(status, reason)| status == "False" && reason.as_deref() == Some("KubeletNotReady"))
    });
    let back = seen
        .iter()
        .rposition(|(ready, info)| ready.as_ref().is_some_and(|(status, _)| status == "True") && info.0 == boot_after);
    assert!(not_ready.is_some() && back.is_some() && not_ready < back, "Ready statuses seen: {seen:?}");

    // The pods on the node were not Ready during the reboot and are Ready again, with a restart counted.
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "demo");
    let on_node = ListParams::default().fields("spec.nodeName=worker-0");
    eventually("the pods on worker-0 are Ready again", || async {
        let list = pods.list(&on_node).await.unwrap();
        !list.items.is_empty()
            && list.items.iter().all(|pod| {
                let status = pod.status.as_ref().unwrap();
                let ready = status.conditions.iter().flatten().any(|c| c.type_ == "Ready" && c.status == "True");
                ready && status.container_statuses.iter().flatten().all(|c| c.restart_count == 1)
            })
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_never_returns_keeps_its_node_not_ready_until_powered_on() {
    let cluster = cluster_with(|config| {
        config.nodes = 3;
        config.timing.reboot = Duration::from_millis(300);
    })
    .await;
    let faults =
        request(&cluster, "PUT", "/_dev/hosts/worker-1/faults", Some(json!({"rebootNeverReturns": true}))).await;
    assert_eq!(faults.status, 200);
    assert_eq!(request(&cluster, "POST", "/_dev/hosts/worker-1/reboot", None).await.status, 202);
    eventually("worker-1 is NotReady", || async { node_ready(&cluster, "worker-1") == Some(false) }).await;
    // Many reboot durations later it is still down.
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(node_ready(&cluster, "worker-1"), Some(false));
    let hosts = request(&cluster, "GET", "/_dev/hosts", None).await.body;
    let host = hosts["hosts"].as_array().unwrap().iter().find(|h| h["name"] == "worker-1").unwrap().clone();
    assert_eq!(host["power"], "down");
    // A host that is down cannot stage.
    let stage = request(&cluster, "POST", "/_dev/hosts/worker-1/stage", Some(json!({"image": "v2"}))).await;
    assert_eq!(stage.status, 503);
    assert!(stage.body["message"].as_str().unwrap().contains("not running"));

    assert_eq!(request(&cluster, "POST", "/_dev/hosts/worker-1/power-on", None).await.status, 202);
    eventually("worker-1 is Ready again", || async { node_ready(&cluster, "worker-1") == Some(true) }).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stage_faults_and_bad_requests_answer_with_a_status_and_a_message() {
    let cluster = bare_cluster(2).await;
    let fault = json!({"stageFailure": {"status": 500, "message": "no space left on device"}, "stageSeconds": 0.1});
    assert_eq!(request(&cluster, "PUT", "/_dev/hosts/worker-0/faults", Some(fault)).await.status, 200);
    let stage = request(&cluster, "POST", "/_dev/hosts/worker-0/stage", Some(json!({"image": "v2"}))).await;
    assert_eq!((stage.status, stage.body), (500, json!({"message": "no space left on device"})));
    assert_eq!(request(&cluster, "DELETE", "/_dev/hosts/worker-0/faults", None).await.status, 200);
    let stage = request(&cluster, "POST", "/_dev/hosts/worker-0/stage", Some(json!({"image": "v2"}))).await;
    assert_eq!(stage.status, 200);

    let unknown = request(&cluster, "GET", "/_dev/hosts/nope", None).await;
    assert_eq!(unknown.status, 404);
    assert!(unknown.body["message"].as_str().unwrap().contains("nope"));
    assert_eq!(request(&cluster, "POST", "/_dev/hosts/nope/reboot", None).await.status, 404);
    let bad_body = request(&cluster, "POST", "/_dev/hosts/worker-0/stage", Some(json!({"img": "v2"}))).await;
    assert_eq!(bad_body.status, 400);
    let bad_image = request(&cluster, "POST", "/_dev/hosts/worker-0/stage", Some(json!({"image": " v2"}))).await;
    assert_eq!(bad_image.status, 400);
    let bad_fault = request(
        &cluster,
        "PUT",
        "/_dev/hosts/worker-0/faults",
        Some(json!({"stageFailure": {
        "status": 200, "message": "x"}})),
    )
    .await;
    assert_eq!(bad_fault.status, 400);
    assert_eq!(request(&cluster, "DELETE", "/_dev/hosts/worker-0/reboot", None).await.status, 405);
    assert_eq!(request(&cluster, "GET", "/_dev/nothing-here", None).await.status, 404);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_created_by_hand_gets_a_host_a_status_and_a_lease() {
    let cluster = bare_cluster(1).await;
    let nodes: Api<Node> = Api::all(cluster.client());
    let node: Node = serde_json::from_value(json!({"metadata": {"name": "extra"}})).unwrap();
    nodes.create(&Default::default(), &node).await.unwrap();
    eventually("the new node is Ready", || async { node_ready(&cluster, "extra") == Some(true) }).await;
    assert_eq!(cluster.hosts().facts("extra").unwrap().os_image, "v1");
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(cluster.client(), "kube-node-lease");
    eventually("the node has a Lease", || async { leases.get_opt("extra").await.unwrap().is_some() }).await;
    let lease = leases.get("extra").await.unwrap();
    let spec = lease.spec.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("extra"));
    assert_eq!(spec.lease_duration_seconds, Some(40));
    assert_eq!(lease.metadata.owner_references.unwrap()[0].kind, "Node");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_added_to_a_running_cluster_runs_its_image_and_is_managed() {
    let cluster = bare_cluster(2).await;
    cluster.add_node("worker-late", false, "v7").unwrap();
    eventually("the added node is Ready", || async { node_ready(&cluster, "worker-late") == Some(true) }).await;
    let node = Api::<Node>::all(cluster.client()).get("worker-late").await.unwrap();
    assert_eq!(node_info(&node).1, "v7");
    assert_eq!(node.metadata.labels.unwrap()["update.edgeless.systems/managed"], "true");
    cluster.shutdown().await;
}
