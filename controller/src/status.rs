//! The NodeVersion status a plan describes, and whether it differs from what is published.
//!
//! # Guarantees
//! - Deterministic: the same plan and generation give the same status, and a condition keeps its
//!   `lastTransitionTime` while its status stays the same, so an unchanged rollout writes nothing.

use crate::policy::{Plan, Problem, Reason};
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use shared::crd::{InFlightNode, NodeCounts, NodeVersionStatus};

/// How many failed or blocked nodes a condition message names before it says "and N more".
const MAX_NAMED: usize = 5;

pub const PROGRESSING: &str = "Progressing";
pub const UP_TO_DATE: &str = "UpToDate";
pub const BLOCKED: &str = "Blocked";
pub const FAILED: &str = "Failed";

/// The status for `plan`, carrying over transition times from `previous`.
pub fn compute(
    plan: &Plan,
    target: &str,
    generation: Option<i64>,
    previous: Option<&NodeVersionStatus>,
    now: Timestamp,
) -> NodeVersionStatus {
    let c = plan.counts;
    let progressing = if let Some((reason, message)) = &plan.hold {
        // Nodes still in flight finish even while new ones are held back.
        let status = c.in_progress > 0;
        (status, *reason, message.clone())
    } else if c.in_progress > 0 || c.outdated > 0 {
        (true, Reason::RollingOut, format!("{} node(s) updating, {} waiting", c.in_progress, c.outdated))
    } else {
        (false, Reason::Complete, "no node is waiting for an update".to_owned())
    };
    let up_to_date = if c.up_to_date == c.total {
        (true, Reason::AllNodesUpToDate, format!("all {} node(s) run {target}", c.total))
    } else {
        (false, Reason::NodesOutdated, format!("{} of {} node(s) run {target}", c.up_to_date, c.total))
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
    let conditions = [(PROGRESSING, progressing), (UP_TO_DATE, up_to_date), (FAILED, failed), (BLOCKED, blocked)]
        .into_iter()
        .map(|(type_, (status, reason, message))| condition(type_, status, reason, message, generation, previous, now))
        .collect();
    let mut in_flight: Vec<InFlightNode> = plan
        .in_flight
        .iter()
        .map(|f| InFlightNode {
            name: f.node.clone(),
            step: f.step.to_owned(),
            // Kubernetes Time keeps whole seconds; so must the computed status, or it would differ
            // from the published one on every reconcile.
            since: Time(shared::protocol::truncate_to_seconds(f.since)),
            waiting_on: f.waiting_on.clone(),
        })
        .collect();
    in_flight.sort_by(|a, b| a.name.cmp(&b.name));
    NodeVersionStatus {
        observed_generation: generation,
        target_image: Some(target.to_owned()),
        counts: NodeCounts {
            total: c.total as i32,
            up_to_date: c.up_to_date as i32,
            outdated: c.outdated as i32,
            in_progress: c.in_progress as i32,
            failed: c.failed as i32,
            blocked: c.blocked as i32,
        },
        in_flight,
        conditions,
    }
}

fn name_problems(problems: &[Problem], what: &str) -> String {
    let mut sorted: Vec<&Problem> = problems.iter().collect();
    sorted.sort_by(|a, b| a.node.cmp(&b.node));
    let mut parts: Vec<String> = sorted.iter().take(MAX_NAMED).map(|p| format!("{}: {}", p.node, p.message)).collect();
    if sorted.len() > MAX_NAMED {
        parts.push(format!("and {} more", sorted.len() - MAX_NAMED));
    }
    format!("{} node(s) {what}: {}", problems.len(), parts.join("; "))
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

/// The status of a NodeVersion whose spec cannot be acted on, or when several compete.
pub fn invalid(
    message: String,
    generation: Option<i64>,
    previous: Option<&NodeVersionStatus>,
    now: Timestamp,
) -> NodeVersionStatus {
    let mut status = previous.cloned().unwrap_or_default();
    status.observed_generation = generation;
    let updated = condition(PROGRESSING, false, Reason::InvalidSpec, message, generation, previous, now);
    status.conditions.retain(|c| c.type_ != PROGRESSING);
    status.conditions.insert(0, updated);
    status
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Counts, InFlight};

    fn plan() -> Plan {
        Plan {
            counts: Counts { total: 4, up_to_date: 1, outdated: 1, in_progress: 1, failed: 1, blocked: 0 },
            in_flight: vec![InFlight {
                node: "w2".into(),
                step: "drain",
                since: "2026-11-21T10:00:00Z".parse().unwrap(),
                waiting_on: Some("pod ns/web-0 to be deleted".into()),
            }],
            failed: vec![Problem { node: "w3".into(), message: "StageFailed: sha256 mismatch".into() }],
            ..Default::default()
        }
    }

    #[test]
    fn conditions_name_failed_nodes_and_reasons() {
        let now: Timestamp = "2026-11-21T10:05:00Z".parse().unwrap();
        let s = compute(&plan(), "v2", Some(3), None, now);
        let get = |t: &str| s.conditions.iter().find(|c| c.type_ == t).unwrap();
        assert_eq!(get(FAILED).status, "True");
        assert_eq!(get(FAILED).message, "1 node(s) failed: w3: StageFailed: sha256 mismatch");
        assert_eq!(get(PROGRESSING).reason, "RollingOut");
        assert_eq!(get(UP_TO_DATE).reason, "NodesOutdated");
        assert_eq!(get(BLOCKED).status, "False");
        assert_eq!(s.in_flight[0].name, "w2");
        assert_eq!(s.in_flight[0].waiting_on.as_deref(), Some("pod ns/web-0 to be deleted"));
        assert_eq!(s.counts.total, 4);
        assert_eq!(s.observed_generation, Some(3));
    }

    #[test]
    fn an_unchanged_plan_gives_an_identical_status() {
        let t1: Timestamp = "2026-11-21T10:05:00Z".parse().unwrap();
        let t2: Timestamp = "2026-11-21T11:00:00Z".parse().unwrap();
        let first = compute(&plan(), "v2", Some(3), None, t1);
        let second = compute(&plan(), "v2", Some(3), Some(&first), t2);
        assert_eq!(first, second);
    }

    #[test]
    fn a_hold_keeps_progressing_true_only_while_nodes_are_in_flight() {
        let mut p = plan();
        p.hold = Some((Reason::Paused, "paused".into()));
        let s = compute(&p, "v2", None, None, Timestamp::UNIX_EPOCH);
        let progressing = s.conditions.iter().find(|c| c.type_ == PROGRESSING).unwrap();
        assert_eq!((progressing.status.as_str(), progressing.reason.as_str()), ("True", "Paused"));
        p.in_flight.clear();
        p.counts.in_progress = 0;
        let s = compute(&p, "v2", None, None, Timestamp::UNIX_EPOCH);
        assert_eq!(s.conditions.iter().find(|c| c.type_ == PROGRESSING).unwrap().status, "False");
    }
}
