//! The image flow of a rollout: each member's own progress (in place, or by replacement for a node of a known
//! scaling group), summarized for the status, then the [`pipeline`](super::pipeline)'s gates and selection.

use super::assess::{self, Assessment, Situation};
use super::{
    DrainProgress, Held, Hold, InFlight, NodeView, Plan, Problem, Reason, Rollout, ValidSpec, pipeline, replacement,
};
use jiff::Timestamp;
use shared::protocol::Step;

/// The image flow of one rollout: its members' own progress, then the [`pipeline`]'s gates and selection.
pub(super) fn plan_image_rollout(
    rollout: &Rollout,
    members: &[(&NodeView, &Assessment)],
    overlap: &[(&NodeView, &str)],
    shared: &mut pipeline::Shared,
    records: &replacement::Records<'_>,
    own_node: Option<&str>,
    now: Timestamp,
) -> Plan {
    let mut plan = Plan::default();
    for (_, a) in members {
        plan.actions.extend(a.action.clone());
        plan.wake(a.wake_at);
    }
    summarize(&mut plan, members);
    plan.replacements = records.listing(members);
    let waiting = pipeline::waiting(members);
    let Some(spec) = open_image_gates(rollout, &mut plan, overlap, waiting, now) else { return plan };
    let replaced = members.iter().filter(|(_, a)| a.replace).count() as u32;
    let allowed = spec.policy.max_surge.resolve(replaced);
    let mut surge = pipeline::Surge {
        free: allowed.saturating_sub(records.surge_used(members)),
        allowed,
        control_plane_active: records.control_plane_active(),
        worker_active: records.worker_active(),
        moving: records.moving(),
    };
    // A rollback goes in the reverse order, control plane last (`super::rollback`).
    let rollback = rollout.rollback.as_ref().map(|r| r.to.as_str());
    let pool = pipeline::Members { rollback, ..pipeline::Members::image(members, own_node) };
    let flow = pipeline::Flow::Image { target: spec.target.clone() };
    let bounds = pipeline::Bounds::of(rollout, spec, &plan, now);
    let selected = pipeline::select(&pool, spec, &flow, (shared, &mut surge), &bounds);
    pipeline::start(&mut plan, &flow, selected, now);
    plan
}

/// The image flow's gates: the nodes an older NodeVersion manages (`overlap`) are counted and held, then the
/// [`pipeline`]'s gates are checked. Returns the spec to select under when every gate is open and a node is
/// outdated.
pub(super) fn open_image_gates<'r>(
    rollout: &'r Rollout,
    plan: &mut Plan,
    overlap: &[(&NodeView, &str)],
    waiting: (usize, u32),
    now: Timestamp,
) -> Option<&'r ValidSpec> {
    if let Some(spec) = rollout.spec.acting() {
        for (node, older) in overlap {
            plan.counts.total += 1;
            if assess::image(node.agent.as_ref().ok()) == Some(spec.target.as_str()) {
                plan.counts.up_to_date += 1;
            } else {
                plan.counts.outdated += 1;
                plan.counts.held_back += 1;
                let message = format!("also selected by the older NodeVersion {older}, which manages it");
                plan.held.push(Held { node: node.name.clone(), hold: Hold::new(Reason::SelectorOverlap, message) });
            }
            plan.overlap.push((node.name.clone(), (*older).to_owned()));
        }
        plan.held.sort_by(|a, b| a.node.cmp(&b.node));
    }
    pipeline::open(rollout, plan, None, waiting, None, now)
}

/// Counts each member in its situation, and lists those in flight, failed, blocked and held.
pub(super) fn summarize(plan: &mut Plan, members: &[(&NodeView, &Assessment)]) {
    for (node, a) in members {
        let name = node.name.clone();
        match &a.situation {
            Situation::UpToDate => plan.counts.up_to_date += 1,
            Situation::Outdated { held, eligible } => {
                plan.counts.outdated += 1;
                plan.preparing |= !eligible && held.is_none() && a.action.as_ref().is_some_and(|x| x.kind.writes());
                if let Some(hold) = held {
                    plan.counts.held_back += 1;
                    plan.held.push(Held { node: name, hold: hold.clone() });
                }
            }
            Situation::Staging { since, staged, held, .. } => {
                // In the stage step (or a Kubernetes upgrade's fetch): in progress, not disrupted; a staged node says
                // what its turn waits for.
                plan.counts.in_progress += 1;
                plan.staged += u32::from(*staged);
                let intent = node.controller.as_ref().ok().and_then(|c| c.intent.as_ref());
                let step = if intent.is_some_and(|i| i.step == Step::Fetch) { Step::Fetch } else { Step::Stage };
                let waiting_on = match held {
                    Some(hold) => Some(format!("{}: {}", hold.reason, hold.message)),
                    None if *staged => Some(format!(
                        "its turn: {}, it is drained when a slot of maxUnavailable is free",
                        if step == Step::Fetch { "fetched" } else { "staged" }
                    )),
                    None => None,
                };
                plan.in_flight.push(InFlight { node: name, step, since: *since, waiting_on });
            }
            Situation::InFlight { step, since } => {
                plan.counts.in_progress += 1;
                let waiting_on = match &node.drain {
                    DrainProgress::Running { waiting_on } if matches!(*step, Step::Drain | Step::Replace) => {
                        waiting_on.clone()
                    }
                    _ => None,
                };
                let waiting_on = waiting_on.or_else(|| a.waiting.clone());
                plan.in_flight.push(InFlight { node: name, step: *step, since: *since, waiting_on });
            }
            Situation::Failed { message } => {
                plan.counts.failed += 1;
                plan.failed.push(Problem { node: name, message: message.clone() });
            }
            Situation::Blocked { message, .. } => {
                plan.counts.blocked += 1;
                plan.blocked.push(Problem { node: name, message: message.clone() });
            }
        }
    }
    plan.counts.total = members.len() as u32;
}
