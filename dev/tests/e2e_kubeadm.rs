//! Kubernetes upgrades end to end on the dev cluster: the real controller and agents, the simulated hosts'
//! kubeadm, components served over local HTTP with their real hashes.

mod support;

use dev::artifacts::ArtifactFault;
use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::{ConfigMap, Node};
use kube::ResourceExt;
use kube::api::PostParams;
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::{Step, keys};
use std::time::Duration;
use support::{condition_of, eventually, full_cluster_with, start_agents, status_of, stop_all};

const FROM: &str = "v1.33.5";
const TO: &str = "v1.34.1";

async fn cluster(nodes: usize, control_planes: usize, workloads: bool) -> dev::cluster::Cluster {
    full_cluster_with(|config| {
        config.nodes = nodes;
        config.control_planes = control_planes;
        config.kubelet_version = FROM.into();
        config.apiserver.git_version = FROM.into();
        if !workloads {
            config.workloads = None;
        }
    })
    .await
}

/// Publishes the components of `version` and creates their ConfigMap; returns its name.
fn publish(cluster: &dev::cluster::Cluster, version: &str) -> String {
    let config_map = cluster.artifacts().publish_release(version);
    let store = cluster.store();
    store.api::<ConfigMap>().create(Some("kube-system"), &config_map, &PostParams::default()).unwrap();
    config_map.name_any()
}

fn nodeversion(store: &dev::apiserver::Store, version: &str, components: &str, rollout: serde_json::Value) {
    let object: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": "constellation-version"},
        "spec": {"image": "v1", "kubernetesClusterVersion": version, "kubernetesComponentsReference": components,
                 "rollout": rollout},
    }))
    .unwrap();
    store.api::<NodeVersion>().create(None, &object, &PostParams::default()).unwrap();
}

fn nodes(store: &dev::apiserver::Store) -> Vec<Node> {
    store.api::<Node>().list(None, &Default::default()).unwrap().items
}

fn kubelet(node: &Node) -> Option<String> {
    node.status.as_ref()?.node_info.as_ref().map(|i| i.kubelet_version.clone())
}

