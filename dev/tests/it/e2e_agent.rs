//! The agent on the in-memory cluster with the real simulated hosts: transient host faults that heal
//! do not end a rollout, a node the controller did not cordon is never rebooted, a node released
//! while staging is left alone, and the agent neither wedges when its Node is registered again or
//! its keys are cleared nor misses a reboot it did not ask for.

use crate::support;

use dev::harness;
use dev::hosts::{HostFaults, StageFailure};
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, PatchParams};
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::keys;
use std::time::Duration;
use support::{create_version, eventually, full_cluster_with, start_agents, stop_all};

fn annotation(store: &dev::apiserver::Store, node: &str, key: &str) -> Option<String> {
    let node = store.api::<Node>().get(None, node).ok()?;
    node.metadata.annotations?.get(key).cloned()
}

/// Waits until `node` reports `state` about `token` (any token when `None`).
async fn reported(store: &dev::apiserver::Store, node: &str, state: &str, token: Option<&str>) {
    let what = format!("{node} to report {state} about {token:?}");
    eventually(Duration::from_secs(60), &what, || {
        let state_now = annotation(store, node, keys::STATE);
        let token_now = annotation(store, node, keys::STATE_TOKEN);
        (state_now.as_deref() == Some(state) && token.is_none_or(|t| token_now.as_deref() == Some(t))).then_some(())
    })
    .await;
}

/// A small cluster without workloads: the agent's behaviour needs no pods.
async fn bare(nodes: usize) -> dev::cluster::Cluster {
    full_cluster_with(|config| {
        config.nodes = nodes;
        config.control_planes = 1;
        config.workloads = None;
    })
    .await
}

