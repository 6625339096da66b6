//! Workloads settled before the next node (issue 33 item 2): with `settleWorkloads`, a node that runs a pod of a
//! workload that is not whole (fewer available replicas than wanted) is held, named in the status
//! (`WaitingForWorkloads`, then `SettleTimedOut` past `settleTimeout`) and in one Event, never cordoned meanwhile,
//! while the nodes that run none of its pods go; it goes once the workload is whole again.

use crate::support;

use controller::forecast::BlockerKind;
use controller::forecast::report::{Flags, Report};
use controller::forecast::snapshot::Snapshot;
use dev::apiserver::Patch;
use dev::harness;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, PatchParams, PostParams};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::{bare_cluster, create_version, eventually, fake_agents, operator, rolled_out, status_of};

use crate::support::VERSION;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_running_a_pod_of_a_degraded_workload_waits_named_uncordoned_until_the_workload_is_whole() {
    let server = bare_cluster(&["w-0", "w-1", "w-2"]).await;
    let store = server.store();
    // A StatefulSet of 3 with 2 available (one replica still rebuilding elsewhere), one of its pods on w-0. No
    // controller runs here: its status is set as the StatefulSet controller would.
    let set: StatefulSet = serde_json::from_value(json!({
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"replicas": 3, "serviceName": "pg", "selector": {"matchLabels": {"app": "pg"}},
                 "template": {"metadata": {"labels": {"app": "pg"}},
                              "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}}
    }))
    .unwrap();
    let set = store.api::<StatefulSet>().create(Some("default"), &set, &PostParams::default()).unwrap();
    let available = |n: i32| {
        let generation = set.metadata.generation.unwrap_or(1);
        let status = json!({"status": {"replicas": 3, "readyReplicas": n, "availableReplicas": n,
                                       "observedGeneration": generation}});
        store.api::<StatefulSet>().patch_status(Some("default"), "pg", &Patch::Merge(status), &PatchParams::default())
    };
    available(2).unwrap();
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
    // w-0 is never cordoned while the workload is degraded.
    let (whole, touched) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let sampler = {
        let (store, whole, touched) = (store.clone(), whole.clone(), touched.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(n) = store.api::<Node>().get(None, "w-0")
                    && n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
                    && !whole.load(Ordering::SeqCst)
                {
                    touched.store(true, Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let agents = fake_agents(&server, &["w-0", "w-1", "w-2"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1, "settleWorkloads": true, "settleTimeout": "40s"}));

    // w-1 and w-2 run none of its pods: they go. w-0 waits, named.
    let stalled = eventually(Duration::from_secs(90), "w-1 and w-2 updated, w-0 held", || {
        let s = status_of(&store, VERSION);
        (s.counts.up_to_date == 2 && s.in_flight.is_empty() && s.held_back.len() == 1).then_some(s)
    })
    .await;
    let held = &stalled.held_back[0];
    assert_eq!((held.name.as_str(), held.reason.as_str()), ("w-0", "WaitingForWorkloads"), "{held:?}");
    assert!(held.message.starts_with("statefulset/default/pg 2/3 ready: "), "{}", held.message);
    // One Event for the hold (after the usual delay).
    let notes = |reason: &str| {
        let list = store.api::<Event>().list(None, &ListParams::default()).unwrap();
        list.items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some(reason))
            .filter_map(|e| e.note)
            .collect::<Vec<_>>()
    };
    let events = eventually(Duration::from_secs(90), "an Event for the hold", || {
        let notes = notes("WaitingForWorkloads");
        (!notes.is_empty()).then_some(notes)
    })
    .await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert!(events[0].starts_with("w-0: statefulset/default/pg 2/3 ready"), "{events:?}");
    // `update-operator plan` shows the gate that holds the next node, with the workload and its counts.
    let client = server.client();
    let mut snapshot = Snapshot::read(&client).await.unwrap();
    snapshot.check_settle(&client, None).await.unwrap();
    let report = Report::build(snapshot, None, Flags::default(), None, jiff::Timestamp::now());
    let blocker = report.blockers.iter().find(|b| b.kind == BlockerKind::WorkloadsNotSettled).unwrap();
    assert_eq!(blocker.nodes, ["w-0"]);
    assert!(blocker.message.contains("statefulset/default/pg 2/3 ready"), "{}", report.text());
    // Past settleTimeout it says so, and w-0 stays held (never disrupted while the workload is degraded).
    eventually(Duration::from_secs(90), "the hold timed out", || {
        let s = status_of(&store, VERSION);
        s.held_back.iter().find(|h| h.name == "w-0" && h.reason == "SettleTimedOut").cloned()
    })
    .await;
    assert_eq!(status_of(&store, VERSION).counts.up_to_date, 2);

    // The replica is back: w-0 goes (looked at again within 5 s).
    whole.store(true, Ordering::SeqCst);
    available(3).unwrap();
    // Its drain evicts pg-0; no kubelet here confirms a graceful deletion: the pod goes once it is terminating.
    eventually(Duration::from_secs(60), "pg-0 evicted", || {
        let pod = store.api::<Pod>().get(Some("default"), "pg-0").ok()?;
        pod.metadata.deletion_timestamp.map(|_| ())
    })
    .await;
    store.api::<Pod>().delete(Some("default"), "pg-0", &DeleteParams::default().grace_period(0)).unwrap();
    let done = eventually(Duration::from_secs(60), "the rollout", || rolled_out(&store, 3)).await;
    assert!(done.held_back.is_empty());
    sampler.abort();
    assert!(!touched.load(Ordering::SeqCst), "w-0 was cordoned while its workload was degraded");
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}
