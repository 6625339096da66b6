//! Forecasts of small clusters, and the blockers they find.

use super::snapshot::Workloads;
use super::*;
use crate::policy::budget::MaxUnavailable;
use crate::policy::{Policy, SpecState, ValidSpec};
use serde_json::json;
use shared::protocol::AgentReport;
use std::sync::Arc;

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

/// A Ready worker on v1 whose agent reported, selected by the first rollout.
fn node(name: &str) -> NodeView {
    NodeView {
        name: name.into(),
        control_plane: false,
        selected_by: vec![0],
        opted_in: true,
        ready: true,
        unschedulable: false,
        kubelet_boot_id: Some("b0".into()),
        kubelet_version: None,
        controller: Ok(ControllerAnnotations::default()),
        agent: Ok(AgentReport {
            state: Some(AgentState::Idle),
            boot_id: BootId::parse("k", "b0").ok(),
            os_image: Some("v1".into()),
            ..Default::default()
        }),
        drain: DrainProgress::NotRunning,
        group: None,
        operation: None,
        do_not_disrupt: None,
        checkpoint: None,
        zone: None,
        deferred: None,
        settle: None,
        outdated_taint: false,
    }
}

fn cp(name: &str) -> NodeView {
    NodeView { control_plane: true, ..node(name) }
}

fn rollout(policy: Policy) -> Rollout {
    let spec = ValidSpec { generation: 1, target: "v2".into(), policy, raw: json!({"image": "v2"}) };
    Rollout::new("nv", SpecState::Valid(Arc::new(spec)), None)
}

fn max(n: u32) -> Policy {
    Policy { max_unavailable: MaxUnavailable::Count(n), ..Policy::default() }
}

fn secs(stage: i64, drain: i64, reboot: i64) -> Durations {
    Durations::default().with_flags(
        Some(SignedDuration::from_secs(stage)),
        Some(SignedDuration::from_secs(drain)),
        Some(SignedDuration::from_secs(reboot)),
        None,
    )
}

fn cluster() -> Vec<NodeView> {
    vec![cp("cp-1"), cp("cp-0"), node("w-3"), node("w-0"), node("w-2"), node("w-1"), node("w-4")]
}

#[test]
fn the_control_plane_goes_first_one_at_a_time_then_workers_in_waves_by_name() {
    let f = forecast(&cluster(), &[rollout(max(2))], &Fleet::default(), None, t(0), &secs(10, 5, 20));
    let r = &f.rollouts[0];
    assert_eq!(r.ending, Ending::Complete);
    assert_eq!(
        r.waves(),
        vec![vec!["cp-0"], vec!["cp-1"], vec!["w-0", "w-1"], vec!["w-2", "w-3"], vec!["w-4"]]
            .into_iter()
            .map(|w| w.into_iter().map(String::from).collect::<Vec<_>>())
            .collect::<Vec<_>>()
    );
    // One staging (10 s), then five waves of 25 s each (drain and reboot; the next nodes are staged meanwhile):
    // the next node starts in the round that verifies the last.
    assert_eq!(r.duration_seconds, Some(135.0));
    assert_eq!(r.nodes[2].start_seconds, 60.0);
    assert_eq!(r.nodes[2].finish_seconds, Some(85.0));
    // The first plan is what the controller would do now: stage cp-0 and cp-1 ahead (maxStaging is maxUnavailable).
    assert_eq!(f.first.rollouts[0].actions.len(), 2);
}

