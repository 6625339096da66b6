//! The rollback's rules ([`super`]): when it starts and with what record, what it moves and in which order, its own
//! failure budget, its end, and the status fields it keeps.

use super::*;
use crate::policy::tests::{OLD, TARGET, cp, node, t, valid_spec, with_intent};
use crate::policy::{ActionKind, NodeView, Plan, Policy, Reason, budget, plan};
use shared::crd::FailureAction;
use shared::protocol::Step;

fn on(mut n: NodeView, image: &str) -> NodeView {
    if let Ok(a) = &mut n.agent {
        a.os_image = Some(image.into());
    }
    n
}

/// Failed for `target`, uncordoned, still on the image it ran.
fn failed(n: NodeView, target: &str) -> NodeView {
    let mut n = with_intent(n, Step::Failed, target, "f0", t(0));
    n.unschedulable = false;
    if let Ok(c) = &mut n.controller {
        c.cordoned_by_us = false;
    }
    n
}

fn rolling_back(max: u32) -> Policy {
    Policy {
        on_failure: FailureAction::Rollback,
        max_unavailable: budget::MaxUnavailable::Count(max),
        max_staging: Some(budget::MaxUnavailable::Count(max)),
        ..Policy::default()
    }
}

fn status(last_complete: Option<&str>, rollback: Option<(&str, &str)>) -> NodeVersionStatus {
    NodeVersionStatus {
        last_complete_image: last_complete.map(str::to_owned),
        rollback: rollback.map(|(from, to)| RollbackStatus {
            from: from.into(),
            to: to.into(),
            since: MicroTime(t(0)),
        }),
        ..Default::default()
    }
}

fn rollout(policy: Policy, status: &NodeVersionStatus) -> Rollout {
    Rollout::new("nv", SpecState::Valid(valid_spec(TARGET, 1, policy)), Some(status))
}

fn run(nodes: &[NodeView], rollout: Rollout, now: jiff::Timestamp) -> Plan {
    plan(nodes, &[rollout], None, now).rollouts.remove(0)
}

fn started(p: &Plan) -> Vec<(String, ActionKind)> {
    p.actions.iter().map(|a| (a.node.clone(), a.kind.clone())).collect()
}

fn stage(name: &str, target: &str) -> (String, ActionKind) {
    (name.into(), ActionKind::Stage { target: target.into() })
}

/// Two workers updated to the target, one failed for it (still on the old image), one not reached.
fn after_a_failure() -> Vec<NodeView> {
    vec![on(node("w0"), TARGET), on(node("w1"), TARGET), failed(node("w2"), TARGET), node("w3")]
}

#[test]
fn a_spent_budget_rolls_back_to_the_last_complete_image_only_with_rollback_and_a_known_image() {
    let nodes = after_a_failure();
    // Rollback, v1 known: the rollback starts, nothing moves this round, the record is in the plan.
    let p = run(&nodes, rollout(rolling_back(1), &status(Some(OLD), None)), t(5));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let hold = p.hold.clone().unwrap();
    assert_eq!(hold.reason, Reason::RollbackStarted);
    assert!(hold.message.contains("go back to v1") && hold.message.contains("1 node(s) failed"), "{}", hold.message);
    assert_eq!(p.rollback_started, Some(Active { from: TARGET.into(), to: OLD.into(), since: t(5) }));
    // Stop (the default): today's hold, no record.
    let stop = Policy { on_failure: FailureAction::Stop, ..rolling_back(1) };
    let p = run(&nodes, rollout(stop, &status(Some(OLD), None)), t(5));
    assert_eq!((p.hold.unwrap().reason, p.rollback_started), (Reason::FailureBudgetExhausted, None));
    // Rollback without a known image, or with the target itself as the last complete one: Stop, saying why.
    for (last, why) in [(None, "no image every selected node ran is known"), (Some(TARGET), "is v2 itself")] {
        let p = run(&nodes, rollout(rolling_back(1), &status(last, None)), t(5));
        let hold = p.hold.unwrap();
        assert_eq!((hold.reason, p.rollback_started), (Reason::FailureBudgetExhausted, None));
        assert!(hold.message.contains(why), "{}", hold.message);
    }
    // The budget not spent: the rollout goes on.
    let two = Policy { failure_budget: 2, ..rolling_back(1) };
    let p = run(&nodes, rollout(two, &status(Some(OLD), None)), t(5));
    assert_eq!(started(&p), [stage("w3", TARGET)]);
    assert_eq!(p.rollback_started, None);
}

