use super::super::tests::{TARGET, cp, node, rollout_with, t, with_intent, with_report};
use super::super::{Fleet, Policy, budget, plan, plan_with};
use super::*;
use shared::protocol::ComponentsHash;

const HASH: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const COMPONENTS: &str = "k8s-components-sha256-1111111111111111111111111111111111111111111111111111111111111111";

fn upgrade(api_server: &str) -> KubernetesSpec {
    KubernetesSpec::Upgrade(KubernetesTarget {
        version: "v1.34.1".parse().unwrap(),
        components: COMPONENTS.into(),
        hash: HASH.into(),
        api_server: api_server.parse().unwrap(),
    })
}

fn run(nodes: &[NodeView], kubernetes: KubernetesSpec, policy: Policy, now: Timestamp) -> Plan {
    let rollout = Rollout { kubernetes: Some(kubernetes), ..rollout_with(policy) };
    plan(nodes, &[rollout], None, now).rollouts.remove(0)
}

fn kinds(plan: &Plan) -> Vec<(String, ActionKind)> {
    plan.actions.iter().map(|a| (a.node.clone(), a.kind.clone())).collect()
}

/// Runs v1.34.1 with the components of the ConfigMap on the image `TARGET`... or not.
fn upgraded(mut n: NodeView) -> NodeView {
    n.kubelet_version = Some("v1.34.1".into());
    if let Ok(a) = &mut n.agent {
        a.components_hash = Some(ComponentsHash::parse("k", HASH).unwrap());
        a.os_image = Some(TARGET.into());
    }
    n
}

fn kubeadm_intent(n: NodeView, role: KubeadmRole, token: &str, since: Timestamp) -> NodeView {
    let mut n = with_intent(n, Step::KubeadmUpgrade, "v1.34.1", token, since);
    if let Ok(c) = &mut n.controller
        && let Some(i) = &mut c.intent
    {
        i.kubeadm = Some(KubeadmIntent { components: COMPONENTS.into(), role: Some(role) });
    }
    n
}

fn kubeadm(role: KubeadmRole) -> ActionKind {
    ActionKind::KubeadmUpgrade {
        target: "v1.34.1".into(),
        kubeadm: KubeadmIntent { components: COMPONENTS.into(), role: Some(role) },
    }
}

fn drain() -> ActionKind {
    ActionKind::Drain { target: "v1.34.1".into() }
}

fn fetch() -> ActionKind {
    ActionKind::Fetch { target: "v1.34.1".into(), kubeadm: KubeadmIntent { components: COMPONENTS.into(), role: None } }
}

/// `n` in the fetch step of v1.34.1 (token `token`, since `since`), its agent not done yet.
fn fetching(n: NodeView, token: &str, since: Timestamp) -> NodeView {
    let mut n = with_intent(n, Step::Fetch, "v1.34.1", token, since);
    if let Ok(c) = &mut n.controller
        && let Some(i) = &mut c.intent
    {
        i.kubeadm = Some(KubeadmIntent { components: COMPONENTS.into(), role: None });
    }
    n
}

/// `n` with the components of v1.34.1 fetched ahead, waiting for its turn.
fn fetched(n: NodeView) -> NodeView {
    let name = n.name.clone();
    let token = format!("f{}", name.replace('-', ""));
    with_report(fetching(n, &token, t(0)), AgentState::Done, &token)
}

/// The actions of `plan` but the fetches ahead (which disrupt nothing).
fn disruptive(plan: &Plan) -> Vec<(String, ActionKind)> {
    kinds(plan).into_iter().filter(|(_, k)| !matches!(k, ActionKind::Fetch { .. })).collect()
}

fn fetches(plan: &Plan) -> Vec<String> {
    kinds(plan).into_iter().filter(|(_, k)| matches!(k, ActionKind::Fetch { .. })).map(|(n, _)| n).collect()
}

