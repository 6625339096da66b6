use super::*;
use crate::policy::budget::Budgets;
use shared::crd::nodeop::NodeOpDrainOptions;
use shared::protocol::Token;

const KEY: &str = "default/op@u1";

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn boot(id: &str) -> BootId {
    BootId::parse("k", id).unwrap()
}

fn node(name: &str) -> NodeFacts {
    NodeFacts {
        name: name.into(),
        control_plane: name.starts_with("cp"),
        selected: true,
        ready: true,
        unschedulable: false,
        kubelet_boot_id: Some("b0".into()),
        mark: None,
        controller: Some(ControllerAnnotations::default()),
        agent: Some(AgentReport { os_image: Some("v1".into()), boot_id: Some(boot("b0")), ..Default::default() }),
        drain: DrainProgress::NotRunning,
        job: None,
        preflight: None,
        zone: None,
        do_not_disrupt: None,
    }
}

/// Marked by the NodeOp and cordoned by the controller.
fn started(name: &str) -> NodeFacts {
    NodeFacts {
        mark: Some(KEY.into()),
        unschedulable: true,
        controller: Some(ControllerAnnotations { intent: None, cordoned_by_us: true }),
        ..node(name)
    }
}

fn spec(json: serde_json::Value) -> NodeOpSpec {
    let mut value = json;
    value["command"] = serde_json::json!(["true"]);
    serde_json::from_value(value).unwrap()
}

fn run(spec: &NodeOpSpec, recorded: &BTreeMap<String, NodeOpNodeStatus>, nodes: &[NodeFacts], now: i64) -> Decision {
    decide(
        Inputs { key: KEY, spec, recorded, deleting: false, now: t(now) },
        nodes,
        &mut LazyBudgets::ready(Budgets::default()),
    )
}

fn actions(d: &Decision) -> Vec<(String, Action)> {
    d.nodes.iter().filter_map(|n| Some((n.node.clone(), n.action.clone()?))).collect()
}

fn of<'a>(d: &'a Decision, node: &str) -> &'a NodeDecision {
    d.nodes.iter().find(|n| n.node == node).unwrap()
}

fn start(name: &str) -> (String, Action) {
    (name.into(), Action::Start { cordon: true })
}

fn recorded(entries: &[(&str, NodeOpPhase)]) -> BTreeMap<String, NodeOpNodeStatus> {
    entries.iter().map(|(n, p)| (n.to_string(), NodeOpNodeStatus { phase: *p, ..Default::default() })).collect()
}

#[test]
fn at_most_concurrency_nodes_start_in_name_order() {
    let spec = spec(serde_json::json!({"cordon": true, "concurrency": 2}));
    let nodes = [node("w3"), node("w1"), node("w2"), node("w4")];
    let d = run(&spec, &BTreeMap::new(), &nodes, 0);
    assert_eq!(actions(&d), vec![start("w1"), start("w2")]);
    assert_eq!(of(&d, "w3").status.phase, NodeOpPhase::Pending);
    assert_eq!(d.phase, NodeOpPhase::Running);
    // With two in progress, none more.
    let nodes = [started("w1"), started("w2"), node("w3")];
    assert_eq!(actions(&run(&spec, &recorded(&[]), &nodes, 0)).len(), 2, "only the started nodes' next steps");
    assert!(actions(&run(&spec, &recorded(&[]), &nodes, 0)).iter().all(|(n, _)| n != "w3"));
}

#[test]
fn concurrency_zero_starts_every_worker_at_once() {
    let spec = spec(serde_json::json!({"cordon": true}));
    let d = run(&spec, &BTreeMap::new(), &[node("w1"), node("w2"), node("w3")], 0);
    assert_eq!(actions(&d), vec![start("w1"), start("w2"), start("w3")]);
}