#[test]
fn the_last_node_failing_starts_the_rollback_though_nothing_else_is_outdated() {
    let nodes = vec![on(node("w0"), TARGET), failed(node("w1"), TARGET)];
    let p = run(&nodes, rollout(rolling_back(1), &status(Some(OLD), None)), t(5));
    assert_eq!(p.hold.unwrap().reason, Reason::RollbackStarted);
    assert!(p.rollback_started.is_some());
}

#[test]
fn an_earlier_gate_holds_the_rollback_too() {
    let paused = Policy { paused: true, ..rolling_back(1) };
    let p = run(&after_a_failure(), rollout(paused.clone(), &status(Some(OLD), None)), t(5));
    assert_eq!((p.hold.unwrap().reason, p.rollback_started), (Reason::Paused, None));
    // Recorded and paused: nothing moves back.
    let p = run(&after_a_failure(), rollout(paused, &status(Some(OLD), Some((TARGET, OLD)))), t(5));
    assert!(p.actions.is_empty());
    assert_eq!(p.hold.unwrap().reason, Reason::Paused);
}

#[test]
fn a_recorded_rollback_moves_the_updated_nodes_back_in_reverse_order_and_the_control_plane_last() {
    let recorded = status(Some(OLD), Some((TARGET, OLD)));
    let nodes = [
        on(cp("c0"), TARGET),
        on(cp("c1"), TARGET),
        on(node("w0"), TARGET),
        on(node("w1"), TARGET),
        on(node("w2"), TARGET),
        failed(node("w3"), TARGET),
        node("w4"),
    ];
    let r = rollout(rolling_back(3), &recorded);
    assert_eq!(r.spec.acting().unwrap().target, OLD, "the acting target is the rollback's");
    let p = run(&nodes, r, t(5));
    // The workers the rollout updated, the last one first; the failed one and the one never reached run v1.
    assert_eq!(started(&p), [stage("w2", OLD), stage("w1", OLD), stage("w0", OLD)]);
    assert_eq!(p.hold, None);
    assert_eq!(p.counts.up_to_date, 2);
    // Two staged back: the later one in the start order takes its turn first.
    let staged = |n: NodeView| {
        let n = with_intent(n, Step::Stage, OLD, "s0", t(1));
        crate::policy::tests::with_report(n, shared::protocol::AgentState::Done, "s0")
    };
    let nodes2 = [on(cp("c0"), TARGET), staged(on(node("w0"), TARGET)), staged(on(node("w1"), TARGET)), node("w2")];
    let p = run(&nodes2, rollout(rolling_back(1), &recorded), t(5));
    assert_eq!(started(&p), [("w1".to_owned(), ActionKind::Drain { target: OLD.into() })]);
    // Workers back: the control plane, the last one first, one at a time.
    let nodes3 = [on(cp("c0"), TARGET), on(cp("c1"), TARGET), node("w0"), node("w1")];
    let p = run(&nodes3, rollout(rolling_back(3), &recorded), t(5));
    assert_eq!(started(&p), [stage("c1", OLD), stage("c0", OLD)]);
    // w2 still reboots into v2 (verified to its end): it goes back first, nothing after it starts, staging included;
    // a worker before it in the rollback's order does.
    let rebooting = with_intent(on(node("w2"), TARGET), Step::Reboot, TARGET, "r0", t(1));
    let nodes5 = [on(node("w0"), TARGET), on(node("w1"), TARGET), rebooting.clone(), on(node("w3"), TARGET)];
    let p = run(&nodes5, rollout(rolling_back(3), &recorded), t(2));
    assert_eq!(started(&p), [stage("w3", OLD)]);
    // Verified on v2 in this round (intent=done written now): it goes back next round, first.
    let verified = crate::policy::tests::with_report(
        with_intent(on(node("w2"), TARGET), Step::Reboot, TARGET, "r0", t(1)),
        shared::protocol::AgentState::Done,
        "r0",
    );
    let mut verified = verified;
    if let Ok(a) = &mut verified.agent {
        a.boot_id = Some(crate::policy::tests::boot("b1"));
    }
    verified.kubelet_boot_id = Some("b1".into());
    let nodes5 = [on(node("w0"), TARGET), on(node("w1"), TARGET), verified];
    let p = run(&nodes5, rollout(rolling_back(3), &recorded), t(2));
    assert_eq!(started(&p), [("w2".to_owned(), ActionKind::Done { target: TARGET.into() })]);
    // In flight for the rollback's own image, it holds nothing up.
    let back = with_intent(on(node("w2"), TARGET), Step::Reboot, OLD, "r0", t(1));
    let nodes6 = [on(node("w0"), TARGET), on(node("w1"), TARGET), back];
    let p = run(&nodes6, rollout(rolling_back(3), &recorded), t(2));
    assert_eq!(started(&p), [stage("w1", OLD), stage("w0", OLD)]);
    // A worker still to go back keeps the control plane waiting.
    let nodes4 = [on(cp("c0"), TARGET), on(node("w0"), TARGET).clone(), node("w1")];
    let p = run(&nodes4, rollout(rolling_back(3), &recorded), t(5));
    assert_eq!(started(&p), [stage("w0", OLD)]);
}

