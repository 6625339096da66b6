//! A target change while the control plane reboots into the image of before: the workers staged ahead for the new
//! target leave the control-plane node a slot of `maxStaging`, so the rollout ends on the new target. Before, both
//! slots went to workers that wait for the control plane, and the control-plane node waited for a slot: the rollout
//! stood still for ever (seen in CI with `make dev-rollout` run twice, which sets `v2`, then `dev-v2`).

use crate::support::{self, VERSION, create_version, eventually, eventually_or_say, rollout_state};

use dev::apiserver::Patch;
use dev::cluster::{Cluster, ClusterConfig};
use dev::harness;
use dev::observer::{Limits, Observer};
use dev::timing::Timing;
use k8s_openapi::api::core::v1::Node;
use kube::api::PatchParams;
use serde_json::json;
use shared::crd::NodeVersion;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_change_while_the_control_plane_reboots_ends_with_every_node_on_the_new_target() {
    // A reboot long enough for the change to land in it.
    let timing = Timing { reboot: Duration::from_secs(3), ..Timing::fast() };
    let config = ClusterConfig { nodes: 3, control_planes: 1, workloads: None, timing, ..ClusterConfig::default() };
    let cluster = Cluster::start(config).await.unwrap();
    let store = cluster.store();
    let observer = Observer::start(cluster.client(), Limits { max_staging: Some(2), ..Limits::new(2, false) });
    let agents = support::start_agents(&cluster);
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 2, "soakTime": "0s"}));

    let intent = |node: &str| {
        let node = store.api::<Node>().get(None, node).ok()?;
        node.metadata.annotations?.get("update.edgeless.systems/intent").cloned()
    };
    eventually(Duration::from_secs(60), "control-plane-0 in its reboot", || {
        (intent("control-plane-0").as_deref() == Some("reboot")).then_some(())
    })
    .await;
    let patch = json!({"spec": {"image": "v3"}});
    store.api::<NodeVersion>().patch(None, VERSION, &Patch::Merge(patch), &PatchParams::default()).unwrap();

    let done = || {
        let status = support::rolled_out(&store, 3)?;
        (status.target_image.as_deref() == Some("v3")).then_some(status)
    };
    eventually_or_say(Duration::from_secs(90), "the rollout to v3", done, || rollout_state(&store)).await;
    for name in support::node_names(&store) {
        assert_eq!(cluster.hosts().facts(&name).unwrap().os_image, "v3", "{name}");
    }
    let seen = observer.stop().await;
    assert_eq!(seen.violations, Vec::<String>::new());
    assert!(seen.max_staging_seen <= 2, "{} nodes staging with maxStaging 2", seen.max_staging_seen);

    support::stop_all(agents).await;
    support::stop_all(vec![controller]).await;
    cluster.shutdown().await;
}
