//! The NodeVersion status a plan describes, and whether it differs from what is published.
//!
//! # Guarantees
//! - Deterministic: the same plan and generation give the same status, and a condition keeps its
//!   `lastTransitionTime` while its status stays the same, so an unchanged rollout writes nothing.
//! - `Progressing` is `True` only while something moves (a node in flight, or a write of this
//!   round); otherwise it is `False` with the reason nothing moves. Its reason is `Complete` only
//!   when every selected node runs the target: never while one is failed, blocked or outdated.

use crate::policy::{Hold, Plan, Problem, Reason, Rollout};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use shared::crd::{HeldBackNode, InFlightNode, NodeCounts, NodeVersionStatus};
use std::collections::BTreeSet;

/// How many nodes a condition message names before it says "and N more".
const MAX_NAMED: usize = 5;
/// How many held-back nodes `status.heldBack` lists (the condition and the counts tell the rest).
pub const MAX_HELD_LISTED: usize = 50;

pub const PROGRESSING: &str = "Progressing";
pub const UP_TO_DATE: &str = "UpToDate";
pub const BLOCKED: &str = "Blocked";
pub const FAILED: &str = "Failed";
pub const SELECTOR_OVERLAP: &str = "SelectorOverlap";

/// The status of `rollout` for `plan`, carrying over transition times from `previous`.
pub fn compute(
    plan: &Plan,
    rollout: &Rollout,
    generation: Option<i64>,
    previous: Option<&NodeVersionStatus>,
    now: Timestamp,
) -> NodeVersionStatus {
    let c = plan.counts;
    let acting = rollout.spec.acting();
    let target = acting.map(|s| s.target.as_str());
    let up_to_date = match target {
        None => (false, Reason::InvalidSpec, "no valid spec is known".to_owned()),
        Some(target) if c.up_to_date == c.total => {
            (true, Reason::AllNodesUpToDate, format!("all {} node(s) run {target}", c.total))
        }
        Some(target) => (false, Reason::NodesOutdated, format!("{} of {} node(s) run {target}", c.up_to_date, c.total)),
    };
    let failed = if plan.failed.is_empty() {
        (false, Reason::NoFailures, "no node failed".to_owned())
    } else {
        (true, Reason::NodesFailed, name_problems(&plan.failed, "failed"))
    };
    let blocked = if plan.blocked.is_empty() {
        (false, Reason::NoBlockedNodes, "no node is blocked".to_owned())
    } else {
        (true, Reason::NodesBlocked, name_problems(&plan.blocked, "blocked"))
    };
    let conditions = [
        (PROGRESSING, progressing(plan, target)),
        (UP_TO_DATE, up_to_date),
        (FAILED, failed),
        (BLOCKED, blocked),
        (SELECTOR_OVERLAP, overlap(plan)),
    ]
    .into_iter()
    .map(|(type_, (status, reason, message))| condition(type_, status, reason, message, generation, previous, now))
    .collect();
    let mut in_flight: Vec<InFlightNode> = plan
        .in_flight
        .iter()
        .map(|f| InFlightNode {
            name: f.node.clone(),
            step: f.step.to_string(),
            // Kubernetes Time keeps whole seconds; so must the computed status, or it would differ
            // from the published one on every reconcile.
            since: Time(shared::protocol::truncate_to_seconds(f.since)),
        })
        .collect();
    in_flight.sort_by(|a, b| a.name.cmp(&b.name));
    let held_back = plan
        .held
        .iter()
        .take(MAX_HELD_LISTED)
        .map(|h| HeldBackNode {
            name: h.node.clone(),
            reason: h.hold.reason.to_string(),
            message: h.hold.message.clone(),
        })
        .collect();
    NodeVersionStatus {
        observed_generation: generation,
        target_image: target.map(str::to_owned),
        counts: NodeCounts {
            total: c.total as i32,
            up_to_date: c.up_to_date as i32,
            outdated: c.outdated as i32,
            in_progress: c.in_progress as i32,
            failed: c.failed as i32,
            blocked: c.blocked as i32,
            held_back: c.held_back as i32,
        },
        in_flight,
        held_back,
        conditions,
        last_valid_spec: acting.map(|spec| spec.record()),
    }
}