#[test]
fn control_plane_nodes_go_first_and_one_at_a_time() {
    let spec = spec(serde_json::json!({"cordon": true}));
    let d = run(&spec, &BTreeMap::new(), &[node("w1"), node("cp2"), node("cp1")], 0);
    assert_eq!(actions(&d), vec![start("cp1")]);
    assert_eq!(d.hold.as_ref().map(|h| h.0), Some(Reason::WaitingForControlPlane));
    let d = run(&spec, &recorded(&[("cp1", NodeOpPhase::Running)]), &[node("w1"), node("cp2"), started("cp1")], 0);
    assert!(actions(&d).iter().all(|(n, _)| n == "cp1"), "{:?}", actions(&d));
    let done = recorded(&[("cp1", NodeOpPhase::Completed), ("cp2", NodeOpPhase::Completed)]);
    let d = run(&spec, &done, &[node("w1"), node("cp2"), node("cp1")], 0);
    assert_eq!(actions(&d), vec![start("w1")]);
}

/// The barrier holds until the last control-plane node has finished: not only while one waits, but while its
/// Job runs and while it reboots after its Job succeeded (the seed's NodeOp at `concurrency: 2` once started a
/// worker in both).
#[test]
fn no_worker_starts_before_the_last_control_plane_node_finished() {
    let spec = spec(serde_json::json!({"cordon": true, "concurrency": 2, "rebootOnSuccess": true}));
    let first_done = [("cp1", NodeOpPhase::Completed), ("cp2", NodeOpPhase::Running)];
    let mut job_running = started("cp2");
    job_running.job = Some(JobState::Active);
    let d = run(&spec, &recorded(&first_done), &[node("cp1"), job_running, node("w1")], 0);
    assert!(actions(&d).iter().all(|(n, _)| n != "w1"), "a worker started beside a Job: {:?}", actions(&d));
    assert_eq!(d.hold.as_ref().map(|h| h.0), Some(Reason::WaitingForControlPlane));
    let mut rebooting = started("cp2");
    rebooting.job = Some(JobState::Succeeded);
    let d = run(&spec, &recorded(&first_done), &[node("cp1"), rebooting, node("w1")], 0);
    assert!(actions(&d).iter().all(|(n, _)| n != "w1"), "a worker started beside a reboot: {:?}", actions(&d));
    let done = recorded(&[("cp1", NodeOpPhase::Completed), ("cp2", NodeOpPhase::Completed)]);
    let d = run(&spec, &done, &[node("cp1"), node("cp2"), node("w1")], 0);
    assert_eq!(actions(&d), vec![start("w1")]);
}

#[test]
fn stop_on_failure_starts_nothing_after_a_failure() {
    let spec = spec(serde_json::json!({"cordon": true, "stopOnFailure": true, "concurrency": 1}));
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Failed)]), &[node("w1"), node("w2"), node("w3")], 0);
    assert!(actions(&d).is_empty(), "{:?}", actions(&d));
    assert_eq!(d.hold.as_ref().map(|h| h.0), Some(Reason::StoppedOnFailure));
    assert_eq!(d.phase, NodeOpPhase::Failed);
    // Without it, the next node starts.
    let spec = NodeOpSpec { stop_on_failure: None, ..spec };
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Failed)]), &[node("w1"), node("w2"), node("w3")], 0);
    assert_eq!(actions(&d), vec![start("w2")]);
}

#[test]
fn a_failing_job_fails_the_node_and_releases_it_unless_kept_for_inspection() {
    let spec = spec(serde_json::json!({"cordon": true, "stopOnFailure": true, "concurrency": 1}));
    let failing = NodeFacts { job: Some(JobState::Failed { message: "BackoffLimitExceeded".into() }), ..started("w1") };
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Running)]), &[failing.clone(), node("w2")], 0);
    assert_eq!(actions(&d), vec![("w1".into(), Action::Release)], "released, and w2 not started");
    assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Failed);
    assert_eq!(of(&d, "w1").notice.as_ref().map(|n| (n.reason, n.warning)), Some((Reason::OperationFailed, true)));
    let keep = NodeOpSpec { uncordon_on_failure: Some(false), ..spec };
    let d = run(&keep, &recorded(&[("w1", NodeOpPhase::Running)]), &[failing, node("w2")], 0);
    assert!(actions(&d).is_empty(), "kept cordoned and marked: {:?}", actions(&d));
}

