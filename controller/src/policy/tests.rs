//! Table tests of each transition, property tests of the invariants over arbitrary clusters, and a
//! seeded sequence test that drives whole rollouts through `plan` with simulated agents.

use super::*;
use jiff::SignedDuration;
use proptest::prelude::*;
use shared::protocol::{AgentReport, AgentState, BootId, ControllerAnnotations, Intent, Step, Token};

const TARGET: &str = "v2";
const OLD: &str = "v1";

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn boot(s: &str) -> BootId {
    BootId::parse("k", s).unwrap()
}

fn tok(s: &str) -> Token {
    Token::parse("k", s).unwrap()
}

fn node(name: &str) -> NodeView {
    NodeView {
        name: name.into(),
        control_plane: false,
        selected: true,
        ready: true,
        unschedulable: false,
        kubelet_boot_id: Some("b0".into()),
        controller: Ok(ControllerAnnotations::default()),
        agent: Ok(AgentReport {
            state: Some(AgentState::Idle),
            boot_id: Some(boot("b0")),
            os_image: Some(OLD.into()),
            ..Default::default()
        }),
        drain: DrainProgress::NotRunning,
    }
}

fn cp(name: &str) -> NodeView {
    NodeView { control_plane: true, ..node(name) }
}

fn with_intent(mut n: NodeView, step: Step, target: &str, token: &str, since: Timestamp) -> NodeView {
    let boot_id_before = (step == Step::Reboot).then(|| boot("b0"));
    let cordoned = matches!(step, Step::Drain | Step::Reboot);
    n.controller = Ok(ControllerAnnotations {
        intent: Some(Intent { step, target: target.into(), token: tok(token), since, boot_id_before, message: None }),
        cordoned_by_us: cordoned,
    });
    n.unschedulable = cordoned;
    n
}

fn with_report(mut n: NodeView, state: AgentState, token: &str) -> NodeView {
    if let Ok(a) = &mut n.agent {
        a.state = Some(state);
        a.token = Some(tok(token));
    }
    n
}

fn policy() -> Policy {
    Policy::default()
}

fn run(nodes: &[NodeView], policy: &Policy, now: Timestamp) -> Plan {
    plan(nodes, &Desired { target: Some(TARGET), policy: Ok(policy), own_node: None }, now)
}

fn kinds(plan: &Plan) -> Vec<(String, ActionKind)> {
    plan.actions.iter().map(|a| (a.node.clone(), a.kind.clone())).collect()
}

// ---- starting nodes ----

#[test]
fn an_outdated_cluster_starts_one_node_by_default() {
    let nodes = [node("w1"), node("w2"), node("w3")];
    let p = run(&nodes, &policy(), t(0));
    assert_eq!(kinds(&p), vec![("w1".into(), ActionKind::Stage { target: TARGET.into() })]);
    assert_eq!(p.counts, Counts { total: 3, outdated: 2, in_progress: 1, ..Default::default() });
}

#[test]
fn max_unavailable_counts_nodes_already_unavailable() {
    let mut pol = policy();
    pol.max_unavailable = budget::MaxUnavailable::Count(3);
    let mut down = node("w0");
    down.ready = false;
    let mut cordoned = node("w1");
    cordoned.unschedulable = true;
    let nodes = [down, cordoned, node("w2"), node("w3"), node("w4")];
    let p = run(&nodes, &pol, t(0));
    assert_eq!(kinds(&p), vec![("w2".into(), ActionKind::Stage { target: TARGET.into() })]);
}

#[test]
fn a_budget_taken_by_unavailable_nodes_says_which() {
    let mut down = node("w0");
    down.ready = false;
    let p = run(&[down, node("w1")], &policy(), t(0));
    assert!(p.actions.is_empty());
    let (reason, message) = p.hold.unwrap();
    assert_eq!(reason, Reason::UnavailableNodes);
    assert!(message.contains("w0 (NotReady)"), "{message}");
}

#[test]
fn percentages_resolve_against_the_selected_nodes() {
    let mut pol = policy();
    pol.max_unavailable = budget::MaxUnavailable::Percent(50);
    let mut nodes: Vec<NodeView> = (0..4).map(|i| node(&format!("w{i}"))).collect();
    nodes.push(NodeView { selected: false, ..node("other") });
    let p = run(&nodes, &pol, t(0));
    assert_eq!(p.actions.len(), 2);
    assert_eq!(p.counts.total, 4);
}

