//! Table tests of each rule and transition, and property tests of the invariants over arbitrary
//! clusters. Whole rollouts are in `simulation.rs`.

use super::*;
use jiff::SignedDuration;
use proptest::prelude::*;
use shared::crd::DrainTimeoutAction;
use shared::protocol::{AgentReport, AgentState, BootId, ControllerAnnotations, Intent, OursUnreadable, Step, Token};

pub(super) const TARGET: &str = "v2";
pub(super) const OLD: &str = "v1";

pub(super) fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

pub(super) fn boot(s: &str) -> BootId {
    BootId::parse("k", s).unwrap()
}

fn tok(s: &str) -> Token {
    Token::parse("k", s).unwrap()
}

/// A Ready, schedulable worker on the old image, selected by the first rollout, whose agent has
/// reported.
pub(super) fn node(name: &str) -> NodeView {
    NodeView {
        name: name.into(),
        control_plane: false,
        selected_by: vec![0],
        opted_in: true,
        ready: true,
        unschedulable: false,
        kubelet_boot_id: Some("b0".into()),
        kubelet_version: Some("v1.33.0".into()),
        controller: Ok(ControllerAnnotations::default()),
        agent: Ok(AgentReport {
            state: Some(AgentState::Idle),
            boot_id: Some(boot("b0")),
            os_image: Some(OLD.into()),
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

pub(super) fn cp(name: &str) -> NodeView {
    NodeView { control_plane: true, ..node(name) }
}

pub(super) fn with_intent(mut n: NodeView, step: Step, target: &str, token: &str, since: Timestamp) -> NodeView {
    let boot_id_before = (step == Step::Reboot).then(|| boot("b0"));
    let cordoned = matches!(step, Step::Drain | Step::Reboot);
    n.controller = Ok(ControllerAnnotations {
        intent: Some(Intent {
            step,
            target: target.into(),
            token: tok(token),
            since,
            boot_id_before,
            kubeadm: None,
            message: None,
        }),
        cordoned_by_us: cordoned,
    });
    n.unschedulable = cordoned;
    n
}

pub(super) fn with_report(mut n: NodeView, state: AgentState, token: &str) -> NodeView {
    if let Ok(a) = &mut n.agent {
        a.state = Some(state);
        a.token = Some(tok(token));
    }
    n
}

fn on_image(mut n: NodeView, image: &str) -> NodeView {
    if let Ok(a) = &mut n.agent {
        a.os_image = Some(image.into());
    }
    n
}

fn policy() -> Policy {
    Policy::default()
}

pub(super) fn valid_spec(target: &str, generation: i64, policy: Policy) -> Arc<ValidSpec> {
    Arc::new(ValidSpec { generation, target: target.into(), policy, raw: serde_json::json!({"image": target}) })
}

pub(super) fn rollout_with(policy: Policy) -> Rollout {
    Rollout::new("nv", SpecState::Valid(valid_spec(TARGET, 1, policy)), None)
}

pub(super) fn rollout_named(name: &str) -> Rollout {
    Rollout::new(name, SpecState::Valid(valid_spec(TARGET, 1, policy())), None)
}

pub(super) fn unknown_rollout(name: &str) -> Rollout {
    Rollout::new(name, SpecState::Invalid { errors: vec!["spec.image: bad".into()], last_valid: None }, None)
}

/// The plan of the only rollout, `policy` for `TARGET`.
fn run(nodes: &[NodeView], policy: &Policy, now: Timestamp) -> Plan {
    plan(nodes, &[rollout_with(policy.clone())], None, now).rollouts.remove(0)
}

fn kinds(plan: &Plan) -> Vec<(String, ActionKind)> {
    plan.actions.iter().map(|a| (a.node.clone(), a.kind.clone())).collect()
}

fn stage(name: &str) -> (String, ActionKind) {
    (name.into(), ActionKind::Stage { target: TARGET.into() })
}

/// Staged ahead of its turn: `intent=stage` for the target, its agent done. Its turn (the drain) is under the budget.
pub(super) fn staged(n: NodeView) -> NodeView {
    with_report(with_intent(n, Step::Stage, TARGET, "s0", t(0)), AgentState::Done, "s0")
}

fn drain(name: &str) -> (String, ActionKind) {
    (name.into(), ActionKind::Drain { target: TARGET.into() })
}

fn max(n: u32) -> Policy {
    Policy { max_unavailable: budget::MaxUnavailable::Count(n), ..policy() }
}

// ---- starting nodes ----

#[test]
fn a_node_a_node_operation_works_on_is_held_and_left_alone() {
    let op = Some("default/op@u1".to_owned());
    // Cordoned by the NodeOp, with its reboot intent: the rollout neither verifies, releases nor uncordons it.
    let rebooting = NodeView { operation: op.clone(), ..with_intent(node("w1"), Step::Reboot, OLD, "k1", t(0)) };
    let nodes = [rebooting, staged(node("w2")), staged(node("w3"))];
    let p = run(&nodes, &max(2), t(0));
    assert_eq!(kinds(&p), vec![drain("w2")], "the cordoned node takes one of the two slots");
    assert_eq!(p.held.len(), 1);
    assert_eq!(p.held[0].node, "w1");
    assert_eq!(p.held[0].hold.reason, Reason::NodeOperation);
    // A control-plane node under a NodeOp keeps every other control-plane node from starting.
    let cp_busy = NodeView { operation: op, ..cp("cp1") };
    let p = run(&[cp_busy, staged(cp("cp2"))], &max(2), t(0));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    // Nobody's node: no release of the NodeOp's intent, no uncordon.
    let unowned = NodeView {
        selected_by: vec![],
        operation: Some("default/op@u1".into()),
        ..with_intent(node("w9"), Step::Reboot, OLD, "k1", t(0))
    };
    let p = plan(&[unowned], &[rollout_with(policy())], None, t(0));
    assert!(p.unowned.actions.is_empty(), "{:?}", p.unowned.actions);
}

#[test]
fn a_node_under_a_node_operation_takes_a_slot_even_before_it_is_cordoned() {
    // Marked by a NodeOp, still schedulable and Ready: the NodeOp may cordon, drain or reboot it at any moment.
    let marked = NodeView { operation: Some("default/op@u1".into()), ..node("w1") };
    let p = run(&[marked, staged(node("w2")), staged(node("w3"))], &max(2), t(0));
    assert_eq!(kinds(&p), vec![drain("w2")], "one of the two slots is the NodeOp's");
}

#[test]
fn budgets_tell_a_node_operation_what_each_rollout_with_work_to_do_leaves() {
    let up = |n: NodeView| on_image(n, TARGET);
    let cordoned = NodeView { unschedulable: true, ..node("w2") };
    // w1..w3 outdated, one cordoned: the rollout allows 2 and 1 is out.
    let nodes = [node("w1"), cordoned.clone(), node("w3"), NodeView { selected_by: vec![], ..node("u1") }];
    let rollouts = [rollout_with(max(2))];
    let mut b = budgets(&nodes, &rollouts, &Fleet::default(), t(0));
    assert_eq!(b.room("w1"), Ok(()));
    assert_eq!(b.room("w2"), Ok(()), "out already: it takes no further slot");
    b.take("w1");
    let full = Err("the rollout of NodeVersion nv allows 2 node(s) out at once (maxUnavailable) and 2 are out".into());
    assert_eq!(b.room("w3"), full);
    // A node no NodeVersion selects counts in every budget (as the rollouts count it).
    assert_eq!(b.room("u1"), full);
    // The same nodes, all up to date: the rollout has nothing to do and constrains nothing.
    let done = [up(node("w1")), up(cordoned), up(node("w3"))];
    let mut b = budgets(&done, &rollouts, &Fleet::default(), t(0));
    b.take("w1");
    assert_eq!(b.room("w3"), Ok(()));
}

/// The plan counts a node whose verification it writes as free (the executor writes that before any start); a
/// NodeOp deciding before the write counts it out, or it would be one node over the budget until the write.
#[test]
fn budgets_count_a_node_out_until_the_write_that_frees_it_is_made() {
    let rebooting = with_intent(node("w1"), Step::Reboot, TARGET, "r", t(0));
    let mut rebooted = on_image(with_report(rebooting, AgentState::Done, "r"), TARGET);
    rebooted.kubelet_boot_id = Some("b1".into());
    if let Ok(a) = &mut rebooted.agent {
        a.boot_id = Some(boot("b1"));
    }
    let nodes = [rebooted.clone(), staged(node("w2")), node("w3")];
    let p = run(&nodes, &max(1), t(5));
    let verified =
        |p: &Plan, n: &str| p.actions.iter().any(|a| a.node == n && matches!(a.kind, ActionKind::Done { .. }));
    assert!(verified(&p, "w1"), "{:?}", p.actions);
    assert_eq!(kinds(&p)[1..], [drain("w2")], "the plan's own start takes the slot the verification frees");
    let b = budgets(&nodes, &[rollout_with(max(1))], &Fleet::default(), t(5));
    let full = "the rollout of NodeVersion nv allows 1 node(s) out at once (maxUnavailable) and 1 are out";
    assert_eq!(b.room("w3"), Err(full.into()));
    // Once written (uncordoned, `done`), the slot is free.
    let mut written = with_intent(rebooted.clone(), Step::Done, TARGET, "r", t(5));
    written.unschedulable = false;
    if let Ok(c) = &mut written.controller {
        c.cordoned_by_us = false;
    }
    let b = budgets(&[written, staged(node("w2")), node("w3")], &[rollout_with(max(1))], &Fleet::default(), t(6));
    assert_eq!(b.room("w3"), Ok(()));
    // A control-plane node verified but not written yet keeps the other control-plane nodes waiting.
    let nodes = [NodeView { control_plane: true, ..rebooted }, cp("c2"), node("w3")];
    let b = budgets(&nodes, &[rollout_with(max(2))], &Fleet::default(), t(5));
    let busy = b.control_plane_busy("default/op@u1").unwrap_or_default();
    assert!(busy.contains("control-plane node w1 is busy"), "{busy}");
}

#[test]
fn budgets_tell_a_node_operation_each_zones_share_as_the_rollout_counts_it() {
    let in_zone = |n: NodeView, zone: &str| NodeView { zone: Some(zone.into()), ..n };
    let cordoned = NodeView { unschedulable: true, ..node("w1") };
    let nodes = [in_zone(cordoned, "zone-a"), in_zone(node("w2"), "zone-a"), in_zone(node("w3"), "zone-b")];
    let per_zone = Policy { max_unavailable_per_zone: Some(1), ..max(3) };
    let mut b = budgets(&nodes, &[rollout_with(per_zone)], &Fleet::default(), t(0));
    // w1 is out in zone-a: w2 may not go, w3 (zone-b) may; once it is taken, zone-b is full too.
    let full_a = "the rollout of NodeVersion nv allows 1 node(s) of zone zone-a out at once (maxUnavailablePerZone) \
                  and 1 are out";
    assert_eq!(b.room("w2"), Err(full_a.into()));
    assert_eq!(b.room("w3"), Ok(()));
    b.take("w3");
    assert!(b.room("w3").is_ok(), "out already: it takes no further slot");
    let mut other = budgets(&nodes, &[rollout_with(max(3))], &Fleet::default(), t(0));
    assert_eq!(other.room("w2"), Ok(()), "no share per zone: the budget alone");
    other.take("w2");
}

#[test]
fn an_outdated_cluster_starts_one_node_by_default() {
    let nodes = [node("w1"), node("w2"), node("w3")];
    let p = run(&nodes, &policy(), t(0));
    assert_eq!(kinds(&p), vec![stage("w1")]);
    assert_eq!(p.counts, Counts { total: 3, outdated: 2, in_progress: 1, ..Default::default() });
}

#[test]
fn max_unavailable_counts_nodes_already_unavailable() {
    let mut down = node("w0");
    down.ready = false;
    let mut cordoned = node("w1");
    cordoned.unschedulable = true;
    let nodes = [down, cordoned, staged(node("w2")), staged(node("w3")), staged(node("w4"))];
    let p = run(&nodes, &max(3), t(0));
    assert_eq!(kinds(&p), vec![drain("w2")]);
}

#[test]
fn a_budget_taken_by_unavailable_nodes_says_which() {
    let mut down = node("w0");
    down.ready = false;
    let p = run(&[down, staged(node("w1"))], &policy(), t(0));
    assert!(p.actions.is_empty());
    let hold = p.hold.unwrap();
    assert_eq!(hold.reason, Reason::UnavailableNodes);
    assert!(hold.message.contains("w0 (NotReady)"), "{}", hold.message);
}

#[test]
fn percentages_resolve_against_the_nodes_the_rollout_manages() {
    let pol = Policy { max_unavailable: budget::MaxUnavailable::Percent(50), ..policy() };
    let mut nodes: Vec<NodeView> = (0..4).map(|i| node(&format!("w{i}"))).collect();
    nodes.push(NodeView { selected_by: vec![], ..node("other") });
    let p = run(&nodes, &pol, t(0));
    assert_eq!(p.actions.len(), 2);
    assert_eq!(p.counts.total, 4);
}

#[test]
fn control_plane_goes_first_and_alone() {
    let nodes = [staged(cp("cp1")), staged(cp("cp2")), staged(node("w1"))];
    let p = run(&nodes, &max(10), t(0));
    assert_eq!(kinds(&p), vec![drain("cp1")]);
    assert_eq!(p.hold.as_ref().map(|h| h.reason), Some(Reason::WaitingForControlPlane));
    // With cp1 in flight, neither cp2 nor the worker is drained.
    let nodes = [with_intent(cp("cp1"), Step::Drain, TARGET, "a", t(0)), staged(cp("cp2")), staged(node("w1"))];
    let p = run(&nodes, &max(10), t(1));
    assert!(p.actions.iter().all(|a| a.node == "cp1"), "{:?}", p.actions);
    // A control-plane node that is down for other reasons blocks the others too.
    let mut down = cp("cp1");
    down.ready = false;
    assert!(run(&[down, staged(cp("cp2"))], &max(10), t(1)).actions.is_empty());
}

/// Staging does not disrupt a node: the next nodes stage ahead of their turn, outside maxUnavailable and within
/// maxStaging (default: maxUnavailable), workers too while the control plane is updated; a staged node is
/// drained only when the budget and the control-plane rules let it.
#[test]
fn nodes_stage_ahead_outside_the_budget_within_max_staging() {
    let nodes = [cp("cp1"), cp("cp2"), node("w1"), node("w2")];
    let p = run(&nodes, &max(2), t(0));
    assert_eq!(kinds(&p), vec![stage("cp1"), stage("cp2")], "maxStaging defaults to maxUnavailable");
    let wide = Policy { max_staging: Some(budget::MaxUnavailable::Count(3)), ..max(1) };
    let p = run(&nodes, &wide, t(0));
    assert_eq!(kinds(&p), vec![stage("cp1"), stage("cp2"), stage("w1")]);
    assert_eq!(p.counts.in_progress, 3);
    // Staging counts no slot: with cp1 draining (the one slot of maxUnavailable 1), the others still stage.
    let nodes = [with_intent(cp("cp1"), Step::Drain, TARGET, "d", t(0)), cp("cp2"), node("w1"), node("w2")];
    let p = run(&nodes, &wide, t(1));
    assert_eq!(kinds(&p), vec![("cp1".into(), ActionKind::KeepDraining), stage("cp2"), stage("w1"), stage("w2")]);
    // Staged nodes wait for their turn, uncordoned, and are drained in order as slots free up.
    let nodes = [on_image(cp("cp1"), TARGET), staged(cp("cp2")), staged(node("w1")), staged(node("w2"))];
    let p = run(&nodes, &wide, t(2));
    assert_eq!(kinds(&p), vec![drain("cp2")]);
    let waiting = p.in_flight.iter().find(|f| f.node == "w1").expect("w1 is listed");
    assert_eq!(waiting.step, Step::Stage);
    assert!(waiting.waiting_on.as_deref().is_some_and(|w| w.contains("its turn")), "{waiting:?}");
    // Turns go in start order whatever the jitter of staging: w2, staged, waits for w1, still staging; unless w1
    // is NotReady (it might never finish staging).
    let staging = with_intent(node("w1"), Step::Stage, TARGET, "s1", t(2));
    let p = run(&[staging.clone(), staged(node("w2"))], &max(2), t(3));
    assert!(p.actions.iter().all(|a| !a.starts_node()), "{:?}", p.actions);
    let down = NodeView { ready: false, ..staging };
    let p = run(&[down, staged(node("w2"))], &max(2), t(3));
    assert_eq!(kinds(&p), vec![drain("w2")]);
    // maxStaging is never exceeded: two staged nodes take the two places.
    let narrow = Policy { max_staging: Some(budget::MaxUnavailable::Count(2)), ..max(1) };
    let nodes = [staged(node("w1")), staged(node("w2")), node("w3"), node("w4")];
    let p = run(&nodes, &narrow, t(3));
    assert_eq!(kinds(&p), vec![drain("w1")]);
}

/// Workers wait for the control plane (rule 9), so they never take the slots of maxStaging a control-plane node still
/// needs: otherwise, after a target change while a control-plane node rebooted into the old target, the workers
/// staged ahead would each wait for that node, and that node for a slot, for ever.
#[test]
fn workers_staged_ahead_leave_the_control_plane_its_slots_of_max_staging() {
    // cp1 finishes its reboot into the image of before the target changed: one of the two slots stays its.
    let rebooting = with_intent(cp("cp1"), Step::Reboot, "v9", "r", t(0));
    let p = run(&[rebooting, node("w1"), node("w2")], &max(2), t(1));
    assert_eq!(kinds(&p), vec![stage("w1")]);
    // A control-plane node held back keeps its slot too.
    let down = NodeView { ready: false, ..cp("cp1") };
    let p = run(&[down, node("w1"), node("w2")], &max(2), t(1));
    assert_eq!(kinds(&p), vec![stage("w1")]);
    // Nothing changes for a control-plane node that can stage now, nor once it is staged: it takes its slot first.
    let p = run(&[cp("cp1"), node("w1"), node("w2")], &max(2), t(1));
    assert_eq!(kinds(&p), vec![stage("cp1"), stage("w1")]);
    let p = run(&[staged(cp("cp1")), staged(node("w1")), node("w2")], &max(2), t(1));
    assert_eq!(kinds(&p), vec![drain("cp1")]);

    // cp1 verified on the old image while workers staged ahead hold both slots (as a controller without this rule
    // left them): the last worker yields its slot, and the next round stages cp1 in it.
    let verified =
        on_image(with_report(with_intent(cp("cp1"), Step::Done, "v9", "d", t(0)), AgentState::Done, "r"), "v9");
    let verified = NodeView { unschedulable: false, ..verified };
    let p = run(&[verified.clone(), staged(node("w1")), staged(node("w2"))], &max(2), t(2));
    assert_eq!(kinds(&p), vec![("w2".into(), ActionKind::Release)]);
    assert_eq!(p.actions[0].reason, Reason::StagingSlotYielded);
    assert_eq!(p.hold.as_ref().map(|h| h.reason), Some(Reason::WaitingForControlPlane));
    assert_eq!((p.counts.outdated, p.counts.in_progress, p.staged), (2, 1, 1), "{:?}", p.counts);
    assert_eq!(p.in_flight.iter().map(|f| f.node.as_str()).collect::<Vec<_>>(), ["w1"]);
    // The staged worker says what its turn waits for: the control plane, not a slot.
    let waiting = p.in_flight[0].waiting_on.as_deref().unwrap_or_default();
    assert_eq!(waiting, "its turn: staged, workers wait until every control-plane node runs v2");
    let p = run(&[verified, staged(node("w1")), node("w2")], &max(2), t(3));
    assert_eq!(kinds(&p), vec![("cp1".into(), ActionKind::Stage { target: TARGET.into() })]);
}

#[test]
fn workers_start_once_the_control_plane_is_up_to_date() {
    let done = on_image(cp("cp1"), TARGET);
    let p = run(&[done.clone(), staged(node("w1")), staged(node("w2")), staged(node("w3"))], &max(2), t(0));
    assert_eq!(kinds(&p), vec![drain("w1"), drain("w2")]);
}

#[test]
fn ineligible_nodes_are_never_started_and_each_says_why() {
    let mut not_ready = node("a");
    not_ready.ready = false;
    let mut cordoned_by_admin = node("b");
    cordoned_by_admin.unschedulable = true;
    let mut no_agent = node("c");
    no_agent.agent = Ok(AgentReport::default());
    let mut malformed = node("d");
    malformed.controller = Err(UnreadableKeys {
        error: ProtocolError::Missing { key: "k", with: "w" },
        intent_present: false,
        ours: None,
    });
    let p = run(&[not_ready, cordoned_by_admin, no_agent, malformed], &max(10), t(0));
    assert_eq!(kinds(&p), vec![("d".into(), ActionKind::Report)]);
    assert_eq!(p.counts.blocked, 1);
    let held: Vec<(&str, Reason)> = p.held.iter().map(|h| (h.node.as_str(), h.hold.reason)).collect();
    assert_eq!(held, vec![("a", Reason::NodeNotReady), ("b", Reason::CordonedByOther), ("c", Reason::NoAgentReport)]);
    assert_eq!((p.counts.outdated, p.counts.held_back), (3, 3));
}

#[test]
fn a_node_marked_do_not_disrupt_is_held_whatever_its_step_and_the_next_node_takes_the_slot() {
    // Outdated, or staged ahead and waiting for its turn: neither is started while it is marked.
    let mut marked = node("a");
    marked.do_not_disrupt = Some("pod data/db-0 is annotated update.edgeless.systems/do-not-disrupt=true".into());
    let mut staged_marked = staged(node("b"));
    staged_marked.do_not_disrupt = Some("the Node is annotated karpenter.sh/do-not-disrupt=true".into());
    let p = run(&[marked.clone(), staged_marked, staged(node("c"))], &max(1), t(0));
    assert_eq!(kinds(&p), vec![drain("c")]);
    let held: Vec<(&str, Reason, &str)> =
        p.held.iter().map(|h| (h.node.as_str(), h.hold.reason, h.hold.message.as_str())).collect();
    assert_eq!(
        held,
        vec![("a", Reason::DoNotDisrupt, "pod data/db-0 is annotated update.edgeless.systems/do-not-disrupt=true")]
    );
    // The staged one says what its turn waits for.
    let b = p.in_flight.iter().find(|f| f.node == "b").unwrap();
    assert_eq!(
        b.waiting_on.as_deref(),
        Some("DoNotDisrupt: the Node is annotated karpenter.sh/do-not-disrupt=true"),
        "{:?}",
        p.in_flight
    );
    // Unmarked, it starts.
    marked.do_not_disrupt = None;
    assert_eq!(kinds(&run(&[marked], &max(1), t(0))), vec![("a".into(), ActionKind::Stage { target: TARGET.into() })]);
}

#[test]
fn nodes_start_zone_by_zone_and_never_more_than_max_unavailable_per_zone_in_one() {
    let in_zone = |n: NodeView, zone: &str| NodeView { zone: Some(zone.into()), ..n };
    // Zone by zone, by name within a zone: the zone decides before the name.
    let nodes = [in_zone(staged(node("a")), "zone-b"), in_zone(staged(node("b")), "zone-a")];
    assert_eq!(kinds(&run(&nodes, &max(1), t(0))), vec![drain("b")]);
    // Three slots, one per zone: the second node of zone-a waits, the other zones take the slots.
    let nodes = [
        in_zone(staged(node("n1")), "zone-a"),
        in_zone(staged(node("n2")), "zone-a"),
        in_zone(staged(node("n3")), "zone-b"),
        in_zone(staged(node("n4")), "zone-c"),
    ];
    let per_zone = Policy { max_unavailable_per_zone: Some(1), ..max(3) };
    assert_eq!(kinds(&run(&nodes, &per_zone, t(0))), vec![drain("n1"), drain("n3"), drain("n4")]);
    // Without the limit, the budget is taken in order.
    assert_eq!(kinds(&run(&nodes, &max(3), t(0))), vec![drain("n1"), drain("n2"), drain("n3")]);
    // A node deferred for a budget goes after the others of its zone, not after other zones.
    let mut deferred = nodes.clone();
    deferred[0].deferred = Some("PDB db/pg allows no disruption of pod db/pg-0".into());
    assert_eq!(kinds(&run(&deferred, &max(1), t(0))), vec![drain("n2")]);
    assert_eq!(kinds(&run(&deferred, &max(2), t(0))), vec![drain("n2"), drain("n1")]);
    // Alone in line, it starts.
    assert_eq!(kinds(&run(&deferred[..1], &max(1), t(0))), vec![drain("n1")]);
    // A node of zone-a draining already: zone-a is full.
    let draining = in_zone(with_intent(node("n0"), Step::Drain, TARGET, "d", t(0)), "zone-a");
    let mut busy = vec![draining];
    busy.extend(nodes.iter().cloned());
    let p = run(&busy, &per_zone, t(0));
    assert_eq!(
        kinds(&p).into_iter().filter(|(_, k)| matches!(k, ActionKind::Drain { .. })).collect::<Vec<_>>(),
        vec![drain("n3"), drain("n4")]
    );
    // Only zone-a is left, and a NotReady node of it takes its slot: held, naming the zone.
    let mut down = in_zone(node("n9"), "zone-a");
    down.ready = false;
    let p = run(&[down, nodes[0].clone(), nodes[1].clone()], &per_zone, t(0));
    assert_eq!(kinds(&p), vec![]);
    let hold = p.hold.expect("a hold");
    assert_eq!(hold.reason, Reason::ZoneUnavailable);
    assert_eq!(
        hold.message,
        "maxUnavailablePerZone (1) is taken in zone(s) zone-a by nodes unavailable for other reasons"
    );
}

#[test]
fn a_held_back_control_plane_node_is_named_in_the_workers_hold() {
    // The reproduced stall: a control-plane node whose agent never reported blocked every worker
    // without being named.
    let mut agentless = cp("cp0");
    agentless.agent = Ok(AgentReport::default());
    let p = run(&[agentless, staged(node("w1")), staged(node("w2"))], &max(2), t(0));
    assert!(p.actions.is_empty());
    let hold = p.hold.unwrap();
    assert_eq!(hold.reason, Reason::WaitingForControlPlane);
    assert!(hold.message.contains("cp0 (NoAgentReport"), "{}", hold.message);
    assert_eq!(p.held[0].node, "cp0");
}

#[test]
fn the_controllers_own_node_goes_last() {
    let p = plan(&[node("a"), node("b")], &[rollout_with(policy())], Some("a"), t(0));
    assert_eq!(p.rollouts[0].actions[0].node, "b");
}

// ---- gates ----

#[test]
fn gates_hold_new_nodes_but_let_in_flight_nodes_finish() {
    let in_flight = with_report(with_intent(node("a"), Step::Drain, TARGET, "d1", t(0)), AgentState::Done, "s1");
    let drained = NodeView { drain: DrainProgress::Drained, ..in_flight };
    let nodes = [drained, staged(node("b")), node("c")];
    let paused = Policy { paused: true, ..policy() };
    let p = run(&nodes, &paused, t(1));
    // The node in flight goes on; the staged one is not drained (its turn is a new disruption), nothing stages.
    assert_eq!(kinds(&p).len(), 1, "{:?}", p.actions);
    assert_eq!(p.actions[0].node, "a");
    assert!(matches!(p.actions[0].kind, ActionKind::Reboot { .. }));
    assert_eq!(p.hold.unwrap().reason, Reason::Paused);

    let windowed = Policy {
        windows: vec![window::Window {
            cron: cron::Cron::parse("0 3 * * *").unwrap(),
            duration: SignedDuration::from_hours(1),
            time_zone: jiff::tz::TimeZone::UTC,
            schedule: "0 3 * * *".into(),
            zone_name: "UTC".into(),
        }],
        ..policy()
    };
    let noon: Timestamp = "2026-11-21T12:00:00Z".parse().unwrap();
    let p = run(&[node("b")], &windowed, noon);
    assert!(p.actions.is_empty());
    assert_eq!(p.hold.unwrap().reason, Reason::OutsideMaintenanceWindow);
    assert_eq!(p.wake_at, Some("2026-11-22T03:00:00Z".parse().unwrap()));
    let three: Timestamp = "2026-11-22T03:10:00Z".parse().unwrap();
    let p = run(&[node("b")], &windowed, three);
    assert_eq!(p.actions.len(), 1);
    assert_eq!(p.wake_at, Some("2026-11-22T04:00:00Z".parse().unwrap()), "the window's end");
    // A freeze over the next window: held with its own reason until the first window after it.
    let frozen = Policy {
        exclusions: vec![window::Exclusion {
            name: "freeze".into(),
            start: "2026-11-22T00:00:00Z".parse().unwrap(),
            end: "2026-11-23T00:00:00Z".parse().unwrap(),
        }],
        ..windowed
    };
    let p = run(&[node("b")], &frozen, three);
    assert!(p.actions.is_empty());
    let hold = p.hold.unwrap();
    assert_eq!(hold.reason, Reason::MaintenanceExclusion);
    assert!(
        hold.message.starts_with("inside the maintenance exclusion \"freeze\" until 2026-11-23T00:00:00Z"),
        "{}",
        hold.message
    );
    assert_eq!(p.wake_at, Some("2026-11-23T03:00:00Z".parse().unwrap()));
}

#[test]
fn the_failure_budget_stops_new_nodes() {
    let mut failed = with_intent(node("a"), Step::Failed, TARGET, "x", t(0));
    failed.unschedulable = false;
    let p = run(&[failed.clone(), node("b")], &policy(), t(1));
    assert!(p.actions.is_empty());
    assert_eq!(p.hold.unwrap().reason, Reason::FailureBudgetExhausted);
    let two = Policy { failure_budget: 2, ..policy() };
    assert_eq!(run(&[failed, node("b")], &two, t(1)).actions.len(), 1);
}

#[test]
fn stop_on_drain_timeout_holds_the_rollout() {
    let mut blocked = with_intent(node("a"), Step::Blocked, TARGET, "x", t(0));
    blocked.unschedulable = false;
    let stop = Policy { on_drain_timeout: DrainTimeoutAction::Stop, ..policy() };
    let p = run(&[blocked.clone(), node("b")], &stop, t(1));
    assert_eq!(p.hold.unwrap().reason, Reason::StoppedOnDrainTimeout);
    assert_eq!(run(&[blocked, node("b")], &policy(), t(1)).actions.len(), 1);
}

// ---- invalid specs fail closed ----

/// An invalid generation after a valid one: the last valid spec's selector, timeouts and image.
fn invalid_after(last_valid: Policy) -> Rollout {
    Rollout::new(
        "nv",
        SpecState::Invalid {
            errors: vec!["spec.rollout.maintenanceWindow.schedule: bad".into()],
            last_valid: Some(valid_spec(TARGET, 4, last_valid)),
        },
        None,
    )
}

#[test]
fn an_invalid_spec_starts_nothing_and_names_the_field() {
    let p = plan(&[node("a")], &[invalid_after(policy())], None, t(0)).rollouts.remove(0);
    assert!(p.actions.is_empty());
    let hold = p.hold.unwrap();
    assert_eq!(hold.reason, Reason::InvalidSpec);
    assert!(hold.message.contains("spec.rollout.maintenanceWindow.schedule: bad"), "{}", hold.message);
    assert!(hold.message.contains("generation 4"), "{}", hold.message);
}

#[test]
fn an_invalid_spec_is_said_even_when_every_node_is_up_to_date() {
    let p = plan(&[on_image(node("a"), TARGET)], &[invalid_after(policy())], None, t(0)).rollouts.remove(0);
    assert_eq!(p.counts.up_to_date, 1);
    assert_eq!(p.hold.map(|h| h.reason), Some(Reason::InvalidSpec));
    // Other gates do not hold a rollout with nothing to do.
    let paused = Policy { paused: true, ..policy() };
    assert_eq!(run(&[on_image(node("a"), TARGET)], &paused, t(0)).hold, None);
}

#[test]
fn nodes_in_flight_finish_under_the_last_valid_spec_not_under_defaults() {
    // The last valid spec drains for an hour; the default would block the node after ten minutes.
    let last_valid = Policy { drain_timeout: SignedDuration::from_hours(1), ..policy() };
    let draining = with_intent(node("a"), Step::Drain, TARGET, "d", t(0));
    let p = plan(std::slice::from_ref(&draining), &[invalid_after(last_valid)], None, t(11 * 60)).rollouts.remove(0);
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::KeepDraining)]);
    assert_eq!(p.in_flight[0].step, Step::Drain);
    // ...and the drain that finishes moves on to the reboot.
    let drained = NodeView { drain: DrainProgress::Drained, ..draining };
    let p = plan(&[drained, node("b")], &[invalid_after(policy())], None, t(20)).rollouts.remove(0);
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Reboot { target: TARGET.into(), boot_id_before: boot("b0") })]);
}

