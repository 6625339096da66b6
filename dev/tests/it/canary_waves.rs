//! Canary waves (issue 34 item 4): the canary alone, staged and updated first, soaked; then the next wave; the
//! soak survives a change of controller (it runs from the completion `status.waves` records).

use crate::support::{self, condition_of, eventually, status_of};

use dev::cluster::{Cluster, ClusterConfig};
use dev::harness;
use dev::observer::{Limits, Observer};
use dev::timing::Timing;
use jiff::{SignedDuration, Timestamp};
use kube::api::PostParams;
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::Step;
use std::collections::BTreeMap;
use std::time::Duration;

use crate::support::VERSION;

/// Each node's first time in `step` at or after `since`.
fn first(timeline: &BTreeMap<String, Vec<(Timestamp, Step)>>, step: Step) -> BTreeMap<String, Timestamp> {
    timeline.iter().filter_map(|(n, steps)| Some((n.clone(), steps.iter().find(|(_, s)| *s == step)?.0))).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_canary_goes_alone_and_soaks_through_a_change_of_controller_then_each_wave_in_turn() {
    let timing = Timing { stage: Duration::from_millis(500), reboot: Duration::from_secs(1), ..Timing::fast() };
    let config = ClusterConfig { nodes: 5, control_planes: 0, image: "v1".into(), timing, ..ClusterConfig::default() };
    let cluster = Cluster::start(config).await.unwrap();
    let store = cluster.store();
    let agents: Vec<_> = cluster.node_names().iter().map(|n| harness::agent(cluster.operator(), n)).collect();
    let first_controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    eventually(Duration::from_secs(60), "the agents and the controller", || {
        (agents.iter().all(harness::Component::is_ready) && first_controller.is_ready()).then_some(())
    })
    .await;
    let observer = Observer::start(cluster.client(), Limits::new(usize::MAX, true));
    // One node soaked for 12 s, then two soaked for 2 s, then the rest; two at a time.
    let version: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": VERSION},
        "spec": {"image": "v2", "rollout": {"maxUnavailable": 2, "soakTime": "0ms",
            "waves": [{"nodes": 1, "soak": "12s"}, {"nodes": 2, "soak": "2s"}]}}
    }))
    .unwrap();
    store.api::<NodeVersion>().create(None, &version, &PostParams::default()).unwrap();

    // The canary soaks: the status names the wave and why nothing starts.
    let soaking = eventually(Duration::from_secs(60), "the canary's soak", || {
        let status = status_of(&store, VERSION);
        let (_, reason, message) = condition_of(&status, "Progressing")?;
        (reason == "WaveSoaking").then_some((status, message))
    })
    .await;
    assert_eq!(soaking.0.wave, Some(1));
    assert!(soaking.1.starts_with("wave 1 of 2 (1 node(s) of v2 done) soaks until"), "{}", soaking.1);
    assert_eq!(soaking.0.waves.len(), 1, "{:?}", soaking.0.waves);
    // The controller goes; another one takes over, a few seconds into the soak.
    tokio::time::sleep(Duration::from_secs(6)).await;
    first_controller.stop(Duration::from_secs(10)).await.unwrap();
    let second_controller = harness::controller(cluster.operator(), harness::controller_options("c2"));
    let taken_over = Timestamp::now();

    let done = eventually(Duration::from_secs(120), "the rollout to v2", || {
        let s = status_of(&store, VERSION);
        (s.counts.up_to_date == 5 && s.in_flight.is_empty()).then_some(s)
    })
    .await;
    let seen = observer.stop().await;
    assert_eq!(seen.violations, Vec::<String>::new());
    assert_eq!(done.wave, None, "past the last wave");
    assert_eq!(done.waves.iter().map(|w| (w.target.as_str(), w.wave)).collect::<Vec<_>>(), [("v2", 1), ("v2", 2)]);

    let staged = first(&seen.timeline, Step::Stage);
    let drained = first(&seen.timeline, Step::Drain);
    let verified = first(&seen.timeline, Step::Done);
    let mut order: Vec<(Timestamp, String)> = drained.iter().map(|(n, t)| (*t, n.clone())).collect();
    order.sort();
    let canary = order[0].1.clone();
    let canary_done = verified[&canary];
    // A moment of slack for the observer's clock against the controller's.
    let slack = SignedDuration::from_millis(500);
    for (node, at) in &staged {
        assert!(*node == canary || *at + slack >= canary_done, "{node} was staged at {at}, before the canary was done");
    }
    let second_wave: Vec<&String> = order[1..3].iter().map(|(_, n)| n).collect();
    for (at, node) in &order[1..] {
        assert!(
            *at + slack >= canary_done + SignedDuration::from_secs(12),
            "{node} started at {at}, within the canary's soak (done at {canary_done})"
        );
    }
    // The new controller went on from the recorded completion: it did not start the soak over.
    assert!(
        order[1].0 < taken_over + SignedDuration::from_secs(11),
        "wave 2 started at {}, as if the soak had started over when the second controller took over at {taken_over}",
        order[1].0
    );
    let second_done = second_wave.iter().map(|n| verified[*n]).max().unwrap();
    for (at, node) in &order[3..] {
        assert!(*at + slack >= second_done + SignedDuration::from_secs(2), "{node} started at {at}, in wave 2's soak");
    }

    support::stop_all(agents).await;
    support::stop_all(vec![second_controller]).await;
    cluster.shutdown().await;
}
