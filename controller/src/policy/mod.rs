//! The rollout policy: a pure function from what the controller observes to what it does next.
//!
//! [`plan`] takes the nodes (with their annotations and the drain progress the executor knows),
//! the desired image and the validated [`Policy`], and the time, and returns a [`Plan`]: the
//! actions to take on nodes, each with its [`Reason`], why other nodes are held back, and the
//! status to publish. Nothing in this module reads the clock, the environment or a client.
//!
//! Composition, in order: (1) each node's own progress ([`assess`]): transitions of in-flight
//! nodes, timeouts, clean-ups; (2) the gates that stop *new* nodes (no target, invalid spec,
//! pause, maintenance window, failure budget, stop on drain timeout); (3) the budget (`maxUnavailable`
//! minus the nodes already unavailable) and the order (control plane first and alone, then
//! workers by name, the controller's own node last); (4) the status summary.
//!
//! # Invariants
//! - At most `maxUnavailable` selected nodes are in flight or otherwise unavailable (NotReady or
//!   cordoned) after the plan is applied, counting the ones the plan starts.
//! - At most one control-plane node is in flight or unavailable, and no worker starts while a
//!   control-plane node is outdated or in flight.
//! - A node is never started while its annotations are malformed, while someone else cordoned
//!   it, while it is NotReady, or before its agent has reported.
//! - Every node the plan releases, fails or blocks, and every node cordoned by the controller
//!   outside a disruptive step, is uncordoned by the action (the executor applies it).

mod assess;
pub mod budget;
pub mod cron;
pub mod settings;
pub mod window;

#[cfg(test)]
mod tests;

pub use settings::{NodeSelector, Policy};

use assess::{Assessment, Situation};
use jiff::Timestamp;
use shared::crd::DrainTimeoutAction;
use shared::protocol::{AgentReport, BootId, ControllerAnnotations, ProtocolError, Step};
use std::fmt;
use window::WindowState;

/// A node as the policy sees it.
#[derive(Debug, Clone)]
pub struct NodeView {
    pub name: String,
    pub control_plane: bool,
    /// Whether the NodeVersion's node selector selects it.
    pub selected: bool,
    /// The NodeReady condition is True.
    pub ready: bool,
    /// `spec.unschedulable`.
    pub unschedulable: bool,
    /// `status.nodeInfo.bootID` as the kubelet reports it.
    pub kubelet_boot_id: Option<String>,
    pub controller: Result<ControllerAnnotations, ProtocolError>,
    pub agent: Result<AgentReport, ProtocolError>,
    /// What the executor knows of the node's drain.
    pub drain: DrainProgress,
}

/// Progress of a drain, as the executor's drain task reports it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum DrainProgress {
    /// No drain task runs for the node.
    #[default]
    NotRunning,
    /// Evicting or waiting for pods; the message says on what, for the timeout message.
    Running { waiting_on: Option<String> },
    /// Every pod that had to go is gone.
    Drained,
    /// The drain cannot finish (a pod that may not be evicted under the drain options).
    Failed { message: String },
    /// Someone made the node schedulable while it was drained; the drain stopped evicting.
    Uncordoned,
}

/// What the controller wants: the image and the validated policy (or why the spec is invalid).
#[derive(Debug, Clone)]
pub struct Desired<'a> {
    /// `spec.image` of the NodeVersion; None when there is no NodeVersion.
    pub target: Option<&'a str>,
    pub policy: Result<&'a Policy, &'a [String]>,
    /// The node the controller runs on; updated last.
    pub own_node: Option<&'a str>,
}

/// One thing to do to one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAction {
    pub node: String,
    pub kind: ActionKind,
    pub reason: Reason,
    pub message: String,
}

/// The kinds of node actions. Each one that writes is a single merge patch of the Node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ActionKind {
    /// Write `intent=stage` for `target` with a fresh token.
    Stage { target: String },
    /// Cordon (recording `cordoned-by` unless someone else had cordoned it) and write
    /// `intent=drain`; then start draining.
    Cordon { target: String },
    /// Make sure a drain task runs for the node (no write).
    EnsureDrain,
    /// Write `intent=reboot` with the boot ID the node has now.
    Reboot { target: String, boot_id_before: BootId },
    /// Write `intent=done` and uncordon if the controller cordoned it.
    Complete { target: String },
    /// Write `intent=failed` with the message, uncordon if the controller cordoned it.
    Fail { target: String },
    /// Write `intent=blocked` with the message, uncordon if the controller cordoned it, stop the
    /// drain.
    Block { target: String },
    /// Remove the intent, uncordon if the controller cordoned it, stop the drain.
    Release,
    /// Uncordon a node the controller cordoned but no longer works on.
    Uncordon,
    /// Touch nothing; report the problem (a Warning Event, once per distinct message).
    ReportProblem,
}

impl ActionKind {
    /// Whether the action writes the Node.
    pub fn writes(&self) -> bool {
        !matches!(self, ActionKind::EnsureDrain | ActionKind::ReportProblem)
    }
}