#[test]
fn without_a_valid_spec_no_node_is_touched_not_even_a_node_in_flight() {
    // A node mid-drain that only the unknown selector might select is neither released nor
    // drained on; a reboot under way is still verified (it cannot be stopped).
    let draining = NodeView { selected_by: vec![], ..with_intent(node("a"), Step::Drain, TARGET, "d", t(0)) };
    let mut rebooted = with_report(with_intent(node("b"), Step::Reboot, TARGET, "r", t(0)), AgentState::Done, "r");
    rebooted = on_image(rebooted, TARGET);
    rebooted.selected_by = vec![];
    rebooted.kubelet_boot_id = Some("b1".into());
    if let Ok(a) = &mut rebooted.agent {
        a.boot_id = Some(boot("b1"));
    }
    let p = plan(&[draining, rebooted], &[unknown_rollout("nv")], None, t(5));
    assert_eq!(p.rollouts[0].hold.as_ref().map(|h| h.reason), Some(Reason::InvalidSpec));
    assert_eq!(p.rollouts[0].counts, Counts::default());
    assert_eq!(kinds(&p.unowned), vec![("b".into(), ActionKind::Done { target: TARGET.into() })]);
}

// ---- unreadable intents ----

pub(super) fn unreadable_intent(n: NodeView, step: Step, cordoned_by_us: bool) -> NodeView {
    NodeView {
        controller: Err(UnreadableKeys {
            error: ProtocolError::Malformed {
                key: shared::protocol::keys::INTENT_TARGET,
                value: "v2 ".into(),
                reason: "has leading or trailing white space",
            },
            intent_present: true,
            ours: Some(OursUnreadable { step, since: t(0), cordoned_by_us }),
        }),
        unschedulable: cordoned_by_us,
        ..n
    }
}

