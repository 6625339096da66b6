//! The settle gate (issue 33 item 2) when its NodeVersion is paused, retargeted or deleted while a node waits for
//! its workloads (`WaitingForWorkloads`): no node is cordoned or labelled meanwhile, no hold of the old target stays
//! in the status, the old wait's `settleTimeout` never fires later (no `SettleTimedOut` of a wait that ended), and
//! a new target's wait starts afresh and proceeds once the workloads are whole.

use crate::support;

use dev::apiserver::{ApiServer, Patch, Store};
use dev::harness;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, PatchParams, PostParams};
use serde_json::{Value, json};
use shared::crd::NodeVersion;
use shared::protocol::keys::{AFTER_REBOOT_LABEL, BEFORE_REBOOT_LABEL};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::{bare_cluster, condition_of, create_version, eventually, fake_agents, operator, status_of};

use crate::support::VERSION;

/// The StatefulSet `default/pg` of 3 with 2 available (as its controller would say; none runs here) and its pod
/// `pg-0` on w-0, running and ready. Returns a function that sets its available replicas.
fn degraded_statefulset(store: &Store) -> impl Fn(i32) + use<> {
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"replicas": 3, "serviceName": "pg", "selector": {"matchLabels": {"app": "pg"}},
                 "template": {"metadata": {"labels": {"app": "pg"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}
    }))
    .unwrap();
    let set = store.api::<StatefulSet>().create(Some("default"), &set, &PostParams::default()).unwrap();
    let generation = set.metadata.generation.unwrap_or(1);
    let available = {
        let store = store.clone();
        move |n: i32| {
            let status = json!({"status": {"replicas": 3, "readyReplicas": n, "availableReplicas": n,
                                           "observedGeneration": generation}});
            let api = store.api::<StatefulSet>();
            api.patch_status(Some("default"), "pg", &Patch::Merge(status), &PatchParams::default()).unwrap();
        }
    };
    available(2);
    let uid = set.metadata.uid.clone().unwrap_or_default();
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "pg-0", "namespace": "default", "labels": {"app": "pg"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "pg", "uid": uid,
                                          "controller": true}]},
        "spec": {"nodeName": "w-0", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .unwrap();
    store.api::<Pod>().create(Some("default"), &pod, &PostParams::default()).unwrap();
    let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    store.api::<Pod>().patch_status(Some("default"), "pg-0", &Patch::Merge(ready), &PatchParams::default()).unwrap();
    available
}

/// Whether w-0 was ever cordoned, given an intent or labelled before/after-reboot while `quiet` is set.
fn watch_w0(store: Store, quiet: Arc<AtomicBool>, touched: Arc<AtomicBool>) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            if let Ok(n) = store.api::<Node>().get(None, "w-0") {
                let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
                let labels = n.metadata.labels.unwrap_or_default();
                let labelled = labels.contains_key(BEFORE_REBOOT_LABEL) || labels.contains_key(AFTER_REBOOT_LABEL);
                let intent =
                    n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(shared::protocol::keys::INTENT));
                if (cordoned || labelled || intent) && quiet.load(Ordering::SeqCst) {
                    touched.store(true, Ordering::SeqCst);
                }
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
}

/// The notes of the Events with `reason`.
fn notes(store: &Store, reason: &str) -> Vec<String> {
    let list = store.api::<Event>().list(None, &ListParams::default()).unwrap();
    list.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.note).collect()
}

/// w-0's hold in the status, once it has one.
/// w-0's hold once it is a settle hold (waiting, or timed out). Before, while w-1 is in flight, w-0 may be held for
/// the budget: seen first on a loaded machine.
async fn w0_held(store: &Store) -> shared::crd::HeldBackNode {
    eventually(Duration::from_secs(90), "w-0 held for its workloads", || {
        let held = status_of(store, VERSION).held_back.into_iter().find(|h| h.name == "w-0")?;
        ["WaitingForWorkloads", "SettleTimedOut"].contains(&held.reason.as_str()).then_some(held)
    })
    .await
}

fn patch_rollout(store: &Store, patch: Value) {
    store.api::<NodeVersion>().patch(None, VERSION, &Patch::Merge(patch), &PatchParams::default()).unwrap();
}

