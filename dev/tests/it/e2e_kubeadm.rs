//! Kubernetes upgrades end to end on the dev cluster: the real controller and agents, the simulated hosts'
//! kubeadm, components served over local HTTP with their real hashes.

use crate::support;

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
    // maxStaging defaults to maxUnavailable (2): the observer fails the test if more fetch ahead at once, or if a
    // node fetching ahead is ever cordoned.
    let observer = Observer::start(cluster.client(), Limits { max_staging: Some(2), ..Limits::new(2, true) });
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
    // Drained first, as kubeadm's procedure drains a node before its kubelet is upgraded (issue 29, item 6).
    let drained = first_step("control-plane-0", Step::Drain).expect("the first control-plane node is drained");
    assert!(drained < applied, "control-plane-0 was drained before kubeadm upgrade apply");
    // Every node's components were fetched ahead of its turn (issue 32), two at a time at most, and some while
    // another node took its turn.
    for (node, steps) in &observed.timeline {
        let fetched = steps.iter().position(|(_, s)| *s == Step::Fetch);
        let turn = steps.iter().position(|(_, s)| *s == Step::Drain);
        assert!(fetched.is_some() && fetched < turn, "{node} was not fetched ahead of its turn: {steps:?}");
    }
    assert_eq!(observed.max_staging_seen, 2, "nodes fetched two at a time");
    let fetch_started = first_step("worker-0", Step::Fetch).unwrap();
    let control_plane_done = first_step("control-plane-2", Step::Done).unwrap();
    assert!(fetch_started < control_plane_done, "worker-0 fetched ahead while the control plane was upgraded");
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
    // Its kubeadm is corrupt on the server: the first control-plane node's fetch ahead fails with the reason
    // before its turn, nothing is installed, nothing is cordoned.
    cluster.artifacts().set_fault(&format!("{TO}/kubeadm"), Some(ArtifactFault::Corrupt));
    store.api::<ConfigMap>().create(Some("kube-system"), &config_map, &PostParams::default()).unwrap();
    let message = eventually(Duration::from_secs(120), "control-plane-0 to fail", || {
        let node = store.api::<Node>().get(None, "control-plane-0").ok()?;
        (annotation(&node, keys::INTENT).as_deref() == Some("failed"))
            .then(|| annotation(&node, keys::INTENT_MESSAGE))?
    })
    .await;
    assert!(message.contains("StageFailed") && message.contains("fetch the components of Kubernetes"), "{message}");
    assert!(message.contains("not the expected"), "the hash mismatch is named: {message}");
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
        // Only the first control-plane node was touched (its fetch ahead, which failed), and never drained.
        if node == "control-plane-0" {
            assert!(steps.iter().all(|(_, s)| matches!(s, Step::Fetch | Step::Failed)), "{steps:?}");
        } else {
            assert!(steps.is_empty(), "{node} was touched: {steps:?}");
        }
    }
    stop_all(running).await;
    cluster.shutdown().await;
}

