//! Kairos NodeOps and NodeOpUpgrades end to end on the in-memory cluster: the real controller, real agents on
//! simulated hosts, the Job controller and kubelets running the Jobs' pods, and the invariant observer.

use crate::support;

use dev::cluster::Cluster;
use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};
use shared::crd::nodeop::{NodeOp, NodeOpPhase, NodeOpStatus, NodeOpUpgrade, RebootStatus};
use shared::protocol::keys;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{eventually, full_cluster_with, node_names, start_agents, stop_all};

const PATIENCE: Duration = Duration::from_secs(240);

pub(crate) fn resource(kind: &str) -> ApiResource {
    let plural = format!("{}s", kind.to_lowercase());
    ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk("operator.kairos.io", "v1alpha1", kind), &plural)
}

/// Creates `object` (a NodeOp or NodeOpUpgrade manifest) through the API, as `kubectl create` would, and checks
/// that the API server kept every field of its spec.
pub(crate) async fn apply(client: &Client, object: Value) {
    let kind = object["kind"].as_str().unwrap().to_owned();
    let namespace = object["metadata"]["namespace"].as_str().unwrap_or("default").to_owned();
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &namespace, &resource(&kind));
    let created = api.create(&PostParams::default(), &serde_json::from_value(object.clone()).unwrap()).await.unwrap();
    let stored = &created.data["spec"];
    for (field, value) in object["spec"].as_object().unwrap() {
        assert_eq!(&stored[field], value, "{kind} {}: spec.{field} was not kept", created.name_any());
    }
}

/// A seed README example from `dev/tests/fixtures/kairos/`, unchanged.
fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/kairos/{name}", env!("CARGO_MANIFEST_DIR"));
    yaml_serde::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

pub(crate) fn nodeop(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "operator.kairos.io/v1alpha1", "kind": "NodeOp",
           "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

pub(crate) fn status_of(cluster: &Cluster, name: &str) -> NodeOpStatus {
    cluster.store().api::<NodeOp>().get(Some("default"), name).ok().and_then(|o| o.status).unwrap_or_default()
}

pub(crate) async fn finished(cluster: &Cluster, name: &str, phase: NodeOpPhase) -> NodeOpStatus {
    support::eventually_or_say(
        PATIENCE,
        &format!("NodeOp {name} {phase:?}"),
        || {
            let status = status_of(cluster, name);
            (status.phase == phase).then_some(status)
        },
        || nodeop_state(cluster),
    )
    .await
}

/// What a stalled NodeOp waits for, for a timeout's message: every NodeOp's and NodeOpUpgrade's status, every Job's
/// status, and the nodes' cordons and protocol annotations.
pub(crate) fn nodeop_state(cluster: &Cluster) -> String {
    let store = cluster.store();
    let mut out = String::new();
    for op in store.api::<NodeOp>().list(Some("default"), &Default::default()).map(|l| l.items).unwrap_or_default() {
        out += &format!("\nNodeOp {}: {}", op.name_any(), serde_json::to_string(&op.status).unwrap_or_default());
    }
    let upgrades = store.api::<NodeOpUpgrade>().list(Some("default"), &Default::default());
    for up in upgrades.map(|l| l.items).unwrap_or_default() {
        out += &format!("\nNodeOpUpgrade {}: {}", up.name_any(), serde_json::to_string(&up.status).unwrap_or_default());
    }
    for job in jobs(cluster) {
        out += &format!("\nJob {}: {}", job.name_any(), serde_json::to_string(&job.status).unwrap_or_default());
    }
    out + &support::rollout_state(&store)
}

/// Labels every node as the Kairos operator's labeller does (`kairos.io/managed: "true"`), and the
/// control-plane nodes as k3s does (`node-role.kubernetes.io/control-plane: "true"`).
fn label_as_kairos(cluster: &Cluster) {
    let nodes = cluster.store().api::<Node>();
    for name in cluster.node_names() {
        let mut labels = json!({"kairos.io/managed": "true"});
        if cluster.control_planes().contains(&name) {
            labels["node-role.kubernetes.io/control-plane"] = json!("true");
        }
        nodes
            .patch(
                None,
                &name,
                &dev::apiserver::Patch::Merge(json!({"metadata": {"labels": labels}})),
                &PatchParams::default(),
            )
            .unwrap();
    }
}

fn jobs(cluster: &Cluster) -> Vec<Job> {
    cluster.store().api::<Job>().list(Some("default"), &Default::default()).unwrap().items
}

fn boot_ids(cluster: &Cluster) -> BTreeMap<String, String> {
    cluster.node_names().into_iter().map(|n| (n.clone(), cluster.hosts().facts(&n).unwrap().boot_id)).collect()
}

/// No node cordoned, none carrying a NodeOp's mark or a reboot intent.
pub(crate) fn assert_released(cluster: &Cluster) {
    for name in node_names(&cluster.store()) {
        let node = cluster.store().api::<Node>().get(None, &name).unwrap();
        assert!(!node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false), "{name} left cordoned");
        let annotations = node.metadata.annotations.unwrap_or_default();
        assert!(!annotations.contains_key(keys::NODE_OPERATION), "{name} still marked");
        assert!(!annotations.contains_key(keys::CORDONED_BY), "{name} still has the cordon record");
        assert_ne!(annotations.get(keys::INTENT).map(String::as_str), Some("reboot"), "{name} keeps a reboot intent");
    }
}