#[test]
fn an_unreadable_intent_of_ours_is_released_and_the_node_picked_again() {
    let p = run(&[unreadable_intent(node("a"), Step::Stage, false)], &policy(), t(1));
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Release)]);
    assert_eq!(p.actions[0].reason, Reason::UnreadableIntent);
    // Also when no NodeVersion selects it any more.
    let unselected = NodeView { selected_by: vec![], ..unreadable_intent(node("a"), Step::Drain, true) };
    let p = plan(&[unselected], &[rollout_with(policy())], None, t(1));
    assert_eq!(kinds(&p.unowned), vec![("a".into(), ActionKind::Release)]);
}

#[test]
fn the_reproduced_budget_break_cannot_happen() {
    // control-plane-0 held an unreadable intent; with maxUnavailable 2, three workers and the
    // control plane got intent=stage at once. Now the control-plane node is released first and no
    // worker starts while it is outdated.
    let nodes = [
        unreadable_intent(cp("control-plane-0"), Step::Stage, false),
        staged(node("w1")),
        staged(node("w2")),
        staged(node("w3")),
    ];
    let p = run(&nodes, &max(2), t(1));
    assert_eq!(kinds(&p), vec![("control-plane-0".into(), ActionKind::Release)]);
    assert_eq!(p.hold.map(|h| h.reason), Some(Reason::WaitingForControlPlane));
}