#[test]
fn a_node_whose_job_exists_never_gets_a_second_one() {
    let spec = spec(serde_json::json!({"cordon": true}));
    let running = NodeFacts { job: Some(JobState::Active), ..started("w1") };
    let d = run(&spec, &BTreeMap::new(), &[running], 0);
    assert!(actions(&d).is_empty());
    // The mark is gone (a restart after the release, before the status was seen): the Job's outcome counts.
    let finished = NodeFacts { job: Some(JobState::Succeeded), ..node("w1") };
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Running)]), &[finished], 0);
    assert!(actions(&d).is_empty(), "{:?}", actions(&d));
    assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Completed);
    // A finished node is never started again.
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Completed)]), &[node("w1")], 0);
    assert!(actions(&d).is_empty());
    assert_eq!(d.phase, NodeOpPhase::Completed);
}

#[test]
fn a_drain_that_takes_longer_than_its_timeout_fails_the_node_and_releases_it() {
    let spec = spec(serde_json::json!({"cordon": true, "drainOptions": {"enabled": true, "timeoutSeconds": 60}}));
    let draining =
        NodeFacts { drain: DrainProgress::Running { waiting_on: Some("pod demo/a".into()) }, ..started("w1") };
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Running)]), std::slice::from_ref(&draining), 0);
    assert_eq!(actions(&d), vec![("w1".into(), Action::Drain)]);
    let since = of(&d, "w1").status.drain_started_at.clone().unwrap();
    assert_eq!(d.wake_at, Some(t(60)));
    let record = BTreeMap::from([(
        "w1".to_owned(),
        NodeOpNodeStatus { phase: NodeOpPhase::Running, drain_started_at: Some(since), ..Default::default() },
    )]);
    assert_eq!(actions(&run(&spec, &record, std::slice::from_ref(&draining), 59)), vec![("w1".into(), Action::Drain)]);
    let d = run(&spec, &record, &[draining], 60);
    assert_eq!(actions(&d), vec![("w1".into(), Action::Release)]);
    assert_eq!(of(&d, "w1").notice.as_ref().map(|n| n.reason), Some(Reason::DrainTimedOut));
    assert!(of(&d, "w1").status.message.contains("pod demo/a"), "{}", of(&d, "w1").status.message);
    // Drained: the Job.
    let drained = NodeFacts { drain: DrainProgress::Drained, ..started("w1") };
    assert_eq!(actions(&run(&spec, &recorded(&[]), &[drained], 0)), vec![("w1".into(), Action::CreateJob)]);
}

