//! The kubelets: pods start on Ready nodes, graceful deletion ends with the kubelet's grace-0 DELETE, node
//! status and Leases.

use crate::cluster_support;

use cluster_support::*;
use dev::apiserver::Verb;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use serde_json::json;
use std::time::Duration;

fn pod(name: &str, node: &str, grace: i64) -> Pod {
    serde_json::from_value(json!({"metadata": {"name": name},
        "spec": {"nodeName": node, "terminationGracePeriodSeconds": grace,
                 "containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]}}))
    .unwrap()
}

fn kubelet_pod_deletes(cluster: &dev::cluster::Cluster) -> u64 {
    cluster
        .server()
        .metrics()
        .count(|key| key.verb == Verb::Delete && key.resource == "pods" && key.user_agent == "dev/kubelet")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bound_pod_becomes_running_and_ready_with_addresses_and_container_statuses() {
    let cluster = bare_cluster(2).await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    pods.create(&PostParams::default(), &pod("p", "worker-0", 30)).await.unwrap();
    eventually("the pod is Running and Ready", || async {
        cluster.informers().pods.get("default/p").is_some_and(|p| serving(&p))
    })
    .await;
    let status = pods.get("p").await.unwrap().status.unwrap();
    for condition in ["Initialized", "ContainersReady", "Ready", "PodScheduled"] {
        let found = status.conditions.iter().flatten().find(|c| c.type_ == condition).unwrap();
        assert_eq!(found.status, "True", "{condition}");
    }
    assert!(status.pod_ip.unwrap().starts_with("10."));
    assert!(status.host_ip.unwrap().starts_with("172."));
    assert!(status.start_time.is_some());
    let container = &status.container_statuses.unwrap()[0];
    assert!(container.ready && container.state.as_ref().unwrap().running.is_some());
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_graceful_deletion_is_completed_by_the_kubelet_after_the_termination_delay() {
    let cluster = cluster_with(|config| {
        config.nodes = 2;
        config.workloads = None;
        config.timing.pod_termination_cap = Duration::from_secs(2);
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    pods.create(&PostParams::default(), &pod("graceful", "worker-0", 30)).await.unwrap();
    eventually("the pod serves", || async {
        cluster.informers().pods.get("default/graceful").is_some_and(|p| serving(&p))
    })
    .await;
    let deletes_before = kubelet_pod_deletes(&cluster);
    // Delete late in a second: the deletionTimestamp has whole seconds, and a kubelet that counted
    // from it would remove the pod most of a second early.
    while jiff::Timestamp::now().subsec_millisecond() < 800 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let deleted_at = std::time::Instant::now();
    pods.delete("graceful", &DeleteParams::default()).await.unwrap();
    // The API server keeps the pod Terminating with the pod's grace period ...
    let terminating = pods.get("graceful").await.unwrap();
    assert_eq!(terminating.metadata.deletion_grace_period_seconds, Some(30));
    // ... and the kubelet removes it after min(30 s, the 2 s cap) with a grace-0 DELETE.
    eventually("the pod is gone", || async { pods.get_opt("graceful").await.unwrap().is_none() }).await;
    assert!(deleted_at.elapsed() >= Duration::from_secs(2), "removed after {:?}", deleted_at.elapsed());
    assert!(kubelet_pod_deletes(&cluster) > deletes_before, "the kubelet sent the final DELETE");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_on_a_host_that_is_down_stays_terminating_until_the_host_is_back() {
    let cluster = cluster_with(|config| {
        config.nodes = 2;
        config.workloads = None;
        config.timing.pod_termination_cap = Duration::from_millis(100);
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    pods.create(&PostParams::default(), &pod("stuck", "worker-0", 30)).await.unwrap();
    eventually("the pod serves", || async {
        cluster.informers().pods.get("default/stuck").is_some_and(|p| serving(&p))
    })
    .await;
    let never = dev::hosts::HostFaults { reboot_never_returns: true, ..Default::default() };
    cluster.hosts().set_faults("worker-0", never).unwrap();
    cluster.hosts().reboot("worker-0").unwrap();
    eventually("the pod is not Ready on the down host", || async {
        cluster.informers().pods.get("default/stuck").is_some_and(|p| !p.ready)
    })
    .await;
    pods.delete("stuck", &DeleteParams::default()).await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(pods.get_opt("stuck").await.unwrap().is_some(), "no kubelet runs on a host that is down");
    cluster.hosts().power_on("worker-0").unwrap();
    eventually("the pod is gone once the host is back", || async { pods.get_opt("stuck").await.unwrap().is_none() })
        .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_report_conditions_node_info_and_renew_their_leases() {
    let cluster = cluster_with(|config| {
        config.nodes = 2;
        config.workloads = None;
        config.timing.lease_renew = Some(Duration::from_millis(200));
        config.timing.node_heartbeat = Some(Duration::from_millis(200));
    })
    .await;
    let nodes: Api<Node> = Api::all(cluster.client());
    let node = nodes.get("control-plane-0").await.unwrap();
    let status = node.status.unwrap();
    let info = status.node_info.unwrap();
    assert_eq!((info.os_image.as_str(), info.kubelet_version.as_str()), ("v1", "v1.33.0"));
    assert_eq!(info.boot_id, cluster.hosts().facts("control-plane-0").unwrap().boot_id);
    let types: Vec<String> = status.conditions.unwrap().into_iter().map(|c| c.type_).collect();
    assert_eq!(types, ["MemoryPressure", "DiskPressure", "PIDPressure", "Ready"]);
    let leases: Api<k8s_openapi::api::coordination::v1::Lease> = Api::namespaced(cluster.client(), "kube-node-lease");
    eventually("the Lease exists", || async { leases.get_opt("worker-0").await.unwrap().is_some() }).await;
    let renewed = |lease: k8s_openapi::api::coordination::v1::Lease| lease.spec.unwrap().renew_time.unwrap().0;
    let first = renewed(leases.get("worker-0").await.unwrap());
    eventually("the Lease is renewed", || async { renewed(leases.get("worker-0").await.unwrap()) > first }).await;
    let heartbeat = |node: Node| {
        node.status.unwrap().conditions.unwrap().into_iter().find(|c| c.type_ == "Ready").unwrap().last_heartbeat_time
    };
    let first = heartbeat(nodes.get("worker-0").await.unwrap());
    eventually("the node status heartbeat moves", || async { heartbeat(nodes.get("worker-0").await.unwrap()) > first })
        .await;
    cluster.shutdown().await;
}
