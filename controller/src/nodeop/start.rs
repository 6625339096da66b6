//! Which of a NodeOp's waiting nodes start now: the one pipeline's gates (`crate::policy::pipeline`), in its
//! order, for each waiting node in the pipeline's start order (control-plane nodes first, then workers zone by zone
//! and by name: `crate::policy::pipeline::start_order`):
//! - the NodeOp's own rollout-wide gates: being deleted (`Deleting`), a node failed under `stopOnFailure`
//!   (`StoppedOnFailure`, its failure budget);
//! - the node's own holds, named as the pipeline's assessment names them: another owner (another NodeOp's mark, a
//!   rollout's step), its annotations malformed, NotReady, do not disrupt (`DoNotDisrupt`: the Node's annotation,
//!   or a pod found on it just before the start: `crate::do_not_disrupt`);
//! - the per-node rules 7 to 9 of the pipeline, by the very function the rollouts' selection calls
//!   (`crate::policy::admission`): the budget (the NodeOp's `concurrency`), one control-plane node at a time
//!   across this NodeOp, the others and every rollout (its own nodes counted here, the rest read from the budgets,
//!   `crate::policy::budgets`, which name the busy control-plane nodes as the rollouts' plan counts them,
//!   replacements included), control plane first (`WaitingForControlPlane`: no worker while a selected
//!   control-plane node has not finished);
//! - the budget and zone share (`maxUnavailablePerZone`) of every rollout the node counts in
//!   (`WaitingForRolloutBudget`): a start takes a slot of each.
//!
//! With a preflight, a node's check runs first (read-only, outside the budget) and its verdict is recorded whatever
//! the gates.

use super::decide::{Action, Decision, Inputs, NodeDecision, NodeFacts, Notice, Options, Preflight, STARTED, count};
use crate::policy::admission::{Admission, Held};
use crate::policy::budget::LazyBudgets;
use crate::policy::pipeline::start_order;
use crate::reason::Reason;
use shared::crd::nodeop::{NodeOpNodeStatus, NodeOpPhase, RebootStatus};
use shared::protocol::Step;
use std::collections::BTreeSet;

/// Why a waiting node may not start now, if it may not: its own holds, named with the reasons the pipeline's
/// assessment gives them.
fn blocked(node: &NodeFacts) -> Option<(Reason, String)> {
    if let Some(other) = &node.mark {
        return Some((Reason::NodeOperation, format!("the NodeOp {other} works on the node")));
    }
    if node.controller.is_none() {
        return Some((Reason::MalformedAnnotations, "the node's update-operator annotations are malformed".into()));
    }
    if let Some(step) = rollout_step(node) {
        return Some((Reason::SelectorOverlap, format!("a rollout works on the node (step {step})")));
    }
    if !node.ready {
        return Some((Reason::NodeNotReady, "the node is not Ready".into()));
    }
    if let Some(why) = &node.do_not_disrupt {
        return Some((Reason::DoNotDisrupt, format!("do not disrupt: {why}")));
    }
    None
}

/// The rollout step that stages or disrupts the node, if it is in one.
pub(super) fn rollout_step(node: &NodeFacts) -> Option<Step> {
    let intent = node.controller.as_ref()?.intent.as_ref()?;
    matches!(intent.step, Step::Stage | Step::Fetch | Step::Drain | Step::Reboot | Step::KubeadmUpgrade | Step::Replace)
        .then_some(intent.step)
}