#[test]
fn control_plane_goes_first_and_alone() {
    let mut pol = policy();
    pol.max_unavailable = budget::MaxUnavailable::Count(10);
    let nodes = [cp("cp1"), cp("cp2"), node("w1")];
    let p = run(&nodes, &pol, t(0));
    assert_eq!(kinds(&p), vec![("cp1".into(), ActionKind::Stage { target: TARGET.into() })]);
    assert_eq!(p.hold.as_ref().map(|h| h.0), Some(Reason::WaitingForControlPlane));
    // With cp1 in flight, neither cp2 nor the worker starts.
    let nodes = [with_intent(cp("cp1"), Step::Stage, TARGET, "a", t(0)), cp("cp2"), node("w1")];
    assert!(run(&nodes, &pol, t(1)).actions.is_empty());
    // A control-plane node that is down for other reasons blocks the others too.
    let mut down = cp("cp1");
    down.ready = false;
    let nodes = [down, cp("cp2")];
    assert!(run(&nodes, &pol, t(1)).actions.is_empty());
}

#[test]
fn workers_start_once_the_control_plane_is_up_to_date() {
    let mut pol = policy();
    pol.max_unavailable = budget::MaxUnavailable::Count(2);
    let mut done = cp("cp1");
    if let Ok(a) = &mut done.agent {
        a.os_image = Some(TARGET.into());
    }
    let p = run(&[done, node("w1"), node("w2"), node("w3")], &pol, t(0));
    assert_eq!(p.actions.len(), 2);
    assert!(p.actions.iter().all(|a| a.node.starts_with('w')));
}

#[test]
fn ineligible_nodes_are_never_started() {
    let mut not_ready = node("a");
    not_ready.ready = false;
    let mut cordoned_by_admin = node("b");
    cordoned_by_admin.unschedulable = true;
    let mut no_agent = node("c");
    no_agent.agent = Ok(AgentReport::default());
    let mut malformed = node("d");
    malformed.controller = Err(shared::protocol::ProtocolError::Missing { key: "k", with: "w" });
    let mut pol = policy();
    pol.max_unavailable = budget::MaxUnavailable::Count(10);
    let p = run(&[not_ready, cordoned_by_admin, no_agent, malformed], &pol, t(0));
    assert_eq!(kinds(&p), vec![("d".into(), ActionKind::ReportProblem)]);
    assert_eq!(p.counts.blocked, 1);
}

#[test]
fn the_controllers_own_node_goes_last() {
    let nodes = [node("a"), node("b")];
    let pol = policy();
    let p = plan(&nodes, &Desired { target: Some(TARGET), policy: Ok(&pol), own_node: Some("a") }, t(0));
    assert_eq!(p.actions[0].node, "b");
}

// ---- gates ----

#[test]
fn gates_hold_new_nodes_but_let_in_flight_nodes_finish() {
    let in_flight = with_report(with_intent(node("a"), Step::Stage, TARGET, "s1", t(0)), AgentState::Done, "s1");
    let nodes = [in_flight, node("b")];
    let mut paused = policy();
    paused.paused = true;
    let p = run(&nodes, &paused, t(1));
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Cordon { target: TARGET.into() })]);
    assert_eq!(p.hold.unwrap().0, Reason::Paused);

    let mut windowed = policy();
    windowed.window = Some(window::Window {
        cron: cron::Cron::parse("0 3 * * *").unwrap(),
        duration: SignedDuration::from_hours(1),
        time_zone: jiff::tz::TimeZone::UTC,
        schedule: "0 3 * * *".into(),
        zone_name: "UTC".into(),
    });
    let noon: Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
    let p = plan(&[node("b")], &Desired { target: Some(TARGET), policy: Ok(&windowed), own_node: None }, noon);
    assert!(p.actions.is_empty());
    assert_eq!(p.hold.unwrap().0, Reason::OutsideMaintenanceWindow);
    assert_eq!(p.wake_at, Some("2026-11-22T03:00:00Z".parse().unwrap()));
    let three: Timestamp = "2026-11-22T03:10:00Z".parse().unwrap();
    let p = plan(&[node("b")], &Desired { target: Some(TARGET), policy: Ok(&windowed), own_node: None }, three);
    assert_eq!(p.actions.len(), 1);
}