#[test]
fn a_refused_upgrade_touches_no_node_and_says_why() {
    let nodes = [cp("cp-0"), node("w1")];
    let p = run(&nodes, KubernetesSpec::Refused("v1.36.0 is two minors past v1.34.0".into()), Policy::default(), t(0));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let hold = p.hold.unwrap();
    assert_eq!(hold.reason, Reason::KubernetesUpgradeRefused);
    assert!(hold.message.contains("two minors"));
}

#[test]
fn the_first_control_plane_node_is_drained_then_applies_alone() {
    let nodes = [cp("cp-1"), cp("cp-0"), node("w1"), node("w2")];
    let policy = Policy { max_unavailable: budget::MaxUnavailable::Count(3), ..Policy::default() };
    // Every node fetches ahead first, in start order, within maxStaging (here maxUnavailable, 3): nothing cordoned.
    let p = run(&nodes, upgrade("v1.33.5"), policy.clone(), t(0));
    assert_eq!(kinds(&p), vec![("cp-0".into(), fetch()), ("cp-1".into(), fetch()), ("w1".into(), fetch())]);
    let mut nodes = nodes.to_vec();
    // Fetched: the first control-plane node's turn, alone (a worker fetched takes no turn before the API server).
    nodes[1] = fetched(cp("cp-0"));
    nodes[2] = fetched(node("w1"));
    let p = run(&nodes, upgrade("v1.33.5"), policy.clone(), t(1));
    assert_eq!(disruptive(&p), vec![("cp-0".into(), drain())]);
    // Drained: kubeadm upgrade apply, still cordoned.
    let draining = with_intent(cp("cp-0"), Step::Drain, "v1.34.1", "d0", t(0));
    nodes[1] = NodeView { drain: DrainProgress::Drained, ..draining };
    let p = run(&nodes, upgrade("v1.33.5"), policy.clone(), t(5));
    assert_eq!(disruptive(&p), vec![("cp-0".into(), kubeadm(KubeadmRole::Apply))]);
    // While it runs, no other node takes its turn; the next ones fetch ahead.
    nodes[1] = kubeadm_intent(cp("cp-0"), KubeadmRole::Apply, "k1", t(0));
    nodes[0] = fetched(cp("cp-1"));
    let p = run(&nodes, upgrade("v1.33.5"), policy.clone(), t(10));
    assert_eq!(disruptive(&p), vec![]);
    assert_eq!(fetches(&p), vec!["w2".to_string()]);
    nodes[3] = fetched(node("w2"));
    let p = run(&nodes, upgrade("v1.33.5"), policy.clone(), t(10));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    // The agent is done and the kubelet runs the target, but /version does not say so yet: not verified.
    nodes[1] =
        upgraded(with_report(kubeadm_intent(cp("cp-0"), KubeadmRole::Apply, "k1", t(0)), AgentState::Done, "k1"));
    let p = run(&nodes, upgrade("v1.33.5"), policy.clone(), t(20));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    // Once it does, the node is done.
    let p = run(&nodes, upgrade("v1.34.1"), policy, t(30));
    assert_eq!(kinds(&p), vec![("cp-0".into(), ActionKind::Done { target: "v1.34.1".into() })]);
}

