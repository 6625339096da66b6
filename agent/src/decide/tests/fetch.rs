//! The fetch ahead of a Kubernetes upgrade (`intent=fetch`): run once, given up, kept through the drain and the
//! kubeadm step of its version, discarded after.

use super::*;

fn fetch_work(token: &str) -> Work {
    let kubeadm = KubeadmIntent { components: COMPONENTS.into(), role: None };
    Work::Fetch { token: tok(token), target: "v2".into(), kubeadm }
}

fn discard(target: &str) -> Option<Work> {
    Some(Work::Discard { target: target.into() })
}

#[test]
fn a_fetch_runs_once_without_a_cordon_or_a_shortcut_and_reports_its_outcome() {
    let i = intent(Step::Fetch, "f1");
    // Nothing is disrupted: no cordon needed; what the host reports says nothing about what it fetched.
    let mut known = facts("v1", "b0", Some("v2"));
    known.components_hash = Some(ComponentsHash::parse("k", &format!("sha256:{}", "a".repeat(64))).unwrap());
    let uncordoned =
        Case { cordon: Cordon::default(), ..Case::new(Some(i.clone()), reported(AgentState::Done, "old"), known) };
    let d = uncordoned.decide();
    assert_eq!(d.start, Some(fetch_work("f1")));
    assert_eq!((d.report.state, d.report.token.clone()), (Some(AgentState::Busy), Some(tok("f1"))));
    let running = Case {
        running: Some(working(fetch_work("f1"))),
        fetched: Some("v2".into()),
        ..Case::new(Some(i.clone()), d.report.clone(), facts("v1", "b0", None))
    };
    let d2 = running.decide();
    assert_eq!((d2.start, d2.stop_running, d2.report.clone()), (None, false, d.report.clone()));
    // A transient error shows in the message while busy.
    let retrying = Running { work: fetch_work("f1"), phase: Phase::Working { transient: Some("HTTP 503".into()) } };
    let d3 = Case { running: Some(retrying), ..running }.decide();
    assert_eq!((d3.report.state, d3.report.message.as_deref()), (Some(AgentState::Busy), Some("HTTP 503")));
    // A restart in the middle fetches again (what was fetched and verifies is not downloaded twice).
    let restarted = Case::new(Some(i.clone()), d.report.clone(), facts("v1", "b0", None)).decide();
    assert_eq!(restarted.start, Some(fetch_work("f1")));
    let failed = Outcome { token: tok("f1"), result: Err("a hash mismatch".into()) };
    let d4 = Case {
        outcome: Some(failed),
        fetched: Some("v2".into()),
        ..Case::new(Some(i.clone()), d.report.clone(), facts("v1", "b0", None))
    }
    .decide();
    assert_eq!((d4.report.state, d4.report.message.as_deref()), (Some(AgentState::Error), Some("a hash mismatch")));
    assert_eq!(d4.start, None, "kept while the intent is the fetch");
    let ok = Outcome { token: tok("f1"), result: Ok(()) };
    let d5 = Case {
        outcome: Some(ok),
        fetched: Some("v2".into()),
        ..Case::new(Some(i.clone()), d.report.clone(), facts("v1", "b0", None))
    }
    .decide();
    assert_eq!((d5.report.state, d5.start), (Some(AgentState::Done), None));
    // Reported: nothing more.
    let after = Case { fetched: Some("v2".into()), ..Case::new(Some(i), d5.report.clone(), facts("v1", "b0", None)) };
    assert_eq!(after.decide(), Decision { report: d5.report, start: None, stop_running: false });
}