#[test]
fn the_failure_budget_stops_new_nodes() {
    let mut failed = with_intent(node("a"), Step::Failed, TARGET, "x", t(0));
    failed.unschedulable = false;
    let p = run(&[failed.clone(), node("b")], &policy(), t(1));
    assert!(p.actions.is_empty());
    assert_eq!(p.hold.unwrap().0, Reason::FailureBudgetExhausted);
    let mut two = policy();
    two.failure_budget = 2;
    assert_eq!(run(&[failed, node("b")], &two, t(1)).actions.len(), 1);
}

#[test]
fn stop_on_drain_timeout_holds_the_rollout() {
    let mut blocked = with_intent(node("a"), Step::Blocked, TARGET, "x", t(0));
    blocked.unschedulable = false;
    let mut stop = policy();
    stop.on_drain_timeout = DrainTimeoutAction::Stop;
    let p = run(&[blocked.clone(), node("b")], &stop, t(1));
    assert_eq!(p.hold.unwrap().0, Reason::StoppedOnDrainTimeout);
    assert!(run(&[blocked, node("b")], &policy(), t(1)).actions.len() == 1);
}

#[test]
fn an_invalid_spec_starts_nothing_and_says_why() {
    let errors = vec!["rollout.maxUnavailable: bad".to_string()];
    let p = plan(&[node("a")], &Desired { target: Some(TARGET), policy: Err(&errors), own_node: None }, t(0));
    assert!(p.actions.is_empty());
    let (reason, message) = p.hold.unwrap();
    assert_eq!(reason, Reason::InvalidSpec);
    assert!(message.contains("rollout.maxUnavailable: bad"));
}

// ---- a node's steps ----

#[test]
fn staging_moves_on_to_cordon_and_drain_only_on_the_current_token() {
    let staging = with_intent(node("a"), Step::Stage, TARGET, "s2", t(0));
    let stale = with_report(staging.clone(), AgentState::Done, "s1");
    assert!(run(&[stale], &policy(), t(5)).actions.is_empty());
    let fresh = with_report(staging.clone(), AgentState::Done, "s2");
    assert_eq!(
        kinds(&run(&[fresh], &policy(), t(5))),
        vec![("a".into(), ActionKind::Cordon { target: TARGET.into() })]
    );
    let mut failed = with_report(staging, AgentState::Error, "s2");
    if let Ok(a) = &mut failed.agent {
        a.message = Some("sha256 mismatch".into());
    }
    let p = run(&[failed], &policy(), t(5));
    assert_eq!(p.actions[0].kind, ActionKind::Fail { target: TARGET.into() });
    assert!(p.actions[0].message.contains("sha256 mismatch"));
    assert!(p.failed[0].message.starts_with("StageFailed:"));
}

#[test]
fn staging_times_out() {
    let staging = with_intent(node("a"), Step::Stage, TARGET, "s", t(0));
    let p = run(std::slice::from_ref(&staging), &policy(), t(60));
    assert!(p.actions.is_empty());
    assert_eq!(p.wake_at, Some(t(30 * 60)));
    let p = run(&[staging], &policy(), t(30 * 60));
    assert_eq!(p.actions[0].reason, Reason::StageTimedOut);
}

#[test]
fn draining_reboots_once_drained_and_blocks_on_timeout_or_failure() {
    let draining = with_intent(node("a"), Step::Drain, TARGET, "d", t(0));
    let p = run(std::slice::from_ref(&draining), &policy(), t(1));
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::EnsureDrain)]);
    let drained = NodeView { drain: DrainProgress::Drained, ..draining.clone() };
    assert_eq!(
        kinds(&run(&[drained], &policy(), t(1))),
        vec![("a".into(), ActionKind::Reboot { target: TARGET.into(), boot_id_before: boot("b0") })]
    );
    let stuck = NodeView {
        drain: DrainProgress::Running { waiting_on: Some("pod web-0: PDB web".into()) },
        ..draining.clone()
    };
    let p = run(&[stuck], &policy(), t(600));
    assert_eq!(p.actions[0].kind, ActionKind::Block { target: TARGET.into() });
    assert_eq!(p.actions[0].reason, Reason::DrainTimedOut);
    assert!(p.actions[0].message.contains("pod web-0: PDB web"));
    let failed = NodeView { drain: DrainProgress::Failed { message: "pod x uses emptyDir".into() }, ..draining };
    assert_eq!(run(&[failed], &policy(), t(1)).actions[0].reason, Reason::DrainFailed);
}