/// `kubeadm upgrade apply` starts through the gates of every control-plane start: not beside another
/// control-plane node that is busy in any flow (another NodeVersion's, a NodeOp's) or NotReady, and not while
/// maxUnavailable is taken.
#[test]
fn kubeadm_upgrade_apply_waits_for_the_control_plane_gates() {
    let policy = Policy { max_unavailable: budget::MaxUnavailable::Count(1), ..Policy::default() };
    let started = |nodes: &[NodeView]| run(nodes, upgrade("v1.33.5"), policy.clone(), t(0));
    let turns =
        |p: &Plan| p.actions.iter().filter(|a| a.starts_node() && !matches!(a.kind, ActionKind::Fetch { .. })).count();
    assert_eq!(disruptive(&started(&[fetched(cp("cp-0")), cp("cp-1"), node("w1")])), vec![("cp-0".into(), drain())]);
    // Another control-plane node NotReady: it takes the one slot of maxUnavailable, and with a second slot
    // free the one-at-a-time rule holds the start, named.
    let not_ready = NodeView { ready: false, ..cp("cp-1") };
    let p = started(&[fetched(cp("cp-0")), not_ready.clone(), node("w1")]);
    assert_eq!(turns(&p), 0, "{:?}", p.actions);
    assert!(p.hold.is_some_and(|h| h.reason == Reason::UnavailableNodes && h.message.contains("cp-1 (NotReady)")));
    let two = Policy { max_unavailable: budget::MaxUnavailable::Count(2), ..policy.clone() };
    let p = run(&[fetched(cp("cp-0")), not_ready, node("w1")], upgrade("v1.33.5"), two, t(0));
    assert_eq!(turns(&p), 0, "{:?}", p.actions);
    assert!(p.hold.is_some_and(|h| h.reason == Reason::WaitingForControlPlane));
    // Another control-plane node worked on by a NodeOp.
    let operated = NodeView { operation: Some("reboot-all".into()), ..cp("cp-1") };
    let p = started(&[fetched(cp("cp-0")), operated, node("w1")]);
    assert_eq!(turns(&p), 0, "{:?}", p.actions);
    // A control-plane node another NodeVersion updates.
    let mut other = with_intent(cp("cp-9"), Step::Reboot, TARGET, "r9", t(0));
    other.selected_by = vec![1];
    let rollouts = [
        Rollout { kubernetes: Some(upgrade("v1.33.5")), ..rollout_with(policy.clone()) },
        Rollout { name: "other".into(), ..rollout_with(policy.clone()) },
    ];
    let p = plan(&[fetched(cp("cp-0")), other, node("w1")], &rollouts, None, t(0)).rollouts.remove(0);
    assert_eq!(turns(&p), 0, "{:?}", p.actions);
    // maxUnavailable taken by a NotReady worker.
    let down = NodeView { ready: false, ..node("w1") };
    let p = started(&[fetched(cp("cp-0")), cp("cp-1"), down]);
    assert_eq!(turns(&p), 0, "{:?}", p.actions);
    assert!(p.hold.is_some_and(|h| h.reason == Reason::UnavailableNodes));
}

/// Mid-upgrade, `/version` through the Service may answer from an API server not upgraded yet: once a
/// control-plane node runs the target, the API server counts as upgraded, and the next control-plane node
/// takes `kubeadm upgrade node`, never `apply` again.
#[test]
fn the_api_server_version_never_goes_back_behind_an_upgraded_control_plane_node() {
    let policy = Policy { max_unavailable: budget::MaxUnavailable::Count(1), ..Policy::default() };
    let nodes = [upgraded(cp("cp-0")), fetched(cp("cp-1")), node("w1")];
    let p = run(&nodes, upgrade("v1.33.5"), policy.clone(), t(0));
    assert_eq!(disruptive(&p), vec![("cp-1".into(), drain())]);
    assert_ne!(p.hold.map(|h| h.reason), Some(Reason::WaitingForApiServer));
    let drained =
        NodeView { drain: DrainProgress::Drained, ..with_intent(cp("cp-1"), Step::Drain, "v1.34.1", "d1", t(0)) };
    let p = run(&[upgraded(cp("cp-0")), drained, node("w1")], upgrade("v1.33.5"), policy, t(5));
    assert_eq!(disruptive(&p), vec![("cp-1".into(), kubeadm(KubeadmRole::Node))]);
}

