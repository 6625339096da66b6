use super::*;
use shared::protocol::KubeadmRole;

mod fetch;

fn tok(s: &str) -> Token {
    Token::parse("k", s).unwrap()
}

fn boot(s: &str) -> BootId {
    BootId::parse("k", s).unwrap()
}

fn facts(image: &str, boot_id: &str, staged: Option<&str>) -> Facts {
    Facts {
        os_image: image.into(),
        boot_id: boot(boot_id),
        staged_image: staged.map(Into::into),
        components_hash: None,
    }
}

fn intent(step: Step, token: &str) -> Intent {
    Intent {
        step,
        target: "v2".into(),
        token: tok(token),
        since: "2026-11-21T10:00:00Z".parse().unwrap(),
        boot_id_before: (step == Step::Reboot).then(|| boot("b0")),
        kubeadm: match step {
            Step::KubeadmUpgrade => {
                Some(KubeadmIntent { components: COMPONENTS.into(), role: Some(KubeadmRole::Node) })
            }
            Step::Fetch => Some(KubeadmIntent { components: COMPONENTS.into(), role: None }),
            _ => None,
        },
        message: None,
    }
}

fn reported(state: AgentState, token: &str) -> AgentReport {
    AgentReport {
        state: Some(state),
        token: Some(tok(token)),
        boot_id: Some(boot("b0")),
        os_image: Some("v1".into()),
        ..Default::default()
    }
}

const CORDONED: Cordon = Cordon { unschedulable: true, by_controller: true };

fn working(work: Work) -> Running {
    Running { work, phase: Phase::Working { transient: None } }
}

fn stage_work(token: &str) -> Work {
    Work::Stage { token: tok(token), target: "v2".into() }
}

fn reboot_work(token: &str) -> Work {
    Work::Reboot { token: tok(token), target: "v2".into() }
}

/// An observation with the controller's intent, the node cordoned by the controller, and nothing
/// running; adjust the fields for each case.
struct Case {
    intent: Option<Intent>,
    cordon: Cordon,
    current: AgentReport,
    facts: Result<Facts, (String, bool)>,
    running: Option<Running>,
    outcome: Option<Outcome>,
    prepared: Option<String>,
    fetched: Option<String>,
}

impl Case {
    fn new(intent: Option<Intent>, current: AgentReport, facts: Facts) -> Self {
        Case {
            intent,
            cordon: CORDONED,
            current,
            facts: Ok(facts),
            running: None,
            outcome: None,
            prepared: None,
            fetched: None,
        }
    }

    fn decide(&self) -> Decision {
        let host = match &self.facts {
            Ok(facts) => HostView::Known(facts),
            Err((problem, permanent)) => HostView::Unreadable { problem, permanent: *permanent },
        };
        decide(&Observation {
            controller: Controller::Readable { intent: self.intent.as_ref(), cordon: self.cordon },
            current: &self.current,
            host,
            running: self.running.as_ref(),
            outcome: self.outcome.as_ref(),
            prepared: self.prepared.as_deref(),
            fetched: self.fetched.as_deref(),
        })
    }
}

#[test]
fn host_facts_are_reported_and_nothing_else_changes_without_an_intent() {
    let d = Case::new(None, AgentReport::default(), facts("v1", "b0", None)).decide();
    assert_eq!((d.start, d.stop_running), (None, false));
    assert_eq!(d.report.os_image.as_deref(), Some("v1"));
    assert_eq!(d.report.boot_id, Some(boot("b0")));
    assert_eq!((d.report.state, d.report.message.clone()), (None, None));
    // Reported already: the same report comes back, so no write follows.
    let again = Case::new(None, d.report.clone(), facts("v1", "b0", None)).decide();
    assert_eq!(again.report, d.report);
}

