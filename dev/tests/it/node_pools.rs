//! Several NodeVersions (issue 10 item 3c): disjoint selectors roll their pools out side by side,
//! each to its own image; a newer NodeVersion whose selector overlaps an older one's says so in a
//! condition and touches no node in the overlap; when the older one goes, the newer takes over.

use crate::support;

use dev::apiserver::Store;
use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::Node;
use kube::api::{PatchParams, PostParams};
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::keys;
use std::time::Duration;
use support::{bare_cluster, condition_of, eventually, fake_agents, operator, status_of};

fn create(store: &Store, name: &str, image: &str, selector: Option<serde_json::Value>) {
    let mut rollout = json!({"maxUnavailable": 1});
    if let Some(selector) = selector {
        rollout["nodeSelector"] = json!({"matchLabels": selector});
    }
    let version: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": name}, "spec": {"image": image, "rollout": rollout}
    }))
    .unwrap();
    store.api::<NodeVersion>().create(None, &version, &PostParams::default()).unwrap();
}

/// The image each agent reports.
fn images(store: &Store, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|n| {
            let node = store.api::<Node>().get(None, n).unwrap();
            node.metadata.annotations.and_then(|a| a.get(keys::OS_IMAGE).cloned()).unwrap_or_default()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pools_roll_out_side_by_side_and_an_overlapping_nodeversion_touches_no_shared_node() {
    let names = ["a-0", "a-1", "b-0", "b-1"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    for name in names {
        let pool = &name[..1];
        let labels = json!({"metadata": {"labels": {"pool": pool}}});
        store.api::<Node>().patch(None, name, &dev::apiserver::Patch::Merge(labels), &PatchParams::default()).unwrap();
    }
    // One node per pool at a time, and a second pool's node beside it.
    let observer = Observer::start(server.client(), Limits::new(2, false));
    let agents = fake_agents(&server, &names, "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create(&store, "pool-a", "v2", Some(json!({"pool": "a"})));
    create(&store, "pool-b", "v3", Some(json!({"pool": "b"})));
    // Creation times have whole seconds: make "everything" visibly the newest.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    create(&store, "everything", "v4", None);

    eventually(Duration::from_secs(60), "both pools updated", || {
        (images(&store, &names) == ["v2", "v2", "v3", "v3"]).then_some(())
    })
    .await;
    let everything = eventually(Duration::from_secs(30), "the overlap condition", || {
        let s = status_of(&store, "everything");
        (condition_of(&s, "SelectorOverlap")?.0 == "True").then_some(s)
    })
    .await;
    let (_, reason, message) = condition_of(&everything, "SelectorOverlap").unwrap();
    assert_eq!(reason, "SelectorOverlap");
    assert!(message.contains("pool-a, pool-b") && message.contains("4 node(s)"), "{message}");
    let (status, reason, _) = condition_of(&everything, "Progressing").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "SelectorOverlap"));
    assert_eq!((everything.counts.total, everything.counts.held_back), (4, 4));
    for pool in ["pool-a", "pool-b"] {
        // The agents report the new image before the controller verifies the last node and says so in the status.
        let s = eventually(Duration::from_secs(30), "the pool's rollout complete", || {
            let s = status_of(&store, pool);
            (condition_of(&s, "Progressing")?.1 == "Complete").then_some(s)
        })
        .await;
        assert_eq!(condition_of(&s, "SelectorOverlap").map(|c| c.0), Some("False".into()), "{pool}");
    }

    // pool-a goes: its nodes are the newer NodeVersion's now.
    store.api::<NodeVersion>().delete(None, "pool-a", &Default::default()).unwrap();
    eventually(Duration::from_secs(60), "pool a taken over", || {
        (images(&store, &names) == ["v4", "v4", "v3", "v3"]).then_some(())
    })
    .await;
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    for name in ["b-0", "b-1"] {
        let steps = observed.timeline.get(name).map(Vec::len).unwrap_or_default();
        assert_eq!(steps, 4, "{name} went through more than one update: {:?}", observed.timeline.get(name));
    }
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}
