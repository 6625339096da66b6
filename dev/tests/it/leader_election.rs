//! Two controller replicas: exactly one acts; when it crashes (nothing released), the other takes
//! over within the lease duration and finishes the rollout without breaking an invariant.

use crate::support;

use dev::harness;
use dev::observer::{Limits, Observer};
use jiff::Timestamp;
use k8s_openapi::api::events::v1::Event;
use kube::api::ListParams;
use serde_json::json;
use shared::crd::NodeVersion;
use std::time::Duration;
use support::{FakeHost, bare_cluster, create_version, eventually, operator, rolled_out};

/// (reporting instance, event time) of every Event the controllers published.
fn reporters(store: &dev::apiserver::Store) -> Vec<(String, Timestamp)> {
    let events = store.api::<Event>().list(None, &ListParams::default()).unwrap();
    events
        .items
        .into_iter()
        .filter(|e| e.reporting_controller.as_deref() == Some("update-operator"))
        .map(|e| (e.reporting_instance.unwrap_or_default(), e.event_time.map(|t| t.0).unwrap_or(Timestamp::MIN)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_replica_acts_and_a_crashed_leader_is_replaced() {
    let names = ["w-0", "w-1", "w-2", "w-3", "w-4", "w-5"];
    let server = bare_cluster(&names).await;
    let store = server.store();
    let agents: Vec<_> = names
        .iter()
        .map(|name| {
            let store = store.clone();
            let name = *name;
            harness::agent_with(&operator(&server), name, move || Ok(FakeHost::new(store, name, "v1")))
        })
        .collect();
    let observer = Observer::start(server.client(), Limits::new(1, false));
    let mut replicas = vec![
        ("c1", Some(harness::controller(&operator(&server), harness::controller_options("c1")))),
        ("c2", Some(harness::controller(&operator(&server), harness::controller_options("c2")))),
    ];
    let leader = eventually(Duration::from_secs(30), "a leader", || harness::lease_holder(&store)).await;
    create_version(&store, "v2", json!({"maxUnavailable": 1}));

    // Let the leader finish two nodes; only it may have acted.
    eventually(Duration::from_secs(60), "two nodes updated", || {
        let v = store.api::<NodeVersion>().get(None, "constellation-version").ok()?;
        (v.status?.counts.up_to_date >= 2).then_some(())
    })
    .await;
    let acted: Vec<String> = reporters(&store).into_iter().map(|(who, _)| who).collect();
    assert!(!acted.is_empty() && acted.iter().all(|who| *who == leader), "reporters before the crash: {acted:?}");

    let crashed_at = Timestamp::now();
    let slot = replicas.iter_mut().find(|(id, _)| *id == leader).unwrap();
    slot.1.take().unwrap().crash().await;
    let successor =
        eventually(Duration::from_secs(30), "a new leader", || harness::lease_holder(&store).filter(|h| *h != leader))
            .await;
    eventually(Duration::from_secs(90), "the rollout", || rolled_out(&store, 6)).await;
    for (who, at) in reporters(&store) {
        assert!(who == leader || (who == successor && at >= crashed_at), "{who} acted at {at} (crash at {crashed_at})");
    }
    let observed = observer.stop().await;
    assert_eq!(observed.violations, Vec::<String>::new());

    for (_, replica) in replicas {
        if let Some(replica) = replica {
            replica.stop(Duration::from_secs(10)).await.unwrap();
        }
    }
    for agent in agents {
        agent.stop(Duration::from_secs(10)).await.unwrap();
    }
    server.shutdown().await;
}