/// Starts the waiting nodes the gates allow: control plane first and alone, then workers by name, within the
/// concurrency; nothing once a node failed under `stopOnFailure` or while the NodeOp is deleted. With a preflight,
/// a node's start is its check first: its verdict is recorded whatever the gates (a skip completes the node, a
/// failure fails it), a check running or passed holds a concurrency slot, and a passed node starts when the gates
/// allow.
pub(super) fn start_waiting(
    decision: &mut Decision,
    mut waiting: Vec<&NodeFacts>,
    control_planes: &BTreeSet<&str>,
    inputs: &Inputs<'_>,
    options: &Options,
    budgets: &mut LazyBudgets<'_>,
) {
    waiting.sort_by_cached_key(|n| start_order(n.control_plane, false, n.zone.as_deref(), false, &n.name));
    let pending = |phase: NodeOpPhase, message: String| NodeOpNodeStatus {
        phase,
        message,
        reboot_status: if options.reboot { RebootStatus::Pending } else { RebootStatus::NotRequested },
        ..Default::default()
    };
    // Verdicts first: they are recorded whatever the gates, and a failure counts for `stopOnFailure`.
    let mut undecided = Vec::new();
    for node in waiting {
        let verdict = match node.preflight.as_ref().filter(|_| options.preflight) {
            Some(Preflight::Skip { message }) => {
                let message = format!("Skipped by preflight: {message}");
                Some((NodeOpPhase::Completed, message, Reason::PreflightSkipped, false))
            }
            Some(Preflight::Failed { message }) => {
                Some((NodeOpPhase::Failed, format!("Preflight failed: {message}"), Reason::PreflightFailed, true))
            }
            Some(Preflight::Foreign) => {
                let message = "Preflight failed: a Job of the name this NodeOp gives the node's preflight check \
                               exists and is not this NodeOp's";
                Some((NodeOpPhase::Failed, message.to_owned(), Reason::JobNameTaken, true))
            }
            Some(Preflight::Running | Preflight::Proceed) | None => None,
        };
        let Some((phase, message, reason, warning)) = verdict else {
            undecided.push(node);
            continue;
        };
        let notice = Notice { reason, warning, message: format!("{}: {message}", node.name) };
        let status = NodeOpNodeStatus { reboot_status: RebootStatus::NotRequested, ..pending(phase, message) };
        let decided = NodeDecision { node: node.name.clone(), action: None, status, notice: Some(notice) };
        count(decision, decided.status.phase);
        decision.nodes.push(decided);
    }
    let in_flight = |d: &Decision, control_plane: Option<bool>| {
        d.nodes
            .iter()
            .filter(|n| matches!(n.status.phase, NodeOpPhase::Running | NodeOpPhase::Preflight))
            .filter(|n| control_plane.is_none_or(|cp| control_planes.contains(n.node.as_str()) == cp))
            .count()
    };
    let mut hold: Option<(Reason, String)> = if inputs.deleting {
        Some((Reason::Deleting, "the NodeOp is being deleted".into()))
    } else if decision.failed > 0 && options.stop_on_failure {
        Some((Reason::StoppedOnFailure, "a node failed and stopOnFailure is set: no further node starts".into()))
    } else {
        None
    };
    // A check running (or to be created again: recorded, its Job not seen) or passed holds its slot.
    let checking = |node: &NodeFacts| {
        options.preflight
            && (node.preflight.is_some()
                || inputs.recorded.get(&node.name).is_some_and(|r| r.phase == NodeOpPhase::Preflight))
    };
    let mut running = in_flight(decision, None) + undecided.iter().filter(|n| checking(n)).count();
    let (mut started, mut over_budget, mut do_not_disrupt) = (false, None, None);
    // The control-plane barrier (docs/nodeop.md): no worker starts while a selected control-plane node has not
    // finished, waiting or under way (its check, its drain, its Job, its reboot).
    let control_plane_pending = undecided.iter().any(|n| n.control_plane) || in_flight(decision, Some(true)) > 0;
    for node in undecided {
        let checked = checking(node);
        let passed = node.preflight == Some(Preflight::Proceed);
        let gate = if let Some((_, why)) = &hold {
            Err(why.clone())
        } else if checked && !passed {
            // The check runs: its verdict is awaited (its Job created again if it is not seen).
            Ok(())
        } else if let Some((reason, why)) = blocked(node) {
            if reason == Reason::DoNotDisrupt {
                do_not_disrupt.get_or_insert_with(|| format!("{}: {why}", node.name));
            }
            Err(format!("{reason}: {why}"))
        } else if let Err(held) = {
            // The pipeline's rules for one node (`crate::policy::admission`): this NodeOp's `concurrency` as its
            // budget; one control-plane node at a time among its own nodes and, as the rollouts keep it, across
            // every rollout and NodeOp (`crate::policy::budgets` names the busy ones as the rollouts' plan counts
            // them, replacements included); control plane first among its own nodes.
            let own_busy = (in_flight(decision, Some(true)) > 0)
                .then(|| "waiting: control-plane nodes go one at a time".to_owned());
            let admission = Admission {
                slots: options.concurrency.map(|c| u32::try_from(c.saturating_sub(running)).unwrap_or(u32::MAX)),
                control_plane_busy: own_busy
                    .or_else(|| node.control_plane.then(|| budgets.get().control_plane_busy(inputs.key)).flatten()),
                control_plane_first: control_plane_pending.then(|| "waiting: control-plane nodes go first".to_owned()),
                ..Admission::default()
            };
            admission.check(node.control_plane, node.zone.as_deref(), checked)
        } {
            Err(match held {
                Held::NoSlot => "waiting for a free slot".to_owned(),
                Held::ZoneFull { zone, limit } => format!("waiting: {limit} node(s) of zone {zone} out at once"),
                Held::ControlPlaneBusy(why) => why,
                Held::ControlPlaneFirst(why) => {
                    hold = hold.or(Some((
                        Reason::WaitingForControlPlane,
                        "control-plane nodes go first, one at a time".into(),
                    )));
                    why
                }
            })
        } else if !options.preflight || passed {
            // Only the start disrupts the node: the check is read-only.
            budgets.get().room(&node.name).map_err(|why| {
                let message = format!("waiting: {why}");
                over_budget.get_or_insert(why);
                message
            })
        } else {
            Ok(())
        };
        let (action, status, notice) = match gate {
            Err(why) if passed => {
                (None, pending(NodeOpPhase::Preflight, format!("the preflight check passed; {why}")), None)
            }
            // A check held by the NodeOp's own hold (deleted, stopped) keeps its phase; it has not passed.
            Err(why) if checked => (None, pending(NodeOpPhase::Preflight, why), None),
            Err(why) => (None, pending(NodeOpPhase::Pending, why), None),
            Ok(()) if checked && !passed => {
                let action = (node.preflight.is_none()).then_some(Action::CreatePreflight);
                (action, pending(NodeOpPhase::Preflight, "the preflight check runs".into()), None)
            }
            Ok(()) if options.preflight && !passed => {
                running += 1;
                let notice = Notice {
                    reason: Reason::PreflightStarted,
                    warning: false,
                    message: format!("running the preflight check on {}", node.name),
                };
                let status = pending(NodeOpPhase::Preflight, "the preflight check runs".into());
                (Some(Action::CreatePreflight), status, Some(notice))
            }
            Ok(()) => {
                budgets.get().take(&node.name);
                if node.control_plane {
                    budgets.get().take_control_plane(&node.name, inputs.key);
                }
                started = true;
                running += usize::from(!checked);
                let notice = Notice {
                    reason: STARTED,
                    warning: false,
                    message: format!("starting the operation on {}", node.name),
                };
                let status = pending(NodeOpPhase::Running, "started".into());
                (Some(Action::Start { cordon: options.cordons() }), status, Some(notice))
            }
        };
        let decided = NodeDecision { node: node.name.clone(), action, status, notice };
        count(decision, decided.status.phase);
        decision.nodes.push(decided);
    }
    // A full rollout budget holds the NodeOp back only when no node could start: another node may count in
    // another budget.
    decision.hold = hold
        .or(over_budget.filter(|_| !started).map(|why| (Reason::WaitingForRolloutBudget, why)))
        .or(do_not_disrupt.filter(|_| !started).map(|why| (Reason::DoNotDisrupt, why)));
}