#[test]
fn the_reboot_goes_through_the_agent_and_is_verified() {
    let spec = spec(serde_json::json!({"cordon": true, "rebootOnSuccess": true}));
    let succeeded = NodeFacts { job: Some(JobState::Succeeded), ..started("w1") };
    let d = run(&spec, &BTreeMap::new(), std::slice::from_ref(&succeeded), 0);
    assert_eq!(actions(&d), vec![("w1".into(), Action::Reboot { target: "v1".into(), boot_id_before: boot("b0") })]);
    let token = Token::parse("k", "tok").unwrap();
    let intent = Intent {
        step: Step::Reboot,
        target: "v1".into(),
        token: token.clone(),
        since: t(0),
        boot_id_before: Some(boot("b0")),
        kubeadm: None,
        message: None,
    };
    let rebooting = NodeFacts {
        controller: Some(ControllerAnnotations { intent: Some(intent), cordoned_by_us: true }),
        ..succeeded.clone()
    };
    let d = run(&spec, &BTreeMap::new(), std::slice::from_ref(&rebooting), 10);
    assert!(actions(&d).is_empty());
    assert_eq!(of(&d, "w1").status.reboot_status, RebootStatus::Pending);
    let done_report = AgentReport {
        state: Some(AgentState::Done),
        token: Some(token),
        os_image: Some("v1".into()),
        boot_id: Some(boot("b1")),
        ..Default::default()
    };
    // The agent says done, but the kubelet still reports the old boot: not yet.
    let reported = NodeFacts { agent: Some(done_report), ..rebooting.clone() };
    assert!(actions(&run(&spec, &BTreeMap::new(), std::slice::from_ref(&reported), 10)).is_empty());
    let booted = NodeFacts { kubelet_boot_id: Some("b1".into()), ..reported };
    let d = run(&spec, &BTreeMap::new(), &[booted], 10);
    assert_eq!(actions(&d), vec![("w1".into(), Action::Release)]);
    assert_eq!(of(&d, "w1").status.reboot_status, RebootStatus::Completed);
    assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Completed);
    // Back on another image (the operation installed it): the agent says error, the reboot happened.
    let other_image = AgentReport {
        state: Some(AgentState::Error),
        token: Some(Token::parse("k", "tok").unwrap()),
        message: Some("the host booted v2 instead of v1 after the reboot".into()),
        os_image: Some("v2".into()),
        boot_id: Some(boot("b1")),
        ..Default::default()
    };
    let upgraded =
        NodeFacts { agent: Some(other_image.clone()), kubelet_boot_id: Some("b1".into()), ..rebooting.clone() };
    let d = run(&spec, &BTreeMap::new(), &[upgraded], 10);
    assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Completed, "{:?}", of(&d, "w1").status);
    assert!(of(&d, "w1").status.message.contains("into v2"));
    // An error without a new boot is a failed reboot.
    let refused = AgentReport { boot_id: Some(boot("b0")), os_image: Some("v1".into()), ..other_image };
    let d = run(&spec, &BTreeMap::new(), &[NodeFacts { agent: Some(refused), ..rebooting.clone() }], 10);
    assert_eq!(of(&d, "w1").notice.as_ref().map(|n| n.reason), Some(Reason::RebootFailed));
    // Never back: timed out.
    let d = run(&spec, &BTreeMap::new(), &[rebooting], REBOOT_TIMEOUT.as_secs());
    assert_eq!(of(&d, "w1").notice.as_ref().map(|n| n.reason), Some(Reason::RebootTimedOut));
    // No agent: reported, not rebooted.
    let no_agent = NodeFacts { agent: None, ..succeeded };
    let d = run(&spec, &BTreeMap::new(), &[no_agent], 0);
    assert_eq!(actions(&d), vec![("w1".into(), Action::Release)]);
    assert_eq!(of(&d, "w1").status.reboot_status, RebootStatus::NoAgent);
    assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Failed);
}

#[test]
fn a_node_a_rollout_or_another_nodeop_works_on_waits() {
    let spec = spec(serde_json::json!({"cordon": true}));
    let intent = |step| Intent {
        step,
        target: "v2".into(),
        token: Token::parse("k", "t").unwrap(),
        since: t(0),
        boot_id_before: None,
        kubeadm: None,
        message: None,
    };
    let staging = NodeFacts {
        controller: Some(ControllerAnnotations { intent: Some(intent(Step::Stage)), cordoned_by_us: false }),
        ..node("w1")
    };
    let other = NodeFacts { mark: Some("default/other@u2".into()), ..node("w2") };
    let verified = NodeFacts {
        controller: Some(ControllerAnnotations { intent: Some(intent(Step::Done)), cordoned_by_us: false }),
        ..node("w3")
    };
    let not_ready = NodeFacts { ready: false, ..node("w4") };
    let d = run(&spec, &BTreeMap::new(), &[staging, other, verified, not_ready], 0);
    assert_eq!(actions(&d), vec![start("w3")]);
    assert!(of(&d, "w1").status.message.contains("rollout"), "{}", of(&d, "w1").status.message);
    assert!(of(&d, "w2").status.message.contains("default/other"));
}

