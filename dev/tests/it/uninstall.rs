//! Deleting a NodeVersion, or uninstalling mid-rollout (issue 15 item 5): the NodeVersion stays
//! (its finalizer) until the controller has released every node it selects, even when the
//! controller was down at the moment of deletion; a deleted NodeVersion leaves no node cordoned by
//! us, mid-step or with a drain running. The invariant observer watches throughout.

use crate::support;

use dev::apiserver::Patch;
use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::Node;
use kube::api::{DeleteParams, PatchParams};
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::keys;
use std::time::Duration;
use support::{bare_cluster, create_version, eventually, fake_agents, operator};

use crate::support::VERSION;
const FINALIZER: &str = "update.edgeless.systems/release-nodes";

fn annotation(store: &dev::apiserver::Store, node: &str, key: &str) -> Option<String> {
    store.api::<Node>().get(None, node).ok()?.metadata.annotations?.get(key).cloned()
}

fn finalizers(store: &dev::apiserver::Store) -> Option<Vec<String>> {
    store.api::<NodeVersion>().get(None, VERSION).ok().map(|v| v.metadata.finalizers.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodeversion_deleted_mid_rollout_while_the_controller_is_down_goes_only_after_its_nodes_are_released() {
    let names = ["w-0", "w-1", "w-2", "w-3"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    let observer = Observer::start(server.client(), Limits::new(2, false));
    // Staging takes long, so the nodes are mid-step when the NodeVersion is deleted.
    let agents = fake_agents(&server, &names, "v1", Duration::from_secs(600));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 2, "stageTimeout": "1h"}));
    let in_stage = |store: &dev::apiserver::Store| -> Vec<&str> {
        names.iter().copied().filter(|n| annotation(store, n, keys::INTENT).as_deref() == Some("stage")).collect()
    };
    eventually(Duration::from_secs(30), "two nodes staging", || (in_stage(&store).len() == 2).then_some(())).await;
    assert_eq!(finalizers(&store), Some(vec![FINALIZER.to_owned()]), "the finalizer is added before nodes are touched");
    let other = json!({"metadata": {"finalizers": [FINALIZER, "example.com/audit"]}});
    store.api::<NodeVersion>().patch(None, VERSION, &Patch::Merge(other), &PatchParams::default()).unwrap();

    // The controller goes down; the NodeVersion is deleted (as `kubectl delete -f` of the whole
    // install would). The finalizer keeps it, with what it selects, for the next controller.
    controller.crash().await;
    store.api::<NodeVersion>().delete(None, VERSION, &DeleteParams::default()).unwrap();
    let deleted = store.api::<NodeVersion>().get(None, VERSION).unwrap();
    assert!(deleted.metadata.deletion_timestamp.is_some());
    assert_eq!(in_stage(&store).len(), 2, "nobody released the nodes yet");

    // A controller comes back: it releases both nodes, then removes its finalizer (and only its own).
    let controller = harness::controller(&operator(&server), harness::controller_options("c2"));
    eventually(Duration::from_secs(60), "our finalizer removed", || {
        (finalizers(&store)? == vec!["example.com/audit".to_owned()]).then_some(())
    })
    .await;
    for name in names {
        assert_eq!(annotation(&store, name, keys::INTENT), None, "{name} still has an intent");
        assert_eq!(annotation(&store, name, keys::CORDONED_BY), None, "{name} is still cordoned by us");
        let node = store.api::<Node>().get(None, name).unwrap();
        assert_ne!(node.spec.and_then(|s| s.unschedulable), Some(true), "{name} is unschedulable");
    }
    // The other writer's finalizer is theirs to remove; then the NodeVersion goes.
    let theirs = json!({"metadata": {"finalizers": null}});
    store.api::<NodeVersion>().patch(None, VERSION, &Patch::Merge(theirs), &PatchParams::default()).unwrap();
    eventually(Duration::from_secs(10), "the NodeVersion gone", || finalizers(&store).is_none().then_some(())).await;

    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_nodeversion_waits_for_a_reboot_it_cannot_call_back() {
    let names = ["w-0"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    let agents = fake_agents(&server, &names, "v1", Duration::from_millis(50));
    // The controller is down while the node reboots: nothing can verify the reboot yet.
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1}));
    eventually(Duration::from_secs(30), "the node rebooting", || {
        (annotation(&store, "w-0", keys::INTENT).as_deref() == Some("reboot")).then_some(())
    })
    .await;
    controller.crash().await;
    store.api::<NodeVersion>().delete(None, VERSION, &DeleteParams::default()).unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(finalizers(&store).is_some(), "a NodeVersion went while its node was mid-reboot with nobody to verify it");

    // The next controller verifies the reboot, uncordons the node, then lets the NodeVersion go.
    let controller = harness::controller(&operator(&server), harness::controller_options("c2"));
    eventually(Duration::from_secs(60), "the NodeVersion gone", || finalizers(&store).is_none().then_some(())).await;
    assert_ne!(annotation(&store, "w-0", keys::INTENT).as_deref(), Some("reboot"));
    assert_eq!(annotation(&store, "w-0", keys::CORDONED_BY), None);
    let node = store.api::<Node>().get(None, "w-0").unwrap();
    assert_ne!(node.spec.and_then(|s| s.unschedulable), Some(true));
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}
