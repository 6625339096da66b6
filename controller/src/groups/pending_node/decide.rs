//! What a PendingNode's controller does next: a pure function of the PendingNode, its instance's state as the cloud
//! gave it and its Node ([`decide`]), with the conditions, deadlines and Events it leads to.

use super::super::condition::{self, Wanted};
use super::super::retry_delay;
use super::super::scaling_group::EventSpec;
use super::pace::poll_interval;
use crate::nodes::SlimNode;
use crate::reason::Reason;
use cloud::{InstanceState, ProviderId};
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Node;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Resource, ResourceExt};
use shared::crd::{CspState, PendingNode, PendingNodeGoal};
use shared::protocol::keys;
use std::time::Duration;
/// Condition type: True once a joining instance was given up (it did not join by its deadline, or the cloud
/// failed it) and deleted: a failed replacement. Stays True after the goal switched to `Leave`.
pub const JOIN_FAILED: &str = "JoinFailed";
/// How often a failed join's terminated record looks again whether its donor has seen the failure.
pub(super) const DONOR_RECHECK: Duration = Duration::from_secs(2);
/// Condition type: True when a leaving instance was not terminated by its deadline.
pub const LEAVE_OVERDUE: &str = "LeaveOverdue";
/// Condition type: True when the last cloud calls for the instance succeeded; False names the error.
pub const SYNCED: &str = "Synced";

/// Whether the instance's Node is registered and Ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeFact {
    /// No Node carries the instance's provider ID.
    Absent,
    /// The Node exists and is not Ready (or has not reported).
    NotReady,
    /// The Node exists and is Ready.
    Ready,
}

/// Why a joining instance was given up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinFailure {
    /// Its deadline passed before its Node was Ready.
    DeadlineExceeded,
    /// The cloud reports it `Failed`: it does not become Ready by itself.
    InstanceFailed,
    /// The cloud reports it terminated (or does not know it): it cannot join.
    InstanceGone,
}

impl JoinFailure {
    /// PascalCase, as condition reasons.
    pub fn as_str(self) -> &'static str {
        match self {
            JoinFailure::DeadlineExceeded => "DeadlineExceeded",
            JoinFailure::InstanceFailed => "InstanceFailed",
            JoinFailure::InstanceGone => "InstanceGone",
        }
    }
}

/// What the controller knows of a PendingNode at one moment; the input of [`decide`].
#[derive(Debug)]
pub struct Facts<'a> {
    /// The goal.
    pub goal: PendingNodeGoal,
    /// `status.reachedGoal` as recorded.
    pub reached_goal: bool,
    /// `spec.deadline`, or the creation time plus the goal's default timeout.
    pub deadline: Timestamp,
    /// When the PendingNode was created (polls slow down as it ages).
    pub created: Timestamp,
    /// Now.
    pub now: Timestamp,
    /// The instance's Node.
    pub node: NodeFact,
    /// The instance's state at the cloud, or why it could not be read.
    pub state: Result<InstanceState, &'a cloud::Error>,
    /// Whether `LeaveOverdue` is True already (the overdue Event and metric come once).
    pub leave_overdue: bool,
    /// The instance failed to join and its donor still waits for it (`intent=replace` of this attempt, not yet
    /// marked failed): the record stays until the rollout has seen the failure, so that the donor is counted
    /// failed instead of taking the missing record for an unrecorded request.
    pub donor_waits: bool,
    /// How long the instances of its group usually take to leave ([`super::Pace`]), `None` while unknown or for a
    /// joining instance: when to poll.
    pub expected: Option<Duration>,
}

/// What to do about a PendingNode (not a node's step: see `shared::protocol::Step`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Move {
    /// Nothing at the cloud; record what was seen and look again at the decision's `wake`.
    Wait,
    /// The Node is Ready and the instance running: set `reachedGoal`; nothing more to watch.
    Joined,
    /// Delete the instance, then switch the goal to `Leave` with a new deadline and record the failure.
    GiveUp(JoinFailure),
    /// The instance is terminated: delete the PendingNode.
    Remove,
    /// The leave deadline passed: delete the instance again.
    RetryDelete,
}

/// A [`Move`] with the status and Event that go with it and when to look again.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// The step.
    pub step: Move,
    /// `status.cspState`, when the cloud answered.
    pub csp_state: Option<CspState>,
    /// Conditions to set.
    pub conditions: Vec<Wanted>,
    /// An Event.
    pub event: Option<EventSpec>,
    /// When to look again (`None`: only on a change). A timer, never shorter than needed: the deadline, or
    /// the next poll of the cloud's state.
    pub wake: Option<Duration>,
}

/// The cloud's state as `status.cspState`.
pub fn csp_state(state: InstanceState) -> CspState {
    match state {
        InstanceState::Creating => CspState::Creating,
        InstanceState::Ready => CspState::Ready,
        InstanceState::Stopping => CspState::Stopping,
        InstanceState::Stopped => CspState::Stopped,
        InstanceState::Terminating => CspState::Terminating,
        InstanceState::Terminated => CspState::Terminated,
        InstanceState::Failed => CspState::Failed,
    }
}