#[test]
fn a_fetch_the_controller_gave_up_is_stopped_and_what_it_fetched_discarded() {
    let busy = reported(AgentState::Busy, "f1");
    let mut other_version = intent(Step::Fetch, "f2");
    other_version.target = "v3".into();
    for next in [None, Some(intent(Step::Failed, "x1")), Some(intent(Step::Stage, "s1")), Some(other_version)] {
        let case = Case {
            running: Some(working(fetch_work("f1"))),
            fetched: Some("v2".into()),
            ..Case::new(next.clone(), busy.clone(), facts("v1", "b0", None))
        };
        let d = case.decide();
        assert!(d.stop_running, "{next:?}");
        assert_eq!(d.start, discard("v2"), "{next:?}");
    }
    // The same version under a new token: stop the old fetch, keep what it fetched, fetch anew.
    let again = Case {
        running: Some(working(fetch_work("f1"))),
        fetched: Some("v2".into()),
        ..Case::new(Some(intent(Step::Fetch, "f2")), busy, facts("v1", "b0", None))
    };
    let d = again.decide();
    assert!(d.stop_running);
    assert_eq!(d.start, Some(fetch_work("f2")));
}

#[test]
fn fetched_components_are_kept_through_the_drain_and_the_kubeadm_upgrade_of_their_version_only() {
    let done = reported(AgentState::Done, "f1");
    for step in [Step::Fetch, Step::Drain, Step::KubeadmUpgrade] {
        let case = Case {
            fetched: Some("v2".into()),
            ..Case::new(Some(intent(step, "x")), done.clone(), facts("v1", "b0", None))
        };
        assert_ne!(case.decide().start, discard("v2"), "{step}");
    }
    // A drain for another target (an image), the end of the upgrade, a failure, a release: discarded.
    let mut image_drain = intent(Step::Drain, "d1");
    image_drain.target = "os-v3".into();
    for next in [Some(image_drain), Some(intent(Step::Done, "x")), Some(intent(Step::Failed, "x")), None] {
        let case =
            Case { fetched: Some("v2".into()), ..Case::new(next.clone(), done.clone(), facts("v1", "b0", None)) };
        assert_eq!(case.decide().start, discard("v2"), "{next:?}");
    }
}

#[test]
fn fetched_components_are_discarded_once_the_kubeadm_upgrade_succeeded_and_kept_when_it_failed() {
    let i = intent(Step::KubeadmUpgrade, "k1");
    let busy = reported(AgentState::Busy, "k1");
    let with = |outcome: Result<(), String>| Case {
        outcome: Some(Outcome { token: tok("k1"), result: outcome }),
        fetched: Some("v2".into()),
        ..Case::new(Some(i.clone()), busy.clone(), facts("v1", "b0", None))
    };
    let d = with(Ok(())).decide();
    assert_eq!((d.report.state, d.start), (Some(AgentState::Done), discard("v2")));
    let d = with(Err("kubeadm exited with status 1".into())).decide();
    assert_eq!((d.report.state, d.start), (Some(AgentState::Error), None));
    // Without the outcome (a restarted agent), the report says the upgrade is done.
    let reported_done = Case {
        fetched: Some("v2".into()),
        ..Case::new(Some(i.clone()), reported(AgentState::Done, "k1"), facts("v1", "b0", None))
    };
    assert_eq!(reported_done.decide().start, discard("v2"));
}

#[test]
fn a_discard_is_never_cancelled_and_goes_before_new_work() {
    let mut other = intent(Step::Fetch, "f2");
    other.target = "v3".into();
    let running = Case {
        running: Some(working(Work::Discard { target: "v2".into() })),
        ..Case::new(Some(other.clone()), AgentReport::default(), facts("v1", "b0", None))
    };
    let d = running.decide();
    assert!(!d.stop_running);
    assert!(
        matches!(d.start, Some(Work::Fetch { ref target, .. }) if target == "v3"),
        "started once the discard ended"
    );
    let pending =
        Case { fetched: Some("v2".into()), ..Case::new(Some(other), AgentReport::default(), facts("v1", "b0", None)) };
    let d = pending.decide();
    assert_eq!(d.start, discard("v2"));
    assert_eq!(d.report.state, Some(AgentState::Busy), "the new fetch is announced, and starts after the discard");
}