fn annotation(node: &Node, key: &str) -> Option<String> {
    node.metadata.annotations.as_ref()?.get(key).cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_control_plane_nodes_and_six_workers_move_to_the_next_minor_version() {
    let cluster = cluster(9, 3, true).await;
    let store = cluster.store();
    let components = publish(&cluster, TO);
    let hash = components.replace("k8s-components-sha256-", "sha256:");
    let log = cluster.server().access_log();
    log.start();
    let observer = Observer::start(cluster.client(), Limits::new(2, true));
    let mut components_running = start_agents(&cluster);
    components_running.push(harness::controller(cluster.operator(), harness::controller_options("c1")));
    nodeversion(&store, TO, &components, json!({"maxUnavailable": 2}));

    let mut active_seen = false;
    eventually(Duration::from_secs(240), "every node to run Kubernetes v1.34.1 and be verified", || {
        active_seen |= status_of(&store, "constellation-version").active_cluster_version_upgrade;
        let nodes = nodes(&store);
        nodes
            .iter()
            .all(|n| {
                kubelet(n).as_deref() == Some(TO)
                    && annotation(n, keys::COMPONENTS_HASH).as_deref() == Some(hash.as_str())
                    && annotation(n, keys::INTENT).as_deref() == Some("done")
                    && !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
            })
            .then_some(())
    })
    .await;
    assert_eq!(cluster.server().version(), TO);
    assert!(active_seen, "status.activeClusterVersionUpgrade was never true");
    let status = eventually(Duration::from_secs(30), "the status to say the upgrade is over", || {
        let status = status_of(&store, "constellation-version");
        (!status.active_cluster_version_upgrade && status.kubelets.len() == 9).then_some(status)
    })
    .await;
    for kubelet in &status.kubelets {
        assert_eq!(kubelet.kubelet_version.as_deref(), Some(TO), "{kubelet:?}");
        assert_eq!(kubelet.components_hash.as_deref(), Some(hash.as_str()), "{kubelet:?}");
    }
    // kubectl get nodeversion shows the cluster version beside the image.
    let request = http::Request::get("/apis/update.edgeless.systems/v1alpha1/nodeversions")
        .header("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io")
        .body(Vec::new())
        .unwrap();
    let table: serde_json::Value = cluster.client().request(request).await.unwrap();
    let columns: Vec<&str> =
        table["columnDefinitions"].as_array().unwrap().iter().filter_map(|c| c["name"].as_str()).collect();
    let at = |name: &str| columns.iter().position(|c| *c == name).unwrap_or_else(|| panic!("no column {name}"));
    let row = &table["rows"][0]["cells"];
    assert_eq!((row[at("Image")].as_str(), row[at("Cluster-Version")].as_str()), (Some("v1"), Some(TO)));
    let observed = observer.stop().await;
    assert!(observed.violations.is_empty(), "{:?}", observed.violations);
    assert!(observed.max_control_plane_disrupted_seen <= 1, "{}", observed.max_control_plane_disrupted_seen);
    assert!(observed.max_disrupted_seen >= 2, "the workers went two at a time: {}", observed.max_disrupted_seen);
    // The first control-plane node applied before any other node started.
    let first_step = |node: &str, step: Step| {
        observed.timeline.get(node).and_then(|steps| steps.iter().find(|(_, s)| *s == step)).map(|(t, _)| *t)
    };
    let applied = first_step("control-plane-0", Step::KubeadmUpgrade).unwrap();
    for node in ["control-plane-1", "control-plane-2", "worker-0", "worker-5"] {
        let drained = first_step(node, Step::Drain).unwrap_or_else(|| panic!("{node} was never drained"));
        assert!(drained > applied, "{node} drained before the control plane was applied");
    }
    assert_eq!(first_step("control-plane-0", Step::Drain), None, "the first control-plane node is not drained");
    stop_all(components_running).await;
    // The manifest's RBAC allowed every request, and its rule for components ConfigMaps is what lets the
    // controller and the agents read them.
    let records = log.records();
    assert!(records.iter().all(|r| r.allowed), "{:#?}", records.iter().filter(|r| !r.allowed).collect::<Vec<_>>());
    let manifest = dev::operator::Manifest::operator().unwrap();
    let rule = manifest.role_rules().into_iter().find(|r| r.to_string().contains("\"configmaps\"")).unwrap();
    let without = manifest.without(&rule).rbac();
    let denied: Vec<&str> = records
        .iter()
        .filter(|r| !without.authorize(&support::user_of(r), &r.attributes).allowed)
        .map(|r| r.user.as_str())
        .collect();
    assert!(denied.iter().any(|u| u.ends_with(":update-operator-controller")), "{denied:?}");
    assert!(denied.iter().any(|u| u.ends_with(":update-operator-agent")), "{denied:?}");
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_version_touches_no_node_and_a_corrupt_artifact_installs_nothing_and_fails_the_node() {
    let cluster = cluster(3, 1, false).await;
    let store = cluster.store();
    let observer = Observer::start(cluster.client(), Limits::new(1, false));
    let mut running = start_agents(&cluster);
    running.push(harness::controller(cluster.operator(), harness::controller_options("c1")));

    // Two minor versions past the API server: refused, with a condition and an Event, no node touched.
    let skipping = publish(&cluster, "v1.35.0");
    nodeversion(&store, "v1.35.0", &skipping, json!({}));
    let (_, reason, message) = eventually(Duration::from_secs(60), "the refusal in the status", || {
        condition_of(&status_of(&store, "constellation-version"), "Progressing")
            .filter(|(_, reason, _)| reason == "KubernetesUpgradeRefused")
    })
    .await;
    assert_eq!(reason, "KubernetesUpgradeRefused");
    assert!(message.contains("more than one minor version past"), "{message}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert!(nodes(&store).iter().all(|n| annotation(n, keys::INTENT).is_none()), "a node was touched");

    // The next minor version, named before its ConfigMap exists: refused until the ConfigMap is there (nothing
    // watches ConfigMaps; the refusal is checked again 30 s later).
    let config_map = cluster.artifacts().publish_release(TO);
    let mut version = store.api::<NodeVersion>().get(None, "constellation-version").unwrap();
    version.spec.kubernetes_cluster_version = Some(TO.into());
    version.spec.kubernetes_components_reference = Some(config_map.name_any());
    store.api::<NodeVersion>().update(None, &version, &PostParams::default()).unwrap();
    eventually(Duration::from_secs(60), "the refusal of a missing ConfigMap", || {
        condition_of(&status_of(&store, "constellation-version"), "Progressing")
            .filter(|(_, reason, message)| reason == "KubernetesUpgradeRefused" && message.contains("does not exist"))
    })
    .await;
    // Its kubeadm is corrupt on the server: the first control-plane node fails with the reason, nothing is
    // installed, nothing is cordoned.
    cluster.artifacts().set_fault(&format!("{TO}/kubeadm"), Some(ArtifactFault::Corrupt));
    store.api::<ConfigMap>().create(Some("kube-system"), &config_map, &PostParams::default()).unwrap();
    let message = eventually(Duration::from_secs(120), "control-plane-0 to fail", || {
        let node = store.api::<Node>().get(None, "control-plane-0").ok()?;
        (annotation(&node, keys::INTENT).as_deref() == Some("failed"))
            .then(|| annotation(&node, keys::INTENT_MESSAGE))?
    })
    .await;
    assert!(message.contains("KubernetesUpgradeFailed") && message.contains("nothing was installed"), "{message}");
    let host = cluster.hosts().state("control-plane-0").unwrap();
    assert_eq!((host.facts.components_hash, host.kubelet_version), (None, None));
    assert_eq!(cluster.server().version(), FROM);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let observed = observer.stop().await;
    assert!(observed.violations.is_empty(), "{:?}", observed.violations);
    for (node, state) in &observed.nodes {
        assert!(!state.cordoned, "{node} is cordoned");
    }
    for (node, steps) in &observed.timeline {
        assert!(steps.iter().all(|(_, s)| *s != Step::Drain), "{node} was drained: {steps:?}");
        if node != "control-plane-0" {
            assert!(steps.is_empty(), "{node} was touched: {steps:?}");
        }
    }
    stop_all(running).await;
    cluster.shutdown().await;
}
