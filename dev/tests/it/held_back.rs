//! No silent stall (issue 10 item 5): a node the controller does not start is named with its
//! reason in the status and in one Event, `Progressing` turns False with that reason when nothing
//! can move, and the rollout is never `Complete` while a selected node is outdated.

use crate::support;

use dev::harness;
use dev::observer::{Limits, Observer};
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use serde_json::json;
use std::time::Duration;
use support::{bare_cluster, condition_of, create_version, eventually, fake_agents, operator, rolled_out, status_of};

use crate::support::VERSION;

/// The notes of the Events with `reason`.
fn events(store: &dev::apiserver::Store, reason: &str) -> Vec<String> {
    let list = store.api::<Event>().list(None, &ListParams::default()).unwrap();
    list.items.into_iter().filter(|e| e.reason.as_deref() == Some(reason)).filter_map(|e| e.note).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_opted_in_node_without_an_agent_is_named_in_status_and_an_event_within_a_minute() {
    let server = bare_cluster(&["w-0", "w-1", "w-2"]).await;
    let store = server.store();
    let observer = Observer::start(server.client(), Limits::new(1, false));
    // No agent on w-2 (no agent pod, a crash loop, unreadable host facts: it never reports).
    let agents = fake_agents(&server, &["w-0", "w-1"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({}));
    let started = std::time::Instant::now();

    let named = eventually(Duration::from_secs(60), "w-2 named in the status", || {
        let s = status_of(&store, VERSION);
        s.held_back.into_iter().find(|h| h.name == "w-2")
    })
    .await;
    assert_eq!(named.reason, "NoAgentReport");
    assert!(named.message.contains("agent"), "{}", named.message);
    let note = eventually(Duration::from_secs(60), "an Event about w-2", || {
        events(&store, "NoAgentReport").into_iter().find(|n| n.starts_with("w-2: "))
    })
    .await;
    assert!(started.elapsed() < Duration::from_secs(60), "took {:?}", started.elapsed());
    assert!(note.contains("is the agent running on it?"), "{note}");

    // The others finish; the rollout then says it cannot move, and why, never Complete.
    let stalled = eventually(Duration::from_secs(60), "the others updated", || {
        let s = status_of(&store, VERSION);
        (s.counts.up_to_date == 2 && s.in_flight.is_empty()).then_some(s)
    })
    .await;
    let (status, reason, message) = condition_of(&stalled, "Progressing").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NoAgentReport"), "{message}");
    assert!(message.contains("w-2"), "{message}");
    assert_eq!(condition_of(&stalled, "UpToDate").map(|c| c.0), Some("False".into()));
    assert_eq!((stalled.counts.outdated, stalled.counts.held_back), (1, 1));
    assert_eq!(events(&store, "NoAgentReport").len(), 1, "one Event, however long the hold lasts");

    // Its agent starts: the node is updated and the rollout completes.
    let late = fake_agents(&server, &["w-2"], "v1", Duration::from_millis(50));
    let done = eventually(Duration::from_secs(60), "the rollout", || rolled_out(&store, 3)).await;
    let (status, reason, _) = condition_of(&done, "Progressing").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Complete"));
    assert!(done.held_back.is_empty());
    assert_eq!(observer.stop().await.violations, Vec::<String>::new());
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents.into_iter().chain(late).collect()).await;
    server.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_control_plane_node_without_an_agent_is_named_as_what_every_worker_waits_for() {
    let server = bare_cluster(&["cp-0", "w-0", "w-1"]).await;
    let store = server.store();
    let agents = fake_agents(&server, &["w-0", "w-1"], "v1", Duration::from_millis(50));
    let controller = harness::controller(&operator(&server), harness::controller_options("c1"));
    create_version(&store, "v2", json!({"maxUnavailable": 2}));
    // The workers are staged ahead meanwhile (nothing disrupted); once they are, nothing moves.
    let (status, reason, message) = eventually(Duration::from_secs(30), "the workers' hold", || {
        let c = condition_of(&status_of(&store, VERSION), "Progressing")?;
        (c.1 == "WaitingForControlPlane" && c.0 == "False").then_some(c)
    })
    .await;
    assert_eq!(status, "False");
    assert!(message.contains("cp-0 (NoAgentReport"), "{reason}: {message}");
    controller.stop(Duration::from_secs(10)).await.unwrap();
    support::stop_all(agents).await;
    server.shutdown().await;
}