#[test]
fn a_control_plane_node_waits_while_the_one_pipeline_names_another_busy() {
    use crate::policy::budget::BusyControlPlane;
    let spec = spec(serde_json::json!({"cordon": true}));
    let busy = |mark: Option<&str>| {
        Budgets::default().with_control_plane(vec![BusyControlPlane {
            node: Some("cp1".into()),
            why: "a rollout works on it (step drain)".into(),
            mark: mark.map(Into::into),
        }])
    };
    let recorded = BTreeMap::new();
    let inputs = Inputs { key: KEY, spec: &spec, recorded: &recorded, deleting: false, now: t(0) };
    let nodes = [node("cp2"), node("w1")];
    let d = decide(inputs, &nodes, &mut LazyBudgets::ready(busy(None)));
    assert!(actions(&d).is_empty(), "{:?}", actions(&d));
    let message = &of(&d, "cp2").status.message;
    assert!(message.contains("control-plane node cp1 is busy: a rollout works on it (step drain)"), "{message}");
    // Another NodeOp's control-plane node holds it too; this NodeOp's own does not (it keeps its own one at a time).
    let d = decide(inputs, &nodes, &mut LazyBudgets::ready(busy(Some("default/other@u2"))));
    assert!(actions(&d).is_empty(), "{:?}", actions(&d));
    let d = decide(inputs, &nodes, &mut LazyBudgets::ready(busy(Some(KEY))));
    assert_eq!(actions(&d), vec![start("cp2")]);
    // A control-plane replacement in progress (no node of its own left) holds it as well.
    let replacing = Budgets::default().with_control_plane(vec![BusyControlPlane {
        node: None,
        why: "a control-plane node's replacement is in progress".into(),
        mark: None,
    }]);
    let d = decide(inputs, &nodes, &mut LazyBudgets::ready(replacing));
    assert!(of(&d, "cp2").status.message.contains("replacement is in progress"), "{}", of(&d, "cp2").status.message);
    // Started here, the node is busy for the NodeOps that decide after it in the round.
    let mut budgets = LazyBudgets::ready(Budgets::default());
    let d = decide(inputs, &[node("cp2")], &mut budgets);
    assert_eq!(actions(&d), vec![start("cp2")]);
    let other = "default/other@u2";
    let after = budgets.get().control_plane_busy(other).unwrap_or_default();
    assert!(after.contains("control-plane node cp2 is busy: the NodeOp default/op@u1 works on it"), "{after}");
}

#[test]
fn a_nodeop_being_deleted_starts_nothing() {
    let spec = spec(serde_json::json!({}));
    let recorded = BTreeMap::new();
    let inputs = Inputs { key: KEY, spec: &spec, recorded: &recorded, deleting: true, now: t(0) };
    let d = decide(inputs, &[node("w1")], &mut LazyBudgets::ready(Budgets::default()));
    assert!(actions(&d).is_empty());
}

#[test]
fn a_recorded_outcome_is_released_once_more_if_the_mark_is_still_there() {
    let spec = spec(serde_json::json!({"cordon": true}));
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Completed)]), &[started("w1")], 0);
    assert_eq!(actions(&d), vec![("w1".into(), Action::Release)]);
    let drain = NodeOpDrainOptions { enabled: Some(true), ..Default::default() };
    let spec = NodeOpSpec { drain_options: Some(drain), cordon: Some(false), ..spec };
    // The drain implies the cordon.
    assert_eq!(actions(&run(&spec, &BTreeMap::new(), &[node("w1")], 0)), vec![start("w1")]);
}

#[test]
fn the_nodeop_is_finished_only_once_every_finished_node_is_released() {
    let spec = spec(serde_json::json!({"cordon": true, "stopOnFailure": true}));
    // The last node's outcome is recorded first, while it is still marked and cordoned: the NodeOp still runs.
    let succeeded = NodeFacts { job: Some(JobState::Succeeded), ..started("w1") };
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Running)]), &[succeeded], 0);
    assert_eq!(of(&d, "w1").status.phase, NodeOpPhase::Completed);
    assert_eq!(d.phase, NodeOpPhase::Running, "completed while w1 is still cordoned");
    // Recorded and still marked: the release is due, the NodeOp still runs.
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Completed)]), &[started("w1")], 0);
    assert_eq!((actions(&d), d.phase), (vec![("w1".into(), Action::Release)], NodeOpPhase::Running));
    // Released: completed.
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Completed)]), &[node("w1")], 0);
    assert_eq!(d.phase, NodeOpPhase::Completed);
    // A failed node is released before the NodeOp says Failed, unless it is kept for inspection.
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Failed)]), &[started("w1")], 0);
    assert_eq!(d.phase, NodeOpPhase::Running);
    let keep = NodeOpSpec { uncordon_on_failure: Some(false), ..spec };
    let d = run(&keep, &recorded(&[("w1", NodeOpPhase::Failed)]), &[started("w1")], 0);
    assert!(actions(&d).is_empty());
    assert_eq!(d.phase, NodeOpPhase::Failed, "kept cordoned, and failed");
}