#[test]
fn a_reboot_counts_only_when_ready_on_the_target_with_a_new_boot_id() {
    let rebooting = with_report(with_intent(node("a"), Step::Reboot, TARGET, "r", t(0)), AgentState::Done, "r");
    let with = |ready: bool, image: &str, agent_boot: &str, kubelet_boot: &str| {
        let mut n = rebooting.clone();
        n.ready = ready;
        n.kubelet_boot_id = Some(kubelet_boot.into());
        if let Ok(a) = &mut n.agent {
            a.os_image = Some(image.into());
            a.boot_id = Some(boot(agent_boot));
        }
        n
    };
    for (n, verified) in [
        (with(true, TARGET, "b1", "b1"), true),
        (with(false, TARGET, "b1", "b1"), false),
        (with(true, OLD, "b1", "b1"), false),
        (with(true, TARGET, "b0", "b0"), false),
        (with(true, TARGET, "b1", "b0"), false),
    ] {
        let p = run(&[n], &policy(), t(5));
        let completed = p.actions.iter().any(|a| matches!(a.kind, ActionKind::Complete { .. }));
        assert_eq!(completed, verified, "{:?}", p.actions);
    }
    let p = run(&[with(false, OLD, "b0", "b0")], &policy(), t(15 * 60));
    assert_eq!(p.actions[0].reason, Reason::RebootTimedOut);
}

#[test]
fn a_verified_node_soaks_in_its_slot() {
    let mut pol = policy();
    pol.soak_time = SignedDuration::from_secs(60);
    let mut done = with_intent(node("a"), Step::Done, TARGET, "x", t(0));
    done.unschedulable = false;
    if let Ok(c) = &mut done.controller {
        c.cordoned_by_us = false;
    }
    if let Ok(a) = &mut done.agent {
        a.os_image = Some(TARGET.into());
    }
    let p = run(&[done.clone(), node("b")], &pol, t(30));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.wake_at, Some(t(60)));
    assert_eq!(p.in_flight[0].step, "soak");
    let p = run(&[done, node("b")], &pol, t(60));
    assert_eq!(kinds(&p), vec![("b".into(), ActionKind::Stage { target: TARGET.into() })]);
}

#[test]
fn a_changed_target_releases_nodes_that_have_not_rebooted() {
    for step in [Step::Stage, Step::Drain] {
        let n = with_intent(node("a"), step, OLD, "x", t(0));
        let p = run(&[n], &policy(), t(1));
        assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Release)]);
        assert_eq!(p.actions[0].reason, Reason::TargetChanged);
    }
    // A reboot into the old target is verified against that target, then the node is outdated.
    let mut n = with_report(with_intent(node("a"), Step::Reboot, OLD, "r", t(0)), AgentState::Done, "r");
    n.kubelet_boot_id = Some("b1".into());
    if let Ok(a) = &mut n.agent {
        a.boot_id = Some(boot("b1"));
    }
    let p = run(&[n], &policy(), t(1));
    assert_eq!(p.actions[0].kind, ActionKind::Complete { target: OLD.into() });
    assert_eq!(p.counts.outdated, 1);
}

#[test]
fn leftover_cordons_are_removed_and_foreign_cordons_kept() {
    let mut leftover = node("a");
    leftover.unschedulable = true;
    leftover.controller = Ok(ControllerAnnotations { intent: None, cordoned_by_us: true });
    let mut foreign = node("b");
    foreign.unschedulable = true;
    let p = run(&[leftover, foreign], &policy(), t(0));
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Uncordon)]);
}

#[test]
fn nodes_leaving_the_selection_or_without_a_nodeversion_are_released() {
    let n = NodeView { selected: false, ..with_intent(node("a"), Step::Drain, TARGET, "x", t(0)) };
    assert_eq!(kinds(&run(&[n], &policy(), t(1))), vec![("a".into(), ActionKind::Release)]);
    let pol = policy();
    let n = with_intent(node("a"), Step::Stage, TARGET, "x", t(0));
    let p = plan(&[n], &Desired { target: None, policy: Ok(&pol), own_node: None }, t(1));
    assert_eq!(p.actions[0].reason, Reason::NoNodeVersion);
}