pub(super) fn until(from: Timestamp, to: Timestamp) -> Duration {
    Duration::try_from(to.duration_since(from)).unwrap_or(Duration::ZERO)
}

/// Decides the step for a PendingNode. Pure: every input is in `facts`.
pub fn decide(facts: &Facts<'_>) -> Decision {
    let state = facts.state.as_ref().ok().copied();
    let mut conditions = vec![match &facts.state {
        Ok(_) => Wanted::new(SYNCED, true, "CloudCallsSucceeded", "the instance's state was read"),
        Err(error) => {
            Wanted::new(SYNCED, false, error.outcome().as_str(), format!("reading the instance's state: {error}"))
        }
    }];
    let past_deadline = facts.now >= facts.deadline;
    let polled = poll_interval(until(facts.created, facts.now), facts.expected);
    let poll = match &facts.state {
        Ok(_) => polled,
        Err(error) => retry_delay(error.retry(), 1).max(polled),
    };
    let timer = |deadline: Timestamp| Some(poll.min(until(facts.now, deadline).max(Duration::from_millis(100))));
    let decision =
        |step, conditions, event, wake| Decision { step, csp_state: state.map(csp_state), conditions, event, wake };
    match facts.goal {
        PendingNodeGoal::Join if facts.reached_goal => decision(Move::Wait, conditions, None, None),
        PendingNodeGoal::Join => {
            let failure = match state {
                Some(InstanceState::Failed) => Some(JoinFailure::InstanceFailed),
                Some(InstanceState::Terminated | InstanceState::Terminating) => Some(JoinFailure::InstanceGone),
                _ if facts.node == NodeFact::Ready && state == Some(InstanceState::Ready) => None,
                _ if past_deadline => Some(JoinFailure::DeadlineExceeded),
                _ => None,
            };
            match failure {
                Some(why) => {
                    conditions.push(Wanted::new(JOIN_FAILED, true, why.as_str(), join_failure_message(why, facts)));
                    let event = EventSpec {
                        reason: Reason::JoinFailed,
                        warning: true,
                        message: format!("{}; deleting the instance", join_failure_message(why, facts)),
                    };
                    decision(Move::GiveUp(why), conditions, Some(event), Some(Duration::ZERO))
                }
                None if facts.node == NodeFact::Ready && state == Some(InstanceState::Ready) => {
                    let event = EventSpec {
                        reason: Reason::Joined,
                        warning: false,
                        message: "the instance's Node is Ready".into(),
                    };
                    decision(Move::Joined, conditions, Some(event), None)
                }
                None => decision(Move::Wait, conditions, None, timer(facts.deadline)),
            }
        }
        PendingNodeGoal::Leave => match state {
            Some(InstanceState::Terminated) if facts.donor_waits => {
                decision(Move::Wait, conditions, None, Some(DONOR_RECHECK))
            }
            Some(InstanceState::Terminated) => {
                let event =
                    EventSpec { reason: Reason::Left, warning: false, message: "the instance is terminated".into() };
                decision(Move::Remove, conditions, Some(event), None)
            }
            _ if past_deadline => {
                let overdue = until(facts.deadline, facts.now);
                let message = format!(
                    "the instance is {} {}s after its leave deadline; deleting it again",
                    state.map_or("of unknown state", InstanceState::as_str),
                    overdue.as_secs()
                );
                conditions.push(Wanted::new(LEAVE_OVERDUE, true, "DeadlineExceeded", message.clone()));
                let event = (!facts.leave_overdue).then_some(EventSpec {
                    reason: Reason::LeaveDeadlineExceeded,
                    warning: true,
                    message,
                });
                // Retries of the deletion slow down as the instance stays overdue: a tenth of the time since the
                // deadline, between 1 s and 5 min.
                let wake = (overdue / 10).clamp(Duration::from_secs(1), Duration::from_secs(300)).max(poll);
                decision(Move::RetryDelete, conditions, event, Some(wake))
            }
            _ => decision(Move::Wait, conditions, None, timer(facts.deadline)),
        },
    }
}

/// Whether `pending` records a failed join whose donor (its `donor` annotation) still has the `intent=replace` of
/// this attempt (since before the record was created, to the second) and no heir: the rollout has not marked it
/// failed yet. Asked only of a leaving record whose join failed. The donor is read from the controller's Node
/// cache: a cache that lags shows the donor still waiting, and the record is looked at again shortly.
pub(super) fn donor_waits(pending: &PendingNode, nodes: &Store<SlimNode>) -> bool {
    let created = pending.meta().creation_timestamp.as_ref().map(|t| t.0);
    let Some(donor) = pending.annotations().get(keys::DONOR).filter(|_| join_failed(pending)) else { return false };
    if pending.spec.goal != PendingNodeGoal::Leave {
        return false;
    }
    nodes.get(&ObjectRef::new(donor)).is_some_and(|node| attempt_waits(node.annotations(), created))
}

