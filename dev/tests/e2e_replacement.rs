//! End-to-end replacement rollouts on the dev cluster and its simulated cloud: nodes of scaling groups are replaced
//! by new instances, the other nodes updated in place by their agents, under one budget; the observer checks the
//! invariants at every event.

mod support;

use cloud::metrics::CallCounts;
use cloud::simulated::SimulatedProvider;
use cloud::{CallPolicy, Governed, GroupRole};
use controller::groups::CloudOptions;
use dev::cloud::{GroupFaults, GroupSpec};
use dev::cluster::{Cluster, ClusterConfig};
use dev::harness::{self, Component};
use dev::observer::{Limits, Observer, Surge};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use serde_json::json;
use shared::crd::{NodeVersion, PendingNode};
use shared::protocol::keys;
use std::sync::Arc;
use std::time::Duration;
use support::{create_version, stop_all};

/// Long enough for a whole rollout on a loaded 2-core machine; the test ends as soon as it is done.
const ROLLOUT: Duration = Duration::from_secs(240);

/// 3 in-place workers, a control-plane group of 3 and two worker groups of 2, on image v1.
async fn mixed_cluster() -> Cluster {
    let config = ClusterConfig {
        nodes: 3,
        control_planes: 0,
        workloads: None,
        ready_timeout: Duration::from_secs(120),
        scaling_groups: vec![
            GroupSpec::new("cp", GroupRole::ControlPlane, 3),
            GroupSpec::new("workers-a", GroupRole::Worker, 2),
            GroupSpec::new("workers-b", GroupRole::Worker, 2),
        ],
        ..ClusterConfig::default()
    };
    Cluster::start(config).await.expect("the cluster starts")
}

/// The controller with the simulated cloud, as production wraps it.
fn controller(cluster: &Cluster, name: &str) -> Component {
    let provider = SimulatedProvider::new(cluster.url()).expect("the cluster's URL is an endpoint");
    let provider = Governed::new(provider, CallPolicy::default(), Arc::new(CallCounts::default()));
    let mut options = harness::controller_options(name);
    options.cloud = Some(CloudOptions::new(Arc::new(provider)));
    harness::controller(cluster.operator(), options)
}

/// One agent per in-place node (the groups' nodes need none: they are replaced).
fn in_place_agents(cluster: &Cluster) -> Vec<Component> {
    (0..3).map(|i| harness::agent(cluster.operator(), &format!("worker-{i}"))).collect()
}

fn nodes(cluster: &Cluster) -> Vec<Node> {
    cluster.store().api::<Node>().list(None, &Default::default()).unwrap().items
}

fn group_of(node: &Node) -> Option<String> {
    let id = node.spec.as_ref()?.provider_id.as_deref()?;
    Some(id.strip_prefix("simulated://")?.split('/').next()?.to_owned())
}

fn pending(cluster: &Cluster) -> Vec<PendingNode> {
    cluster.store().api::<PendingNode>().list(None, &Default::default()).unwrap().items
}

/// Where the rollout stands, for a test that fails.
fn describe(cluster: &Cluster) -> String {
    let version = cluster.store().api::<NodeVersion>().get(None, "constellation-version").ok();
    let status = version.and_then(|v| v.status).map(|s| serde_json::to_string(&s).unwrap_or_default());
    let nodes: Vec<String> = nodes(cluster)
        .iter()
        .map(|n| {
            let ours: Vec<String> = n
                .annotations()
                .iter()
                .filter(|(k, _)| k.starts_with(keys::PREFIX) && !k.contains("state") && !k.contains("boot"))
                .map(|(k, v)| format!("{}={v}", &k[keys::PREFIX.len()..]))
                .collect();
            format!("{} {:?} {}", n.name_any(), group_of(n), ours.join(" "))
        })
        .collect();
    let pending: Vec<String> =
        pending(cluster).iter().map(|p| format!("{} {:?} {:?}", p.name_any(), p.spec, p.status)).collect();
    format!("status {status:?}\nnodes:\n  {}\npending:\n  {}", nodes.join("\n  "), pending.join("\n  "))
}