#[test]
fn canary_waves_do_not_hold_a_rollback() {
    let waves = vec![crate::policy::waves::WavePolicy {
        nodes: budget::MaxUnavailable::Count(1),
        soak: jiff::SignedDuration::from_hours(1),
    }];
    let policy = Policy { waves, ..rolling_back(1) };
    let nodes = [on(node("w0"), TARGET), on(node("w1"), TARGET), failed(node("w2"), TARGET)];
    // Forward, the first wave (one node, done) would soak for an hour; back, the nodes go at once.
    let p = run(&nodes, rollout(policy.clone(), &status(Some(OLD), None)), t(5));
    assert_eq!(p.hold.unwrap().reason, Reason::RollbackStarted);
    let p = run(&nodes, rollout(policy, &status(Some(OLD), Some((TARGET, OLD)))), t(5));
    assert_eq!((started(&p), p.hold, p.waves), (vec![stage("w1", OLD)], None, None));
}

#[test]
fn the_rollbacks_own_failures_stop_it_and_a_rollback_done_holds_until_the_image_changes() {
    let recorded = status(Some(OLD), Some((TARGET, OLD)));
    // w1 failed to go back: the rollback's own budget (1) is spent.
    let nodes = [on(node("w0"), TARGET), on(failed(node("w1"), OLD), TARGET), node("w2")];
    let p = run(&nodes, rollout(rolling_back(1), &recorded), t(5));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let hold = p.hold.unwrap();
    assert_eq!(hold.reason, Reason::RollbackFailed);
    assert!(hold.message.contains("the rollback from v2 to v1 failed"), "{}", hold.message);
    // Everything back on v1: rolled back, nothing starts.
    let nodes = [node("w0"), failed(node("w1"), TARGET), node("w2")];
    let p = run(&nodes, rollout(rolling_back(1), &recorded), t(5));
    assert!(p.actions.is_empty());
    assert_eq!(p.hold.unwrap().reason, Reason::RolledBack);
    // A new image: the record is another image's, dropped; a new rollout starts.
    let v3 = Rollout::new("nv", SpecState::Valid(valid_spec("v3", 2, rolling_back(1))), Some(&recorded));
    assert_eq!((v3.rollback.as_ref(), v3.spec.acting().unwrap().target.as_str()), (None, "v3"));
    let p = run(&nodes, v3, t(5));
    assert_eq!(started(&p), [stage("w0", "v3")]);
}