#[test]
fn a_node_with_garbage_in_its_intent_keeps_its_slot() {
    let mut garbage = node("a");
    garbage.controller = Err(UnreadableKeys {
        error: ProtocolError::UnknownValue { key: "intent", value: "explode".into(), expected: "stage, ..." },
        intent_present: true,
        ours: None,
    });
    let p = run(&[garbage.clone(), staged(node("b"))], &policy(), t(0));
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Report)]);
    let hold = p.hold.unwrap();
    assert_eq!(hold.reason, Reason::UnavailableNodes);
    assert!(hold.message.contains("a (unreadable intent)"), "{}", hold.message);
    assert_eq!(run(&[garbage, staged(node("b"))], &max(2), t(0)).actions.len(), 2);
}

// ---- several NodeVersions ----

#[test]
fn node_pools_roll_out_side_by_side_each_within_its_budget() {
    let rollouts = [rollout_named("pool-a"), rollout_named("pool-b")];
    let a = |name: &str| NodeView { selected_by: vec![0], ..node(name) };
    let b = |name: &str| NodeView { selected_by: vec![1], ..node(name) };
    let p = plan(&[a("a1"), a("a2"), b("b1"), b("b2")], &rollouts, None, t(0));
    assert_eq!(kinds(&p.rollouts[0]), vec![stage("a1")]);
    assert_eq!(kinds(&p.rollouts[1]), vec![stage("b1")]);
    assert_eq!(p.rollouts[1].counts.total, 2);
    // A control-plane node in flight in one pool keeps the other pool's control plane waiting.
    let busy = NodeView { selected_by: vec![0], ..with_intent(cp("cp-a"), Step::Drain, TARGET, "s", t(0)) };
    let p = plan(&[busy, NodeView { selected_by: vec![1], ..staged(cp("cp-b")) }], &rollouts, None, t(1));
    assert!(p.rollouts[1].actions.is_empty());
    // ... and says so: a rollout that does not move is never held silently (it was, when its only outdated node was
    // a control-plane node kept waiting by another rollout's).
    let hold = p.rollouts[1].hold.as_ref().expect("a hold");
    assert_eq!(hold.reason, Reason::WaitingForControlPlane);
    assert!(hold.message.contains("one at a time"), "{}", hold.message);
}

