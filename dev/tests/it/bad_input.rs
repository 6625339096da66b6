//! Bad input gets a clear error and touches no node: malformed protocol annotations, NodeVersion
//! specs the API server rejects, and specs only the controller can tell are invalid.

use crate::support;

use dev::apiserver::Patch;
use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::events::v1::Event;
use kube::api::{DynamicObject, ListParams, PatchParams, PostParams};
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::keys;
use std::collections::BTreeMap;
use std::time::Duration;
use support::{FakeHost, bare_cluster, create_version, eventually, operator, rolled_out};

fn annotate(store: &dev::apiserver::Store, node: &str, pairs: &[(&str, &str)]) {
    let annotations: serde_json::Map<String, serde_json::Value> =
        pairs.iter().map(|(k, v)| (k.to_string(), json!(v))).collect();
    store
        .api::<Node>()
        .patch(None, node, &Patch::Merge(json!({"metadata": {"annotations": annotations}})), &PatchParams::default())
        .unwrap();
}

fn controller_keys(store: &dev::apiserver::Store, node: &str) -> (BTreeMap<String, String>, bool) {
    let n = store.api::<Node>().get(None, node).unwrap();
    let mut a = n.metadata.annotations.unwrap_or_default();
    a.retain(|k, _| keys::CONTROLLER_KEYS.contains(&k.as_str()));
    (a, n.spec.and_then(|s| s.unschedulable).unwrap_or(false))
}

fn warnings(store: &dev::apiserver::Store, reason: &str) -> Vec<String> {
    let events = store.api::<Event>().list(None, &ListParams::default()).unwrap();
    events
        .items
        .into_iter()
        .filter(|e| e.type_.as_deref() == Some("Warning") && e.reason.as_deref() == Some(reason))
        .map(|e| format!("{}: {}", e.regarding.and_then(|r| r.name).unwrap_or_default(), e.note.unwrap_or_default()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_annotations_leave_the_node_untouched_and_say_why() {
    let names = ["w-0", "w-1", "w-2", "w-3"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    // The controller's keys of w-0 are garbage; w-1's agent keys are garbage (its agent owns them
    // and rewrites them).
    annotate(&store, "w-0", &[(keys::INTENT, "explode"), (keys::INTENT_TARGET, "v2")]);
    annotate(&store, "w-1", &[(keys::STATE, "Done!")]);
    let before = controller_keys(&store, "w-0");
    let agents: Vec<_> = names
        .iter()
        .map(|name| {
            let (store, name) = (store.clone(), *name);
            harness::agent_with(&operator(&server), name, move || Ok(FakeHost::new(store, name, "v1")))
        })
        .collect();
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 2}));

    let status = eventually(Duration::from_secs(60), "the other nodes updated", || {
        let v = store.api::<NodeVersion>().get(None, "constellation-version").ok()?;
        let s = v.status?;
        (s.counts.up_to_date == 3 && s.in_flight.is_empty()).then_some(s)
    })
    .await;
    assert_eq!(status.counts.blocked, 1);
    let blocked = status.conditions.iter().find(|c| c.type_ == "Blocked").unwrap();
    assert_eq!(blocked.status, "True");
    assert!(
        blocked.message.contains("w-0: malformed annotations") && blocked.message.contains("explode"),
        "{}",
        blocked.message
    );
    assert_eq!(controller_keys(&store, "w-0"), before, "the controller touched w-0");
    let events = eventually(Duration::from_secs(10), "a Warning Event", || {
        let w = warnings(&store, "MalformedAnnotations");
        (!w.is_empty()).then_some(w)
    })
    .await;
    assert!(
        events.iter().any(|e| e.starts_with("w-0: ") && e.contains("update.edgeless.systems/intent")),
        "{events:?}"
    );

    controller.stop(Duration::from_secs(10)).await.unwrap();
    for agent in agents {
        agent.stop(Duration::from_secs(10)).await.unwrap();
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_server_rejects_specs_that_break_the_schema() {
    let server = bare_cluster(&[]).await;
    // Untyped, so that values the Rust types would refuse reach the server.
    let resource = kube::api::ApiResource::erase::<NodeVersion>(&());
    let versions: kube::Api<DynamicObject> = kube::Api::all_with(server.client(), &resource);
    for (rollout, needle) in [
        (json!({"maxUnavailable": "0%"}), "spec.rollout.maxUnavailable: Invalid value: \"0%\""),
        (json!({"maxUnavailable": 0}), "spec.rollout.maxUnavailable: Invalid value: 0"),
        (json!({"drainTimeout": "-5m"}), "spec.rollout.drainTimeout"),
        (json!({"onDrainTimeout": "Panic"}), "spec.rollout.onDrainTimeout: Unsupported value: \"Panic\""),
        (json!({"failureBudget": -1}), "spec.rollout.failureBudget"),
    ] {
        let version: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
            "metadata": {"name": "v"}, "spec": {"image": "v2", "rollout": rollout}
        }))
        .unwrap();
        let error = versions.create(&PostParams::default(), &version).await.unwrap_err();
        let kube::Error::Api(status) = error else { panic!("{rollout}: {error}") };
        assert_eq!(status.code, 422, "{rollout}");
        assert!(status.message.contains(needle), "{rollout}: {}", status.message);
    }
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_only_the_controller_can_reject_touches_no_node_until_fixed() {
    let names = ["w-0", "w-1"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    let agents: Vec<_> = names
        .iter()
        .map(|name| {
            let (store, name) = (store.clone(), *name);
            harness::agent_with(&operator(&server), name, move || Ok(FakeHost::new(store, name, "v1")))
        })
        .collect();
    let observer = Observer::start(server.client(), Limits::new(1, false));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    // The schema cannot check cron syntax or time-zone names; the controller can.
    create_version(
        &store,
        "v2",
        json!({"maintenanceWindow": {"schedule": "61 * * * *", "duration": "1h", "timeZone": "Mars/Olympus"}}),
    );
    let progressing = eventually(Duration::from_secs(30), "the InvalidSpec condition", || {
        let v = store.api::<NodeVersion>().get(None, "constellation-version").ok()?;
        v.status?.conditions.into_iter().find(|c| c.type_ == "Progressing" && c.reason == "InvalidSpec")
    })
    .await;
    assert!(progressing.message.contains("spec.rollout.maintenanceWindow.schedule"), "{}", progressing.message);
    assert!(progressing.message.contains("Mars/Olympus"), "{}", progressing.message);
    // The controller writes the status after acting on the nodes: had it written an intent, it
    // would be there now, and the observer would have seen it even if it was gone again.
    for name in names {
        assert_eq!(controller_keys(&store, name), (BTreeMap::new(), false), "{name} was touched");
    }
    assert_eq!(observer.with(|o| o.timeline.clone()), Default::default(), "a node got an intent");
    eventually(Duration::from_secs(10), "an InvalidSpec Warning", || {
        (!warnings(&store, "InvalidSpec").is_empty()).then_some(())
    })
    .await;

    store
        .api::<NodeVersion>()
        .patch(
            None,
            "constellation-version",
            &Patch::Merge(json!({"spec": {"rollout": {"maintenanceWindow": null}}})),
            &PatchParams::default(),
        )
        .unwrap();
    eventually(Duration::from_secs(60), "the rollout after the fix", || rolled_out(&store, 2)).await;
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());

    controller.stop(Duration::from_secs(10)).await.unwrap();
    for agent in agents {
        agent.stop(Duration::from_secs(10)).await.unwrap();
    }
    server.shutdown().await;
}
