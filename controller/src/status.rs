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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, MicroTime, Time};
use shared::crd::{HeldBackNode, InFlightNode, NodeCounts, NodeKubelet, NodeVersionStatus};
use std::collections::BTreeSet;

/// How many nodes a condition message names before it says "and N more".
const MAX_NAMED: usize = 5;
/// How many held-back nodes `status.heldBack` lists (the condition and the counts tell the rest).
pub const MAX_HELD_LISTED: usize = 50;
/// How many nodes `status.kubelets` lists (the first by name: the plan keeps no more).
pub const MAX_KUBELETS_LISTED: usize = crate::policy::kubernetes::LISTED;

pub const PROGRESSING: &str = "Progressing";
pub const UP_TO_DATE: &str = "UpToDate";
pub const BLOCKED: &str = "Blocked";
pub const FAILED: &str = "Failed";
pub const SELECTOR_OVERLAP: &str = "SelectorOverlap";
/// What the preflight found when the rollout of the current generation started (issue 18).
pub const PREFLIGHT: &str = "Preflight";

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
    let kubernetes_target = rollout.spec.acting().and(rollout_version(rollout));
    let kubernetes_active = plan.kubernetes.as_ref().is_some_and(|k| k.active);
    let target = match (&kubernetes_target, kubernetes_active) {
        (Some(version), true) => Some(version.as_str()),
        _ => acting.map(|s| s.target.as_str()),
    };
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
    let progressing = progressing(plan, target);
    let complete = progressing.1 == Reason::Complete;
    let conditions = [
        (PROGRESSING, progressing),
        (UP_TO_DATE, up_to_date),
        (FAILED, failed),
        (BLOCKED, blocked),
        (SELECTOR_OVERLAP, overlap(plan)),
    ]
    .into_iter()
    .map(|(type_, (status, reason, message))| condition(type_, status, reason, message, generation, previous, now))
    // The preflight's condition is written by the preflight (see `forecast::preflight`) and kept, until the
    // rollout is complete: what it found before the rollout started no longer holds anything back.
    .chain(previous.and_then(|p| p.conditions.iter().find(|c| c.type_ == PREFLIGHT)).map(|c| match complete {
        true => crate::forecast::preflight::settled(c, generation, now),
        false => c.clone(),
    }))
    .collect();
    let mut in_flight: Vec<InFlightNode> = plan
        .in_flight
        .iter()
        .map(|f| InFlightNode {
            name: f.node.clone(),
            step: f.step.to_string(),
            // Kept to the millisecond, as the intent's annotation has it (MicroTime serializes
            // microseconds, so the published status equals the computed one).
            since: MicroTime(shared::protocol::truncate_to_millis(f.since)),
            waiting_on: f.waiting_on.clone(),
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
            donors: plan.replacements.donors.len() as i32,
            heirs: plan.replacements.heirs.len() as i32,
            pending: plan.replacements.pending.len() as i32,
            obsolete: plan.replacements.obsolete.len() as i32,
        },
        in_flight,
        held_back,
        donors: plan.replacements.donors.clone(),
        heirs: plan.replacements.heirs.clone(),
        pending: plan.replacements.pending.clone(),
        obsolete: plan.replacements.obsolete.clone(),
        replacing: crate::forecast::durations::replacing(previous, plan, now),
        conditions,
        active_cluster_version_upgrade: kubernetes_active,
        kubelets: plan
            .kubernetes
            .iter()
            .flat_map(|k| k.nodes.iter())
            .take(MAX_KUBELETS_LISTED)
            .map(|(name, kubelet_version, components_hash)| NodeKubelet {
                name: name.clone(),
                kubelet_version: kubelet_version.clone(),
                components_hash: components_hash.clone(),
            })
            .collect(),
        last_valid_spec: acting.map(|spec| spec.record()),
        health_checks: rollout
            .health
            .iter()
            .map(|v| shared::crd::HealthCheckStatus {
                name: v.check.clone(),
                passing: v.passing,
                since: MicroTime(v.since),
                message: crate::policy::health::shortened(&v.observed),
            })
            .collect(),
        wave: plan.waves.as_ref().and_then(|w| w.wave).map(|w| i32::try_from(w).unwrap_or(i32::MAX)),
        waves: crate::policy::waves::Completed::from_status(previous.map(|p| p.waves.as_slice()).unwrap_or_default())
            .record(plan.waves.as_ref(), now)
            .to_status(),
        // The image every selected node runs (the target once complete, or a fleet not moved yet) is what a
        // rollback goes back to; kept otherwise (`policy::rollback`).
        last_complete_image: crate::policy::rollback::last_complete(
            previous,
            acting
                .filter(|_| !kubernetes_active && c.total > 0 && c.up_to_date == c.total)
                .map(|s| s.target.as_str())
                .or(plan.uniform_image.as_deref()),
        ),
        rollback: plan.rollback_started.as_ref().or(rollout.rollback.as_ref()).map(|r| r.to_status()),
        // What each step took, for `update-operator plan` (issue 18).
        step_durations: crate::forecast::durations::measure(
            previous,
            plan,
            previous.is_some_and(|p| p.target_image.as_deref() == target),
            now,
        ),
    }
}