/// The NodeVersion's status once every node runs `image` and no replacement is left.
fn rolled_out(cluster: &Cluster, image: &str, total: i32) -> Option<shared::crd::NodeVersionStatus> {
    let version = cluster.store().api::<NodeVersion>().get(None, "constellation-version").ok()?;
    let status = version.status?;
    (status.target_image.as_deref() == Some(image)
        && status.counts.total == total
        && status.counts.up_to_date == total
        && pending(cluster).is_empty())
    .then_some(status)
}

/// Waits for [`rolled_out`]; on a timeout the panic tells where the rollout stands.
async fn wait_rolled_out(cluster: &Cluster, image: &str, total: i32) -> shared::crd::NodeVersionStatus {
    let deadline = tokio::time::Instant::now() + ROLLOUT;
    loop {
        if let Some(status) = rolled_out(cluster, image, total) {
            return status;
        }
        assert!(tokio::time::Instant::now() < deadline, "the rollout did not finish:\n{}", describe(cluster));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mixed_cluster_replaces_its_group_nodes_and_updates_the_others_in_place() {
    let cluster = mixed_cluster().await;
    let store = cluster.store();
    let before: Vec<Node> = nodes(&cluster);
    let group_nodes: Vec<String> = before.iter().filter(|n| group_of(n).is_some()).map(|n| n.name_any()).collect();
    assert_eq!(group_nodes.len(), 7);
    // An administrator's label and taint on a worker of group a, which its heir must carry.
    let labelled = before.iter().find(|n| group_of(n).as_deref() == Some("workers-a")).unwrap().name_any();
    let patch = json!({
        "metadata": {"labels": {"team": "payments"}},
        "spec": {"taints": [{"key": "dedicated", "value": "payments", "effect": "NoSchedule"}]}
    });
    store.api::<Node>().patch(None, &labelled, &dev::apiserver::Patch::Merge(patch), &Default::default()).unwrap();

    let limits = Limits { surge: Some(Surge { baseline: 7, max_surge: 2 }), ..Limits::new(2, false) };
    let observer = Observer::start(cluster.client(), limits);
    let agents = in_place_agents(&cluster);
    let controller = controller(&cluster, "c1");
    create_version(&store, "v2", json!({"maxUnavailable": 2, "maxSurge": 2}));

    let status = wait_rolled_out(&cluster, "v2", 10).await;
    assert_eq!(status.counts.failed + status.counts.blocked, 0);
    let after = nodes(&cluster);
    for name in &group_nodes {
        assert!(after.iter().all(|n| n.name_any() != *name), "{name} was not replaced");
    }
    let heirs: Vec<&Node> = after.iter().filter(|n| group_of(n).is_some()).collect();
    assert_eq!(heirs.len(), 7, "one new node per replaced one");
    for heir in &heirs {
        let annotations = heir.annotations();
        assert!(!annotations.contains_key(keys::DONOR), "{} still names its donor", heir.name_any());
        assert!(!heir.spec.as_ref().and_then(|s| s.unschedulable).unwrap_or(false), "{} cordoned", heir.name_any());
    }
    let inheritor = heirs
        .iter()
        .find(|n| n.labels().get("team").map(String::as_str) == Some("payments"))
        .expect("the label was copied to the heir");
    assert_eq!(group_of(inheritor).as_deref(), Some("workers-a"));
    let taints = inheritor.spec.as_ref().and_then(|s| s.taints.clone()).unwrap_or_default();
    assert!(taints.iter().any(|t| t.key == "dedicated" && t.value.as_deref() == Some("payments")), "{taints:?}");
    for i in 0..3 {
        assert_eq!(cluster.hosts().facts(&format!("worker-{i}")).unwrap().os_image, "v2");
    }

    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert_eq!(observed.max_surge_seen, 2, "maxSurge was used in full");
    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}

#[allow(dead_code)]
fn never_joins() -> GroupFaults {
    GroupFaults { never_joins: true, ..Default::default() }
}
