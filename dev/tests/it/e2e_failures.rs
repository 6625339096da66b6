//! The failure paths of a rollout on the in-memory cluster: an update that fails on a node, a PDB
//! that never allows an eviction (with either drain-timeout outcome), and a node that never comes
//! back from its reboot. Each leaves the failing node uncordoned and says which node and why.

use crate::support;

use dev::harness;
use dev::hosts::{HostFaults, StageFailure};
use dev::observer::{Limits, Observer, pod_ready};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{ListParams, PostParams};
use serde_json::json;
use shared::crd::{NodeVersion, NodeVersionStatus};
use shared::protocol::keys;
use std::collections::BTreeSet;
use std::time::Duration;
use support::{create_version, eventually, full_cluster, node_names, start_agents, stop_all};

fn current(store: &dev::apiserver::Store) -> NodeVersionStatus {
    store.api::<NodeVersion>().get(None, "constellation-version").unwrap().status.unwrap_or_default()
}

/// The status once no node is in flight and `done` holds.
async fn settled(
    store: &dev::apiserver::Store,
    what: &str,
    done: impl Fn(&NodeVersionStatus) -> bool,
) -> NodeVersionStatus {
    eventually(Duration::from_secs(240), what, || {
        let s = current(store);
        // Nothing moves: nodes staged ahead of their turn wait (behind a closed gate, say).
        let moving = s.in_flight.iter().any(|f| !(f.step == "stage" && f.waiting_on.is_some()));
        (!moving && done(&s)).then_some(s)
    })
    .await
}

fn node(store: &dev::apiserver::Store, name: &str) -> Node {
    store.api::<Node>().get(None, name).unwrap()
}

fn cordoned(n: &Node) -> bool {
    n.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false)
}

fn annotation(n: &Node, key: &str) -> Option<String> {
    n.metadata.annotations.as_ref().and_then(|a| a.get(key).cloned())
}

/// How many times the observer saw a node enter the stage step.
fn starts(observer: &Observer) -> usize {
    observer.with(|o| o.timeline.values().flatten().filter(|(_, step)| *step == shared::protocol::Step::Stage).count())
}

fn condition(s: &NodeVersionStatus, type_: &str) -> (String, String, String) {
    let c = s.conditions.iter().find(|c| c.type_ == type_).unwrap_or_else(|| panic!("no {type_} condition"));
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_update_failing_on_a_node_is_counted_and_spends_the_failure_budget() {
    let cluster = full_cluster().await;
    let store = cluster.store();
    cluster
        .hosts()
        .set_faults(
            "worker-1",
            HostFaults {
                stage_failure: Some(StageFailure { status: 500, message: "sha256 mismatch for the image".into() }),
                ..Default::default()
            },
        )
        .unwrap();
    let observer = Observer::start(cluster.client(), Limits::new(1, true));
    let agents = start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1, "failureBudget": 1}));

    let s = settled(&store, "the rollout to stop at the failure", |s| s.counts.failed == 1).await;
    let (status, reason, message) = condition(&s, "Failed");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "NodesFailed"));
    assert!(message.contains("worker-1: StageFailed") && message.contains("sha256 mismatch"), "{message}");
    let (status, progressing, _) = condition(&s, "Progressing");
    assert_eq!((status.as_str(), progressing.as_str()), ("False", "FailureBudgetExhausted"));
    // No node started after the failure, and the failed node was never cordoned.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let s = current(&store);
    assert!(s.counts.outdated > 0 && s.in_flight.is_empty(), "{:?}", s.counts);
    let failed = node(&store, "worker-1");
    assert!(!cordoned(&failed));
    assert_eq!(annotation(&failed, keys::INTENT).as_deref(), Some("failed"));
    assert_eq!(cluster.hosts().facts("worker-1").unwrap().os_image, "v1");
    // Raising the budget lets the rollout go on past the failed node.
    store
        .api::<NodeVersion>()
        .patch(
            None,
            "constellation-version",
            &dev::apiserver::Patch::Merge(json!({"spec": {"rollout": {"failureBudget": 2}}})),
            &Default::default(),
        )
        .unwrap();
    let s = settled(&store, "the rest of the rollout", |s| s.counts.up_to_date == 12).await;
    assert_eq!(s.counts.failed, 1);
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

/// A Deployment whose PDB never allows an eviction (minAvailable = replicas) on two workers.
fn pin_unevictable_pods(store: &dev::apiserver::Store) {
    let deployment: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "pinned", "namespace": "demo"},
        "spec": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "pinned"}},
            "template": {
                "metadata": {"labels": {"app": "pinned"}},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}], "terminationGracePeriodSeconds": 1}
            }
        }
    }))
    .unwrap();
    store.api::<Deployment>().create(Some("demo"), &deployment, &PostParams::default()).unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "pinned", "namespace": "demo"},
        "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": "pinned"}}}
    }))
    .unwrap();
    store.api::<PodDisruptionBudget>().create(Some("demo"), &pdb, &PostParams::default()).unwrap();
}

