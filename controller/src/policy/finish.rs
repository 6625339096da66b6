//! Rule 11 of the pipeline (issue 34 item 3): no node's disruption starts that cannot finish before the maintenance
//! period open now ends.
//!
//! A node's disruption takes what its remaining steps take at their 95th percentile, as measured on its
//! NodeVersion's nodes (`status.stepDurations[].p95Millis`, read into [`StepTimes`]): drain and reboot for a node
//! staged ahead, the new instance and the donor's drain for a replacement, drain and kubeadm upgrade for a
//! Kubernetes upgrade ([`steps`]). The open period ends when the windows open now close (followed through a
//! window that opens before the last one closes) or the next exclusion begins ([`super::window::open_until`]); no
//! windows and no exclusion ahead: it never ends. A node that would end past it does not start: the rollout is held
//! with `CannotFinishInWindow`, naming the node, its time, the period's end and when a window opens next.
//!
//! - Staging ahead goes on: it disrupts nothing, and the next window begins with its nodes staged.
//! - A step never measured (a first rollout, or a status written before the percentile was kept) makes the node's
//!   time unknown: it starts, and the window alone decides, as before.
//! - Nodes in flight finish whatever the clock says; the estimate is a percentile, not a promise.

use super::pipeline::{Flow, Start};
use super::window::{ScheduleState, open_until, schedule_state};
use super::{Hold, Policy, Reason};
use jiff::{SignedDuration, Timestamp};
use shared::crd::StepDuration;
use std::collections::BTreeMap;

/// The 95th percentile of each measured step (`status.stepDurations`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepTimes(BTreeMap<String, SignedDuration>);

impl StepTimes {
    /// The percentiles the status records; a step without one (or with a negative one) is not measured.
    pub fn from_status(durations: &[StepDuration]) -> StepTimes {
        StepTimes(
            durations
                .iter()
                .filter_map(|d| Some((d.step.clone(), SignedDuration::from_millis(d.p95_millis.filter(|m| *m >= 0)?))))
                .collect(),
        )
    }

    /// The sum of `steps`' times, with each step's own; `None` when one is not measured.
    fn of(&self, steps: &[&'static str]) -> Option<(SignedDuration, Vec<(&'static str, SignedDuration)>)> {
        let each: Vec<(&'static str, SignedDuration)> =
            steps.iter().map(|s| Some((*s, *self.0.get(*s)?))).collect::<Option<_>>()?;
        let total = each.iter().fold(SignedDuration::ZERO, |sum, (_, d)| sum.saturating_add(*d));
        Some((total, each))
    }
}

/// The steps a node of `flow` goes through from a start of kind `start` to its verification (as
/// `status.stepDurations` names them).
pub(super) fn steps(flow: &Flow, start: Start) -> &'static [&'static str] {
    match (flow, start) {
        (Flow::Image { .. }, Start::Staged) => &["drain", "reboot"],
        (Flow::Image { .. }, Start::InPlace) => &["stage", "drain", "reboot"],
        (Flow::Image { .. } | Flow::Kubernetes { .. }, Start::Replace) => &["replace", "retire"],
        (Flow::Kubernetes { .. }, Start::Staged) => &["drain", "kubeadm-upgrade"],
        (Flow::Kubernetes { .. }, Start::InPlace) => &["fetch", "drain", "kubeadm-upgrade"],
    }
}

/// When the open maintenance period ends, for the rollout's starts now.
#[derive(Debug, Clone)]
pub(super) struct Deadline<'a> {
    now: Timestamp,
    /// The end of the period open now (None: it does not end).
    ends: Option<Timestamp>,
    /// When new nodes may start next after it (None: never within the search horizon).
    reopens: Option<Timestamp>,
    times: &'a StepTimes,
}