#[test]
fn a_node_that_could_not_finish_before_the_window_closes_waits_for_the_next_one_and_the_windows_are_counted() {
    let mut policy = max(1);
    policy.windows = crate::policy::settings::Policy::from_spec(
        &serde_json::from_value(json!({"maintenanceWindow": {"schedule": "0 3 * * *", "duration": "10m"}})).unwrap(),
        t(0),
    )
    .unwrap()
    .windows;
    let mut r = rollout(policy);
    let measured = |step: &str, seconds: i64| shared::crd::StepDuration {
        step: step.into(),
        samples: 5,
        mean_millis: seconds * 1000,
        p95_millis: Some(seconds * 1000),
        recent_millis: vec![seconds * 1000; 5],
    };
    r.step_times = crate::policy::finish::StepTimes::from_status(&[
        measured("drain", 60),
        measured("reboot", 180),
        measured("stage", 60),
    ]);
    let nodes = [node("a"), node("b"), node("c"), node("d")];
    let f = forecast(&nodes, &[r], &Fleet::default(), None, t(0), &secs(60, 60, 180));
    let f = &f.rollouts[0];
    assert_eq!(f.ending, Ending::Complete);
    // 08:00 UTC now; the window opens at 03:00 the next day for 10 minutes and a node's turn takes 4 of them.
    let opens: Timestamp = "2027-01-16T03:00:00Z".parse().unwrap();
    let at = |seconds: f64| t(0).checked_add(SignedDuration::from_secs_f64(seconds)).unwrap();
    let starts: Vec<(&str, Timestamp)> = f.nodes.iter().map(|n| (n.node.as_str(), at(n.start_seconds))).collect();
    // a (after its staging) and b fit in the first window; c would end past 03:10: it starts the next night.
    assert!(starts[..2].iter().all(|(_, s)| *s >= opens && *s <= opens + SignedDuration::from_mins(6)), "{starts:?}");
    let next = opens + SignedDuration::from_hours(24);
    assert!(starts[2..].iter().all(|(_, s)| *s >= next), "{starts:?}");
    for n in &f.nodes {
        let (start, finish) = (at(n.start_seconds), at(n.finish_seconds.unwrap()));
        let day = if start >= next { next } else { opens };
        assert!(finish <= day + SignedDuration::from_mins(10), "{} ends past its window: {finish}", n.node);
    }
    let windows = f.windows.unwrap();
    assert_eq!(windows.periods, 2);
    assert_eq!(windows.ends_at, at(f.duration_seconds.unwrap()));
    assert!(windows.ends_at > next);
}

#[test]
fn canary_waves_go_one_after_the_other_each_soaked_and_the_rest_after_the_last() {
    let mut policy = max(2);
    policy.waves = crate::policy::settings::Policy::from_spec(
        &serde_json::from_value(json!({"waves": [{"nodes": 1, "soak": "10m"}, {"nodes": 2}]})).unwrap(),
        t(0),
    )
    .unwrap()
    .waves;
    let nodes: Vec<NodeView> = ["a", "b", "c", "d", "e", "f"].into_iter().map(node).collect();
    let f = forecast(&nodes, &[rollout(policy)], &Fleet::default(), None, t(0), &secs(10, 5, 20));
    let r = &f.rollouts[0];
    assert_eq!(r.ending, Ending::Complete);
    let of = |name: &str| r.nodes.iter().find(|n| n.node == name).unwrap();
    let start = |name: &str| of(name).start_seconds;
    let finish = |name: &str| of(name).finish_seconds.unwrap();
    // The canary alone, staged first (nothing else is staged beside it), then its ten minutes.
    assert_eq!(start("a"), 10.0);
    for n in ["b", "c", "d", "e", "f"] {
        assert!(start(n) >= finish("a") + 600.0, "{n} started during the canary's soak: {:?}", r.nodes);
    }
    // Wave 2: b and c together; the rest once both are done (its soak is none).
    assert_eq!(start("b"), start("c"));
    for n in ["d", "e", "f"] {
        assert!(start(n) >= finish("b").max(finish("c")), "{n} started in wave 2: {:?}", r.nodes);
    }
    // Staged by 10 s, done at 35 s, soaked to 635 s; b and c staged by 645 s, done at 670 s; then d and e, and f.
    assert_eq!(r.duration_seconds, Some(730.0), "{:?}", r.nodes);
    // The first plan stages the canary alone.
    assert_eq!(f.first.rollouts[0].actions.len(), 1, "{:?}", f.first.rollouts[0].actions);
}