#[test]
fn the_newer_of_two_overlapping_nodeversions_holds_the_overlap_and_says_so() {
    let rollouts = [rollout_named("old"), rollout_named("new")];
    let both = NodeView { selected_by: vec![0, 1], ..node("shared") };
    let new_only = NodeView { selected_by: vec![1], ..node("x") };
    let p = plan(&[both, new_only], &rollouts, None, t(0));
    assert_eq!(kinds(&p.rollouts[0]), vec![stage("shared")]);
    assert_eq!(kinds(&p.rollouts[1]), vec![stage("x")]);
    assert_eq!(p.rollouts[1].overlap, vec![("shared".to_string(), "old".to_string())]);
    assert_eq!(p.rollouts[1].held[0].hold.reason, Reason::SelectorOverlap);
    assert_eq!(p.rollouts[1].counts.total, 2);
    assert!(p.rollouts[0].overlap.is_empty());
}

#[test]
fn an_opted_in_node_no_nodeversion_selects_is_named() {
    let lonely = NodeView { selected_by: vec![], ..node("lonely") };
    let other = NodeView { selected_by: vec![], opted_in: false, ..node("other") };
    let p = plan(&[lonely.clone(), other], &[rollout_with(policy())], None, t(0));
    let held: Vec<(&str, Reason)> = p.unowned.held.iter().map(|h| (h.node.as_str(), h.hold.reason)).collect();
    assert_eq!(held, vec![("lonely", Reason::NotSelected)]);
    // Without any NodeVersion there is nothing to be selected for.
    assert!(plan(&[lonely], &[], None, t(0)).unowned.held.is_empty());
}