/// The `Progressing` condition: true while something moves, else false with the reason.
fn progressing(plan: &Plan, target: Option<&str>) -> (bool, Reason, String) {
    let c = plan.counts;
    if plan.moves() {
        return match &plan.hold {
            // Nodes in flight finish even while new ones are held back.
            Some(Hold { reason, message }) => (true, *reason, message.clone()),
            None => {
                let held = if c.held_back > 0 { format!(", {} held back", c.held_back) } else { String::new() };
                (true, Reason::RollingOut, format!("{} node(s) updating, {} waiting{held}", c.in_progress, c.outdated))
            }
        };
    }
    if let Some(Hold { reason, message }) = &plan.hold {
        return (false, *reason, message.clone());
    }
    if c.up_to_date == c.total {
        let message = match (c.total, target) {
            (0, _) => "the node selector selects no node".to_owned(),
            (n, Some(target)) => format!("all {n} node(s) run {target}"),
            (n, None) => format!("all {n} node(s) are up to date"),
        };
        return (false, Reason::Complete, message);
    }
    let problems = if c.failed + c.blocked > 0 {
        format!(
            "; {} failed and {} blocked node(s) wait for an administrator (remove a node's intent to retry it)",
            c.failed, c.blocked
        )
    } else {
        String::new()
    };
    if c.outdated > 0 && c.held_back == c.outdated {
        let reasons: BTreeSet<Reason> = plan.held.iter().map(|h| h.hold.reason).collect();
        let reason = match reasons.iter().collect::<Vec<_>>()[..] {
            [one] => *one,
            _ => Reason::NodesHeldBack,
        };
        let named: Vec<String> =
            plan.held.iter().map(|h| format!("{} ({}: {})", h.node, h.hold.reason, h.hold.message)).collect();
        return (false, reason, format!("{} node(s) held back: {}{problems}", c.held_back, name_some(named, "; ")));
    }
    if c.outdated == 0 {
        let reason = if c.failed > 0 { Reason::NodesFailed } else { Reason::NodesBlocked };
        return (false, reason, format!("no node can move{problems}"));
    }
    // Outdated nodes that are neither eligible nor held: the next round decides about them.
    (false, Reason::NodesHeldBack, format!("{} outdated node(s) cannot start yet{problems}", c.outdated))
}

fn overlap(plan: &Plan) -> (bool, Reason, String) {
    if plan.overlap.is_empty() {
        return (false, Reason::NoOverlap, "no node is selected by an older NodeVersion".to_owned());
    }
    let older: BTreeSet<&str> = plan.overlap.iter().map(|(_, v)| v.as_str()).collect();
    let nodes: Vec<String> = plan.overlap.iter().map(|(n, _)| n.clone()).collect();
    let message = format!(
        "{} node(s) are also selected by the older NodeVersion(s) {}, which manage them; this one leaves them alone: {}",
        plan.overlap.len(),
        older.into_iter().collect::<Vec<_>>().join(", "),
        name_some(nodes, ", ")
    );
    (true, Reason::SelectorOverlap, message)
}

fn name_problems(problems: &[Problem], what: &str) -> String {
    let named: Vec<String> = problems.iter().map(|p| format!("{}: {}", p.node, p.message)).collect();
    format!("{} node(s) {what}: {}", problems.len(), name_some(named, "; "))
}

/// The first few of `names` (sorted), and how many more, joined by `separator`.
fn name_some(mut names: Vec<String>, separator: &str) -> String {
    names.sort();
    let more = names.len().saturating_sub(MAX_NAMED);
    names.truncate(MAX_NAMED);
    if more > 0 {
        names.push(format!("and {more} more"));
    }
    names.join(separator)
}

fn condition(
    type_: &str,
    status: bool,
    reason: Reason,
    message: String,
    generation: Option<i64>,
    previous: Option<&NodeVersionStatus>,
    now: Timestamp,
) -> Condition {
    let status = if status { "True" } else { "False" }.to_owned();
    let before = previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == type_));
    let last_transition_time = match before {
        Some(b) if b.status == status => b.last_transition_time.clone(),
        _ => Time(shared::protocol::truncate_to_seconds(now)),
    };
    Condition {
        type_: type_.to_owned(),
        status,
        reason: reason.to_string(),
        message,
        observed_generation: generation,
        last_transition_time,
    }
}