#[test]
fn a_soak_keeps_the_slot_and_a_closed_window_waits_for_it_to_open() {
    let policy = Policy { soak_time: SignedDuration::from_secs(30), ..max(1) };
    let f = forecast(&[node("a"), node("b")], &[rollout(policy)], &Fleet::default(), None, t(0), &secs(1, 1, 1));
    // b is staged while a drains, reboots and soaks: 3 s for a, 30 s of soak, 2 s for b, 30 s of soak.
    assert_eq!(f.rollouts[0].duration_seconds, Some(65.0));
    assert_eq!(f.rollouts[0].waves().len(), 2);

    let mut policy = max(1);
    policy.windows = crate::policy::settings::Policy::from_spec(
        &serde_json::from_value(json!({"maintenanceWindow": {"schedule": "0 3 * * *", "duration": "1h"}})).unwrap(),
        t(0),
    )
    .unwrap()
    .windows;
    let rollouts = [rollout(policy)];
    let f = forecast(&[node("a")], &rollouts, &Fleet::default(), None, t(0), &secs(1, 1, 1));
    let r = &f.rollouts[0];
    assert_eq!(r.ending, Ending::Complete);
    // 08:00 UTC now: the window opens at 03:00 the next day; the node's turn comes once it is staged (1 s).
    assert_eq!(r.nodes[0].start_seconds, 19.0 * 3600.0 + 1.0, "{r:?}");
    let found = blockers::find(&refs(&[node("a")]), &rollouts, &f.first, &Workloads::default(), &[]);
    let kinds: Vec<BlockerKind> = found.iter().map(|b| b.kind).collect();
    assert_eq!(kinds, vec![BlockerKind::WindowClosed], "{found:?}");
}

#[test]
fn a_node_without_an_agent_or_cordoned_by_someone_else_is_a_blocker_and_the_rollout_stops_short() {
    let mut silent = node("w-1");
    silent.agent = Ok(AgentReport::default());
    let cordoned = NodeView { unschedulable: true, ..node("w-2") };
    let marked = NodeView { do_not_disrupt: Some("the Node is annotated ...".into()), ..node("w-3") };
    let nodes = vec![node("w-0"), silent, cordoned, marked];
    let f = forecast(&nodes, &[rollout(max(3))], &Fleet::default(), None, t(0), &secs(1, 1, 1));
    let r = &f.rollouts[0];
    assert_eq!(r.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), vec!["w-0"]);
    let Ending::Stuck { nodes_left, .. } = &r.ending else { panic!("{r:?}") };
    assert_eq!(nodes_left, &vec!["w-1".to_owned(), "w-2".to_owned(), "w-3".to_owned()]);
    assert_eq!(r.duration_seconds, None);
    let found = blockers::find(&refs(&nodes), &[rollout(max(3))], &f.first, &Workloads::default(), &[]);
    let kinds: Vec<(BlockerKind, Vec<String>)> = found.iter().map(|b| (b.kind, b.nodes.clone())).collect();
    assert_eq!(
        kinds,
        vec![
            (BlockerKind::DoNotDisrupt, vec!["w-3".to_owned()]),
            (BlockerKind::NoAgent, vec!["w-1".to_owned()]),
            (BlockerKind::ForeignCordon, vec!["w-2".to_owned()])
        ]
    );
}

fn pod(name: &str, node: &str, labels: serde_json::Value, owned: bool) -> k8s_openapi::api::core::v1::Pod {
    let owners = if owned {
        json!([{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u", "controller": true}])
    } else {
        json!([])
    };
    serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": "demo", "labels": labels, "ownerReferences": owners},
        "spec": {"nodeName": node, "containers": [{"name": "c"}]},
        "status": {"phase": "Running"}
    }))
    .unwrap()
}