#[test]
fn nothing_to_update_means_no_action() {
    let mut n = node("a");
    if let Ok(a) = &mut n.agent {
        a.os_image = Some(TARGET.into());
    }
    let p = run(&[n.clone(), n], &policy(), t(0));
    assert!(p.actions.is_empty() && p.hold.is_none() && p.wake_at.is_none());
    assert_eq!(p.counts.up_to_date, 2);
}

// ---- invariants over arbitrary clusters ----

fn arb_node(i: usize) -> impl Strategy<Value = NodeView> {
    (
        any::<bool>(),
        prop::sample::select(vec![
            None,
            Some(Step::Stage),
            Some(Step::Drain),
            Some(Step::Reboot),
            Some(Step::Done),
            Some(Step::Failed),
            Some(Step::Blocked),
        ]),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::sample::select(vec![OLD, TARGET]),
        prop::sample::select(vec![OLD, TARGET]),
        prop::option::of(prop::sample::select(vec![AgentState::Busy, AgentState::Done, AgentState::Error])),
        0i64..4000,
        any::<bool>(),
    )
        .prop_map(
            move |(
                control_plane,
                step,
                ready,
                extra_cordon,
                selected,
                image,
                intent_target,
                report,
                since,
                drained,
            )| {
                let mut n = NodeView { control_plane, ready, selected, ..node(&format!("n{i:02}")) };
                if let Some(step) = step {
                    n = with_intent(n, step, intent_target, "tok", t(-since));
                }
                if let Some(state) = report {
                    n = with_report(n, state, "tok");
                }
                if let Ok(a) = &mut n.agent {
                    a.os_image = Some(image.into());
                }
                n.unschedulable |= extra_cordon;
                if drained {
                    n.drain = DrainProgress::Drained;
                }
                n
            },
        )
}

fn arb_cluster() -> impl Strategy<Value = Vec<NodeView>> {
    (1usize..16).prop_flat_map(|n| (0..n).map(arb_node).collect::<Vec<_>>())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn started_nodes_never_exceed_the_budget_or_the_control_plane_rule(
        nodes in arb_cluster(),
        max in 1u32..5,
    ) {
        let mut pol = policy();
        pol.max_unavailable = budget::MaxUnavailable::Count(max);
        pol.failure_budget = 100;
        let p = run(&nodes, &pol, t(0));
        let starts: Vec<&NodeAction> = p.actions.iter().filter(|a| matches!(a.kind, ActionKind::Stage { .. })).collect();
        let by_name = |name: &str| nodes.iter().find(|n| n.name == name).unwrap();
        for s in &starts {
            let n = by_name(&s.node);
            prop_assert!(n.selected && n.ready && !n.unschedulable, "started an ineligible node {}", n.name);
            prop_assert!(n.controller.as_ref().unwrap().intent.as_ref().is_none_or(|i| i.target != TARGET || matches!(i.step, Step::Done)));
        }
        if !starts.is_empty() {
            // Everything unavailable after the plan, started nodes included, fits the budget.
            let in_flight = p.in_flight.len() as u32;
            let other_unavailable = nodes.iter().filter(|n| {
                n.selected && (!n.ready || n.unschedulable) && !p.in_flight.iter().any(|f| f.node == n.name)
                    && !p.actions.iter().any(|a| a.node == n.name && matches!(a.kind, ActionKind::Complete{..} | ActionKind::Fail{..} | ActionKind::Block{..} | ActionKind::Release | ActionKind::Uncordon))
            }).count() as u32;
            prop_assert!(in_flight + other_unavailable <= max, "{in_flight} in flight + {other_unavailable} unavailable > {max}");
            let cp_starts = starts.iter().filter(|s| by_name(&s.node).control_plane).count();
            prop_assert!(cp_starts <= 1);
            if cp_starts == 1 {
                let cp_busy = p.in_flight.iter().filter(|f| by_name(&f.node).control_plane).count();
                prop_assert_eq!(cp_busy, 1, "a control-plane node started next to another");
            }
            let worker_starts = starts.len() - cp_starts;
            if worker_starts > 0 {
                // Failed and blocked control-plane nodes (before or by this plan) do not hold workers back;
                // the failure budget does.
                let failed_or_blocked = |n: &NodeView| {
                    p.failed.iter().chain(&p.blocked).any(|f| f.node == n.name)
                };
                prop_assert!(!nodes.iter().any(|n| n.selected && n.control_plane
                    && n.agent.as_ref().unwrap().os_image.as_deref() != Some(TARGET)
                    && !failed_or_blocked(n)),
                    "a worker started while a control-plane node is outdated");
            }
        }
    }

    #[test]
    fn every_counted_node_is_in_exactly_one_bucket(nodes in arb_cluster()) {
        let p = run(&nodes, &policy(), t(0));
        let c = p.counts;
        prop_assert_eq!(c.total, nodes.iter().filter(|n| n.selected).count() as u32);
        prop_assert_eq!(c.up_to_date + c.outdated + c.in_progress + c.failed + c.blocked, c.total);
        prop_assert_eq!(c.in_progress as usize, p.in_flight.len());
    }

    #[test]
    fn nodes_left_by_the_controller_are_uncordoned(nodes in arb_cluster()) {
        let p = run(&nodes, &policy(), t(0));
        for n in &nodes {
            let Ok(c) = &n.controller else { continue };
            let step = c.intent.as_ref().map(|i| i.step);
            let action = p.actions.iter().find(|a| a.node == n.name).map(|a| &a.kind);
            let keeps_working = matches!(step, Some(Step::Drain | Step::Reboot)) && !matches!(action, Some(ActionKind::Release | ActionKind::Fail{..} | ActionKind::Block{..} | ActionKind::Complete{..}));
            let cordons = matches!(action, Some(ActionKind::Cordon{..}));
            if c.cordoned_by_us && !keeps_working && !cordons {
                prop_assert!(
                    matches!(action, Some(ActionKind::Uncordon | ActionKind::Release | ActionKind::Fail{..} | ActionKind::Block{..} | ActionKind::Complete{..})),
                    "{} stays cordoned by us in step {:?} with action {:?}", n.name, step, action
                );
            }
        }
    }
}

