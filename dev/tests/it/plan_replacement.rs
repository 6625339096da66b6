//! `update-operator plan` (issue 18) on a dev cluster whose workers are partly nodes of scaling groups of the
//! simulated cloud: the forecast replaces them as the controller does, and is compared with the rollout that
//! follows it.

use crate::support;

use cloud::metrics::CallCounts;
use cloud::simulated::SimulatedProvider;
use cloud::{CallPolicy, Governed, GroupRole};
use controller::forecast::report::{Flags, Report};
use controller::forecast::snapshot::Snapshot;
use controller::forecast::{Ending, Source, waves_of};
use controller::groups::CloudOptions;
use dev::apiserver::{Patch, WatchEvent};
use dev::cloud::GroupSpec;
use dev::cluster::{Cluster, ClusterConfig};
use dev::harness::{self, Component};
use dev::observer::{Limits, Observer, Surge};
use dev::timing::Timing;
use futures::StreamExt;
use jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{PatchParams, PostParams, WatchParams};
use serde_json::json;
use shared::crd::{NodeVersion, PendingNode};
use shared::protocol::{Step, keys};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use support::{eventually, stop_all};

use crate::support::VERSION;
/// Long enough for a whole rollout on a loaded 2-core machine; each wait ends as soon as it is done.
const ROLLOUT: Duration = Duration::from_secs(240);

/// 2 in-place workers and two worker groups (3 and 2 nodes) on v1; instances take a few seconds to come and go
/// (so that the rollout's time is mostly the steps the forecast models, not the controller's rounds).
async fn cluster() -> Cluster {
    let timing = Timing {
        stage: Duration::from_secs(1),
        reboot: Duration::from_millis(1500),
        instance_provision: Duration::from_secs(1),
        node_join: Duration::from_secs(1),
        node_ready: Duration::from_millis(500),
        instance_terminate: Duration::from_secs(1),
        ..Timing::fast()
    };
    let config = ClusterConfig {
        nodes: 2,
        control_planes: 0,
        image: "v1".into(),
        workloads: None,
        timing,
        ready_timeout: Duration::from_secs(120),
        scaling_groups: vec![
            GroupSpec::new("workers-a", GroupRole::Worker, 3),
            GroupSpec::new("workers-b", GroupRole::Worker, 2),
        ],
        ..ClusterConfig::default()
    };
    Cluster::start(config).await.expect("the cluster starts")
}

/// The controller with the simulated cloud, as production wraps it.
fn controller(cluster: &Cluster) -> Component {
    let provider = SimulatedProvider::new(cluster.url()).expect("the cluster's URL is an endpoint");
    let provider = Governed::new(provider, CallPolicy::default(), Arc::new(CallCounts::default()));
    let mut options = harness::controller_options("c1");
    options.cloud = Some(CloudOptions::new(Arc::new(provider)).with_external_etcd());
    harness::controller(cluster.operator(), options)
}

fn version(image: &str) -> NodeVersion {
    serde_json::from_value(json!({
        "apiVersion": "update.edgeless.systems/v1alpha1", "kind": "NodeVersion",
        "metadata": {"name": VERSION},
        "spec": {"image": image, "rollout": {"maxUnavailable": 2, "maxSurge": 2, "soakTime": "0ms"}}
    }))
    .unwrap()
}

/// The status once all 7 nodes run `image` and no replacement is left (no PendingNode, no instance being deleted).
fn rolled_out(cluster: &Cluster, image: &str) -> Option<shared::crd::NodeVersionStatus> {
    let store = cluster.store();
    let status = store.api::<NodeVersion>().get(None, VERSION).ok()?.status?;
    let pending = store.api::<PendingNode>().list(None, &Default::default()).ok()?.items;
    (status.target_image.as_deref() == Some(image)
        && status.counts.total == 7
        && status.counts.up_to_date == 7
        && status.in_flight.is_empty()
        && status.replacing.is_empty()
        && pending.is_empty())
    .then_some(status)
}