#[test]
fn a_budget_allowing_nothing_and_a_bare_pod_name_the_nodes_they_keep_from_draining() {
    let nodes = vec![node("w-0"), node("w-1"), node("w-2")];
    let budget = |name: &str, allowed: i32| -> k8s_openapi::api::policy::v1::PodDisruptionBudget {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "demo"},
            "spec": {"minAvailable": 2, "selector": {"matchLabels": {"app": name}}},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 2, "expectedPods": 2}
        }))
        .unwrap()
    };
    let mut workloads = Workloads::new(vec![budget("web", 0), budget("api", 1)], Default::default());
    let mut pinned = pod("db-0", "w-2", json!({"app": "db"}), true);
    pinned.metadata.annotations = Some([("update.edgeless.systems/do-not-disrupt".into(), "true".into())].into());
    for pod in [
        pod("web-a", "w-0", json!({"app": "web"}), true),
        pod("web-b", "w-2", json!({"app": "web"}), true),
        pod("api-a", "w-1", json!({"app": "api"}), true),
        pod("debug", "w-1", json!({}), false),
        pinned,
    ] {
        workloads.add(pod);
    }
    // The pod under a budget that allows a disruption, with a controller, can block nothing: it is not kept.
    let kept: Vec<&str> = workloads.pods.iter().map(|p| p.name.as_str()).collect();
    assert_eq!((kept, workloads.read), (vec!["web-a", "web-b", "debug", "db-0"], 5));
    let f = forecast(&nodes, &[rollout(max(1))], &Fleet::default(), None, t(0), &secs(1, 1, 1));
    let found = blockers::find(&refs(&nodes), &[rollout(max(1))], &f.first, &workloads, &[]);
    assert_eq!(found.len(), 3, "{found:#?}");
    // The do-not-disrupt pod names its node and what holds it.
    let pinned = found.iter().find(|b| b.kind == BlockerKind::DoNotDisrupt).unwrap();
    assert_eq!(pinned.object, "Pod demo/db-0");
    assert_eq!(pinned.nodes, vec!["w-2".to_owned()]);
    assert_eq!(
        pinned.message,
        "pod demo/db-0 is annotated update.edgeless.systems/do-not-disrupt=true: w-2 is held back while it runs"
    );
    let found: Vec<_> = found.into_iter().filter(|b| b.kind != BlockerKind::DoNotDisrupt).collect();
    assert_eq!(found[0].kind, BlockerKind::DisruptionBudget);
    assert_eq!(found[0].message, "PDB demo/web allows 0 disruptions: w-0, w-2 cannot be drained");
    assert_eq!(found[0].object, "PodDisruptionBudget demo/web");
    assert_eq!(found[1].kind, BlockerKind::UnevictablePod);
    assert_eq!(found[1].object, "Pod demo/debug");
    assert_eq!(found[1].nodes, vec!["w-1".to_owned()]);
    assert!(found[1].fix.contains("spec.rollout.drain.force"), "{:?}", found[1]);
    // Nodes already on the target are not drained: nothing of theirs blocks.
    let updated: Vec<NodeView> = nodes
        .into_iter()
        .map(|mut n| {
            if let Ok(a) = &mut n.agent {
                a.os_image = Some("v2".into());
            }
            n
        })
        .collect();
    let f = forecast(&updated, &[rollout(max(1))], &Fleet::default(), None, t(0), &secs(1, 1, 1));
    assert_eq!(blockers::find(&refs(&updated), &[rollout(max(1))], &f.first, &workloads, &[]), vec![]);
    assert!(f.rollouts[0].nodes.is_empty());
    assert_eq!(f.rollouts[0].up_to_date, 3);
}

#[test]
fn a_scaling_group_at_its_maximum_blocks_the_replacement_of_its_nodes() {
    let mut member = node("g-0");
    member.group = Some(crate::policy::GroupMember { group_id: "grp".into(), ..Default::default() });
    let nodes = vec![member, node("w-0")];
    let f = forecast(&nodes, &[rollout(max(1))], &Fleet::default(), None, t(0), &secs(1, 1, 1));
    let size = |max| blockers::GroupSize {
        name: "workers".into(),
        group_id: "grp".into(),
        max,
        size: 1,
        node_image: "nv".into(),
    };
    let found = blockers::find(&refs(&nodes), &[rollout(max(1))], &f.first, &Workloads::default(), &[size(Some(1))]);
    assert_eq!(found.len(), 1);
    assert_eq!((found[0].kind, found[0].nodes.clone()), (BlockerKind::ScalingGroupAtMax, vec!["g-0".to_owned()]));
    assert_eq!(
        blockers::find(&refs(&nodes), &[rollout(max(1))], &f.first, &Workloads::default(), &[size(Some(2))]),
        vec![]
    );
}