// ---- whole rollouts in seeded random order ----

/// A tiny deterministic RNG (xorshift64*), so a failing seed replays exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// Applies an action the way the executor writes it.
fn apply(n: &mut NodeView, action: &NodeAction, now: Timestamp, token: &mut u64) {
    let c = n.controller.as_mut().unwrap();
    let mut fresh = || {
        *token += 1;
        Token::from_u64(*token)
    };
    let intent = |step, target: &str, token, boot_id_before, message: Option<String>| Intent {
        step,
        target: target.into(),
        token,
        since: now,
        boot_id_before,
        message,
    };
    let uncordon = |n: &mut NodeView| {
        if n.controller.as_ref().unwrap().cordoned_by_us {
            n.unschedulable = false;
            n.controller.as_mut().unwrap().cordoned_by_us = false;
        }
    };
    match &action.kind {
        ActionKind::Stage { target } => c.intent = Some(intent(Step::Stage, target, fresh(), None, None)),
        ActionKind::Cordon { target } => {
            c.intent = Some(intent(Step::Drain, target, fresh(), None, None));
            if !n.unschedulable {
                c.cordoned_by_us = true;
                n.unschedulable = true;
            }
        }
        ActionKind::EnsureDrain => {
            if n.drain == DrainProgress::NotRunning {
                n.drain = DrainProgress::Running { waiting_on: None };
            }
        }
        ActionKind::Reboot { target, boot_id_before } => {
            c.intent = Some(intent(Step::Reboot, target, fresh(), Some(boot_id_before.clone()), None));
            n.drain = DrainProgress::NotRunning;
        }
        ActionKind::Complete { target } | ActionKind::Fail { target } | ActionKind::Block { target } => {
            let step = match action.kind {
                ActionKind::Complete { .. } => Step::Done,
                ActionKind::Fail { .. } => Step::Failed,
                _ => Step::Blocked,
            };
            let message = (step != Step::Done).then(|| format!("{}: {}", action.reason, action.message));
            c.intent = Some(intent(step, target, fresh(), None, message));
            n.drain = DrainProgress::NotRunning;
            uncordon(n);
        }
        ActionKind::Release => {
            c.intent = None;
            n.drain = DrainProgress::NotRunning;
            uncordon(n);
        }
        ActionKind::Uncordon => uncordon(n),
        ActionKind::ReportProblem => {}
    }
}