#[test]
fn a_stage_intent_reports_busy_and_stages_once() {
    let i = intent(Step::Stage, "s1");
    let d = Case::new(Some(i.clone()), reported(AgentState::Done, "old"), facts("v1", "b0", None)).decide();
    assert_eq!(d.start, Some(stage_work("s1")));
    assert_eq!((d.report.state, d.report.token.clone()), (Some(AgentState::Busy), Some(tok("s1"))));
    // While it runs, nothing new starts and nothing changes.
    let running = Case {
        running: Some(working(stage_work("s1"))),
        ..Case::new(Some(i.clone()), d.report.clone(), facts("v1", "b0", None))
    };
    let d2 = running.decide();
    assert_eq!((d2.start, d2.stop_running), (None, false));
    assert_eq!(d2.report, d.report);
    // After a restart in the middle (busy, nothing running), it stages again.
    let restarted = Case::new(Some(i.clone()), d.report.clone(), facts("v1", "b0", None)).decide();
    assert!(matches!(restarted.start, Some(Work::Stage { .. })));
    // Finished: reported once, then nothing more.
    let outcome = Outcome { token: tok("s1"), result: Ok(()) };
    let finished =
        Case { outcome: Some(outcome), ..Case::new(Some(i.clone()), d.report.clone(), facts("v1", "b0", Some("v2"))) };
    let done = finished.decide();
    assert_eq!((done.report.state, done.start), (Some(AgentState::Done), None));
    assert_eq!(Case::new(Some(i), done.report.clone(), facts("v1", "b0", Some("v2"))).decide().report, done.report);
}

#[test]
fn an_already_staged_target_is_reported_done_at_once() {
    let i = intent(Step::Stage, "s1");
    let d = Case::new(Some(i), reported(AgentState::Busy, "s1"), facts("v1", "b0", Some("v2"))).decide();
    assert_eq!(d.start, None);
    assert_eq!(d.report.state, Some(AgentState::Done));
}

#[test]
fn a_failed_stage_is_reported_with_its_message() {
    let outcome = Outcome { token: tok("s1"), result: Err("target v2 is not offered".into()) };
    let case = Case {
        outcome: Some(outcome),
        ..Case::new(Some(intent(Step::Stage, "s1")), reported(AgentState::Busy, "s1"), facts("v1", "b0", None))
    };
    let d = case.decide();
    assert_eq!(d.report.state, Some(AgentState::Error));
    assert_eq!(d.report.message.as_deref(), Some("target v2 is not offered"));
    assert_eq!(d.start, None);
}

#[test]
fn an_outcome_for_another_intent_is_not_reported() {
    let outcome = Outcome { token: tok("s0"), result: Err("old failure".into()) };
    let case = Case {
        outcome: Some(outcome),
        ..Case::new(Some(intent(Step::Stage, "s1")), reported(AgentState::Error, "s0"), facts("v1", "b0", None))
    };
    let d = case.decide();
    assert_eq!((d.report.state, d.report.token), (Some(AgentState::Busy), Some(tok("s1"))));
    assert_eq!(d.start, Some(stage_work("s1")));
}

#[test]
fn a_transient_error_is_reported_in_the_message_without_changing_the_state() {
    let running = Running { work: stage_work("s1"), phase: Phase::Working { transient: Some("HTTP 503".into()) } };
    let case = Case {
        running: Some(running),
        ..Case::new(Some(intent(Step::Stage, "s1")), reported(AgentState::Busy, "s1"), facts("v1", "b0", None))
    };
    let d = case.decide();
    assert_eq!((d.report.state, d.report.message.as_deref()), (Some(AgentState::Busy), Some("HTTP 503")));
    assert_eq!((d.start, d.stop_running), (None, false));
    // Once it succeeded, the message goes with the busy state.
    let outcome = Outcome { token: tok("s1"), result: Ok(()) };
    let done = Case {
        outcome: Some(outcome),
        ..Case::new(Some(intent(Step::Stage, "s1")), d.report, facts("v1", "b0", Some("v2")))
    };
    let d = done.decide();
    assert_eq!((d.report.state, d.report.message), (Some(AgentState::Done), None));
}

#[test]
fn staging_stops_when_the_intent_moves_on_and_the_target_is_released() {
    let staging = || working(stage_work("s1"));
    let busy = reported(AgentState::Busy, "s1");
    // Released (intent removed), timed out (failed), or a new target: stop and release.
    let mut new_target = intent(Step::Stage, "s2");
    new_target.target = "v3".into();
    for next in [None, Some(intent(Step::Failed, "f1")), Some(new_target)] {
        let case = Case {
            running: Some(staging()),
            prepared: Some("v2".into()),
            ..Case::new(next.clone(), busy.clone(), facts("v1", "b0", None))
        };
        let d = case.decide();
        assert!(d.stop_running, "{next:?}");
        assert_eq!(d.start, Some(Work::Release { target: "v2".into() }), "{next:?}");
    }
    // Released: the stale busy state goes too.
    let released = Case {
        running: Some(staging()),
        prepared: Some("v2".into()),
        ..Case::new(None, busy.clone(), facts("v1", "b0", None))
    };
    let d = released.decide();
    assert_eq!((d.report.state, d.report.token), (Some(AgentState::Idle), None));
    // The same target under a new token: stop the old stage, keep what it staged, stage anew.
    let again = Case {
        running: Some(staging()),
        prepared: Some("v2".into()),
        ..Case::new(Some(intent(Step::Stage, "s2")), busy, facts("v1", "b0", None))
    };
    let d = again.decide();
    assert!(d.stop_running);
    assert_eq!(d.start, Some(stage_work("s2")));
}