/// Whether a donor with `annotations` still waits for the joining record created at `created`: its intent is
/// `replace`, began no later than the record's second, and no heir was paired. Pure.
pub fn attempt_waits(annotations: &std::collections::BTreeMap<String, String>, created: Option<Timestamp>) -> bool {
    let Ok(controller) = shared::protocol::ControllerAnnotations::read(annotations) else { return false };
    let Some(intent) = controller.intent else { return false };
    intent.step == shared::protocol::Step::Replace
        && !annotations.contains_key(keys::HEIR)
        && created.is_some_and(|c| crate::policy::replacement::of_attempt(c, intent.since))
}

fn join_failure_message(why: JoinFailure, facts: &Facts<'_>) -> String {
    match why {
        JoinFailure::DeadlineExceeded => format!(
            "the instance's Node was not Ready by the deadline {} (node {}, instance {})",
            facts.deadline,
            match facts.node {
                NodeFact::Absent => "not registered",
                NodeFact::NotReady => "not Ready",
                NodeFact::Ready => "Ready",
            },
            facts.state.as_ref().map_or("state unknown", |s| s.as_str())
        ),
        JoinFailure::InstanceFailed => "the cloud reports the instance Failed".into(),
        JoinFailure::InstanceGone => "the cloud reports the instance terminated".into(),
    }
}

/// The conditions and Event when deleting the instance failed. Pure.
pub fn delete_failed(error: &cloud::Error) -> (Wanted, EventSpec) {
    let message = format!("deleting the instance: {error}");
    (
        Wanted::new(SYNCED, false, error.outcome().as_str(), message.clone()),
        EventSpec { reason: Reason::InstanceDeleteFailed, warning: true, message },
    )
}

/// The deadline of a PendingNode: `spec.deadline`, else its creation plus the goal's timeout.
pub fn deadline_of(pending: &PendingNode, created: Timestamp, join: Duration, leave: Duration) -> Timestamp {
    if let Some(deadline) = &pending.spec.deadline {
        return deadline.0;
    }
    let timeout = match pending.spec.goal {
        PendingNodeGoal::Join => join,
        PendingNodeGoal::Leave => leave,
    };
    created.saturating_add(SignedDuration::try_from(timeout).unwrap_or(SignedDuration::MAX)).unwrap_or(created)
}

/// How many of `pending` record a failed join (condition [`JOIN_FAILED`] True): the failed replacements a
/// rollout's failure budget counts while their PendingNodes exist.
pub fn failed_joins<'a>(pending: impl IntoIterator<Item = &'a PendingNode>) -> usize {
    pending.into_iter().filter(|p| join_failed(p)).count()
}

/// Whether `pending` records a failed join (its `JoinFailed` condition is True).
pub fn join_failed(pending: &PendingNode) -> bool {
    pending.status.as_ref().and_then(|s| condition::status_of(&s.conditions, JOIN_FAILED)) == Some("True")
}

/// What `pending`, whose instance was seen terminated at `now`, tells of its group's pace of leaving
/// ([`super::Pace`]): the time since its creation, except for a failed join's record, whose time counts the join
/// too.
pub fn leave_took(pending: &PendingNode, created: Timestamp, now: Timestamp) -> Option<Duration> {
    (!join_failed(pending)).then(|| until(created, now))
}

/// Whether two `spec.providerID`s name the same instance: equal strings, or equal once parsed (Azure IDs compare
/// case-insensitively: cloud-provider-azure lowercases the resource group, ARM's answers may not).
pub fn same_instance(a: &str, b: &str) -> bool {
    a == b || matches!((a.parse::<ProviderId>(), b.parse::<ProviderId>()), (Ok(a), Ok(b)) if a == b)
}

/// The Node with `provider_id` among `nodes`, as a [`NodeFact`].
pub fn node_fact<'a>(nodes: impl IntoIterator<Item = &'a Node>, provider_id: &str) -> NodeFact {
    let node = nodes.into_iter().find(|n| {
        n.spec.as_ref().and_then(|s| s.provider_id.as_deref()).is_some_and(|p| same_instance(p, provider_id))
    });
    match node {
        None => NodeFact::Absent,
        Some(node) => {
            let ready = node
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|c| c.iter().find(|c| c.type_ == "Ready"))
                .is_some_and(|c| c.status == "True");
            if ready { NodeFact::Ready } else { NodeFact::NotReady }
        }
    }
}

/// How young a PendingNode's first look is taken for one right after the replacer's cloud call (see [`first_look`]).
pub const FIRST_LOOK: Duration = Duration::from_secs(5);

/// What a PendingNode's instance is taken to be at its first look, before its first poll: a joining instance was
/// just created (`Creating`), a leaving one is being deleted (`Terminating`). Neither state decides anything but to
/// wait for the poll (or the deadline).
pub fn first_look(goal: PendingNodeGoal) -> InstanceState {
    match goal {
        PendingNodeGoal::Join => InstanceState::Creating,
        PendingNodeGoal::Leave => InstanceState::Terminating,
    }
}