/// What agents, drains and reboots do on their own, one random event at a time.
fn world_step(nodes: &mut [NodeView], rng: &mut Rng, fail_percent: u64, boots: &mut u64) {
    let i = (rng.next() % nodes.len() as u64) as usize;
    let n = &mut nodes[i];
    let Some(intent) = n.controller.as_ref().unwrap().intent.clone() else { return };
    let agent = n.agent.as_mut().unwrap();
    match intent.step {
        Step::Stage if agent.token.as_ref() != Some(&intent.token) => {
            agent.token = Some(intent.token.clone());
            agent.state = Some(if rng.chance(fail_percent) { AgentState::Error } else { AgentState::Done });
        }
        Step::Drain if matches!(n.drain, DrainProgress::Running { .. }) => n.drain = DrainProgress::Drained,
        Step::Reboot if n.ready && agent.token.as_ref() != Some(&intent.token) => n.ready = false,
        Step::Reboot if !n.ready => {
            *boots += 1;
            let new = format!("b{boots}");
            n.ready = true;
            n.kubelet_boot_id = Some(new.clone());
            agent.boot_id = Some(BootId::parse("k", &new).unwrap());
            agent.os_image = Some(intent.target.clone());
            agent.token = Some(intent.token.clone());
            agent.state = Some(AgentState::Done);
        }
        _ => {}
    }
}

fn rollout(seed: u64, max: u32, fail_percent: u64) -> (Vec<NodeView>, Plan) {
    let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut nodes: Vec<NodeView> =
        (0..3).map(|i| cp(&format!("cp{i}"))).chain((0..12).map(|i| node(&format!("w{i:02}")))).collect();
    let mut pol = policy();
    pol.max_unavailable = budget::MaxUnavailable::Count(max);
    pol.failure_budget = 100;
    let (mut token, mut boots, mut now) = (0u64, 0u64, t(0));
    for _ in 0..5000 {
        let p = run(&nodes, &pol, now);
        for action in &p.actions {
            let n = nodes.iter_mut().find(|n| n.name == action.node).unwrap();
            apply(n, action, now, &mut token);
        }
        // Invariants after the plan is applied.
        let disrupted: Vec<&NodeView> = nodes
            .iter()
            .filter(|n| {
                n.unschedulable
                    || !n.ready
                    || n.controller
                        .as_ref()
                        .unwrap()
                        .intent
                        .as_ref()
                        .is_some_and(|i| i.step.disrupts() || i.step == Step::Stage)
            })
            .collect();
        assert!(disrupted.len() as u32 <= max, "seed {seed}: {} nodes disrupted with max {max}", disrupted.len());
        assert!(
            disrupted.iter().filter(|n| n.control_plane).count() <= 1,
            "seed {seed}: two control-plane nodes disrupted"
        );
        let settled = p.counts.in_progress == 0 && p.counts.outdated == 0;
        if settled {
            return (nodes, p);
        }
        for _ in 0..(1 + rng.next() % 3) {
            world_step(&mut nodes, &mut rng, fail_percent, &mut boots);
        }
        now = now.checked_add(SignedDuration::from_secs(1)).unwrap();
    }
    panic!("seed {seed}: the rollout did not settle within 5000 steps");
}

#[test]
fn whole_rollouts_keep_every_invariant_in_any_order() {
    for seed in 0..40 {
        for max in [1, 3] {
            let (nodes, p) = rollout(seed, max, 0);
            assert_eq!(p.counts.up_to_date, 15, "seed {seed}");
            assert!(nodes.iter().all(|n| !n.unschedulable), "seed {seed}: a node left cordoned");
        }
    }
}

#[test]
fn rollouts_with_failing_agents_end_with_every_node_accounted_for_and_uncordoned() {
    for seed in 0..40 {
        let (nodes, p) = rollout(seed, 2, 20);
        assert_eq!(p.counts.up_to_date + p.counts.failed, 15, "seed {seed}: {:?}", p.counts);
        assert!(nodes.iter().all(|n| !n.unschedulable), "seed {seed}: a node left cordoned");
    }
}