/// Why the controller does (or does not do) something. The same value is the Event reason, the
/// condition reason, a metric label and a log field; `Display` is PascalCase, at most 128 bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    // A node's steps.
    StageRequested,
    Staged,
    Draining,
    Drained,
    Verified,
    // A node's failures.
    StageFailed,
    StageTimedOut,
    RebootFailed,
    RebootTimedOut,
    DrainTimedOut,
    DrainFailed,
    UncordonedWhileDraining,
    MalformedAnnotations,
    UnsupportedStep,
    // Clean-ups.
    TargetChanged,
    NotSelected,
    NoNodeVersion,
    LeftoverCordon,
    // Why no new node starts.
    Paused,
    OutsideMaintenanceWindow,
    FailureBudgetExhausted,
    StoppedOnDrainTimeout,
    InvalidSpec,
    WaitingForControlPlane,
    UnavailableNodes,
    // Rollout summary.
    RollingOut,
    Complete,
    AllNodesUpToDate,
    NodesOutdated,
    NodesFailed,
    NoFailures,
    NodesBlocked,
    NoBlockedNodes,
}

impl Reason {
    /// Whether an Event with this reason is a Warning.
    pub fn is_warning(self) -> bool {
        matches!(
            self,
            Reason::StageFailed
                | Reason::StageTimedOut
                | Reason::RebootFailed
                | Reason::RebootTimedOut
                | Reason::DrainTimedOut
                | Reason::DrainFailed
                | Reason::UncordonedWhileDraining
                | Reason::MalformedAnnotations
                | Reason::UnsupportedStep
                | Reason::FailureBudgetExhausted
                | Reason::StoppedOnDrainTimeout
                | Reason::InvalidSpec
        )
    }
}

impl fmt::Display for Reason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The variant names are the PascalCase reasons.
        fmt::Debug::fmt(self, f)
    }
}

/// A node being updated, for the status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InFlight {
    pub node: String,
    /// `stage`, `drain`, `reboot`, or `soak` for a done node keeping its slot.
    pub step: &'static str,
    pub since: Timestamp,
    /// What its drain waits on, if it is draining and waits.
    pub waiting_on: Option<String>,
}

/// A node that failed or is blocked, with the reason and message from its annotations or its
/// assessment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub node: String,
    pub message: String,
}

/// Counts of selected nodes; each selected node is in exactly one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub total: u32,
    pub up_to_date: u32,
    pub outdated: u32,
    pub in_progress: u32,
    pub failed: u32,
    pub blocked: u32,
}

/// The decision of one reconcile.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    pub actions: Vec<NodeAction>,
    /// Why no (further) node starts, if something holds the rollout back.
    pub hold: Option<(Reason, String)>,
    pub counts: Counts,
    pub in_flight: Vec<InFlight>,
    pub failed: Vec<Problem>,
    pub blocked: Vec<Problem>,
    /// When to plan again even if nothing changes (a deadline, the end of a soak, a window).
    pub wake_at: Option<Timestamp>,
}

