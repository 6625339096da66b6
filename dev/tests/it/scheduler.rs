//! The scheduler: only Ready, uncordoned nodes that the pod's nodeSelector picks and whose taints it tolerates;
//! the emptiest first.

use crate::cluster_support;

use cluster_support::*;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use std::collections::BTreeMap;

fn pod(name: &str, extra_spec: Value) -> Pod {
    let mut spec = json!({"containers": [{"name": "app", "image": "registry.k8s.io/pause:3.10"}]});
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra_spec.as_object()) {
        spec.extend(extra.clone());
    }
    serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec})).unwrap()
}

fn node_of(cluster: &dev::cluster::Cluster, name: &str) -> Option<String> {
    cluster.informers().pods.get(&format!("default/{name}")).and_then(|p| p.node_name.as_ref().map(|n| n.to_string()))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_avoid_cordoned_and_tainted_nodes_and_follow_node_selectors() {
    let cluster = bare_cluster(4).await;
    let client = cluster.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    nodes.cordon("worker-0").await.unwrap();
    let taint = json!({"spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}});
    nodes.patch("worker-1", &PatchParams::default(), &Patch::Merge(taint)).await.unwrap();
    eventually("the scheduler sees the cordon and the taint", || async {
        let cache = &cluster.informers().nodes;
        cache.get("worker-0").is_some_and(|n| n.unschedulable)
            && cache.get("worker-1").is_some_and(|n| !n.taints.is_empty())
    })
    .await;

    for i in 0..4 {
        pods.create(&PostParams::default(), &pod(&format!("plain-{i}"), json!({}))).await.unwrap();
    }
    eventually("the plain pods are bound", || async {
        (0..4).all(|i| node_of(&cluster, &format!("plain-{i}")).is_some())
    })
    .await;
    for i in 0..4 {
        assert_eq!(node_of(&cluster, &format!("plain-{i}")).as_deref(), Some("worker-2"), "plain-{i}");
    }

    let tolerant = json!({"tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu",
                                           "effect": "NoSchedule"}]});
    pods.create(&PostParams::default(), &pod("tolerant", tolerant)).await.unwrap();
    eventually("the tolerant pod is bound", || async { node_of(&cluster, "tolerant").is_some() }).await;
    // worker-2 holds 4 pods, worker-1 none: the tolerant pod goes to the emptier node it tolerates.
    assert_eq!(node_of(&cluster, "tolerant").as_deref(), Some("worker-1"));

    let pinned = json!({"nodeSelector": {"kubernetes.io/hostname": "worker-0"}});
    pods.create(&PostParams::default(), &pod("pinned", pinned)).await.unwrap();
    eventually("the pinned pod is marked unschedulable", || async {
        let pod = pods.get("pinned").await.unwrap();
        pod.status
            .unwrap()
            .conditions
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
    })
    .await;
    assert_eq!(node_of(&cluster, "pinned"), None);
    nodes.uncordon("worker-0").await.unwrap();
    eventually("the pinned pod is bound to worker-0 once it is uncordoned", || async {
        node_of(&cluster, "pinned").as_deref() == Some("worker-0")
    })
    .await;
    eventually("the pinned pod runs", || async {
        cluster.informers().pods.get("default/pinned").is_some_and(|p| serving(&p))
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_spread_to_the_nodes_with_the_fewest_pods_and_never_to_not_ready_ones() {
    let cluster = bare_cluster(4).await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    cluster
        .hosts()
        .set_faults("worker-2", dev::hosts::HostFaults { reboot_never_returns: true, ..Default::default() })
        .unwrap();
    cluster.hosts().reboot("worker-2").unwrap();
    eventually("worker-2 is NotReady", || async { node_ready(&cluster, "worker-2") == Some(false) }).await;
    for i in 0..6 {
        pods.create(&PostParams::default(), &pod(&format!("p-{i}"), json!({}))).await.unwrap();
    }
    eventually("every pod is bound", || async { (0..6).all(|i| node_of(&cluster, &format!("p-{i}")).is_some()) }).await;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for i in 0..6 {
        *per_node.entry(node_of(&cluster, &format!("p-{i}")).unwrap()).or_default() += 1;
    }
    assert_eq!(per_node, BTreeMap::from([("worker-0".to_owned(), 3), ("worker-1".to_owned(), 3)]));
    cluster.shutdown().await;
}

/// kube-scheduler's TaintToleration score: a node with a `PreferNoSchedule` taint the pod does not tolerate is
/// passed over for one without, however many pods that one runs; a toleration (no effect, or `PreferNoSchedule`)
/// makes the taint not count; and the taint is soft: with no other node left, such a node still takes the pod.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pods_prefer_nodes_without_prefer_no_schedule_taints_they_do_not_tolerate() {
    let cluster = bare_cluster(4).await;
    let client = cluster.client();
    let nodes: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let taint = json!({"spec": {"taints": [{"key": "example.com/outdated", "effect": "PreferNoSchedule"}]}});
    for node in ["worker-0", "worker-1"] {
        nodes.patch(node, &PatchParams::default(), &Patch::Merge(taint.clone())).await.unwrap();
    }
    eventually("the scheduler sees the taints", || async {
        let cache = &cluster.informers().nodes;
        ["worker-0", "worker-1"].iter().all(|n| cache.get(n).is_some_and(|n| !n.taints.is_empty()))
    })
    .await;

    for i in 0..3 {
        pods.create(&PostParams::default(), &pod(&format!("plain-{i}"), json!({}))).await.unwrap();
    }
    eventually("the plain pods are bound", || async {
        (0..3).all(|i| node_of(&cluster, &format!("plain-{i}")).is_some())
    })
    .await;
    for i in 0..3 {
        assert_eq!(node_of(&cluster, &format!("plain-{i}")).as_deref(), Some("worker-2"), "plain-{i}");
    }

    // A toleration without an effect counts: the emptiest node wins again.
    let tolerant = json!({"tolerations": [{"key": "example.com/outdated", "operator": "Exists"}]});
    pods.create(&PostParams::default(), &pod("tolerant", tolerant)).await.unwrap();
    eventually("the tolerant pod is bound", || async { node_of(&cluster, "tolerant").is_some() }).await;
    assert_eq!(node_of(&cluster, "tolerant").as_deref(), Some("worker-0"));
    // One for NoSchedule only does not.
    let other = json!({"tolerations": [{"key": "example.com/outdated", "operator": "Exists", "effect": "NoSchedule"}]});
    pods.create(&PostParams::default(), &pod("other-effect", other)).await.unwrap();
    eventually("the other pod is bound", || async { node_of(&cluster, "other-effect").is_some() }).await;
    assert_eq!(node_of(&cluster, "other-effect").as_deref(), Some("worker-2"));

    // Soft: with worker-2 cordoned, a plain pod goes to a tainted node, the emptiest.
    nodes.cordon("worker-2").await.unwrap();
    eventually("the scheduler sees the cordon", || async {
        cluster.informers().nodes.get("worker-2").is_some_and(|n| n.unschedulable)
    })
    .await;
    pods.create(&PostParams::default(), &pod("last", json!({}))).await.unwrap();
    eventually("the last pod is bound", || async { node_of(&cluster, "last").is_some() }).await;
    assert_eq!(node_of(&cluster, "last").as_deref(), Some("worker-1"));
    cluster.shutdown().await;
}