#[test]
fn then_the_other_control_plane_nodes_one_at_a_time_drained_then_the_workers_under_max_unavailable() {
    let policy = Policy { max_unavailable: budget::MaxUnavailable::Count(2), ..Policy::default() };
    let nodes = [upgraded(cp("cp-0")), fetched(cp("cp-1")), fetched(cp("cp-2")), node("w1"), node("w2"), node("w3")];
    let p = run(&nodes, upgrade("v1.34.1"), policy.clone(), t(0));
    assert_eq!(kinds(&p), vec![("cp-1".into(), drain())], "maxStaging (2) is taken by the two fetched");
    // Drained: kubeadm upgrade node, still cordoned.
    let draining = with_intent(cp("cp-1"), Step::Drain, "v1.34.1", "d1", t(0));
    let drained = NodeView { drain: DrainProgress::Drained, ..draining };
    let p = run(&[nodes[0].clone(), drained, cp("cp-2"), node("w1")], upgrade("v1.34.1"), policy.clone(), t(5));
    assert_eq!(disruptive(&p), vec![("cp-1".into(), kubeadm(KubeadmRole::Node))]);
    assert_eq!(fetches(&p), vec!["cp-2".to_string(), "w1".to_string()], "the next ones fetch meanwhile");
    // Every control-plane node upgraded: two workers at once.
    let done = [upgraded(cp("cp-0")), upgraded(cp("cp-1")), upgraded(cp("cp-2"))];
    let mut nodes: Vec<NodeView> = done.to_vec();
    nodes.extend([fetched(node("w1")), fetched(node("w2")), node("w3")]);
    let p = run(&nodes, upgrade("v1.34.1"), policy, t(10));
    assert_eq!(kinds(&p), vec![("w1".into(), drain()), ("w2".into(), drain())], "w3 fetches once they left maxStaging");
    // Starts are written after the writes that free slots.
    assert!(p.actions.iter().all(|a| a.starts_node()));
}

#[test]
fn no_node_starts_before_the_autoscaler_is_confirmed_down() {
    let nodes = [cp("cp-0"), node("w1")];
    let rollout = Rollout { kubernetes: Some(upgrade("v1.33.5")), ..rollout_with(Policy::default()) };
    let running =
        Fleet { autoscaler_running: Some("the cluster-autoscaler is not confirmed down".into()), ..Fleet::default() };
    let p = plan_with(&nodes, std::slice::from_ref(&rollout), &running, None, t(0)).rollouts.remove(0);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let hold = p.hold.unwrap();
    assert_eq!(hold.reason, Reason::WaitingForAutoscaler);
    assert!(hold.message.contains("not confirmed down"), "{}", hold.message);
    // The status says the upgrade is under way already: that is what pauses the autoscaler.
    assert!(p.kubernetes.is_some_and(|k| k.active));
    // Confirmed down: the first control-plane node starts (fetching ahead).
    let p = plan_with(&nodes, &[rollout], &Fleet::default(), None, t(1)).rollouts.remove(0);
    assert_eq!(kinds(&p), vec![("cp-0".into(), fetch())]);
    // Later nodes wait for it too, fetched or not.
    let nodes = [upgraded(cp("cp-0")), fetched(node("w1"))];
    let rollout = Rollout { kubernetes: Some(upgrade("v1.34.1")), ..rollout_with(Policy::default()) };
    let p = plan_with(&nodes, std::slice::from_ref(&rollout), &running, None, t(2)).rollouts.remove(0);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let p = plan_with(&nodes, &[rollout], &Fleet::default(), None, t(3)).rollouts.remove(0);
    assert_eq!(kinds(&p), vec![("w1".into(), drain())]);
}

#[test]
fn an_agent_error_fails_the_node_and_a_silent_agent_times_out() {
    let nodes = [kubeadm_intent(cp("cp-0"), KubeadmRole::Apply, "k1", t(0))];
    let mut failed = nodes.clone();
    failed[0] = with_report(failed[0].clone(), AgentState::Error, "k1");
    if let Ok(a) = &mut failed[0].agent {
        a.message = Some("installing the Kubernetes components: ... nothing was installed".into());
    }
    let p = run(&failed, upgrade("v1.33.5"), Policy::default(), t(10));
    assert_eq!(p.actions[0].reason, Reason::KubernetesUpgradeFailed);
    assert!(p.actions[0].message.contains("nothing was installed"), "{}", p.actions[0].message);
    assert!(matches!(p.actions[0].kind, ActionKind::Fail { .. }));
    let policy = Policy::default();
    let late = t(0).checked_add(policy.stage_timeout + policy.reboot_timeout).unwrap();
    let p = run(&nodes, upgrade("v1.33.5"), policy.clone(), late);
    assert_eq!(p.actions[0].reason, Reason::KubernetesUpgradeTimedOut);
    // The failure budget spent by a failed Kubernetes upgrade says so, not "failed to update to <image>".
    let marked = with_intent(cp("cp-0"), Step::Failed, "v1.34.1", "k1", t(0));
    let p = run(&[marked, cp("cp-1")], upgrade("v1.33.5"), policy, late);
    let hold = p.hold.expect("held by the failure budget");
    assert_eq!(hold.reason, Reason::FailureBudgetExhausted);
    assert!(hold.message.contains("failed to update to Kubernetes v1.34.1"), "{}", hold.message);
}