/// Waits until `node` is uncordoned and carries no NodeOp mark (a NodeOp records a node's outcome first, then
/// releases it).
pub(crate) async fn wait_released(cluster: &Cluster, node: &str) {
    eventually(PATIENCE, &format!("{node} released"), || {
        let node = cluster.store().api::<Node>().get(None, node).ok()?;
        let released = !node.spec.and_then(|s| s.unschedulable).unwrap_or(false)
            && !node.metadata.annotations.unwrap_or_default().contains_key(keys::NODE_OPERATION);
        released.then_some(())
    })
    .await;
}

fn fail_job_pods_on(cluster: &Cluster, node: &str) {
    let faults = serde_json::from_value(json!({"jobPodFailure": {"exitCode": 3, "message": "disk full"}})).unwrap();
    cluster.hosts().set_faults(node, faults).unwrap();
}

fn slow_job_pods_on(cluster: &Cluster, node: &str, seconds: f64) {
    cluster.hosts().set_faults(node, serde_json::from_value(json!({"jobPodSeconds": seconds})).unwrap()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeop_on_six_nodes_two_at_a_time_cordons_drains_and_reboots_each_within_the_invariants() {
    let cluster = full_cluster_with(|c| {
        c.nodes = 6;
        c.control_planes = 1;
    })
    .await;
    let observer = Observer::start(cluster.client(), Limits::new(2, true));
    let agents = start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let boots_before = boot_ids(&cluster);
    let spec = json!({
        "command": ["sh", "-c", "echo hello from $(hostname)"],
        "cordon": true,
        "drainOptions": {"enabled": true, "ignoreDaemonSets": true, "timeoutSeconds": 120},
        "rebootOnSuccess": true,
        "concurrency": 2,
    });
    apply(&cluster.client(), nodeop("reboot-all", spec)).await;

    let status = finished(&cluster, "reboot-all", NodeOpPhase::Completed).await;
    assert_eq!(status.node_statuses.len(), 6);
    for (node, s) in &status.node_statuses {
        assert_eq!((s.phase, s.reboot_status), (NodeOpPhase::Completed, RebootStatus::Completed), "{node}: {s:?}");
        assert_eq!(s.job_name, format!("reboot-all-{node}"));
    }
    let boots_after = boot_ids(&cluster);
    for (node, before) in &boots_before {
        assert_ne!(&boots_after[node], before, "{node} was not rebooted");
    }
    let jobs = jobs(&cluster);
    assert_eq!(jobs.len(), 6, "one Job per node");
    for job in &jobs {
        let pod = job.spec.as_ref().unwrap().template.spec.as_ref().unwrap();
        let node = pod.node_name.clone().unwrap();
        assert_eq!(job.name_any(), format!("reboot-all-{node}"), "the Job is pinned to its node");
        let container = &pod.containers[0];
        assert_eq!(container.security_context.as_ref().and_then(|s| s.privileged), Some(true));
        assert_eq!(container.volume_mounts.as_ref().unwrap()[0].mount_path, "/host");
        assert_eq!(job.owner_references()[0].kind, "NodeOp");
    }
    assert_released(&cluster);
    // Every sample workload pod left the nodes through evictions (PDBs respected, the observer checks).
    let pods = cluster.store().api::<Pod>().list(Some("demo"), &Default::default()).unwrap().items;
    assert!(!pods.is_empty());
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert!(observed.max_disrupted_seen <= 2, "{} nodes disrupted at once", observed.max_disrupted_seen);
    assert_eq!(observed.max_disrupted_seen, 2, "concurrency 2 was never used");
    assert_eq!(observed.max_control_plane_disrupted_seen, 1);

    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_stop_on_failure_a_failing_job_stops_the_nodeop_and_leaves_nothing_cordoned() {
    let cluster = full_cluster_with(|c| {
        c.nodes = 4;
        c.control_planes = 1;
    })
    .await;
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let first_worker = cluster.workers()[0].clone();
    fail_job_pods_on(&cluster, &first_worker);
    let spec = json!({
        "command": ["sh", "-c", "exit 0"],
        "cordon": true,
        "drainOptions": {"enabled": true},
        "backoffLimit": 1,
        "concurrency": 1,
        "stopOnFailure": true,
    });
    apply(&cluster.client(), nodeop("canary", spec)).await;

    let status = finished(&cluster, "canary", NodeOpPhase::Failed).await;
    let cp = &cluster.control_planes()[0];
    assert_eq!(status.node_statuses[cp].phase, NodeOpPhase::Completed, "control plane first: {status:?}");
    let failed = &status.node_statuses[&first_worker];
    assert_eq!(failed.phase, NodeOpPhase::Failed);
    assert!(failed.message.contains("the Job failed"), "{}", failed.message);
    // Nothing more starts, and nothing stays cordoned by us.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let mut started: Vec<String> = jobs(&cluster).iter().map(|j| j.name_any()).collect();
    started.sort();
    assert_eq!(started, vec![format!("canary-{cp}"), format!("canary-{first_worker}")]);
    for other in &cluster.workers()[1..] {
        assert_eq!(status_of(&cluster, "canary").node_statuses[other].phase, NodeOpPhase::Pending);
    }
    assert_released(&cluster);
    let held = status_of(&cluster, "canary").conditions.into_iter().find(|c| c.type_ == "Held").unwrap();
    assert_eq!((held.status.as_str(), held.reason.as_str()), ("True", "StoppedOnFailure"));
    let events =
        cluster.store().api::<k8s_openapi::api::events::v1::Event>().list(Some("default"), &Default::default());
    let warned = events
        .unwrap()
        .items
        .iter()
        .any(|e| e.reason.as_deref() == Some("OperationFailed") && e.type_.as_deref() == Some("Warning"));
    assert!(warned, "no OperationFailed Warning Event");

    controller.stop(Duration::from_secs(15)).await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seed_examples_apply_unchanged_and_the_canary_upgrade_runs_control_plane_first() {
    support::log_to_env_file();
    let cluster = full_cluster_with(|c| {
        c.nodes = 5;
        c.control_planes = 2;
    })
    .await;
    label_as_kairos(&cluster);
    let observer = Observer::start(cluster.client(), Limits::new(1, true));
    let agents = start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let client = cluster.client();

    // The NodeOpUpgrade canary: one node at a time, control plane first, each rebooted.
    apply(&client, fixture("nodeopupgrade-canary.yaml")).await;
    let upgrade = support::eventually_or_say(
        PATIENCE,
        "the upgrade completes",
        || {
            let upgrade = cluster.store().api::<NodeOpUpgrade>().get(Some("default"), "kairos-upgrade").ok()?;
            (upgrade.status.as_ref()?.phase == NodeOpPhase::Completed).then_some(upgrade)
        },
        || nodeop_state(&cluster),
    )
    .await;
    let status = upgrade.status.unwrap();
    assert_eq!(status.node_op_name, "kairos-upgrade");
    assert_eq!(status.node_statuses.len(), 5);
    assert!(status.node_statuses.values().all(|s| s.reboot_status == RebootStatus::Completed), "{status:?}");
    let op = cluster.store().api::<NodeOp>().get(Some("default"), "kairos-upgrade").unwrap();
    assert_eq!(op.owner_references()[0].uid, upgrade.metadata.uid.clone().unwrap());
    let script = &op.spec.command[2];
    assert!(script.contains("kairos-agent upgrade --source dir:/ --exclude-path '/etc/hostname'"), "{script}");
    for job in jobs(&cluster) {
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.image_pull_secrets.unwrap()[0].name, "private-registry-secret");
        assert!(pod.containers[0].image.as_deref().unwrap().starts_with("quay.io/kairos/opensuse"));
    }
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert_eq!(observed.max_disrupted_seen, 1, "concurrency 1");
    let first_reboot = |node: &str| {
        observed.timeline[node].iter().find(|(_, s)| *s == shared::protocol::Step::Reboot).map(|(t, _)| *t).unwrap()
    };
    let last_control_plane = cluster.control_planes().iter().map(|n| first_reboot(n)).max().unwrap();
    for worker in cluster.workers() {
        assert!(first_reboot(worker) > last_control_plane, "{worker} rebooted before a control-plane node");
    }
    assert_released(&cluster);

    // The NodeOp examples: the first selects the control-plane nodes (k3s labels), the second every Kairos node.
    apply(&client, fixture("nodeop-example.yaml")).await;
    let example = finished(&cluster, "example-nodeop", NodeOpPhase::Completed).await;
    let mut targeted: Vec<&String> = example.node_statuses.keys().collect();
    targeted.sort();
    assert_eq!(targeted, cluster.control_planes().iter().collect::<Vec<_>>());
    apply(&client, fixture("nodeop-private-registry.yaml")).await;
    let private = finished(&cluster, "operation-with-private-image", NodeOpPhase::Completed).await;
    assert_eq!(private.node_statuses.len(), 5);
    assert_released(&cluster);

    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_controller_finds_the_running_job_and_reruns_no_node() {
    let cluster = full_cluster_with(|c| {
        c.nodes = 3;
        c.control_planes = 1;
        c.workloads = None;
    })
    .await;
    let worker = cluster.workers()[0].clone();
    slow_job_pods_on(&cluster, &worker, 6.0);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    apply(&cluster.client(), nodeop("restart", json!({"command": ["true"], "cordon": true, "concurrency": 1}))).await;
    let job_name = format!("restart-{worker}");
    let running = eventually(PATIENCE, "the worker's Job runs", || {
        cluster.store().api::<Job>().get(Some("default"), &job_name).ok()
    })
    .await;
    controller.crash().await;
    let replacement = harness::controller(cluster.operator(), harness::controller_options("c2"));
    let status = finished(&cluster, "restart", NodeOpPhase::Completed).await;
    assert!(status.node_statuses.values().all(|s| s.phase == NodeOpPhase::Completed));
    let after = cluster.store().api::<Job>().get(Some("default"), &job_name).unwrap();
    assert_eq!(after.uid(), running.uid(), "the Job was replaced");
    // Each node ran once: one Job each, each with a single pod.
    assert_eq!(jobs(&cluster).len(), 3);
    for job in jobs(&cluster) {
        let pods = cluster
            .store()
            .api::<Pod>()
            .list(Some("default"), &Default::default())
            .unwrap()
            .items
            .into_iter()
            .filter(|p| p.owner_references().iter().any(|r| Some(&r.uid) == job.metadata.uid.as_ref()))
            .count();
        assert_eq!(pods, 1, "{} ran {pods} pods", job.name_any());
    }
    assert_released(&cluster);
    replacement.stop(Duration::from_secs(15)).await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_nodeop_mid_run_starts_no_new_job_and_uncordons_its_node() {
    let cluster = full_cluster_with(|c| {
        c.nodes = 4;
        c.control_planes = 1;
        c.workloads = None;
    })
    .await;
    for node in cluster.node_names() {
        slow_job_pods_on(&cluster, &node, 30.0);
    }
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let client = cluster.client();
    apply(&client, nodeop("doomed", json!({"command": ["true"], "cordon": true, "concurrency": 1}))).await;
    let cp = cluster.control_planes()[0].clone();
    eventually(PATIENCE, "the first Job runs on the cordoned control-plane node", || {
        let node = cluster.store().api::<Node>().get(None, &cp).ok()?;
        let cordoned = node.spec.and_then(|s| s.unschedulable).unwrap_or(false);
        (cordoned && cluster.store().api::<Job>().get(Some("default"), &format!("doomed-{cp}")).is_ok()).then_some(())
    })
    .await;
    let ops: Api<NodeOp> = Api::namespaced(client.clone(), "default");
    ops.delete("doomed", &DeleteParams::background()).await.unwrap();
    eventually(PATIENCE, "the node is released", || {
        let node = cluster.store().api::<Node>().get(None, &cp).ok()?;
        let released = !node.spec.and_then(|s| s.unschedulable).unwrap_or(false)
            && !node.metadata.annotations.unwrap_or_default().contains_key(keys::NODE_OPERATION);
        released.then_some(())
    })
    .await;
    // Its Job goes with it, and no other node gets one.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while tokio::time::Instant::now() < deadline {
        let names: Vec<String> = jobs(&cluster).iter().map(|j| j.name_any()).collect();
        assert!(names.iter().all(|n| *n == format!("doomed-{cp}")), "a new Job started: {names:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    eventually(PATIENCE, "the Job is garbage-collected", || jobs(&cluster).is_empty().then_some(())).await;
    assert_released(&cluster);

    // A NodeOpUpgrade's NodeOp goes with it.
    let upgrade = json!({"apiVersion": "operator.kairos.io/v1alpha1", "kind": "NodeOpUpgrade",
                         "metadata": {"name": "short-lived", "namespace": "default"},
                         "spec": {"image": "quay.io/kairos/x:v9", "concurrency": 1}});
    apply(&client, upgrade).await;
    let nodeops = cluster.store().api::<NodeOp>();
    eventually(PATIENCE, "the upgrade's NodeOp", || nodeops.get(Some("default"), "short-lived").ok()).await;
    let upgrades: Api<NodeOpUpgrade> = Api::namespaced(client.clone(), "default");
    upgrades.delete("short-lived", &DeleteParams::background()).await.unwrap();
    eventually(PATIENCE, "the NodeOp is gone", || nodeops.get(Some("default"), "short-lived").is_err().then_some(()))
        .await;
    eventually(PATIENCE, "every node released", || {
        let released = node_names(&cluster.store()).iter().all(|name| {
            let node = cluster.store().api::<Node>().get(None, name).unwrap();
            !node.spec.and_then(|s| s.unschedulable).unwrap_or(false)
                && !node.metadata.annotations.unwrap_or_default().contains_key(keys::NODE_OPERATION)
        });
        released.then_some(())
    })
    .await;

    // concurrency 0 means every node at once, as Kairos has it: said with a Warning Event.
    apply(&client, nodeop("all-at-once", json!({"command": ["true"], "nodeSelector": {"matchLabels": {"none": "x"}}})))
        .await;
    eventually(PATIENCE, "the AllNodesAtOnce Warning", || {
        let events =
            cluster.store().api::<k8s_openapi::api::events::v1::Event>().list(Some("default"), &Default::default());
        events
            .ok()?
            .items
            .iter()
            .any(|e| e.reason.as_deref() == Some("AllNodesAtOnce") && e.type_.as_deref() == Some("Warning"))
            .then_some(())
    })
    .await;
    controller.stop(Duration::from_secs(15)).await.unwrap();
    cluster.shutdown().await;
}

/// A running pod on `node` that no controller manages, with a 30 s termination grace period the
/// simulated kubelet uses in full (the cluster's termination cap is above it).
async fn slow_to_stop_pod(cluster: &Cluster, node: &str, name: &str) {
    let pods: Api<Pod> = Api::namespaced(cluster.client(), "default");
    let pod = json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
                     "spec": {"nodeName": node, "terminationGracePeriodSeconds": 30,
                              "containers": [{"name": "c", "image": "busybox"}]}});
    pods.create(&PostParams::default(), &serde_json::from_value(pod).unwrap()).await.unwrap();
    eventually(PATIENCE, "the pod runs", || {
        let pod = cluster.store().api::<Pod>().get(Some("default"), name).ok()?;
        (pod.status?.phase.as_deref() == Some("Running")).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drain_grace_period_seconds_shortens_each_evicted_pods_termination() {
    let cluster = full_cluster_with(|c| {
        c.nodes = 2;
        c.control_planes = 1;
        c.workloads = None;
        c.timing.pod_termination_cap = Duration::from_secs(120);
    })
    .await;
    let worker = cluster.workers()[0].clone();
    slow_to_stop_pod(&cluster, &worker, "slow").await;
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let selector = json!({"matchLabels": {"kubernetes.io/hostname": worker}});
    let spec = json!({"command": ["true"], "nodeSelector": selector,
                      "drainOptions": {"enabled": true, "force": true, "gracePeriodSeconds": 1}});
    let started = tokio::time::Instant::now();
    apply(&cluster.client(), nodeop("quick", spec)).await;
    let status = finished(&cluster, "quick", NodeOpPhase::Completed).await;
    // Without the grace period the eviction leaves the pod its own 30 s, and the drain waits for them.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(30), "the NodeOp took {took:?}: the pod had its own grace period");
    assert_eq!(status.node_statuses[&worker].phase, NodeOpPhase::Completed);
    assert!(cluster.store().api::<Pod>().get(Some("default"), "slow").is_err(), "the pod was evicted");
    wait_released(&cluster, &worker).await;
    assert_released(&cluster);
    controller.stop(Duration::from_secs(15)).await.unwrap();
    cluster.shutdown().await;
}

/// The UIDs of the pods on `node`, with whether each is being deleted.
fn pods_on(cluster: &Cluster, node: &str) -> BTreeMap<String, bool> {
    let pods = cluster.store().api::<Pod>().list(None, &Default::default()).unwrap().items;
    pods.into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .map(|p| (p.uid().unwrap_or_default(), p.metadata.deletion_timestamp.is_some()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_ignore_daemon_sets_false_a_node_with_daemonset_pods_fails_and_nothing_is_evicted() {
    let cluster = full_cluster_with(|c| {
        c.nodes = 3;
        c.control_planes = 1;
    })
    .await;
    let worker = cluster.workers()[0].clone();
    let before = pods_on(&cluster, &worker);
    assert!(before.len() > 1, "the worker runs the sample workloads and the node-agent DaemonSet's pod");
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let selector = json!({"matchLabels": {"kubernetes.io/hostname": worker}});
    let spec = json!({"command": ["true"], "nodeSelector": selector, "rebootOnSuccess": false,
                      "drainOptions": {"enabled": true, "ignoreDaemonSets": false}});
    apply(&cluster.client(), nodeop("strict", spec)).await;
    let status = finished(&cluster, "strict", NodeOpPhase::Failed).await;
    let message = &status.node_statuses[&worker].message;
    assert!(
        message.contains("DaemonSet node-agent")
            && message.contains("ignoreDaemonSets")
            && message.contains("demo/node-agent-"),
        "the message names the pod and the option: {message}"
    );
    assert!(jobs(&cluster).is_empty(), "the operation did not run");
    assert_eq!(pods_on(&cluster, &worker), before, "a pod was evicted");
    wait_released(&cluster, &worker).await;
    assert_released(&cluster);
    controller.stop(Duration::from_secs(15)).await.unwrap();
    cluster.shutdown().await;
}

/// A NodeOp and a rollout at once, on the same nodes: the NodeOp takes its slots from the rollout's budget and the
/// rollout counts the NodeOp's nodes, so never more than the rollout's `maxUnavailable` nodes are out together,
/// and never two control-plane nodes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeop_and_a_rollout_together_stay_within_the_rollouts_max_unavailable() {
    let cluster = full_cluster_with(|c| {
        c.nodes = 7;
        c.control_planes = 2;
    })
    .await;
    let store = cluster.store();
    let observer = Observer::start(cluster.client(), Limits::new(2, true));
    let agents = start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let spec = json!({
        "command": ["sh", "-c", "echo maintenance"],
        "cordon": true,
        "drainOptions": {"enabled": true, "timeoutSeconds": 120},
        "rebootOnSuccess": true,
        "concurrency": 2,
    });
    apply(&cluster.client(), nodeop("maintenance", spec)).await;
    support::create_version(&store, "v2", json!({"maxUnavailable": 2}));

    finished(&cluster, "maintenance", NodeOpPhase::Completed).await;
    eventually(PATIENCE, "the rollout", || support::rolled_out(&store, 7)).await;
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert!(
        observed.max_disrupted_seen <= 2,
        "{} nodes disrupted at once: {:#?}\n{:#?}",
        observed.max_disrupted_seen,
        observed.max_disrupted_nodes,
        observed.timeline
    );
    assert_eq!(observed.max_control_plane_disrupted_seen, 1);
    for node in cluster.node_names() {
        wait_released(&cluster, &node).await;
    }
    assert_released(&cluster);

    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

/// `spec.preflight` as the Kairos operator runs it: a read-only check on each node before it is touched; a
/// termination message skips the node, a failure fails it, a clean exit lets the operation run.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_preflight_check_skips_fails_or_passes_each_node_before_it_is_touched() {
    let cluster = full_cluster_with(|c| {
        c.nodes = 4;
        c.control_planes = 1;
        c.workloads = None;
    })
    .await;
    let observer = Observer::start(cluster.client(), Limits::new(1, true));
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let workers = cluster.workers().to_vec();
    let checks = "operator.kairos.io/preflight=true";
    let skip = json!({"jobPodMessage": {"message": "already on v2", "labelSelector": checks}});
    cluster.hosts().set_faults(&workers[0], serde_json::from_value(skip).unwrap()).unwrap();
    let fail = json!({"jobPodFailure": {"exitCode": 3, "message": "cannot read /host/etc", "labelSelector": checks}});
    cluster.hosts().set_faults(&workers[1], serde_json::from_value(fail).unwrap()).unwrap();
    let spec = json!({
        "command": ["sh", "-c", "echo upgrade"],
        "cordon": true,
        "backoffLimit": 1,
        "concurrency": 1,
        "preflight": {"command": ["sh", "-c", "grep -q v2 /host/etc/os-release && echo 'already on v2' > /dev/termination-log || true"]},
    });
    apply(&cluster.client(), nodeop("checked", spec)).await;

    let status = finished(&cluster, "checked", NodeOpPhase::Failed).await;
    let of = |node: &str| status.node_statuses[node].clone();
    assert_eq!(of(&workers[0]).phase, NodeOpPhase::Completed);
    assert_eq!(of(&workers[0]).message, "Skipped by preflight: already on v2");
    assert_eq!(of(&workers[1]).phase, NodeOpPhase::Failed);
    assert!(of(&workers[1]).message.starts_with("Preflight failed: "), "{:?}", of(&workers[1]));
    for ran in [&cluster.control_planes()[0], &workers[2]] {
        assert_eq!((of(ran).phase, of(ran).message.as_str()), (NodeOpPhase::Completed, "the Job completed"), "{ran}");
    }
    // Only the nodes that passed ran the operation; every check is deleted once its verdict is recorded.
    let names = || {
        let mut names: Vec<String> = jobs(&cluster).iter().map(|j| j.name_any()).collect();
        names.sort();
        names
    };
    let mut ran = vec![format!("checked-{}", cluster.control_planes()[0]), format!("checked-{}", workers[2])];
    ran.sort();
    eventually(PATIENCE, "the checks deleted", || (names() == ran).then_some(())).await;
    for node in cluster.node_names() {
        wait_released(&cluster, &node).await;
    }
    // The checks touch no node: one node out at a time, the operation's.
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert_eq!(observed.max_disrupted_seen, 1);

    controller.stop(Duration::from_secs(15)).await.unwrap();
    cluster.shutdown().await;
}