#[test]
fn a_staged_target_is_kept_while_the_node_drains_and_reboots_into_it() {
    for step in [Step::Drain, Step::Reboot] {
        let case = Case {
            prepared: Some("v2".into()),
            ..Case::new(Some(intent(step, "x")), reported(AgentState::Done, "s1"), facts("v1", "b0", Some("v2")))
        };
        assert!(!matches!(case.decide().start, Some(Work::Release { .. })), "{step}");
    }
}

#[test]
fn a_release_is_never_cancelled_and_goes_before_new_work() {
    let case = Case {
        running: Some(working(Work::Release { target: "v1".into() })),
        ..Case::new(Some(intent(Step::Stage, "s1")), AgentReport::default(), facts("v0", "b0", None))
    };
    let d = case.decide();
    assert!(!d.stop_running);
    assert_eq!(d.start, Some(stage_work("s1")), "started once the release ended");
    let pending = Case {
        prepared: Some("v1".into()),
        ..Case::new(Some(intent(Step::Stage, "s1")), AgentReport::default(), facts("v0", "b0", None))
    };
    assert_eq!(pending.decide().start, Some(Work::Release { target: "v1".into() }));
}

#[test]
fn a_reboot_is_asked_for_until_the_boot_id_changes() {
    let i = intent(Step::Reboot, "r1");
    let before = reported(AgentState::Done, "s1");
    let d = Case::new(Some(i.clone()), before.clone(), facts("v1", "b0", Some("v2"))).decide();
    assert_eq!(d.start, Some(reboot_work("r1")));
    assert_eq!(d.report, before, "no write before the reboot");
    // Asked for, not happened yet: wait.
    let requested = Running { work: reboot_work("r1"), phase: Phase::RebootRequested };
    let waiting = Case {
        running: Some(requested.clone()),
        ..Case::new(Some(i.clone()), before.clone(), facts("v1", "b0", Some("v2")))
    };
    let d = waiting.decide();
    assert_eq!((d.start, d.stop_running), (None, false));
    // The facts cannot be read while the host reboots: no problem to report.
    let down = Case { facts: Err(("connection refused".into(), false)), ..waiting };
    assert_eq!(down.decide().report, before);
    // After the reboot (new boot ID): done with the new facts, and the wait is over.
    let after =
        Case { running: Some(requested), ..Case::new(Some(i.clone()), before.clone(), facts("v2", "b1", None)) };
    let d = after.decide();
    assert!(d.stop_running);
    assert_eq!((d.report.state, d.report.token.clone()), (Some(AgentState::Done), Some(tok("r1"))));
    assert_eq!((d.report.os_image.as_deref(), d.report.boot_id.clone()), (Some("v2"), Some(boot("b1"))));
    // A new process after the reboot decides the same without memory.
    assert_eq!(Case::new(Some(i), before, facts("v2", "b1", None)).decide().report, d.report);
}

#[test]
fn booting_the_wrong_image_is_an_error() {
    let d =
        Case::new(Some(intent(Step::Reboot, "r1")), reported(AgentState::Done, "s1"), facts("v1", "b1", None)).decide();
    assert_eq!(d.report.state, Some(AgentState::Error));
    assert!(d.report.message.unwrap().contains("booted v1 instead of v2"));
}

#[test]
fn a_node_the_controller_did_not_cordon_is_never_rebooted() {
    for (cordon, why) in [
        (Cordon { unschedulable: false, by_controller: true }, "the node is schedulable"),
        (Cordon { unschedulable: false, by_controller: false }, "the node is schedulable"),
        (Cordon { unschedulable: true, by_controller: false }, "not by the update-operator controller"),
    ] {
        let case = Case {
            cordon,
            ..Case::new(
                Some(intent(Step::Reboot, "r1")),
                reported(AgentState::Done, "s1"),
                facts("v1", "b0", Some("v2")),
            )
        };
        let d = case.decide();
        assert_eq!(d.start, None, "{cordon:?}");
        assert_eq!((d.report.state, d.report.token.clone()), (Some(AgentState::Error), Some(tok("r1"))));
        let message = d.report.message.unwrap();
        assert!(message.starts_with("refusing to reboot into v2: ") && message.contains(why), "{message}");
    }
}