/// A node in the kubeadm step whose upgrade is no longer asked for (`kubernetesClusterVersion` removed, the
/// NodeVersion deleted, another version asked): it keeps its slot while kubeadm may run, and is released
/// (intent removed, uncordoned) once its agent finished or the step's deadline passed. Never wedged.
#[test]
fn a_kubeadm_step_no_longer_asked_for_is_released_once_it_finished_or_timed_out() {
    let cordoned = |mut n: NodeView| {
        n.unschedulable = true;
        if let Ok(c) = &mut n.controller {
            c.cordoned_by_us = true;
        }
        n
    };
    let mid = cordoned(kubeadm_intent(node("w1"), KubeadmRole::Node, "k1", t(0)));
    let finished = with_report(mid.clone(), AgentState::Done, "k1");
    let policy = Policy::default();
    let late = t(0).checked_add(policy.stage_timeout + policy.reboot_timeout).unwrap();
    let released = |p: &Plan| p.actions.iter().any(|a| a.node == "w1" && a.kind == ActionKind::Release);
    // The version removed from the NodeVersion: the image flow plans the node.
    let image_only = |n: &NodeView, now| plan(std::slice::from_ref(n), &[rollout_with(policy.clone())], None, now);
    let p = image_only(&mid, t(10)).rollouts.remove(0);
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.counts.in_progress, 1, "it keeps its slot while kubeadm may run");
    assert!(released(&image_only(&finished, t(20)).rollouts[0]));
    assert!(released(&image_only(&mid, late).rollouts[0]), "released at the step's deadline");
    assert!(ActionKind::Release.uncordons());
    // The NodeVersion deleted: no rollout selects the node.
    let orphan = |n: &NodeView| NodeView { selected_by: vec![], ..n.clone() };
    let p = plan(&[orphan(&mid)], &[], None, t(10));
    assert!(!released(&p.unowned), "{:?}", p.unowned.actions);
    assert!(released(&plan(&[orphan(&finished)], &[], None, t(20)).unowned));
    assert!(released(&plan(&[orphan(&mid)], &[], None, late).unowned));
    // Another version asked for: the same.
    let other = KubernetesSpec::Upgrade(KubernetesTarget {
        version: "v1.35.0".parse().unwrap(),
        components: COMPONENTS.into(),
        hash: HASH.into(),
        api_server: "v1.34.1".parse().unwrap(),
    });
    let p = run(std::slice::from_ref(&mid), other.clone(), policy.clone(), t(10));
    assert!(!released(&p), "{:?}", p.actions);
    assert!(released(&run(std::slice::from_ref(&finished), other, policy, t(20))));
}

#[test]
fn once_every_node_runs_the_version_the_image_flow_plans() {
    let nodes = [upgraded(cp("cp-0")), upgraded(node("w1"))];
    let mut nodes = nodes.to_vec();
    for n in &mut nodes {
        if let Ok(a) = &mut n.agent {
            a.os_image = Some("v1".into());
        }
    }
    let p = run(&nodes, upgrade("v1.34.1"), Policy::default(), t(0));
    assert_eq!(kinds(&p), vec![("cp-0".into(), ActionKind::Stage { target: TARGET.into() })]);
}