fn recorded_running(nodes: &[&str]) -> BTreeMap<String, NodeOpNodeStatus> {
    recorded(&nodes.iter().map(|n| (*n, NodeOpPhase::Running)).collect::<Vec<_>>())
}

#[test]
fn a_node_starts_only_while_every_rollout_budget_it_counts_in_has_a_free_slot() {
    use crate::policy::budget::Limit;
    let spec = spec(serde_json::json!({"cordon": true, "concurrency": 3}));
    let inputs = |recorded| Inputs { key: KEY, spec: &spec, recorded, deleting: false, now: t(0) };
    let nodes = [node("w1"), node("w2"), node("w3"), node("x1")];
    // Rollout "a" (w1, w2, w3) allows 2 out and has 1 out; rollout "b" (x1) has none out of 1.
    let limits = |a_out| {
        vec![
            ("a".to_owned(), Some(Limit { allowed: 2, unavailable: a_out })),
            ("b".to_owned(), Some(Limit { allowed: 1, unavailable: 0 })),
        ]
    };
    let members = || {
        vec![
            ("w1".to_owned(), Some(0), false),
            ("w2".to_owned(), Some(0), false),
            ("w3".to_owned(), Some(0), false),
            ("x1".to_owned(), Some(1), false),
        ]
    };
    let mut budgets = LazyBudgets::ready(Budgets::new(limits(1), members()));
    let recorded = BTreeMap::new();
    let d = decide(inputs(&recorded), &nodes, &mut budgets);
    let budgets = budgets.get();
    // One slot of "a" is left: w1 takes it, w2 and w3 wait and say why; x1 counts in "b" and starts.
    assert_eq!(actions(&d), vec![start("w1"), start("x1")]);
    assert!(of(&d, "w2").status.message.contains("NodeVersion a allows 2 node(s) out at once"), "{d:?}");
    assert_eq!(d.hold, None, "nodes started");
    // The slots taken are gone for the next NodeOp of the round too.
    assert_eq!(
        budgets.room("w3"),
        Err("the rollout of NodeVersion a allows 2 node(s) out at once (maxUnavailable) and 2 are out".into())
    );
    assert!(budgets.room("x1").is_ok(), "x1 counts already");

    // Nothing can start: the NodeOp says it is held by the budget.
    let d = decide(inputs(&recorded), &nodes[..3], &mut LazyBudgets::ready(Budgets::new(limits(2), members())));
    assert!(actions(&d).is_empty());
    assert_eq!(d.hold.map(|h| h.0), Some(Reason::WaitingForRolloutBudget));

    // A node no rollout manages counts in every budget; a rollout with nothing to do (no limit) in none.
    let unowned = vec![("u1".to_owned(), None, false)];
    let full = vec![("a".to_owned(), Some(Limit { allowed: 1, unavailable: 1 }))];
    assert!(Budgets::new(full, unowned.clone()).room("u1").is_err());
    assert!(Budgets::new(vec![("a".to_owned(), None)], unowned).room("u1").is_ok());
    // Before the rollouts are known, nothing starts.
    let d = decide(inputs(&recorded), &[node("w1")], &mut LazyBudgets::ready(Budgets::unknown()));
    assert!(actions(&d).is_empty());
    assert!(of(&d, "w1").status.message.contains("not known yet"));
    // They are computed only when a node would start.
    let one = super::tests::spec(serde_json::json!({"cordon": true, "concurrency": 1}));
    let running = recorded_running(&["w1"]);
    let inputs = Inputs { key: KEY, spec: &one, recorded: &running, deleting: false, now: t(0) };
    let mut lazy = LazyBudgets::new(|| panic!("computed although nothing could start"));
    let d = decide(inputs, &[started("w1"), node("w2")], &mut lazy);
    assert!(actions(&d).iter().all(|(_, a)| !matches!(a, Action::Start { .. })));
    assert!(!lazy.computed());
}

fn checked(name: &str, preflight: Preflight) -> NodeFacts {
    NodeFacts { preflight: Some(preflight), ..node(name) }
}

