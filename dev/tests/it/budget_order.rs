//! PDB-aware order (issue 34 item 1): a node whose pod a PodDisruptionBudget allows no disruption of goes after the
//! nodes that can be drained now, so the blocked budget does not hold the slot; alone in line, it starts anyway.

use crate::support;

use dev::apiserver::Patch;
use dev::harness;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{PatchParams, PostParams};
use parking_lot::Mutex;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use support::{bare_cluster, create_version, eventually, fake_agents, operator};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_a_budget_blocks_goes_after_the_others_and_then_starts_anyway() {
    let server = bare_cluster(&["w-0", "w-1", "w-2"]).await;
    let store = server.store();
    // A database pod on w-0, under a budget that allows no disruption (no controller here computes it: set as the
    // disruption controller would for minAvailable 1 over one healthy pod).
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "pg-0", "namespace": "default", "labels": {"app": "pg"},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "pg", "uid": "u", "controller": true}]},
        "spec": {"nodeName": "w-0", "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}
    }))
    .unwrap();
    store.api::<Pod>().create(Some("default"), &pod, &PostParams::default()).unwrap();
    // Running and Ready (a not-Ready pod may be evicted when its budget is met, as upstream's eviction allows).
    let ready = json!({"status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}});
    store.api::<Pod>().patch_status(Some("default"), "pg-0", &Patch::Merge(ready), &PatchParams::default()).unwrap();
    let pdb: PodDisruptionBudget = serde_json::from_value(json!({
        "metadata": {"name": "pg", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "pg"}}}
    }))
    .unwrap();
    store.api::<PodDisruptionBudget>().create(Some("default"), &pdb, &PostParams::default()).unwrap();
    let status = json!({"status": {"disruptionsAllowed": 0, "currentHealthy": 1, "desiredHealthy": 1, "expectedPods": 1, "observedGeneration": 1}});
    store
        .api::<PodDisruptionBudget>()
        .patch_status(Some("default"), "pg", &Patch::Merge(status), &PatchParams::default())
        .unwrap();
    // The order in which nodes are first cordoned.
    let order: Arc<Mutex<Vec<String>>> = Arc::default();
    let sampler = {
        let (store, order) = (store.clone(), order.clone());
        tokio::spawn(async move {
            loop {
                for n in store.api::<Node>().list(None, &Default::default()).map(|l| l.items).unwrap_or_default() {
                    let name = n.metadata.name.clone().unwrap_or_default();
                    let mut order = order.lock();
                    if n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true) && !order.contains(&name) {
                        order.push(name);
                    }
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
    };
    let agents = fake_agents(&server, &["w-0", "w-1", "w-2"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1}));
    // w-0 comes first by name, but its budget would hold the slot: w-1 and w-2 go first; then w-0 starts anyway
    // (its drain waits on the budget, as it must).
    let order = eventually(Duration::from_secs(90), "all three cordoned once", || {
        let order = order.lock().clone();
        (order.len() == 3).then_some(order)
    })
    .await;
    sampler.abort();
    assert_eq!(order, ["w-1", "w-2", "w-0"]);
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}
