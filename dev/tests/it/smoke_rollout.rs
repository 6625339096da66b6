//! A rollout of the real controller and agents against the bare API server (no built-in
//! controllers): hosts that "reboot" by updating their Node's status. It exercises the protocol,
//! the executor's conditional writes, the agent's reports and the status, fast.

use crate::support;

use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::Node;
use serde_json::json;
use shared::protocol::Step;
use std::time::Duration;
use support::{FakeHost, bare_cluster, create_version, eventually, operator, rolled_out};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_completes_with_every_node_verified_and_uncordoned() {
    let names = ["cp-0", "w-0", "w-1", "w-2", "w-3"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    let mut agents = Vec::new();
    for name in names {
        let store = store.clone();
        agents.push(harness::agent_with(&operator(&server), name, move || Ok(FakeHost::new(store, name, "v1"))));
    }
    let observer = Observer::start(server.client(), Limits::new(2, false));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 2}));

    let status = eventually(Duration::from_secs(90), "the rollout", || rolled_out(&store, 5)).await;
    let up = status.conditions.iter().find(|c| c.type_ == "UpToDate").unwrap();
    assert_eq!((up.status.as_str(), up.reason.as_str()), ("True", "AllNodesUpToDate"));
    for name in names {
        let node = store.api::<Node>().get(None, name).unwrap();
        assert!(!node.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false), "{name} left cordoned");
        let a = node.metadata.annotations.unwrap();
        assert_eq!(a["update.edgeless.systems/os-image"], "v2", "{name}");
        assert_eq!(a["update.edgeless.systems/intent"], "done", "{name}");
        assert!(!a.contains_key("update.edgeless.systems/cordoned-by"), "{name}");
    }
    // 5 nodes, each: controller stage, drain (with cordon), reboot, done (with uncordon); agent busy,
    // staged, rebooted; plus each agent's first report of its host. Nothing else but the taint of outdated nodes
    // (`preferUpdatedNodes`): put on in the stage write of the nodes the first plan starts (the control-plane node and
    // a worker staged ahead, 23 writes seen; fewer if an agent had not reported yet), in a write of its own on the
    // others.
    let writes = server.metrics().writes_by_user_agent("nodes");
    let by = |mode: &str| {
        writes.iter().filter(|(ua, _)| ua.starts_with(&format!("update-operator/{mode}"))).map(|(_, n)| *n).sum::<u64>()
    };
    assert!((4 * 5 + 3..=4 * 5 + 5).contains(&by("controller")), "{writes:?}");
    assert_eq!(by("agent"), 3 * 5 + 5, "{writes:?}");
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert_eq!(observed.max_disrupted_seen, 2, "the budget was never used in full");
    assert_eq!(observed.max_control_plane_disrupted_seen, 1);
    let steps: Vec<Step> = observed.timeline["w-0"].iter().map(|(_, s)| *s).collect();
    assert_eq!(steps, vec![Step::Stage, Step::Drain, Step::Reboot, Step::Done]);
    controller.stop(Duration::from_secs(10)).await.unwrap();
    for agent in agents {
        agent.stop(Duration::from_secs(10)).await.unwrap();
    }
    server.shutdown().await;
}
