//! Automatic rollback (issue 34 item 5, `spec.rollout.onFailure: Rollback`): an image that fails on a node spends
//! the failure budget, and the nodes the rollout updated go back to the image the whole fleet ran, the last one
//! first and the control plane last, within `maxUnavailable`, and a new leader continues the recorded rollback; a
//! node that fails on the way back stops the rollback, and the status and an Event say so.

use crate::support::{self, condition_of, eventually, status_of};

use dev::apiserver::Store;
use dev::cluster::{Cluster, ClusterConfig};
use dev::harness;
use dev::hosts::{HostFaults, StageFailure};
use dev::observer::{Limits, Observer};
use dev::timing::Timing;
use jiff::Timestamp;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use serde_json::json;
use shared::crd::NodeVersionStatus;
use shared::protocol::{Step, keys};
use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::VERSION;

fn faulty(message: &str) -> HostFaults {
    HostFaults { stage_failure: Some(StageFailure { status: 500, message: message.into() }), ..Default::default() }
}

fn os_image(store: &Store, node: &str) -> Option<String> {
    let node = store.api::<Node>().get(None, node).ok()?;
    node.metadata.annotations?.get(keys::OS_IMAGE).cloned()
}

/// The reasons of the Events on the NodeVersion.
fn version_events(store: &Store) -> Vec<(String, String)> {
    let events = store.api::<Event>().list(None, &ListParams::default()).unwrap();
    events
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(VERSION))
        .map(|e| (e.reason.unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

/// Every Event (when, about what, reason, note), for a failure's message.
fn event_log(store: &Store) -> Vec<String> {
    let events = store.api::<Event>().list(None, &ListParams::default()).unwrap();
    let line = |e: Event| {
        let about = e.regarding.and_then(|r| r.name).unwrap_or_default();
        let at = e.event_time.map(|t| t.0.to_string()).unwrap_or_default();
        format!("{at} {about} {} {}", e.reason.unwrap_or_default(), e.note.unwrap_or_default())
    };
    events.items.into_iter().map(line).collect()
}

/// The nodes drained a second time (back to the old image), in the order of those drains.
fn drained_back(timeline: &BTreeMap<String, Vec<(Timestamp, Step)>>) -> Vec<String> {
    let mut second: Vec<(Timestamp, String)> = timeline
        .iter()
        .filter_map(|(n, steps)| Some((steps.iter().filter(|(_, s)| *s == Step::Drain).nth(1)?.0, n.clone())))
        .collect();
    second.sort();
    second.into_iter().map(|(_, n)| n).collect()
}

/// The nodes the rollout updated (rebooted into v2; a node staged or draining for v2 when the rollback started is
/// released instead, never rebooted), in the rollback's order: workers by name descending, then the control plane.
fn updated_in_rollback_order(timeline: &BTreeMap<String, Vec<(Timestamp, Step)>>, cp: &str) -> Vec<String> {
    let mut updated: Vec<String> = timeline
        .iter()
        .filter(|(n, steps)| *n != cp && steps.iter().any(|(_, s)| *s == Step::Reboot))
        .map(|(n, _)| n.clone())
        .collect();
    updated.reverse();
    updated.push(cp.to_owned());
    updated
}

/// A cluster of one control-plane node and four workers on v1, the agents and a controller, and a rollout to v2
/// with `onFailure: Rollback` that fails on the last worker (its stage).
async fn failing_rollout() -> (Cluster, Vec<harness::Component>, Observer, Vec<String>) {
    let timing = Timing { stage: Duration::from_millis(300), reboot: Duration::from_millis(700), ..Timing::fast() };
    // No sample workloads: their PodDisruptionBudgets would defer a worker behind the next one now and then
    // (`crate::budget_order`), and the order this test checks is the rollback's.
    let config = ClusterConfig {
        nodes: 5,
        control_planes: 1,
        image: "v1".into(),
        workloads: None,
        timing,
        ..ClusterConfig::default()
    };
    let cluster = Cluster::start(config).await.unwrap();
    let names = cluster.node_names();
    cluster.hosts().set_faults(&names[4], faulty("sha256 mismatch for the image")).unwrap();
    let mut components: Vec<_> = names.iter().map(|n| harness::agent(cluster.operator(), n)).collect();
    components.push(harness::controller(cluster.operator(), harness::controller_options("c1")));
    eventually(Duration::from_secs(60), "the agents and the controller", || {
        components.iter().all(harness::Component::is_ready).then_some(())
    })
    .await;
    // Every agent has reported its host's image: no node is held back (NoAgentReport) and passed over.
    eventually(Duration::from_secs(60), "every node's image reported", || {
        names.iter().all(|n| os_image(&cluster.store(), n).as_deref() == Some("v1")).then_some(())
    })
    .await;
    let observer = Observer::start(cluster.client(), Limits::new(1, true));
    support::create_version(
        &cluster.store(),
        "v2",
        json!({"maxUnavailable": 1, "soakTime": "0ms", "failureBudget": 1, "onFailure": "Rollback"}),
    );
    (cluster, components, observer, names)
}

async fn settled(store: &Store, what: &str, reason: &str) -> (NodeVersionStatus, String) {
    eventually(Duration::from_secs(120), what, || {
        let status = status_of(store, VERSION);
        let (_, r, message) = condition_of(&status, "Progressing")?;
        (r == reason && status.in_flight.is_empty()).then_some((status, message))
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_image_rolls_the_updated_nodes_back_the_last_first_and_the_control_plane_last_across_a_new_leader() {
    let (cluster, mut components, observer, names) = failing_rollout().await;
    let store = cluster.store();
    // Once the rollback is recorded, the controller goes and another takes over: it continues the rollback.
    eventually(Duration::from_secs(60), "the rollback's record", || status_of(&store, VERSION).rollback).await;
    let first_controller = components.pop().unwrap();
    first_controller.stop(Duration::from_secs(10)).await.unwrap();
    components.push(harness::controller(cluster.operator(), harness::controller_options("c2")));

    let (status, message) = settled(&store, "the rollback to v1", "RolledBack").await;
    let seen = observer.stop().await;
    assert_eq!(seen.violations, Vec::<String>::new(), "maxUnavailable 1 at every instant");
    assert!(message.starts_with("rolled back from v2 to v1: all 5 node(s) run v1 again"), "{message}");
    assert_eq!(status.last_complete_image.as_deref(), Some("v1"), "recorded from the fleet before it moved");
    let rollback = status.rollback.clone().unwrap();
    assert_eq!((rollback.from.as_str(), rollback.to.as_str()), ("v2", "v1"));
    for name in &names {
        assert_eq!(os_image(&store, name).as_deref(), Some("v1"), "{name}");
    }
    // Forward: the control plane, then the workers by name, until the last one failed (the worker staging or
    // draining then was released); back: the workers the last first, then the control plane.
    let (cp, w) = (&names[0], &names[1..]);
    let updated = updated_in_rollback_order(&seen.timeline, cp);
    assert!(updated.ends_with(&[w[1].clone(), w[0].clone(), cp.clone()]), "{updated:?} {:?}", seen.timeline);
    assert_eq!(drained_back(&seen.timeline), updated, "{:#?}", event_log(&store));
    assert!(!seen.timeline.get(&w[3]).is_some_and(|s| s.iter().any(|(_, s)| *s == Step::Drain)));
    // No node went to v2 again after the change of leader: each was drained at most twice.
    for (node, steps) in &seen.timeline {
        assert!(steps.iter().filter(|(_, s)| *s == Step::Drain).count() <= 2, "{node}: {steps:?}");
    }
    // Events are published in the background: the status may say RolledBack a moment before its Event is out.
    let events = eventually(Duration::from_secs(30), "the RolledBack Event", || {
        let events = version_events(&store);
        events.iter().any(|(r, _)| r == "RolledBack").then_some(events)
    })
    .await;
    assert!(events.iter().any(|(r, m)| r == "RollbackStarted" && m.contains("go back to v1")), "{events:?}");

    // Nothing more starts until spec.image changes: the rollout stays rolled back.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (_, reason, _) = condition_of(&status_of(&store, VERSION), "Progressing").unwrap();
    assert_eq!(reason, "RolledBack");

    support::stop_all(components).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_failing_on_the_way_back_stops_the_rollback_and_says_so() {
    let (cluster, components, observer, names) = failing_rollout().await;
    let store = cluster.store();
    let first_worker = names[1].clone();
    // Once the first worker runs v2, its host fails every stage: it cannot go back.
    eventually(Duration::from_secs(60), "the first worker on v2", || {
        (os_image(&store, &first_worker).as_deref() == Some("v2")).then_some(())
    })
    .await;
    cluster.hosts().set_faults(&first_worker, faulty("disk full")).unwrap();

    let (status, message) = settled(&store, "the failed rollback", "RollbackFailed").await;
    let seen = observer.stop().await;
    assert_eq!(seen.violations, Vec::<String>::new());
    assert!(message.starts_with("the rollback from v2 to v1 failed: 1 node(s) failed to update to v1"), "{message}");
    let (_, reason, failed) = condition_of(&status, "Failed").unwrap();
    assert_eq!(reason, "NodesFailed");
    assert!(failed.contains(&first_worker) && failed.contains("disk full"), "{failed}");
    // The later workers went back, the last first; the first failed to; the control plane, last, stays on v2.
    let mut back = updated_in_rollback_order(&seen.timeline, &names[0]);
    back.retain(|n| *n != first_worker && *n != names[0]);
    assert!(back.ends_with(&[names[2].clone()]), "{back:?}");
    assert_eq!(drained_back(&seen.timeline), back, "{:#?}", event_log(&store));
    for name in &back {
        assert_eq!(os_image(&store, name).as_deref(), Some("v1"), "{name}");
    }
    assert_eq!(os_image(&store, &first_worker).as_deref(), Some("v2"));
    assert_eq!(os_image(&store, &names[0]).as_deref(), Some("v2"));
    let events = eventually(Duration::from_secs(30), "the RollbackFailed Event", || {
        let events = version_events(&store);
        events.iter().any(|(r, m)| r == "RollbackFailed" && m.contains("it stops")).then_some(events)
    })
    .await;
    assert!(events.iter().any(|(r, m)| r == "RollbackFailed" && m.contains("it stops")), "{events:?}");

    support::stop_all(components).await;
    cluster.shutdown().await;
}

/// The images of a group's instances that are not terminated, by the simulated cloud.
fn instance_images(cluster: &Cluster, group: &str) -> Vec<String> {
    let snapshot = cluster.cloud().snapshot();
    let live = cluster.cloud().instances_of(group);
    let instances = snapshot["instances"].as_array().cloned().unwrap_or_default();
    let mut images: Vec<String> = instances
        .iter()
        .map(|i| &i["instance"])
        .filter(|i| live.iter().any(|n| i["name"] == n.as_str()))
        .filter_map(|i| i["image"].as_str().map(str::to_owned))
        .collect();
    images.sort();
    images
}

/// A replaced node goes back by replacement too: a new instance of the previous image takes the place of the node
/// the rollout replaced; the node updated in place goes back in place.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replaced_node_goes_back_as_a_new_instance_of_the_previous_image() {
    use crate::e2e_replacement::{controller, describe, group_nodes, small_cluster};
    let cluster = small_cluster().await;
    let store = cluster.store();
    let limits = Limits { surge: Some(dev::observer::Surge { baseline: 2, max_surge: 1 }), ..Limits::new(1, false) };
    let agents = vec![harness::agent(cluster.operator(), "worker-0")];
    let controller = controller(&cluster, "c1");
    eventually(Duration::from_secs(60), "the agent's report", || {
        (os_image(&store, "worker-0").as_deref() == Some("v1")).then_some(())
    })
    .await;
    let observer = Observer::start(cluster.client(), limits);
    let rollout = json!({"maxUnavailable": 1, "maxSurge": 1, "joinTimeout": "4s", "failureBudget": 1,
                         "onFailure": "Rollback"});
    support::create_version(&store, "v2", rollout);

    // worker-0 in place, then the first node of the group replaced by an instance of v2 (once its node registered,
    // the next instance is created only after the donor is gone); from then on the group's instances never join:
    // the second replacement fails, the budget is spent.
    eventually(Duration::from_secs(120), "the first v2 instance's node", || {
        let snapshot = cluster.cloud().snapshot();
        let instances = snapshot["instances"].as_array().cloned().unwrap_or_default();
        instances
            .iter()
            .any(|i| i["registered"] == true && i["instance"]["group"] == "workers-a" && i["instance"]["image"] == "v2")
            .then_some(())
    })
    .await;
    let faults = dev::cloud::GroupFaults { never_joins: true, ..Default::default() };
    cluster.cloud().set_group_faults("workers-a", faults).unwrap();
    let replaced = group_nodes(&cluster, "workers-a");
    eventually(Duration::from_secs(120), "the rollback's record", || status_of(&store, VERSION).rollback).await;
    cluster.cloud().set_group_faults("workers-a", dev::cloud::GroupFaults::default()).unwrap();

    let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
    let status = loop {
        let status = status_of(&store, VERSION);
        if condition_of(&status, "Progressing").is_some_and(|(_, r, _)| r == "RolledBack")
            && status.in_flight.is_empty()
        {
            break status;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "no RolledBack:\n{}\n{:?}\n{:?}",
            describe(&cluster),
            status.conditions,
            cluster.cloud().snapshot()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let describe = describe(&cluster);
    assert_eq!(status.counts.up_to_date, 3, "{describe}");
    assert_eq!(os_image(&store, "worker-0").as_deref(), Some("v1"));
    eventually(Duration::from_secs(60), "the group's instances on v1", || {
        (instance_images(&cluster, "workers-a") == ["v1", "v1"]).then_some(())
    })
    .await;
    let now = group_nodes(&cluster, "workers-a");
    assert_eq!(now.len(), 2, "{describe}");
    assert!(now != replaced, "the v2 node was replaced again: {replaced:?} -> {now:?}");
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());

    controller.stop(Duration::from_secs(15)).await.unwrap();
    support::stop_all(agents).await;
    cluster.shutdown().await;
}