/// The Kubernetes version `rollout` upgrades to (`Kubernetes v1.34.1`), for messages while it does.
fn rollout_version(rollout: &Rollout) -> Option<String> {
    match rollout.kubernetes.as_ref()? {
        crate::policy::kubernetes::KubernetesSpec::Upgrade(target) => Some(format!("Kubernetes {}", target.version)),
        crate::policy::kubernetes::KubernetesSpec::Refused(_) => None,
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
    let releasing = &plan.replacements.obsolete;
    if c.up_to_date == c.total && !releasing.is_empty() {
        // Every node runs the target, but replaced nodes' old instances are still to be deleted: not complete yet.
        let named = name_some(releasing.clone(), ", ");
        let message = format!(
            "every node is up to date; releasing the old instance of {} replaced node(s): {named}",
            releasing.len()
        );
        return (true, Reason::RollingOut, message);
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{Counts, Held, InFlight, Policy, SpecState, ValidSpec};
    use shared::protocol::Step;
    use std::sync::Arc;

    fn rollout() -> Rollout {
        let spec = ValidSpec {
            generation: 3,
            target: "v2".into(),
            policy: Policy::default(),
            raw: serde_json::json!({"image": "v2"}),
        };
        Rollout::new("nv", SpecState::Valid(Arc::new(spec)), None)
    }

    fn now() -> Timestamp {
        "2026-11-21T10:05:00Z".parse().unwrap()
    }

    fn plan(counts: Counts) -> Plan {
        Plan { counts, ..Default::default() }
    }

    fn get<'a>(s: &'a NodeVersionStatus, type_: &str) -> &'a Condition {
        s.conditions.iter().find(|c| c.type_ == type_).unwrap()
    }

    fn progressing(p: &Plan) -> (String, String, String) {
        let s = compute(p, &rollout(), Some(3), None, now());
        let c = get(&s, PROGRESSING);
        (c.status.clone(), c.reason.clone(), c.message.clone())
    }

    /// Progressing's status and reason.
    fn state(p: &Plan) -> (String, String) {
        let (status, reason, _) = progressing(p);
        (status, reason)
    }

    fn rolling() -> Plan {
        Plan {
            counts: Counts { total: 4, up_to_date: 1, outdated: 1, in_progress: 1, failed: 1, ..Default::default() },
            in_flight: vec![InFlight {
                node: "w2".into(),
                step: Step::Drain,
                since: "2026-11-21T10:00:00.300Z".parse().unwrap(),
                waiting_on: Some("pod ns/web-0 to be deleted".into()),
            }],
            failed: vec![Problem { node: "w3".into(), message: "StageFailed: sha256 mismatch".into() }],
            ..Default::default()
        }
    }

    /// Blockers the preflight found before the rollout started are kept in the `Preflight` condition while it
    /// runs, and no longer said to hold it back once it is complete (they were, for group nodes, after the fact).
    #[test]
    fn the_preflight_condition_stops_naming_blockers_once_the_rollout_is_complete() {
        let blockers = crate::forecast::preflight::condition(&[], Some(3), now());
        let found = Condition {
            status: "True".into(),
            reason: "BlockersFound".into(),
            message: "1 blocker(s): x".into(),
            ..blockers
        };
        let mut previous = compute(&rolling(), &rollout(), Some(3), None, now());
        crate::forecast::preflight::set_condition(&mut previous, found);
        let s = compute(&rolling(), &rollout(), Some(3), Some(&previous), now());
        assert_eq!(get(&s, PREFLIGHT).reason, "BlockersFound", "kept while the rollout runs");
        let done = plan(Counts { total: 4, up_to_date: 4, ..Default::default() });
        let s = compute(&done, &rollout(), Some(3), Some(&previous), now());
        let preflight = get(&s, PREFLIGHT);
        assert_eq!((preflight.status.as_str(), preflight.reason.as_str()), ("False", "RolloutComplete"));
        assert!(preflight.message.contains("1 blocker(s): x"), "{}", preflight.message);
        // Stable from then on.
        assert_eq!(compute(&done, &rollout(), Some(3), Some(&s), now()), s);
    }

    #[test]
    fn conditions_name_failed_nodes_and_reasons() {
        let s = compute(&rolling(), &rollout(), Some(3), None, now());
        assert_eq!(get(&s, FAILED).status, "True");
        assert_eq!(get(&s, FAILED).message, "1 node(s) failed: w3: StageFailed: sha256 mismatch");
        assert_eq!(get(&s, PROGRESSING).reason, "RollingOut");
        assert_eq!(get(&s, UP_TO_DATE).reason, "NodesOutdated");
        assert_eq!(get(&s, BLOCKED).status, "False");
        assert_eq!(get(&s, SELECTOR_OVERLAP).reason, "NoOverlap");
        assert_eq!((s.in_flight[0].name.as_str(), s.in_flight[0].step.as_str()), ("w2", "drain"));
        assert_eq!(s.in_flight[0].waiting_on.as_deref(), Some("pod ns/web-0 to be deleted"));
        assert_eq!(s.counts.total, 4);
        assert_eq!(s.observed_generation, Some(3));
        assert_eq!(s.target_image.as_deref(), Some("v2"));
        assert_eq!(s.last_valid_spec.map(|l| l.generation), Some(3));
    }

    #[test]
    fn an_unchanged_plan_gives_an_identical_status() {
        let first = compute(&rolling(), &rollout(), Some(3), None, now());
        let later: Timestamp = "2026-11-21T11:00:00Z".parse().unwrap();
        assert_eq!(first, compute(&rolling(), &rollout(), Some(3), Some(&first), later));
        // As published and read back, to the millisecond (step durations are measured from it).
        let published: NodeVersionStatus = serde_json::from_value(serde_json::to_value(&first).unwrap()).unwrap();
        assert_eq!(published, first);
        assert_eq!(published.in_flight[0].since.0, "2026-11-21T10:00:00.300Z".parse::<Timestamp>().unwrap());
    }

    #[test]
    fn progressing_is_never_complete_while_a_node_is_failed_blocked_or_outdated() {
        let settled = |up_to_date, outdated, failed, blocked| {
            plan(Counts {
                total: up_to_date + outdated + failed + blocked,
                up_to_date,
                outdated,
                failed,
                blocked,
                ..Default::default()
            })
        };
        assert_eq!(progressing(&settled(4, 0, 0, 0)).1, "Complete");
        assert_eq!(state(&settled(3, 0, 1, 0)), ("False".into(), "NodesFailed".into()));
        assert_eq!(state(&settled(3, 0, 0, 1)), ("False".into(), "NodesBlocked".into()));
        let (status, reason, message) = progressing(&settled(3, 1, 0, 0));
        assert_eq!((status.as_str(), reason.as_str()), ("False", "NodesHeldBack"), "{message}");
        assert_eq!(progressing(&settled(0, 0, 0, 0)).2, "the node selector selects no node");
        // Every node up to date, but a replaced node's old instance still to be released: still moving.
        let mut releasing = settled(4, 0, 0, 0);
        releasing.replacements.obsolete = vec!["w9".into()];
        let (status, reason, message) = progressing(&releasing);
        assert_eq!((status.as_str(), reason.as_str()), ("True", "RollingOut"), "{message}");
        assert!(message.contains("releasing the old instance of 1 replaced node(s): w9"), "{message}");
    }

    #[test]
    fn progressing_turns_false_with_the_reason_nothing_can_move() {
        // Every outdated node held back for the same reason: that reason, naming them.
        let mut p = plan(Counts { total: 3, up_to_date: 1, outdated: 2, held_back: 2, ..Default::default() });
        p.held = ["w1", "w2"]
            .map(|n| Held { node: n.into(), hold: Hold::new(Reason::NoAgentReport, "its agent never reported") })
            .to_vec();
        let (status, reason, message) = progressing(&p);
        assert_eq!((status.as_str(), reason.as_str()), ("False", "NoAgentReport"));
        assert!(
            message.starts_with("2 node(s) held back: w1 (NoAgentReport: its agent never reported); w2"),
            "{message}"
        );
        // Different reasons: NodesHeldBack.
        p.held[1].hold = Hold::new(Reason::NodeNotReady, "the node is NotReady");
        assert_eq!(progressing(&p).1, "NodesHeldBack");
        // A gate wins over the nodes' own reasons, and says it while nodes in flight finish.
        p.hold = Some(Hold::new(Reason::Paused, "spec.rollout.paused is true"));
        assert_eq!(state(&p), ("False".into(), "Paused".into()));
        p.counts.in_progress = 1;
        assert_eq!(state(&p), ("True".into(), "Paused".into()));
    }

    #[test]
    fn held_back_nodes_are_listed_up_to_a_limit_and_overlaps_named() {
        let mut p = plan(Counts { total: 60, outdated: 60, held_back: 60, ..Default::default() });
        p.held = (0..60)
            .map(|i| Held { node: format!("w{i:02}"), hold: Hold::new(Reason::SelectorOverlap, "older") })
            .collect();
        p.overlap = (0..60).map(|i| (format!("w{i:02}"), "pool-a".to_string())).collect();
        let s = compute(&p, &rollout(), Some(3), None, now());
        assert_eq!(s.held_back.len(), MAX_HELD_LISTED);
        assert_eq!(s.counts.held_back, 60);
        let overlap = get(&s, SELECTOR_OVERLAP);
        assert_eq!((overlap.status.as_str(), overlap.reason.as_str()), ("True", "SelectorOverlap"));
        assert!(
            overlap.message.contains("older NodeVersion(s) pool-a") && overlap.message.ends_with("and 55 more"),
            "{}",
            overlap.message
        );
    }

    #[test]
    fn without_a_valid_spec_the_status_says_so_and_keeps_no_record() {
        let invalid =
            Rollout::new("nv", SpecState::Invalid { errors: vec!["spec.image: bad".into()], last_valid: None }, None);
        let p = Plan { hold: Some(Hold::new(Reason::InvalidSpec, "spec.image: bad")), ..Default::default() };
        let s = compute(&p, &invalid, Some(4), None, now());
        assert_eq!(get(&s, PROGRESSING).reason, "InvalidSpec");
        assert_eq!(get(&s, UP_TO_DATE).reason, "InvalidSpec");
        assert_eq!((s.target_image, s.last_valid_spec), (None, None));
    }
}