#[test]
fn the_rollback_order_is_the_start_order_reversed_but_for_the_own_node_and_deferred_nodes() {
    let mut orders = Vec::new();
    for worker in [false, true] {
        for own in [false, true] {
            for zone in ["", "a", "b"] {
                for deferred in [false, true] {
                    for name in ["n1", "n2"] {
                        orders.push((worker, own, zone.to_owned(), deferred, name.to_owned()));
                    }
                }
            }
        }
    }
    for a in &orders {
        for b in &orders {
            let c = cmp(a, b);
            assert_eq!(c, cmp(b, a).reverse(), "{a:?} {b:?}");
            assert_eq!(c.is_eq(), a == b);
            let expected = if a.0 != b.0 {
                // Control plane (worker = false) last.
                b.0.cmp(&a.0)
            } else if a.1 != b.1 {
                a.1.cmp(&b.1)
            } else if a.2 != b.2 {
                b.2.cmp(&a.2)
            } else if a.3 != b.3 {
                a.3.cmp(&b.3)
            } else {
                b.4.cmp(&a.4)
            };
            assert_eq!(c, expected, "{a:?} {b:?}");
        }
    }
}

#[test]
fn the_uniform_image_is_one_image_every_node_reports() {
    assert_eq!(uniform([Some("v1"), Some("v1")].into_iter()), Some("v1".into()));
    assert_eq!(uniform([Some("v1"), Some("v2")].into_iter()), None);
    assert_eq!(uniform([Some("v1"), None].into_iter()), None);
    assert_eq!(uniform([None, None].into_iter()), None);
    assert_eq!(uniform(std::iter::empty()), None);
    // Found only while the rollout has moved nothing.
    let nodes = [node("w0"), node("w1")];
    let mut plans = plan(&nodes, &[rollout(Policy::default(), &status(None, None))], None, t(0)).rollouts;
    find_uniform(&mut plans, || nodes.iter().collect());
    assert_eq!(plans[0].uniform_image.as_deref(), Some(OLD));
    // A node of a scaling group runs no agent: the image the cloud created it from.
    let mut group = node("g0");
    group.agent = Ok(shared::protocol::AgentReport::default());
    group.group = Some(crate::policy::GroupMember {
        group_id: "g".into(),
        provider_id: "simulated://g/g0".into(),
        image: Some(OLD.into()),
        ready_since: None,
        labels: Default::default(),
        taints: Vec::new(),
        heir: None,
        donor: None,
    });
    assert_eq!(node_image(&group), Some(OLD));
    let mixed = [node("w0"), group];
    let mut plans = plan(&mixed, &[rollout(Policy::default(), &status(None, None))], None, t(0)).rollouts;
    find_uniform(&mut plans, || mixed.iter().collect());
    assert_eq!(plans[0].uniform_image.as_deref(), Some(OLD));
    let moved = [on(node("w0"), TARGET), node("w1")];
    let mut plans = plan(&moved, &[rollout(Policy::default(), &status(None, None))], None, t(0)).rollouts;
    find_uniform(&mut plans, || moved.iter().collect());
    assert_eq!(plans[0].uniform_image, None);
}