// ---- a node's steps ----

#[test]
fn staging_moves_on_to_drain_only_on_the_current_token() {
    let staging = with_intent(node("a"), Step::Stage, TARGET, "s2", t(0));
    let stale = with_report(staging.clone(), AgentState::Done, "s1");
    assert!(run(&[stale], &policy(), t(5)).actions.is_empty());
    let fresh = with_report(staging.clone(), AgentState::Done, "s2");
    let p = run(&[fresh], &policy(), t(5));
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Drain { target: TARGET.into() })]);
    assert_eq!(p.actions[0].reason, Reason::DrainStarted);
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
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::KeepDraining)]);
    let drained = NodeView { drain: DrainProgress::Drained, ..draining.clone() };
    let p = run(&[drained], &policy(), t(1));
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Reboot { target: TARGET.into(), boot_id_before: boot("b0") })]);
    assert_eq!(p.actions[0].reason, Reason::RebootRequested);
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
fn checkpoints_label_the_node_wait_for_every_annotation_and_block_it_at_the_timeout() {
    use crate::checkpoint::{Checkpoint, Phase};
    let policy = Policy {
        before_reboot: vec!["ceph.io/noout".into()],
        after_reboot: vec!["ceph.io/healthy".into()],
        ..policy()
    };
    let at = |phase: Phase, waits: &str, pending: bool| Checkpoint {
        phase,
        since: t(10),
        waits: vec![waits.into()],
        pending: if pending { vec![waits.into()] } else { vec![] },
    };
    // Drained: labelled first, its intent and cordon kept.
    let drained = NodeView { drain: DrainProgress::Drained, ..with_intent(node("a"), Step::Drain, TARGET, "d", t(0)) };
    let p = run(std::slice::from_ref(&drained), &policy, t(10));
    let labelled = ActionKind::Checkpoint { phase: Phase::BeforeReboot, waits: vec!["ceph.io/noout".into()] };
    assert_eq!(kinds(&p), vec![("a".into(), labelled)]);
    assert_eq!(p.actions[0].reason, Reason::CheckpointRequested);
    // Labelled, the annotation not "true" yet: it waits in its slot, saying on what, until the timeout.
    let waiting = NodeView { checkpoint: Some(at(Phase::BeforeReboot, "ceph.io/noout", true)), ..drained.clone() };
    let p = run(std::slice::from_ref(&waiting), &policy, t(20));
    assert_eq!(kinds(&p), vec![]);
    assert_eq!(p.counts.in_progress, 1);
    assert_eq!(
        p.in_flight[0].waiting_on.as_deref(),
        Some("update.edgeless.systems/before-reboot: waiting for the annotation(s) \"ceph.io/noout\" to be \"true\"")
    );
    assert_eq!(p.wake_at, Some(t(10 + 30 * 60)));
    let p = run(std::slice::from_ref(&waiting), &policy, t(10 + 30 * 60));
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Block { target: TARGET.into() })]);
    assert_eq!(p.actions[0].reason, Reason::CheckpointTimedOut);
    // Every annotation "true": the reboot.
    let passed = NodeView { checkpoint: Some(at(Phase::BeforeReboot, "ceph.io/noout", false)), ..drained.clone() };
    let p = run(&[passed], &policy, t(20));
    assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Reboot { target: TARGET.into(), boot_id_before: boot("b0") })]);

    // Verified after the reboot: labelled for the after-reboot checkpoint before it is uncordoned.
    let mut rebooted =
        on_image(with_report(with_intent(node("a"), Step::Reboot, TARGET, "r", t(0)), AgentState::Done, "r"), TARGET);
    rebooted.kubelet_boot_id = Some("b1".into());
    if let Ok(a) = &mut rebooted.agent {
        a.boot_id = Some(boot("b1"));
    }
    let p = run(std::slice::from_ref(&rebooted), &policy, t(30));
    let labelled = ActionKind::Checkpoint { phase: Phase::AfterReboot, waits: vec!["ceph.io/healthy".into()] };
    assert_eq!(kinds(&p), vec![("a".into(), labelled)]);
    // A before-reboot label left over counts for nothing here.
    let stale = NodeView { checkpoint: Some(at(Phase::BeforeReboot, "ceph.io/noout", false)), ..rebooted.clone() };
    assert!(matches!(
        run(&[stale], &policy, t(30)).actions[0].kind,
        ActionKind::Checkpoint { phase: Phase::AfterReboot, .. }
    ));
    let waiting = NodeView { checkpoint: Some(at(Phase::AfterReboot, "ceph.io/healthy", true)), ..rebooted.clone() };
    assert_eq!(kinds(&run(&[waiting], &policy, t(40))), vec![]);
    let passed = NodeView { checkpoint: Some(at(Phase::AfterReboot, "ceph.io/healthy", false)), ..rebooted.clone() };
    assert_eq!(kinds(&run(&[passed], &policy, t(40))), vec![("a".into(), ActionKind::Done { target: TARGET.into() })]);
    // Without checkpoints, nothing changes.
    assert_eq!(
        kinds(&run(&[rebooted], &Policy::default(), t(40))),
        vec![("a".into(), ActionKind::Done { target: TARGET.into() })]
    );
}

