//! A NodeOp's status after a decision: its nodes' statuses, its phase and its conditions.

use super::decide::Decision;
use crate::reason::Reason;
use jiff::Timestamp;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use shared::crd::nodeop::{NodeOpNodeStatus, NodeOpStatus};

/// The NodeOp status after `decision`: node statuses (with `lastUpdated` moved only when they changed), phase,
/// conditions (`Progressing`, `Complete`, `Failed`, `Held`; their transition times kept while their status stays).
pub fn next_status(
    current: &NodeOpStatus,
    decision: &Decision,
    generation: Option<i64>,
    now: Timestamp,
) -> NodeOpStatus {
    let mut next = current.clone();
    let mut changed = false;
    for node in &decision.nodes {
        let previous = current.node_statuses.get(&node.node);
        let mut status =
            NodeOpNodeStatus { last_updated: previous.and_then(|p| p.last_updated.clone()), ..node.status.clone() };
        if previous.is_none_or(|p| {
            NodeOpNodeStatus { last_updated: None, ..p.clone() }
                != NodeOpNodeStatus { last_updated: None, ..status.clone() }
        }) {
            status.last_updated = Some(Time(now));
            changed = true;
        }
        next.node_statuses.insert(node.node.clone(), status);
    }
    next.phase = decision.phase;
    next.observed_generation = generation;
    let (total, done, failed, running) = (decision.total, decision.completed, decision.failed, decision.running);
    let summary = format!("{done} of {total} nodes completed, {failed} failed, {running} in progress");
    let hold = decision.hold.as_ref();
    let conditions = [
        ("Progressing", running > 0, if running > 0 { Reason::Running } else { Reason::Idle }, summary.clone()),
        ("Complete", decision.phase.finished() && failed == 0, Reason::Completed, summary.clone()),
        ("Failed", failed > 0, if failed > 0 { Reason::NodesFailed } else { Reason::NoFailures }, summary),
        (
            "Held",
            hold.is_some(),
            hold.map_or(Reason::NotHeld, |(reason, _)| *reason),
            hold.map(|(_, message)| message.clone()).unwrap_or_default(),
        ),
    ];
    next.conditions = conditions
        .into_iter()
        .map(|(type_, holds, reason, message)| {
            let status = if holds { "True" } else { "False" };
            let previous = current.conditions.iter().find(|c| c.type_ == type_);
            let since = previous.filter(|c| c.status == status).map_or(Time(now), |c| c.last_transition_time.clone());
            Condition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                reason: reason.to_string(),
                message,
                observed_generation: generation,
                last_transition_time: since,
            }
        })
        .collect();
    changed |= next.conditions != current.conditions || next.phase != current.phase;
    if changed {
        next.last_updated = Some(Time(now));
    }
    next
}
