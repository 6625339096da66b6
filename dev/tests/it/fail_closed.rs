//! Bad specs fail closed (issue 10 item 3): an image the agents could not read is refused by the
//! API server and, where an older CRD lets it through, by the controller; an invalid field in the
//! middle of a rollout, across a change of leader, keeps the last valid spec for the nodes in
//! flight and starts nothing; intents of ours that no agent can read are removed and their nodes
//! updated once the spec is right. The invariant observer watches throughout.

use crate::support;

use dev::apiserver::Patch;
use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PatchParams;
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::{Step, keys};
use std::collections::BTreeSet;
use std::time::Duration;
use support::{bare_cluster, condition_of, create_version, eventually, fake_agents, operator, rolled_out, status_of};

use crate::support::VERSION;

fn intent(store: &dev::apiserver::Store, node: &str) -> Option<String> {
    let n = store.api::<Node>().get(None, node).ok()?;
    n.metadata.annotations?.get(keys::INTENT).cloned()
}

fn patch_version(store: &dev::apiserver::Store, patch: serde_json::Value) -> i64 {
    let v = store.api::<NodeVersion>().patch(None, VERSION, &Patch::Merge(patch), &PatchParams::default()).unwrap();
    v.metadata.generation.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_image_and_a_bad_cron_mid_rollout_across_a_new_leader_start_nothing_and_lose_nothing() {
    // The pool: four nodes labelled pool=a and *not* opted in with the default label, so a
    // controller that fell back to the default selector would release them mid-step.
    let names = ["w-0", "w-1", "w-2", "w-3", "other"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    for name in &names[..4] {
        let labels = json!({"metadata": {"labels": {"pool": "a", keys::MANAGED_LABEL: null}}});
        store.api::<Node>().patch(None, name, &Patch::Merge(labels), &PatchParams::default()).unwrap();
    }
    let observer = Observer::start(server.client(), Limits::new(2, false));
    let agents = fake_agents(&server, &names, "v1", Duration::from_secs(2));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(
        &store,
        "v2",
        json!({"maxUnavailable": 2, "stageTimeout": "1h", "nodeSelector": {"matchLabels": {"pool": "a"}}}),
    );

    // An image the protocol cannot carry never reaches the controller: the API server refuses it.
    let versions: kube::Api<NodeVersion> = kube::Api::all(server.client());
    let refused = versions
        .patch(VERSION, &PatchParams::default(), &kube::api::Patch::Merge(json!({"spec": {"image": "v3 "}})))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = refused else { panic!("{refused}") };
    assert_eq!(status.code, 422);
    assert!(status.message.contains("spec.image"), "{}", status.message);

    // Two nodes in flight, then the leader dies and the spec turns invalid in a way only the
    // controller can tell (a cron minute of 61).
    eventually(Duration::from_secs(30), "two nodes in flight", || {
        (status_of(&store, VERSION).in_flight.len() == 2).then_some(())
    })
    .await;
    controller.crash().await;
    let broken = patch_version(
        &store,
        json!({"spec": {"rollout": {"maintenanceWindow": {"schedule": "61 * * * *", "duration": "1h"}}}}),
    );
    let controller = harness::controller(&operator(&server), harness::controller_options("c2"));
    let seen = eventually(Duration::from_secs(30), "the new leader's InvalidSpec", || {
        let s = status_of(&store, VERSION);
        let (_, reason, message) = condition_of(&s, "Progressing")?;
        (s.observed_generation == Some(broken) && reason == "InvalidSpec").then_some((s, message))
    })
    .await;
    let (at_invalid, message) = seen;
    assert!(message.contains("spec.rollout.maintenanceWindow.schedule"), "{message}");
    assert!(message.contains("nodes in flight finish under generation 1"), "{message}");
    let in_flight: BTreeSet<String> = at_invalid.in_flight.iter().map(|f| f.name.clone()).collect();
    let done_before: BTreeSet<String> =
        names.iter().filter(|n| intent(&store, n).as_deref() == Some("done")).map(|n| n.to_string()).collect();

    // The nodes in flight finish under the recorded spec (its selector), and nothing else starts: a node staged
    // ahead of its turn stays staged (its turn would be a new disruption), nothing is staged anew.
    let waits = |f: &shared::crd::InFlightNode| f.step == "stage" && f.waiting_on.is_some();
    let finished = eventually(Duration::from_secs(60), "the nodes in flight to finish", || {
        let s = status_of(&store, VERSION);
        s.in_flight.iter().all(waits).then_some(s)
    })
    .await;
    let staged: BTreeSet<String> = finished.in_flight.iter().map(|f| f.name.clone()).collect();
    assert_eq!(finished.last_valid_spec.as_ref().map(|l| l.generation), Some(1));
    let (status, reason, _) = condition_of(&finished, "Progressing").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "InvalidSpec"));
    observer.with(|o| {
        for name in names {
            let steps: Vec<Step> =
                o.timeline.get(name).map(|t| t.iter().map(|(_, s)| *s).collect()).unwrap_or_default();
            if staged.contains(name) {
                assert_eq!(steps.last(), Some(&Step::Stage), "{name} left its stage step: {steps:?}");
                assert!(in_flight.contains(name), "{name} was staged under the invalid spec");
            } else if in_flight.contains(name) {
                assert_eq!(steps.last(), Some(&Step::Done), "{name} did not finish: {steps:?}");
            } else if !done_before.contains(name) {
                assert!(steps.is_empty(), "{name} was touched under the invalid spec: {steps:?}");
            }
        }
    });
    assert_eq!(intent(&store, "other"), None, "a node outside the recorded selector was touched");

    // Fixed, the rollout completes.
    patch_version(&store, json!({"spec": {"rollout": {"maintenanceWindow": null}}}));
    eventually(Duration::from_secs(60), "the rollout after the fix", || rolled_out(&store, 4)).await;
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert!(observed.unreadable.is_empty());
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

/// Takes the image pattern out of the NodeVersion CRD, as a CRD installed by an older release.
fn install_old_crd(store: &dev::apiserver::Store) {
    let api = store.api::<CustomResourceDefinition>();
    let mut crd = api.get(None, "nodeversions.update.edgeless.systems").unwrap();
    for version in &mut crd.spec.versions {
        let image = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("spec"))
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("image"))
            .unwrap();
        image.pattern = None;
    }
    api.update(None, &crd, &Default::default()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreadable_intents_are_never_written_and_those_left_behind_are_recovered() {
    let names = ["cp-0", "w-0", "w-1", "w-2"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    install_old_crd(&store);
    // What an older controller left: intents with the target "v2 " that no agent reads, on the
    // control plane (it let three workers start next to it with maxUnavailable 2) and on a
    // worker it had cordoned.
    let left = |step: &str| {
        json!({keys::INTENT: step, keys::INTENT_TARGET: "v2 ", keys::INTENT_TOKEN: "old1",
               keys::INTENT_SINCE: "2026-11-21T10:00:00.000Z"})
    };
    let mut cordoned = left("drain");
    cordoned[keys::CORDONED_BY] = json!(keys::CORDONED_BY_VALUE);
    for (node, annotations, unschedulable) in [("cp-0", left("stage"), false), ("w-0", cordoned, true)] {
        let patch = json!({"metadata": {"annotations": annotations}, "spec": {"unschedulable": unschedulable}});
        store.api::<Node>().patch(None, node, &Patch::Merge(patch), &PatchParams::default()).unwrap();
    }
    let observer = Observer::start(server.client(), Limits { readable_intents: false, ..Limits::new(2, false) });
    let agents = fake_agents(&server, &names, "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    // The old CRD lets the bad image through; the controller refuses it, naming the field.
    create_version(&store, "v2 ", json!({"maxUnavailable": 2}));
    let message = eventually(Duration::from_secs(30), "InvalidSpec for spec.image", || {
        let (_, reason, message) = condition_of(&status_of(&store, VERSION), "Progressing")?;
        (reason == "InvalidSpec").then_some(message)
    })
    .await;
    assert!(message.contains(r#"spec.image: "v2 " has leading or trailing white space"#), "{message}");
    // The intents left behind are removed (and the cordon lifted) even so: no agent acts on them.
    eventually(Duration::from_secs(30), "the unreadable intents removed", || {
        let clean = names.iter().all(|n| intent(&store, n).is_none());
        let w0 = store.api::<Node>().get(None, "w-0").ok()?;
        (clean && !w0.spec?.unschedulable.unwrap_or(false)).then_some(())
    })
    .await;

    // Corrected, the rollout goes control plane first, within the budget, to the end.
    patch_version(&store, json!({"spec": {"image": "v2"}}));
    eventually(Duration::from_secs(60), "the rollout after the fix", || rolled_out(&store, 4)).await;
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());
    assert_eq!(observed.max_control_plane_disrupted_seen, 1);
    assert_eq!(
        observed.unreadable.iter().map(String::as_str).collect::<Vec<_>>(),
        ["cp-0", "w-0"],
        "the controller wrote an intent no agent can read"
    );
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}

/// Takes `status.lastCompleteImage` out of the NodeVersion CRD, as a CRD installed by a release before it: the API
/// server prunes it from every status write.
fn install_crd_without_last_complete_image(store: &dev::apiserver::Store) {
    let api = store.api::<CustomResourceDefinition>();
    let mut crd = api.get(None, "nodeversions.update.edgeless.systems").unwrap();
    for version in &mut crd.spec.versions {
        let status = version
            .schema
            .as_mut()
            .and_then(|s| s.open_api_v3_schema.as_mut())
            .and_then(|s| s.properties.as_mut())
            .and_then(|p| p.get_mut("status"))
            .and_then(|s| s.properties.as_mut())
            .unwrap();
        assert!(status.remove("lastCompleteImage").is_some());
    }
    api.update(None, &crd, &Default::default()).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_fields_an_older_crd_drops_are_named_once_and_not_written_in_a_loop() {
    let names = ["w-0", "w-1"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    install_crd_without_last_complete_image(&store);
    let agents = fake_agents(&server, &names, "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 1}));
    eventually(Duration::from_secs(60), "the rollout", || rolled_out(&store, 2)).await;
    // The rollout is complete: the controller writes the NodeVersion at most once more (a status computed a moment
    // before), not at every plan (each wrote the dropped field again: seven writes a second in the 200-node bench).
    tokio::time::sleep(Duration::from_secs(1)).await;
    let writes = || {
        server
            .metrics()
            .writes_by_user_agent("nodeversions")
            .into_iter()
            .filter(|(ua, _)| ua.contains("controller"))
            .map(|(_, n)| n)
            .sum::<u64>()
    };
    let before = writes();
    // Other changes make the controller plan again (a label of a node here; kubelet heartbeats in a cluster).
    for i in 0..30 {
        let patch = json!({"metadata": {"labels": {"touched": i.to_string()}}});
        store.api::<Node>().patch(None, "w-0", &Patch::Merge(patch), &PatchParams::default()).unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let after = writes();
    assert!(after - before <= 1, "{} NodeVersion writes while 30 node changes were planned", after - before);
    let event = eventually(Duration::from_secs(30), "the StatusFieldsDropped Event", || {
        let events = store.api::<k8s_openapi::api::events::v1::Event>().list(None, &Default::default()).unwrap();
        events.items.into_iter().find(|e| e.reason.as_deref() == Some("StatusFieldsDropped"))
    })
    .await;
    assert!(event.note.as_deref().unwrap_or_default().contains("status.lastCompleteImage"), "{event:?}");
    assert_eq!(event.regarding.as_ref().and_then(|r| r.name.as_deref()), Some(VERSION));

    let events = store.api::<k8s_openapi::api::events::v1::Event>().list(None, &Default::default()).unwrap();
    let said = events
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("StatusFieldsDropped"))
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .sum::<i32>();
    assert_eq!(said, 1, "said once");
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}
