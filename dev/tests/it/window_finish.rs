//! Time (issue 34 item 3): a node starts only if it can finish before its maintenance window closes, by the 95th
//! percentile of its steps as the controller measured them (`status.stepDurations[].p95Millis`).

use crate::support::{self, condition_of, eventually, status_of};

use dev::apiserver::Patch;
use dev::cluster::{Cluster, ClusterConfig};
use dev::harness;
use dev::observer::{Limits, Observer};
use dev::timing::Timing;
use jiff::{SignedDuration, Timestamp};
use kube::api::{PatchParams, PostParams};
use serde_json::json;
use shared::crd::NodeVersion;
use shared::protocol::Step;
use std::time::Duration;

use crate::support::VERSION;
/// The window: the first 20 seconds of every minute.
const WINDOW_SECONDS: i64 = 20;

fn second_of_minute(t: Timestamp) -> i64 {
    t.as_second().rem_euclid(60)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_node_starts_that_cannot_finish_before_its_window_closes_and_the_rollout_says_why() {
    let timing = Timing { stage: Duration::from_millis(500), reboot: Duration::from_secs(4), ..Timing::fast() };
    let config = ClusterConfig { nodes: 5, control_planes: 0, image: "v1".into(), timing, ..ClusterConfig::default() };
    let cluster = Cluster::start(config).await.unwrap();
    let store = cluster.store();
    let agents: Vec<_> = cluster.node_names().iter().map(|n| harness::agent(cluster.operator(), n)).collect();
    let controller = harness::controller(cluster.operator(), harness::controller_options("c1"));
    let version: NodeVersion = serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": VERSION},
        "spec": {"image": "v2", "rollout": {"maxUnavailable": 1, "soakTime": "0ms"}}
    }))
    .unwrap();
    let rolled = |image: &'static str| {
        let store = store.clone();
        move || {
            let s = status_of(&store, VERSION);
            (s.target_image.as_deref() == Some(image) && s.counts.up_to_date == 5 && s.in_flight.is_empty())
                .then_some(s)
        }
    };

    // A first rollout, without a window, measures the steps: a node's turn takes its drain and its 4 s reboot.
    store.api::<NodeVersion>().create(None, &version, &PostParams::default()).unwrap();
    let measured = eventually(Duration::from_secs(180), "the rollout to v2", rolled("v2")).await;
    let p95 = |step: &str| {
        measured.step_durations.iter().find(|d| d.step == step).and_then(|d| d.p95_millis).unwrap_or_default()
    };
    let need = SignedDuration::from_millis(p95("drain") + p95("reboot"));
    assert!(need >= SignedDuration::from_secs(4), "{:?}", measured.step_durations);
    // Five turns do not fit in one 20-second window.
    assert!(need * 5 > SignedDuration::from_secs(WINDOW_SECONDS), "{:?}", measured.step_durations);

    // The next rollout, in the window, started while the window is closed so that it begins as the window opens.
    eventually(Duration::from_secs(70), "the window closed", || {
        (25..=45).contains(&second_of_minute(Timestamp::now())).then_some(())
    })
    .await;
    let observer = Observer::start(cluster.client(), Limits::new(usize::MAX, true));
    let since = Timestamp::now();
    let patch = json!({"spec": {"image": "v3", "rollout": {
        "maintenanceWindow": {"schedule": "* * * * *", "duration": format!("{WINDOW_SECONDS}s")}
    }}});
    store.api::<NodeVersion>().patch(None, VERSION, &Patch::Merge(patch), &PatchParams::default()).unwrap();
    let mut told = None;
    let done = eventually(Duration::from_secs(240), "the rollout to v3", || {
        let status = status_of(&store, VERSION);
        if let Some((_, reason, message)) = condition_of(&status, "Progressing")
            && reason == "CannotFinishInWindow"
        {
            told.get_or_insert(message);
        }
        rolled("v3")()
    })
    .await;
    let seen = observer.stop().await;
    assert_eq!(seen.violations, Vec::<String>::new());
    // Once in the window, with too little of it left for the next node, the rollout said why.
    let told = told.expect("the rollout was never held with CannotFinishInWindow");
    assert!(told.contains("needs about") && told.contains("95th percentile"), "{told}");

    // Each node started inside a window, and finished before that window closed (two seconds of slack: a node may
    // take longer than the percentile on a busy machine, which the rule does not promise against, and the observer
    // sees a step a moment after it is written; a node started past the rule would end about four seconds late).
    let mut starts = 0;
    for (node, steps) in &seen.timeline {
        let after: Vec<&(Timestamp, Step)> = steps.iter().filter(|(at, _)| *at >= since).collect();
        let Some((start, _)) = after.iter().find(|(_, s)| *s == Step::Drain) else { continue };
        let Some((finish, _)) = after.iter().find(|(_, s)| *s == Step::Done) else { continue };
        starts += 1;
        let opened = start.as_second() - second_of_minute(*start);
        let closes = Timestamp::from_second(opened + WINDOW_SECONDS).unwrap();
        assert!(second_of_minute(*start) < WINDOW_SECONDS, "{node} started outside the window, at {start}");
        assert!(
            *finish <= closes + SignedDuration::from_secs(2),
            "{node} started at {start}, finished at {finish}, after its window closed at {closes} ({done:?})"
        );
    }
    assert_eq!(starts, 5, "{:?}", seen.timeline);

    support::stop_all(agents).await;
    support::stop_all(vec![controller]).await;
    cluster.shutdown().await;
}