#[test]
fn observed_waves_follow_the_same_definition() {
    let starts: Vec<(String, Timestamp)> =
        [("a", 0), ("b", 0), ("c", 12), ("d", 13), ("e", 30)].iter().map(|(n, s)| (n.to_string(), t(*s))).collect();
    let finishes: BTreeMap<String, Timestamp> =
        [("a", 12), ("b", 13), ("c", 25), ("d", 26)].iter().map(|(n, s)| (n.to_string(), t(*s))).collect();
    let waves = waves_of(&starts, &finishes);
    assert_eq!(waves.values().copied().collect::<Vec<_>>(), vec![1, 1, 2, 2, 3]);
}

const HASH_OLD: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const HASH_NEW: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";

/// A node on Kubernetes v1.33.0 with the components of `HASH_OLD`.
fn on_v133(mut n: NodeView) -> NodeView {
    n.kubelet_version = Some("v1.33.0".into());
    if let Ok(a) = &mut n.agent {
        a.components_hash = shared::protocol::ComponentsHash::parse("k", HASH_OLD).ok();
    }
    n
}

/// `rollout(policy)` that also upgrades Kubernetes to v1.34.0 while the API server reports `api_server`.
fn upgrading(policy: Policy, api_server: &str) -> Rollout {
    let target = crate::policy::kubernetes::KubernetesTarget {
        version: "v1.34.0".parse().unwrap(),
        components: "k8s-components".into(),
        hash: HASH_NEW.into(),
        api_server: api_server.parse().unwrap(),
    };
    Rollout { kubernetes: Some(KubernetesSpec::Upgrade(target)), ..rollout(policy) }
}

fn names(waves: &[&[&str]]) -> Vec<Vec<String>> {
    waves.iter().map(|w| w.iter().map(|n| n.to_string()).collect()).collect()
}

#[test]
fn a_kubernetes_upgrade_runs_kubeadm_control_plane_first_then_workers_and_the_image_after() {
    let nodes: Vec<NodeView> =
        [cp("cp-1"), cp("cp-0"), node("w-0"), node("w-1"), node("w-2")].into_iter().map(on_v133).collect();
    let mut durations = secs(10, 5, 20).with_flags(None, None, None, Some(SignedDuration::from_secs(30)));
    durations.fetch = SignedDuration::from_secs(10);
    let f = forecast(&nodes, &[upgrading(max(2), "v1.33.0")], &Fleet::default(), None, t(0), &durations);
    let r = &f.rollouts[0];
    assert_eq!(r.ending, Ending::Complete, "{r:#?}");
    let phase = |p: Phase| -> Vec<(&str, u32, f64, Option<f64>)> {
        r.nodes
            .iter()
            .filter(|n| n.phase == p)
            .map(|n| (n.node.as_str(), n.wave, n.start_seconds, n.finish_seconds))
            .collect()
    };
    // Each node's components fetched ahead (10 s, two at a time: maxStaging is maxUnavailable), then kubeadm upgrade
    // apply on the first control-plane node alone (drained first, as every node), then the other one drained and
    // upgraded, then the workers two at a time: each turn (drain 5 s, kubeadm 30 s) starts fetched.
    assert_eq!(
        phase(Phase::Kubernetes),
        vec![
            ("cp-0", 1, 10.0, Some(45.0)),
            ("cp-1", 2, 45.0, Some(80.0)),
            ("w-0", 3, 80.0, Some(115.0)),
            ("w-1", 3, 80.0, Some(115.0)),
            ("w-2", 4, 115.0, Some(150.0)),
        ]
    );
    // Then the image, in the same order, each node's turn 25 s (the next ones staged meanwhile).
    assert_eq!(
        phase(Phase::Image),
        vec![
            ("cp-0", 5, 160.0, Some(185.0)),
            ("cp-1", 6, 185.0, Some(210.0)),
            ("w-0", 7, 210.0, Some(235.0)),
            ("w-1", 7, 210.0, Some(235.0)),
            ("w-2", 8, 235.0, Some(260.0)),
        ]
    );
    assert_eq!(r.duration_seconds, Some(260.0));
    assert_eq!(
        r.waves(),
        names(&[&["cp-0"], &["cp-1"], &["w-0", "w-1"], &["w-2"], &["cp-0"], &["cp-1"], &["w-0", "w-1"], &["w-2"]])
    );

    // Once the API server reports the target, no node waits for kubeadm upgrade apply: a node already
    // upgraded is left alone by the Kubernetes phase.
    let mut done = on_v133(cp("cp-0"));
    done.kubelet_version = Some("v1.34.0".into());
    if let Ok(a) = &mut done.agent {
        a.components_hash = shared::protocol::ComponentsHash::parse("k", HASH_NEW).ok();
    }
    let nodes = vec![done, on_v133(node("w-0"))];
    let f = forecast(&nodes, &[upgrading(max(2), "v1.34.0")], &Fleet::default(), None, t(0), &durations);
    let r = &f.rollouts[0];
    let kubernetes: Vec<&str> =
        r.nodes.iter().filter(|n| n.phase == Phase::Kubernetes).map(|n| n.node.as_str()).collect();
    assert_eq!(kubernetes, vec!["w-0"]);
    // w-0 fetches (10 s), drains (5 s) and upgrades (30 s); then the image: both staged at once (10 s), the
    // control-plane node's turn alone (25 s), then w-0's (25 s).
    assert_eq!(r.duration_seconds, Some(105.0), "{r:#?}");
}