#[test]
fn a_reboot_being_prepared_stops_when_the_node_is_uncordoned_but_one_asked_for_does_not() {
    let uncordoned = Cordon { unschedulable: false, by_controller: true };
    let preparing = Case {
        cordon: uncordoned,
        running: Some(working(reboot_work("r1"))),
        ..Case::new(Some(intent(Step::Reboot, "r1")), reported(AgentState::Done, "s1"), facts("v1", "b0", Some("v2")))
    };
    let d = preparing.decide();
    assert!(d.stop_running);
    assert_eq!(d.report.state, Some(AgentState::Error));
    let asked = Case { running: Some(Running { work: reboot_work("r1"), phase: Phase::RebootRequested }), ..preparing };
    let d = asked.decide();
    assert!(!d.stop_running);
    assert_eq!(d.report.state, Some(AgentState::Done), "verified as any other reboot");
}

#[test]
fn a_reboot_retrying_after_a_transient_error_says_so() {
    let running =
        Running { work: reboot_work("r1"), phase: Phase::Working { transient: Some("the API is down".into()) } };
    let case = Case {
        running: Some(running),
        ..Case::new(Some(intent(Step::Reboot, "r1")), reported(AgentState::Done, "s1"), facts("v1", "b0", Some("v2")))
    };
    let d = case.decide();
    assert_eq!((d.report.state, d.report.token.clone()), (Some(AgentState::Busy), Some(tok("r1"))));
    assert_eq!(d.report.message.as_deref(), Some("the API is down"));
    let failed =
        Case { outcome: Some(Outcome { token: tok("r1"), result: Err("refused".into()) }), running: None, ..case };
    assert_eq!(failed.decide().report.state, Some(AgentState::Error));
}

#[test]
fn unreadable_host_facts_are_reported_and_fail_only_a_step_they_block_for_good() {
    let unreadable = |permanent| Err(("GET /os: connection refused".to_owned(), permanent));
    // No intent: idle with the problem.
    let idle = Case { facts: unreadable(false), ..Case::new(None, AgentReport::default(), facts("v1", "b0", None)) };
    let d = idle.decide();
    assert_eq!(d.report.state, Some(AgentState::Idle));
    assert_eq!(d.report.message.as_deref(), Some("cannot read the host's facts: GET /os: connection refused"));
    assert_eq!(d.report.os_image, None, "nothing is made up");
    // A report about an intent keeps its state and gains the problem.
    let after_done =
        Case { facts: unreadable(true), ..Case::new(None, reported(AgentState::Done, "s1"), facts("v1", "b0", None)) };
    let d = after_done.decide();
    assert_eq!((d.report.state, d.report.os_image.as_deref()), (Some(AgentState::Done), Some("v1")));
    assert!(d.report.message.is_some());
    // Readable again: the message goes.
    let healed = Case::new(None, d.report, facts("v1", "b0", None)).decide();
    assert_eq!((healed.report.state, healed.report.message), (Some(AgentState::Done), None));
    // A stage waits while the problem may pass, and fails when it will not.
    for (permanent, state) in [(false, AgentState::Busy), (true, AgentState::Error)] {
        for step in [Step::Stage, Step::Reboot, Step::Fetch] {
            let case = Case {
                facts: unreadable(permanent),
                ..Case::new(Some(intent(step, "x1")), reported(AgentState::Done, "s0"), facts("v1", "b0", None))
            };
            let d = case.decide();
            assert_eq!((d.report.state, d.start.clone()), (Some(state), None), "{step} permanent={permanent}");
            assert!(d.report.message.unwrap().starts_with("cannot read the host's facts: "));
        }
    }
}

#[test]
fn steps_the_agent_does_not_act_on_change_nothing() {
    for step in [Step::Drain, Step::Done, Step::Failed, Step::Blocked, Step::Replace] {
        let current = reported(AgentState::Done, "s1");
        let d = Case::new(Some(intent(step, "x")), current.clone(), facts("v1", "b0", None)).decide();
        assert_eq!(d, Decision { report: current, start: None, stop_running: false }, "{step}");
    }
}

const COMPONENTS: &str = "k8s-components-sha256-ab12";