/// Writes the controller's annotations by hand, as a controller (or an unlucky race) would.
fn intent(store: &dev::apiserver::Store, node: &str, step: &str, token: &str, extra: serde_json::Value) {
    let mut annotations = json!({
        keys::INTENT: step,
        keys::INTENT_TARGET: "v2",
        keys::INTENT_TOKEN: token,
        keys::INTENT_SINCE: "2026-11-21T10:00:00.000Z",
    });
    if let (Some(annotations), Some(extra)) = (annotations.as_object_mut(), extra.as_object()) {
        annotations.extend(extra.clone());
    }
    let patch = json!({"metadata": {"annotations": annotations}});
    store.api::<Node>().patch(None, node, &dev::apiserver::Patch::Merge(patch), &PatchParams::default()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transient_stage_fault_that_heals_does_not_end_the_rollout() {
    let cluster = bare(4).await;
    let store = cluster.store();
    // The update server is unavailable for worker-1: every stage answers 503 until the fault goes.
    let unavailable = StageFailure { status: 503, message: "the update server is unavailable".into() };
    cluster
        .hosts()
        .set_faults("worker-1", HostFaults { stage_failure: Some(unavailable), ..Default::default() })
        .unwrap();
    let observer = Observer::start(cluster.client(), Limits::new(1, false));
    let agents = start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1, "failureBudget": 1}));

    // The agent says what it works around, and keeps the node busy rather than failed.
    let message = eventually(Duration::from_secs(120), "worker-1 to report the transient error", || {
        let message = annotation(&store, "worker-1", keys::STATE_MESSAGE)?;
        message.contains("the update server is unavailable").then_some(message)
    })
    .await;
    assert_eq!(annotation(&store, "worker-1", keys::STATE).as_deref(), Some("busy"), "{message}");
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert_eq!(annotation(&store, "worker-1", keys::INTENT).as_deref(), Some("stage"));
    // The fault heals: the next attempt stages, and the rollout completes with its budget of 1.
    cluster.hosts().set_faults("worker-1", HostFaults::default()).unwrap();
    let status = eventually(Duration::from_secs(240), "the rollout to complete", || {
        let status = store.api::<NodeVersion>().get(None, "constellation-version").ok()?.status?;
        (status.counts.up_to_date == 4 && status.in_flight.is_empty()).then_some(status)
    })
    .await;
    assert_eq!(status.counts.failed, 0);
    assert_eq!(cluster.hosts().facts("worker-1").unwrap().os_image, "v2");
    assert_eq!(annotation(&store, "worker-1", keys::STATE_MESSAGE), None, "the problem is gone");
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_the_controller_did_not_cordon_is_not_rebooted() {
    let cluster = bare(2).await;
    let store = cluster.store();
    let agent = harness::agent(cluster.operator(), "worker-0");
    let boot_id =
        eventually(Duration::from_secs(60), "the first report", || annotation(&store, "worker-0", keys::BOOT_ID)).await;
    intent(&store, "worker-0", "stage", "s1", json!({}));
    reported(&store, "worker-0", "done", None).await;
    // A reboot intent on a schedulable node: refused, and the host keeps running.
    intent(&store, "worker-0", "reboot", "r1", json!({keys::BOOT_ID_BEFORE: boot_id}));
    let message = eventually(Duration::from_secs(60), "the refusal", || {
        (annotation(&store, "worker-0", keys::STATE).as_deref() == Some("error"))
            .then(|| annotation(&store, "worker-0", keys::STATE_MESSAGE))
            .flatten()
    })
    .await;
    assert!(message.starts_with("refusing to reboot into v2: the node is schedulable"), "{message}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let host = cluster.hosts().state("worker-0").unwrap();
    assert_eq!((host.boots, host.facts.boot_id.as_str()), (1, boot_id.as_str()));
    // Cordoned by the controller: rebooted and verified.
    let cordon = json!({"metadata": {"annotations": {keys::CORDONED_BY: keys::CORDONED_BY_VALUE}}, "spec": {"unschedulable": true}});
    store
        .api::<Node>()
        .patch(None, "worker-0", &dev::apiserver::Patch::Merge(cordon), &PatchParams::default())
        .unwrap();
    intent(&store, "worker-0", "reboot", "r2", json!({keys::BOOT_ID_BEFORE: boot_id}));
    reported(&store, "worker-0", "done", Some("r2")).await;
    assert_eq!(cluster.hosts().facts("worker-0").unwrap().os_image, "v2");
    agent.stop(Duration::from_secs(15)).await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_released_while_staging_is_no_longer_busy_and_can_be_staged_again() {
    let cluster = bare(2).await;
    let store = cluster.store();
    cluster
        .hosts()
        .set_faults("worker-0", HostFaults { stage_seconds: Some(Duration::from_secs(3600)), ..Default::default() })
        .unwrap();
    let agent = harness::agent(cluster.operator(), "worker-0");
    intent(&store, "worker-0", "stage", "s1", json!({}));
    reported(&store, "worker-0", "busy", None).await;
    // Released: the intent goes.
    let release = json!({"metadata": {"annotations": {
        keys::INTENT: null, keys::INTENT_TARGET: null, keys::INTENT_TOKEN: null, keys::INTENT_SINCE: null}}});
    store
        .api::<Node>()
        .patch(None, "worker-0", &dev::apiserver::Patch::Merge(release), &PatchParams::default())
        .unwrap();
    eventually(Duration::from_secs(60), "idle", || {
        (annotation(&store, "worker-0", keys::STATE).as_deref() == Some("idle")
            && annotation(&store, "worker-0", keys::STATE_TOKEN).is_none())
        .then_some(())
    })
    .await;
    // Picked again later: staged from the start.
    cluster
        .hosts()
        .set_faults("worker-0", HostFaults { stage_seconds: Some(Duration::from_millis(200)), ..Default::default() })
        .unwrap();
    intent(&store, "worker-0", "stage", "s2", json!({}));
    reported(&store, "worker-0", "done", Some("s2")).await;
    assert_eq!(cluster.hosts().facts("worker-0").unwrap().staged_image.as_deref(), Some("v2"));
    agent.stop(Duration::from_secs(15)).await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_reports_again_when_its_node_is_registered_again_or_its_keys_are_cleared() {
    let cluster = bare(2).await;
    let store = cluster.store();
    let agent = harness::agent(cluster.operator(), "worker-0");
    eventually(Duration::from_secs(60), "the first report", || annotation(&store, "worker-0", keys::OS_IMAGE)).await;
    // An administrator clears the agent's keys.
    let clear = json!({"metadata": {"annotations": {keys::OS_IMAGE: null, keys::BOOT_ID: null}}});
    store.api::<Node>().patch(None, "worker-0", &dev::apiserver::Patch::Merge(clear), &PatchParams::default()).unwrap();
    eventually(Duration::from_secs(60), "the report again", || annotation(&store, "worker-0", keys::OS_IMAGE)).await;
    // The Node is deleted and registered again (a new UID, no annotations). The agent's token is bound to the
    // Node it was issued for, so, as on a real cluster (node-bound service-account tokens are refused once their
    // Node is gone), the old agent can no longer write; the DaemonSet's new pod on the new Node gets a new token.
    let old_uid = store.api::<Node>().get(None, "worker-0").unwrap().metadata.uid;
    store.api::<Node>().delete(None, "worker-0", &DeleteParams::default()).unwrap();
    cluster.add_node("worker-0", false, "v1").unwrap();
    agent.stop(Duration::from_secs(15)).await.unwrap();
    let agent = harness::agent(cluster.operator(), "worker-0");
    eventually(Duration::from_secs(60), "the report on the new Node", || {
        let node = store.api::<Node>().get(None, "worker-0").ok()?;
        (node.metadata.uid != old_uid).then_some(())?;
        annotation(&store, "worker-0", keys::OS_IMAGE)
    })
    .await;
    // And it carries out the new Node's intents.
    intent(&store, "worker-0", "stage", "s1", json!({}));
    reported(&store, "worker-0", "done", None).await;
    agent.stop(Duration::from_secs(15)).await.unwrap();
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reboot_the_agent_did_not_ask_for_is_reported_from_the_kubelets_new_boot_id() {
    let cluster = bare(2).await;
    let store = cluster.store();
    let agent = harness::agent(cluster.operator(), "worker-0");
    let before =
        eventually(Duration::from_secs(60), "the first report", || annotation(&store, "worker-0", keys::BOOT_ID)).await;
    // An administrator reboots the host; no intent changes.
    cluster.hosts().reboot("worker-0").unwrap();
    let after = eventually(Duration::from_secs(60), "the new boot ID", || {
        annotation(&store, "worker-0", keys::BOOT_ID).filter(|id| *id != before)
    })
    .await;
    assert_eq!(after, cluster.hosts().facts("worker-0").unwrap().boot_id);
    agent.stop(Duration::from_secs(15)).await.unwrap();
    cluster.shutdown().await;
}