#[test]
fn a_reboot_counts_only_when_ready_on_the_target_with_a_new_boot_id() {
    let rebooting = with_report(with_intent(node("a"), Step::Reboot, TARGET, "r", t(0)), AgentState::Done, "r");
    let with = |ready: bool, image: &str, agent_boot: &str, kubelet_boot: &str| {
        let mut n = on_image(rebooting.clone(), image);
        n.ready = ready;
        n.kubelet_boot_id = Some(kubelet_boot.into());
        if let Ok(a) = &mut n.agent {
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
        let verified_now = p.actions.iter().any(|a| matches!(a.kind, ActionKind::Done { .. }));
        assert_eq!(verified_now, verified, "{:?}", p.actions);
    }
    let p = run(&[with(false, OLD, "b0", "b0")], &policy(), t(15 * 60));
    assert_eq!(p.actions[0].reason, Reason::RebootTimedOut);
}

#[test]
fn a_verified_node_soaks_in_its_slot() {
    let pol = Policy { soak_time: SignedDuration::from_secs(60), ..policy() };
    let mut done = on_image(with_intent(node("a"), Step::Done, TARGET, "x", t(0)), TARGET);
    done.unschedulable = false;
    if let Ok(c) = &mut done.controller {
        c.cordoned_by_us = false;
    }
    let p = run(&[done.clone(), staged(node("b"))], &pol, t(30));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.wake_at, Some(t(60)));
    assert_eq!(p.in_flight[0].step, Step::Done);
    let p = run(&[done, staged(node("b"))], &pol, t(60));
    assert_eq!(kinds(&p), vec![drain("b")]);
}

#[test]
fn a_changed_target_releases_nodes_that_have_not_rebooted() {
    for step in [Step::Stage, Step::Drain] {
        let p = run(&[with_intent(node("a"), step, OLD, "x", t(0))], &policy(), t(1));
        assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Release)]);
        assert_eq!(p.actions[0].reason, Reason::TargetChanged);
    }
    // A reboot into the old target is verified against that target, then the node is outdated.
    let mut n = on_image(with_report(with_intent(node("a"), Step::Reboot, OLD, "r", t(0)), AgentState::Done, "r"), OLD);
    n.kubelet_boot_id = Some("b1".into());
    if let Ok(a) = &mut n.agent {
        a.boot_id = Some(boot("b1"));
    }
    let p = run(&[n], &policy(), t(1));
    assert_eq!(p.actions[0].kind, ActionKind::Done { target: OLD.into() });
    assert_eq!(p.counts.outdated, 1);
}

#[test]
fn a_failed_node_that_came_back_healthy_on_the_target_is_cleared() {
    for step in [Step::Failed, Step::Blocked] {
        let mut late = on_image(with_intent(node("a"), step, TARGET, "f", t(0)), TARGET);
        late.unschedulable = false;
        let p = run(std::slice::from_ref(&late), &policy(), t(1));
        assert_eq!(kinds(&p), vec![("a".into(), ActionKind::Release)]);
        assert_eq!(p.actions[0].reason, Reason::Recovered);
        assert_eq!((p.counts.up_to_date, p.counts.failed, p.counts.blocked), (1, 0, 0));
        // Not while it is NotReady, nor on another image.
        late.ready = false;
        assert!(run(&[late], &policy(), t(1)).actions.is_empty());
        let mut old = with_intent(node("a"), step, TARGET, "f", t(0));
        old.unschedulable = false;
        assert!(run(&[old], &policy(), t(1)).actions.is_empty());
    }
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
    let n = NodeView { selected_by: vec![], ..with_intent(node("a"), Step::Drain, TARGET, "x", t(0)) };
    let p = plan(std::slice::from_ref(&n), &[rollout_with(policy())], None, t(1));
    assert_eq!(kinds(&p.unowned), vec![("a".into(), ActionKind::Release)]);
    assert_eq!(p.unowned.actions[0].reason, Reason::NotSelected);
    let p = plan(&[n], &[], None, t(1));
    assert_eq!(p.unowned.actions[0].reason, Reason::NoNodeVersion);
}

#[test]
fn nothing_to_update_means_no_action() {
    let n = on_image(node("a"), TARGET);
    let p = run(&[n.clone(), n], &policy(), t(0));
    assert!(p.actions.is_empty() && p.hold.is_none() && p.wake_at.is_none());
    assert_eq!(p.counts.up_to_date, 2);
}

// ---- invariants over arbitrary clusters ----