/// The nodes running a Ready pod of the pinned Deployment.
async fn pinned_nodes(store: &dev::apiserver::Store) -> BTreeSet<String> {
    eventually(Duration::from_secs(60), "the pinned pods to run", || {
        let pods = store.api::<Pod>().list(Some("demo"), &ListParams::default().labels("app=pinned")).ok()?.items;
        (pods.len() == 2 && pods.iter().all(pod_ready))
            .then(|| pods.iter().filter_map(|p| p.spec.as_ref()?.node_name.clone()).collect())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pdb_that_never_allows_eviction_blocks_its_nodes_and_the_rollout_goes_on() {
    let cluster = full_cluster().await;
    let store = cluster.store();
    pin_unevictable_pods(&store);
    let pinned = pinned_nodes(&store).await;
    let observer = Observer::start(cluster.client(), Limits::new(2, true));
    let agents = start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 2, "drainTimeout": "8s", "onDrainTimeout": "Continue"}));

    let s =
        settled(&store, "the rollout around the blocked nodes", |s| s.counts.up_to_date + s.counts.blocked == 13).await;
    assert_eq!(s.counts.blocked as usize, pinned.len());
    let (status, reason, message) = condition(&s, "Blocked");
    assert_eq!((status.as_str(), reason.as_str()), ("True", "NodesBlocked"));
    for name in &pinned {
        let n = node(&store, name);
        assert!(!cordoned(&n), "{name} left cordoned");
        assert_eq!(annotation(&n, keys::INTENT).as_deref(), Some("blocked"), "{name}");
        let why = annotation(&n, keys::INTENT_MESSAGE).unwrap_or_default();
        assert!(
            why.starts_with("DrainTimedOut: the drain did not finish within 8s") && why.contains("pinned"),
            "{why}"
        );
        assert!(message.contains(name.as_str()), "{message}");
        assert_eq!(cluster.hosts().facts(name).unwrap().os_image, "v1", "{name} was rebooted anyway");
    }
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_timeout_with_stop_starts_no_new_node() {
    let cluster = full_cluster().await;
    let store = cluster.store();
    pin_unevictable_pods(&store);
    pinned_nodes(&store).await;
    let observer = Observer::start(cluster.client(), Limits::new(1, true));
    let agents = start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1, "drainTimeout": "3s", "onDrainTimeout": "Stop"}));

    let s = settled(&store, "the rollout to stop", |s| s.counts.blocked == 1).await;
    let (status, reason, message) = condition(&s, "Progressing");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "StoppedOnDrainTimeout"), "{message}");
    let started_before = starts(&observer);
    // A new generation makes the controller plan again; once its status is out, that plan is
    // applied: no node started (the observer would have seen it, however briefly).
    let generation = store
        .api::<NodeVersion>()
        .patch(
            None,
            "constellation-version",
            &dev::apiserver::Patch::Merge(json!({"spec": {"rollout": {"soakTime": "1s"}}})),
            &Default::default(),
        )
        .unwrap()
        .metadata
        .generation;
    let after = settled(&store, "a plan of the new generation", |s| s.observed_generation == generation).await;
    assert_eq!(after.counts, s.counts, "a node started after the stop");
    assert_eq!(starts(&observer), started_before, "a node started after the stop");
    // Something was left to start: a node outdated, or staged ahead and waiting for its turn (in progress). Which
    // one depends on timing: a node a PDB defers goes after the others of its zone for 30 s (`budget_order`).
    assert!(after.counts.outdated + after.counts.in_progress > 0, "nothing was left to start: {:?}", after.counts);
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_never_returns_from_its_reboot_fails_at_the_deadline() {
    let cluster = full_cluster().await;
    let store = cluster.store();
    cluster.hosts().set_faults("worker-0", HostFaults { reboot_never_returns: true, ..Default::default() }).unwrap();
    let agents = start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1, "rebootTimeout": "4s", "failureBudget": 5}));

    let s = settled(&store, "the failure", |s| s.counts.failed == 1).await;
    let (_, _, message) = condition(&s, "Failed");
    assert!(message.contains("worker-0: RebootTimedOut: the node did not come back within 4s"), "{message}");
    let n = node(&store, "worker-0");
    assert!(!cordoned(&n), "worker-0 left cordoned");
    let ready = n
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    assert!(!ready, "worker-0 came back after all");
    // The dead node takes the only slot of maxUnavailable 1: the rollout halts and says why.
    let s = settled(&store, "the halt", |s| condition(s, "Progressing").1 == "UnavailableNodes").await;
    assert!(condition(&s, "Progressing").2.contains("worker-0 (NotReady)"));
    store
        .api::<NodeVersion>()
        .patch(
            None,
            "constellation-version",
            &dev::apiserver::Patch::Merge(json!({"spec": {"rollout": {"maxUnavailable": 2}}})),
            &Default::default(),
        )
        .unwrap();
    let s = settled(&store, "the rollout of the others", |s| s.counts.up_to_date == 12).await;
    for name in node_names(&store).into_iter().filter(|n| n != "worker-0") {
        assert_eq!(cluster.hosts().facts(&name).unwrap().os_image, "v2", "{name}");
    }
    // Never Complete while a node is failed: nothing can move, and the status says so.
    let (status, reason, message) = condition(&s, "Progressing");
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NodesFailed"), "{message}");
    // The node comes back after all, on the target: its intent=failed is cleared, so that the
    // annotations and the counts agree, and the rollout is complete.
    // As on a real host, its agent starts afresh after the boot.
    cluster.hosts().set_faults("worker-0", HostFaults::default()).unwrap();
    cluster.hosts().power_on("worker-0").unwrap();
    let (old, mut agents): (Vec<_>, Vec<_>) = agents.into_iter().partition(|a| a.name() == "agent worker-0");
    stop_all(old).await;
    agents.push(harness::agent(cluster.operator(), "worker-0"));
    let s = settled(&store, "worker-0 back", |s| s.counts.up_to_date == 13).await;
    assert_eq!(s.counts.failed, 0);
    assert_eq!(condition(&s, "Progressing").1, "Complete");
    assert_eq!(annotation(&node(&store, "worker-0"), keys::INTENT), None);
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}
