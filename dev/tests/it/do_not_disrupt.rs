//! Do not disrupt (issue 33 item 3): a node running a pod annotated `update.edgeless.systems/do-not-disrupt: "true"`,
//! or a Node annotated `karpenter.sh/do-not-disrupt: "true"`, is held back with the reason `DoNotDisrupt` in the
//! status and in one Event, never cordoned meanwhile, and updated once the pod or the annotation is gone.

use crate::support;

use dev::apiserver::Patch;
use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, PatchParams, PostParams};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use support::{bare_cluster, condition_of, create_version, eventually, fake_agents, operator, rolled_out, status_of};

use crate::support::VERSION;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_with_a_do_not_disrupt_pod_or_annotation_is_held_named_never_cordoned_and_updated_once_it_is_gone() {
    let server = bare_cluster(&["w-0", "w-1", "w-2"]).await;
    let store = server.store();
    let observer = Observer::start(server.client(), Limits::new(1, false));
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "db-0", "namespace": "default",
                     "annotations": {"update.edgeless.systems/do-not-disrupt": "true"}},
        "spec": {"nodeName": "w-1", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .unwrap();
    store.api::<Pod>().create(Some("default"), &pod, &PostParams::default()).unwrap();
    let annotate = |value: serde_json::Value| {
        let patch = json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": value}}});
        store.api::<Node>().patch(None, "w-2", &Patch::Merge(patch), &PatchParams::default()).unwrap();
    };
    annotate(json!("true"));
    // Neither marked node is ever cordoned or drained while it is marked.
    let (pod_gone, annotation_gone, touched) =
        (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let sampler = {
        let (store, pod_gone, annotation_gone, touched) =
            (store.clone(), pod_gone.clone(), annotation_gone.clone(), touched.clone());
        tokio::spawn(async move {
            loop {
                for (node, gone) in [("w-1", &pod_gone), ("w-2", &annotation_gone)] {
                    let Ok(n) = store.api::<Node>().get(None, node) else { continue };
                    let intent = n.metadata.annotations.as_ref().and_then(|a| a.get("update.edgeless.systems/intent"));
                    let disrupted = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true)
                        || intent.is_some_and(|i| i == "drain" || i == "reboot");
                    if disrupted && !gone.load(Ordering::SeqCst) {
                        touched.store(true, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let agents = fake_agents(&server, &["w-0", "w-1", "w-2"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1}));

    // w-0 is updated; the two others are held, each named with what holds it.
    let stalled = eventually(Duration::from_secs(60), "w-0 updated, w-1 and w-2 held", || {
        let s = status_of(&store, VERSION);
        (s.counts.up_to_date == 1 && s.in_flight.is_empty() && s.held_back.len() == 2).then_some(s)
    })
    .await;
    let held: Vec<(&str, &str, &str)> =
        stalled.held_back.iter().map(|h| (h.name.as_str(), h.reason.as_str(), h.message.as_str())).collect();
    assert_eq!(held[0].0, "w-1");
    assert_eq!(held[0].1, "DoNotDisrupt");
    assert!(
        held[0].2.starts_with("pod default/db-0 is annotated update.edgeless.systems/do-not-disrupt=true"),
        "{held:?}"
    );
    assert_eq!(
        held[1],
        (
            "w-2",
            "DoNotDisrupt",
            "the Node is annotated karpenter.sh/do-not-disrupt=true; it starts once the annotation is removed"
        )
    );
    let (status, reason, message) = condition_of(&stalled, "Progressing").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "DoNotDisrupt"), "{message}");
    // One Event per node, however long the hold lasts (the first after the notice delay).
    let notes = || {
        let list = store.api::<Event>().list(None, &ListParams::default()).unwrap();
        let mut notes: Vec<String> = list
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("DoNotDisrupt"))
            .filter_map(|e| e.note)
            .collect();
        notes.sort();
        notes
    };
    let events = eventually(Duration::from_secs(90), "an Event for each", || {
        let notes = notes();
        (notes.len() == 2).then_some(notes)
    })
    .await;
    assert!(events[0].starts_with("w-1: pod default/db-0"), "{events:?}");
    assert!(events[1].starts_with("w-2: the Node is annotated"), "{events:?}");

    // The pod goes: w-1 is updated (looked at again within 30 s); then the annotation goes: w-2 is updated.
    pod_gone.store(true, Ordering::SeqCst);
    // No kubelet here confirms a graceful deletion: the pod goes at once.
    store.api::<Pod>().delete(Some("default"), "db-0", &DeleteParams::default().grace_period(0)).unwrap();
    eventually(Duration::from_secs(90), "w-1 updated", || {
        let s = status_of(&store, VERSION);
        (s.counts.up_to_date == 2 && s.in_flight.is_empty()).then_some(())
    })
    .await;
    assert_eq!(status_of(&store, VERSION).held_back.iter().map(|h| h.name.as_str()).collect::<Vec<_>>(), ["w-2"]);
    annotation_gone.store(true, Ordering::SeqCst);
    annotate(serde_json::Value::Null);
    let done = eventually(Duration::from_secs(60), "the rollout", || rolled_out(&store, 3)).await;
    assert!(done.held_back.is_empty());
    assert_eq!(notes().len(), 2, "one Event per node");
    sampler.abort();
    assert!(!touched.load(Ordering::SeqCst), "a marked node was cordoned or drained");
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

/// NodeOps keep the same hold as the rollouts (issue 27, one pipeline): a NodeOp passes over a worker that runs a
/// do-not-disrupt pod, names the pod in the node's status and its `Held` condition, never marks or cordons the
/// node meanwhile, and runs on it once the pod is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeop_passes_over_a_node_with_a_do_not_disrupt_pod_and_runs_on_it_once_the_pod_is_gone() {
    use crate::e2e_nodeop::{apply, assert_released, finished, nodeop, status_of as nodeop_status, wait_released};
    use shared::crd::nodeop::NodeOpPhase;
    use shared::protocol::keys;
    let cluster = support::full_cluster_with(|c| {
        c.nodes = 3;
        c.control_planes = 1;
    })
    .await;
    let store = cluster.store();
    let workers: Vec<String> =
        cluster.node_names().into_iter().filter(|n| !cluster.control_planes().contains(n)).collect();
    let (held, free) = (workers[0].clone(), workers[1].clone());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "db-0", "namespace": "default",
                     "annotations": {"karpenter.sh/do-not-disrupt": "true"}},
        "spec": {"nodeName": held, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .unwrap();
    store.api::<Pod>().create(Some("default"), &pod, &PostParams::default()).unwrap();
    let (pod_gone, touched) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let sampler = {
        let (store, pod_gone, touched, held) = (store.clone(), pod_gone.clone(), touched.clone(), held.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(n) = store.api::<Node>().get(None, &held) {
                    let marked = n.metadata.annotations.as_ref().is_some_and(|a| a.contains_key(keys::NODE_OPERATION));
                    let cordoned = n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
                    if (marked || cordoned) && !pod_gone.load(Ordering::SeqCst) {
                        touched.store(true, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };
    let agents = support::start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let spec = json!({"command": ["sh", "-c", "echo maintenance"], "cordon": true, "concurrency": 1});
    apply(&cluster.client(), nodeop("maintenance", spec)).await;

    // The others finish; the held worker waits, named, and so does the NodeOp once nothing else can start.
    let status = eventually(Duration::from_secs(180), "the free nodes done, the held one waiting", || {
        let s = nodeop_status(&cluster, "maintenance");
        let done = s.node_statuses.values().filter(|n| n.phase == NodeOpPhase::Completed).count();
        let waiting = s.node_statuses.get(&held).is_some_and(|n| n.phase == NodeOpPhase::Pending);
        let named = s.conditions.iter().any(|c| c.type_ == "Held" && c.reason == "DoNotDisrupt");
        (done == 2 && waiting && named).then_some(s)
    })
    .await;
    assert_eq!(status.node_statuses[&free].phase, NodeOpPhase::Completed);
    let message = &status.node_statuses[&held].message;
    assert!(
        message
            .contains("DoNotDisrupt: do not disrupt: pod default/db-0 is annotated karpenter.sh/do-not-disrupt=true"),
        "{message}"
    );
    let held_condition = status.conditions.iter().find(|c| c.type_ == "Held").unwrap();
    assert!(held_condition.message.contains("db-0"), "{held_condition:?}");

    // The pod goes: the node is looked at again (within 30 s) and the NodeOp runs on it.
    pod_gone.store(true, Ordering::SeqCst);
    store.api::<Pod>().delete(Some("default"), "db-0", &DeleteParams::default().grace_period(0)).unwrap();
    finished(&cluster, "maintenance", NodeOpPhase::Completed).await;
    sampler.abort();
    assert!(!touched.load(Ordering::SeqCst), "the held node was marked or cordoned while its pod ran");
    for node in cluster.node_names() {
        wait_released(&cluster, &node).await;
    }
    assert_released(&cluster);
    controller.stop(Duration::from_secs(15)).await.unwrap();
    support::stop_all(agents).await;
    cluster.shutdown().await;
}