#[test]
fn with_a_preflight_each_node_is_checked_before_it_starts_and_its_verdict_decides() {
    let spec = spec(serde_json::json!({"cordon": true, "concurrency": 2, "preflight": {"command": ["check"]}}));
    let phase = |d: &Decision, n: &str| of(d, n).status.phase;
    // Fresh nodes: the checks start within the concurrency (no mark, no cordon: the check is read-only).
    let d = run(&spec, &BTreeMap::new(), &[node("w1"), node("w2"), node("w3")], 0);
    assert_eq!(actions(&d), vec![("w1".into(), Action::CreatePreflight), ("w2".into(), Action::CreatePreflight)]);
    assert_eq!(phase(&d, "w1"), NodeOpPhase::Preflight);
    assert_eq!(of(&d, "w3").status.message, "waiting for a free slot");
    assert_eq!(d.phase, NodeOpPhase::Running);

    // Verdicts: a skip completes the node untouched, a failure fails it, a pass starts it; the freed slots go
    // to the next node's check.
    let both = recorded(&[("w1", NodeOpPhase::Preflight), ("w2", NodeOpPhase::Preflight)]);
    let nodes = [
        checked("w1", Preflight::Skip { message: "already on v2".into() }),
        checked("w2", Preflight::Proceed),
        node("w3"),
        node("w4"),
    ];
    let d = run(&spec, &both, &nodes, 1);
    assert_eq!(
        (phase(&d, "w1"), of(&d, "w1").status.message.as_str()),
        (NodeOpPhase::Completed, "Skipped by preflight: already on v2")
    );
    assert_eq!(of(&d, "w1").action, None, "a skipped node is never touched");
    assert_eq!(of(&d, "w2").action, Some(Action::Start { cordon: true }));
    assert_eq!(of(&d, "w3").action, Some(Action::CreatePreflight), "w1's slot is free");
    assert_eq!(of(&d, "w4").status.message, "waiting for a free slot");
    let nodes = [checked("w1", Preflight::Failed { message: "DeadlineExceeded".into() }), node("w2")];
    let d = run(&spec, &recorded(&[("w1", NodeOpPhase::Preflight)]), &nodes, 1);
    assert_eq!(
        (phase(&d, "w1"), of(&d, "w1").status.message.as_str()),
        (NodeOpPhase::Failed, "Preflight failed: DeadlineExceeded")
    );
    assert_eq!(of(&d, "w1").notice.as_ref().map(|n| n.reason), Some(Reason::PreflightFailed));

    // A passed node waits for the gates and keeps its slot; a check recorded but not seen is created again.
    let blocked = NodeFacts { ready: false, ..checked("w1", Preflight::Proceed) };
    let d = run(&spec, &both, &[blocked, node("w2"), node("w3")], 2);
    assert_eq!(phase(&d, "w1"), NodeOpPhase::Preflight);
    assert!(of(&d, "w1").status.message.starts_with("the preflight check passed; "), "{:?}", of(&d, "w1"));
    assert_eq!(of(&d, "w2").action, Some(Action::CreatePreflight));
    assert_eq!(of(&d, "w3").status.message, "waiting for a free slot");

    // A failed check stops the NodeOp under stopOnFailure.
    let stop = spec_with_preflight(serde_json::json!({"stopOnFailure": true, "concurrency": 1}));
    let nodes = [checked("w1", Preflight::Failed { message: "exit 3".into() }), node("w2")];
    let d = run(&stop, &recorded(&[("w1", NodeOpPhase::Preflight)]), &nodes, 1);
    assert_eq!(of(&d, "w2").action, None);
    assert_eq!(d.hold.map(|h| h.0), Some(Reason::StoppedOnFailure));
    assert_eq!(d.phase, NodeOpPhase::Failed);
    // A check still running under that hold keeps its phase and is not said to have passed.
    let nodes = [checked("w1", Preflight::Failed { message: "exit 3".into() }), checked("w3", Preflight::Running)];
    let both = recorded(&[("w1", NodeOpPhase::Preflight), ("w3", NodeOpPhase::Preflight)]);
    let w3 = of(&run(&stop, &both, &nodes, 1), "w3").status.clone();
    assert_eq!(
        (w3.phase, w3.message.as_str()),
        (NodeOpPhase::Preflight, "a node failed and stopOnFailure is set: no further node starts")
    );
}