impl<'a> Deadline<'a> {
    /// The deadline of `policy`'s windows and exclusions at `now`, with the rollout's step `times`.
    pub(super) fn new(policy: &Policy, times: &'a StepTimes, now: Timestamp) -> Deadline<'a> {
        let ends = open_until(&policy.windows, &policy.exclusions, now);
        let reopens = ends.and_then(|end| match schedule_state(&policy.windows, &policy.exclusions, end) {
            ScheduleState::Open { .. } => Some(end),
            ScheduleState::OutsideWindows { opens_at } | ScheduleState::Excluded { opens_at, .. } => opens_at,
        });
        Deadline { now, ends, reopens, times }
    }

    /// No deadline (tests, and callers without windows).
    #[cfg(test)]
    pub(super) fn none(times: &'a StepTimes) -> Deadline<'a> {
        Deadline { now: Timestamp::UNIX_EPOCH, ends: None, reopens: None, times }
    }

    /// Whether `node`, started now as `start` in `flow`, can finish before the period ends; if not, why it waits.
    pub(super) fn check(&self, node: &str, flow: &Flow, start: Start) -> Result<(), Hold> {
        let Some(ends) = self.ends else { return Ok(()) };
        let Some((needs, each)) = self.times.of(steps(flow, start)) else { return Ok(()) };
        let finishes = self.now.checked_add(needs).unwrap_or(Timestamp::MAX);
        if finishes <= ends {
            return Ok(());
        }
        let each: Vec<String> = each.iter().map(|(s, d)| format!("{s} {}", seconds(*d))).collect();
        let next = self.reopens.map_or("never, within five years".to_owned(), |t| t.to_string());
        let message = format!(
            "{node} needs about {} to finish (95th percentile: {}) and the maintenance window closes at {ends}, in \
             {}: it starts when a window opens next, at {next}",
            seconds(needs),
            each.join(", "),
            seconds(ends.duration_since(self.now))
        );
        Err(Hold::new(Reason::CannotFinishInWindow, message))
    }
}

/// `d` in whole seconds, for messages (`90s`).
fn seconds(d: SignedDuration) -> String {
    format!("{}s", d.as_secs().max(0) + i64::from(d.subsec_nanos() > 0))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn times(pairs: &[(&str, i64)]) -> StepTimes {
        let durations: Vec<StepDuration> = pairs
            .iter()
            .map(|(s, ms)| StepDuration { step: (*s).into(), samples: 3, p95_millis: Some(*ms), ..Default::default() })
            .collect();
        StepTimes::from_status(&durations)
    }

    fn at(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn deadline(times: &StepTimes, now: i64, ends: i64, reopens: i64) -> Deadline<'_> {
        Deadline { now: at(now), ends: Some(at(ends)), reopens: Some(at(reopens)), times }
    }

    fn image() -> Flow {
        Flow::Image { target: "v2".into() }
    }

    #[test]
    fn a_node_that_ends_by_the_close_starts_and_one_that_would_not_waits_named() {
        let t = times(&[("stage", 30_000), ("drain", 60_000), ("reboot", 240_000)]);
        // Staged: drain + reboot = 300 s.
        assert_eq!(deadline(&t, 0, 300, 3_600).check("w-0", &image(), Start::Staged), Ok(()));
        let held = deadline(&t, 0, 299, 3_600).check("w-0", &image(), Start::Staged).unwrap_err();
        assert_eq!(held.reason, Reason::CannotFinishInWindow);
        assert_eq!(
            held.message,
            format!(
                "w-0 needs about 300s to finish (95th percentile: drain 60s, reboot 240s) and the maintenance window \
                 closes at {}, in 299s: it starts when a window opens next, at {}",
                at(299),
                at(3_600)
            )
        );
        // Not staged: its staging counts too.
        assert!(deadline(&t, 0, 320, 3_600).check("w-0", &image(), Start::InPlace).is_err());
        assert!(deadline(&t, 0, 330, 3_600).check("w-0", &image(), Start::InPlace).is_ok());
    }

    #[test]
    fn each_flow_counts_its_own_steps() {
        let t = times(&[("drain", 10_000), ("reboot", 10_000), ("replace", 100_000), ("retire", 20_000)]);
        let d = deadline(&t, 0, 60, 3_600);
        assert!(d.check("w-0", &image(), Start::Staged).is_ok());
        assert!(d.check("w-0", &image(), Start::Replace).is_err(), "a new instance and the drain: 120 s");
        // A Kubernetes upgrade's kubeadm step is not measured: its time is not known, it starts.
        let kubernetes = Flow::Kubernetes { version: "v1.31.1".into(), apply: false, components: "cm".into() };
        assert!(d.check("w-0", &kubernetes, Start::Staged).is_ok());
        let t = times(&[("drain", 10_000), ("kubeadm-upgrade", 55_000)]);
        assert!(deadline(&t, 0, 60, 3_600).check("w-0", &kubernetes, Start::Staged).is_err());
        // Not fetched yet: its fetch counts too.
        let t = times(&[("fetch", 20_000), ("drain", 10_000), ("kubeadm-upgrade", 35_000)]);
        assert!(deadline(&t, 0, 60, 3_600).check("w-0", &kubernetes, Start::Staged).is_ok());
        assert!(deadline(&t, 0, 60, 3_600).check("w-0", &kubernetes, Start::InPlace).is_err());
    }

    #[test]
    fn the_plan_drains_no_staged_node_that_would_end_past_the_close_and_stages_on() {
        use crate::policy::budget::MaxUnavailable;
        use crate::policy::tests::{node, rollout_with, staged};
        use crate::policy::{ActionKind, Policy, plan};
        let window = crate::policy::settings::Policy::from_spec(
            &serde_json::from_value(serde_json::json!({
                "maintenanceWindow": {"schedule": "0 3 * * *", "duration": "1h"},
                "maxStaging": 2
            }))
            .unwrap(),
            Timestamp::UNIX_EPOCH,
        )
        .unwrap();
        let policy = Policy { max_unavailable: MaxUnavailable::Count(1), ..window };
        let mut rollout = rollout_with(policy);
        rollout.step_times = times(&[("drain", 60_000), ("reboot", 240_000)]);
        let nodes = [staged(node("b")), node("c")];
        let run =
            |now: &str| plan(&nodes, std::slice::from_ref(&rollout), None, now.parse().unwrap()).rollouts.remove(0);
        // 5 minutes before the close: b's turn (300 s) fits to the second.
        let p = run("2026-11-22T03:55:00Z");
        assert!(
            p.actions.iter().any(|a| a.node == "b" && matches!(a.kind, ActionKind::Drain { .. })),
            "{:?}",
            p.actions
        );
        // A second later it does not: no drain, the rollout says why; c is staged ahead all the same.
        let p = run("2026-11-22T03:55:01Z");
        assert!(!p.actions.iter().any(|a| matches!(a.kind, ActionKind::Drain { .. })), "{:?}", p.actions);
        assert!(
            p.actions.iter().any(|a| a.node == "c" && matches!(a.kind, ActionKind::Stage { .. })),
            "{:?}",
            p.actions
        );
        let hold = p.hold.unwrap();
        assert_eq!(hold.reason, Reason::CannotFinishInWindow);
        assert!(hold.message.starts_with("b needs about 300s to finish"), "{}", hold.message);
        assert!(hold.message.ends_with("at 2026-11-23T03:00:00Z"), "{}", hold.message);
        // The plan wakes when the window closes (then the window's own gate names the next opening).
        assert_eq!(p.wake_at, Some("2026-11-22T04:00:00Z".parse().unwrap()));
    }

    #[test]
    fn without_an_end_or_without_measurements_nothing_waits() {
        let t = times(&[("drain", 10_000), ("reboot", 10_000)]);
        assert!(Deadline::none(&t).check("w-0", &image(), Start::Staged).is_ok());
        let unmeasured = times(&[("drain", 10_000)]);
        assert!(deadline(&unmeasured, 0, 1, 3_600).check("w-0", &image(), Start::Staged).is_ok());
        // A status without percentiles (written by an older controller) measures nothing.
        let old = StepTimes::from_status(&[StepDuration {
            step: "drain".into(),
            samples: 9,
            mean_millis: 5,
            ..Default::default()
        }]);
        assert_eq!(old, StepTimes::default());
    }
}
