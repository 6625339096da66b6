//! Gates: the rules that stop a whole rollout from starting new nodes. They are checked in a fixed
//! order ([`GATES`]); the first closed one is the rollout's hold, its reason the `Progressing`
//! condition's reason and an Event on the NodeVersion. Nodes in flight finish either way.

use super::rollback::Spent;
use super::window::{ScheduleState, schedule_state};
use super::{Counts, Hold, Policy, Reason, Rollout, SpecState, ValidSpec};
use jiff::Timestamp;
use shared::crd::DrainTimeoutAction;

/// What the gates look at.
struct Context<'a> {
    rollout: &'a Rollout,
    /// The spec the rollout acts on (None: no valid spec is known).
    spec: Option<&'a ValidSpec>,
    counts: &'a Counts,
    /// What the flow that asks moves nodes to, for messages: the image, or `Kubernetes vX.Y.Z`.
    target: Option<&'a str>,
    /// Nodes blocked because their drain timed out or failed.
    drain_timeouts: usize,
    /// Why the asking flow's starts wait for the cluster-autoscaler (`None`: they need not).
    autoscaler: Option<&'a str>,
    now: Timestamp,
}

/// A closed gate: why, and when it may open on its own.
type Closed = (Hold, Option<Timestamp>);

/// The gates, in the order they are checked (the first closed one wins):
const GATES: [fn(&Context<'_>) -> Option<Closed>; 7] = [
    // the current spec is invalid: nothing new until it is fixed;
    invalid_spec,
    // spec.rollout.paused;
    paused,
    // outside the maintenance window (opens again on its own);
    outside_window,
    // as many nodes failed for this target as the failure budget allows (with onFailure: Rollback, the rollback
    // starts, or has failed);
    failure_budget,
    // a health check does not pass (or failed past its timeout: the rollout is stopped);
    health_checks,
    // a drain timed out and onDrainTimeout is Stop;
    stop_on_drain_timeout,
    // the flow's new nodes would race a cluster-autoscaler not confirmed down.
    waiting_for_autoscaler,
];

/// The first closed gate of `rollout`, if any.
///
/// `target` names what the asking flow moves nodes to (`None`: the spec's image), so that a failed Kubernetes
/// upgrade is not reported as a failed image update. `autoscaler` says why the flow's starts wait for the
/// cluster-autoscaler, if they do.
pub(super) fn closed(
    rollout: &Rollout,
    spec: Option<&ValidSpec>,
    target: Option<&str>,
    counts: &Counts,
    drain_timeouts: usize,
    autoscaler: Option<&str>,
    now: Timestamp,
) -> Option<Closed> {
    let context = Context { rollout, spec, counts, target, drain_timeouts, autoscaler, now };
    GATES.iter().find_map(|gate| gate(&context))
}

/// When an open gate may close on its own: the end of the open maintenance windows, or the start of an exclusion.
pub(super) fn next_change(policy: &Policy, now: Timestamp) -> Option<Timestamp> {
    match schedule_state(&policy.windows, &policy.exclusions, now) {
        ScheduleState::Open { closes_at } => closes_at,
        ScheduleState::OutsideWindows { .. } | ScheduleState::Excluded { .. } => None,
    }
}

fn invalid_spec(c: &Context<'_>) -> Option<Closed> {
    let SpecState::Invalid { errors, .. } = &c.rollout.spec else { return None };
    let consequence = match c.spec {
        Some(spec) => format!(
            "no node starts; nodes in flight finish under generation {} (image {})",
            spec.generation, spec.target
        ),
        None => "no earlier valid spec is known, so this NodeVersion touches no node".to_owned(),
    };
    let message = format!("the NodeVersion spec is invalid: {}; {consequence}", errors.join("; "));
    Some((Hold::new(Reason::InvalidSpec, message), None))
}

fn paused(c: &Context<'_>) -> Option<Closed> {
    c.spec?.policy.paused.then(|| (Hold::new(Reason::Paused, "spec.rollout.paused is true"), None))
}

fn outside_window(c: &Context<'_>) -> Option<Closed> {
    let policy = &c.spec?.policy;
    let when = |t: Option<Timestamp>| t.map_or("never".to_owned(), |t| t.to_string());
    match schedule_state(&policy.windows, &policy.exclusions, c.now) {
        ScheduleState::Open { .. } => None,
        ScheduleState::OutsideWindows { opens_at } => {
            let named: Vec<String> =
                policy.windows.iter().map(|w| format!("{:?} ({})", w.schedule, w.zone_name)).collect();
            let message = format!(
                "outside the maintenance window{} {}; it opens next at {}",
                if named.len() > 1 { "s" } else { "" },
                named.join(", "),
                when(opens_at)
            );
            Some((Hold::new(Reason::OutsideMaintenanceWindow, message), opens_at))
        }
        ScheduleState::Excluded { name, end, opens_at } => {
            let message = format!(
                "inside the maintenance exclusion {name:?} until {end}; new nodes may start next at {}",
                when(opens_at)
            );
            Some((Hold::new(Reason::MaintenanceExclusion, message), opens_at))
        }
    }
}

fn failure_budget(c: &Context<'_>) -> Option<Closed> {
    let spec = c.spec?;
    if c.counts.failed < spec.policy.failure_budget {
        return None;
    }
    let failed = format!(
        "{} node(s) failed to update to {}; the failure budget is {}",
        c.counts.failed,
        c.target.unwrap_or(&spec.target),
        spec.policy.failure_budget
    );
    // With `onFailure: Rollback`, the rollback starts here, or fails here (`super::rollback`).
    let hold = match super::rollback::on_spent(c.rollout, spec, c.target.is_none()) {
        Spent::Stop { no_rollback: None } => Hold::new(Reason::FailureBudgetExhausted, failed),
        Spent::Stop { no_rollback: Some(why) } => Hold::new(Reason::FailureBudgetExhausted, format!("{failed}; {why}")),
        Spent::Rollback { to } => Hold::new(
            Reason::RollbackStarted,
            format!(
                "{failed}; onFailure is Rollback: the nodes it updated go back to {to}, the last image every node ran"
            ),
        ),
        Spent::RollbackFailed { from, to } => Hold::new(
            Reason::RollbackFailed,
            format!(
                "the rollback from {from} to {to} failed: {failed}; it stops (the nodes back on {to} stay; change \
                 spec.image to roll out again)"
            ),
        ),
    };
    Some((hold, None))
}

fn health_checks(c: &Context<'_>) -> Option<Closed> {
    super::health::hold(&c.spec?.policy.health_checks, &c.rollout.health, c.now)
}

fn stop_on_drain_timeout(c: &Context<'_>) -> Option<Closed> {
    (c.spec?.policy.on_drain_timeout == DrainTimeoutAction::Stop && c.drain_timeouts > 0).then(|| {
        let message = format!("{} node(s) could not be drained in time and onDrainTimeout is Stop", c.drain_timeouts);
        (Hold::new(Reason::StoppedOnDrainTimeout, message), None)
    })
}

fn waiting_for_autoscaler(c: &Context<'_>) -> Option<Closed> {
    c.spec?;
    let why = c.autoscaler?;
    let what = c.target.unwrap_or("the update");
    let message =
        format!("{why}; no node starts its upgrade to {what} before (a node it adds would join on the old one)");
    Some((Hold::new(Reason::WaitingForAutoscaler, message), None))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::tests::{rollout_with, t};

    fn counts(failed: u32) -> Counts {
        Counts { total: 3, outdated: 2, failed, ..Default::default() }
    }

    #[test]
    fn every_gate_is_open_for_a_plain_valid_spec() {
        let rollout = rollout_with(Policy::default());
        let spec = rollout.spec.acting().cloned();
        assert_eq!(closed(&rollout, spec.as_deref(), None, &counts(0), 0, None, t(0)), None);
    }

    #[test]
    fn the_first_closed_gate_in_order_wins() {
        let rollout =
            rollout_with(Policy { paused: true, on_drain_timeout: DrainTimeoutAction::Stop, ..Policy::default() });
        let spec = rollout.spec.acting().cloned();
        // Paused, the budget spent and a drain timeout with Stop: Paused comes first.
        let (hold, _) = closed(&rollout, spec.as_deref(), None, &counts(1), 1, None, t(0)).unwrap();
        assert_eq!(hold.reason, Reason::Paused);
        // An invalid spec comes before everything, and says the last valid one still finishes.
        let invalid = Rollout::new(
            "v",
            SpecState::Invalid { errors: vec!["spec.image: bad".into()], last_valid: spec.clone() },
            None,
        );
        let (hold, _) = closed(&invalid, spec.as_deref(), None, &counts(1), 1, None, t(0)).unwrap();
        assert_eq!(hold.reason, Reason::InvalidSpec);
        assert!(hold.message.contains("spec.image: bad") && hold.message.contains("generation 1"), "{}", hold.message);
        let unknown = Rollout::new("v", SpecState::Invalid { errors: vec!["x".into()], last_valid: None }, None);
        let (hold, _) = closed(&unknown, None, None, &counts(0), 0, None, t(0)).unwrap();
        assert!(hold.message.contains("touches no node"), "{}", hold.message);
    }

    #[test]
    fn a_flow_that_waits_for_the_autoscaler_is_held_after_every_other_gate() {
        let rollout = rollout_with(Policy::default());
        let spec = rollout.spec.acting().cloned();
        let waiting = Some("the cluster-autoscaler is not confirmed down");
        let (hold, wake) =
            closed(&rollout, spec.as_deref(), Some("Kubernetes v1.34.1"), &counts(0), 0, waiting, t(0)).unwrap();
        assert_eq!((hold.reason, wake), (Reason::WaitingForAutoscaler, None));
        assert!(hold.message.contains("not confirmed down") && hold.message.contains("Kubernetes v1.34.1"));
        // The failure budget comes first.
        let (hold, _) = closed(&rollout, spec.as_deref(), None, &counts(1), 0, waiting, t(0)).unwrap();
        assert_eq!(hold.reason, Reason::FailureBudgetExhausted);
    }

    #[test]
    fn without_a_spec_only_the_invalid_spec_gate_can_close() {
        let valid = rollout_with(Policy::default());
        assert_eq!(closed(&valid, None, None, &counts(5), 5, None, t(0)), None);
    }
}