fn kubeadm_work(token: &str) -> Work {
    let kubeadm = KubeadmIntent { components: COMPONENTS.into(), role: Some(KubeadmRole::Node) };
    Work::KubeadmUpgrade { token: tok(token), target: "v2".into(), kubeadm }
}

#[test]
fn a_kubeadm_upgrade_runs_once_without_a_cordon_and_reports_its_outcome() {
    let i = intent(Step::KubeadmUpgrade, "k1");
    // The first control-plane node upgrades uncordoned: the agent needs no cordon for this step.
    let uncordoned = Case {
        cordon: Cordon::default(),
        ..Case::new(Some(i.clone()), reported(AgentState::Done, "old"), facts("v1", "b0", None))
    };
    let d = uncordoned.decide();
    assert_eq!(d.start, Some(kubeadm_work("k1")));
    assert_eq!((d.report.state, d.report.token.clone()), (Some(AgentState::Busy), Some(tok("k1"))));
    let running = Case {
        running: Some(working(kubeadm_work("k1"))),
        ..Case::new(Some(i.clone()), d.report.clone(), facts("v1", "b0", None))
    };
    let d2 = running.decide();
    assert_eq!((d2.start, d2.stop_running, d2.report.clone()), (None, false, d.report.clone()));
    // A restart in the middle runs it again (kubeadm's upgrade to the version a node runs changes nothing).
    let restarted = Case::new(Some(i.clone()), d.report.clone(), facts("v1", "b0", None)).decide();
    assert_eq!(restarted.start, Some(kubeadm_work("k1")));
    let failed = Outcome { token: tok("k1"), result: Err("kubeadm exited with status 1".into()) };
    let d3 = Case { outcome: Some(failed), ..Case::new(Some(i.clone()), d.report.clone(), facts("v1", "b0", None)) }
        .decide();
    assert_eq!(
        (d3.report.state, d3.report.message.as_deref()),
        (Some(AgentState::Error), Some("kubeadm exited with status 1"))
    );
    assert_eq!(d3.start, None);
    let ok = Outcome { token: tok("k1"), result: Ok(()) };
    let d4 = Case { outcome: Some(ok), ..Case::new(Some(i), d.report, facts("v1", "b0", None)) }.decide();
    assert_eq!((d4.report.state, d4.start), (Some(AgentState::Done), None));
}

#[test]
fn a_kubeadm_upgrade_the_controller_gave_up_is_stopped() {
    let running = working(kubeadm_work("k1"));
    for intent in [None, Some(intent(Step::Failed, "k2")), Some(intent(Step::KubeadmUpgrade, "k2"))] {
        let case = Case {
            running: Some(running.clone()),
            ..Case::new(intent, reported(AgentState::Busy, "k1"), facts("v1", "b0", None))
        };
        assert!(case.decide().stop_running);
    }
}

#[test]
fn a_kubeadm_or_fetch_intent_without_components_or_a_kubeadm_intent_without_role_is_an_error() {
    for step in [Step::KubeadmUpgrade, Step::Fetch] {
        let mut i = intent(step, "k1");
        i.kubeadm = None;
        let d = Case::new(Some(i), AgentReport::default(), facts("v1", "b0", None)).decide();
        assert_eq!(d.report.state, Some(AgentState::Error), "{step}");
        assert_eq!(d.report.message.as_deref(), Some("the intent names no components ConfigMap"), "{step}");
        assert_eq!(d.start, None, "{step}");
    }
    let mut i = intent(Step::KubeadmUpgrade, "k1");
    i.kubeadm = Some(KubeadmIntent { components: COMPONENTS.into(), role: None });
    let d = Case::new(Some(i), AgentReport::default(), facts("v1", "b0", None)).decide();
    assert_eq!(
        (d.report.state, d.report.message.as_deref()),
        (Some(AgentState::Error), Some("the intent names no kubeadm role"))
    );
    assert_eq!(d.start, None);
}

#[test]
fn malformed_controller_annotations_start_stop_and_undo_nothing() {
    let current = reported(AgentState::Busy, "s1");
    let running = working(stage_work("s1"));
    let f = facts("v1", "b0", None);
    let d = decide(&Observation {
        controller: Controller::Malformed,
        current: &current,
        host: HostView::Known(&f),
        running: Some(&running),
        outcome: None,
        prepared: Some("v2"),
        fetched: Some("v2"),
    });
    assert_eq!(d, Decision { report: current, start: None, stop_running: false });
}