fn arb_node(i: usize) -> impl Strategy<Value = NodeView> {
    (
        (any::<bool>(), any::<bool>(), any::<bool>(), any::<bool>(), 0u8..4),
        prop::sample::select(vec![
            None,
            Some(Step::Stage),
            Some(Step::Drain),
            Some(Step::Reboot),
            Some(Step::Done),
            Some(Step::Failed),
            Some(Step::Blocked),
        ]),
        prop::sample::select(vec![OLD, TARGET]),
        prop::sample::select(vec![OLD, TARGET]),
        prop::option::of(prop::sample::select(vec![AgentState::Busy, AgentState::Done, AgentState::Error])),
        0i64..4000,
        any::<bool>(),
    )
        .prop_map(
            move |(
                (control_plane, ready, extra_cordon, selected, unreadable),
                step,
                image,
                intent_target,
                report,
                since,
                drained,
            )| {
                let mut n = NodeView {
                    control_plane,
                    ready,
                    selected_by: if selected { vec![0] } else { vec![] },
                    ..node(&format!("n{i:02}"))
                };
                if let Some(step) = step {
                    n = with_intent(n, step, intent_target, "tok", t(-since));
                    // One node in four of those with an intent has one the controller cannot read.
                    if unreadable == 0 {
                        let cordoned = n.controller.as_ref().is_ok_and(|c| c.cordoned_by_us);
                        n = unreadable_intent(n, step, cordoned);
                    }
                }
                if let Some(state) = report {
                    n = with_report(n, state, "tok");
                }
                n = on_image(n, image);
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
        let pol = Policy { max_unavailable: budget::MaxUnavailable::Count(max), failure_budget: 100, ..policy() };
        let cluster = plan(&nodes, &[rollout_with(pol)], None, t(0));
        let p = &cluster.rollouts[0];
        // The starts that disrupt (a staged node's turn), and those that stage ahead.
        let starts: Vec<&NodeAction> =
            p.actions.iter().filter(|a| a.starts_node() && !matches!(a.kind, ActionKind::Stage { .. })).collect();
        let stages: Vec<&NodeAction> = p.actions.iter().filter(|a| matches!(a.kind, ActionKind::Stage { .. })).collect();
        let by_name = |name: &str| nodes.iter().find(|n| n.name == name).unwrap();
        let intent_of = |n: &NodeView| n.controller.as_ref().ok().and_then(|c| c.intent.clone());
        for s in &starts {
            let n = by_name(&s.node);
            prop_assert!(!n.selected_by.is_empty() && n.ready && !n.unschedulable, "drained an ineligible node {}", n.name);
            prop_assert!(intent_of(n).is_some_and(|i| i.target == TARGET && i.step == Step::Stage), "drained an unstaged node");
        }
        for s in &stages {
            let n = by_name(&s.node);
            prop_assert!(!n.selected_by.is_empty() && n.ready && !n.unschedulable, "staged an ineligible node {}", n.name);
            prop_assert!(intent_of(n).is_none_or(|i| i.target != TARGET || matches!(i.step, Step::Done)));
        }
        // maxStaging (here maxUnavailable) bounds the nodes in the stage step after the plan.
        let staging = p.in_flight.iter().filter(|f| f.step == Step::Stage).count() as u32;
        prop_assert!(stages.is_empty() || staging <= max, "{staging} staging > {max}");
        if !starts.is_empty() {
            // Everything unavailable after the plan, started nodes included, fits the budget;
            // so do the nodes nobody selects that still hold a slot. Nodes staging are not unavailable.
            let in_flight = p.in_flight.iter().filter(|f| f.step != Step::Stage).count() as u32;
            let other_unavailable = nodes.iter().filter(|n| {
                let counted = if n.selected_by.is_empty() {
                    // Still rebooting: neither verified nor failed by this plan.
                    let rebooting = n.controller.as_ref().is_ok_and(|c| c.intent.as_ref().is_some_and(|i| i.step == Step::Reboot));
                    rebooting && !cluster.unowned.actions.iter().any(|a| a.node == n.name)
                } else {
                    let released = p.actions.iter().any(|a| a.node == n.name && a.kind.uncordons());
                    let garbage = n.controller.as_ref().is_err_and(|u| u.intent_present && u.ours.is_none());
                    !n.ready || n.unschedulable && !released || garbage
                };
                counted && !p.in_flight.iter().any(|f| f.node == n.name && f.step != Step::Stage)
            }).count() as u32;
            prop_assert!(in_flight + other_unavailable <= max, "{in_flight} in flight + {other_unavailable} unavailable > {max}");
            let cp_starts = starts.iter().filter(|s| by_name(&s.node).control_plane).count();
            prop_assert!(cp_starts <= 1);
            if cp_starts == 1 {
                // Control-plane nodes staged ahead wait; only one is disrupted.
                let cp_busy =
                    p.in_flight.iter().filter(|f| by_name(&f.node).control_plane && f.step != Step::Stage).count();
                prop_assert_eq!(cp_busy, 1, "a control-plane node started next to another");
            }
            let worker_starts = starts.len() - cp_starts;
            if worker_starts > 0 {
                // Failed and blocked control-plane nodes (before or by this plan) do not hold workers back;
                // the failure budget does.
                let failed_or_blocked = |n: &NodeView| p.failed.iter().chain(&p.blocked).any(|f| f.node == n.name);
                prop_assert!(!nodes.iter().any(|n| !n.selected_by.is_empty() && n.control_plane
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
        prop_assert_eq!(c.total, nodes.iter().filter(|n| !n.selected_by.is_empty()).count() as u32);
        prop_assert_eq!(c.up_to_date + c.outdated + c.in_progress + c.failed + c.blocked, c.total);
        prop_assert_eq!(c.in_progress as usize, p.in_flight.len());
        prop_assert_eq!(c.held_back as usize, p.held.len());
        prop_assert!(c.held_back <= c.outdated);
    }

    #[test]
    fn an_outdated_node_that_is_not_started_has_a_reason(nodes in arb_cluster()) {
        let p = run(&nodes, &policy(), t(0));
        let started = p.actions.iter().filter(|a| matches!(a.kind, ActionKind::Stage { .. })).count();
        let acted_on = |name: &str| p.actions.iter().any(|a| a.node == name && a.kind.writes());
        if p.counts.outdated > 0 && started == 0 && p.hold.is_none() && p.counts.in_progress == 0 {
            // Each outdated node is held for its own reason or is acted on this round.
            for n in nodes.iter().filter(|n| !n.selected_by.is_empty()) {
                let outdated = n.agent.as_ref().is_ok_and(|a| a.os_image.as_deref() != Some(TARGET));
                let held = p.held.iter().any(|h| h.node == n.name);
                let problem = p.failed.iter().chain(&p.blocked).any(|f| f.node == n.name);
                prop_assert!(!outdated || held || problem || acted_on(&n.name), "{} stalls without a reason", n.name);
            }
        }
    }

    #[test]
    fn nodes_left_by_the_controller_are_uncordoned(nodes in arb_cluster()) {
        let p = plan(&nodes, &[rollout_with(policy())], None, t(0));
        let actions: Vec<&NodeAction> = p.rollouts[0].actions.iter().chain(&p.unowned.actions).collect();
        for n in &nodes {
            let Ok(c) = &n.controller else { continue };
            let step = c.intent.as_ref().map(|i| i.step);
            let action = actions.iter().find(|a| a.node == n.name).map(|a| &a.kind);
            let keeps_working = matches!(step, Some(Step::Drain | Step::Reboot)) && !action.is_some_and(ActionKind::uncordons);
            let cordons = matches!(action, Some(ActionKind::Drain { .. }));
            if c.cordoned_by_us && !keeps_working && !cordons {
                prop_assert!(
                    action.is_some_and(ActionKind::uncordons),
                    "{} stays cordoned by us in step {:?} with action {:?}", n.name, step, action
                );
            }
        }
    }
}

#[test]
fn one_control_plane_rule_names_every_busy_control_plane_node_for_the_node_operations() {
    let cp = |name: &str| NodeView { control_plane: true, ..node(name) };
    let rollouts = [rollout_with(max(3))];
    let draining = with_intent(cp("cp1"), Step::Drain, TARGET, "t1", t(0));
    let draining = NodeView { unschedulable: true, ..draining };
    let b = budgets(&[draining, cp("cp2"), node("w1")], &rollouts, &Fleet::default(), t(0));
    let why = b.control_plane_busy("default/op@u1").unwrap_or_default();
    assert!(why.contains("control-plane node cp1 is busy: a rollout works on it (step drain)"), "{why}");
    // A control-plane node no NodeVersion selects, NotReady: busy too (the rollouts wait for it as well).
    let unowned = NodeView { ready: false, selected_by: vec![], ..cp("cp3") };
    let b = budgets(&[unowned.clone(), cp("cp2")], &rollouts, &Fleet::default(), t(0));
    let why = b.control_plane_busy("default/op@u1").unwrap_or_default();
    assert!(why.contains("cp3 is busy: it is not Ready"), "{why}");
    // Without any rollout, the rule still holds.
    let b = budgets(&[unowned.clone(), cp("cp2")], &[], &Fleet::default(), t(0));
    assert!(b.control_plane_busy("default/op@u1").is_some());
    // A control-plane node staging ahead is not disrupted: it holds nobody.
    let staging = with_intent(cp("cp1"), Step::Stage, TARGET, "t1", t(0));
    let b = budgets(&[staging, cp("cp2")], &rollouts, &Fleet::default(), t(0));
    assert_eq!(b.control_plane_busy("default/op@u1"), None);
    // The rollouts keep to the same rule: a staged control-plane node's turn waits for the unowned NotReady one.
    let p = plan(&[unowned, staged(cp("cp2"))], &rollouts, None, t(0));
    assert!(p.rollouts[0].actions.is_empty(), "{:?}", p.rollouts[0].actions);
    assert_eq!(p.rollouts[0].hold.as_ref().map(|h| h.reason), Some(Reason::WaitingForControlPlane));
}