async fn stop(server: ApiServer, controller: harness::Component, agents: Vec<harness::Component>) {
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_paused_or_retargeted_mid_wait_keeps_no_old_hold_or_timeout_and_the_new_target_goes_once_settled() {
    let server = bare_cluster(&["w-0", "w-1"]).await;
    let store = server.store();
    let available = degraded_statefulset(&store);
    let (quiet, touched) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let sampler = watch_w0(store.clone(), quiet.clone(), touched.clone());
    let agents = fake_agents(&server, &["w-0", "w-1"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1, "settleWorkloads": true, "settleTimeout": "30s"}));

    // w-1 runs none of pg's pods: it goes. w-0 waits for pg.
    eventually(Duration::from_secs(90), "w-1 updated", || {
        (status_of(&store, VERSION).counts.up_to_date == 1).then_some(())
    })
    .await;
    let held = w0_held(&store).await;
    assert_eq!(held.reason, "WaitingForWorkloads", "{held:?}");

    // Paused mid-wait, for longer than settleTimeout: the pause is the hold; the wait it ended never times out.
    patch_rollout(&store, json!({"spec": {"rollout": {"paused": true}}}));
    eventually(Duration::from_secs(60), "Progressing Paused", || {
        let (_, reason, _) = condition_of(&status_of(&store, VERSION), "Progressing")?;
        (reason == "Paused").then_some(())
    })
    .await;
    for _ in 0..35 {
        let status = status_of(&store, VERSION);
        let stale = status.held_back.iter().find(|h| h.reason == "SettleTimedOut" || h.reason == "WaitingForWorkloads");
        assert!(stale.is_none(), "a settle hold while paused: {:?}", status.held_back);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    assert_eq!(notes(&store, "SettleTimedOut"), Vec::<String>::new(), "the paused wait timed out");

    // Resumed: w-0's wait starts afresh (the paused one is not counted).
    patch_rollout(&store, json!({"spec": {"rollout": {"paused": false}}}));
    let held = w0_held(&store).await;
    assert_eq!(held.reason, "WaitingForWorkloads", "the paused wait went on: {held:?}");
    assert_eq!(notes(&store, "SettleTimedOut"), Vec::<String>::new(), "the paused wait timed out");

    // Retargeted 15 s into the wait (settleTimeout 30 s): the new target's wait starts then. 22 s later the old
    // wait has timed out (7 s before), the new one has not (8 s to go).
    tokio::time::sleep(Duration::from_secs(15)).await;
    patch_rollout(&store, json!({"spec": {"image": "v3"}}));
    let retargeted = tokio::time::Instant::now();
    let held = eventually(Duration::from_secs(60), "w-1 on v3, w-0 held", || {
        let status = status_of(&store, VERSION);
        let held = status.held_back.iter().find(|h| h.name == "w-0").cloned();
        let retargeted = status.target_image.as_deref() == Some("v3");
        (retargeted && status.counts.up_to_date == 1 && status.in_flight.is_empty()).then_some(held).flatten()
    })
    .await;
    assert_eq!(held.reason, "WaitingForWorkloads", "{held:?}");
    let w1 = store.api::<Node>().get(None, "w-1").unwrap().metadata.annotations.unwrap_or_default();
    assert_eq!(w1.get(shared::protocol::keys::OS_IMAGE).map(String::as_str), Some("v3"));
    tokio::time::sleep_until(retargeted + Duration::from_secs(22)).await;
    let held = status_of(&store, VERSION).held_back.into_iter().find(|h| h.name == "w-0");
    assert_eq!(held.map(|h| h.reason).as_deref(), Some("WaitingForWorkloads"), "the old target's wait went on");
    assert_eq!(notes(&store, "SettleTimedOut"), Vec::<String>::new(), "the old target's wait timed out");

    // The workloads are whole: w-0 goes to v3.
    quiet.store(false, Ordering::SeqCst);
    available(3);
    eventually(Duration::from_secs(60), "pg-0 evicted", || {
        let pod = store.api::<Pod>().get(Some("default"), "pg-0").ok()?;
        pod.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    store.api::<Pod>().delete(Some("default"), "pg-0", &DeleteParams::default().grace_period(0)).unwrap();
    let done = eventually(Duration::from_secs(90), "the rollout to v3", || support::rolled_out(&store, 2)).await;
    assert!(done.held_back.is_empty(), "{:?}", done.held_back);
    sampler.abort();
    assert!(!touched.load(Ordering::SeqCst), "w-0 was cordoned, given an intent or labelled while it waited");
    stop(server, controller, agents).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settle_deleted_mid_wait_touches_no_node_and_its_wait_never_times_out_for_a_new_nodeversion() {
    let server = bare_cluster(&["w-0", "w-1"]).await;
    let store = server.store();
    let _available = degraded_statefulset(&store);
    let (quiet, touched) = (Arc::new(AtomicBool::new(true)), Arc::new(AtomicBool::new(false)));
    let sampler = watch_w0(store.clone(), quiet.clone(), touched.clone());
    let agents = fake_agents(&server, &["w-0", "w-1"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    let rollout = json!({"maxUnavailable": 1, "settleWorkloads": true, "settleTimeout": "20s"});
    create_version(&store, "v2", rollout.clone());
    let held = w0_held(&store).await;
    assert_eq!(held.reason, "WaitingForWorkloads", "{held:?}");

    // Deleted mid-wait: it goes (its finalizer removed); then longer than settleTimeout passes.
    store.api::<NodeVersion>().delete(None, VERSION, &DeleteParams::default()).unwrap();
    eventually(Duration::from_secs(60), "the NodeVersion gone", || {
        store.api::<NodeVersion>().get(None, VERSION).is_err().then_some(())
    })
    .await;
    tokio::time::sleep(Duration::from_secs(25)).await;
    assert_eq!(notes(&store, "SettleTimedOut"), Vec::<String>::new(), "the deleted rollout's wait timed out");

    // A new NodeVersion: w-0's wait for it starts afresh, not timed out by the deleted one's.
    create_version(&store, "v3", rollout);
    let held = w0_held(&store).await;
    assert_eq!(held.reason, "WaitingForWorkloads", "the deleted rollout's wait went on: {held:?}");
    assert_eq!(notes(&store, "SettleTimedOut"), Vec::<String>::new());
    sampler.abort();
    assert!(!touched.load(Ordering::SeqCst), "w-0 was cordoned, given an intent or labelled");
    stop(server, controller, agents).await;
}