#[test]
fn the_status_keeps_the_last_complete_image_and_the_rollback_record() {
    let compute = |nodes: &[NodeView], r: Rollout, previous: &NodeVersionStatus| {
        let mut plans = plan(nodes, std::slice::from_ref(&r), None, t(5)).rollouts;
        find_uniform(&mut plans, || nodes.iter().collect());
        crate::status::compute(&plans[0], &r, Some(1), Some(previous), t(5))
    };
    // A fleet on v1 that v2 has not moved: v1 is recorded.
    let s = compute(&[node("w0"), node("w1")], rollout(rolling_back(1), &status(None, None)), &status(None, None));
    assert_eq!(s.last_complete_image.as_deref(), Some(OLD));
    // Complete on v2: v2.
    let done = [on(node("w0"), TARGET), on(node("w1"), TARGET)];
    let s = compute(&done, rollout(rolling_back(1), &status(Some(OLD), None)), &status(Some(OLD), None));
    assert_eq!(s.last_complete_image.as_deref(), Some(TARGET));
    // A failure keeps it, and starts the rollback: recorded.
    let previous = status(Some(OLD), None);
    let s = compute(&after_a_failure(), rollout(rolling_back(1), &previous), &previous);
    assert_eq!(s.last_complete_image.as_deref(), Some(OLD));
    assert_eq!(s.rollback.as_ref().map(|r| (r.from.as_str(), r.to.as_str(), r.since.0)), Some((TARGET, OLD, t(5))));
    let progressing = s.conditions.iter().find(|c| c.type_ == "Progressing").unwrap();
    assert_eq!(progressing.reason, "RollbackStarted");
    // Under way: kept as recorded.
    let previous = status(Some(OLD), Some((TARGET, OLD)));
    let s = compute(&after_a_failure(), rollout(rolling_back(1), &previous), &previous);
    assert_eq!(s.rollback.as_ref().map(|r| r.since.0), Some(t(0)));
    assert_eq!(s.target_image.as_deref(), Some(OLD));
    // Done: RolledBack.
    let back = [node("w0"), node("w1")];
    let s = compute(&back, rollout(rolling_back(1), &previous), &previous);
    let progressing = s.conditions.iter().find(|c| c.type_ == "Progressing").unwrap();
    assert_eq!((progressing.status.as_str(), progressing.reason.as_str()), ("False", "RolledBack"));
    assert!(s.rollback.is_some());
    // A new image drops the record.
    let v3 = Rollout::new("nv", SpecState::Valid(valid_spec("v3", 2, rolling_back(1))), Some(&previous));
    let s = compute(&back, v3, &previous);
    assert_eq!(s.rollback, None);
    assert_eq!(s.last_complete_image.as_deref(), Some(OLD));
}

#[test]
fn plan_says_what_a_spent_budget_would_do() {
    let unknown = rollout(rolling_back(1), &status(None, None));
    let note = forecast_note(&unknown, None).unwrap();
    assert!(note.contains("no image every node ran is known") && note.contains("as Stop does"), "{note}");
    assert!(forecast_note(&unknown, Some(OLD)).unwrap().contains("go back to v1"));
    let recorded = rollout(rolling_back(1), &status(Some("v0"), None));
    assert!(forecast_note(&recorded, Some(OLD)).unwrap().contains("go back to v0"), "the status's record first");
    assert_eq!(forecast_note(&rollout(Policy::default(), &status(Some(OLD), None)), Some(OLD)), None);
}

/// A rollback moves the control plane last, so control-plane nodes staged ahead wait for the workers: a worker that
/// must still go back (one that joined after they were staged) gets a slot of maxStaging from them; otherwise it and
/// they would wait for each other for ever, silently.
#[test]
fn in_a_rollback_control_plane_nodes_staged_ahead_yield_their_slot_to_a_worker_still_to_go_back() {
    use crate::policy::tests::with_report;
    use shared::protocol::AgentState;
    let staged = with_report(with_intent(cp("cp0"), Step::Stage, OLD, "s0", t(0)), AgentState::Done, "s0");
    let staged = NodeView { unschedulable: false, ..on(staged, TARGET) };
    let back = || rollout(rolling_back(1), &status(Some(OLD), Some((TARGET, OLD))));
    let nodes = vec![staged, on(node("w0"), OLD), on(node("w1"), OLD), on(node("w9"), TARGET)];
    let p = run(&nodes, back(), t(5));
    assert_eq!(started(&p), [("cp0".to_owned(), ActionKind::Release)]);
    assert_eq!(p.actions[0].reason, Reason::StagingSlotYielded);
    assert!(p.actions[0].message.contains("rollback moves the control plane last"), "{}", p.actions[0].message);
    let hold = p.hold.clone().unwrap();
    assert_eq!(hold.reason, Reason::StagingSlotYielded);
    assert!(hold.message.contains("cp0"), "{}", hold.message);
    // Released: the worker goes back first, the control-plane node after it.
    let nodes = vec![on(cp("cp0"), TARGET), on(node("w0"), OLD), on(node("w1"), OLD), on(node("w9"), TARGET)];
    let p = run(&nodes, back(), t(6));
    assert_eq!(started(&p), [stage("w9", OLD)]);
}
