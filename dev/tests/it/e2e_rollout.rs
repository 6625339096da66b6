//! End-to-end rollouts on the in-memory cluster: 3 control-plane and 10 worker nodes, Deployments
//! and StatefulSets under PDBs, the real controller and one real agent per node on simulated hosts.
//! The observer checks the safety invariants at every event.

use crate::support;

use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use serde_json::json;
use std::time::Duration;
use support::{create_version, eventually, full_cluster, node_names, rolled_out, start_agents, stop_all};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_updates_every_node_without_breaking_an_invariant() {
    let cluster = full_cluster().await;
    let store = cluster.store();
    // Nodes are staged ahead of their turn, three at most (maxStaging), outside maxUnavailable.
    let observer = Observer::start(cluster.client(), Limits { max_staging: Some(3), ..Limits::new(2, true) });
    let agents = start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let pods_before: Vec<(String, String)> = store
        .api::<Pod>()
        .list(Some("demo"), &Default::default())
        .unwrap()
        .items
        .iter()
        .map(|p| (p.uid().unwrap_or_default(), p.spec.as_ref().and_then(|s| s.node_name.clone()).unwrap_or_default()))
        .collect();
    create_version(&store, "v2", json!({"maxUnavailable": 2, "maxStaging": 3}));

    let status = eventually(Duration::from_secs(240), "the rollout", || rolled_out(&store, 13)).await;
    assert_eq!(status.counts.failed + status.counts.blocked, 0);
    let up = status.conditions.iter().find(|c| c.type_ == "UpToDate").unwrap();
    assert_eq!(up.status, "True");
    for name in node_names(&store) {
        let node = store.api::<Node>().get(None, &name).unwrap();
        assert!(!node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false), "{name} left cordoned");
        assert_eq!(cluster.hosts().facts(&name).unwrap().os_image, "v2", "{name}");
        let boot = node.status.as_ref().and_then(|s| s.node_info.as_ref()).map(|i| i.boot_id.clone()).unwrap();
        assert_eq!(boot, cluster.hosts().facts(&name).unwrap().boot_id, "{name}: the kubelet reports the new boot");
    }
    // Every workload pod was evicted as its node was drained: none of them is still there (a StatefulSet's pod may
    // come back under the same name, on the same node once it is updated, but as another pod: another UID).
    let pods_after = store.api::<Pod>().list(Some("demo"), &Default::default()).unwrap().items;
    let survivors = pods_before.iter().filter(|(uid, node)| {
        pods_after.iter().any(|p| {
            p.uid().as_deref() == Some(uid.as_str())
                && p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node.as_str())
                && !p.name_any().starts_with("node-agent")
        })
    });
    assert_eq!(survivors.count(), 0, "a workload pod was never evicted");

    // Every step is an Event on the Node and on the NodeVersion, with the same reason.
    let events = store.api::<k8s_openapi::api::events::v1::Event>().list(None, &Default::default()).unwrap().items;
    let reasons = |kind: &str, name: &str| -> Vec<String> {
        let mut r: Vec<String> = events
            .iter()
            .filter(|e| {
                e.regarding.as_ref().is_some_and(|o| o.kind.as_deref() == Some(kind) && o.name.as_deref() == Some(name))
            })
            .filter_map(|e| Some(format!("{}: {}", e.reason.clone()?, e.note.clone().unwrap_or_default())))
            .collect();
        r.sort();
        r
    };
    let on_node = reasons("Node", "worker-4");
    for reason in ["StageRequested", "DrainStarted", "RebootRequested", "Verified"] {
        assert!(on_node.iter().any(|r| r.starts_with(reason)), "no {reason} Event on worker-4: {on_node:?}");
    }
    let on_version = reasons("NodeVersion", "constellation-version");
    for reason in ["StageRequested", "DrainStarted", "RebootRequested", "Verified"] {
        let count = on_version.iter().filter(|r| r.starts_with(&format!("{reason}: "))).count();
        assert_eq!(count, 13, "{reason} Events on the NodeVersion: {on_version:?}");
    }
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert_eq!(observed.max_control_plane_disrupted_seen, 1);
    assert!(observed.max_disrupted_seen >= 2, "the budget was never used in full");
    assert_eq!(observed.max_staging_seen, 3, "nodes were not staged ahead as far as maxStaging allows");
    let (controller_writes, agent_writes) = harness::node_writes(&cluster.server().metrics());
    // At most 8 per update and one more per node, plus one per node for the taint of outdated nodes (put on in a write
    // of its own for each node the first plan does not start: `preferUpdatedNodes`, docs/protocol.md).
    assert!(controller_writes + agent_writes <= 9 * 13 + 13, "{controller_writes} + {agent_writes} Node writes");
    // Each agent reports its host once at start, then three times per update: an agent that
    // took a stale watch event for the newest state would write its report twice.
    assert!(agent_writes <= 13 * 4, "{agent_writes} Node writes by the agents");

    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}