/// One real agent per Node, as the agent DaemonSet runs them: started as Nodes join (new instances too),
/// stopped once their Node is gone.
struct AgentsOnEveryNode {
    stop: tokio_util::sync::CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl AgentsOnEveryNode {
    fn start(cluster: &dev::cluster::Cluster) -> AgentsOnEveryNode {
        let (access, store) = (cluster.operator().clone(), cluster.store());
        let stop = tokio_util::sync::CancellationToken::new();
        let cancelled = stop.clone();
        let task = tokio::spawn(async move {
            let mut agents: std::collections::BTreeMap<String, harness::Component> = Default::default();
            while !cancelled.is_cancelled() {
                let names = support::node_names(&store);
                for name in &names {
                    if !agents.contains_key(name) {
                        agents.insert(name.clone(), harness::agent(&access, name));
                    }
                }
                let gone: Vec<String> = agents.keys().filter(|n| !names.contains(n)).cloned().collect();
                for name in gone {
                    if let Some(agent) = agents.remove(&name) {
                        agent.crash().await;
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            stop_all(agents.into_values().collect()).await;
        });
        AgentsOnEveryNode { stop, task }
    }

    async fn stop(self) {
        self.stop.cancel();
        self.task.await.unwrap();
    }
}

/// Where a rollout stands, for a test that fails.
fn describe(store: &dev::apiserver::Store) -> dev::standing::Standing {
    dev::standing::Standing::read(store, "constellation-version")
}

/// A cluster-autoscaler Deployment of 3 replicas in kube-system and its AutoscalingStrategy.
fn autoscaler(store: &dev::apiserver::Store) {
    use k8s_openapi::api::apps::v1::Deployment;
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "cluster-autoscaler", "namespace": "kube-system"},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": "cluster-autoscaler"}},
            "template": {
                "metadata": {"labels": {"app": "cluster-autoscaler"}},
                "spec": {"tolerations": [{"operator": "Exists"}],
                    "containers": [{"name": "cluster-autoscaler", "image": "registry.k8s.io/autoscaling/cluster-autoscaler:v1.33.0"}]}
            }
        }
    }))
    .unwrap();
    store.api::<Deployment>().create(Some("kube-system"), &deployment, &Default::default()).unwrap();
    let strategy: shared::crd::AutoscalingStrategy = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "AutoscalingStrategy",
        "metadata": {"name": "autoscalingstrategy"},
        "spec": {"enabled": true, "deploymentName": "cluster-autoscaler", "deploymentNamespace": "kube-system"}
    }))
    .unwrap();
    store.api::<shared::crd::AutoscalingStrategy>().create(None, &strategy, &Default::default()).unwrap();
}

/// The autoscaler Deployment's (`spec.replicas`, `status.replicas`: the pods that exist).
fn autoscaler_replicas(store: &dev::apiserver::Store) -> (Option<i32>, i32) {
    let deployment =
        store.api::<k8s_openapi::api::apps::v1::Deployment>().get(Some("kube-system"), "cluster-autoscaler").ok();
    let spec = deployment.as_ref().and_then(|d| d.spec.as_ref()?.replicas);
    (spec, deployment.and_then(|d| d.status?.replicas).unwrap_or(0))
}

/// The real controller with the simulated cloud (ScalingGroups, PendingNodes, AutoscalingStrategies).
fn cloud_controller(cluster: &dev::cluster::Cluster) -> harness::Component {
    use cloud::{CallPolicy, Governed};
    let provider = cloud::simulated::SimulatedProvider::new(cluster.url()).expect("the cluster's URL is an endpoint");
    let provider =
        Governed::new(provider, CallPolicy::default(), std::sync::Arc::new(cloud::metrics::CallCounts::default()));
    let mut options = harness::controller_options("c1");
    // The simulated control plane runs no etcd member.
    options.cloud = Some(controller::groups::CloudOptions::new(std::sync::Arc::new(provider)).with_external_etcd());
    harness::controller(cluster.operator(), options)
}

/// Samples the cluster every 20 ms: whenever a node holds a `kubeadm-upgrade` intent, the autoscaler has no pod
/// (read after the nodes: it stays down for the whole upgrade, so a correct controller never fails this, whatever
/// the timing); and a heir never carries its donor's annotation (paired) while it runs another version than `TO`.
struct Sampler {
    task: tokio::task::JoinHandle<()>,
    /// Samples with a node upgrading, and the violations seen.
    seen: std::sync::Arc<parking_lot::Mutex<(u32, Vec<String>)>>,
}