#[test]
fn a_kubernetes_upgrade_without_a_control_plane_node_to_apply_it_does_not_complete() {
    let nodes = vec![on_v133(node("w-0")), on_v133(node("w-1"))];
    let f = forecast(&nodes, &[upgrading(max(2), "v1.33.0")], &Fleet::default(), None, t(0), &secs(1, 1, 1));
    let r = &f.rollouts[0];
    assert!(r.nodes.is_empty(), "{r:#?}");
    let Ending::Stuck { reason, nodes_left, .. } = &r.ending else { panic!("{r:#?}") };
    assert_eq!(reason, "WaitingForApiServer");
    assert_eq!(nodes_left, &vec!["w-0".to_owned(), "w-1".to_owned()]);
}

/// A worker of scaling group `group` on v1, without an agent (a replaced node needs none).
fn member(name: &str, group: &str) -> NodeView {
    let m = crate::policy::GroupMember {
        group_id: group.into(),
        provider_id: format!("simulated://{group}/{name}"),
        image: Some("v1".into()),
        ready_since: Some(t(-600)),
        ..Default::default()
    };
    NodeView { agent: Ok(AgentReport::default()), group: Some(m), ..node(name) }
}

fn groups(ids: &[&str], image: &str) -> Fleet {
    let groups = ids
        .iter()
        .map(|id| crate::policy::replacement::GroupView {
            group_id: (*id).into(),
            control_plane: false,
            image: Some(image.into()),
        })
        .collect();
    Fleet { groups, ..Fleet::default() }
}

fn replacing(replace: i64, retire: i64, release: i64) -> Durations {
    let s = |n| Some(SignedDuration::from_secs(n));
    secs(10, 5, 20).with_replacement_flags(s(replace), s(retire), s(release))
}

