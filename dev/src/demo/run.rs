//! Running a rollout for the demo: when it is over, and how it ended.

use shared::crd::NodeVersionStatus;

/// How a rollout ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ending {
    /// Every node runs the target.
    Complete,
    /// No node is in flight and the rest cannot proceed: the reason and message.
    Stopped(String),
}

/// Whether the rollout to `target` is over, judged from the NodeVersion status: complete, or
/// stopped (nothing in flight but nodes staged ahead, and either a hold that needs a human or only failed and
/// blocked nodes left).
pub fn ending(status: &NodeVersionStatus, target: &str) -> Option<Ending> {
    // A node staged ahead of its turn (in the stage step, waiting on its turn or its own hold) does not move.
    let moving = status.in_flight.iter().any(|f| !(f.step == "stage" && f.waiting_on.is_some()));
    if status.target_image.as_deref() != Some(target)
        || moving
        || status.counts.total == 0
        || status.active_cluster_version_upgrade
    {
        return None;
    }
    // Replaced nodes' instances are still being deleted (or new ones join): not over yet.
    if !status.pending.is_empty() || !status.obsolete.is_empty() {
        return None;
    }
    let c = status.counts;
    if c.up_to_date == c.total {
        return Some(Ending::Complete);
    }
    let condition = |t: &str| status.conditions.iter().find(|c| c.type_ == t);
    let problems: Vec<String> = ["Failed", "Blocked"]
        .iter()
        .filter_map(|t| condition(t).filter(|c| c.status == "True").map(|c| c.message.clone()))
        .collect();
    let held = condition("Progressing").filter(|c| {
        matches!(
            c.reason.as_str(),
            "FailureBudgetExhausted"
                | "StoppedOnDrainTimeout"
                | "UnavailableNodes"
                | "InvalidSpec"
                | "Paused"
                | "KubernetesUpgradeRefused"
        )
    });
    match (held, c.outdated) {
        (Some(h), _) => {
            let mut why = format!("{}: {}", h.reason, h.message);
            for p in problems {
                why.push_str(&format!("; {p}"));
            }
            Some(Ending::Stopped(why))
        }
        (None, 0) => Some(Ending::Stopped(format!(
            "{} of {} nodes run {target}; {}",
            c.up_to_date,
            c.total,
            problems.join("; ")
        ))),
        (None, _) => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};
    use shared::crd::{InFlightNode, NodeCounts};

    fn status(counts: NodeCounts, in_flight: bool, conditions: &[(&str, &str, &str, &str)]) -> NodeVersionStatus {
        NodeVersionStatus {
            target_image: Some("v2".into()),
            counts,
            in_flight: if in_flight {
                vec![InFlightNode {
                    name: "a".into(),
                    step: "stage".into(),
                    since: MicroTime(jiff::Timestamp::UNIX_EPOCH),
                    waiting_on: None,
                }]
            } else {
                vec![]
            },
            conditions: conditions
                .iter()
                .map(|(t, s, r, m)| Condition {
                    type_: t.to_string(),
                    status: s.to_string(),
                    reason: r.to_string(),
                    message: m.to_string(),
                    last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
                    observed_generation: None,
                })
                .collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_rollout_ends_complete_stopped_or_not_yet() {
        let all = NodeCounts { total: 3, up_to_date: 3, ..Default::default() };
        assert_eq!(ending(&status(all, false, &[]), "v2"), Some(Ending::Complete));
        assert_eq!(ending(&status(all, false, &[]), "v3"), None, "a status about another target says nothing");
        let some = NodeCounts { total: 3, up_to_date: 1, outdated: 1, in_progress: 1, ..Default::default() };
        assert_eq!(ending(&status(some, true, &[]), "v2"), None);
        let failed = NodeCounts { total: 3, up_to_date: 1, outdated: 1, failed: 1, ..Default::default() };
        let s = status(
            failed,
            false,
            &[
                ("Progressing", "False", "FailureBudgetExhausted", "1 failed"),
                ("Failed", "True", "NodesFailed", "w-1: StageFailed: x"),
            ],
        );
        assert_eq!(
            ending(&s, "v2"),
            Some(Ending::Stopped("FailureBudgetExhausted: 1 failed; w-1: StageFailed: x".into()))
        );
        let blocked = NodeCounts { total: 3, up_to_date: 2, blocked: 1, ..Default::default() };
        let s = status(blocked, false, &[("Blocked", "True", "NodesBlocked", "1 node(s) blocked: w-2")]);
        assert_eq!(ending(&s, "v2"), Some(Ending::Stopped("2 of 3 nodes run v2; 1 node(s) blocked: w-2".into())));
    }
}