async fn roll_out(cluster: &Cluster, image: &'static str) -> shared::crd::NodeVersionStatus {
    let patch = json!({"spec": {"image": image}});
    cluster.store().api::<NodeVersion>().patch(None, VERSION, &Patch::Merge(patch), &PatchParams::default()).unwrap();
    eventually(ROLLOUT, &format!("the rollout to {image}"), || rolled_out(cluster, image)).await
}

/// The snapshot `client` reads once its role applies (the dev server's authorizer caches for a moment).
async fn eventually_read(client: &kube::Client) -> Snapshot {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        match Snapshot::read(client).await {
            Ok(snapshot) => return snapshot,
            Err(error) => assert!(std::time::Instant::now() < deadline, "the role never applied: {error}"),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plan_forecasts_the_replacement_of_group_nodes_within_max_surge_and_the_rollout_follows_it() {
    let cluster = cluster().await;
    let store = cluster.store();
    let agents: Vec<Component> = (0..2).map(|i| harness::agent(cluster.operator(), &format!("worker-{i}"))).collect();
    let controller = controller(&cluster);
    eventually(Duration::from_secs(60), "the agents and the controller", || {
        (agents.iter().all(Component::is_ready) && controller.is_ready()).then_some(())
    })
    .await;

    // Before any rollout, without the cloud and under the read-only role of deploy/examples (which lists the
    // PendingNodes too): the groups follow from the provider IDs, the images of the group nodes (which run no
    // agent) are not known and taken as outdated, which the report says.
    let planner = support::planner_client(&cluster);
    support::bind_plan_role(&store);
    let snapshot = eventually_read(&planner).await;
    let report = Report::build(snapshot, Some(version("v2")), Flags::default(), None, Timestamp::now());
    let replaced: Vec<&str> = report.rollouts[0].nodes.iter().filter(|n| n.replaced).map(|n| n.node.as_str()).collect();
    assert_eq!(replaced.len(), 5, "{}", report.text());
    assert!(report.assumptions.iter().any(|a| a.contains("from their provider IDs")), "{}", report.text());
    assert!(report.assumptions.iter().any(|a| a.contains("taken as outdated")), "{}", report.text());
    let steps: Vec<(&str, &Source)> = report.durations.iter().map(|d| (d.step, &d.source)).collect();
    assert!(steps.contains(&("replace", &Source::Default)), "{steps:?}");

    // Two rollouts, which the controller measures (the second replaces the nodes the first created).
    store.api::<NodeVersion>().create(None, &version("v1"), &PostParams::default()).unwrap();
    eventually(ROLLOUT, "the NodeVersion at v1", || rolled_out(&cluster, "v1")).await;
    roll_out(&cluster, "v2").await;
    let status = roll_out(&cluster, "v3").await;
    let measured: BTreeMap<&str, i32> = status.step_durations.iter().map(|d| (d.step.as_str(), d.samples)).collect();
    // The 10 replacements and the 4 in-place updates measure their steps (a step is not measured when the
    // controller's status lags a step behind, which these short steps often do: up to 3 of 10 and 2 of 4 seen).
    for step in ["replace", "retire", "release", "stage", "drain", "reboot"] {
        let least = if ["stage", "drain", "reboot"].contains(&step) { 1 } else { 5 };
        assert!(measured.get(step).is_some_and(|n| *n >= least), "{step}: {:?}", status.step_durations);
    }

    // `plan -f` for v4, asking the cloud as the controller does.
    let mut snapshot = Snapshot::read(&cluster.client()).await.unwrap();
    snapshot.ask_cloud(&SimulatedProvider::new(cluster.url()).unwrap()).await;
    let report = Report::build(snapshot, Some(version("v4")), Flags::default(), None, Timestamp::now());
    assert!(report.blockers.is_empty(), "{:#?}", report.blockers);
    assert!(!report.blocked(), "{}", report.text());
    assert!(report.assumptions.iter().any(|a| a.contains("as the cloud told")), "{}", report.text());
    assert!(
        report.durations.iter().all(|d| matches!(d.source, Source::Measured { samples: 1.., .. })),
        "{}",
        report.text()
    );
    let forecast = &report.rollouts[0];
    assert_eq!(forecast.ending, Ending::Complete, "{}", report.text());
    let predicted = forecast.duration_seconds.unwrap();
    let group_nodes: Vec<String> = store
        .api::<k8s_openapi::api::core::v1::Node>()
        .list(None, &Default::default())
        .unwrap()
        .items
        .iter()
        .filter(|n| {
            n.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_some_and(|p| p.starts_with("simulated://"))
        })
        .map(|n| n.name_any())
        .collect();
    let mut replaced: Vec<String> = forecast.nodes.iter().filter(|n| n.replaced).map(|n| n.node.clone()).collect();
    replaced.sort();
    let mut expected = group_nodes.clone();
    expected.sort();
    assert_eq!(replaced, expected, "{}", report.text());
    assert_eq!(forecast.nodes.len(), 7, "{}", report.text());

    // The rollout that follows: each node's start, and when it freed its slot (an in-place node verified, a
    // replaced node's instance gone: its leaving PendingNode deleted).
    let limits = Limits { surge: Some(Surge { baseline: 7, max_surge: 2 }), ..Limits::new(2, false) };
    let observer = Observer::start(cluster.client(), limits);
    let released: Arc<parking_lot::Mutex<BTreeMap<String, Timestamp>>> = Arc::default();
    let watcher = {
        let released = released.clone();
        let mut events = Box::pin(store.api::<PendingNode>().watch(None, &WatchParams::default(), "0").unwrap());
        tokio::spawn(async move {
            while let Some(event) = events.next().await {
                if let WatchEvent::Deleted(p) = event
                    && p.spec.goal == shared::crd::PendingNodeGoal::Leave
                    && let Some(donor) = p.annotations().get(keys::DONOR)
                {
                    released.lock().insert(donor.clone(), Timestamp::now());
                }
            }
        })
    };
    let since = Timestamp::now();
    let started = std::time::Instant::now();
    roll_out(&cluster, "v4").await;
    let took = started.elapsed().as_secs_f64();
    watcher.abort();
    let seen = observer.stop().await;
    assert_eq!(seen.violations, Vec::<String>::new());
    let mut starts = Vec::new();
    let mut finishes = released.lock().clone();
    for (node, steps) in &seen.timeline {
        // (The observer's first sight of a node's `done` of the last rollout may come after `since`.)
        let after: Vec<&(Timestamp, Step)> = steps.iter().filter(|(at, _)| *at >= since).collect();
        // A node starts at its turn (its drain, staged ahead before; its replacement), as the forecast counts it.
        let Some(start) = after.iter().position(|(_, s)| matches!(s, Step::Drain | Step::Replace)) else { continue };
        starts.push((node.clone(), after[start].0));
        if let Some((at, _)) = after[start..].iter().find(|(_, s)| *s == Step::Done) {
            finishes.insert(node.clone(), *at);
        }
    }
    let actual = waves_of(&starts, &finishes);
    let predicted_waves: BTreeMap<String, u32> = forecast.nodes.iter().map(|n| (n.node.clone(), n.wave)).collect();
    let error = (predicted - took).abs() / took;
    eprintln!("predicted {predicted:.1}s, took {took:.1}s ({:.1} %)\n{}", error * 100.0, report.text());
    assert_eq!(actual, predicted_waves, "{}", report.text());
    assert!(error <= 0.10, "predicted {predicted:.1}s, the rollout took {took:.1}s\n{}", report.text());

    controller.stop(Duration::from_secs(15)).await.unwrap();
    stop_all(agents).await;
    cluster.shutdown().await;
}