/// Decides what to do next. See the module documentation for the order of the rules.
pub fn plan(nodes: &[NodeView], desired: &Desired<'_>, now: Timestamp) -> Plan {
    let default_policy = Policy::default();
    // In-flight nodes finish under the default timeouts when the spec is invalid.
    let policy = desired.policy.unwrap_or(&default_policy);
    let mut plan = Plan::default();
    let wake = |at: Option<Timestamp>, plan: &mut Plan| {
        if let Some(at) = at {
            plan.wake_at = Some(plan.wake_at.map_or(at, |w| w.min(at)));
        }
    };

    let assessments: Vec<Assessment> =
        nodes.iter().map(|node| assess::assess(node, desired.target, policy, now)).collect();
    for a in &assessments {
        plan.actions.extend(a.action.clone());
        wake(a.wake_at, &mut plan);
    }

    // The budget counts every selected node that is in flight or unavailable after the actions.
    let selected: Vec<(&NodeView, &Assessment)> = nodes.iter().zip(&assessments).filter(|(n, _)| n.selected).collect();
    let unavailable =
        |(n, a): &(&NodeView, &Assessment)| matches!(a.situation, Situation::InFlight { .. }) || a.unavailable(n);
    // A node that is no longer selected but still finishing its reboot counts too.
    let unavailable_count = nodes
        .iter()
        .zip(&assessments)
        .filter(
            |(n, a)| {
                if n.selected { unavailable(&(*n, *a)) } else { matches!(a.situation, Situation::InFlight { .. }) }
            },
        )
        .count() as u32;
    let control_plane_busy = selected.iter().any(|x| x.0.control_plane && unavailable(x));
    let control_plane_pending = selected.iter().any(|(n, a)| {
        n.control_plane && matches!(a.situation, Situation::Outdated { .. } | Situation::InFlight { .. })
    });

    for (node, a) in &selected {
        match &a.situation {
            Situation::UpToDate => plan.counts.up_to_date += 1,
            Situation::Outdated { .. } => plan.counts.outdated += 1,
            Situation::InFlight { step, since } => {
                plan.counts.in_progress += 1;
                let waiting_on = match &node.drain {
                    DrainProgress::Running { waiting_on } if *step == "drain" => waiting_on.clone(),
                    _ => None,
                };
                plan.in_flight.push(InFlight { node: node.name.clone(), step, since: *since, waiting_on });
            }
            Situation::Failed { message } => {
                plan.counts.failed += 1;
                plan.failed.push(Problem { node: node.name.clone(), message: message.clone() });
            }
            Situation::Blocked { message, .. } => {
                plan.counts.blocked += 1;
                plan.blocked.push(Problem { node: node.name.clone(), message: message.clone() });
            }
        }
    }
    plan.counts.total = selected.len() as u32;

    // Gates for new nodes.
    let Some(target) = desired.target else {
        return plan;
    };
    let policy = match desired.policy {
        Ok(policy) => policy,
        Err(errors) => {
            plan.hold = Some((Reason::InvalidSpec, format!("the NodeVersion spec is invalid: {}", errors.join("; "))));
            return plan;
        }
    };
    if plan.counts.outdated == 0 {
        return plan;
    }
    if policy.paused {
        plan.hold = Some((Reason::Paused, "spec.rollout.paused is true".into()));
        return plan;
    }
    if let Some(window) = &policy.window
        && let WindowState::Closed { opens_at } = window.state(now)
    {
        let when = opens_at.map_or("never".to_owned(), |t| t.to_string());
        plan.hold = Some((
            Reason::OutsideMaintenanceWindow,
            format!(
                "outside the maintenance window {:?} ({}); it opens next at {when}",
                window.schedule, window.zone_name
            ),
        ));
        wake(opens_at, &mut plan);
        return plan;
    }
    if plan.counts.failed >= policy.failure_budget {
        plan.hold = Some((
            Reason::FailureBudgetExhausted,
            format!(
                "{} node(s) failed to update to {target}; the failure budget is {}",
                plan.counts.failed, policy.failure_budget
            ),
        ));
        return plan;
    }
    let drain_timeouts =
        selected.iter().filter(|(_, a)| matches!(a.situation, Situation::Blocked { by_drain: true, .. })).count();
    if policy.on_drain_timeout == DrainTimeoutAction::Stop && drain_timeouts > 0 {
        plan.hold = Some((
            Reason::StoppedOnDrainTimeout,
            format!("{drain_timeouts} node(s) could not be drained in time and onDrainTimeout is Stop"),
        ));
        return plan;
    }
    if let Some(window) = &policy.window
        && let WindowState::Open { closes_at } = window.state(now)
    {
        wake(Some(closes_at), &mut plan);
    }

    // Budget and order.
    let mut slots = budget::free_slots(policy.max_unavailable.resolve(plan.counts.total), unavailable_count);
    let mut candidates: Vec<&NodeView> = selected
        .iter()
        .filter(|(_, a)| matches!(a.situation, Situation::Outdated { eligible: true }))
        .map(|(n, _)| *n)
        .collect();
    candidates.sort_by_key(|n| (!n.control_plane, desired.own_node == Some(n.name.as_str()), n.name.clone()));
    if slots == 0 && plan.counts.in_progress == 0 && !candidates.is_empty() {
        // Nothing is being updated, yet nothing may start: nodes down or cordoned for other
        // reasons take the whole budget. Say which, or the rollout just looks stuck.
        let mut names: Vec<String> = selected
            .iter()
            .filter(|(n, a)| a.unavailable(n))
            .map(|(n, _)| format!("{} ({})", n.name, if n.ready { "cordoned" } else { "NotReady" }))
            .collect();
        names.sort();
        let more = names.len().saturating_sub(5);
        names.truncate(5);
        let tail = if more > 0 { format!(" and {more} more") } else { String::new() };
        plan.hold = Some((
            Reason::UnavailableNodes,
            format!(
                "maxUnavailable ({}) is taken by nodes unavailable for other reasons: {}{tail}",
                policy.max_unavailable.resolve(plan.counts.total),
                names.join(", ")
            ),
        ));
    }
    let mut started_control_plane = false;
    for node in candidates {
        if slots == 0 {
            break;
        }
        if node.control_plane {
            if control_plane_busy || started_control_plane {
                continue;
            }
            started_control_plane = true;
        } else if control_plane_pending {
            if plan.hold.is_none() {
                plan.hold = Some((
                    Reason::WaitingForControlPlane,
                    "workers wait until every control-plane node runs the target".into(),
                ));
            }
            break;
        }
        slots -= 1;
        plan.counts.outdated -= 1;
        plan.counts.in_progress += 1;
        plan.in_flight.push(InFlight {
            node: node.name.clone(),
            step: Step::Stage.as_str(),
            since: now,
            waiting_on: None,
        });
        plan.actions.push(NodeAction {
            node: node.name.clone(),
            kind: ActionKind::Stage { target: target.to_owned() },
            reason: Reason::StageRequested,
            message: format!("staging {target}"),
        });
    }
    plan
}