/// A fetch ahead is a step like staging: an agent error fails the node and a silent agent times out at
/// `stageTimeout`, each saying it was the fetch; a fetch no longer asked for (another version, no Kubernetes upgrade
/// any more, no NodeVersion) is released, which tells the agent to discard what it fetched.
#[test]
fn a_fetch_fails_times_out_or_is_released_when_no_longer_asked_for() {
    let policy = Policy::default();
    let mid = fetching(node("w1"), "f1", t(0));
    let mut failed = with_report(mid.clone(), AgentState::Error, "f1");
    if let Ok(a) = &mut failed.agent {
        a.message = Some("k8s.gcr.io/kubeadm has sha256:ab, not the expected sha256:cd: nothing was installed".into());
    }
    let p = run(std::slice::from_ref(&failed), upgrade("v1.34.1"), policy.clone(), t(10));
    let a = &p.actions[0];
    assert_eq!((a.reason, matches!(a.kind, ActionKind::Fail { .. })), (Reason::StageFailed, true), "{a:?}");
    assert!(a.message.contains("could not fetch the components of Kubernetes v1.34.1: k8s.gcr.io"), "{}", a.message);
    let late = t(0).checked_add(policy.stage_timeout).unwrap();
    let p = run(std::slice::from_ref(&mid), upgrade("v1.34.1"), policy.clone(), late);
    assert_eq!(p.actions[0].reason, Reason::StageTimedOut);
    assert!(p.actions[0].message.contains("did not fetch the components of Kubernetes v1.34.1"));
    // Fetching: nothing to do, not cordoned, counted in progress in the fetch step.
    let p = run(&[upgraded(cp("cp-0")), mid.clone()], upgrade("v1.34.1"), policy.clone(), t(10));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.counts.in_progress, 1);
    assert_eq!(p.in_flight.iter().map(|f| f.step).collect::<Vec<_>>(), vec![Step::Fetch]);
    let released = |p: &Plan| p.actions.iter().any(|a| a.node == "w1" && a.kind == ActionKind::Release);
    // Another version asked for.
    let other = KubernetesSpec::Upgrade(KubernetesTarget {
        version: "v1.35.0".parse().unwrap(),
        components: COMPONENTS.into(),
        hash: HASH.into(),
        api_server: "v1.34.1".parse().unwrap(),
    });
    for n in [mid.clone(), fetched(node("w1"))] {
        assert!(released(&run(std::slice::from_ref(&n), other.clone(), policy.clone(), t(10))), "{n:?}");
        // The Kubernetes upgrade removed from the NodeVersion: the image flow releases it.
        let image_only = plan(std::slice::from_ref(&n), &[rollout_with(policy.clone())], None, t(10));
        assert!(released(&image_only.rollouts[0]), "{:?}", image_only.rollouts[0].actions);
        // No NodeVersion selects it.
        let orphan = NodeView { selected_by: vec![], ..n.clone() };
        assert!(released(&plan(&[orphan], &[], None, t(10)).unowned));
    }
}

/// A node fetched ahead (or still fetching) that comes to run the version by other means before its turn (replaced,
/// or upgraded by hand) is released, not drained for a turn it no longer needs.
#[test]
fn a_node_fetched_ahead_that_runs_the_version_already_takes_no_turn() {
    let policy = Policy::default();
    for n in [fetched(node("w1")), fetching(node("w1"), "f1", t(0))] {
        let p = run(&[upgraded(cp("cp-0")), upgraded(n)], upgrade("v1.34.1"), policy.clone(), t(10));
        let w1: Vec<&super::super::NodeAction> = p.actions.iter().filter(|a| a.node == "w1").collect();
        assert_eq!(w1.len(), 1, "{:?}", p.actions);
        assert_eq!((&w1[0].kind, w1[0].reason), (&ActionKind::Release, Reason::Recovered));
        assert!(!p.actions.iter().any(|a| a.starts_node()), "{:?}", p.actions);
        assert_eq!(p.counts.up_to_date, 2);
    }
}