fn spec_with_preflight(mut json: serde_json::Value) -> NodeOpSpec {
    json["preflight"] = serde_json::json!({"command": ["check"]});
    spec(json)
}

fn in_zone(name: &str, zone: &str) -> NodeFacts {
    NodeFacts { zone: Some(zone.into()), ..node(name) }
}

#[test]
fn workers_start_zone_by_zone_in_the_pipelines_one_start_order() {
    let spec = spec(serde_json::json!({"cordon": true, "concurrency": 2}));
    let nodes = [in_zone("w1", "zone-b"), in_zone("w2", "zone-a"), in_zone("w3", "zone-b"), in_zone("w4", "zone-a")];
    // By name, w1 and w2 would go first; zone by zone, zone-a's w2 and w4 do.
    assert_eq!(actions(&run(&spec, &BTreeMap::new(), &nodes, 0)), vec![start("w2"), start("w4")]);
}

#[test]
fn a_node_held_by_do_not_disrupt_is_not_started_and_its_slot_goes_to_the_next() {
    let spec = spec(serde_json::json!({"cordon": true, "concurrency": 1}));
    let held = NodeFacts {
        do_not_disrupt: Some("pod data/db-0 is annotated karpenter.sh/do-not-disrupt=true".into()),
        ..node("w1")
    };
    let d = run(&spec, &BTreeMap::new(), &[held.clone(), node("w2")], 0);
    assert_eq!(actions(&d), vec![start("w2")]);
    let message = &of(&d, "w1").status.message;
    assert!(message.starts_with("DoNotDisrupt: do not disrupt: pod data/db-0"), "{message}");
    assert_eq!(d.hold, None, "a node started");
    // Alone, it holds the NodeOp, named.
    let d = run(&spec, &BTreeMap::new(), &[held], 0);
    assert!(actions(&d).is_empty());
    let (reason, message) = d.hold.expect("held");
    assert_eq!(reason, Reason::DoNotDisrupt);
    assert!(message.contains("w1") && message.contains("db-0"), "{message}");
}

#[test]
fn a_start_keeps_to_the_zone_share_of_the_rollout_the_node_counts_in() {
    use crate::policy::budget::Limit;
    let spec = spec(serde_json::json!({"cordon": true, "concurrency": 3}));
    let recorded = BTreeMap::new();
    let inputs = Inputs { key: KEY, spec: &spec, recorded: &recorded, deleting: false, now: t(0) };
    // Rollout "a" allows 5 out, 1 per zone; w0 (zone-a) is out already.
    let members = ["w0", "w1", "w2", "w3"].map(|n| (n.to_owned(), Some(0), n == "w0")).to_vec();
    let zones = [("w0", "zone-a"), ("w1", "zone-a"), ("w2", "zone-b"), ("w3", "zone-b")]
        .map(|(n, z)| (n.to_owned(), z.to_owned()))
        .into_iter()
        .collect();
    let budgets = Budgets::new(vec![("a".to_owned(), Some(Limit { allowed: 5, unavailable: 1 }))], members)
        .with_zones(vec![Some(1)], zones);
    let nodes = [in_zone("w1", "zone-a"), in_zone("w2", "zone-b"), in_zone("w3", "zone-b")];
    let mut budgets = LazyBudgets::ready(budgets);
    let d = decide(inputs, &nodes, &mut budgets);
    // zone-a's share is taken by w0; zone-b's one slot goes to w2, and w3 waits for it.
    assert_eq!(actions(&d), vec![start("w2")]);
    for waiting in ["w1", "w3"] {
        let message = &of(&d, waiting).status.message;
        assert!(message.contains("maxUnavailablePerZone"), "{waiting}: {message}");
    }
    assert!(of(&d, "w1").status.message.contains("of zone zone-a out at once"));
    // Without a share per zone, the budget alone bounds them.
    let members = ["w1", "w2", "w3"].map(|n| (n.to_owned(), Some(0), false)).to_vec();
    let plain = Budgets::new(vec![("a".to_owned(), Some(Limit { allowed: 5, unavailable: 0 }))], members)
        .with_zones(vec![None], Default::default());
    let d = decide(inputs, &nodes, &mut LazyBudgets::ready(plain));
    assert_eq!(actions(&d).len(), 3);
}