impl Sampler {
    fn start(store: &dev::apiserver::Store) -> Sampler {
        let seen = std::sync::Arc::new(parking_lot::Mutex::new((0_u32, Vec::<String>::new())));
        let (store, found) = (store.clone(), seen.clone());
        let task = tokio::spawn(async move {
            loop {
                let all = nodes(&store);
                let upgrading: Vec<String> = all
                    .iter()
                    .filter(|n| annotation(n, keys::INTENT).as_deref() == Some("kubeadm-upgrade"))
                    .map(|n| n.name_any())
                    .collect();
                let mut violations: Vec<String> = all
                    .iter()
                    .filter(|n| annotation(n, keys::DONOR).is_some() && kubelet(n).as_deref() != Some(TO))
                    .map(|n| {
                        format!("{} paired with {:?} on {:?}", n.name_any(), annotation(n, keys::DONOR), kubelet(n))
                    })
                    .collect();
                let pods = autoscaler_replicas(&store).1;
                if !upgrading.is_empty() && pods != 0 {
                    violations.push(format!("{upgrading:?} upgrade Kubernetes while {pods} autoscaler pods run"));
                }
                {
                    let mut found = found.lock();
                    found.0 += u32::from(!upgrading.is_empty());
                    for v in violations {
                        if !found.1.contains(&v) {
                            found.1.push(v);
                        }
                    }
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        });
        Sampler { task, seen }
    }

    /// Stops sampling; fails on a violation or when no upgrade was ever sampled.
    fn check(self) {
        self.task.abort();
        let (samples, violations) = self.seen.lock().clone();
        assert!(samples > 0, "no kubeadm-upgrade intent was ever sampled");
        assert_eq!(violations, Vec::<String>::new());
    }
}

/// Issue 14 item 2: a Kubernetes upgrade alone (the image stays) pauses the cluster-autoscaler, and no node
/// starts before it is confirmed down (no autoscaler pod left); it is restored afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubernetes_upgrade_alone_waits_for_the_autoscaler_to_be_down_and_restores_it() {
    use cloud::GroupRole;
    use dev::cloud::GroupSpec;
    let mut config = dev::cluster::ClusterConfig {
        nodes: 2,
        control_planes: 1,
        workloads: None,
        kubelet_version: FROM.into(),
        ready_timeout: Duration::from_secs(120),
        scaling_groups: vec![GroupSpec::new("workers-a", GroupRole::Worker, 1)],
        ..dev::cluster::ClusterConfig::default()
    };
    config.apiserver.git_version = FROM.into();
    let cluster = dev::cluster::Cluster::start(config).await.expect("the cluster starts");
    let store = cluster.store();
    let components = publish(&cluster, TO);
    autoscaler(&store);
    let sampler = Sampler::start(&store);
    let observer = Observer::start(cluster.client(), Limits::new(1, false));
    let agents = AgentsOnEveryNode::start(&cluster);
    let controller = cloud_controller(&cluster);
    // The image every node runs already: only the version changes.
    nodeversion(&store, TO, &components, json!({"maxUnavailable": 1}));
    eventually(Duration::from_secs(240), "every node on v1.34.1", || {
        nodes(&store)
            .iter()
            .all(|n| kubelet(n).as_deref() == Some(TO) && annotation(n, keys::INTENT).as_deref() == Some("done"))
            .then_some(())
    })
    .await;
    sampler.check();
    eventually(Duration::from_secs(120), "the autoscaler restored", || {
        (autoscaler_replicas(&store).0 == Some(3)).then_some(())
    })
    .await;
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    agents.stop().await;
    cluster.shutdown().await;
}

/// Issue 14 item 6: image and Kubernetes version change together on a mixed cluster. An in-place control-plane
/// node, a control-plane scaling group of 2, two in-place workers and a worker group of 2 go from v1 and
/// Kubernetes v1.33.5 to v2 and v1.34.1: the version first for every node (the first control-plane node applies,
/// the other nodes, group nodes included, run `kubeadm upgrade node`), then the image (group nodes replaced, the
/// others updated in place). The new instances join with the group's old Kubernetes and are upgraded before they
/// take their donors' place. The observer holds maxUnavailable, maxSurge, one control-plane node at a time and no
/// kubelet newer than the API server at every event; the autoscaler is confirmed down whenever a node holds a
/// `kubeadm-upgrade` intent, and restored afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_and_version_together_on_a_mixed_cluster_heirs_upgraded_before_they_take_their_place() {
    use cloud::GroupRole;
    use dev::cloud::GroupSpec;
    use dev::observer::Surge;
    let config = dev::cluster::ClusterConfig {
        nodes: 3,
        control_planes: 1,
        workloads: None,
        kubelet_version: FROM.into(),
        ready_timeout: Duration::from_secs(120),
        scaling_groups: vec![
            GroupSpec::new("cp", GroupRole::ControlPlane, 2),
            GroupSpec::new("workers-a", GroupRole::Worker, 2),
        ],
        ..dev::cluster::ClusterConfig::default()
    };
    let mut config = config;
    config.apiserver.git_version = FROM.into();
    let cluster = dev::cluster::Cluster::start(config).await.expect("the cluster starts");
    let store = cluster.store();
    let before: Vec<String> = nodes(&store).iter().map(|n| n.name_any()).collect();
    assert_eq!(before.len(), 7);
    let components = publish(&cluster, TO);
    let hash = components.replace("k8s-components-sha256-", "sha256:");
    autoscaler(&store);
    // Whenever a node holds a kubeadm-upgrade intent, the autoscaler has no pod (read after the nodes: it stays
    // down for the whole upgrade, so a correct controller never fails this, whatever the timing); and a heir
    // never carries its donor's annotations (paired) while it runs another Kubernetes version.
    let sampler = Sampler::start(&store);
    let limits = Limits { surge: Some(Surge { baseline: 4, max_surge: 1 }), ..Limits::new(2, false) };
    let observer = Observer::start(cluster.client(), limits);
    let agents = AgentsOnEveryNode::start(&cluster);
    let controller = cloud_controller(&cluster);
    let object: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": "constellation-version"},
        "spec": {"image": "v2", "kubernetesClusterVersion": TO, "kubernetesComponentsReference": components,
                 "rollout": {"maxUnavailable": 2, "maxSurge": 1}},
    }))
    .unwrap();
    store.api::<NodeVersion>().create(None, &object, &PostParams::default()).unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(480);
    let pending = |store: &dev::apiserver::Store| {
        store.api::<shared::crd::PendingNode>().list(None, &Default::default()).map(|l| l.items.len()).unwrap_or(1)
    };
    loop {
        let all = nodes(&store);
        let done = all.len() == 7
            && pending(&store) == 0
            && all.iter().all(|n| {
                kubelet(n).as_deref() == Some(TO)
                    && annotation(n, keys::COMPONENTS_HASH).as_deref() == Some(hash.as_str())
                    && annotation(n, keys::OS_IMAGE).as_deref() == Some("v2")
                    && !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
            })
            && status_of(&store, "constellation-version").counts.up_to_date == 7;
        if done {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "the rollout did not finish:\n{}", describe(&store));
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    sampler.check();
    let after = nodes(&store);
    let replaced: Vec<&String> =
        before.iter().filter(|n| n.starts_with("cp-") || n.starts_with("workers-a-")).collect();
    assert_eq!(replaced.len(), 4);
    for name in &replaced {
        assert!(after.iter().all(|n| n.name_any() != **name), "{name} was not replaced");
    }
    // Every heir joined with Kubernetes v1.33.5 (the group's image) and was upgraded (drained, then kubeadm
    // upgrade node) before it took its donor's place.
    let observed_heirs: Vec<String> = after.iter().map(|n| n.name_any()).filter(|n| !before.contains(n)).collect();
    assert_eq!(observed_heirs.len(), 4);
    for heir in &observed_heirs {
        assert_eq!(cluster.hosts().state(heir).unwrap().kubelet_version.as_deref(), Some(TO), "{heir}");
    }
    support::eventually(Duration::from_secs(120), "the autoscaler restored", || {
        (autoscaler_replicas(&store).0 == Some(3)).then_some(())
    })
    .await;
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert!(observed.max_control_plane_disrupted_seen <= 1, "{}", observed.max_control_plane_disrupted_seen);
    for heir in &observed_heirs {
        let steps: Vec<Step> =
            observed.timeline.get(heir).map(|s| s.iter().map(|(_, s)| *s).collect()).unwrap_or_default();
        assert!(
            steps.starts_with(&[Step::Drain, Step::KubeadmUpgrade, Step::Done]),
            "{heir} was not upgraded first: {steps:?}"
        );
    }
    // Kubernetes first: no node was staged for the image before every node ran the version.
    let first = |step: Step| {
        observed.timeline.values().flat_map(|s| s.iter().filter(|(_, x)| *x == step).map(|(t, _)| *t)).min()
    };
    let first_stage = first(Step::Stage).expect("the in-place nodes were staged");
    let first_replace = first(Step::Replace).expect("the group nodes were replaced");
    for name in before.iter() {
        let upgraded = observed.timeline.get(name).and_then(|s| s.iter().find(|(_, x)| *x == Step::KubeadmUpgrade));
        let (at, _) = upgraded.unwrap_or_else(|| panic!("{name} never ran kubeadm"));
        assert!(*at < first_stage && *at < first_replace, "{name} upgraded Kubernetes after the image rollout began");
    }
    controller.stop(Duration::from_secs(15)).await.unwrap();
    agents.stop().await;
    cluster.shutdown().await;
}