#[test]
fn group_nodes_are_replaced_within_max_surge_and_the_others_updated_in_place_under_one_budget() {
    let nodes = [member("a-0", "a"), member("a-1", "a"), member("a-2", "a"), node("w-0")];
    let policy = Policy { max_surge: crate::policy::budget::MaxSurge::Count(2), ..max(3) };
    let f = forecast(&nodes, &[rollout(policy)], &groups(&["a"], "v2"), None, t(0), &replacing(40, 15, 5));
    let r = &f.rollouts[0];
    assert_eq!(r.ending, Ending::Complete, "{r:#?}");
    let replaced: Vec<(&str, bool, u32)> = r.nodes.iter().map(|n| (n.node.as_str(), n.replaced, n.wave)).collect();
    // maxSurge 2: two replacements and the in-place node at once; a-2 once a replaced node's instance is gone.
    assert_eq!(replaced, vec![("a-0", true, 1), ("a-1", true, 1), ("w-0", false, 1), ("a-2", true, 2)]);
    // A replacement: 40 s until its drain starts, 15 s of drain and deletion, 5 s until its instance is gone.
    assert_eq!(r.nodes[0].finish_seconds, Some(60.0));
    assert_eq!(r.nodes[3].start_seconds, 60.0);
    assert_eq!(r.duration_seconds, Some(120.0));
    // The in-place node: stage, drain, reboot.
    assert_eq!(r.nodes[2].finish_seconds, Some(35.0));
    // Every member was replaced by a new node of the group (the forecast's own heirs are up to date).
    assert_eq!(f.first.rollouts[0].counts.total, 4);

    // maxSurge 1: one replacement at a time.
    let policy = Policy { max_surge: crate::policy::budget::MaxSurge::Count(1), ..max(3) };
    let f = forecast(&nodes, &[rollout(policy)], &groups(&["a"], "v2"), None, t(0), &replacing(40, 15, 5));
    let waves: Vec<(&str, u32)> = f.rollouts[0].nodes.iter().map(|n| (n.node.as_str(), n.wave)).collect();
    assert_eq!(waves, vec![("a-0", 1), ("w-0", 1), ("a-1", 2), ("a-2", 3)]);
    assert_eq!(f.rollouts[0].duration_seconds, Some(180.0));
}

#[test]
fn the_soak_time_is_part_of_the_measured_replace_step_and_a_group_without_the_image_holds_its_nodes() {
    // The measured `replace` step includes the soak: the drain starts `replace` after the intent all the same.
    let policy = Policy {
        soak_time: SignedDuration::from_secs(30),
        max_surge: crate::policy::budget::MaxSurge::Count(1),
        ..max(1)
    };
    let f =
        forecast(&[member("a-0", "a")], &[rollout(policy)], &groups(&["a"], "v2"), None, t(0), &replacing(40, 15, 5));
    assert_eq!(f.rollouts[0].duration_seconds, Some(60.0), "{:#?}", f.rollouts[0]);

    // The group's new instances would run v1: the node is held, and the forecast says it does not complete.
    let f =
        forecast(&[member("a-0", "a")], &[rollout(max(1))], &groups(&["a"], "v1"), None, t(0), &replacing(40, 15, 5));
    match &f.rollouts[0].ending {
        Ending::Stuck { reason, nodes_left, .. } => {
            assert_eq!((reason.as_str(), nodes_left.as_slice()), ("GroupImagePending", ["a-0".to_owned()].as_slice()))
        }
        other => panic!("{other:?}"),
    }
    let size = |node_image: &str| blockers::GroupSize {
        name: "group-a".into(),
        group_id: "a".into(),
        max: None,
        size: 1,
        node_image: node_image.into(),
    };
    let nodes = [member("a-0", "a")];
    let found = blockers::find(&refs(&nodes), &[rollout(max(1))], &f.first, &Workloads::default(), &[size("other")]);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert_eq!((found[0].kind, found[0].nodes.as_slice()), (BlockerKind::GroupImage, ["a-0".to_owned()].as_slice()));
    assert!(
        found[0].message.contains("ScalingGroup group-a takes the image of NodeVersion other"),
        "{}",
        found[0].message
    );
    // A group that takes this NodeVersion's image gets it from its controller in a moment: no blocker.
    assert_eq!(
        blockers::find(&refs(&nodes), &[rollout(max(1))], &f.first, &Workloads::default(), &[size("nv")]),
        vec![]
    );
}

