//! The workload controllers: Deployments, ReplicaSets, StatefulSets and DaemonSets converge, replace evicted and
//! deleted pods, and roll out new templates.

use crate::cluster_support;

use cluster_support::*;
use dev::cluster::SampleWorkloads;
use k8s_openapi::api::apps::v1::{DaemonSet, Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Api;
use kube::api::{DeleteParams, EvictParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use std::collections::{BTreeMap, BTreeSet};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sample_workloads_converge_with_ready_statuses_and_pods_spread_over_the_workers() {
    let cluster = cluster(5).await;
    let client = cluster.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "demo");
    for deployment in deployments.list(&ListParams::default()).await.unwrap() {
        let status = deployment.status.unwrap();
        assert_eq!(status.available_replicas, Some(3), "{:?}", deployment.metadata.name);
        assert_eq!(status.updated_replicas, Some(3));
        assert_eq!(status.observed_generation, deployment.metadata.generation);
        let available = status.conditions.unwrap().into_iter().find(|c| c.type_ == "Available").unwrap();
        assert_eq!(available.status, "True");
    }
    let sets: Api<StatefulSet> = Api::namespaced(client.clone(), "demo");
    let sets = sets.list(&ListParams::default()).await.unwrap();
    assert!(!sets.items.is_empty());
    for set in sets {
        let status = set.status.unwrap();
        assert_eq!((status.replicas, status.ready_replicas), (3, Some(3)));
    }
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), "demo");
    let agent = daemonsets.get("node-agent").await.unwrap().status.unwrap();
    assert_eq!((agent.desired_number_scheduled, agent.number_ready), (5, 5));
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for pod in pods_in(&cluster, "demo") {
        assert!(serving(&pod), "{} is not serving", pod.meta.name);
        let node = pod.node_name.clone().unwrap().to_string();
        let daemon = pod.meta.controller().is_some_and(|o| &*o.kind == "DaemonSet");
        assert!(daemon || !node.starts_with("control-plane"), "{} runs on {node}", pod.meta.name);
        if !daemon {
            *per_node.entry(node).or_default() += 1;
        }
    }
    // 2 pods per worker, rounded up to whole workloads of 3: 9 pods spread over the 4 workers.
    assert_eq!(per_node.len(), 4, "{per_node:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_evicted_pod_is_replaced_on_another_node() {
    let cluster = cluster_with(|config| {
        config.nodes = 4;
        config.workloads = Some(deployments_only(3));
    })
    .await;
    let client = cluster.client_with(|config| config.default_retry = false);
    let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
    let victim = pods_in(&cluster, "demo").into_iter().find(|p| p.meta.name.starts_with("web-0-")).unwrap();
    let node = victim.node_name.clone().unwrap().to_string();
    Api::<Node>::all(client.clone()).cordon(&node).await.unwrap();
    pods.evict(&victim.meta.name, &EvictParams::default()).await.unwrap();
    eventually("the evicted pod is gone and web-0 has 3 serving pods, none on the cordoned node", || async {
        let web: Vec<_> = pods_in(&cluster, "demo").into_iter().filter(|p| p.meta.name.starts_with("web-0-")).collect();
        web.len() == 3
            && web
                .iter()
                .all(|p| serving(p) && p.meta.uid != victim.meta.uid && p.node_name.as_deref() != Some(node.as_str()))
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statefulset_pod_is_recreated_under_its_name_once_the_old_one_is_gone() {
    let cluster = cluster_with(|config| {
        config.nodes = 3;
        config.workloads = Some(SampleWorkloads {
            pods_per_worker: 1,
            replicas: 2,
            statefulset_every: 1,
            ..SampleWorkloads::default()
        });
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "demo");
    let before = pods.get("db-0-1").await.unwrap();
    pods.delete("db-0-1", &DeleteParams::default()).await.unwrap();
    eventually("db-0-1 is back with a new uid, Running and Ready", || async {
        cluster
            .informers()
            .pods
            .get("demo/db-0-1")
            .is_some_and(|p| p.meta.uid.as_ref() != before.metadata.uid.as_deref().unwrap() && serving(&p))
    })
    .await;
    let sets: Api<StatefulSet> = Api::namespaced(cluster.client(), "demo");
    eventually("the StatefulSet reports 2 ready replicas", || async {
        sets.get("db-0").await.unwrap().status.is_some_and(|s| s.ready_replicas == Some(2))
    })
    .await;
    let pod = pods.get("db-0-1").await.unwrap();
    let labels = pod.metadata.labels.unwrap();
    assert_eq!(labels["statefulset.kubernetes.io/pod-name"], "db-0-1");
    assert_eq!(labels["apps.kubernetes.io/pod-index"], "1");
    assert_eq!(pod.spec.unwrap().hostname.as_deref(), Some("db-0-1"));
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_daemonset_runs_on_every_eligible_node_including_cordoned_and_new_ones() {
    let cluster = cluster_with(|config| {
        config.nodes = 3;
        config.workloads = Some(SampleWorkloads { pods_per_worker: 0, daemonset: true, ..SampleWorkloads::default() });
    })
    .await;
    let client = cluster.client();
    let nodes: Api<Node> = Api::all(client.clone());
    nodes.cordon("worker-0").await.unwrap();
    let new_node = |name: &str, taints: serde_json::Value| -> Node {
        serde_json::from_value(json!({"metadata": {"name": name}, "spec": {"taints": taints}})).unwrap()
    };
    nodes.create(&PostParams::default(), &new_node("worker-new", json!([]))).await.unwrap();
    let repelling = json!([{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]);
    nodes.create(&PostParams::default(), &new_node("worker-gpu", repelling)).await.unwrap();
    let daemon_nodes = || {
        pods_in(&cluster, "demo")
            .into_iter()
            .filter(|p| serving(p))
            .filter_map(|p| p.node_name.as_ref().map(|n| n.to_string()))
            .collect::<BTreeSet<String>>()
    };
    let expected: BTreeSet<String> =
        ["control-plane-0", "worker-0", "worker-1", "worker-new"].iter().map(|s| s.to_string()).collect();
    eventually("a daemon pod serves on every eligible node", || async { daemon_nodes() == expected }).await;
    let daemonsets: Api<DaemonSet> = Api::namespaced(client.clone(), "demo");
    eventually("the DaemonSet status counts 4 nodes", || async {
        daemonsets
            .get("node-agent")
            .await
            .unwrap()
            .status
            .is_some_and(|s| s.desired_number_scheduled == 4 && s.number_ready == 4 && s.number_misscheduled == 0)
    })
    .await;
    // A node that starts repelling the pods loses its daemon pod.
    nodes
        .patch(
            "worker-1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"taints": [
        {"key": "dedicated", "value": "db", "effect": "NoExecute"}]}})),
        )
        .await
        .unwrap();
    eventually("worker-1 has no daemon pod", || async { !daemon_nodes().contains("worker-1") }).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_rolls_out_a_new_template_and_scales_the_old_replicaset_to_zero() {
    let cluster = cluster_with(|config| {
        config.nodes = 4;
        config.workloads = Some(deployments_only(3));
    })
    .await;
    let client = cluster.client();
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), "demo");
    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), "demo");
    let old_rs = replicasets.list(&ListParams::default().labels("app=web-0")).await.unwrap().items;
    assert_eq!(old_rs.len(), 1);
    let old_name = old_rs[0].metadata.name.clone().unwrap();
    let patch = json!({"spec": {"template": {"spec": {"containers": [
        {"name": "app", "image": "registry.k8s.io/pause:3.11"}]}}}});
    deployments.patch("web-0", &PatchParams::default(), &Patch::Strategic(patch)).await.unwrap();
    eventually("the rollout completes", || async {
        let deployment = deployments.get("web-0").await.unwrap();
        let status = deployment.status.unwrap_or_default();
        status.observed_generation == deployment.metadata.generation
            && status.updated_replicas == Some(3)
            && status.replicas == Some(3)
            && status.available_replicas == Some(3)
    })
    .await;
    let all = replicasets.list(&ListParams::default().labels("app=web-0")).await.unwrap().items;
    assert_eq!(all.len(), 2);
    for rs in &all {
        let replicas = rs.spec.as_ref().unwrap().replicas;
        let revision = &rs.metadata.annotations.as_ref().unwrap()["deployment.kubernetes.io/revision"];
        if rs.metadata.name.as_deref() == Some(old_name.as_str()) {
            assert_eq!((replicas, revision.as_str()), (Some(0), "1"));
        } else {
            assert_eq!((replicas, revision.as_str()), (Some(3), "2"));
        }
    }
    eventually("every web-0 pod runs the new image", || async {
        let pods: Api<Pod> = Api::namespaced(client.clone(), "demo");
        let list = pods.list(&ListParams::default().labels("app=web-0")).await.unwrap().items;
        list.len() == 3
            && list
                .iter()
                .all(|p| p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some("registry.k8s.io/pause:3.11"))
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_a_deployment_down_and_up_deletes_and_creates_pods() {
    let cluster = cluster_with(|config| {
        config.nodes = 3;
        config.workloads = Some(deployments_only(4));
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "demo");
    let count =
        || pods_in(&cluster, "demo").iter().filter(|p| p.is_active() && p.meta.name.starts_with("web-0-")).count();
    deployments.patch("web-0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 1}}))).await.unwrap();
    eventually("one web-0 pod is left", || async { count() == 1 }).await;
    deployments.patch("web-0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 5}}))).await.unwrap();
    eventually("five web-0 pods serve", || async {
        pods_in(&cluster, "demo").iter().filter(|p| serving(p) && p.meta.name.starts_with("web-0-")).count() == 5
    })
    .await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn controllers_keep_working_after_their_watches_are_closed_and_the_history_is_compacted() {
    let cluster = cluster_with(|config| {
        config.nodes = 3;
        config.workloads = Some(deployments_only(2));
    })
    .await;
    let deployments: Api<Deployment> = Api::namespaced(cluster.client(), "demo");
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "demo");
    let victim = pods_in(&cluster, "demo")[0].clone();
    // Changes the caches can only learn from a new list: the watches are cut and the history is gone.
    cluster.faults().pause_controller(dev::controllers::names::REPLICASET);
    pods.delete(&victim.meta.name, &DeleteParams::default()).await.unwrap();
    cluster.faults().compact();
    assert!(cluster.faults().close_all_watches() > 0);
    deployments.patch("web-0", &PatchParams::default(), &Patch::Merge(json!({"spec": {"replicas": 4}}))).await.unwrap();
    cluster.faults().resume_controller(dev::controllers::names::REPLICASET);
    eventually("four web-0 pods serve again", || async {
        let web: Vec<_> = pods_in(&cluster, "demo").into_iter().filter(|p| p.meta.name.starts_with("web-0-")).collect();
        web.len() == 4 && web.iter().all(|p| serving(p) && p.meta.uid != victim.meta.uid)
    })
    .await;
    cluster.shutdown().await;
}