/// Issue 32: nodes fetching ahead are not disrupted, and a Kubernetes upgrade given up mid-fetch (the version
/// removed from the NodeVersion) releases every node fetching or fetched ahead: no intent left, no node ever
/// cordoned, and each agent discards what it fetched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upgrade_given_up_mid_fetch_releases_every_node_fetched_ahead_and_they_discard_it() {
    let cluster = cluster(4, 1, false).await;
    let store = cluster.store();
    for name in support::node_names(&store) {
        let slow = dev::hosts::HostFaults { stage_seconds: Some(Duration::from_secs(20)), ..Default::default() };
        cluster.hosts().set_faults(&name, slow).unwrap();
    }
    let components = publish(&cluster, TO);
    let observer = Observer::start(cluster.client(), Limits { max_staging: Some(3), ..Limits::new(1, false) });
    let mut running = start_agents(&cluster);
    running.push(harness::controller(cluster.operator(), harness::controller_options("c1")));
    nodeversion(&store, TO, &components, json!({"maxUnavailable": 1, "maxStaging": 3}));
    let fetching = eventually(Duration::from_secs(60), "three nodes fetching ahead", || {
        let fetching: Vec<String> = nodes(&store)
            .iter()
            .filter(|n| annotation(n, keys::INTENT).as_deref() == Some("fetch"))
            .map(|n| n.name_any())
            .collect();
        (fetching.len() == 3).then_some(fetching)
    })
    .await;
    assert!(nodes(&store).iter().all(|n| !n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)));
    let mut version = store.api::<NodeVersion>().get(None, "constellation-version").unwrap();
    version.spec.kubernetes_cluster_version = None;
    version.spec.kubernetes_components_reference = None;
    store.api::<NodeVersion>().update(None, &version, &PostParams::default()).unwrap();
    eventually(Duration::from_secs(60), "every fetch released", || {
        nodes(&store).iter().all(|n| annotation(n, keys::INTENT).is_none()).then_some(())
    })
    .await;
    eventually(Duration::from_secs(60), "every agent to discard what it fetched", || {
        fetching.iter().all(|n| cluster.hosts().fetched(n).is_empty()).then_some(())
    })
    .await;
    let observed = observer.stop().await;
    assert!(observed.violations.is_empty(), "{:?}", observed.violations);
    assert_eq!(observed.max_staging_seen, 3);
    for (node, steps) in &observed.timeline {
        assert!(steps.iter().all(|(_, s)| *s == Step::Fetch), "{node} went further than its fetch: {steps:?}");
    }
    for n in nodes(&store) {
        assert_eq!(kubelet(&n).as_deref(), Some(FROM), "{}", n.name_any());
    }
    stop_all(running).await;
    cluster.shutdown().await;
}