#[test]
fn the_workloads_keep_only_the_pods_that_could_block_a_drain() {
    let budget = |name: &str, selector: serde_json::Value, allowed: i32| {
        serde_json::from_value::<k8s_openapi::api::policy::v1::PodDisruptionBudget>(json!({
            "metadata": {"name": name, "namespace": "demo"},
            "spec": {"maxUnavailable": 1, "selector": selector},
            "status": {"disruptionsAllowed": allowed, "currentHealthy": 2, "desiredHealthy": 1, "expectedPods": 2}
        }))
        .unwrap()
    };
    let budgets = vec![
        budget("db", json!({"matchLabels": {"app": "db"}}), 1),
        budget("db-tier", json!({"matchLabels": {"tier": "data"}}), 1),
        budget("frozen", json!({"matchLabels": {"app": "frozen"}}), 0),
    ];
    let existing = std::collections::BTreeSet::from([("demo".to_owned(), "logs".to_owned())]);
    let with = |name: &str, patch: serde_json::Value| {
        let mut pod = serde_json::to_value(pod(name, "w-0", json!({"app": "web"}), true)).unwrap();
        json_patch(&mut pod, patch);
        serde_json::from_value::<k8s_openapi::api::core::v1::Pod>(pod).unwrap()
    };
    let daemon = |ds: &str| {
        json!({"metadata": {"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": ds, "uid": "d", "controller": true}]}})
    };
    let cases = [
        // (pod, kept)
        (with("web", json!({})), false),
        (with("bare", json!({"metadata": {"ownerReferences": []}})), true),
        (with("scratch", json!({"spec": {"volumes": [{"name": "s", "emptyDir": {}}]}})), true),
        (with("logs-a", daemon("logs")), false),
        (with("orphan-a", daemon("gone")), true),
        (with("leaving", json!({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}})), false),
        (with("static", json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}})), false),
        (with("db-0", json!({"metadata": {"labels": {"app": "db"}}})), false),
        (with("db-1", json!({"metadata": {"labels": {"app": "db", "tier": "data"}}})), true),
        (with("frozen-0", json!({"metadata": {"labels": {"app": "frozen"}}})), true),
        (with("unscheduled", json!({"spec": {"nodeName": null}, "metadata": {"ownerReferences": []}})), false),
        (with("pinned", json!({"metadata": {"annotations": {"karpenter.sh/do-not-disrupt": "true"}}})), true),
    ];
    let mut workloads = Workloads::new(budgets.clone(), existing.clone());
    for (pod, _) in &cases {
        workloads.add(pod.clone());
    }
    let kept: Vec<&str> = workloads.pods.iter().map(|p| p.name.as_str()).collect();
    let expected: Vec<&str> =
        cases.iter().filter(|(_, k)| *k).filter_map(|(p, _)| p.metadata.name.as_deref()).collect();
    assert_eq!((kept, workloads.read), (expected, cases.len()));
    let db_1 = workloads.pods.iter().find(|p| p.name == "db-1").unwrap();
    assert_eq!(db_1.budgets, ["db", "db-tier"]);

    // Under every drain option, the blockers found from the pods kept are those found from every pod.
    let nodes = vec![node("w-0")];
    let mut everything = Workloads::new(budgets.clone(), existing.clone());
    everything.pods = cases.iter().map(|(p, _)| super::snapshot::PodFacts::new(p.clone(), &budgets)).collect();
    for (force, delete_empty_dir_data) in [(false, false), (true, false), (false, true), (true, true)] {
        let mut policy = max(1);
        policy.drain = shared::crd::DrainOptions { force, delete_empty_dir_data };
        let rollouts = [rollout(policy)];
        let f = forecast(&nodes, &rollouts, &Fleet::default(), None, t(0), &secs(1, 1, 1));
        let from_kept = blockers::find(&refs(&nodes), &rollouts, &f.first, &workloads, &[]);
        assert_eq!(
            from_kept,
            blockers::find(&refs(&nodes), &rollouts, &f.first, &everything, &[]),
            "{force} {delete_empty_dir_data}"
        );
        assert!(!from_kept.is_empty());
    }
}

/// Merges `patch` into `value` (objects merged key by key, anything else replaced).
fn json_patch(value: &mut serde_json::Value, patch: serde_json::Value) {
    match (value, patch) {
        (serde_json::Value::Object(target), serde_json::Value::Object(patch)) => {
            for (key, patch) in patch {
                json_patch(target.entry(key).or_insert(serde_json::Value::Null), patch);
            }
        }
        (target, patch) => *target = patch,
    }
}

/// The views as the blockers take them.
fn refs(nodes: &[NodeView]) -> Vec<&NodeView> {
    nodes.iter().collect()
}
